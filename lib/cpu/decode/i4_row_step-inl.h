// Decoding's one-row streamed step over an I4 cache on AVX-512 (the ScaledDotRow and
// ScaledPVRow of decode/scaled_row_step-inl.h for groups of at least 32 channels): 32 channels
// at a time, split into their even and odd channels.
//
// Why: in element order a vector of 16 values costs three operations (I4Element::LoadInts:
// spread, shift, lookup). A chunk's 16 bytes widened to 32-bit lanes (one vpmovzxbd) hold each
// lane's two nibbles, the even channel's in bits 0-3 and the odd one's in bits 4-7; vpermps
// reads bits 0-3 of an index, so one lookup gives the even channels and a shift and a lookup
// the odd ones: four operations per 32 values instead of six. The other operand is split the
// same way: the query's 32 channels by two two-source permutes per chunk and step, and the P.V
// keeps its output's even and odd columns in separate accumulators, interleaved back (two
// permutes per 32 columns) when the step stores them.
// Sums: the scores add each lane's even and odd products before the lanes are summed, so their
// last bits may differ from ScaledDotRow's (within f32 rounding; the path depends on the
// problem alone, so results are the same bytes for any thread count). The P.V adds the same
// products to each output column in the same order as ScaledPVRow.
#if defined(STREAMATTN_CPU_DECODE_I4_ROW_STEP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_I4_ROW_STEP_INL_H_
#undef STREAMATTN_CPU_DECODE_I4_ROW_STEP_INL_H_
#else
#define STREAMATTN_CPU_DECODE_I4_ROW_STEP_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "cpu/decode/dot_scores-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/quantized_element-inl.h"
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef SATTN_I4_ROW_STEP  // defined once per target
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SATTN_I4_ROW_STEP 1

// Channels per chunk: 16 bytes, one vpmovzxbd.
constexpr size_t kI4Chunk = 32;

// Whether a row of `group`-channel groups and `dim` channels takes the even/odd split: a chunk
// must lie in one group.
inline bool I4RowStepApplies(size_t group, size_t dim) {
  return group >= kI4Chunk && dim % kI4Chunk == 0;
}

// A chunk's 32 values: lane j of `even` is channel 2j's, of `odd` channel 2j + 1's.
HWY_INLINE void LoadI4Chunk(const uint8_t* HWY_RESTRICT bytes, __m512 table, __m512& even,
                            __m512& odd) {
  const __m512i lanes =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
  even = _mm512_permutexvar_ps(lanes, table);
  odd = _mm512_permutexvar_ps(_mm512_srli_epi32(lanes, 4), table);
}

