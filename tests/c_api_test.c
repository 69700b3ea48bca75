/* Compiled as C99 with -Wall -Wextra -Werror -pedantic: the public header is plain C, and a C
 * program can create a context, merge two partial results and read errors. Exits non-zero on
 * any failure. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "streamattn/streamattn.h"

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(void) {
  sattn_context_options options;
  sattn_context* ctx = NULL;
  sattn_context_info info;
  /* Two halves of one row of keys, summarised as (o, lse): batch 1, seq 1, heads 1, dim 2. */
  float o_a[2] = {1.0f, 2.0f}, o_b[2] = {3.0f, -1.0f}, out[2] = {0.0f, 0.0f};
  float lse_a = 0.5f, lse_b = 1.5f, lse_out = 0.0f;
  const int64_t o_shape[4] = {1, 1, 1, 2}, lse_shape[3] = {1, 1, 1};
  sattn_tensor o_parts[2], lse_parts[2], out_view, lse_view;
  float x[5] = {0.0f, 1.0f, -1.0f, 10.0f, -200.0f}, y[5];
  double w_a, w_b;

  printf("streamattn %s (header %d.%d.%d)\n", sattn_version(), SATTN_VERSION_MAJOR,
         SATTN_VERSION_MINOR, SATTN_VERSION_PATCH);

  memset(&options, 0, sizeof(options));
  options.struct_size = sizeof(options);
  options.num_threads = 2;
  CHECK(sattn_context_create(&options, &ctx) == SATTN_OK);
  if (ctx == NULL) return 1;

  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  CHECK(sattn_context_get_info(ctx, &info) == SATTN_OK);
  CHECK(info.backend == SATTN_BACKEND_CPU);
  printf("backend cpu, %d threads, SIMD %s (compiled: %s)\n", info.num_threads, info.simd_target,
         info.compiled_targets);
  /* `streamattn info`'s line: scripts/test-arm.sh reads it where the tool is not built. */
  printf("cpu prefill tile kernel: f32 %s, f16 %s, bf16 %s\n", info.f32_kernel, info.f16_kernel,
         info.bf16_kernel);

  o_parts[0] = sattn_tensor_contiguous(o_a, SATTN_DTYPE_F32, 4, o_shape);
  o_parts[1] = sattn_tensor_contiguous(o_b, SATTN_DTYPE_F32, 4, o_shape);
  lse_parts[0] = sattn_tensor_contiguous(&lse_a, SATTN_DTYPE_F32, 3, lse_shape);
  lse_parts[1] = sattn_tensor_contiguous(&lse_b, SATTN_DTYPE_F32, 3, lse_shape);
  out_view = sattn_tensor_contiguous(out, SATTN_DTYPE_F32, 4, o_shape);
  lse_view = sattn_tensor_contiguous(&lse_out, SATTN_DTYPE_F32, 3, lse_shape);
  CHECK(sattn_merge_states(ctx, 2, o_parts, lse_parts, &out_view, &lse_view) == SATTN_OK);
  w_a = exp(0.5) / (exp(0.5) + exp(1.5));
  w_b = 1.0 - w_a;
  CHECK(fabs(lse_out - log(exp(0.5) + exp(1.5))) < 1e-6);
  CHECK(fabs(out[0] - (w_a * 1.0 + w_b * 3.0)) < 1e-6);
  CHECK(fabs(out[1] - (w_a * 2.0 - w_b * 1.0)) < 1e-6);

  CHECK(sattn_exp2(ctx, x, y, 5) == SATTN_OK);
  CHECK(y[0] == 1.0f && y[1] == 2.0f && y[2] == 0.5f && y[3] == 1024.0f && y[4] == 0.0f);

  /* A malformed call: a status, a message naming the argument, nothing written. */
  out_view.shape[3] = 3;
  out[0] = 42.0f;
  CHECK(sattn_merge_states(ctx, 2, o_parts, lse_parts, &out_view, NULL) ==
        SATTN_ERR_INVALID_ARGUMENT);
  CHECK(strstr(sattn_last_error(), "out.shape[3]") != NULL);
  CHECK(out[0] == 42.0f);
  printf("expected error: %s: %s\n", sattn_status_string(SATTN_ERR_INVALID_ARGUMENT),
         sattn_last_error());

  CHECK(sattn_context_destroy(ctx) == SATTN_OK);
  if (failures == 0) printf("c_api_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
