// The quantized cache elements (their bytes: the header and core/quantized.h), read as f32 the
// way the float elements of convert-inl.h are, so that every kernel reads them through the same
// Load / LoadOne:
//  - E4M3Element (FP8): the byte is moved into the bits of a binary16 (the same exponent field,
//    3 of its 10 mantissa bits) and widened by the f16 conversion instruction, which gives the
//    E4M3 value times 2^-8 exactly (subnormals included); the 2^8 joins the per-head scale the
//    driver folds into the queries and the output (KeyHeadFactor, work_item-inl.h), so no lane
//    is multiplied. NaN (S.1111.111) is mapped to a binary16 NaN first.
//  - I8Element, I4Element (group scales): values widened to i32 and converted, times the scale
//    of their group. In place (decoding's CacheRows) a value's scale is found from its address
//    (GroupScales::addressable: the scales' strides are the cache's over G, G a power of two),
//    one shift per vector; converted rows (ConvertKeyRows) take their row's scales explicitly,
//    any layout and group size.
// Cost per vector of f32 lanes beyond the f16 element's one conversion: E4M3 4 integer
// operations (on AVX2, read in pairs, 4 for two vectors and a lane extraction); I8 a conversion, a
// multiply and the scale's broadcast; I4 on AVX-512 a table lookup of 3 operations (LoadInts), on
// AVX2 and NEON per-lane shifts of 4, elsewhere a few byte operations more to split and interleave
// the nibbles of half as many bytes.
#if defined(STREAMATTN_CPU_QUANTIZED_ELEMENT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_QUANTIZED_ELEMENT_INL_H_
#undef STREAMATTN_CPU_QUANTIZED_ELEMENT_INL_H_
#else
#define STREAMATTN_CPU_QUANTIZED_ELEMENT_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/attention_args.h"
#include "core/quantized.h"
#include "cpu/convert-inl.h"
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// What E4M3Element's loads are short of the E4M3 value by (they return value * 2^-8).
constexpr float kE4M3LoadFactor = 256.0f;

struct E4M3Element {
  using Stored = uint8_t;
  static constexpr int kBits = 8;
  static constexpr bool kGroupScales = false;

  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, const Stored* HWY_RESTRICT row, size_t i) const {
    const hn::Rebind<int16_t, D> di16;
    return HalfToF32(d, HalfBits(di16, hn::LoadU(hn::Rebind<int8_t, decltype(di16)>(),
                                                 reinterpret_cast<const int8_t*>(row) + i)));
  }
#if HWY_TARGET == HWY_AVX2
  // Two vectors at once (LoadPair: elements i.. i + 2 Lanes(d) - 1): the 16-bit work of
  // HalfBits fills a whole vector of 16 lanes instead of two halves of one, 4 operations for
  // 16 elements instead of 8, then each half is converted. Used by the decode kernels where
  // they read a row's vectors in pairs (kPairLoads).
  static constexpr bool kPairLoads = true;
  template <class D>
  HWY_INLINE void LoadPair(D d, const Stored* HWY_RESTRICT row, size_t i, hn::Vec<D>& lo,
                           hn::Vec<D>& hi) const {
    const hn::Repartition<int16_t, D> di16;  // 2 Lanes(d) lanes
    const auto half = HalfBits(di16, hn::LoadU(hn::Rebind<int8_t, decltype(di16)>(),
                                               reinterpret_cast<const int8_t*>(row) + i));
    const hn::Half<hn::RebindToUnsigned<decltype(di16)>> dh;
    lo = HalfToF32(d, hn::LowerHalf(dh, half));
    hi = HalfToF32(d, hn::UpperHalf(dh, half));
  }
#else
  static constexpr bool kPairLoads = false;
