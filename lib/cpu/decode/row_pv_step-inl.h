// Decoding's one-row streamed P.V over FP8 (E4M3) V rows read in place, whose scale is folded
// into the output elsewhere (KeyHeadFactor): O = alpha O + sum over a step's 4 keys of p[k] V[k],
// in blocks of 8 vectors of head_dim_v (one set of 8 accumulators), each pair of vectors read
// with the element's LoadPair. The shared P.V block (PVColumnBlock) takes 4 vectors and two
// sets of accumulators for one row, so every key pays its row's address, its probability's
// broadcast and its next row's request (with a line test) once per 4 vectors; here once per
// 8, the request without the test (RequestRowAndLastByteIntoL2), as ScaledPVBlock does for
// the group-scaled elements.
// Cost per key and block of 8 vectors: 4 pair loads (on AVX2 8 integer operations and 8
// conversions), 8 FMAs, a broadcast, 2 requests and the row's address.
// Measured on a Zen 3 host (callgrind per key and kv head, 8 over 8 heads, head_dim 128; then
// alternated in one process from memory, 32768 keys): FP8 322 -> 270 instructions, 1.045-1.09x
// as fast on 1 and 2 threads (the output differs in the last bits: the keys are summed in
// order, not in PVColumnBlock's two sets). f16 through the same blocks: 254 -> 196
// instructions but 0.92-0.94x as fast, so f16 and bf16, bound by memory, keep PVColumnBlock.
#if defined(STREAMATTN_CPU_DECODE_ROW_PV_STEP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_ROW_PV_STEP_INL_H_
#undef STREAMATTN_CPU_DECODE_ROW_PV_STEP_INL_H_
#else
#define STREAMATTN_CPU_DECODE_ROW_PV_STEP_INL_H_
#endif

#include <cstddef>

#include "cpu/kv_rows-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// O's vectors 0.. NV - 1 at `out` (NV up to 8) into c0..c7 (c0 repeated past NV), times alpha
// when kRescale (a tile's first step), and back: the one-row P.V blocks' accumulators.
template <size_t NV, bool kRescale, class D, class V = hn::Vec<D>>
HWY_INLINE void LoadOutputBlock(D d, const float* HWY_RESTRICT out, const float* HWY_RESTRICT alpha,
                                V& c0, V& c1, V& c2, V& c3, V& c4, V& c5, V& c6, V& c7) {
  static_assert(NV >= 1 && NV <= 8, "a block of up to 8 vectors");
  const size_t N = hn::Lanes(d);
  const V scale_o = hn::Set(d, kRescale ? *alpha : 1.0f);
  auto load = [&](size_t x) {
    const V o_x = hn::LoadU(d, out + x * N);
    return kRescale ? hn::Mul(o_x, scale_o) : o_x;
  };
  c0 = load(0);
  c1 = NV > 1 ? load(1) : c0, c2 = NV > 2 ? load(2) : c0, c3 = NV > 3 ? load(3) : c0;
  c4 = NV > 4 ? load(4) : c0, c5 = NV > 5 ? load(5) : c0, c6 = NV > 6 ? load(6) : c0;
  c7 = NV > 7 ? load(7) : c0;
}

template <size_t NV, class D, class V = hn::Vec<D>>
HWY_INLINE void StoreOutputBlock(D d, V c0, V c1, V c2, V c3, V c4, V c5, V c6, V c7,
                                 float* HWY_RESTRICT out) {
  const size_t N = hn::Lanes(d);
  hn::StoreU(c0, d, out);
  if constexpr (NV > 1) hn::StoreU(c1, d, out + N);
  if constexpr (NV > 2) hn::StoreU(c2, d, out + 2 * N);
  if constexpr (NV > 3) hn::StoreU(c3, d, out + 3 * N);
  if constexpr (NV > 4) hn::StoreU(c4, d, out + 4 * N);
  if constexpr (NV > 5) hn::StoreU(c5, d, out + 5 * N);
  if constexpr (NV > 6) hn::StoreU(c6, d, out + 6 * N);
  if constexpr (NV > 7) hn::StoreU(c7, d, out + 7 * N);
}

// O's vectors v.. v + NV - 1 (NV 4 or 8) = alpha O + sum over the step's 4 keys of p[k] V[k]
// (kRescale: alpha given, a tile's first step; otherwise O += ...).
template <size_t NV, bool kRescale, class E, class D>
HWY_INLINE void RowPVBlock(D d, size_t v, const float* HWY_RESTRICT p, const CacheRows<E>& values,
                           float* HWY_RESTRICT o, const float* HWY_RESTRICT alpha) {
  static_assert(NV == 4 || NV == 8, "blocks of 4 or 8 vectors, read in pairs");
  using V = hn::Vec<D>;
  using Rows = CacheRows<E>;
  const size_t N = hn::Lanes(d), column = v * N;
  const Rows rows = values.Columns(column);
  float* out = o + column;
  V c0, c1, c2, c3, c4, c5, c6, c7;
  LoadOutputBlock<NV, kRescale>(d, out, alpha, c0, c1, c2, c3, c4, c5, c6, c7);
  for (size_t k = 0; k < 4; ++k) {
    if (rows.next_values != nullptr) {
      RequestRowAndLastByteIntoL2(rows.NextValue(k), Rows::Bytes(NV * N));
    }
    const auto* HWY_RESTRICT row = rows.Row(k);
    const V pk = hn::Set(d, p[k]);
    auto pair = [&](size_t x, V& lo_sum, V& hi_sum) {
      V lo, hi;
      if constexpr (Rows::kPairLoads) {
        rows.LoadPair(d, row, x * N, lo, hi);
      } else {
        lo = rows.Load(d, row, x * N);
        hi = rows.Load(d, row, (x + 1) * N);
      }
      lo_sum = hn::MulAdd(pk, lo, lo_sum);
      hi_sum = hn::MulAdd(pk, hi, hi_sum);
    };
    pair(0, c0, c1);
    pair(2, c2, c3);
    if constexpr (NV > 4) {
      pair(4, c4, c5);
      pair(6, c6, c7);
    }
  }
  StoreOutputBlock<NV>(d, c0, c1, c2, c3, c4, c5, c6, c7, out);
}

template <bool kRescale, class E, class D>
HWY_INLINE void RowPVBlocks(D d, size_t dvp, const float* HWY_RESTRICT p,
                            const CacheRows<E>& values, float* HWY_RESTRICT o,
                            const float* HWY_RESTRICT alpha) {
  const size_t vectors = dvp / hn::Lanes(d);
  size_t v = 0;
  for (; v + 8 <= vectors; v += 8) RowPVBlock<8, kRescale>(d, v, p, values, o, alpha);
  if (v < vectors) RowPVBlock<4, kRescale>(d, v, p, values, o, alpha);
}

// The P.V of one streamed step of one row: O (dvp columns, whole blocks of 4 vectors) =
// alpha O + sum over the step's 4 keys of p[k] V[k] (alpha == nullptr: O += ...).
template <class E, class D>
HWY_INLINE void RowPVStep(D d, size_t dvp, const float* HWY_RESTRICT p, const CacheRows<E>& values,
                          float* HWY_RESTRICT o, const float* HWY_RESTRICT alpha) {
  if (alpha != nullptr) {
    RowPVBlocks<true>(d, dvp, p, values, o, alpha);
  } else {
    RowPVBlocks<false>(d, dvp, p, values, o, alpha);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_ROW_PV_STEP_INL_H_
