// The prefill tile kernel of Arm's widening f16 multiply-adds (FMLAL and FMLAL2, FEAT_FHM:
// Neoverse V1, V2 and N2, Graviton 3 and 4, Cortex-A510, A710, X2 and later, Apple M1 and later;
// not Cortex-A55, A76 or Neoverse N1, which keep the f32 kernel), for calls whose q, k and v are
// all f16, on every aarch64 target (NEON, SVE, SVE2 at any vector length: the micro-kernels are
// NEON's) of CPUs that report HWCAP_ASIMDFHM.
//
// FMLAL (by element) multiplies the low four f16 lanes of one register (FMLAL2: the high four)
// by one f16 lane of another, chosen by an immediate, and adds each product to an f32 lane:
//   acc[i] = RN(acc[i] + a[i] * b[l])            (FMLAL2: a[4 + i])
// the product exact in f32 (11-bit significands), one rounding to nearest even, subnormals
// kept (FPCR.FZ and FZ16 are 0 under Linux). So sums stay f32 sums of exact products: unlike
// f16 FMLA, nothing is accumulated in f16. The scores take Q in pairs of channels
// (PairedScores, prefill/paired_tiles-inl.h): a register holds 4 rows of channel 2j (the low
// half, for FMLAL) and the same rows of channel 2j + 1 (the high half, for FMLAL2), K rows read
// as they are, 8 channels to a register (NeonPairScoreBlock<FmlalPairs>, the neon-bf16 kernel's
// block with FMLAL's step, prefill/neon_pair_scores-inl.h). The P.V rounds P to f16 in place
// (nearest even) and reads V rows as they are: a register of 8 columns serves FMLAL (4 columns) and
// FMLAL2 (the next 4), the row's probability picked from a register of 8 rows. Cost per key and
// head: head_dim FMLALs per vector of 4 rows for the scores (4 products each, as many as the f32
// kernel's FMLA: the gain is K and V read as 16-bit, half the loads and no conversion to f32), in
// blocks of 8 keys x 2 vectors of rows; the P.V in blocks of 8 rows x 3 vectors of head_dim_v (24
// accumulators; per key 2 loads of V and 1 of P); plus per tile one pass over P to round it. Error:
// Q.K^T as exact as the f32 kernel's (only the order of the sums may differ); P rounded to f16
// (relative error at most 2^-11 per weight, absolute 2^-25 below 2^-14) adds an eighth of the bf16
// kernels' error, about 2e-4 of the output's scale (docs/performance.md). kF32PV keeps P in f32.
#if defined(STREAMATTN_CPU_PREFILL_NEON_FP16_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_NEON_FP16_TILES_INL_H_
#undef STREAMATTN_CPU_PREFILL_NEON_FP16_TILES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_NEON_FP16_TILES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/attention_args.h"
#include "core/dtype.h"
#include "cpu/arm_features.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/prefill/native_tiles-inl.h"
#include "cpu/prefill/neon_pair_scores-inl.h"
#include "cpu/prefill/paired_tiles-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

#if HWY_ARCH_ARM_A64
#include <arm_neon.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef SATTN_NEON_FP16_TILES  // defined once per target
#if SATTN_ARM_NATIVE_TARGET
#define SATTN_NEON_FP16_TILES 1
// FMLAL's intrinsics need at least Armv8.2-A with FP16FML (GCC's arm_neon.h declares them
// so); these functions use NEON registers only, whatever the target's own attribute.
#define SATTN_ATTR_NEON_FHM __attribute__((target("arch=armv8.2-a+fp16fml")))

SATTN_ATTR_NEON_FHM HWY_INLINE float16x8_t LoadHalves(const uint16_t* p) {
  return vreinterpretq_f16_u16(vld1q_u16(p));
}

// FMLAL and FMLAL2 for NeonPairScoreBlock: channels 2j and 2j + 1 of 4 rows (the low and high
// halves of q[v]) times the key's pair kPair, lanes 2 kPair and 2 kPair + 1 of k.
struct FmlalPairs {
  using Vec = float16x8_t;
  static SATTN_ATTR_NEON_FHM HWY_INLINE Vec Load(const uint16_t* p) { return LoadHalves(p); }
  template <int kPair, size_t NV>
  static SATTN_ATTR_NEON_FHM HWY_INLINE void Step(float32x4_t (&acc)[NV], const Vec (&q)[NV],
                                                  Vec k) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) {
      acc[v] = vfmlalq_laneq_low_f16(acc[v], q[v], k, 2 * kPair);
      acc[v] = vfmlalq_laneq_high_f16(acc[v], q[v], k, 2 * kPair + 1);
    }
  }
};

// One row of a P.V block: acc[x] += V's columns (vector x: the low or high half of vv[x / 2])
// times the row's probability, lane kLane of pr.
template <int kLane, size_t NV>
SATTN_ATTR_NEON_FHM HWY_INLINE void WidenedPVRow(float32x4_t (&acc)[NV], const float16x8_t* vv,
                                                 float16x8_t pr) {
#pragma GCC unroll 4
  for (size_t x = 0; x < NV; ++x) {
    acc[x] = x % 2 == 0 ? vfmlalq_laneq_low_f16(acc[x], vv[x / 2], pr, kLane)
                        : vfmlalq_laneq_high_f16(acc[x], vv[x / 2], pr, kLane);
  }
}

template <size_t MR, size_t NV, size_t... kR>
SATTN_ATTR_NEON_FHM HWY_INLINE void WidenedPVRows(float32x4_t (&acc)[MR][NV], const float16x8_t* vv,
                                                  float16x8_t pr, std::index_sequence<kR...>) {
  (WidenedPVRow<static_cast<int>(kR)>(acc[kR], vv, pr), ...);
}

