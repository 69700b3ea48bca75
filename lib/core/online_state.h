// The online-softmax state of one row, and its exact merge ⊕ (derived in docs/design.md); the
// scalar definition that every vectorised kernel mirrors.
//
// A state summarises a set of keys by (m, l, o~): m the largest score, l = sum 2^(s - m) and
// o~ = sum 2^(s - m) v. Scores are in base-2 units (the caller has folded log2(e) into the
// scale), so every exponential is an exp2. Merging is associative and commutative, and the empty
// state (m = -inf, l = 0, o~ = 0) is its identity; the rescale of an empty side is 0, never
// exp2(-inf - -inf) = NaN, and an empty side's o~ is never read.
#ifndef STREAMATTN_CORE_ONLINE_STATE_H_
#define STREAMATTN_CORE_ONLINE_STATE_H_

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/exp2_scalar.h"

namespace streamattn {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

struct RowState {
  float m = kNegInf;  // max score seen (base 2)
  float l = 0.0f;     // sum of 2^(s - m)
};

// The factor that moves a quantity measured against m_from to m_to (m_to >= m_from): 0 for an
// empty state, exp2(m_from - m_to) otherwise.
inline float RescaleFactor(float m_from, float m_to) {
  return m_from == kNegInf ? 0.0f : Exp2Scalar(m_from - m_to);
}

// Scales acc by `a` and adds `b` * in, reading neither side whose factor is 0 (an empty or
// negligible part may hold garbage, even NaN, and 0 * NaN would leak it).
inline void ScaleAndAdd(float* acc, float a, const float* in, float b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float kept = a == 0.0f ? 0.0f : acc[i] * a;
    acc[i] = b == 0.0f ? kept : kept + in[i] * b;
  }
}

// The factors a merge applies to the two o~ vectors: o_a <- o_a * a + o_b * b.
struct MergeFactors {
  float a;
  float b;
};

// The scalar half of the merge, shared by every vectorised o~ update: (m, l) of a becomes that
// of a + b, and the returned factors bring both o~ to the new maximum. Both empty: the identity
// (1, 0). A NaN max or sum on either side makes the result NaN, factors included (a NaN score
// poisons its row and nothing else). The sum matters: where Max returns the number rather than
// the NaN (NEON's vmaxnm, Highway's SCALAR), a chunk whose scores are all NaN keeps m = -inf and
// only l says NaN, and dropping it as empty turned a NaN row into a finite one.
inline MergeFactors MergeRowStateScalars(RowState* a, const RowState& b) {
  if (std::isnan(a->m) || std::isnan(b.m) || std::isnan(a->l) || std::isnan(b.l)) {
    a->m = a->l = std::numeric_limits<float>::quiet_NaN();
    return {a->m, a->m};
  }
  const float m = a->m > b.m ? a->m : b.m;
  if (m == kNegInf) return {1.0f, 0.0f};
  const float wa = RescaleFactor(a->m, m);
  const float wb = RescaleFactor(b.m, m);
  a->l = a->l * wa + b.l * wb;
  a->m = m;
  return {wa, wb};
}

// (a, o_a) <- (a, o_a) + (b, o_b); o vectors have length dim.
inline void MergeRowStates(RowState* a, float* o_a, const RowState& b, const float* o_b,
                           int64_t dim) {
  const MergeFactors f = MergeRowStateScalars(a, b);
  ScaleAndAdd(o_a, f.a, o_b, f.b, dim);
}

// The one-score special case: (a, o_a) + (s, 1, v).
inline void UpdateRowState(RowState* a, float* o_a, float s, const float* v, int64_t dim) {
  RowState single;
  single.m = s;
  single.l = 1.0f;
  MergeRowStates(a, o_a, single, v, dim);
}

// log-sum-exp of the row in natural log: ln(sum e^score) = (m + log2 l) ln 2; -inf when empty.
inline float NaturalLse(const RowState& s) {
  if (s.l == 0.0f) return kNegInf;
  return (s.m + std::log2(s.l)) * kLn2;
}

// The (o, lse) form: given the natural-log lse of each of n parts, writes each part's weight
// exp(lse_i - lse) into `weights` and returns lse = log(sum exp(lse_i)). Every weight is 0 and
// the result -inf when all parts are empty; NaN anywhere gives NaN. A part with lse = +inf
// takes all the weight (shared equally with other +inf parts).
inline float MergeWeights(const float* lse, int64_t n, float* weights) {
  float m = kNegInf;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(lse[i])) {
      for (int64_t j = 0; j < n; ++j) weights[j] = lse[i];
      return lse[i];
    }
    m = lse[i] > m ? lse[i] : m;
  }
  if (m == kNegInf) {
    for (int64_t i = 0; i < n; ++i) weights[i] = 0.0f;
    return kNegInf;
  }
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float d = lse[i] - m;
    weights[i] = lse[i] == kNegInf ? 0.0f : (std::isnan(d) ? 1.0f : Exp2Scalar(d * kLog2e));
    sum += weights[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) weights[i] *= inv;
  return m == std::numeric_limits<float>::infinity() ? m : m + std::log(sum);
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_ONLINE_STATE_H_
