// Decoding's one-row streamed step over a group-scaled cache (I8Element, I4Element, read in
// place): with one query row per kv head nothing shares the widening of an element, so the
// multiply by its group's scale is taken out of the per-vector work. Scores: per key and group
// the query's products with the widened integers are summed, then that sum meets the group's
// scale in one FMA, the scale read as an f32 broadcast operand (StepScales converts the step's
// scales once). P.V: each key's probability times its group's scale, once per group, is the
// coefficient of the widened integers. Per vector of 16 lanes that leaves the widening (2
// operations for I8) and one FMA, and per group (of at least a vector) a scale's broadcast and
// one multiply or FMA: about 4.5 operations where a multiply per vector made 6.5.
// The sums are grouped differently from a converted tile's (q.(int * s) element by element), so
// the last bits may differ from the same keys taken through ConvertKeyTile; tile boundaries and
// paths depend on the problem alone, so results stay the same bytes for any thread count.
// I4 on AVX-512 takes its own split of even and odd channels (decode/i4_row_step-inl.h).
// Instructions (callgrind, I8 in groups of 32, head_dim 128, AVX2): 376 per key and kv head
// when the score loop tested each vector for a new line to request and the P.V took blocks of
// 4 vectors, each finding and converting its keys' scales; 311 with groups unrolled whole,
// the coefficients once per step and blocks of 8 (1.05-1.13x as fast, alternated on a Zen 3
// host from memory, 8 kv heads, 32768 keys). Then 218 (f16's step: 254): the coefficients
// multiplied in registers, O multiplied by alpha only at a tile's first step, each next row's
// last byte requested without a test, head_dim 128 unrolled whole, and the blocks' lambdas
// forced inline (1.20-1.31x as fast on 1 thread; I4 400 -> 302, 1.31-1.36x; the same bytes).
// What is left is mostly the step's own set-up per head (row and scale addresses, the
// requests' rows): about 75 instructions per key.
#if defined(STREAMATTN_CPU_DECODE_SCALED_ROW_STEP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_SCALED_ROW_STEP_INL_H_
#undef STREAMATTN_CPU_DECODE_SCALED_ROW_STEP_INL_H_
#else
#define STREAMATTN_CPU_DECODE_SCALED_ROW_STEP_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/decode/dot_scores-inl.h"
#include "cpu/decode/i4_row_step-inl.h"
#include "cpu/decode/row_pv_step-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/quantized_element-inl.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The most scales a row has on this path (streamed steps: AVX2 and up, whose groups in place
// hold whole vectors of at least 8 lanes): head_dim 576 in groups of 8.
constexpr size_t kMaxRowGroups = 72;
// A step's scales: kStepRows rows of up to kMaxRowGroups.
constexpr size_t kStepRows = 4;
constexpr size_t kStepScaleSlots = kStepRows * kMaxRowGroups;

