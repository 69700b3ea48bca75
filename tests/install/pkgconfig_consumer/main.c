/* The README's C example, built as C99 with only `pkg-config --cflags --libs streamattn` by
 * tests/install/run_consumers.sh: one decoding step of grouped-query attention against a KV
 * cache, and a malformed call's status and message. Exits non-zero if a result is off. */
#include <stdio.h>
#include <streamattn/streamattn.h>

enum { kCache = 1000, kHeadsQ = 8, kHeadsKv = 2, kDim = 64 };
static float q[kHeadsQ * kDim], k[kCache * kHeadsKv * kDim], v[kCache * kHeadsKv * kDim];
static float out[kHeadsQ * kDim];

int main(void) {
  const int64_t q_shape[4] = {1, 1, kHeadsQ, kDim}, kv_shape[4] = {1, kCache, kHeadsKv, kDim};
  sattn_context* ctx = NULL;
  sattn_attention_options opts = {.struct_size = sizeof(opts)}; /* zeros: defaults */
  sattn_tensor qt, kt, vt, ot;
  sattn_status s;
  int i;
  for (i = 0; i < kCache * kHeadsKv * kDim; ++i) v[i] = (float)(i / (kHeadsKv * kDim) % 2);
  if (sattn_context_create(NULL, &ctx) != SATTN_OK) return 1; /* NULL: default options */

  qt = sattn_tensor_contiguous(q, SATTN_DTYPE_F32, 4, q_shape);
  kt = sattn_tensor_contiguous(k, SATTN_DTYPE_F32, 4, kv_shape);
  vt = sattn_tensor_contiguous(v, SATTN_DTYPE_F32, 4, kv_shape);
  ot = sattn_tensor_contiguous(out, SATTN_DTYPE_F32, 4, q_shape);
  opts.causal = 1;
  s = sattn_attention(ctx, &qt, &kt, &vt, &ot, NULL, &opts);
  /* All scores equal, values alternate 0 and 1 over the keys: every output is 0.5. */
  printf("streamattn %s: %s, out[0] = %g\n", sattn_version(), sattn_status_string(s), out[0]);
  if (s != SATTN_OK || out[0] < 0.49999f || out[0] > 0.50001f) return 1;

  kt.shape[3] = 32; /* a malformed call: a status, a message naming the argument */
  s = sattn_attention(ctx, &qt, &kt, &vt, &ot, NULL, &opts);
  printf("expected error: %s: %s\n", sattn_status_string(s), sattn_last_error());
  sattn_context_destroy(ctx);
  return s == SATTN_ERR_INVALID_ARGUMENT ? 0 : 1;
}
