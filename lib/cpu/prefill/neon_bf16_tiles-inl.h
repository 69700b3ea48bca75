// The prefill tile kernel of Arm's native bf16 dot products (BFDOT, FEAT_BF16: Neoverse V1,
// V2 and N2, Graviton 3 and 4, Cortex-A510, A710, X2 and later), for calls whose q, k and v are
// all bf16, on every aarch64 target (NEON, SVE, SVE2 at any vector length: the micro-kernels are
// NEON's, on 128-bit registers) of CPUs that report HWCAP2_BF16.
//
// BFDOT (by element) adds to each f32 lane i of the accumulator the two products of lane i's
// bf16 pair of the first operand with one pair of the second, chosen by an immediate:
//   acc[i] = RO(acc[i] + RO(a[2i] * b[2l] + a[2i + 1] * b[2l + 1]))
// the products exact (bf16 significands have 8 bits), RO rounding to odd (truncate, then set
// the last bit of an inexact result; an overflow is infinite), subnormal inputs and results
// flushed to zero, NaNs the default NaN; so says the Arm ARM where FEAT_EBF16 is absent or
// FPCR.EBF is 0, which Linux leaves it at. The layouts are PairedBf16Tiles'
// (prefill/paired_tiles-inl.h), shared with AVX512_BF16: the immediate picks a K pair from a
// register of four (scores: NeonPairScoreBlock<BfdotPairs>, prefill/neon_pair_scores-inl.h) or
// a row's P pair from a register of four rows (P.V).
// Cost per key and head: head_dim / 2 BFDOTs per vector of 4 rows for the scores (8 products
// each, twice the f32 kernel's FMLA), in blocks of 8 keys x 2 vectors of rows (16
// accumulators, the queries of 4 pairs held in 8 registers, one load of K per key and 4 pairs);
// the same for the P.V in blocks of 8 rows x 3 vectors of head_dim_v (24 accumulators, per key
// pair 3 loads of V and 2 of P); plus per tile one pass over V to pair it and one over P.
// SVE's BFDOT is not used: on the cores that have it, SVE and NEON issue the same bf16 products
// per cycle (Neoverse V1's two 256-bit pipes are its four 128-bit ones), and BFMMLA awaits a
// core to measure it on.
// Error: as the AVX512_BF16 kernel's (P rounded to bf16, docs/performance.md); round-to-odd
// sums differ from nearest-even ones by at most an ulp of f32 each.
#if defined(STREAMATTN_CPU_PREFILL_NEON_BF16_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_NEON_BF16_TILES_INL_H_
#undef STREAMATTN_CPU_PREFILL_NEON_BF16_TILES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_NEON_BF16_TILES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/dtype.h"
#include "cpu/arm_features.h"
#include "cpu/prefill/native_tiles-inl.h"
#include "cpu/prefill/neon_pair_scores-inl.h"
#include "cpu/prefill/paired_tiles-inl.h"
#include "hwy/highway.h"

#if HWY_ARCH_ARM_A64
#include <arm_neon.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

#undef SATTN_NEON_BF16_TILES  // defined once per target
#if SATTN_ARM_NATIVE_TARGET
#define SATTN_NEON_BF16_TILES 1
// BFDOT's intrinsics need at least Armv8.2-A with BF16 (GCC's arm_neon.h declares them so);
// these functions use NEON registers only, whatever the target's own attribute.
#define SATTN_ATTR_NEON_BF16 __attribute__((target("arch=armv8.2-a+bf16")))

// acc[v] += BFDOT of a[v]'s pairs with pair kLane of b, for NV vectors.
template <int kLane, size_t NV>
SATTN_ATTR_NEON_BF16 HWY_INLINE void DotWithPair(float32x4_t (&acc)[NV],
                                                 const bfloat16x8_t (&a)[NV], bfloat16x8_t b) {
#pragma GCC unroll 4
  for (size_t v = 0; v < NV; ++v) acc[v] = vbfdotq_laneq_f32(acc[v], a[v], b, kLane);
}

SATTN_ATTR_NEON_BF16 HWY_INLINE bfloat16x8_t LoadPairs(const uint32_t* p) {
  return vreinterpretq_bf16_u32(vld1q_u32(p));
}