// The group scales of a step's 4 key rows as f32, out[k * groups + g] = scale g of rows[k]
// (its ScaleOf) times by[k] (by == nullptr: times 1), which the one-row steps' FMAs then read as
// broadcast operands: a binary16 scale broadcast and converted per group and key cost I4
// decoding 4.5% from L3 (I4DotRow; one thread, alternated in one process). Head_dim 128 in
// groups of 32 (4 binary16 scales a row) and one scale a row are converted, and multiplied, in
// registers: written to memory a row at a time and loaded as one vector, the load would wait
// for the stores to retire (they cannot forward), which measured slower than the broadcasts.
// The P.V's coefficients (StepCoefficients) multiply here too: as a loop over the stored
// scales, whose trip count GCC knew only at run time, that product cost 25 instructions per
// key (callgrind, I8 in groups of 32, head_dim 128) where the vector form takes under 2.
template <typename S>
HWY_INLINE void StepScales(const S* const* rows, size_t groups, const float* HWY_RESTRICT by,
                           float* HWY_RESTRICT out) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (!std::is_same_v<S, float>) {
    if (groups == 4) {
      uint64_t row_bits[kStepRows];
      for (size_t k = 0; k < kStepRows; ++k) std::memcpy(&row_bits[k], rows[k], 8);
      const __m256i bits =
          _mm256_setr_epi64x(static_cast<int64_t>(row_bits[0]), static_cast<int64_t>(row_bits[1]),
                             static_cast<int64_t>(row_bits[2]), static_cast<int64_t>(row_bits[3]));
      __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(bits));  // rows 0 and 1
      __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(bits, 1));
      if (by != nullptr) {
        const __m256 row_factors = _mm256_castps128_ps256(_mm_loadu_ps(by));
        lo = _mm256_mul_ps(
            lo, _mm256_permutevar8x32_ps(row_factors, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)));
        hi = _mm256_mul_ps(
            hi, _mm256_permutevar8x32_ps(row_factors, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)));
      }
      _mm256_storeu_ps(out, lo);
      _mm256_storeu_ps(out + 8, hi);
      return;
    }
    uint16_t bits[kStepRows];
    if (groups == 1) {
      for (size_t k = 0; k < kStepRows; ++k) std::memcpy(&bits[k], rows[k], 2);
      __m128 scales = _mm_cvtph_ps(
          _mm_setr_epi16(static_cast<int16_t>(bits[0]), static_cast<int16_t>(bits[1]),
                         static_cast<int16_t>(bits[2]), static_cast<int16_t>(bits[3]), 0, 0, 0, 0));
      if (by != nullptr) scales = _mm_mul_ps(scales, _mm_loadu_ps(by));
      _mm_storeu_ps(out, scales);
      return;
    }
    for (size_t k = 0; k < kStepRows; ++k) {
      const float factor = by != nullptr ? by[k] : 1.0f;
      for (size_t g = 0; g < groups; ++g) {
        std::memcpy(&bits[0], rows[k] + g, 2);
        out[k * groups + g] = _cvtsh_ss(bits[0]) * factor;
      }
    }
    return;
  }
#endif
  for (size_t k = 0; k < kStepRows; ++k) {
    const float factor = by != nullptr ? by[k] : 1.0f;
    for (size_t g = 0; g < groups; ++g) out[k * groups + g] = ScaleAsFloat(rows[k] + g) * factor;
  }
}

// For the lambdas WithGroupShift calls: GCC inlines a lambda's call operator only while the
// function it is in stays small, and StreamStep is large; out of line, ScaledPVRow's blocks
// became a call per step and head, 8 more instructions per key and head (callgrind, I8).
#ifndef SATTN_INLINE_LAMBDA
#if defined(__GNUC__) || defined(__clang__)
#define SATTN_INLINE_LAMBDA __attribute__((always_inline))
#else
#define SATTN_INLINE_LAMBDA
#endif
#endif

// Calls f(std::integral_constant<int, kShift>()), kShift the log2 of the vectors in a group of
// 2^log2_group channels (in place, groups hold whole vectors): 0, 1, 2, or 3 for 8 or more.
// The one-row steps' loops are compiled for each, their vectors per group fixed.
template <class D, class F>
HWY_INLINE void WithGroupShift(D d, int log2_group, const F& f) {
  switch (log2_group - static_cast<int>(hwy::FloorLog2(hn::Lanes(d)))) {
    case 0:
      return f(std::integral_constant<int, 0>());
    case 1:
      return f(std::integral_constant<int, 1>());
    case 2:
      return f(std::integral_constant<int, 2>());
    default:
      return f(std::integral_constant<int, 3>());
  }
}

// Calls f(kVectors, kDim) (std::integral_constant<size_t>s) with the shape a step's loops are
// compiled for: kVectors vectors a group (0: known only at run time) over kDim channels (0: dim,
// known only at run time). Head_dim 128 is unrolled whole for groups of 1, 2 or 4 vectors and
// for one group a row (16 vectors on AVX2), the latter compiled for kShift 3 only, the one
// shift that reaches it; every other shape runs the loops. One place for the dot's and the
// conversion's shapes.
template <class D, class F>
HWY_INLINE void WithStepShape(D d, int log2_group, size_t dim, const F& f) {
  using Dim128 = std::integral_constant<size_t, 128>;
  WithGroupShift(d, log2_group, [&](auto shift) SATTN_INLINE_LAMBDA {
    constexpr int kShift = decltype(shift)::value;
    constexpr size_t kVectors = kShift < 3 ? size_t{1} << kShift : 0;
    if constexpr (kVectors > 0) {
      if (dim == 128) return f(std::integral_constant<size_t, kVectors>(), Dim128());
    } else if constexpr (!HWY_HAVE_SCALABLE) {
      if (dim == 128 && log2_group == 7) {  // one scale a row
        return f(std::integral_constant<size_t, 128 / hn::MaxLanes(D())>(), Dim128());
      }
    }
    f(std::integral_constant<size_t, kVectors>(), std::integral_constant<size_t, 0>());
  });
}

