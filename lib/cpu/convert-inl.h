// Row conversions between the caller's dtypes and the f32 the kernels compute in, vectorised
// when the row is contiguous, with a scalar tail so no access ever touches memory past the
// row. Narrowing rounds to nearest even, as core/dtype.h.
#if defined(STREAMATTN_CPU_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_CONVERT_INL_H_
#undef STREAMATTN_CPU_CONVERT_INL_H_
#else
#define STREAMATTN_CPU_CONVERT_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Targets whose f16 -> f32 conversion is an instruction (F16C on AVX2 and up, Arm v8). Highway
// 1.0.3 emulates it elsewhere and turns Inf and NaN halves into finite numbers, which would
// let a NaN in a cache through as 65536; F16LanesToF32 below keeps them.
constexpr bool kNativeF16 =
    (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2) || HWY_ARCH_ARM_A64 || HWY_ARCH_RVV;

// Lanes of binary16 bits (widened to u32) as float: exact, Inf and NaN included.
template <class DF, class VU>
HWY_INLINE hn::Vec<DF> F16LanesToF32(DF df, VU bits) {
  const hn::RebindToUnsigned<DF> du;
  const auto exponent = hn::And(hn::ShiftRight<10>(bits), hn::Set(du, 0x1F));
  const auto mantissa = hn::And(bits, hn::Set(du, 0x3FF));
  const auto sign = hn::ShiftLeft<16>(hn::And(bits, hn::Set(du, 0x8000)));
  const auto normal =
      hn::Or(hn::ShiftLeft<23>(hn::Add(exponent, hn::Set(du, 112))), hn::ShiftLeft<13>(mantissa));
  const auto inf_or_nan = hn::Or(hn::Set(du, 0x7F800000u), hn::ShiftLeft<13>(mantissa));
  const auto subnormal =
      hn::BitCast(du, hn::Mul(hn::ConvertTo(df, hn::BitCast(hn::RebindToSigned<DF>(), mantissa)),
                              hn::Set(df, 1.0f / 16777216.0f)));
  auto magnitude = hn::IfThenElse(hn::Eq(exponent, hn::Set(du, 31)), inf_or_nan, normal);
  magnitude = hn::IfThenElse(hn::Eq(exponent, hn::Zero(du)), subnormal, magnitude);
  return hn::BitCast(df, hn::Or(sign, magnitude));
}

// One vector of halves from p, as float.
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF16AsF32(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  if constexpr (kNativeF16) {
    return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
  } else {
    const hn::Rebind<uint16_t, DF> du16;
    const auto bits = hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p));
    return F16LanesToF32(df, hn::PromoteTo(hn::RebindToUnsigned<DF>(), bits));
  }
}

// The floating-point element types of a tensor, as the kernels read them: Load gives a vector
// of f32 from element i of a row, LoadOne element i alone (tails, strided rows); kBits is an
// element's size, and kGroupScales says whether it needs its row's scales (the quantized
// elements of quantized_element-inl.h do). Kernels hold element values, not just types, so
// that a format may carry state (where its scales are); these carry none. The element types of
// K/V caches, these and any other, are chosen at one place: WithCacheElement
// (cache_element-inl.h).
struct F32Element {
  using Stored = float;
  static constexpr int kBits = 32;
  static constexpr bool kGroupScales = false;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, const Stored* HWY_RESTRICT row, size_t i) const {
    return hn::LoadU(d, row + i);
  }
  HWY_INLINE float LoadOne(const Stored* row, int64_t i) const { return row[i]; }
};

struct F16Element {
  using Stored = hwy::float16_t;
  static constexpr int kBits = 16;
  static constexpr bool kGroupScales = false;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, const Stored* HWY_RESTRICT row, size_t i) const {
    return LoadF16AsF32(d, row + i);
  }
  HWY_INLINE float LoadOne(const Stored* row, int64_t i) const {
    return LoadAsFloat(DType::kF16, row + i);
  }
};

