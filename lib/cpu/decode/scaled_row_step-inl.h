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
// (its ScaleOf), which ScaledDotRow's FMAs then read as broadcast operands: a binary16 scale
// broadcast and converted per group and key cost I4 decoding 4.5% from L3 (I4DotRow; one
// thread, alternated in one process). Head_dim 128 in groups of 32 (4 binary16 scales a row)
// and one scale a row are converted in registers: written to memory a row at a time and
// loaded as one vector, the load would wait for the stores to retire (they cannot forward),
// which measured slower than the broadcasts.
template <typename S>
HWY_INLINE void StepScales(const S* const* rows, size_t groups, float* HWY_RESTRICT out) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if constexpr (!std::is_same_v<S, float>) {
    if (groups == 4) {
      uint64_t row_bits[kStepRows];
      for (size_t k = 0; k < kStepRows; ++k) std::memcpy(&row_bits[k], rows[k], 8);
      const __m256i bits =
          _mm256_setr_epi64x(static_cast<int64_t>(row_bits[0]), static_cast<int64_t>(row_bits[1]),
                             static_cast<int64_t>(row_bits[2]), static_cast<int64_t>(row_bits[3]));
      _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm256_castsi256_si128(bits)));  // rows 0 and 1
      _mm256_storeu_ps(out + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(bits, 1)));
      return;
    }
    uint16_t bits[kStepRows];
    if (groups == 1) {
      for (size_t k = 0; k < kStepRows; ++k) std::memcpy(&bits[k], rows[k], 2);
      _mm_storeu_ps(out,
                    _mm_cvtph_ps(_mm_setr_epi16(
                        static_cast<int16_t>(bits[0]), static_cast<int16_t>(bits[1]),
                        static_cast<int16_t>(bits[2]), static_cast<int16_t>(bits[3]), 0, 0, 0, 0)));
      return;
    }
    for (size_t k = 0; k < kStepRows; ++k) {
      for (size_t g = 0; g < groups; ++g) {
        std::memcpy(&bits[0], rows[k] + g, 2);
        out[k * groups + g] = _cvtsh_ss(bits[0]);
      }
    }
    return;
  }
#endif
  for (size_t k = 0; k < kStepRows; ++k) {
    for (size_t g = 0; g < groups; ++g) out[k * groups + g] = ScaleAsFloat(rows[k] + g);
  }
}

// The packed scores (st[0..3]) of one query row q (dim floats) against keys c0..c0 + 3 of `keys`,
// requesting the rows keys.NextKey names into L2 as the loop walks (as DotBlock does).
template <class E, class D>
HWY_INLINE void ScaledDotRow(D d, const float* HWY_RESTRICT q, const CacheRows<E>& keys, size_t c0,
                             size_t dim, float* HWY_RESTRICT st) {
  const int log2_group = keys.element.lookup.log2_group;
  const size_t group = size_t{1} << log2_group, groups = dim >> log2_group;
  HWY_ALIGN float scales[kStepScaleSlots];
  const typename E::Scale* key_scales[kStepRows];
  for (size_t k = 0; k < kStepRows; ++k) key_scales[k] = keys.element.ScaleOf(keys.Row(c0 + k));
  StepScales(key_scales, groups, scales);
#if SATTN_I4_ROW_STEP
  if constexpr (E::kBits == 4 && sizeof(hn::Vec<D>) == 64) {
    if (I4RowStepApplies(group, dim)) return I4DotRow(d, q, keys, c0, dim, scales, st);
  }
#endif
  using V = hn::Vec<D>;
  using Rows = CacheRows<E>;
  const size_t N = hn::Lanes(d);
  const auto* HWY_RESTRICT kr0 = keys.Row(c0);
  const auto* HWY_RESTRICT kr1 = keys.Row(c0 + 1);
  const auto* HWY_RESTRICT kr2 = keys.Row(c0 + 2);
  const auto* HWY_RESTRICT kr3 = keys.Row(c0 + 3);
  const char* next_rows[4];
  for (size_t c = 0; c < 4; ++c) next_rows[c] = keys.NextKey(c0 + c);
  for (const char* row : next_rows) {
    if (const char* tail = UncoveredTail(row, Rows::Bytes(dim))) RequestIntoL2(tail);
  }
  V a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0;
  for (size_t g = 0; g < dim; g += group) {
    V t0 = hn::Zero(d), t1 = t0, t2 = t0, t3 = t0;
    for (size_t i = g; i < g + group; i += N) {
      if (Rows::Bytes(i) % 64 < Rows::Bytes(N)) {      // once per line of the rows
        const char* const volatile* rows = next_rows;  // see DotBlock
        for (size_t j = 0; j < 4; ++j) RequestIntoL2(rows[j] + Rows::Bytes(i));
      }
      const V qv = hn::LoadU(d, q + i);
      t0 = hn::MulAdd(qv, E::LoadInts(d, kr0, i), t0);
      t1 = hn::MulAdd(qv, E::LoadInts(d, kr1, i), t1);
      t2 = hn::MulAdd(qv, E::LoadInts(d, kr2, i), t2);
      t3 = hn::MulAdd(qv, E::LoadInts(d, kr3, i), t3);
    }
    const size_t scale = g >> log2_group;
    a0 = hn::MulAdd(t0, hn::Set(d, scales[scale]), a0);
    a1 = hn::MulAdd(t1, hn::Set(d, scales[groups + scale]), a1);
    a2 = hn::MulAdd(t2, hn::Set(d, scales[2 * groups + scale]), a2);
    a3 = hn::MulAdd(t3, hn::Set(d, scales[3 * groups + scale]), a3);
  }
  StoreFourSums(d, a0, a1, a2, a3, st);
}

