// Decoding's integer scores (sattn_attention_options.int8_queries): Q.K^T over an I8 or I4
// cache by AVX512-VNNI's vpdpbusd, for the streamed steps of one or four query rows per kv head
// (decode/stream_tiles-inl.h), on the AVX3 targets of CPUs that have the instruction.
//
// Each query row is rounded to int8 once per work item (QuantizeQueryRows: scale
// max |q| / 127, nearest even). vpdpbusd adds to each int32 lane the four products of an
// unsigned byte of one operand and a signed byte of the other, so the cache's signed values go
// in offset by a constant: an I8 value k as k ^ 0x80 = k + 128, an I4 nibble s as s ^ 8 = s + 8
// (both halves of a byte at once, then split). The offset's products, 128 (or 8) times the
// lane's sum of query bytes, are the lane's starting value negated (the row's `bias`), so the
// sums come out exact. A lane covers 4 channels (I8) or 8 (I4: the byte's low halves against
// the query's even channels, the high halves against its odd ones, which QuantizeQueryRows
// stores apart), so with groups of at least that many each lane belongs to one group: its sum,
// converted to f32, meets its group's scale (the row's scales spread over the lanes by a
// permute) in one FMA, and the lanes' total times the query's scale is the score.
// Cost per key and row, head_dim 128: I8 two 64-byte loads, two XORs, two vpdpbusd, and per
// chunk of 64 channels a conversion, a scale spread and an FMA, against 8 widening loads,
// 8 conversions and 8 FMAs of the exact path (ScaledDotRow); I4 one load, four byte operations
// and two vpdpbusd for all 128 channels. The P.V is the exact path's.
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
#include <type_traits>

#include "core/attention_args.h"
#include "core/dtype.h"
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

// Channels per 64 bytes of a row: a chunk, one vpdpbusd operand (two for I4's halves).
template <class E>
constexpr size_t Int8ChunkChannels() {
  return E::kBits == 4 ? 128 : 64;
}

// Rounds rows q[r * ldq ..][0, dim) (r < rows) to int8 for IntScoreStep: q8 (dim bytes per
// row; for an I4 cache (i4) each 128 channels as their 64 even ones, then their 64 odd ones),
// the lanes'
// starting values `bias` (dim / 4 per row for I8, dim / 8 for I4) and the scales. A row with a
// NaN or an infinity gets the scale NaN, so its scores are NaN, as on the exact path.
inline void QuantizeQueryRows(bool i4, const float* q, size_t ldq, size_t rows, size_t dim,
                              int8_t* q8, int32_t* bias, float* scale) {
  const bool kI4 = i4;
  const size_t lanes_per_row = dim / (kI4 ? 8 : 4);
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
      // I4: channel 128c + 2j + h goes to byte 128c + 64h + j.
      const size_t at = kI4 ? i / 128 * 128 + (i % 2) * 64 + (i % 128) / 2 : i;
      out[at] = static_cast<int8_t>(std::clamp(v, -127, 127));
    }
    // A lane's bytes: 4 consecutive ones of q8 (I8), or 4 even and the 4 odd beside them (I4).
    for (size_t lane = 0; lane < lanes_per_row; ++lane) {
      int32_t sum = 0;
      for (size_t j = 0; j < 4; ++j) {
        if (kI4) {
          const size_t chunk = lane / 16, first = chunk * 128 + (lane % 16) * 4 + j;
          sum += out[first] + out[first + 64];
        } else {
          sum += out[lane * 4 + j];
        }
      }
      bias[r * lanes_per_row + lane] = -(kI4 ? 8 : 128) * sum;
    }
  }
}

#undef SATTN_INT8_SCORES  // defined once per target
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SATTN_INT8_SCORES 1
#define SATTN_ATTR_AVX512_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