// Accumulates group g's products into t0..t3: the query's vectors from i on times keys kr0..kr3's
// integers, kVectors vectors (0: `vectors`, known only at run time). With the count fixed the
// loop is unrolled into its loads, conversions and FMAs alone; a loop that also tested for a
// new line and counted vectors ran 21 instructions per 4 keys and vector where 13 do the work.
template <size_t kVectors, class E, class D, class V = hn::Vec<D>>
HWY_INLINE void GroupDots(D d, const float* HWY_RESTRICT q,
                          const typename E::Stored* HWY_RESTRICT kr0,
                          const typename E::Stored* HWY_RESTRICT kr1,
                          const typename E::Stored* HWY_RESTRICT kr2,
                          const typename E::Stored* HWY_RESTRICT kr3, size_t i, size_t vectors,
                          V& t0, V& t1, V& t2, V& t3) {
  const size_t N = hn::Lanes(d);
  const size_t count = kVectors > 0 ? kVectors : vectors;
#pragma GCC unroll 16
  for (size_t x = 0; x < count; ++x, i += N) {
    const V qv = hn::LoadU(d, q + i);
    t0 = hn::MulAdd(qv, E::LoadInts(d, kr0, i), t0);
    t1 = hn::MulAdd(qv, E::LoadInts(d, kr1, i), t1);
    t2 = hn::MulAdd(qv, E::LoadInts(d, kr2, i), t2);
    t3 = hn::MulAdd(qv, E::LoadInts(d, kr3, i), t3);
  }
}

// ScaledDotRow's loop over the groups, kVectors vectors a group (0: any count), over kDim
// channels (0: dim, known only at run time). With both fixed (head_dim 128) the loop and its
// requests' line arithmetic unroll away: 8 fewer instructions per key and kv head for I8 in
// groups of 32, 36 for I4 (callgrind, AVX2), and groups of 128 no longer take the loop.
template <size_t kVectors, size_t kDim, class E, class D>
HWY_INLINE void ScaledDotGroups(D d, const float* HWY_RESTRICT q, const CacheRows<E>& keys,
                                size_t c0, size_t run_time_dim, const float* HWY_RESTRICT scales,
                                float* HWY_RESTRICT st) {
  const size_t dim = kDim > 0 ? kDim : run_time_dim;
  using V = hn::Vec<D>;
  using Rows = CacheRows<E>;
  const int log2_group = keys.element.lookup.log2_group;
  // With kVectors fixed, the group's channels are a constant too (so the loop unrolls).
  const size_t group = kVectors > 0 ? kVectors * hn::Lanes(d) : size_t{1} << log2_group;
  const size_t groups = dim >> log2_group, vectors = group / hn::Lanes(d);
  const auto* HWY_RESTRICT kr0 = keys.Row(c0);
  const auto* HWY_RESTRICT kr1 = keys.Row(c0 + 1);
  const auto* HWY_RESTRICT kr2 = keys.Row(c0 + 2);
  const auto* HWY_RESTRICT kr3 = keys.Row(c0 + 3);
  const char* next_rows[4];
  for (size_t c = 0; c < 4; ++c) next_rows[c] = keys.NextKey(c0 + c);
  for (const char* row : next_rows) {
    RequestIntoL2(row + Rows::Bytes(dim) - 1);  // see RequestRowAndLastByteIntoL2
  }
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 16
  for (size_t g = 0, scale = 0; g < dim; g += group, ++scale) {
    // The lines of the next rows that start in this group's bytes, once per line.
    for (size_t byte = (Rows::Bytes(g) + 63) / 64 * 64; byte < Rows::Bytes(g + group); byte += 64) {
      const char* const volatile* rows = next_rows;  // see DotBlock
      for (size_t j = 0; j < 4; ++j) RequestIntoL2(rows[j] + byte);
    }
    V t0 = hn::Zero(d), t1 = t0, t2 = t0, t3 = t0;
    GroupDots<kVectors, E>(d, q, kr0, kr1, kr2, kr3, g, vectors, t0, t1, t2, t3);
    a0 = hn::MulAdd(t0, hn::Set(d, scales[scale]), a0);
    a1 = hn::MulAdd(t1, hn::Set(d, scales[groups + scale]), a1);
    a2 = hn::MulAdd(t2, hn::Set(d, scales[2 * groups + scale]), a2);
    a3 = hn::MulAdd(t3, hn::Set(d, scales[3 * groups + scale]), a3);
  }
  StoreFourSums(d, a0, a1, a2, a3, st);
}