// O = alpha O + P V for MR <= 8 rows x NV vectors of 4 columns of head_dim_v, over `keys`
// keys in ascending order: P's key c of row r at p[c * ldp + r] (f16), V's key c at
// v + c * ldv (f16); O row r at o + r * ldo. alpha == nullptr: O += P V. P is read in whole
// registers of 8 rows: up to 7 halves past row MR - 1 of each key must be readable (the scores
// buffer holds twice the keys' rows of halves).
template <size_t MR, size_t NV>
SATTN_ATTR_NEON_FHM HWY_NOINLINE void NeonFp16PVBlock(const uint16_t* HWY_RESTRICT p, size_t ldp,
                                                      const uint16_t* HWY_RESTRICT v, size_t ldv,
                                                      size_t keys, float* HWY_RESTRICT o,
                                                      size_t ldo, const float* HWY_RESTRICT alpha) {
  static_assert(MR <= 8, "one register of probabilities");
  constexpr size_t kHalves = (NV + 1) / 2;  // registers of 8 columns, the last maybe of 4
  float32x4_t acc[MR][NV];
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
    const float a = alpha == nullptr ? 1.0f : alpha[r];
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) acc[r][x] = vmulq_n_f32(vld1q_f32(o + r * ldo + 4 * x), a);
  }
  for (size_t c = 0; c < keys; ++c) {
    float16x8_t vv[kHalves];
#pragma GCC unroll 2
    for (size_t g = 0; g < kHalves; ++g) {
      const uint16_t* row = v + c * ldv + 8 * g;
      vv[g] = 2 * g + 1 < NV ? LoadHalves(row)
                             : vreinterpretq_f16_u16(vcombine_u16(vld1_u16(row), vdup_n_u16(0)));
    }
    WidenedPVRows(acc, vv, LoadHalves(p + c * ldp), std::make_index_sequence<MR>());
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) vst1q_f32(o + r * ldo + 4 * x, acc[r][x]);
  }
}

#undef SATTN_ATTR_NEON_FHM

// P^T (f32, key c of row r at st[c * R + r]) rounded to f16 (nearest even, subnormals kept) in
// place: key c of row r in the half at c * R + r. Key c's halves overwrite the f32 of keys
// below c (or, for key 0, the rows it has just read), so ascending keys and rows never
// overwrite a probability still to be read.
template <class D>
void RoundF16Probabilities(D d, const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                           float* HWY_RESTRICT st) {
  const hn::Rebind<hwy::float16_t, D> dh;
  const hn::Rebind<uint16_t, D> du16;
  uint16_t* out = SlotAs<uint16_t>(st);
  const size_t R = plan.rows_pad, N = hn::Lanes(d);
  for (size_t c = 0; c < tile.nb; ++c) {
    for (size_t r = 0; r < rows; r += N) {
      const auto halves = hn::BitCast(du16, hn::DemoteTo(dh, hn::LoadU(d, st + c * R + r)));
      hn::StoreU(halves, du16, out + c * R + r);
    }
  }
}

// The P.V of f16 rows: V rows copied as they are, P rounded to f16 in place.
template <class Blocks>
struct F16RowValues : LoadedValues {
  using Stored = uint16_t;
  static float Value(const uint16_t* v, size_t ldv, size_t c, size_t x) {
    return F16ToF32(v[c * ldv + x]);
  }
  // V rows (key c of head h at halves (c * heads + h) * dim_v_pad), keys past nb zero.
  template <class D>
  static void LoadValues(D /* d */, const AttentionArgs& a, const AttentionPlan& plan,
                         const WorkItem& item, const TileKeys& tile, float* v_tile) {
    CopyTileRows(a, a.v, plan, item, tile, static_cast<size_t>(a.head_dim_v), plan.dim_v_pad,
                 SlotAs<uint16_t>(v_tile));
  }
  template <class D>
  static void RoundProbabilities(D d, const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                                 float* HWY_RESTRICT st) {
    RoundF16Probabilities(d, plan, rows, tile, st);
  }
  static void Accumulate(const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                         const uint16_t* v, size_t ldv, const AttentionScratch& s,
                         const HeadScratch& head) {
    AccumulateInBlocks<Blocks>(plan, rows, SlotAs<uint16_t>(s.scores), v, ldv, tile, tile.nb,
                               /*keys_per_step=*/1, s, head);
  }
};

// The micro-kernels: vectors of 4 query rows (scores) and of 4 columns of head_dim_v (P.V),
// on every aarch64 target whatever its own vector length.
struct NeonFp16Blocks {
  static constexpr const char* kName = "neon-fp16";
  static constexpr DType kDType = DType::kF16;
  static bool Supported() { return ArmHasFhm(); }
  // Pair j of rows 4g..4g+3: channel 2j's four halves, then channel 2j + 1's (FMLAL, FMLAL2).
  static size_t QueryHalf(size_t r, size_t parity) { return 8 * (r / 4) + 4 * parity + r % 4; }
  static constexpr size_t kKeys = 8, kRows = 4, kScoreVectors = 2;
  static constexpr size_t kColumns = 4, kPVRows = 8, kPVVectors = 3;
  template <size_t NV>
  static constexpr auto ScoreBlock = &NeonPairScoreBlock<FmlalPairs, NV>;
  template <size_t MR, size_t NV>
  static constexpr auto PVBlock = &NeonFp16PVBlock<MR, NV>;
};

template <bool kF32PV>
using NeonFp16Tiles =
    NativeTiles<PairedScores<NeonFp16Blocks>, F16RowValues<NeonFp16Blocks>, kF32PV>;

#else
#define SATTN_NEON_FP16_TILES 0
#endif  // SATTN_ARM_NATIVE_TARGET

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_NEON_FP16_TILES_INL_H_
