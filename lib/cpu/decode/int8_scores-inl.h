// Decoding's integer scores (sattn_attention_options.int8_queries): Q.K^T over an I4 cache by
// AVX512-VNNI's vpdpbusd, for the streamed steps of one or four query rows per kv head
// (decode/stream_tiles-inl.h), on the AVX3 targets of CPUs that have the instruction, and at
// the AVX2 target by vpmaddubsw and vpmaddwd (below).
//
// Each query row is rounded to int8 once per work item (QuantizeQueryRows: scale
// max |q| / 127, nearest even). vpdpbusd adds to each int32 lane the four products of an
// unsigned byte of one operand and a signed byte of the other, so the cache's signed nibbles go
// in offset: s ^ 8 = s + 8, both halves of a byte at once (^ 0x88), then split into the low
// halves (the even channels) and the high ones (the odd channels), which meet the query's even
// and odd channels (QuantizeQueryRows stores them apart). The offset's products, 8 times the
// lane's sum of query bytes, are the lane's starting value negated (the row's `bias`), so the
// sums come out exact. A lane covers 8 channels, so with groups of at least 8 each lane belongs
// to one group: its sum, converted to f32, meets its group's scale (the row's scales spread
// over the lanes by a permute) in one FMA, and the lanes' total times the query's scale is the
// score.
// Cost per key and row, head_dim 128 (64 bytes, one chunk): one load, four byte operations, two
// vpdpbusd, a conversion, a scale spread and an FMA, against the exact path's 8 widenings of 12
// operations and 8 FMAs (ScaledDotRow). The P.V is the exact path's.
// Why not I8: its widening is 2 operations a vector, and on a Zen 4 host (one thread, min of 25
// calls alternated, b1 d128 c32768) the same scheme for I8 keys measured no faster with one
// query row per kv head and 5-15% slower with four, so I8 keeps the exact scores.
// Error: only the query's rounding (the integer sums are exact, each < 2^24 so exact in f32);
// per score at most max |q| / 254 times the sum of |k| over the row (docs/performance.md).
#if defined(STREAMATTN_CPU_DECODE_INT8_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_INT8_SCORES_INL_H_
#undef STREAMATTN_CPU_DECODE_INT8_SCORES_INL_H_
#else
#define STREAMATTN_CPU_DECODE_INT8_SCORES_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/decode/dot_scores-inl.h"
#include "cpu/kv_rows-inl.h"
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Channels per 64 bytes of an I4 row: a chunk, two vpdpbusd operands (its halves).
constexpr size_t kInt8ScoreChunk = 128;