// The packed scores (st[0..3]) of one query row q (dim floats) against keys c0..c0 + 3 of `keys`,
// requesting the rows keys.NextKey names into L2, a group's lines before its products (as
// DotBlock requests a line's).
template <class E, class D>
HWY_INLINE void ScaledDotRow(D d, const float* HWY_RESTRICT q, const CacheRows<E>& keys, size_t c0,
                             size_t dim, float* HWY_RESTRICT st) {
  const int log2_group = keys.element.lookup.log2_group;
  const size_t groups = dim >> log2_group;
  HWY_ALIGN float scales[kStepScaleSlots];
  const typename E::Scale* key_scales[kStepRows];
  for (size_t k = 0; k < kStepRows; ++k) key_scales[k] = keys.element.ScaleOf(keys.Row(c0 + k));
  StepScales(key_scales, groups, /*by=*/nullptr, scales);
#if SATTN_I4_ROW_STEP
  if constexpr (E::kBits == 4 && sizeof(hn::Vec<D>) == 64) {
    if (I4RowStepApplies(size_t{1} << log2_group, dim)) {
      return I4DotRow(d, q, keys, c0, dim, scales, st);
    }
  }
#endif
  WithStepShape(d, log2_group, dim, [&](auto vectors, auto fixed_dim) SATTN_INLINE_LAMBDA {
    ScaledDotGroups<decltype(vectors)::value, decltype(fixed_dim)::value>(d, q, keys, c0, dim,
                                                                          scales, st);
  });
}

// The coefficients of a step's P.V over group-scaled V rows (values' rows 0..kKeys - 1, a
// multiple of kStepRows; `groups` scales a row): w[k * groups + g] = p[k] times V row k's
// scale g, the product the P.V's FMAs take for every vector of group g. Once per step and head:
// ScaledPVRow's column blocks each found, broadcast, converted and multiplied their keys'
// scales before.
template <size_t kKeys, class E>
HWY_INLINE void StepCoefficients(const float* HWY_RESTRICT p, const CacheRows<E>& values,
                                 size_t groups, float* HWY_RESTRICT w) {
  for (size_t c = 0; c < kKeys; c += kStepRows) {
    const typename E::Scale* rows[kStepRows];
    for (size_t k = 0; k < kStepRows; ++k) rows[k] = values.element.ScaleOf(values.Row(c + k));
    StepScales(rows, groups, /*by=*/p + c, w + c * groups);
  }
}