#endif
  HWY_INLINE float LoadOne(const Stored* row, int64_t i) const {
    return E4M3ToF32(row[i]) * (1.0f / kE4M3LoadFactor);
  }

 private:
  // The binary16 bits of E4M3 bytes (as int8 lanes of the width D16 rebinds them to).
  template <class D16, class V8>
  static HWY_INLINE hn::Vec<hn::RebindToUnsigned<D16>> HalfBits(D16 di16, V8 bytes) {
    const hn::RebindToUnsigned<D16> d16;
    // The byte sign-extended to 16 bits (s x 9, then eeee.mmm) and shifted left by 7:
    // s.s.eeee.mmm and 7 zero bits, the binary16 s.0eeee.mmm0000000 but for the sign's copy in
    // bit 14. Two operations, where a zero-extension and two shifts took 3.
    const auto copied = hn::BitCast(d16, hn::ShiftLeft<7>(hn::PromoteTo(di16, bytes)));
    // Bit 14, the sign's copy, must become 0, or 1 for the NaN code (S.1111.111, whose
    // binary16 S.11111.111 and zeros is a NaN): 2 operations where clearing it, then a compare
    // and a select took 4. Adding 0x80 carries into bit 14 for that magnitude alone (its bits
    // 7-13 are the only ones all set), which flips bit 14 there and nowhere else, so bit 14 of
    // the sum XOR the copy is the NaN flag: XORing the sum's bit 14 into the copy leaves that
    // flag in bit 14 and every other bit as it was (one vpternlog on AVX-512).
    const auto carried = hn::Add(copied, hn::Set(d16, 0x0080));
    return hn::Xor(copied, hn::And(carried, hn::Set(d16, 0x4000)));
  }
  // Binary16 bits (Lanes(d) of them) as f32.
  template <class D, class V16>
  static HWY_INLINE hn::Vec<D> HalfToF32(D d, V16 half) {
    if constexpr (kNativeF16) {
      return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), half));
    } else {
      return F16LanesToF32(d, hn::PromoteTo(hn::RebindToUnsigned<D>(), half));
    }
  }
};

// A group scale of type S (float or binary16) as a vector of f32.
template <class D, typename S>
HWY_INLINE hn::Vec<D> BroadcastScale(D d, const S* HWY_RESTRICT scale) {
  if constexpr (std::is_same_v<S, float>) {
    return hn::Set(d, *scale);
  } else {
    uint16_t bits;
    std::memcpy(&bits, scale, 2);
    if constexpr (kNativeF16) {
      const hn::Rebind<uint16_t, D> d16;
      return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), hn::Set(d16, bits)));
    } else {
      return hn::Set(d, F16ToF32(bits));
    }
  }
}

template <typename S>
HWY_INLINE float ScaleAsFloat(const S* scale) {
  if constexpr (std::is_same_v<S, float>) {
    return *scale;
  } else {
    uint16_t bits;
    std::memcpy(&bits, scale, 2);
    return F16ToF32(bits);
  }
}

// What I8Element and I4Element share: where a value's scale is. In place, from the value's
// element offset in the cache (`values`, `scales`: the tensors' data; `log2_group`); for a
// converted row, the row's own scales `scale_stride` apart, `group` values to a scale.
template <typename S>
struct GroupScaleLookup {
  const uint8_t* values = nullptr;
  const S* scales = nullptr;
  int log2_group = 0;

  // The scale of the value at element offset e of the cache.
  const S* At(int64_t e) const { return scales + (e >> log2_group); }
};