// Rounds rows q[r * ldq ..][0, dim) (r < rows, dim a multiple of kInt8ScoreChunk) to int8 for
// IntScoreStep: q8 (dim bytes per row, each chunk's 64 even channels, then its 64 odd ones),
// the lanes' starting values `bias` (dim / 8 per row) and the scales. A row with a NaN or an
// infinity gets the scale NaN, so its scores are NaN, as on the exact path.
inline void QuantizeQueryRows(const float* q, size_t ldq, size_t rows, size_t dim, int8_t* q8,
                              int32_t* bias, float* scale) {
  const size_t lanes_per_row = dim / 8;
  for (size_t r = 0; r < rows; ++r) {
    const float* x = q + r * ldq;
    int8_t* out = q8 + r * dim;
    float amax = 0.0f;
    bool finite = true;
    for (size_t i = 0; i < dim; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    scale[r] = finite ? amax / 127.0f : NAN;
    const bool divide = finite && amax > 0.0f;
    for (size_t i = 0; i < dim; ++i) {
      const int v = divide ? static_cast<int>(std::nearbyint(x[i] / scale[r])) : 0;
      // Channel 128c + 2j + h goes to byte 128c + 64h + j.
      const size_t at = i / 128 * 128 + (i % 2) * 64 + (i % 128) / 2;
      out[at] = static_cast<int8_t>(std::clamp(v, -127, 127));
    }
    // A lane's bytes: 4 even channels' and the 4 odd ones' beside them.
    for (size_t lane = 0; lane < lanes_per_row; ++lane) {
      int32_t sum = 0;
      for (size_t j = 0; j < 4; ++j) {
        const size_t first = lane / 16 * 128 + (lane % 16) * 4 + j;
        sum += out[first] + out[first + 64];
      }
      bias[r * lanes_per_row + lane] = -8 * sum;
    }
  }
}

// A step's 4 keys for IntScoreStep: their rows, their scales and the rows to request next
// (whose last lines, where a row does not start on a line, are requested here).
template <class E>
struct IntStepKeys {
  static constexpr size_t kKeys = 4;
  const char* next_rows[kKeys];
  const uint8_t* rows[kKeys];
  const typename E::Scale* scales[kKeys];
  IntStepKeys(const CacheRows<E>& keys, size_t c0, size_t dim) {
    for (size_t k = 0; k < kKeys; ++k) {
      next_rows[k] = keys.NextKey(c0 + k);
      rows[k] = reinterpret_cast<const uint8_t*>(keys.Row(c0 + k));
      scales[k] = keys.element.ScaleOf(keys.Row(c0 + k));
    }
    for (const char* next : next_rows) {
      if (const char* tail = UncoveredTail(next, CacheRows<E>::Bytes(dim))) RequestIntoL2(tail);
    }
  }
};

#undef SATTN_INT8_SCORES  // defined once per target
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SATTN_INT8_SCORES 1
#define SATTN_ATTR_AVX512_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

// A row's scales for one chunk, spread over its 16 lanes: lane L covers channels
// chunk * C + 8 L, in group (those) >> log2_group (groups of at least 8 channels). `first` is
// the chunk's first group, `mask` its groups (masked loads read no scale past them).
template <typename S>
SATTN_ATTR_AVX512_VNNI HWY_INLINE __m512 LaneScales(const S* scales, size_t first, __mmask16 mask,
                                                    __m512i lane_group) {
  __m512 s;
  if constexpr (std::is_same_v<S, float>) {
    s = _mm512_maskz_loadu_ps(mask, scales + first);
  } else {
    s = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, scales + first));
  }
  return _mm512_permutexvar_ps(lane_group, s);
}

// Scores of R query rows (1 or 4) against keys c0..c0 + 3 of `keys` (an I4 cache), packed as the
// streamed steps store them (st[key * R + r]), requesting the rows keys.NextKey names into L2 as
// DotBlock does. q8, bias, q_scale: QuantizeQueryRows' output for the R rows.
template <size_t R, class E>
SATTN_ATTR_AVX512_VNNI HWY_NOINLINE void IntScoreStep(const CacheRows<E>& keys, size_t c0,
                                                      size_t dim, const int8_t* HWY_RESTRICT q8,
                                                      const int32_t* HWY_RESTRICT bias,
                                                      const float* HWY_RESTRICT q_scale,
                                                      float* HWY_RESTRICT st) {
  static_assert(R == 1 || R == 4, "one or four rows per kv head");
  static_assert(E::kBits == 4, "I4 keys");
  constexpr size_t C = kInt8ScoreChunk, kKeys = 4;
  const int log2_group = keys.element.lookup.log2_group;
  const size_t bias_stride = dim / 8, chunks = dim / C;
  // Lane L's group within its chunk.
  const int lane_shift = log2_group - 3;
  const __m512i lane_group = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), lane_shift);
  const size_t groups_per_chunk = std::max<size_t>(1, C >> log2_group);
  const __mmask16 group_mask = static_cast<__mmask16>((1u << groups_per_chunk) - 1);
  const IntStepKeys<E> step(keys, c0, dim);
  const char* const* next_rows = step.next_rows;
  const uint8_t* const* rows = step.rows;
  const auto* const* scales = step.scales;
  __m512 acc[kKeys][R];
  for (size_t k = 0; k < kKeys; ++k) {
    for (size_t r = 0; r < R; ++r) acc[k][r] = _mm512_setzero_ps();
  }
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x88));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    const char* const volatile* next = next_rows;  // see DotBlock
    for (size_t k = 0; k < kKeys; ++k) RequestIntoL2(next[k] + chunk * 64);
    // The chunk's query bytes (even channels, then odd) and lane biases, loaded once for the
    // four keys.
    __m512i even[R], odd[R], bias_of[R];
    for (size_t r = 0; r < R; ++r) {
      bias_of[r] = _mm512_loadu_si512(bias + r * bias_stride + chunk * 16);
      even[r] = _mm512_loadu_si512(q8 + r * dim + chunk * C);
      odd[r] = _mm512_loadu_si512(q8 + r * dim + chunk * C + 64);
    }