// O (one row, vectors v.. v + NV - 1 of head_dim_v, NV up to 8) = alpha O + sum over the step's
// kKeys keys of w_k V[k] (alpha == nullptr: O += ...), V rows from `values` in place, each
// row's next-head rows requested into L2 as GemmTile's steps request them. w: StepCoefficients'
// p[k] times the rows' scales, `groups` a row; vector x of the block takes its group's,
// x >> kShift on (kShift: log2 of the vectors in a group, 3 for 8 or more). kRescale: whether
// alpha is given (a tile's first step only), so that every other step loads O unmultiplied.
template <size_t NV, size_t kKeys, int kShift, bool kRescale, class E, class D>
HWY_INLINE void ScaledPVBlock(D d, size_t v, const float* HWY_RESTRICT w, size_t groups,
                              const CacheRows<E>& values, float* HWY_RESTRICT o,
                              const float* HWY_RESTRICT alpha) {
  static_assert(NV >= 1 && NV <= 8, "a block of up to 8 vectors");
  using V = hn::Vec<D>;
  using Rows = CacheRows<E>;
  const size_t N = hn::Lanes(d), column = v * N;
  const size_t first_group = column >> values.element.lookup.log2_group;
  const Rows rows = values.Columns(column);
  float* out = o + column;
  V c0, c1, c2, c3, c4, c5, c6, c7;
  LoadOutputBlock<NV, kRescale>(d, out, alpha, c0, c1, c2, c3, c4, c5, c6, c7);
#pragma GCC unroll 8  // a wide step's 8 keys too: 5 instructions per key and kv head (I8)
  for (size_t k = 0; k < kKeys; ++k) {
    if (rows.next_values != nullptr) {
      RequestRowAndLastByteIntoL2(rows.NextValue(k), Rows::Bytes(NV * N));
    }
    const auto* HWY_RESTRICT row = rows.Row(k);
    const float* HWY_RESTRICT wk = w + k * groups + first_group;
    // Vector x's term: its group's coefficient times its integers.
    auto term = [&](auto x, V c) {
      constexpr size_t kX = decltype(x)::value;
      return hn::MulAdd(hn::Set(d, wk[kX >> kShift]), E::LoadInts(d, row, kX * N), c);
    };
    c0 = term(std::integral_constant<size_t, 0>(), c0);
    if constexpr (NV > 1) c1 = term(std::integral_constant<size_t, 1>(), c1);
    if constexpr (NV > 2) c2 = term(std::integral_constant<size_t, 2>(), c2);
    if constexpr (NV > 3) c3 = term(std::integral_constant<size_t, 3>(), c3);
    if constexpr (NV > 4) c4 = term(std::integral_constant<size_t, 4>(), c4);
    if constexpr (NV > 5) c5 = term(std::integral_constant<size_t, 5>(), c5);
    if constexpr (NV > 6) c6 = term(std::integral_constant<size_t, 6>(), c6);
    if constexpr (NV > 7) c7 = term(std::integral_constant<size_t, 7>(), c7);
  }
  StoreOutputBlock<NV>(d, c0, c1, c2, c3, c4, c5, c6, c7, out);
}

// ScaledPVBlock over head_dim_v (dvp columns, whole blocks of 4 vectors) for one kShift.
template <size_t kKeys, int kShift, bool kRescale, class E, class D>
HWY_INLINE void ScaledPVBlocks(D d, size_t dvp, const float* HWY_RESTRICT w, size_t groups,
                               const CacheRows<E>& values, float* HWY_RESTRICT o,
                               const float* HWY_RESTRICT alpha) {
  const size_t vectors = dvp / hn::Lanes(d);
  size_t v = 0;
  for (; v + 8 <= vectors; v += 8) {
    ScaledPVBlock<8, kKeys, kShift, kRescale>(d, v, w, groups, values, o, alpha);
  }
  if (v < vectors) ScaledPVBlock<4, kKeys, kShift, kRescale>(d, v, w, groups, values, o, alpha);
}

