// Exp2 on float lanes: streamattn's only exponential (every softmax here is base 2, with
// log2(e) folded into the score scale). Same algorithm and constants as core/exp2_scalar.h.
//
// Lanes: float32, any vector width (including HWY_SCALAR). Error: <= 2 ulp over [-150, 128]
// (measured max 0.9 ulp with FMA; subnormal results included, ulp = 2^-149 there). Outside:
// exactly 0 below -150 and for -inf, +inf from 128 on, NaN for NaN.
// Cost: ~16 vector ops per vector (6 FMA Horner steps, round, convert, two exponent builds, two
// scalings, clamp, NaN blend); ~6 cycles per 8 lanes on Zen 3.
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

template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2(D d, V x) {
  namespace c = exp2_constants;
  const hn::RebindToSigned<D> di;
  // Clamp: results below -151 all round to 0 and above 129 to +inf. On x86 Max/Min turn a NaN
  // into the bound; the blend at the end restores it.
  const V clamped = hn::Min(hn::Max(x, hn::Set(d, c::kLowest)), hn::Set(d, c::kHighest));
  const auto n = hn::NearestInt(clamped);             // ties to even
  const V f = hn::Sub(clamped, hn::ConvertTo(d, n));  // exact, in [-0.5, 0.5]
  V p = hn::Set(d, c::kC6);
  p = hn::MulAdd(p, f, hn::Set(d, c::kC5));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC4));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC3));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC2));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC1));
  p = hn::MulAdd(p, f, hn::Set(d, c::kC0));
  // 2^n as 2^n1 * 2^n2 with both halves normal: the product p * 2^n1 is exact and the second
  // multiplication rounds once, also into the subnormal range.
  const auto n1 = hn::ShiftRight<1>(n);
  const auto n2 = hn::Sub(n, n1);
  const auto bias = hn::Set(di, 127);
  const V scale1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const V scale2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  const V result = hn::Mul(hn::Mul(p, scale1), scale2);
  return hn::IfThenElse(hn::IsNaN(x), x, result);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_EXP2_INL_H_