#pragma GCC unroll 4
    for (size_t k = 0; k < kKeys; ++k) {
      const __m512 lane_scales =
          LaneScales(scales[k], (chunk * C) >> log2_group, group_mask, lane_group);
      const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(rows[k] + chunk * 64), offset);
      const __m512i low = _mm512_and_si512(u, nibble);
      const __m512i high = _mm512_and_si512(_mm512_srli_epi16(u, 4), nibble);
      for (size_t r = 0; r < R; ++r) {
        const __m512i sum =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias_of[r], low, even[r]), high, odd[r]);
        acc[k][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), lane_scales, acc[k][r]);
      }
    }
  }
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  HWY_ALIGN float sums[kKeys * R];
  if constexpr (R == 1) {
    StoreFourSums(d, V{acc[0][0]}, V{acc[1][0]}, V{acc[2][0]}, V{acc[3][0]}, sums);
  } else {
    for (size_t k = 0; k < kKeys; ++k) {
      StoreFourSums(d, V{acc[k][0]}, V{acc[k][1]}, V{acc[k][2]}, V{acc[k][3]}, sums + k * R);
    }
  }
  for (size_t k = 0; k < kKeys; ++k) {
    for (size_t r = 0; r < R; ++r) st[k * R + r] = sums[k * R + r] * q_scale[r];
  }
}

#elif HWY_TARGET == HWY_AVX2
#define SATTN_INT8_SCORES 1

// The AVX2 form: no vpdpbusd, so each 32 bytes of a row (64 channels, half a chunk) go through
// vpmaddubsw (pairs of unsigned x signed byte products summed to 16 bits: at most
// 2 x 15 x 127 in magnitude, never saturating), the even and odd channels' 16-bit sums added
// (at most 7620), and vpmaddwd by ones (pairs of those to 32 bits): each 32-bit lane then holds
// the same 8 channels' sum as a vpdpbusd lane, the same bias completing it. Per 64 channels and
// key: a load, four byte operations, five integer ones, the scale spread, a conversion and an
// FMA, against the exact path's 8 vectors of 4 operations and an FMA each. Four rows take the
// keys two at a time (8 accumulators of 16 registers).

// A row's scales for one half chunk (64 channels), spread over its 8 lanes: lane L covers
// channels 8 L on, in group (those) >> log2_group relative to the half's first group, at
// `scales`; the half has `count` groups (1, 2, 4 or 8). mask32: lanes below count (f32
// scales), mask16: dwords below count / 2 (binary16 scales): masked loads read no scale past
// the half's.
template <typename S>
HWY_INLINE __m256 HalfLaneScales(const S* scales, size_t count, __m256i mask32, __m128i mask16,
                                 __m256i lane_group) {
  __m256 s;
  if constexpr (std::is_same_v<S, float>) {
    s = _mm256_maskload_ps(scales, mask32);
  } else if (count == 1) {
    uint16_t bits;
    std::memcpy(&bits, scales, 2);
    s = _mm256_cvtph_ps(_mm_cvtsi32_si128(bits));
  } else {
    s = _mm256_cvtph_ps(_mm_maskload_epi32(reinterpret_cast<const int*>(scales), mask16));
  }
  return _mm256_permutevar8x32_ps(s, lane_group);
}

