// Decoding's scores: few query rows per kv head (fewer than a vector's lanes), so each score
// is a dot product along head_dim, head_dim / lanes FMAs per row and key plus one horizontal
// sum, instead of the GEMM that would leave most lanes idle. Register blocks of up to 4 rows x
// 4 keys (DotBlock) with named accumulators; the sums of four vectors are reduced together
// with a few shuffles. K rows come from a converted tile or the cache in place (kv_rows-inl.h),
// and a block may request rows ahead into L2 as it walks its own.
#if defined(STREAMATTN_CPU_DECODE_DOT_SCORES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_DOT_SCORES_INL_H_
#undef STREAMATTN_CPU_DECODE_DOT_SCORES_INL_H_
#else
#define STREAMATTN_CPU_DECODE_DOT_SCORES_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "cpu/gemm_tile-inl.h"
#include "cpu/kv_rows-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether vectors are made of 128-bit blocks that InterleaveLower/Upper work within (x86,
// NEON, EMU128), so that four vectors are summed together with a few shuffles.
#undef SATTN_BLOCKWISE_SUMS  // defined once per target
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_RVV || \
    (HWY_TARGET & (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)) != 0
#define SATTN_BLOCKWISE_SUMS 0
#else
#define SATTN_BLOCKWISE_SUMS 1
#endif

#if SATTN_BLOCKWISE_SUMS
// Within each 128-bit block, [sum(v0), sum(v1), sum(v2), sum(v3)] over the block's four lanes:
// t0 = [v0_0+v0_2, v1_0+v1_2, v0_1+v0_3, v1_1+v1_3], t1 likewise for v2, v3; then their
// 64-bit halves pair up.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V FourBlockSums(D d, V v0, V v1, V v2, V v3) {
  const V t0 = hn::Add(hn::InterleaveLower(d, v0, v1), hn::InterleaveUpper(d, v0, v1));
  const V t1 = hn::Add(hn::InterleaveLower(d, v2, v3), hn::InterleaveUpper(d, v2, v3));
  const hn::Repartition<uint64_t, D> d64;
  return hn::Add(
      hn::BitCast(d, hn::InterleaveLower(d64, hn::BitCast(d64, t0), hn::BitCast(d64, t1))),
      hn::BitCast(d, hn::InterleaveUpper(d64, hn::BitCast(d64, t0), hn::BitCast(d64, t1))));
}
#endif

// Stores [sum(v0), sum(v1), sum(v2), sum(v3)] to out[0..3]. Where vectors are made of 128-bit
// blocks that InterleaveLower/Upper work within (x86, NEON, EMU128), the four are summed
// together with a few shuffles; elsewhere (SVE, RVV, scalar) each on its own.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreFourSums(D d, V v0, V v1, V v2, V v3, float* HWY_RESTRICT out) {
#if !SATTN_BLOCKWISE_SUMS
  out[0] = hn::GetLane(hn::SumOfLanes(d, v0));
  out[1] = hn::GetLane(hn::SumOfLanes(d, v1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, v2));
  out[3] = hn::GetLane(hn::SumOfLanes(d, v3));
#else
  const V u = FourBlockSums(d, v0, v1, v2, v3);
  // Then the blocks add up.
#if HWY_MAX_BYTES == 64
  const hn::Half<D> dh;
  const hn::Vec<decltype(dh)> w = hn::Add(hn::LowerHalf(dh, u), hn::UpperHalf(dh, u));
  const hn::Half<decltype(dh)> dq;
  hn::StoreU(hn::Add(hn::LowerHalf(dq, w), hn::UpperHalf(dq, w)), dq, out);
#elif HWY_MAX_BYTES == 32
  const hn::Half<D> dh;
  hn::StoreU(hn::Add(hn::LowerHalf(dh, u), hn::UpperHalf(dh, u)), dh, out);
#else
  hn::StoreU(u, d, out);
#endif
#endif
}