// BFDOT for NeonPairScoreBlock: each query row's pair of channels (a 32-bit lane) times the
// key's pair kPair.
struct BfdotPairs {
  using Vec = bfloat16x8_t;
  static SATTN_ATTR_NEON_BF16 HWY_INLINE Vec Load(const uint16_t* p) {
    return vreinterpretq_bf16_u16(vld1q_u16(p));
  }
  template <int kPair, size_t NV>
  static SATTN_ATTR_NEON_BF16 HWY_INLINE void Step(float32x4_t (&acc)[NV], const Vec (&q)[NV],
                                                   Vec k) {
    DotWithPair<kPair>(acc, q, k);
  }
};

// Row kR of a P.V block: acc[kR][x] += BFDOT of V's pairs vv[x] with row kR's P pair, lane
// kR % 4 of the register of its four rows.
template <size_t MR, size_t NV, size_t... kR>
SATTN_ATTR_NEON_BF16 HWY_INLINE void PairedPVRows(float32x4_t (&acc)[MR][NV],
                                                  const bfloat16x8_t (&vv)[NV],
                                                  const bfloat16x8_t* pr,
                                                  std::index_sequence<kR...>) {
  (DotWithPair<static_cast<int>(kR % 4)>(acc[kR], vv, pr[kR / 4]), ...);
}

// O = alpha O + P V for MR rows x NV vectors of 4 columns of head_dim_v, over `pairs` pairs of
// keys in ascending order: P's pair j of row r at p[j * ldp + r] (two bf16 in a 32-bit word),
// V's pair j of column x at v[j * ldv + x]; O row r at o + r * ldo. alpha == nullptr:
// O += P V. P is read in whole registers of 4 rows: up to 3 words past row MR - 1 of each pair
// must be readable (the scores buffer holds twice the pairs' rows).
template <size_t MR, size_t NV>
SATTN_ATTR_NEON_BF16 HWY_NOINLINE void NeonBf16PVBlock(const uint32_t* HWY_RESTRICT p, size_t ldp,
                                                       const uint32_t* HWY_RESTRICT v, size_t ldv,
                                                       size_t pairs, float* HWY_RESTRICT o,
                                                       size_t ldo,
                                                       const float* HWY_RESTRICT alpha) {
  constexpr size_t kGroups = (MR + 3) / 4;
  float32x4_t acc[MR][NV];
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
    const float a = alpha == nullptr ? 1.0f : alpha[r];
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) acc[r][x] = vmulq_n_f32(vld1q_f32(o + r * ldo + 4 * x), a);
  }
  for (size_t j = 0; j < pairs; ++j) {
    bfloat16x8_t vv[NV], pr[kGroups];
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) vv[x] = LoadPairs(v + j * ldv + 4 * x);
#pragma GCC unroll 2
    for (size_t g = 0; g < kGroups; ++g) pr[g] = LoadPairs(p + j * ldp + 4 * g);
    PairedPVRows(acc, vv, pr, std::make_index_sequence<MR>());
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) vst1q_f32(o + r * ldo + 4 * x, acc[r][x]);
  }
}

#undef SATTN_ATTR_NEON_BF16

// The micro-kernels for PairedBf16Tiles: vectors of 4 query rows (scores) and of 4 columns of
// head_dim_v (P.V), on every aarch64 target whatever its own vector length.
struct NeonBf16Blocks {
  static constexpr const char* kName = "neon-bf16";
  static constexpr DType kDType = DType::kBF16;
  static bool Supported() { return ArmHasBf16(); }
  // A row's pair in one 32-bit word, channel 2j in the low half (BFDOT's pairs).
  static size_t QueryHalf(size_t r, size_t parity) { return 2 * r + parity; }
  static constexpr size_t kKeys = 8, kRows = 4, kScoreVectors = 2;
  static constexpr size_t kColumns = 4, kPVRows = 8, kPVVectors = 3;
  template <size_t NV>
  static constexpr auto ScoreBlock = &NeonPairScoreBlock<BfdotPairs, NV>;
  template <size_t MR, size_t NV>
  static constexpr auto PVBlock = &NeonBf16PVBlock<MR, NV>;
  static constexpr size_t kInPlaceRows = 0;  // V always repacked (no in-place P.V block)
};

template <bool kF32PV>
using NeonBf16Tiles = PairedBf16Tiles<NeonBf16Blocks, kF32PV>;

#else
#define SATTN_NEON_BF16_TILES 0
#endif  // SATTN_ARM_NATIVE_TARGET

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_NEON_BF16_TILES_INL_H_
