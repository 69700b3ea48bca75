// Building blocks of one key tile of the flash forward (flash_forward-inl.h drives them):
// the tile shapes per target, scores by either product, the caller's mask, and O += P V.
//
// Scores come in two orientations of the same result, S^T[key][row] (one SIMD lane per query
// row, so the online softmax needs no horizontal reduction):
//  - GEMM scores (prefill): S^T = K . Q^T by GemmTile, when a work item has at least a vector
//    of query rows. Cost per key: head_dim FMAs per vector of rows.
//  - Dot scores (decode): fewer rows than lanes, where the GEMM would leave most lanes idle, so
//    each score is a dot product along head_dim, head_dim / lanes FMAs plus one horizontal sum.
#if defined(STREAMATTN_CPU_FLASH_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_FLASH_TILE_INL_H_
#undef STREAMATTN_CPU_FLASH_TILE_INL_H_
#else
#define STREAMATTN_CPU_FLASH_TILE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/attention_args.h"
#include "core/online_state.h"
#include "cpu/gemm_tile-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register blocks for this target (see gemm_tile-inl.h): S^T blocks are kMrS keys x up to kNvS
// vectors of query rows, P.V blocks up to kMrP query rows x up to kNvP vectors of head_dim
// (PVVectors: 3 for blocks of 3 or 4 rows on 16 registers).
constexpr size_t kNvS = 3;
constexpr size_t kMrS = kVectorRegisters >= 32 ? 8 : 4;
constexpr size_t kMrP = HWY_TARGET == HWY_SCALAR ? 3 : 6;
constexpr size_t kNvP = kVectorRegisters >= 32 ? 4 : 2;
constexpr size_t kKeysPerTile = 128;  // keys per tile and head; a multiple of kMrS and 4
// Keys per step of decoding's streamed tiles (flash_decode_tiles-inl.h): a DotBlock's keys.
constexpr size_t kStreamStepKeys = 4;
// The most bytes of K rows (8 kv heads of head_dim 128 in f16, or of head_dim 64 in f32) a
// streamed step reads. Steps of twice that, 8 kv heads of head_dim 128 in f32, decoded 4-8%
// slower streamed than tile by tile (20% when paged) on a Sapphire Rapids host; those tiles
// hold only 4 steps.
constexpr size_t kStreamStepBytes = 8192;
// Targets that stream: x86 from AVX2 on. With 16 registers (AVX2) the steps' fixed register
// blocks are smaller for 4 rows per head (StreamStep); alternated against tile by tile on a
// Sapphire Rapids host forced to AVX2 (2 threads, 32768 keys, 8 kv heads): from memory 1.17-1.27x
// as fast with 1 or 2 rows per head (f16, bf16; f32 of head_dim 64 1.14x), 1.05-1.07x with 4;
// from L2 1.45-1.56x with 1 or 2 rows, 0.93-0.99x with 4. (Through the general path's calls
// per 4 keys, AVX2 had run 23-37% slower streamed.) Arm's 32 registers would take the fixed
// blocks too, but no Arm host has measured them yet.
constexpr bool kStreamTilesOnTarget = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2;
// Decoding work items of several kv heads take at least this many bytes of K rows per head
// and tile (32 keys of head_dim 128 in f16, 64 of head_dim 64): with kKeysPerTile / heads, 16
// keys for 8 kv heads, each head's per-tile work (the softmax's reductions, the P.V's reload
// of O) took a larger share: from memory on a Zen 4 host, 3-5% slower at head_dim 128 and
// 18-38% at head_dim 64 in f16. f32 rows of head_dim 128 stay at 16 keys, which measured
// 5-7% faster than 32.
constexpr size_t kDecodeHeadTileBytes = 8192;
constexpr int64_t kTargetRows = 192;  // rows per work item: amortises the K/V conversion