#undef SATTN_HAVE_SIXTEEN_SUMS  // defined once per target
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#define SATTN_HAVE_SIXTEEN_SUMS 1

// Stores the sums of 16 vectors of 16 lanes with one 64-byte store, so that the vector load
// of them that follows is forwarded from the store (four 16-byte stores are not). a, b, c, e
// are FourBlockSums of four vectors each; lane i of the result is the sum of vector i.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void StoreSixteenSums(D d, V a, V b, V c, V e, float* HWY_RESTRICT out) {
  // Adjacent blocks of two groups added: ab = [a0+a1, b0+b1, a2+a3, b2+b3], likewise ce; then
  // the halves of ab and ce.
  const V ab = hn::Add(hn::OddEvenBlocks(b, a), hn::SwapAdjacentBlocks(hn::OddEvenBlocks(a, b)));
  const V ce = hn::Add(hn::OddEvenBlocks(e, c), hn::SwapAdjacentBlocks(hn::OddEvenBlocks(c, e)));
  hn::StoreU(hn::Add(hn::ConcatLowerLower(d, ce, ab), hn::ConcatUpperUpper(d, ce, ab)), d, out);
}
#else
#define SATTN_HAVE_SIXTEEN_SUMS 0
#endif

#define SATTN_DOT_DECLARE(r) V a##r##0 = z, a##r##1 = z, a##r##2 = z, a##r##3 = z;
// Row r's FMAs with key vectors k0..k3 at channel `at`.
#define SATTN_DOT_FMA_AT(r, at, k0, k1, k2, k3)                  \
  if constexpr (RB > r) {                                        \
    const V qv = hn::LoadU(d, q + r * ldq + (at));               \
    a##r##0 = hn::MulAdd(qv, k0, a##r##0);                       \
    a##r##1 = hn::MulAdd(qv, k1, a##r##1);                       \
    if constexpr (KB > 2) a##r##2 = hn::MulAdd(qv, k2, a##r##2); \
    if constexpr (KB > 2) a##r##3 = hn::MulAdd(qv, k3, a##r##3); \
  }
#define SATTN_DOT_FMA(r) SATTN_DOT_FMA_AT(r, i, k0, k1, k2, k3)

