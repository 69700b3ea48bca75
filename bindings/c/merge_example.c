/* A complete C program using streamattn: two partial attention results over disjoint halves of
 * the keys, merged into the result over all keys. Build against an installed library with
 *   cc -std=c99 merge_example.c -lstreamattn -lm
 */
#include <stdio.h>

#include "streamattn/streamattn.h"

int main(void) {
  /* batch 1, seq 1, heads 1, head_dim 4: one query's (o, lse) over each half of the keys. */
  float o_halves[2][4] = {{0.1f, 0.2f, 0.3f, 0.4f}, {1.0f, 0.0f, -1.0f, 0.5f}};
  float lse_halves[2] = {2.0f, 2.5f};
  const int64_t o_shape[4] = {1, 1, 1, 4}, lse_shape[3] = {1, 1, 1};
  sattn_tensor o_parts[2], lse_parts[2];
  sattn_context* ctx = NULL;
  sattn_status status;
  int i;

  for (i = 0; i < 2; ++i) {
    o_parts[i] = sattn_tensor_contiguous(o_halves[i], SATTN_DTYPE_F32, 4, o_shape);
    lse_parts[i] = sattn_tensor_contiguous(&lse_halves[i], SATTN_DTYPE_F32, 3, lse_shape);
  }
  if (sattn_context_create(NULL, &ctx) != SATTN_OK) {
    fprintf(stderr, "context: %s\n", sattn_last_error());
    return 1;
  }
  /* In place: the merged result replaces the first half's. */
  status = sattn_merge_states(ctx, 2, o_parts, lse_parts, &o_parts[0], &lse_parts[0]);
  if (status != SATTN_OK) {
    fprintf(stderr, "merge: %s: %s\n", sattn_status_string(status), sattn_last_error());
    sattn_context_destroy(ctx);
    return 1;
  }
  printf("o = [%g %g %g %g], lse = %g\n", o_halves[0][0], o_halves[0][1], o_halves[0][2],
         o_halves[0][3], lse_halves[0]);
  sattn_context_destroy(ctx);
  return 0;
}
