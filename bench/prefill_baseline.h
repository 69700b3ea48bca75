// The unfused baseline the flash forward is measured against: per head, S = Q K^T by BLAS
// (OpenBLAS cblas_sgemm), a three-pass safe softmax over S (max, exp and sum, normalise; exp is
// the library's own exp2), then O = P V by BLAS. It materialises the seq_q x seq_k scores, as
// attention did before FlashAttention.
#ifndef STREAMATTN_BENCH_PREFILL_BASELINE_H_
#define STREAMATTN_BENCH_PREFILL_BASELINE_H_

#include <cstdint>

#include "streamattn/streamattn.h"

namespace streamattn {
namespace bench {

struct PrefillBaselineProblem {
  const void* q;  // [1, seq_q, heads_q, head_dim], contiguous, q_dtype
  const void* k;  // [1, seq_k, heads_kv, head_dim], contiguous, kv_dtype
  const void* v;
  float* out;  // [1, seq_q, heads_q, head_dim] f32
  sattn_dtype q_dtype, kv_dtype;
  int64_t seq_q, seq_k, heads_q, heads_kv, head_dim;
  bool causal;
};

// False when this build has no BLAS (the baseline is then reported as unavailable).
bool PrefillBaselineAvailable();

// Runs the baseline with `threads` threads (BLAS's and the softmax's).
void RunPrefillBaseline(const PrefillBaselineProblem& p, int threads);

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_PREFILL_BASELINE_H_