// Scores of 4 query rows (the last 4 - RB of them padding) against keys c0..c0+KB-1 of `keys`
// (kv_rows-inl.h; KB is 4, or 2: see DotScores): RB x KB named accumulators along head_dim,
// then per key the four rows' sums stored at once (st rows of S^T are keys, so a key's 4 rows
// are adjacent), or for packed scores (ldst == RB) the 4 x RB sums reduced and stored
// together. `prefetch`: also request the rows KRows::NextKey names (kv_rows-inl.h), spread
// over the loop.
template <size_t RB, size_t KB, class D, class KRows>
HWY_INLINE void DotBlock(D d, const float* HWY_RESTRICT q, size_t ldq, const KRows& keys, size_t c0,
                         size_t dim_pad, float* HWY_RESTRICT st, size_t ldst, bool prefetch) {
  using V = hn::Vec<D>;
  const V z = hn::Zero(d);
  const auto* HWY_RESTRICT kr0 = keys.Row(c0);
  const auto* HWY_RESTRICT kr1 = keys.Row(c0 + 1);
  const auto* HWY_RESTRICT kr2 = keys.Row(c0 + (KB > 2 ? 2 : 0));
  const auto* HWY_RESTRICT kr3 = keys.Row(c0 + (KB > 2 ? 3 : 0));
  // The rows to request, gathered once: inside the loop each would cost the
  // loads of a struct field, a pointer array entry and an offset.
  constexpr size_t kNextRows = KRows::kPrefetches ? KB : 1;
  const char* next_rows[kNextRows] = {};
  if constexpr (KRows::kPrefetches) {
    for (size_t c = 0; c < KB && prefetch; ++c) next_rows[c] = keys.NextKey(c0 + c);
    // The last line of a row off a line, which the loop's requests below miss, goes out now.
    for (size_t j = 0; j < kNextRows && prefetch; ++j) {
      const char* tail = UncoveredTail(next_rows[j], KRows::Bytes(dim_pad));
      if (tail != nullptr) RequestIntoL2(tail);
    }
  }
  // clang-format off
  SATTN_DOT_DECLARE(0) SATTN_DOT_DECLARE(1) SATTN_DOT_DECLARE(2) SATTN_DOT_DECLARE(3)
  size_t i = 0;
  if constexpr (KRows::kPairLoads) {  // two vectors of each row at a time (kv_rows-inl.h)
    const size_t N = hn::Lanes(d);
    for (; i + 2 * N <= dim_pad; i += 2 * N) {
      V k0 = z, k1 = z, k2 = z, k3 = z, h0 = z, h1 = z, h2 = z, h3 = z;
      keys.LoadPair(d, kr0, i, k0, h0);
      keys.LoadPair(d, kr1, i, k1, h1);
      if constexpr (KB > 2) keys.LoadPair(d, kr2, i, k2, h2);
      if constexpr (KB > 2) keys.LoadPair(d, kr3, i, k3, h3);
      if constexpr (KRows::kPrefetches) {
        if (prefetch && KRows::Bytes(i) % 64 < KRows::Bytes(2 * N)) {  // once per line
          const char* const volatile* rows = next_rows;
          for (size_t j = 0; j < kNextRows; ++j) RequestIntoL2(rows[j] + KRows::Bytes(i));
        }
      }
      SATTN_DOT_FMA(0) SATTN_DOT_FMA(1) SATTN_DOT_FMA(2) SATTN_DOT_FMA(3)
      SATTN_DOT_FMA_AT(0, i + N, h0, h1, h2, h3) SATTN_DOT_FMA_AT(1, i + N, h0, h1, h2, h3)
      SATTN_DOT_FMA_AT(2, i + N, h0, h1, h2, h3) SATTN_DOT_FMA_AT(3, i + N, h0, h1, h2, h3)
    }
  }
  for (; i < dim_pad; i += hn::Lanes(d)) {
    const V k0 = keys.Load(d, kr0, i), k1 = keys.Load(d, kr1, i);
    const V k2 = KB > 2 ? keys.Load(d, kr2, i) : z, k3 = KB > 2 ? keys.Load(d, kr3, i) : z;
    if constexpr (KRows::kPrefetches) {
      // Once per line of the rows as i walks them.
      if (prefetch && KRows::Bytes(i) % 64 < KRows::Bytes(hn::Lanes(d))) {
        // Read from memory each time: kept in registers, the four pointers pushed the
        // loop's others (K and Q rows) into vector registers, a move each on an FMA port.
        const char* const volatile* rows = next_rows;
        for (size_t j = 0; j < kNextRows; ++j) RequestIntoL2(rows[j] + KRows::Bytes(i));
      }
    }
    SATTN_DOT_FMA(0) SATTN_DOT_FMA(1) SATTN_DOT_FMA(2) SATTN_DOT_FMA(3)
  }
  // clang-format on
  // Packed, only with 4 rows (streamed steps on 16 registers), where ldst = 4 keeps the four
  // stores apart; packed scores of 1 or 2 rows take blocks of 4 keys.
  if constexpr (KB == 2) {
    StoreFourSums(d, a00, a10, a20, a30, st);
    StoreFourSums(d, a01, a11, a21, a31, st + ldst);
    return;
  }
  if (ldst == RB && RB <= 2) {
    // Packed scores of one or two rows (decoding without GQA, or two heads per kv head): the
    // four keys' sums are adjacent, so each reduction of four vectors carries no padding row.
    if constexpr (RB == 1) {
      StoreFourSums(d, a00, a01, a02, a03, st);
    } else if constexpr (RB == 2) {
      StoreFourSums(d, a00, a10, a01, a11, st);
      StoreFourSums(d, a02, a12, a03, a13, st + 4);
    }
    return;
  }
#if SATTN_HAVE_SIXTEEN_SUMS
  if (ldst == 4 && RB == 4) {  // packed scores of four rows: one vector of 4 keys x 4 rows
    StoreSixteenSums(d, FourBlockSums(d, a00, a10, a20, a30), FourBlockSums(d, a01, a11, a21, a31),
                     FourBlockSums(d, a02, a12, a22, a32), FourBlockSums(d, a03, a13, a23, a33),
                     st);
    return;
  }
#endif
  StoreFourSums(d, a00, a10, a20, a30, st);
  StoreFourSums(d, a01, a11, a21, a31, st + ldst);
  StoreFourSums(d, a02, a12, a22, a32, st + 2 * ldst);
  StoreFourSums(d, a03, a13, a23, a33, st + 3 * ldst);
}

