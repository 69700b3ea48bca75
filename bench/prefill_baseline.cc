#include "prefill_baseline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#if STREAMATTN_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include "core/dtype.h"

namespace streamattn {
namespace bench {
namespace {

// Head h of a [1, seq, heads, dim] tensor as a dense f32 [seq, dim] matrix.
[[maybe_unused]] void GatherHead(const void* src, sattn_dtype dtype, int64_t seq, int64_t heads,
                                 int64_t dim, int64_t h, float* dst) {
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t offset = (i * heads + h) * dim;
    if (dtype == SATTN_DTYPE_F32) {
      std::memcpy(dst + i * dim, static_cast<const float*>(src) + offset, dim * sizeof(float));
    } else {
      const uint16_t* row = static_cast<const uint16_t*>(src) + offset;
      for (int64_t d = 0; d < dim; ++d) {
        dst[i * dim + d] = dtype == SATTN_DTYPE_BF16 ? BF16ToF32(row[d]) : F16ToF32(row[d]);
      }
    }
  }
}

// Three passes over each row of s (visible prefix only under causal): max, exp and sum,
// normalise. Rows are split over one thread per context (a context serves one thread).
[[maybe_unused]] void SoftmaxRows(const std::vector<sattn_context*>& contexts, float* s,
                                  int64_t rows, int64_t cols, bool causal) {
  const int threads = static_cast<int>(contexts.size());
  const float log2e = 1.4426950408889634f;
  auto work = [&](sattn_context* ctx, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* row = s + i * cols;
      const int64_t visible = causal ? std::min(cols, i + cols - rows + 1) : cols;
      if (visible <= 0) {
        std::fill(row, row + cols, 0.0f);
        continue;
      }
      float m = row[0];
      for (int64_t j = 1; j < visible; ++j) m = std::max(m, row[j]);
      for (int64_t j = 0; j < visible; ++j) row[j] = (row[j] - m) * log2e;
      sattn_exp2(ctx, row, row, visible);
      float sum = 0.0f;
      for (int64_t j = 0; j < visible; ++j) sum += row[j];
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < visible; ++j) row[j] *= inv;
      std::fill(row + visible, row + cols, 0.0f);
    }
  };
  std::vector<std::thread> pool;
  const int64_t per = (rows + threads - 1) / threads;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(work, contexts[t], std::min(rows, t * per), std::min(rows, (t + 1) * per));
  }
  work(contexts[0], 0, std::min(rows, per));
  for (std::thread& th : pool) th.join();
}

}  // namespace

bool PrefillBaselineAvailable() { return STREAMATTN_HAVE_OPENBLAS != 0; }

void RunPrefillBaseline(const PrefillBaselineProblem& p, int threads) {
#if STREAMATTN_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
  std::vector<sattn_context*> contexts(threads);
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = 1;
  options.backend = SATTN_BACKEND_CPU;
  for (sattn_context*& c : contexts) sattn_context_create(&options, &c);
  const int64_t sq = p.seq_q, sk = p.seq_k, dim = p.head_dim, group = p.heads_q / p.heads_kv;
  std::vector<float> q(sq * dim), k(sk * dim), v(sk * dim), s(sq * sk), o(sq * dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  for (int64_t hk = 0; hk < p.heads_kv; ++hk) {
    GatherHead(p.k, p.kv_dtype, sk, p.heads_kv, dim, hk, k.data());
    GatherHead(p.v, p.kv_dtype, sk, p.heads_kv, dim, hk, v.data());
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      GatherHead(p.q, p.q_dtype, sq, p.heads_q, dim, h, q.data());
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, sk, dim, scale, q.data(), dim,
                  k.data(), dim, 0.0f, s.data(), sk);
      SoftmaxRows(contexts, s.data(), sq, sk, p.causal);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sq, dim, sk, 1.0f, s.data(), sk,
                  v.data(), dim, 0.0f, o.data(), dim);
      for (int64_t i = 0; i < sq; ++i) {
        std::memcpy(p.out + (i * p.heads_q + h) * dim, o.data() + i * dim, dim * sizeof(float));
      }
    }
  }
  for (sattn_context* c : contexts) sattn_context_destroy(c);
#else
  (void)p, (void)threads;
#endif
}

}  // namespace bench
}  // namespace streamattn