// O (one row, vectors v.. v + NV - 1 of head_dim_v) = alpha O + sum over `keys` keys of p[k] V[k]
// (alpha == nullptr: O += ...), V rows from `values` in place, each row's next-head rows
// requested into L2 as GemmTile's steps request them.
template <size_t NV, class E, class D>
HWY_INLINE void ScaledPVRow(D d, size_t v, const float* HWY_RESTRICT p, const CacheRows<E>& values,
                            size_t keys, float* HWY_RESTRICT o, const float* HWY_RESTRICT alpha) {
  static_assert(NV >= 1 && NV <= 4, "a block of up to 4 vectors");
#if SATTN_I4_ROW_STEP
  if constexpr (E::kBits == 4 && sizeof(hn::Vec<D>) == 64 && NV % 2 == 0) {
    if (I4RowStepApplies(size_t{1} << values.element.lookup.log2_group, NV * hn::Lanes(d))) {
      return I4PVRow<NV>(d, v, p, values, keys, o, alpha);
    }
  }
#endif
  using V = hn::Vec<D>;
  using Rows = CacheRows<E>;
  const size_t N = hn::Lanes(d), column = v * N;
  const int log2_group = values.element.lookup.log2_group;
  // Vectors per group, at least 1 (groups of whole vectors are what reads in place).
  const size_t per_group = (size_t{1} << log2_group) / N;
  const Rows rows = values.Columns(column);
  float* out = o + column;
  const V scale_o = hn::Set(d, alpha == nullptr ? 1.0f : *alpha);
  V c0 = hn::Mul(hn::LoadU(d, out), scale_o);
  V c1 = NV > 1 ? hn::Mul(hn::LoadU(d, out + N), scale_o) : c0;
  V c2 = NV > 2 ? hn::Mul(hn::LoadU(d, out + 2 * N), scale_o) : c0;
  V c3 = NV > 3 ? hn::Mul(hn::LoadU(d, out + 3 * N), scale_o) : c0;
  for (size_t k = 0; k < keys; ++k) {
    if (rows.next_values != nullptr) RequestRowIntoL2(rows.NextValue(k), Rows::Bytes(NV * N));
    const auto* HWY_RESTRICT row = rows.Row(k);
    const auto* scale = values.element.ScaleOf(row);
    const V pk = hn::Set(d, p[k]);
    // The coefficient of vector x: p[k] times the scale of x's group, x / per_group on.
    const V w0 = hn::Mul(pk, BroadcastScale(d, scale));
    V w1 = w0, w2 = w0, w3 = w0;
    if (per_group == 1) {
      if constexpr (NV > 1) w1 = hn::Mul(pk, BroadcastScale(d, scale + 1));
      if constexpr (NV > 2) w2 = hn::Mul(pk, BroadcastScale(d, scale + 2));
      if constexpr (NV > 3) w3 = hn::Mul(pk, BroadcastScale(d, scale + 3));
    } else if (per_group == 2) {
      if constexpr (NV > 2) w2 = w3 = hn::Mul(pk, BroadcastScale(d, scale + 1));
    }
    c0 = hn::MulAdd(w0, E::LoadInts(d, row, 0), c0);
    if constexpr (NV > 1) c1 = hn::MulAdd(w1, E::LoadInts(d, row, N), c1);
    if constexpr (NV > 2) c2 = hn::MulAdd(w2, E::LoadInts(d, row, 2 * N), c2);
    if constexpr (NV > 3) c3 = hn::MulAdd(w3, E::LoadInts(d, row, 3 * N), c3);
  }
  hn::StoreU(c0, d, out);
  if constexpr (NV > 1) hn::StoreU(c1, d, out + N);
  if constexpr (NV > 2) hn::StoreU(c2, d, out + 2 * N);
  if constexpr (NV > 3) hn::StoreU(c3, d, out + 3 * N);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_SCALED_ROW_STEP_INL_H_
