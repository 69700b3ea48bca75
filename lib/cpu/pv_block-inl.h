// The P.V micro-kernels: O[r] = alpha[r] O[r] + P[r] V for a block of query rows over all of
// head_dim, in register blocks sized for this target (GemmTile with P^T as A, the rows of one key
// adjacent; V rows dense f32 or a cache's rows converted in registers, kv_rows-inl.h). Shared
// by both drivers' tiles and decoding's packed and streamed tiles.
// Cost: MR x NV FMAs per key for NV loads of V and MR broadcasts of P; O is loaded and stored
// once per call, so callers pass as many keys per call as they can.
#if defined(STREAMATTN_CPU_PV_BLOCK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PV_BLOCK_INL_H_
#undef STREAMATTN_CPU_PV_BLOCK_INL_H_
#else
#define STREAMATTN_CPU_PV_BLOCK_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "cpu/attention_plan-inl.h"
#include "cpu/gemm_tile-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vectors of head_dim per P.V block of MR rows. With 16 registers, blocks of 3 or 4 rows (GQA
// groups of 4 decoding) take 3 (MR x 3 accumulators, 3 loads of V and a broadcast of P: 12
// FMA chains instead of 8, 48 cycles per key of 4 rows from L2 instead of 53 on a Zen 3 host).
// Blocks of 1 or 2 rows keep kNvP and get a second set of accumulators instead (KS = 2 when
// MR x NV is below 8, gemm_tile-inl.h): 4 vectors per block for 1 row ran 20% faster from
// cache there but 9% slower from memory (alternated, 8 over 8 heads in f16), its requests for
// the next head's V rows going out in half as many, shorter calls.
template <size_t MR>
constexpr size_t PVVectors() {
  return kVectorRegisters < 32 && (MR == 3 || MR == 4) ? 3 : kNvP;
}

// Vectors j.. j + NV - 1 of O's rows. kInline: the micro-kernel inlined into the caller, for
// callers that call it for few keys (decoding's streamed steps, decode/stream_tiles-inl.h).
template <size_t MR, size_t NV, bool kInline = false, class D, class VRows>
HWY_INLINE void PVColumnBlock(D d, size_t j, size_t dim_v_pad, const float* pt, size_t ldpt,
                              const VRows& values, size_t nb, float* o, const float* alpha) {
  const size_t N = hn::Lanes(d);
  constexpr size_t kKeySets = MR * NV < 8 ? 2 : 1;
  if constexpr (kInline) {
    GemmTileInline<MR, NV, ALayout::kRowsAdjacent, kKeySets>(
        d, pt, ldpt, values.Columns(j * N), nb, o + j * N, dim_v_pad, alpha, /*add_to_c=*/true);
  } else {
    GemmTile<MR, NV, ALayout::kRowsAdjacent, kKeySets>(d, pt, ldpt, values.Columns(j * N), nb,
                                                       o + j * N, dim_v_pad, alpha,
                                                       /*add_to_c=*/true);
  }
}

// O[r] = alpha[r] O[r] + P[r] V for MR rows, over all head_dim column blocks; V rows come from
// `values` (kv_rows-inl.h). alpha == nullptr: O[r] += P[r] V (a later block of a tile's keys).
template <size_t MR, class D, class VRows>
HWY_INLINE void AccumulatePVRows(D d, size_t dim_v_pad, const float* pt, size_t ldpt,
                                 const VRows& values, size_t nb, float* o, const float* alpha) {
  constexpr size_t kNv = PVVectors<MR>();
  const size_t vectors = dim_v_pad / hn::Lanes(d);
  for (size_t j = 0; j < vectors;) {
    const size_t left = vectors - j;
    // A last block of one vector would have only MR chains: two blocks of 2 and kNv - 1 instead.
    const size_t nv = left % kNv == 1 && left > kNv ? 2 : std::min(kNv, left);
    // Widths above kNv never occur; they are not instantiated.
    if (nv == 4) {
      if constexpr (kNv >= 4) PVColumnBlock<MR, 4>(d, j, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    } else if (nv == 3) {
      if constexpr (kNv >= 3) PVColumnBlock<MR, 3>(d, j, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    } else if (nv == 2) {
      PVColumnBlock<MR, 2>(d, j, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    } else {
      PVColumnBlock<MR, 1>(d, j, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    }
    j += nv;
  }
}

// The same for `rows` (1..kMrP) rows: a work item with few rows (decoding) uses a register
// block of its size rather than computing padding rows.
template <class D, class VRows>
HWY_INLINE void AccumulatePV(D d, size_t rows, size_t dim_v_pad, const float* pt, size_t ldpt,
                             const VRows& values, size_t nb, float* o, const float* alpha) {
  switch (std::min(rows, kMrP)) {
    case 1:
      return AccumulatePVRows<1>(d, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    case 2:
      return AccumulatePVRows<2>(d, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    case 3:
      return AccumulatePVRows<3>(d, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    case 4:
      return AccumulatePVRows<4>(d, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    case 5:
      return AccumulatePVRows<5>(d, dim_v_pad, pt, ldpt, values, nb, o, alpha);
    default:
      return AccumulatePVRows<kMrP>(d, dim_v_pad, pt, ldpt, values, nb, o, alpha);
  }
}

// O += P V for `rows` rows of a tile where some row hides a key whose V is not finite: zero
// probabilities are skipped instead of multiplied, so 0 * NaN never reaches a row.
template <class D>
HWY_INLINE void AccumulatePVSkippingZeros(D d, size_t rows, size_t dim_v_pad, const float* pt,
                                          size_t ldpt, const float* v, size_t ldv, size_t nb,
                                          float* o, const float* alpha) {
  const size_t N = hn::Lanes(d);
  for (size_t r = 0; r < rows; ++r) {
    float* orow = o + r * dim_v_pad;
    for (size_t i = 0; i < dim_v_pad; i += N) {
      hn::StoreU(hn::Mul(hn::LoadU(d, orow + i), hn::Set(d, alpha[r])), d, orow + i);
    }
    for (size_t c = 0; c < nb; ++c) {
      const float p = pt[c * ldpt + r];
      if (p == 0.0f) continue;
      const float* vrow = v + c * ldv;
      for (size_t i = 0; i < dim_v_pad; i += N) {
        hn::StoreU(hn::MulAdd(hn::Set(d, p), hn::LoadU(d, vrow + i), hn::LoadU(d, orow + i)), d,
                   orow + i);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PV_BLOCK_INL_H_
