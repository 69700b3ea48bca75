// The online softmax on SIMD lanes: the state pass of softmax, log-softmax and softmax + top-k,
// and the write pass. A part of a row is read as f32 chunks (in place when the row is f32 and
// contiguous, else converted into a buffer); blocks of four vectors update the state.
// The lanes share one offset (the part's running maximum) and keep a sum each: with a maximum per
// lane, the rescale would run whenever any of 16 lanes sees a new maximum, 16 times as often. A
// block costs one compare of its maximum with a gate; only a block that beats the gate takes the
// slow path (a scalar exp2 to rescale, or a top-k candidate), about ln(n) times per part on random
// data. Cost per score: a subtract, a multiply, one exp2 and an add; the lane sums are flushed into
// a double every 64 vectors.
#if defined(STREAMATTN_CPU_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_SOFTMAX_INL_H_
#undef STREAMATTN_CPU_SOFTMAX_INL_H_
#else
#define STREAMATTN_CPU_SOFTMAX_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/online_state.h"
#include "core/tensor.h"
#include "cpu/convert-inl.h"
#include "cpu/exp2-inl.h"
#include "cpu/softmax_rows.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp2((s - max) c): a score's term against the offset max (a score, unscaled), c = log2(e) / T.
// s - max rounds at the magnitude of the difference (exactly, for scores within a factor 2 of
// max), so scores near 100 or 1e30 lose nothing to their size. The exponent is never positive,
// so the cheaper Exp2NonPositive serves (terms below 2^-126 of the maximum's become 0). -inf
// scores give 0, NaN gives NaN.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ScoreTerm(D d, V s, V max, V c) {
  return Exp2NonPositive(d, hn::Mul(hn::Sub(s, max), c));
}

// The state of one part of a row on SIMD lanes: the offset (the part's running maximum, shared
// by the lanes) and a sum per lane. The vectors live in the caller's locals (SVE vectors cannot
// be members); PartLanes holds the scalars and passes the vectors by reference.
template <class D>
struct PartLanes {
  using V = hn::Vec<D>;

  float c;
  float max = kNegInf;   // the offset: the largest score seen
  double flushed = 0.0;  // lane sums moved out so far

  // Vectors of a fresh state: offset (any finite value while empty: every score seen was -inf),
  // the two sums, and the gate a block's maximum must reach to possibly raise the offset.
  static void Init(D d, V& offset, V& l0, V& l1, V& gate) {
    offset = l0 = l1 = hn::Zero(d);
    gate = hn::Set(d, -std::numeric_limits<float>::max());
  }

  // Moves the offset to the block's maximum when that is larger, rescaling the sums by
  // exp2((max_old - max_new) c), the state's rescale (0 for an empty state; a NaN sum stays NaN).
  void Raise(D d, V block_max, V& offset, V& l0, V& l1, V& gate) {
    // A block may come here for a top-k candidate alone: skip the horizontal max then.
    if (hn::AllFalse(d, hn::Ge(block_max, gate))) return;
    const float top = hn::GetLane(hn::MaxOfLanes(d, block_max));
    if (!(top > max)) return;
    const float factor = RescaleFactor((max - top) * c, 0.0f);
    l0 = hn::Mul(l0, hn::Set(d, factor));
    l1 = hn::Mul(l1, hn::Set(d, factor));
    flushed *= factor;
    max = top;
    offset = hn::Set(d, top);
    gate = hn::Set(d, std::nextafter(top, std::numeric_limits<float>::infinity()));
  }

  // Moves the lane sums into the double total (at fixed positions of the part, so the total
  // rounds the same way whichever thread runs the part).
  void Flush(D d, V& l0, V& l1) {
    flushed += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, hn::Add(l0, l1))));
    l0 = l1 = hn::Zero(d);
  }

  // The part's state (after a Flush); NaN in both fields when it saw a NaN or +inf.
  ScoreState State() const {
    ScoreState s;
    s.max = max;
    s.l = static_cast<float>(flushed);
    if (std::isnan(s.l) || max == std::numeric_limits<float>::infinity()) {
      s.max = s.l = std::numeric_limits<float>::quiet_NaN();
    }
    return s;
  }
};

// Softmax alone has no candidates to collect: its threshold is never reached.
struct NoCandidates {
  float threshold() const { return std::numeric_limits<float>::infinity(); }
  template <class D>
  HWY_INLINE void Offer(D, hn::Vec<D>, hn::Vec<D>, size_t, size_t) {}
};

