// The scores micro-kernel of both Arm native kernels (prefill/neon_bf16_tiles-inl.h,
// prefill/neon_fp16_tiles-inl.h). Their instructions take a key's pair of channels by an
// immediate from a register of four pairs (8 halves): BFDOT (by element) multiplies it with
// each query row's pair, FMLAL and FMLAL2 (by element) one channel each with the two halves of
// a register of 4 rows of channel 2j then 4 of channel 2j + 1. So one block serves both, given
// an Op: Vec, the 16-bit vector type; Load(p), 8 halves; Step<kPair>(acc, q, k), acc[v] += the
// products of q[v] with pair kPair of k, for NV vectors of 4 query rows.
// Cost per 4 pairs of channels: 8 loads of K (one per key) and 4 NV of Q for 32 NV Steps, on
// 8 NV accumulators (NV <= 2: 16 accumulators and 8 registers of queries of 32).
#if defined(STREAMATTN_CPU_PREFILL_NEON_PAIR_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_NEON_PAIR_SCORES_INL_H_
#undef STREAMATTN_CPU_PREFILL_NEON_PAIR_SCORES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_NEON_PAIR_SCORES_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu/prefill/native_tiles-inl.h"
#include "hwy/highway.h"

#if HWY_ARCH_ARM_A64
#include <arm_neon.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

#if SATTN_ARM_NATIVE_TARGET
// The intrinsics of both instructions need Armv8.2-A with their extension (GCC's arm_neon.h
// declares them so). The shared block is compiled with both and emits only the instructions its
// Op's Step names: a CPU runs an Op's blocks only when it has that Op's extension.
#define SATTN_ATTR_NEON_PAIRS __attribute__((target("arch=armv8.2-a+bf16+fp16fml")))

// The scores of 8 keys (16-bit rows of K along head_dim, `ldk` halves apart, 2 * pairs long)
// against NV vectors of 4 query rows (pair j of rows 4v..4v+3 in the 4 words at q[j * ldq +
// 4v], as Op reads them), scaled: C[m][r] = scale * the sum of Steps over pairs in ascending
// order, at c + m * ldc + r.
template <class Op, size_t NV>
SATTN_ATTR_NEON_PAIRS HWY_NOINLINE void NeonPairScoreBlock(const uint16_t* HWY_RESTRICT k,
                                                           size_t ldk,
                                                           const uint32_t* HWY_RESTRICT q,
                                                           size_t ldq, size_t pairs, float scale,
                                                           float* HWY_RESTRICT c, size_t ldc) {
  using Vec = typename Op::Vec;
  constexpr size_t kKeys = 8;
  const uint16_t* qh = reinterpret_cast<const uint16_t*>(q);  // as PackQueries wrote it
  float32x4_t acc[kKeys][NV];
#pragma GCC unroll 8
  for (size_t m = 0; m < kKeys; ++m) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) acc[m][v] = vdupq_n_f32(0.0f);
  }
  size_t j = 0;
  for (; j + 4 <= pairs; j += 4) {
    Vec q0[NV], q1[NV], q2[NV], q3[NV];
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) {
      q0[v] = Op::Load(qh + 2 * (j * ldq + 4 * v));
      q1[v] = Op::Load(qh + 2 * ((j + 1) * ldq + 4 * v));
      q2[v] = Op::Load(qh + 2 * ((j + 2) * ldq + 4 * v));
      q3[v] = Op::Load(qh + 2 * ((j + 3) * ldq + 4 * v));
    }
#pragma GCC unroll 8
    for (size_t m = 0; m < kKeys; ++m) {
      const Vec kv = Op::Load(k + m * ldk + 2 * j);
      Op::template Step<0>(acc[m], q0, kv);
      Op::template Step<1>(acc[m], q1, kv);
      Op::template Step<2>(acc[m], q2, kv);
      Op::template Step<3>(acc[m], q3, kv);
    }
  }
  if (j < pairs) {  // 1 to 3 pairs: K's from a zero-padded copy, never read past its row
    const size_t left = pairs - j;
    Vec q0[NV], q1[NV], q2[NV];
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) {
      q0[v] = Op::Load(qh + 2 * (j * ldq + 4 * v));
      q1[v] = left > 1 ? Op::Load(qh + 2 * ((j + 1) * ldq + 4 * v)) : q0[v];
      q2[v] = left > 2 ? Op::Load(qh + 2 * ((j + 2) * ldq + 4 * v)) : q0[v];
    }
#pragma GCC unroll 8
    for (size_t m = 0; m < kKeys; ++m) {
      uint16_t padded[8] = {0};
      std::memcpy(padded, k + m * ldk + 2 * j, left * 2 * sizeof(uint16_t));
      const Vec kv = Op::Load(padded);
      Op::template Step<0>(acc[m], q0, kv);
      if (left > 1) Op::template Step<1>(acc[m], q1, kv);
      if (left > 2) Op::template Step<2>(acc[m], q2, kv);
    }
  }
#pragma GCC unroll 8
  for (size_t m = 0; m < kKeys; ++m) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) vst1q_f32(c + m * ldc + 4 * v, vmulq_n_f32(acc[m][v], scale));
  }
}

#undef SATTN_ATTR_NEON_PAIRS
#endif  // SATTN_ARM_NATIVE_TARGET

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_NEON_PAIR_SCORES_INL_H_
