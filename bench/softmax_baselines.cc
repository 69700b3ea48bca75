// The baselines of `streamattn bench softmax` and `bench topk` (see softmax_baselines.h). The
// three-pass softmax uses the library's exp2 kernel (lib/cpu/exp2-inl.h, header-only) and the
// same exponent, exp2((s - max) c), so the comparison isolates the number of passes. Its loops
// have as many independent accumulators as the library's. This is the one bench file that names
// oneTBB.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "softmax_baselines.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/exp2-inl.h"
// clang-format on
#include "softmax_baselines.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using streamattn::HWY_NAMESPACE::Exp2NonPositive;  // the library's kernel, as in the library

constexpr float kLog2eBaseline = 1.4426950408889634f;

float RowMaxImpl(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto lowest = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto m0 = lowest, m1 = lowest, m2 = lowest, m3 = lowest;
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    m0 = hn::Max(m0, hn::LoadU(d, x + i));
    m1 = hn::Max(m1, hn::LoadU(d, x + i + lanes));
    m2 = hn::Max(m2, hn::LoadU(d, x + i + 2 * lanes));
    m3 = hn::Max(m3, hn::LoadU(d, x + i + 3 * lanes));
  }
  float m = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3))));
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float SumTermsImpl(const float* HWY_RESTRICT x, size_t n, float max) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vmax = hn::Set(d, max), c = hn::Set(d, kLog2eBaseline);
  auto l0 = hn::Zero(d), l1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    l0 = hn::Add(l0, Exp2NonPositive(d, hn::Mul(hn::Sub(hn::LoadU(d, x + i), vmax), c)));
    l1 = hn::Add(l1, Exp2NonPositive(d, hn::Mul(hn::Sub(hn::LoadU(d, x + i + lanes), vmax), c)));
  }
  float l = hn::GetLane(hn::SumOfLanes(d, hn::Add(l0, l1)));
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) {
    l += hn::GetLane(Exp2NonPositive(d1, hn::Set(d1, (x[i] - max) * kLog2eBaseline)));
  }
  return l;
}

void WriteProbsImpl(const float* HWY_RESTRICT x, size_t n, float max, float inv_l,
                    float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vmax = hn::Set(d, max), c = hn::Set(d, kLog2eBaseline), vinv = hn::Set(d, inv_l);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(Exp2NonPositive(d, hn::Mul(hn::Sub(hn::LoadU(d, x + i), vmax), c)), vinv), d,
               out + i);
  }
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) {
    out[i] = hn::GetLane(Exp2NonPositive(d1, hn::Set(d1, (x[i] - max) * kLog2eBaseline))) * inv_l;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace bench
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace bench {

HWY_EXPORT(RowMaxImpl);
HWY_EXPORT(SumTermsImpl);
HWY_EXPORT(WriteProbsImpl);

BaselinePool::BaselinePool(int threads)
    : threads_(std::max(1, threads)), arena_(new tbb::task_arena(std::max(1, threads))) {}

BaselinePool::~BaselinePool() { delete static_cast<tbb::task_arena*>(arena_); }

void BaselinePool::RunFor(int64_t count, void (*call)(const void*, int64_t), const void* body) {
  if (threads_ == 1 || count == 1) {
    for (int64_t i = 0; i < count; ++i) call(body, i);
    return;
  }
  static_cast<tbb::task_arena*>(arena_)->execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, count, 1),
        [&](const tbb::blocked_range<int64_t>& range) {
          for (int64_t i = range.begin(); i != range.end(); ++i) call(body, i);
        },
        tbb::simple_partitioner());
  });
}

void ThreePassSoftmax(BaselinePool& pool, const float* in, float* out, int64_t rows, int64_t n) {
  const auto row_max = HWY_DYNAMIC_DISPATCH(RowMaxImpl);
  const auto sum_terms = HWY_DYNAMIC_DISPATCH(SumTermsImpl);
  const auto write_probs = HWY_DYNAMIC_DISPATCH(WriteProbsImpl);
  if (rows >= pool.threads()) {
    pool.For(rows, [&](int64_t r) {
      const float* x = in + r * n;
      const float max = row_max(x, n);
      const float l = sum_terms(x, n, max);
      write_probs(x, n, max, 1.0f / l, out + r * n);
    });
    return;
  }
  // Few rows: each pass is split over the threads, with a reduction between passes.
  const int64_t pieces = pool.threads();
  const int64_t piece = (n + pieces - 1) / pieces;
  std::vector<float> partial(rows * pieces), max(rows), inv_l(rows);
  auto range = [&](int64_t p, const float** x, int64_t* len) {
    const int64_t r = p / pieces, begin = std::min(n, (p % pieces) * piece);
    *x = in + r * n + begin;
    *len = std::min(n, begin + piece) - begin;
  };
  pool.For(rows * pieces, [&](int64_t p) {
    const float* x;
    int64_t len;
    range(p, &x, &len);
    partial[p] = len > 0 ? row_max(x, len) : -std::numeric_limits<float>::infinity();
  });
  for (int64_t r = 0; r < rows; ++r) {
    max[r] = *std::max_element(&partial[r * pieces], &partial[(r + 1) * pieces]);
  }
  pool.For(rows * pieces, [&](int64_t p) {
    const float* x;
    int64_t len;
    range(p, &x, &len);
    partial[p] = len > 0 ? sum_terms(x, len, max[p / pieces]) : 0.0f;
  });
  for (int64_t r = 0; r < rows; ++r) {
    inv_l[r] = 1.0f / std::accumulate(&partial[r * pieces], &partial[(r + 1) * pieces], 0.0f);
  }
  pool.For(rows * pieces, [&](int64_t p) {
    const float* x;
    int64_t len;
    range(p, &x, &len);
    if (len > 0) write_probs(x, len, max[p / pieces], inv_l[p / pieces], out + (x - in));
  });
}

void PartialSortTopK(BaselinePool& pool, const float* probs, int32_t* scratch, int64_t rows,
                     int64_t n, int32_t k, int32_t* indices, float* top_probs) {
  pool.For(rows, [&](int64_t r) {
    const float* p = probs + r * n;
    int32_t* order = scratch + r * n;
    std::iota(order, order + n, 0);
    std::partial_sort(order, order + k, order + n,
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (int32_t j = 0; j < k; ++j) {
      indices[r * k + j] = order[j];
      top_probs[r * k + j] = p[order[j]];
    }
  });
}

}  // namespace bench
}  // namespace streamattn
#endif  // HWY_ONCE