// Two-source permutes between element order (lo: columns 0-15, hi: 16-31) and the split.
HWY_INLINE __m512i EvenColumns() {
  return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
HWY_INLINE __m512i OddColumns() {
  return _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
HWY_INLINE __m512i LowColumns() {  // columns 0-15 from even (0-15) and odd (16-31)
  return _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
}
HWY_INLINE __m512i HighColumns() {
  return _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

// ScaledDotRow for I4 keys (I4RowStepApplies): st[0..3] = q . keys c0..c0 + 3, requesting the
// rows keys.NextKey names into L2 (a row of 128 channels is one line). scales: the 4 rows'
// group scales as f32 (StepScales, dim / group a row).
template <class E, class D>
HWY_INLINE void I4DotRow(D d, const float* HWY_RESTRICT q, const CacheRows<E>& keys, size_t c0,
                         size_t dim, const float* HWY_RESTRICT scales, float* HWY_RESTRICT st) {
  using Rows = CacheRows<E>;
  constexpr size_t kKeys = 4;
  const int log2_group = keys.element.lookup.log2_group;
  const size_t chunks_per_group = (size_t{1} << log2_group) / kI4Chunk;
  const size_t groups = dim >> log2_group;
  const uint8_t* rows[kKeys];
  const char* next_rows[kKeys];
  for (size_t k = 0; k < kKeys; ++k) {
    rows[k] = keys.Row(c0 + k);
    next_rows[k] = keys.NextKey(c0 + k);
  }
  for (const char* row : next_rows) {
    if (const char* tail = UncoveredTail(row, Rows::Bytes(dim))) RequestIntoL2(tail);
  }
  const __m512 table = I4Table();
  const __m512i even_columns = EvenColumns(), odd_columns = OddColumns();
  __m512 a[kKeys];
  for (size_t k = 0; k < kKeys; ++k) a[k] = _mm512_setzero_ps();
  for (size_t chunk = 0, g = 0; chunk < dim / kI4Chunk; ++g) {
    __m512 t[kKeys];
    for (size_t k = 0; k < kKeys; ++k) t[k] = _mm512_setzero_ps();
    for (size_t end = chunk + chunks_per_group; chunk < end; ++chunk) {
      const size_t i = chunk * kI4Chunk;
      if (Rows::Bytes(i) % 64 == 0) {                  // once per line of the rows
        const char* const volatile* next = next_rows;  // see DotBlock
        for (size_t k = 0; k < kKeys; ++k) RequestIntoL2(next[k] + Rows::Bytes(i));
      }
      const __m512 lo = _mm512_loadu_ps(q + i), hi = _mm512_loadu_ps(q + i + 16);
      const __m512 q_even = _mm512_permutex2var_ps(lo, even_columns, hi);
      const __m512 q_odd = _mm512_permutex2var_ps(lo, odd_columns, hi);
#pragma GCC unroll 4
      for (size_t k = 0; k < kKeys; ++k) {
        __m512 even, odd;
        LoadI4Chunk(rows[k] + i / 2, table, even, odd);
        t[k] = _mm512_fmadd_ps(q_even, even, t[k]);
        t[k] = _mm512_fmadd_ps(q_odd, odd, t[k]);
      }
    }
#pragma GCC unroll 4
    for (size_t k = 0; k < kKeys; ++k) {
      a[k] = _mm512_fmadd_ps(t[k], _mm512_set1_ps(scales[k * groups + g]), a[k]);
    }
  }
  using V = hn::Vec<D>;
  StoreFourSums(d, V{a[0]}, V{a[1]}, V{a[2]}, V{a[3]}, st);
}

// ScaledPVRow for I4 values (I4RowStepApplies for the group and head_dim_v): O columns
// [v N, (v + NV) N) = alpha O + sum over `keys` keys of p[k] V[k] (alpha == nullptr: O += ...),
// NV an even number of vectors (whole chunks).
template <size_t NV, class E, class D>
HWY_INLINE void I4PVRow(D d, size_t v, const float* HWY_RESTRICT p, const CacheRows<E>& values,
                        size_t keys, float* HWY_RESTRICT o, const float* HWY_RESTRICT alpha) {
  static_assert(NV == 2 || NV == 4, "whole chunks of 32 columns");
  using Rows = CacheRows<E>;
  constexpr size_t kChunks = NV / 2, N = 16;
  const size_t column = v * N;
  const int log2_group = values.element.lookup.log2_group;
  const Rows rows = values.Columns(column);
  float* out = o + column;
  const __m512 table = I4Table();
  const __m512 scale_o = _mm512_set1_ps(alpha == nullptr ? 1.0f : *alpha);
  __m512 even[kChunks], odd[kChunks];
  {
    const __m512i even_columns = EvenColumns(), odd_columns = OddColumns();
    for (size_t c = 0; c < kChunks; ++c) {
      const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(out + c * kI4Chunk), scale_o);
      const __m512 hi = _mm512_mul_ps(_mm512_loadu_ps(out + c * kI4Chunk + N), scale_o);
      even[c] = _mm512_permutex2var_ps(lo, even_columns, hi);
      odd[c] = _mm512_permutex2var_ps(lo, odd_columns, hi);
    }
  }
  for (size_t k = 0; k < keys; ++k) {
    if (rows.next_values != nullptr) RequestRowIntoL2(rows.NextValue(k), Rows::Bytes(NV * N));
    const uint8_t* HWY_RESTRICT row = rows.Row(k);
    const auto* scale = values.element.ScaleOf(row);
    const __m512 pk = _mm512_set1_ps(p[k]);
    for (size_t c = 0; c < kChunks; ++c) {
      // The chunk's group: a group holds whole chunks.
      const __m512 w =
          _mm512_mul_ps(pk, BroadcastScale(d, scale + ((c * kI4Chunk) >> log2_group)).raw);
      __m512 e, od;
      LoadI4Chunk(row + c * kI4Chunk / 2, table, e, od);
      even[c] = _mm512_fmadd_ps(w, e, even[c]);
      odd[c] = _mm512_fmadd_ps(w, od, odd[c]);
    }
  }
  const __m512i low_columns = LowColumns(), high_columns = HighColumns();
  for (size_t c = 0; c < kChunks; ++c) {
    _mm512_storeu_ps(out + c * kI4Chunk, _mm512_permutex2var_ps(even[c], low_columns, odd[c]));
    _mm512_storeu_ps(out + c * kI4Chunk + N, _mm512_permutex2var_ps(even[c], high_columns, odd[c]));
  }
}

#else
#define SATTN_I4_ROW_STEP 0
#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_I4_ROW_STEP_INL_H_
