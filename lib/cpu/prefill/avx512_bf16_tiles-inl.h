// The prefill tile kernel of native bf16 dot products (AVX512_BF16's vdpbf16ps: AMD Zen 4 and
// later, Intel Cooper Lake, Sapphire Rapids and later), for calls whose q, k and v are all
// bf16, on the AVX3 targets of CPUs that have the instruction (Avx512Bf16Supported).
//
// vdpbf16ps adds to each f32 lane the two products of a pair of bf16 lanes:
//   acc[i] += a[2i + 1] * b[2i + 1], then acc[i] += a[2i] * b[2i]
// each product exact in f32, each sum rounded to nearest even; bf16 inputs that are subnormal
// count as zero and subnormal results flush to zero. The layouts (operands in pairs along the
// sums, P rounded to bf16 and paired by keys, V paired by keys) and the kernel around these
// micro-kernels are PairedBf16Tiles' (prefill/paired_tiles-inl.h), shared with Arm's BFDOT.
// Cost per key and head: head_dim / 2 instructions per vector of rows for each product, half
// the f32 FMA kernel's, on f32 accumulators in the same register blocks (8 keys x 3 vectors
// of rows for the scores, 6 rows x 4 vectors of head_dim for the P.V); plus, per tile, one
// pass over V to repack it and one over P to round and pair it. At most 64 rows per kv head
// (decoding) skip the repacking: Bf16InPlacePVBlock pairs V's rows in registers, 2 shuffles
// per 16 columns beside 16 vdpbf16ps, 16 rows a pass. Memory: those passes would meet
// each tile's lines cold (MLA at 16 heads reads 30 flops' worth of cache per byte, and the
// repacking runs first), so the score block asks for the next tile's lines while it multiplies.
// Error: Q.K^T as exact as the f32 kernel's (bf16 products are exact in f32; only the order
// of the sums differs); P rounded to bf16 (relative error at most 2^-8 per weight) adds about
// 1e-3 of the output's scale (docs/performance.md). kF32PV keeps P in f32 for the P.V (V
// converted to f32 as the f32 kernel does), for callers who want the f32 kernel's accuracy.
#if defined(STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
#undef STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/prefill/paired_tiles-inl.h"
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

#undef SATTN_AVX512_BF16_TILES  // defined once per target
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SATTN_AVX512_BF16_TILES 1
// This target's instructions and AVX512_BF16, for the functions that use vdpbf16ps.
#define SATTN_ATTR_AVX512_BF16 __attribute__((target(HWY_TARGET_STR ",avx512bf16")))

// The scores of 8 keys (rows of K along head_dim, `ldk` bf16 apart, 2 * pairs long) against
// NV vectors of 16 query rows (the panel's pairs: pair j of row r at q[j * ldq + r], ldq
// 32-bit words apart), scaled: C[m][r] = scale * sum_j K[m] pair j . Q[r] pair j, at
// c + m * ldc + r. 8 x NV accumulators, as the f32 kernel's block (kMrS x kNvS).
template <size_t NV>
SATTN_ATTR_AVX512_BF16 HWY_NOINLINE void Bf16ScoreBlock(const uint16_t* HWY_RESTRICT k, size_t ldk,
                                                        const uint32_t* HWY_RESTRICT q, size_t ldq,
                                                        size_t pairs, float scale,
                                                        float* HWY_RESTRICT c, size_t ldc) {
  constexpr size_t kKeys = 8;
  __m512 acc[kKeys][NV];
#pragma GCC unroll 8
  for (size_t m = 0; m < kKeys; ++m) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  }
  for (size_t j0 = 0; j0 < pairs; j0 += 16) {
    // The same keys of the next tile (kKeysPerTile on), a line (16 pairs) of each at a time,
    // into L2: where K is read in place from the cache (MLA) the next tile's V repacking and
    // scores would meet those lines cold from memory (perf: the repacking's loads took 3/4 of
    // its time), and asking a tile ahead, paced by the products, lets them arrive meanwhile.
    // A prefetch never faults, so an address past the cache or the tile costs nothing wrong.
    const uintptr_t ahead =
        reinterpret_cast<uintptr_t>(k) + (kKeysPerTile * ldk + 2 * j0) * sizeof(uint16_t);
#pragma GCC unroll 8
    for (size_t m = 0; m < kKeys; ++m) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + m * ldk * sizeof(uint16_t)), _MM_HINT_T1);
    }
    const size_t j_end = j0 + 16 < pairs ? j0 + 16 : pairs;
    for (size_t j = j0; j < j_end; ++j) {
      __m512bh qv[NV];
#pragma GCC unroll 4
      for (size_t v = 0; v < NV; ++v) {
        qv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + j * ldq + 16 * v));
      }