// Adds scores x[0, n) (row positions first_index...) to a part's state, offering every block
// that may hold a score >= the candidates' threshold to `candidates`
// (threshold() -> float; Offer(d, x, threshold, first_index, valid) appends those scores).
template <class D, class Candidates, class V = hn::Vec<D>>
HWY_INLINE void AccumulateScores(D d, const float* HWY_RESTRICT x, size_t n, size_t first_index,
                                 V c, PartLanes<D>& part, V& offset, V& l0, V& l1, V& state_gate,
                                 Candidates& candidates) {
  const size_t lanes = hn::Lanes(d);
  V threshold = hn::Set(d, candidates.threshold());
  V gate = hn::Min(state_gate, threshold);
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    const V x0 = hn::LoadU(d, x + i);
    const V x1 = hn::LoadU(d, x + i + lanes);
    const V x2 = hn::LoadU(d, x + i + 2 * lanes);
    const V x3 = hn::LoadU(d, x + i + 3 * lanes);
    const V block_max = hn::Max(hn::Max(x0, x1), hn::Max(x2, x3));
    if (HWY_UNLIKELY(!hn::AllFalse(d, hn::Ge(block_max, gate)))) {
      part.Raise(d, block_max, offset, l0, l1, state_gate);
      candidates.Offer(d, x0, threshold, first_index + i, lanes);
      candidates.Offer(d, x1, threshold, first_index + i + lanes, lanes);
      candidates.Offer(d, x2, threshold, first_index + i + 2 * lanes, lanes);
      candidates.Offer(d, x3, threshold, first_index + i + 3 * lanes, lanes);
      threshold = hn::Set(d, candidates.threshold());
      gate = hn::Min(state_gate, threshold);
    }
    // Two chains: the exp2 latency, not the add, bounds the loop.
    l0 = hn::Add(l0, ScoreTerm(d, x0, offset, c));
    l1 = hn::Add(l1, ScoreTerm(d, x1, offset, c));
    l0 = hn::Add(l0, ScoreTerm(d, x2, offset, c));
    l1 = hn::Add(l1, ScoreTerm(d, x3, offset, c));
  }
  for (; i < n; i += lanes) {
    V x0;
    size_t valid = lanes;
    if (i + lanes <= n) {
      x0 = hn::LoadU(d, x + i);
    } else {
      // The last partial vector, padded with -inf (which adds 0 to the sums); a load of the
      // whole vector could touch memory past the row.
      valid = n - i;
      HWY_ALIGN float padded[hn::MaxLanes(D())];
      for (size_t j = 0; j < lanes; ++j) padded[j] = j < valid ? x[i + j] : kNegInf;
      x0 = hn::Load(d, padded);
    }
    if (!hn::AllFalse(d, hn::Ge(x0, gate))) {
      part.Raise(d, x0, offset, l0, l1, state_gate);
      candidates.Offer(d, x0, threshold, first_index + i, valid);
      threshold = hn::Set(d, candidates.threshold());
      gate = hn::Min(state_gate, threshold);
    }
    l0 = hn::Add(l0, ScoreTerm(d, x0, offset, c));
  }
}

// Scores [begin, begin + n) of row `row` of `in` as f32: a pointer into the row itself when it
// is f32 and contiguous, else converted into `buffer` (kSoftmaxChunk floats).
template <class D>
HWY_INLINE const float* ScoresAsF32(D d, const Tensor& in, int64_t row, int64_t begin, size_t n,
                                    float* HWY_RESTRICT buffer) {
  if (in.dtype == DType::kF32 && (in.stride(1) == 1 || n == 1)) return in.At<float>(row, begin);
  LoadRowAsF32(d, in.dtype, in.At(row, begin), in.stride(1), n, buffer);
  return buffer;
}

// The state of scores [begin, end) of one row (a part), read as f32 chunks of kSoftmaxChunk:
// per_chunk(x, n, first_index, part, offset, l0, l1, gate) adds chunk x[0, n) to the state.
template <class D, class PerChunk>
HWY_INLINE ScoreState AccumulateChunks(D d, const Tensor& in, int64_t row, int64_t begin,
                                       int64_t end, float c, float* HWY_RESTRICT buffer,
                                       const PerChunk& per_chunk) {
  using V = hn::Vec<D>;
  PartLanes<D> part{c};
  V offset, l0, l1, gate;
  PartLanes<D>::Init(d, offset, l0, l1, gate);
  for (int64_t chunk = begin; chunk < end; chunk += kSoftmaxChunk) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kSoftmaxChunk, end - chunk));
    per_chunk(ScoresAsF32(d, in, row, chunk, n, buffer), n, chunk, part, offset, l0, l1, gate);
  }
  return part.State();
}