inline size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Shapes and scratch layout of a work item, fixed for the whole call. A work item covers
// `heads` kv heads: one for prefill (its 192 rows reuse each K/V tile enough), all of them for
// decoding (up to 64 rows, all of seq_q), so a tile's keys are read for every head at once,
// sequentially through the cache, instead of one head's rows at a stride the hardware
// prefetchers do not follow.
struct FlashConfig {
  size_t lanes;
  bool dot_scores;       // fewer query rows than lanes: dot products instead of the GEMM
  size_t panel_vectors;  // vectors of rows per S^T panel: 1..kNvS (GEMM) or 1 (dot)
  size_t panel_rows;     // panel_vectors * lanes
  size_t rows_pad;       // rows of a work item per head, padded to whole panels
  size_t dim, dim_pad, dim_v_pad;
  int64_t positions;     // query positions per work item
  int64_t heads;         // kv heads per work item
  size_t keys_per_tile;  // a multiple of kMrS and 4
  // Dot scores read whole tiles' K and V rows from the cache in place (kv_rows-inl.h) rather
  // than converting them first: head dims of whole vectors, unit element strides, one dtype.
  bool cache_in_place;
  // In-place tiles pack their scores densely, key after key (OnlineSoftmaxPacked): the rows
  // per head divide the lanes, both powers of two, and there is no ALiBi.
  bool packed_scores;
  // Runs of whole packed tiles stream (flash_decode_tiles-inl.h): up to 4 rows per head, and
  // a step's rows of one stream (K or V) take at most kStreamStepBytes. With 8 rows per head
  // (64 query heads over 8, in f16) decoding is bound by the arithmetic, which the streamed
  // steps add to: 12% slower streamed on a Sapphire Rapids host (2 kv heads: 9% faster).
  bool stream_tiles;
  size_t packed_st_stride;  // packed scores: floats from one head's S buffer to the next's
  // Offsets into the worker's scratch, in floats: the tile's K and V (per head), S^T and the
  // per-row arrays shared by the heads, then one block of state per head.
  size_t kc, vc, st, alpha, lo_rel, hi_rel, diag_rel, tmp, lo, hi, flags;
  size_t cache_rows;  // in-place tiles: K, V row pointers of two tiles (and a step beyond)
  size_t head_block, head_floats;                      // where head h's state starts: + h * floats
  size_t head_q, head_o, head_m, head_l, head_slope2;  // offsets within a head's block
  size_t total_floats;
  // A split-KV partial result: m, l and O of every row of every head.
  size_t PartialFloats() const { return static_cast<size_t>(heads) * rows_pad * (2 + dim_v_pad); }
  float* Head(float* scratch, int64_t h) const { return scratch + head_block + h * head_floats; }
};