// Int8 values times their group's scale S.
template <typename S>
struct I8Element {
  using Stored = int8_t;
  using Scale = S;
  static constexpr int kBits = 8;
  static constexpr bool kGroupScales = true;
  GroupScaleLookup<S> lookup;

  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, const Stored* HWY_RESTRICT row, size_t i) const {
    const int64_t e =
        reinterpret_cast<const uint8_t*>(row) - lookup.values + static_cast<int64_t>(i);
    return hn::Mul(LoadInts(d, row, i), BroadcastScale(d, lookup.At(e)));
  }
  HWY_INLINE float LoadOne(const Stored* row, int64_t i) const {
    const int64_t e = reinterpret_cast<const uint8_t*>(row) - lookup.values + i;
    return static_cast<float>(row[i]) * ScaleAsFloat(lookup.At(e));
  }
  // The scale of the value at `row` (the next groups' follow it).
  const S* ScaleOf(const Stored* row) const {
    return lookup.At(reinterpret_cast<const uint8_t*>(row) - lookup.values);
  }
  // Values i.. i + Lanes(d) - 1 of a row, as f32, unscaled.
  template <class D>
  static HWY_INLINE hn::Vec<D> LoadInts(D d, const Stored* HWY_RESTRICT row, size_t i) {
    return hn::ConvertTo(
        d, hn::PromoteTo(hn::RebindToSigned<D>(), hn::LoadU(hn::Rebind<int8_t, D>(), row + i)));
  }
  static HWY_INLINE float IntAt(const Stored* row, int64_t i) { return static_cast<float>(row[i]); }
};

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// The 16 nibble values (4-bit two's complement), indexed by a lane's bits 0-3, as vpermps reads
// an index: the AVX-512 I4 lookups (I4Element::LoadInts, decode/i4_row_step-inl.h).
HWY_INLINE __m512 I4Table() {
  return _mm512_setr_ps(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, -8.0f, -7.0f, -6.0f, -5.0f,
                        -4.0f, -3.0f, -2.0f, -1.0f);
}
#endif

// Int4 values, two to a byte (element 2j in byte j's low half), times their group's scale S.
// A row pointer is the byte of an even element; i counts elements.
template <typename S>
struct I4Element {
  using Stored = uint8_t;
  using Scale = S;
  static constexpr int kBits = 4;
  static constexpr bool kGroupScales = true;
  GroupScaleLookup<S> lookup;

  template <class D>
  HWY_INLINE hn::Vec<D> Load(D d, const Stored* HWY_RESTRICT row, size_t i) const {
    const int64_t e = 2 * (row - lookup.values) + static_cast<int64_t>(i);
    return hn::Mul(LoadInts(d, row, i), BroadcastScale(d, lookup.At(e)));
  }
  HWY_INLINE float LoadOne(const Stored* row, int64_t i) const {
    const int64_t e = 2 * (row - lookup.values) + i;
    return IntAt(row, i) * ScaleAsFloat(lookup.At(e));
  }
  // The scale of the value at `row` (an even element; the next groups' follow it).
  const S* ScaleOf(const Stored* row) const { return lookup.At(2 * (row - lookup.values)); }
  // Values i.. i + Lanes(d) - 1 of a row, as f32, unscaled: the Lanes(d) / 2 bytes' low and
  // high halves split, interleaved back into element order, sign-extended (i is even but on
  // SCALAR, whose one lane takes either half).
  template <class D>
  static HWY_INLINE hn::Vec<D> LoadInts(D d, const Stored* HWY_RESTRICT row, size_t i) {
#if HWY_TARGET == HWY_SCALAR
    return hn::Set(d, IntAt(row, static_cast<int64_t>(i)));
#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    if constexpr (sizeof(hn::Vec<D>) == 64) {
      // A table lookup, 3 operations where the nibble arithmetic below takes 9: the 8 bytes'
      // two 32-bit halves spread over lanes 0-7 and 8-15, each lane shifted so its own nibble
      // is in bits 0-3, which are all vpermps reads of an index; the 16 entries are the
      // nibbles' two's complement values. Lanes then come in element order.
      const __m512i halves = _mm512_permutexvar_epi32(
          _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
          _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + i / 2))));
      const __m512i nibbles = _mm512_srlv_epi32(
          halves, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
      return hn::Vec<D>{_mm512_permutexvar_ps(nibbles, I4Table())};
    } else {
      return LoadIntsByNibbleArithmetic(d, row, i);
    }
#elif HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_NEON
    return LoadIntsByLaneShifts(d, row, i);
#else
    return LoadIntsByNibbleArithmetic(d, row, i);