// The state of one part for softmax and top-k. The lane sums are flushed into the double total
// every 64 vectors, so a lane adds at most 32 terms in f32 (a relative error below 2^-19 even
// when rounding always goes one way, as with repeated scores); the flush costs ~1% of the loop.
template <class D, class Candidates>
HWY_INLINE ScoreState AccumulatePart(D d, const Tensor& in, int64_t row, int64_t begin, int64_t end,
                                     float c, float* HWY_RESTRICT buffer, Candidates& candidates) {
  using V = hn::Vec<D>;
  const size_t flush_every = 64 * hn::Lanes(d);
  // The lambdas below build their vectors: SVE vectors are sizeless and are not captured.
  return AccumulateChunks(d, in, row, begin, end, c, buffer,
                          [&](const float* x, size_t n, int64_t chunk, PartLanes<D>& part,
                              V& offset, V& l0, V& l1, V& gate) {
                            const V vc = hn::Set(d, c);
                            for (size_t i = 0; i < n; i += flush_every) {
                              AccumulateScores(d, x + i, std::min(flush_every, n - i),
                                               static_cast<size_t>(chunk) + i, vc, part, offset, l0,
                                               l1, gate, candidates);
                              part.Flush(d, l0, l1);
                            }
                          });
}

// Pass 1 of the stored-term softmax over one chunk x[0, n): raises the part's offset to the
// chunk's maximum first (one extra read of the chunk, from L1), then adds each term
// exp2((s - offset) c) to the sums and stores it to terms[0, n), which the write pass only
// rescales. Returns the offset the chunk's terms are against (kNegInf while every score so far
// was -inf, so that its rescale factor is 0 and never inf × 0). terms may be x (in place): each
// vector is loaded before it is stored.
template <class D, class V = hn::Vec<D>>
HWY_INLINE float AccumulateAndStoreTerms(D d, const float* x, size_t n, V c, PartLanes<D>& part,
                                         V& offset, V& l0, V& l1, V& gate, float* terms) {
  const size_t lanes = hn::Lanes(d);
  HWY_ALIGN float padded[hn::MaxLanes(D())];
  const size_t full = n - n % lanes;
  V m0 = hn::Set(d, kNegInf), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 4 * lanes <= full; i += 4 * lanes) {
    m0 = hn::Max(m0, hn::LoadU(d, x + i));
    m1 = hn::Max(m1, hn::LoadU(d, x + i + lanes));
    m2 = hn::Max(m2, hn::LoadU(d, x + i + 2 * lanes));
    m3 = hn::Max(m3, hn::LoadU(d, x + i + 3 * lanes));
  }
  for (; i < full; i += lanes) m0 = hn::Max(m0, hn::LoadU(d, x + i));
  // NaN does not win a Max: a NaN score reaches the sums through its term and makes them NaN.
  for (; i < n; ++i) m1 = hn::Max(m1, hn::Set(d, x[i]));
  part.Raise(d, hn::Max(hn::Max(m0, m1), hn::Max(m2, m3)), offset, l0, l1, gate);

  // Flushed every 64 vectors at fixed positions of the chunk, as AccumulatePart does.
  const size_t flush_every = 64 * lanes;
  for (size_t begin = 0; begin < n; begin += flush_every) {
    const size_t end = std::min(n, begin + flush_every);
    const size_t end_full = end - (end - begin) % lanes;
    i = begin;
    for (; i + 2 * lanes <= end_full; i += 2 * lanes) {
      const V t0 = ScoreTerm(d, hn::LoadU(d, x + i), offset, c);
      const V t1 = ScoreTerm(d, hn::LoadU(d, x + i + lanes), offset, c);
      l0 = hn::Add(l0, t0);
      l1 = hn::Add(l1, t1);
      hn::StoreU(t0, d, terms + i);
      hn::StoreU(t1, d, terms + i + lanes);
    }
    for (; i < end_full; i += lanes) {
      const V t0 = ScoreTerm(d, hn::LoadU(d, x + i), offset, c);
      l0 = hn::Add(l0, t0);
      hn::StoreU(t0, d, terms + i);
    }
    if (i < end) {
      // The last partial vector through a buffer padded with -inf (terms 0); a whole-vector load
      // or store could touch memory past the row.
      for (size_t j = 0; j < lanes; ++j) padded[j] = i + j < end ? x[i + j] : kNegInf;
      const V t0 = ScoreTerm(d, hn::Load(d, padded), offset, c);
      l1 = hn::Add(l1, t0);
      hn::Store(t0, d, padded);
      std::copy(padded, padded + (end - i), terms + i);
    }
    part.Flush(d, l0, l1);
  }
  return part.max;
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_SOFTMAX_INL_H_