template <class D>
FlashConfig MakeFlashConfig(D d, const AttentionArgs& a) {
  FlashConfig c;
  c.lanes = hn::Lanes(d);
  c.positions = std::min<int64_t>(a.seq_q, std::max<int64_t>(1, kTargetRows / a.group));
  const size_t rows = static_cast<size_t>(c.positions * a.group);
  c.dot_scores = rows < c.lanes;
  // GEMM panels of 3, 2 or 1 vectors, whichever pads the rows least (the widest on a tie):
  // decoding's 16 or 32 rows per kv head (GQA groups of 16, MQA, speculative decoding) would
  // pad to 48 and waste half the scores' products or more.
  c.panel_vectors = c.dot_scores ? 1 : kNvS;
  for (size_t nv = c.panel_vectors; nv >= 1; --nv) {
    if (RoundUp(rows, nv * c.lanes) < RoundUp(rows, c.panel_vectors * c.lanes)) {
      c.panel_vectors = nv;
    }
  }
  c.panel_rows = c.panel_vectors * c.lanes;
  c.rows_pad = RoundUp(rows, c.panel_rows);
  c.dim = static_cast<size_t>(a.head_dim);
  c.dim_pad = RoundUp(c.dim, c.lanes);
  c.dim_v_pad = RoundUp(static_cast<size_t>(a.head_dim_v), c.lanes);
  // Decoding, speculative decoding included: all of seq_q fits one work item of few rows.
  c.heads = rows <= 64 && c.positions == a.seq_q ? a.heads_kv : 1;
  size_t keys = kKeysPerTile / static_cast<size_t>(c.heads);
  if (c.heads > 1) {
    keys = std::max(keys,
                    kDecodeHeadTileBytes / (c.dim_pad * static_cast<size_t>(DTypeSize(a.k.dtype))));
  }
  c.keys_per_tile = std::min(kKeysPerTile, std::max<size_t>(16, keys)) / 8 * 8;
  c.cache_in_place = kNativeF16 && c.dot_scores && c.dim == c.dim_pad &&
                     static_cast<size_t>(a.head_dim_v) == c.dim_v_pad && a.k.stride(3) == 1 &&
                     a.v.stride(3) == 1 && a.k.dtype == a.v.dtype;
  const bool lanes_power_of_two = (c.lanes & (c.lanes - 1)) == 0;
  c.packed_scores = c.cache_in_place && lanes_power_of_two && c.lanes % rows == 0 &&
                    (rows & (rows - 1)) == 0 && a.alibi_slopes.empty();
  c.stream_tiles = kStreamTilesOnTarget && c.packed_scores && rows <= 4 &&
                   kStreamStepKeys * static_cast<size_t>(c.heads) * c.dim_pad *
                           static_cast<size_t>(DTypeSize(a.k.dtype)) <=
                       kStreamStepBytes;
  size_t at = 0;
  auto take = [&](size_t floats) {
    const size_t offset = at;
    at += RoundUp(floats, 16);  // keep every array 64-byte aligned
    return offset;
  };
  const size_t tile_heads = static_cast<size_t>(c.heads);
  c.kc = take(tile_heads * c.keys_per_tile * c.dim_pad);
  c.vc = take(tile_heads * c.keys_per_tile * c.dim_v_pad);
  // Packed scores keep one buffer per head (every head's scores come before the first softmax),
  // each keys_per_tile * rows floats (rows <= lanes / 2) rounded up to whole vectors, and two
  // sets of them (streamed tiles score one tile while the P.V reads the last); other tiles use
  // S^T's own size. An alpha per head (streamed tiles), at least two (other tiles alternate
  // two between heads).
  c.packed_st_stride = RoundUp(c.keys_per_tile * rows, c.lanes);
  c.st = take(std::max(c.keys_per_tile * c.rows_pad + 2 * c.lanes,
                       c.packed_scores ? 2 * tile_heads * c.packed_st_stride : 0));
  c.alpha = take(std::max<size_t>(2, tile_heads) * c.rows_pad);
  c.lo_rel = take(c.rows_pad);
  c.hi_rel = take(c.rows_pad);
  c.diag_rel = take(c.rows_pad);
  c.tmp = take(std::max(c.dim_pad, c.dim_v_pad));
  c.lo = take(2 * c.rows_pad);  // int64
  c.hi = take(2 * c.rows_pad);  // int64
  c.flags = take(c.rows_pad);   // three bytes per panel
  const size_t pointer_floats = sizeof(const void*) / sizeof(float);
  c.cache_rows =
      take(c.cache_in_place ? 4 * (c.keys_per_tile + kStreamStepKeys) * pointer_floats : 0);
  size_t in_head = 0;
  auto take_in_head = [&](size_t floats) {
    const size_t offset = in_head;
    in_head += RoundUp(floats, 16);
    return offset;
  };
  c.head_q = take_in_head(c.rows_pad * c.dim_pad);  // Q^T panels (GEMM) or Q rows (dot)
  c.head_o = take_in_head(c.rows_pad * c.dim_v_pad);
  c.head_m = take_in_head(c.rows_pad);
  c.head_l = take_in_head(c.rows_pad);
  c.head_slope2 = take_in_head(c.rows_pad);
  c.head_floats = in_head;
  c.head_block = take(tile_heads * c.head_floats);
  c.total_floats = at;
  return c;
}

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
#define SATTN_DOT_FMA(r)                                         \
  if constexpr (RB > r) {                                        \
    const V qv = hn::LoadU(d, q + r * ldq + i);                  \
    a##r##0 = hn::MulAdd(qv, k0, a##r##0);                       \
    a##r##1 = hn::MulAdd(qv, k1, a##r##1);                       \
    if constexpr (KB > 2) a##r##2 = hn::MulAdd(qv, k2, a##r##2); \
    if constexpr (KB > 2) a##r##3 = hn::MulAdd(qv, k3, a##r##3); \
  }

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
      const char* tail = UncoveredTail(next_rows[j], dim_pad * KRows::kElementBytes);
      if (tail != nullptr) RequestIntoL2(tail);
    }
  }
  // clang-format off
  SATTN_DOT_DECLARE(0) SATTN_DOT_DECLARE(1) SATTN_DOT_DECLARE(2) SATTN_DOT_DECLARE(3)
  for (size_t i = 0; i < dim_pad; i += hn::Lanes(d)) {
    const V k0 = keys.Load(d, kr0, i), k1 = keys.Load(d, kr1, i);
    const V k2 = KB > 2 ? keys.Load(d, kr2, i) : z, k3 = KB > 2 ? keys.Load(d, kr3, i) : z;
    if constexpr (KRows::kPrefetches) {
      // Once per line of the rows as i walks them.
      constexpr size_t kBytes = KRows::kElementBytes;
      if (prefetch && (i * kBytes) % 64 < hn::Lanes(d) * kBytes) {
        // Read from memory each time: kept in registers, the four pointers pushed the
        // loop's others (K and Q rows) into vector registers, a move each on an FMA port.
        const char* const volatile* rows = next_rows;
        for (size_t j = 0; j < kNextRows; ++j) RequestIntoL2(rows[j] + i * kBytes);
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

// Adds the caller's additive mask (times log2 e) to the raw products of rows [r0, r1) and
// keys [k0, k0 + nb); -inf in the mask hides the key whatever the product is.
inline void AddMask(const AttentionArgs& a, int64_t b, int64_t hkv, int64_t pos0, size_t r0,
                    size_t r1, int64_t k0, size_t nb, float* st, size_t ldst) {
  const Tensor& mask = a.mask;
  const int64_t mb = mask.dim(0) == 1 ? 0 : b;
  const int64_t key_step = mask.stride(3) * DTypeSize(mask.dtype);
  for (size_t r = r0; r < r1; ++r) {
    const int64_t pos = pos0 + static_cast<int64_t>(r) / a.group;
    const int64_t h = hkv * a.group + static_cast<int64_t>(r) % a.group;
    const char* row = mask.At<const char>(mb, mask.dim(1) == 1 ? 0 : h, pos, k0);
    for (size_t c = 0; c < nb; ++c) {
      const float bias = LoadAsFloat(mask.dtype, row + static_cast<int64_t>(c) * key_step);
      float& s = st[c * ldst + r];
      s = bias == kNegInf ? kNegInf : s + bias * kLog2e;
    }
  }
}

// True when any of the nb rows of n floats (row stride ld) holds a NaN or an infinity.
template <class D>
HWY_INLINE bool AnyNonFinite(D d, const float* rows, size_t ld, size_t nb, size_t n) {
  const size_t N = hn::Lanes(d);
  for (size_t c = 0; c < nb; ++c) {
    const float* row = rows + c * ld;
    size_t i = 0;
    for (; i + N <= n; i += N) {
      if (!hn::AllTrue(d, hn::IsFinite(hn::LoadU(d, row + i)))) return true;
    }
    for (; i < n; ++i) {
      if (!std::isfinite(row[i])) return true;
    }
  }
  return false;
}

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
// callers that call it for few keys (decoding's streamed steps, flash_decode_tiles-inl.h).
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

#endif  // STREAMATTN_CPU_FLASH_TILE_INL_H_