struct BF16Element {
  using Stored = hwy::bfloat16_t;
  static constexpr int kBits = 16;
  static constexpr bool kGroupScales = false;
  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, const Stored* HWY_RESTRICT row, size_t i) const {
    return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), row + i));
  }
  HWY_INLINE float LoadOne(const Stored* row, int64_t i) const {
    return LoadAsFloat(DType::kBF16, row + i);
  }
};

// Calls f with the element type of a float dtype (f32, f16, bf16); not at all for the others
// (callers check IsFloatDType first; caches of quantized formats go through WithCacheElement).
template <class F>
HWY_INLINE void WithFloatElement(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(F32Element{});
    case DType::kF16:
      return f(F16Element{});
    case DType::kBF16:
      return f(BF16Element{});
    default:
      return;
  }
}

// dst[i] = row[i * stride] as float, for i < n, for a row of `element`'s type: vectors where
// the row is contiguous, one element at a time for the tail and for strided rows.
template <class E, class D>
HWY_INLINE void ConvertRow(D d, const E& element, const typename E::Stored* HWY_RESTRICT row,
                           int64_t stride, size_t n, float* HWY_RESTRICT dst) {
  size_t i = 0;
  if (stride == 1) {
    if constexpr (std::is_same_v<E, F32Element>) {
      std::memcpy(dst, row, n * sizeof(float));
      return;
    }
    for (; i + hn::Lanes(d) <= n; i += hn::Lanes(d)) {
      hn::StoreU(element.Load(d, row, i), d, dst + i);
    }
  }
  for (; i < n; ++i) dst[i] = element.LoadOne(row, static_cast<int64_t>(i) * stride);
}

// dst[i] = row[i * stride] as float, for i < n, for a row of a float dtype.
template <class D>
HWY_INLINE void LoadRowAsF32(D d, DType dtype, const void* row, int64_t stride, size_t n,
                             float* HWY_RESTRICT dst) {
  WithFloatElement(dtype, [&](auto element) {
    using E = decltype(element);
    ConvertRow(d, element, static_cast<const typename E::Stored*>(row), stride, n, dst);
  });
}

// Lanes of f32 as bfloat16 bits (in u32 lanes), rounded to nearest even; NaN stays a quiet NaN.
// (Highway 1.0.3's DemoteTo to bfloat16 truncates.)
template <class DF, class VF = hn::Vec<DF>>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> F32LanesToBF16Bits(DF /* df */, VF v) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFF), lsb)));
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du, 0x40));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded);
}

// row[i * stride] = src[i] converted to dtype, for i < n: vectorised for contiguous f16 (where
// the conversion is an instruction, see kNativeF16) and bf16 rows, with a scalar tail; both
// round to nearest even like core/dtype.h.
template <class D>
HWY_INLINE void StoreRowFromF32(D d, const float* HWY_RESTRICT src, size_t n, DType dtype,
                                void* row, int64_t stride) {
  if (stride == 1 && dtype == DType::kF32) {
    std::memcpy(row, src, n * sizeof(float));
    return;
  }
  size_t i = 0;
  const size_t lanes = hn::Lanes(d);
  if (stride == 1 && dtype == DType::kF16 && kNativeF16) {
    const hn::Rebind<hwy::float16_t, D> dh;
    auto* dst = static_cast<hwy::float16_t*>(row);
    for (; i + lanes <= n; i += lanes)
      hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, src + i)), dh, dst + i);
  } else if (stride == 1 && dtype == DType::kBF16) {
    const hn::Rebind<uint16_t, D> du16;
    auto* dst = static_cast<uint16_t*>(row);
    for (; i + lanes <= n; i += lanes) {
      const auto bits = F32LanesToBF16Bits(d, hn::LoadU(d, src + i));
      hn::StoreU(hn::DemoteTo(du16, hn::BitCast(hn::RebindToSigned<D>(), bits)), du16, dst + i);
    }
  }
  char* bytes = static_cast<char*>(row);
  const int64_t step = ElementBytes(dtype, stride);
  for (; i < n; ++i) StoreFromFloat(dtype, src[i], bytes + static_cast<int64_t>(i) * step);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_CONVERT_INL_H_