#pragma GCC unroll 8
      for (size_t m = 0; m < kKeys; ++m) {
        const __m512bh kp = reinterpret_cast<__m512bh>(
            _mm512_broadcastd_epi32(_mm_loadu_si32(k + m * ldk + 2 * j)));
#pragma GCC unroll 4
        for (size_t v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], qv[v], kp);
      }
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (size_t m = 0; m < kKeys; ++m) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) {
      _mm512_storeu_ps(c + m * ldc + 16 * v, _mm512_mul_ps(acc[m][v], s));
    }
  }
}

// O = alpha O + P V for MR rows x NV vectors of 16 columns of head_dim_v, over `pairs` pairs of
// keys: P's pair j of row r at p[j * ldp + r] (two bf16 in a 32-bit word), V's pair j of
// column x at v[j * ldv + x]; O row r at o + r * ldo. alpha == nullptr: O += P V.
template <size_t MR, size_t NV>
SATTN_ATTR_AVX512_BF16 HWY_NOINLINE void Bf16PVBlock(const uint32_t* HWY_RESTRICT p, size_t ldp,
                                                     const uint32_t* HWY_RESTRICT v, size_t ldv,
                                                     size_t pairs, float* HWY_RESTRICT o,
                                                     size_t ldo, const float* HWY_RESTRICT alpha) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha == nullptr ? 1.0f : alpha[r]);
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) {
      acc[r][x] = _mm512_mul_ps(_mm512_loadu_ps(o + r * ldo + 16 * x), a);
    }
  }
  for (size_t j = 0; j < pairs; ++j) {
    __m512bh vv[NV];
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) {
      vv[x] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(v + j * ldv + 16 * x));
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < MR; ++r) {
      const __m512bh pr =
          reinterpret_cast<__m512bh>(_mm512_broadcastd_epi32(_mm_loadu_si32(p + j * ldp + r)));
#pragma GCC unroll 4
      for (size_t x = 0; x < NV; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], vv[x], pr);
    }
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) _mm512_storeu_ps(o + r * ldo + 16 * x, acc[r][x]);
  }
}

// One key pair's products added to the MR x NV accumulators: vv[x] the pair's 16 columns from
// column 16x (key 2j in the low halves), P's pair at p[r] for row r.
template <size_t MR, size_t NV>
SATTN_ATTR_AVX512_BF16 HWY_INLINE void AddPairProducts(__m512 (&acc)[MR][NV],
                                                       const __m512bh (&vv)[NV],
                                                       const uint32_t* HWY_RESTRICT p) {
#pragma GCC unroll 16
  for (size_t r = 0; r < MR; ++r) {
    const __m512bh pr = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(p[r])));
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], vv[x], pr);
  }
}