// The scales of a row's groups in chunk `chunk`, spread over its 16 lanes: lane L covers
// channels chunk * C + L * C / 16, in group (those) >> log2_group (groups of at least C / 16
// channels). Masked loads read no scale past the chunk's.
template <class E, typename S>
SATTN_ATTR_AVX512_VNNI HWY_INLINE __m512 LaneScales(const S* scales, size_t chunk, int log2_group,
                                                    __m512i lane_group) {
  constexpr size_t C = Int8ChunkChannels<E>();
  const size_t first = (chunk * C) >> log2_group;
  const size_t groups = std::max<size_t>(1, C >> log2_group);
  const __mmask16 mask = static_cast<__mmask16>((1u << groups) - 1);
  __m512 s;
  if constexpr (std::is_same_v<S, float>) {
    s = _mm512_maskz_loadu_ps(mask, scales + first);
  } else {
    s = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, scales + first));
  }
  return _mm512_permutexvar_ps(lane_group, s);
}

// Scores of R query rows (1 or 4) against keys c0..c0 + 3 of `keys`, packed as the streamed
// steps store them (st[key * R + r]), requesting the rows keys.NextKey names into L2 as
// DotBlock does. q8, bias, q_scale: QuantizeQueryRows' output for the R rows.
template <size_t R, class E>
SATTN_ATTR_AVX512_VNNI HWY_NOINLINE void IntScoreStep(const CacheRows<E>& keys, size_t c0,
                                                      size_t dim, const int8_t* HWY_RESTRICT q8,
                                                      const int32_t* HWY_RESTRICT bias,
                                                      const float* HWY_RESTRICT q_scale,
                                                      float* HWY_RESTRICT st) {
  static_assert(R == 1 || R == 4, "one or four rows per kv head");
  using Rows = CacheRows<E>;
  constexpr size_t C = Int8ChunkChannels<E>(), kKeys = 4;
  const int log2_group = keys.element.lookup.log2_group;
  const size_t bias_stride = dim / (C / 16), chunks = dim / C;
  // Lane L's group within its chunk.
  const int lane_shift = log2_group - (E::kBits == 4 ? 3 : 2);
  const __m512i lane_group = _mm512_srli_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), lane_shift);
  const char* next_rows[kKeys];
  const uint8_t* rows[kKeys];
  const typename E::Scale* scales[kKeys];
  for (size_t k = 0; k < kKeys; ++k) {
    next_rows[k] = keys.NextKey(c0 + k);
    rows[k] = reinterpret_cast<const uint8_t*>(keys.Row(c0 + k));
    scales[k] = keys.element.ScaleOf(keys.Row(c0 + k));
  }
  for (const char* next : next_rows) {
    if (const char* tail = UncoveredTail(next, Rows::Bytes(dim))) RequestIntoL2(tail);
  }
  __m512 acc[kKeys][R];
  for (size_t k = 0; k < kKeys; ++k) {
    for (size_t r = 0; r < R; ++r) acc[k][r] = _mm512_setzero_ps();
  }
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(E::kBits == 4 ? 0x88 : 0x80));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    const char* const volatile* next = next_rows;  // see DotBlock
    for (size_t k = 0; k < kKeys; ++k) RequestIntoL2(next[k] + chunk * 64);
    // The chunk's query bytes and lane biases, loaded once for the four keys (I4: the even
    // channels' bytes, then the odd ones').
    constexpr size_t kHalves = E::kBits == 4 ? 2 : 1;
    __m512i q[R][kHalves], bias_of[R];
    for (size_t r = 0; r < R; ++r) {
      bias_of[r] = _mm512_loadu_si512(bias + r * bias_stride + chunk * 16);
      for (size_t half = 0; half < kHalves; ++half) {
        q[r][half] = _mm512_loadu_si512(q8 + r * dim + chunk * C + half * 64);
      }
    }
#pragma GCC unroll 4
    for (size_t k = 0; k < kKeys; ++k) {
      const __m512 lane_scales = LaneScales<E>(scales[k], chunk, log2_group, lane_group);
      const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(rows[k] + chunk * 64), offset);
      for (size_t r = 0; r < R; ++r) {
        __m512i sum;
        if constexpr (E::kBits == 8) {
          sum = _mm512_dpbusd_epi32(bias_of[r], u, q[r][0]);
        } else {
          const __m512i low = _mm512_and_si512(u, nibble);
          const __m512i high = _mm512_and_si512(_mm512_srli_epi16(u, 4), nibble);
          sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias_of[r], low, q[r][0]), high,
                                    q[r][kHalves - 1]);
        }
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

#else
#define SATTN_INT8_SCORES 0
#endif

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_INT8_SCORES_INL_H_
