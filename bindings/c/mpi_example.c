/* A complete C program using streamattn_mpi: the keys of one sequence are split over the ranks,
 * each rank attends over its own part, and every rank receives attention over all the keys.
 * Rank 0 checks the result against sattn_attention over all the keys on one process.
 *   mpicc -std=c99 mpi_example.c -lstreamattn_mpi -lstreamattn -lm
 *   mpirun -np 3 ./a.out
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "streamattn/streamattn_mpi.h"

#define KEYS 10 /* of the whole sequence */
#define SEQ 4   /* queries, the last KEYS - SEQ + 1 .. KEYS keys visible causally */
#define DIM 8

/* Key j, value j and query i, the same numbers on every rank. */
static float Key(int j, int d) { return sinf(0.7f * (float)(j * DIM + d)); }
static float Value(int j, int d) { return cosf(0.3f * (float)(j + d)); }
static float Query(int i, int d) { return 0.5f * sinf(1.3f * (float)(i + 2 * d)); }

int main(int argc, char** argv) {
  static float q[SEQ * DIM], k[KEYS * DIM], v[KEYS * DIM], out[SEQ * DIM], want[SEQ * DIM];
  float lse[SEQ];
  int rank, size, first, count, i, failed = 0;
  sattn_context* ctx = NULL;
  sattn_attention_options options;
  sattn_tensor qv, kv, vv, ov, lv, wv;
  int64_t q_shape[4] = {1, SEQ, 1, DIM}, kv_shape[4] = {1, KEYS, 1, DIM},
          lse_shape[3] = {1, 1, SEQ};
  sattn_status status;
  double worst = 0.0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (i = 0; i < SEQ * DIM; ++i) q[i] = Query(i / DIM, i % DIM);
  for (i = 0; i < KEYS * DIM; ++i) {
    k[i] = Key(i / DIM, i % DIM);
    v[i] = Value(i / DIM, i % DIM);
  }
  /* This rank's keys: a contiguous range, in rank order (an uneven split; some may be empty). */
  first = KEYS * rank / size;
  count = KEYS * (rank + 1) / size - first;
  kv_shape[1] = count;
  kv = sattn_tensor_contiguous(k + first * DIM, SATTN_DTYPE_F32, 4, kv_shape);
  vv = sattn_tensor_contiguous(v + first * DIM, SATTN_DTYPE_F32, 4, kv_shape);
  qv = sattn_tensor_contiguous(q, SATTN_DTYPE_F32, 4, q_shape);
  ov = sattn_tensor_contiguous(out, SATTN_DTYPE_F32, 4, q_shape);
  lv = sattn_tensor_contiguous(lse, SATTN_DTYPE_F32, 3, lse_shape);
  memset(&options, 0, sizeof(options)); /* zero fields = defaults */
  options.struct_size = sizeof(options);
  options.causal = 1; /* over the global positions: each shard knows its offset */

  if (sattn_context_create(NULL, &ctx) != SATTN_OK) {
    fprintf(stderr, "context: %s\n", sattn_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  status = sattn_mpi_attention(ctx, MPI_COMM_WORLD, &qv, count > 0 ? &kv : NULL,
                               count > 0 ? &vv : NULL, &ov, &lv, &options);
  if (status != SATTN_OK) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, sattn_status_string(status), sattn_mpi_last_error());
    failed = 1;
  } else if (rank == 0) {
    kv_shape[1] = KEYS;
    kv = sattn_tensor_contiguous(k, SATTN_DTYPE_F32, 4, kv_shape);
    vv = sattn_tensor_contiguous(v, SATTN_DTYPE_F32, 4, kv_shape);
    wv = sattn_tensor_contiguous(want, SATTN_DTYPE_F32, 4, q_shape);
    if (sattn_attention(ctx, &qv, &kv, &vv, &wv, NULL, &options) != SATTN_OK) {
      fprintf(stderr, "single process: %s\n", sattn_last_error());
      failed = 1;
    }
    for (i = 0; i < SEQ * DIM; ++i) {
      const double diff = fabs((double)out[i] - (double)want[i]);
      worst = diff > worst ? diff : worst;
    }
    printf("%d ranks: out[0] = [%.6f %.6f ...], lse[0] = %.6f, max |sharded - single| = %.3g\n",
           size, out[0], out[1], lse[0], worst);
    failed = failed || worst > 1e-6;
  }
  sattn_context_destroy(ctx);
  MPI_Finalize();
  return failed;
}
