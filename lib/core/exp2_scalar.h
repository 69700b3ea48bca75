// Exp2Scalar: the scalar definition of streamattn's exp2; lib/cpu/exp2-inl.h is the same
// algorithm on SIMD lanes with the same constants. Used by backend-neutral code (merging
// weights, the scalar state), never in a per-score loop.
//
// Algorithm: n = round(x), f = x - n in [-0.5, 0.5] (exact), 2^f by a degree-6 polynomial
// (Chebyshev fit, 0.32 ulp with float coefficients), then 2^n applied as two exact powers of
// two, so a subnormal result is rounded once and 2^128 * p (p < 1) is reachable. Max error
// <= 2 ulp (measured < 1) over [-150, 128]; 0 below -150 and for -inf; +inf from 128 on; NaN
// for NaN.
#ifndef STREAMATTN_CORE_EXP2_SCALAR_H_
#define STREAMATTN_CORE_EXP2_SCALAR_H_

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace streamattn {
namespace exp2_constants {
// 2^f ~= c0 + c1 f + ... + c6 f^6 on [-0.5, 0.5].
constexpr float kC0 = 1.0f;
constexpr float kC1 = 6.931471825e-01f;
constexpr float kC2 = 2.402265072e-01f;
constexpr float kC3 = 5.550327152e-02f;
constexpr float kC4 = 9.618056938e-03f;
constexpr float kC5 = 1.340042800e-03f;
constexpr float kC6 = 1.546144485e-04f;
// Inputs are clamped here first: below, every result rounds to 0; above, to +inf.
constexpr float kLowest = -151.0f;
constexpr float kHighest = 129.0f;
}  // namespace exp2_constants

// 2^n for n in [-126, 127], built from the exponent bits.
inline float PowerOfTwo(int32_t n) { return BitsToFloat(static_cast<uint32_t>(n + 127) << 23); }

inline float Exp2Scalar(float x) {
  using namespace exp2_constants;
  if (std::isnan(x)) return x;
  x = x < kLowest ? kLowest : (x > kHighest ? kHighest : x);
  const float n = std::nearbyint(x);  // ties to even, as the SIMD Round
  const float f = x - n;
  float p = kC6;
  p = std::fma(p, f, kC5);
  p = std::fma(p, f, kC4);
  p = std::fma(p, f, kC3);
  p = std::fma(p, f, kC2);
  p = std::fma(p, f, kC1);
  p = std::fma(p, f, kC0);
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1;  // floor(n / 2): both halves stay in the normal exponent range
  return p * PowerOfTwo(n1) * PowerOfTwo(ni - n1);
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_EXP2_SCALAR_H_