// The P.V of one streamed step of one row over group-scaled V rows in place: O (dvp columns,
// whole blocks of 4 vectors) = alpha O + sum over the step's kKeys keys of p[k] V[k]
// (alpha == nullptr: O += ...). Blocks of 8 vectors (8 accumulators of 16 registers) halve the
// per-key work of blocks of 4: the row's address, its coefficients and the prefetch.
template <size_t kKeys, class E, class D>
HWY_INLINE void ScaledPVRow(D d, size_t dvp, const float* HWY_RESTRICT p,
                            const CacheRows<E>& values, float* HWY_RESTRICT o,
                            const float* HWY_RESTRICT alpha) {
  const int log2_group = values.element.lookup.log2_group;
#if SATTN_I4_ROW_STEP
  if constexpr (E::kBits == 4 && sizeof(hn::Vec<D>) == 64) {
    if (I4RowStepApplies(size_t{1} << log2_group, 4 * hn::Lanes(d))) {
      for (size_t v = 0; v < dvp / hn::Lanes(d); v += 4) {
        I4PVRow<4>(d, v, p, values, kKeys, o, alpha);
      }
      return;
    }
  }
#endif
  const size_t groups = dvp >> log2_group;
  HWY_ALIGN float w[kKeys * kMaxRowGroups];
  StepCoefficients<kKeys>(p, values, groups, w);
  WithGroupShift(d, log2_group, [&](auto shift) SATTN_INLINE_LAMBDA {
    constexpr int kShift = decltype(shift)::value;
    if (alpha != nullptr) {
      ScaledPVBlocks<kKeys, kShift, true>(d, dvp, w, groups, values, o, alpha);
    } else {
      ScaledPVBlocks<kKeys, kShift, false>(d, dvp, w, groups, values, o, alpha);
    }
  });
}

// The most channels a row has on the streamed steps (the API's largest head_dim).
constexpr size_t kMaxStepDim = 576;

// ConvertStepRows for kVectors vectors a group (0: known only at run time) over kDim channels
// (0: dim, known only at run time).
template <size_t kVectors, size_t kDim, class E, class D>
HWY_INLINE void ConvertStepRowsOf(D d, const CacheRows<E>& rows, size_t run_time_dim,
                                  const float* HWY_RESTRICT scales, const char* const* next,
                                  float* HWY_RESTRICT out) {
  const size_t N = hn::Lanes(d), dim = kDim > 0 ? kDim : run_time_dim;
  const int log2_group = rows.element.lookup.log2_group;
  const size_t group = kVectors > 0 ? kVectors * N : size_t{1} << log2_group;
  const size_t groups = dim >> log2_group;
  for (size_t k = 0; k < kStepRows; ++k) {
    RequestRowIntoL2(next[k], CacheRows<E>::Bytes(dim));
    const auto* HWY_RESTRICT row = rows.Row(k);
    float* HWY_RESTRICT dst = out + k * dim;
#pragma GCC unroll 16
    for (size_t g = 0, scale = k * groups; g < dim; g += group, ++scale) {
      const hn::Vec<D> s = hn::Set(d, scales[scale]);
#pragma GCC unroll 16
      for (size_t i = g; i < g + group; i += N) {
        hn::Store(hn::Mul(E::LoadInts(d, row, i), s), d, dst + i);
      }
    }
  }
}

// A streamed step's kStepRows rows of a group-scaled element in place (rows.Row(0..3), `dim`
// channels, whole vectors in each group) as f32: out[k * dim + i] = integer times its group's
// scale, the products E::Load makes, so kernels over `out` give the same bytes as over the
// rows in place. next[k]: row k's row to request into L2, requested as row k is converted.
// For four query rows per kv head (StreamStep<4>, see there), where each vector of a row
// meets every query row: in place, each of those loads found its group's scale from its
// address (a shift, a broadcast and a conversion of the binary16) and multiplied by it; here
// a vector costs a widening, a multiply and a store once per step, and the FMAs read f32.
template <class E, class D>
HWY_INLINE void ConvertStepRows(D d, const CacheRows<E>& rows, size_t dim, const char* const* next,
                                float* HWY_RESTRICT out) {
  const int log2_group = rows.element.lookup.log2_group;
  HWY_ALIGN float scales[kStepScaleSlots];
  const typename E::Scale* row_scales[kStepRows];
  for (size_t k = 0; k < kStepRows; ++k) row_scales[k] = rows.element.ScaleOf(rows.Row(k));
  StepScales(row_scales, dim >> log2_group, /*by=*/nullptr, scales);
  WithStepShape(d, log2_group, dim, [&](auto vectors, auto fixed_dim) SATTN_INLINE_LAMBDA {
    ConvertStepRowsOf<decltype(vectors)::value, decltype(fixed_dim)::value>(d, rows, dim, scales,
                                                                            next, out);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_SCALED_ROW_STEP_INL_H_
