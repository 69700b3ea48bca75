// Exp2 on float lanes: streamattn's only exponential (every softmax here is base 2, with
// log2(e) folded into the score scale). Same algorithm and constants as core/exp2_scalar.h.
//
// Exp2: float32 lanes, any vector width (HWY_SCALAR included). Error <= 2 ulp over
// [-150, 128] (measured 0.97 with FMA, 1.25 without; subnormal results included, ulp = 2^-149
// there). Outside: exactly 0 below -150 and for -inf, +inf from 128 on, NaN for NaN.
// Cost: ~20 vector ops: clamp (2), round by the 1.5 * 2^23 trick (3), 6 FMA Horner steps,
// 2^n as two exponent builds and two multiplies (8); no NaN blend on x86 and ARMv7, where the
// clamp's operand order lets NaN through (AArch64's min/max return the number: one blend).
//
// Exp2NonPositive: the softmax's case, x <= 0 (x = s - max). Same error for results >= 2^-126;
// smaller results (x < -126.5) are 0, which no softmax can see next to its maximum's 1.
// ~14 vector ops.
#if defined(STREAMATTN_CPU_EXP2_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_EXP2_INL_H_
#undef STREAMATTN_CPU_EXP2_INL_H_
#else
#define STREAMATTN_CPU_EXP2_INL_H_
#endif

#include "core/exp2_scalar.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether hn::Max(bound, x) and hn::Min(bound, x) return x when x is NaN: x86 min/max return
// their second operand when either is NaN and ARMv7 NEON's propagate NaN, but AArch64 (NEON and
// SVE: Highway uses FMINNM/FMAXNM) and the emulated targets (scalar, EMU128, RVV) return the
// number. Where they do not, a NaN is restored by a blend.
constexpr bool kMinMaxPassNaN =
    HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128 && (HWY_ARCH_X86 || HWY_ARCH_ARM_V7);

template <class D, class V = hn::Vec<D>>
HWY_INLINE V RestoreNaN(V x, V result) {
  if constexpr (kMinMaxPassNaN) {
    return result;
  } else {
    return hn::IfThenElse(hn::IsNaN(x), x, result);
  }
}

// Rounds x (|x| < 2^22) to the nearest integer, ties to even, by adding and subtracting
// 1.5 * 2^23; returns it as a float and, through *n, as an int32 (the sum's low mantissa bits).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V RoundToInt(D d, V x, hn::Vec<hn::RebindToSigned<D>>* n) {
  const hn::RebindToSigned<D> di;
  const V magic = hn::Set(d, 12582912.0f);
  const V shifted = hn::Add(x, magic);
  *n = hn::Sub(hn::BitCast(di, shifted), hn::BitCast(di, magic));
  return hn::Sub(shifted, magic);
}

// 2^f on [-0.5, 0.5] by the degree-6 polynomial.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2Reduced(D d, V f) {
  namespace c = exp2_constants;
  V p = hn::Set(d, c::kC6);
  p = hn::MulAdd(p, f, hn::Set(d, c::kC5));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC4));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC3));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC2));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC1));
  return hn::MulAdd(p, f, hn::Set(d, c::kC0));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2(D d, V x) {
  namespace c = exp2_constants;
  const hn::RebindToSigned<D> di;
  // Clamp: results below -151 all round to 0 and above 129 to +inf. The bound goes first so a
  // NaN x passes through (kMinMaxPassNaN) and poisons f, hence the result.
  const V clamped = hn::Min(hn::Set(d, c::kHighest), hn::Max(hn::Set(d, c::kLowest), x));
  hn::Vec<decltype(di)> n;
  const V f = hn::Sub(clamped, RoundToInt(d, clamped, &n));  // exact, in [-0.5, 0.5]
  const V p = Exp2Reduced(d, f);
  // 2^n as 2^n1 * 2^n2 with both halves normal: the product p * 2^n1 is exact and the second
  // multiplication rounds once, also into the subnormal range.
  const auto n1 = hn::ShiftRight<1>(n);
  const auto n2 = hn::Sub(n, n1);
  const auto bias = hn::Set(di, 127);
  const V scale1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const V scale2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  return RestoreNaN<D>(x, hn::Mul(hn::Mul(p, scale1), scale2));
}

template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2NonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  // -127 gives n = -127, whose exponent field is 0: the scale is +0 and so is the result.
  const V clamped = hn::Max(hn::Set(d, -127.0f), x);  // NaN passes, as in Exp2
  hn::Vec<decltype(di)> n;
  const V f = hn::Sub(clamped, RoundToInt(d, clamped, &n));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n, hn::Set(di, 127))));
  return RestoreNaN<D>(x, hn::Mul(Exp2Reduced(d, f), scale));
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_EXP2_INL_H_