// Bf16PVBlock with V read where it lies rather than repacked: key c's row (bf16) at
// v + c * ldv, `keys` keys (P's pairs as Bf16PVBlock's, (keys + 1) / 2 of them). Each pair's two
// rows are interleaved in registers (vinserti64x4, vpermw: 2 shuffles per 16 columns, beside
// MR vdpbf16ps) into the words the repacking writes: key 2j in the low half, a missing odd key
// zero; so every output's sums, and their order, are Bf16PVBlock's on the repacked tile.
// Why: with few rows per kv head (MLA decode: 16) the repacking (64 KiB read and written per
// 64-key tile) cost ~12% of the tile's products, and a pass of 16 rows reads V once from L2
// where 6 + 6 + 4 rows read the repacked tile three times.
template <size_t MR, size_t NV>
SATTN_ATTR_AVX512_BF16 HWY_NOINLINE void Bf16InPlacePVBlock(
    const uint32_t* HWY_RESTRICT p, size_t ldp, const uint16_t* HWY_RESTRICT v, size_t ldv,
    size_t keys, float* HWY_RESTRICT o, size_t ldo, const float* HWY_RESTRICT alpha) {
  // Word 2i from the low row's element i, word 2i + 1 from the high row's (elements 16 on).
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (size_t r = 0; r < MR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha == nullptr ? 1.0f : alpha[r]);
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) {
      acc[r][x] = _mm512_mul_ps(_mm512_loadu_ps(o + r * ldo + 16 * x), a);
    }
  }
  const size_t pairs = keys / 2;
  for (size_t j = 0; j < pairs; ++j) {
    const uint16_t* low = v + 2 * j * ldv;
    __m512bh vv[NV];
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) {
      const __m512i both = _mm512_inserti64x4(
          _mm512_zextsi256_si512(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(low + 16 * x))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(low + ldv + 16 * x)), 1);
      vv[x] = reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(interleave, both));
    }
    AddPairProducts<MR, NV>(acc, vv, p + j * ldp);
  }
  if (keys % 2 != 0) {
    const uint16_t* low = v + 2 * pairs * ldv;
    __m512bh vv[NV];
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) {
      vv[x] = reinterpret_cast<__m512bh>(_mm512_cvtepu16_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(low + 16 * x))));
    }
    AddPairProducts<MR, NV>(acc, vv, p + pairs * ldp);
  }
#pragma GCC unroll 16
  for (size_t r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) _mm512_storeu_ps(o + r * ldo + 16 * x, acc[r][x]);
  }
}

#undef SATTN_ATTR_AVX512_BF16

// Whether this CPU has vdpbf16ps (the AVX3 target already has the OS's AVX-512 state).
inline bool Avx512Bf16Supported() { return __builtin_cpu_supports("avx512bf16"); }

// The micro-kernels for PairedBf16Tiles: vectors of 16 query rows (scores) and of 16 columns
// of head_dim_v (P.V), blocks as the f32 kernel's (8 keys x 3 vectors, 6 rows x 4 vectors).
struct Avx512Bf16Blocks {
  static constexpr const char* kName = "avx512-bf16";
  static constexpr DType kDType = DType::kBF16;
  static bool Supported() { return Avx512Bf16Supported(); }
  // A row's pair in one 32-bit word, channel 2j in the low half (vdpbf16ps' pairs).
  static size_t QueryHalf(size_t r, size_t parity) { return 2 * r + parity; }
  static constexpr size_t kKeys = 8, kRows = 16, kScoreVectors = 3;
  static constexpr size_t kColumns = 16, kPVRows = kMrP, kPVVectors = 4;
  template <size_t NV>
  static constexpr auto ScoreBlock = &Bf16ScoreBlock<NV>;
  template <size_t MR, size_t NV>
  static constexpr auto PVBlock = &Bf16PVBlock<MR, NV>;
  // The P.V that reads V in place (PairedBf16Values::ReadsValuesInPlace) for kv heads of at
  // most kInPlaceRows query rows, in blocks of up to kInPlacePVRows x kInPlacePVVectors.
  // 64 rows: the prefill driver's decode items. In place vs repacked (Zen 4, 1 thread, MLA
  // b1 c4096): 16 heads -10 to -12%, 32 -5 to -7%, 64 -3 to -4%, 128 -1.4% (noise: the
  // repacking is shared by 128 rows, so larger items keep it); 8 x 2 blocks (two passes for 16
  // rows) timed as 16 x 1.
  static constexpr size_t kInPlaceRows = 64, kInPlacePVRows = 16, kInPlacePVVectors = 1;
  template <size_t MR, size_t NV>
  static constexpr auto InPlacePVBlock = &Bf16InPlacePVBlock<MR, NV>;
};

template <bool kF32PV>
using Avx512Bf16Tiles = PairedBf16Tiles<Avx512Bf16Blocks, kF32PV>;

#else
#define SATTN_AVX512_BF16_TILES 0
#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