#endif
  }
  // LoadInts for 4 or 8 lanes with per-lane shifts (vpsllvd, NEON's vshl): the Lanes(d) / 2
  // bytes as one 16- or 32-bit word in every lane, each lane shifted left until its own nibble
  // is in bits 28-31, then an arithmetic shift right by 28 sign-extends it. 4 operations (the
  // broadcast is a load) where the nibble arithmetic takes 10. Other widths take that.
  template <class D>
  static HWY_INLINE hn::Vec<D> LoadIntsByLaneShifts(D d, const Stored* HWY_RESTRICT row, size_t i) {
    constexpr size_t kLanes = hn::MaxLanes(D());
    if constexpr (kLanes == 8 || kLanes == 4) {
      const hn::RebindToSigned<D> di;
      const hn::RebindToUnsigned<D> du;
      uint32_t word = 0;  // exactly the vector's bytes: a row may end there
      if constexpr (kLanes == 8) {
        std::memcpy(&word, row + i / 2, 4);
      } else {
        uint16_t half;
        std::memcpy(&half, row + i / 2, 2);
        word = half;
      }
      // Lane j's nibble is bits 4j..4j + 3 of the word (little-endian bytes, low half first).
      const auto to_top = hn::Sub(hn::Set(du, 28u), hn::ShiftLeft<2>(hn::Iota(du, 0u)));
      const auto top = hn::BitCast(di, hn::Shl(hn::Set(du, word), to_top));
      return hn::ConvertTo(d, hn::ShiftRight<28>(top));
    } else {
      return LoadIntsByNibbleArithmetic(d, row, i);
    }
  }
  // LoadInts on targets without a 16-entry permute of f32 lanes.
  template <class D>
  static HWY_INLINE hn::Vec<D> LoadIntsByNibbleArithmetic(D d, const Stored* HWY_RESTRICT row,
                                                          size_t i) {
#if HWY_TARGET == HWY_SCALAR
    return hn::Set(d, IntAt(row, static_cast<int64_t>(i)));
#else
    // Each byte widened to a 16-bit lane, its high nibble moved up by 4: the lane's two bytes
    // are then its two elements' nibbles, in element order, with no shuffle.
    const hn::Rebind<uint8_t, D> d8;
    const hn::Half<decltype(d8)> dh;
    const hn::Repartition<uint16_t, decltype(d8)> d16;
    const auto bytes = hn::PromoteTo(d16, hn::LoadU(dh, row + i / 2));
    const auto nibbles = hn::Or(hn::And(bytes, hn::Set(d16, 0x000F)),
                                hn::And(hn::ShiftLeft<4>(bytes), hn::Set(d16, 0x0F00)));
    // (x ^ 8) - 8: the 4-bit two's complement of x, as a byte.
    const auto x = hn::BitCast(d8, nibbles);
    const auto q = hn::Sub(hn::Xor(x, hn::Set(d8, 8)), hn::Set(d8, 8));
    return hn::ConvertTo(
        d, hn::PromoteTo(hn::RebindToSigned<D>(), hn::BitCast(hn::Rebind<int8_t, D>(), q)));
#endif
  }
  static HWY_INLINE float IntAt(const Stored* row, int64_t i) {
    return static_cast<float>(I4At(row, i));
  }
};

// dst[i] = value i of a row of a group-scaled element E (I8Element, I4Element), for i < n, with
// the row's scales at `scales` (`scale_stride` elements apart, `group` values to each): a
// vector at a time where a group holds whole vectors, else one value at a time.
template <class E, class D>
HWY_INLINE void ConvertScaledRow(D d, const typename E::Stored* HWY_RESTRICT row,
                                 const typename E::Scale* scales, int64_t scale_stride,
                                 int64_t group, size_t n, float* HWY_RESTRICT dst) {
  const size_t N = hn::Lanes(d), g = static_cast<size_t>(group);
  for (size_t start = 0; start < n; start += g) {
    const typename E::Scale* scale = scales + static_cast<int64_t>(start / g) * scale_stride;
    size_t i = start;
    if (g % N == 0) {
      const auto s = BroadcastScale(d, scale);
      for (; i < start + g; i += N) {
        hn::StoreU(hn::Mul(E::LoadInts(d, row, i), s), d, dst + i);
      }
    }
    const float s = ScaleAsFloat(scale);
    for (; i < start + g; ++i) dst[i] = E::IntAt(row, static_cast<int64_t>(i)) * s;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_QUANTIZED_ELEMENT_INL_H_