#undef SATTN_DOT_DECLARE
#undef SATTN_DOT_FMA
#undef SATTN_DOT_FMA_AT

// st[c * ldst + r] = q_r . k_c for r < rows and c < nb_pad (a multiple of 4; keys past nb are
// padding, zero rows or repeats, whose scores the caller does not read). Each key's rows are
// stored 4 at a time: with ldst >= 4 (a multiple of 4) lanes up to the next multiple of 4 rows
// get padding sums; with rows = ldst < 4 (packed scores: 1 or 2 rows) 4 keys' sums are stored
// together. Nothing is written past nb_pad * ldst.
// Q and K rows are zero-padded to dim_pad; K rows come from `keys`.
template <size_t KB, class D, class KRows>
HWY_INLINE void DotScoresByKeyBlocks(D d, const float* q, size_t ldq, size_t rows,
                                     const KRows& keys, size_t nb_pad, size_t dim_pad, float* st,
                                     size_t ldst) {
  for (size_t c = 0; c < nb_pad; c += KB) {
    for (size_t r = 0; r < rows; r += 4) {
      const float* qr = q + r * ldq;
      float* out = st + c * ldst + r;
      const bool prefetch = r == 0;  // once per key
      switch (std::min<size_t>(4, rows - r)) {
        case 4:
          DotBlock<4, KB>(d, qr, ldq, keys, c, dim_pad, out, ldst, prefetch);
          break;
        case 3:
          DotBlock<3, KB>(d, qr, ldq, keys, c, dim_pad, out, ldst, prefetch);
          break;
        case 2:
          DotBlock<2, KB>(d, qr, ldq, keys, c, dim_pad, out, ldst, prefetch);
          break;
        default:
          DotBlock<1, KB>(d, qr, ldq, keys, c, dim_pad, out, ldst, prefetch);
          break;
      }
    }
  }
}

// Blocks of 4 keys, or of 2 where more than 2 rows meet 16 registers: 4 keys x 4 rows is 16
// accumulators, all the registers an AVX2 or SSE target has, and GCC spilled them in the loop
// (76 cycles per key of 4 rows from L2 on a Zen 3 host, against 32 for its 64 FMAs); 2 keys x
// 4 rows leave room for the keys and a query vector (52 cycles). Packed scores of 1 or 2 rows
// keep 4 keys, which their stores need.
template <class D, class KRows>
HWY_INLINE void DotScores(D d, const float* q, size_t ldq, size_t rows, const KRows& keys,
                          size_t nb_pad, size_t dim_pad, float* st, size_t ldst) {
  if constexpr (kVectorRegisters < 32) {
    if (rows > 2) return DotScoresByKeyBlocks<2>(d, q, ldq, rows, keys, nb_pad, dim_pad, st, ldst);
  }
  DotScoresByKeyBlocks<4>(d, q, ldq, rows, keys, nb_pad, dim_pad, st, ldst);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_DOT_SCORES_INL_H_