template <size_t R, class E>
HWY_NOINLINE void IntScoreStep(const CacheRows<E>& keys, size_t c0, size_t dim,
                               const int8_t* HWY_RESTRICT q8, const int32_t* HWY_RESTRICT bias,
                               const float* HWY_RESTRICT q_scale, float* HWY_RESTRICT st) {
  static_assert(R == 1 || R == 4, "one or four rows per kv head");
  static_assert(E::kBits == 4, "I4 keys");
  constexpr size_t C = kInt8ScoreChunk, kKeys = 4, kBlock = R == 1 ? 4 : 2;
  const int log2_group = keys.element.lookup.log2_group;
  const size_t bias_stride = dim / 8, chunks = dim / C;
  const size_t count = std::max<size_t>(1, (C / 2) >> log2_group);
  const int lane_shift = log2_group - 3;
  const __m256i lane_group =
      _mm256_srli_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), lane_shift);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask32 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
  const __m128i mask16 =
      _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(count / 2)), _mm256_castsi256_si128(lane));
  const IntStepKeys<E> step(keys, c0, dim);
  const char* const* next_rows = step.next_rows;
  const uint8_t* const* rows = step.rows;
  const auto* const* scales = step.scales;
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x88));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  HWY_ALIGN float sums[kKeys * R];
  for (size_t k0 = 0; k0 < kKeys; k0 += kBlock) {
    __m256 acc[kBlock][R];
    for (size_t k = 0; k < kBlock; ++k) {
      for (size_t r = 0; r < R; ++r) acc[k][r] = _mm256_setzero_ps();
    }
    for (size_t chunk = 0; chunk < chunks; ++chunk) {
      if (k0 == 0) {
        const char* const volatile* next = next_rows;  // see DotBlock
        for (size_t k = 0; k < kKeys; ++k) RequestIntoL2(next[k] + chunk * 64);
      }
      for (size_t half = 0; half < 2; ++half) {
        const size_t byte = chunk * 64 + half * 32;  // of the row, and of a row's even bytes
        const size_t first_group = (chunk * C + half * (C / 2)) >> log2_group;
#pragma GCC unroll 4
        for (size_t k = 0; k < kBlock; ++k) {
          const __m256 lane_scales =
              HalfLaneScales(scales[k0 + k] + first_group, count, mask32, mask16, lane_group);
          const __m256i u = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[k0 + k] + byte)), offset);
          const __m256i low = _mm256_and_si256(u, nibble);
          const __m256i high = _mm256_and_si256(_mm256_srli_epi16(u, 4), nibble);
          for (size_t r = 0; r < R; ++r) {
            const int8_t* q = q8 + r * dim + chunk * C + half * 32;
            const __m256i even = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
            const __m256i odd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64));
            const __m256i pairs =
                _mm256_add_epi16(_mm256_maddubs_epi16(low, even), _mm256_maddubs_epi16(high, odd));
            const __m256i sum =
                _mm256_add_epi32(_mm256_madd_epi16(pairs, ones),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                     bias + r * bias_stride + chunk * 16 + half * 8)));
            acc[k][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), lane_scales, acc[k][r]);
          }
        }
      }
    }
    const hn::ScalableTag<float> d;
    using V = hn::Vec<decltype(d)>;
    if constexpr (R == 1) {
      StoreFourSums(d, V{acc[0][0]}, V{acc[1][0]}, V{acc[2][0]}, V{acc[3][0]}, sums);
    } else {
      for (size_t k = 0; k < kBlock; ++k) {
        StoreFourSums(d, V{acc[k][0]}, V{acc[k][1]}, V{acc[k][2]}, V{acc[k][3]},
                      sums + (k0 + k) * R);
      }
    }
  }
  for (size_t k = 0; k < kKeys; ++k) {
    for (size_t r = 0; r < R; ++r) st[k * R + r] = sums[k * R + r] * q_scale[r];
  }
}

#else
#define SATTN_INT8_SCORES 0
#endif

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_INT8_SCORES_INL_H_
