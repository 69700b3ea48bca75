// Decoding's tiles, one at a time (decode/decode_driver-inl.h drives them; runs of whole tiles
// stream instead, decode/stream_tiles-inl.h). A work item has fewer query rows per kv head than
// a vector has lanes, so scores are dot products (decode/dot_scores-inl.h) and every K and V
// byte serves so few rows that memory, not arithmetic, sets the speed.
//  - AdvanceHeadByDots: one kv head over any tile, its rows converted (edge tiles) or read in
//    place: scores, the one panel's online softmax, the P.V.
//  - AdvanceHeadsOverCacheTile: every kv head over a tile every row sees whole, read from the
//    cache in place. With packed scores (1, 2, 4 or 8 rows per head, no ALiBi) every head's
//    scores come first, key block by key block across the heads (ScorePackedHeads), so the reads
//    sweep the tile's K nearly in address order; then each head's softmax and P.V, software-
//    pipelined over the heads.
// Scratch: the packed scores' per-head buffers and alphas, the tile's row pointers
// (attention_scratch-inl.h).
#if defined(STREAMATTN_CPU_DECODE_DECODE_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_DECODE_TILE_INL_H_
#undef STREAMATTN_CPU_DECODE_DECODE_TILE_INL_H_
#else
#define STREAMATTN_CPU_DECODE_DECODE_TILE_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/attention_args.h"
#include "core/online_state.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/decode/dot_scores-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/pv_block-inl.h"
#include "cpu/tile_softmax-inl.h"
#include "cpu/tile_update-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Kv head hkv's query rows, scaled (QueryScaleOfHead), as rows of dim_pad floats, zero-padded.
template <class D>
HWY_INLINE void PackQueryRows(D d, const AttentionArgs& a, const AttentionPlan& plan,
                              const WorkItem& item, int64_t hkv, float* HWY_RESTRICT q,
                              float* HWY_RESTRICT row) {
  const float scale = QueryScaleOfHead(a, hkv);
  const size_t rows = item.Rows(a);
  for (size_t r = 0; r < plan.rows_pad; ++r) {
    float* q_row = q + r * plan.dim_pad;
    if (r >= rows) {
      std::fill(q_row, q_row + plan.dim_pad, 0.0f);
      continue;
    }
    LoadQueryRow(d, a, plan, item, hkv, r, row);
    for (size_t i = 0; i < plan.dim; ++i) q_row[i] = row[i] * scale;
    std::fill(q_row + plan.dim, q_row + plan.dim_pad, 0.0f);
  }
}

// The item's h-th kv head over one tile, K and V rows from `keys` and `values` (kv_rows-inl.h):
// the converted tile (DenseRows), or the cache in place (CacheRows, only for tiles every row
// sees whole).
template <class D, class KRows, class VRows>
HWY_NOINLINE void AdvanceHeadByDots(D d, const AttentionArgs& a, const AttentionPlan& plan,
                                    const WorkItem& item, int64_t h, const TileKeys& tile,
                                    const KRows& keys, const VRows& values,
                                    const AttentionScratch& s) {
  if (!s.panel_active[0]) return;  // one panel: fewer rows than lanes
  const HeadScratch head = s.Head(h);
  const size_t R = plan.rows_pad;
  // Padding lanes score 0 rather than a stale value, so no lane meets a NaN or a subnormal
  // (whose arithmetic is slow on x86); a row of S^T is one vector here.
  for (size_t c = 0; c < tile.nb; ++c) hn::StoreU(hn::Zero(d), d, s.scores + c * R);
  DotScores(d, head.q, plan.dim_pad, item.Rows(a), keys, tile.nb_pad, plan.dim_pad, s.scores, R);
  FinishPanelScores(d, a, plan, item, item.hkv_begin + h, 0, tile, s, head);
  AccumulateTilePV(d, a, plan, item.Rows(a), tile, values, s, head);
}

// Packed scores: the keys go in blocks of kScoreBlockKeys, each block's rows of every head
// before the next block's: the reads sweep the tile's K nearly in address order instead of one
// head's rows at a stride of all the heads (head after head). Each block requests the next
// block's rows (kv_rows-inl.h; the last block's, the next tile's first), a line per line read.
//
// Alternated call by call with head after head on a Sapphire Rapids host (2 threads, from
// memory; time ratio, below 1 faster): 16 kv heads of head_dim 64 in f16 0.71, in f32 0.93;
// 32 kv heads of head_dim 128 0.91; head_dim 64 over 8 kv heads 0.95-0.97; 4 kv heads 0.95;
// head_dim 128 over 8 kv heads 0.997-1.014 (the same). The more heads share a key and the
// shorter their rows, the more the head-after-head order loses. Blocks of 4 keys measured
// 1.02 at head_dim 128 over 8 heads, of 16 keys the same as 8.
constexpr size_t kScoreBlockKeys = 8;

// Every head's scores over one tile read in place (elements read as k_element), packed key
// after key into its own buffer (head h's at st + h * packed_st_stride). key_rows holds the
// tile's keys and then the next tile's, kpt + kpt pointers.
template <class E, class D>
HWY_INLINE void ScorePackedHeads(D d, const E& k_element, const AttentionArgs& a,
                                 const AttentionPlan& plan, size_t rows, size_t nb_pad,
                                 const typename E::Stored* const* key_rows,
                                 const AttentionScratch& s, float* HWY_RESTRICT st) {
  static_assert(kKeysPerTile % kScoreBlockKeys == 0, "tiles hold whole blocks");
  for (size_t c = 0; c < nb_pad; c += kScoreBlockKeys) {
    const size_t keys = std::min(kScoreBlockKeys, nb_pad - c);  // a multiple of 4
    for (int64_t h = 0; h < plan.heads; ++h) {
      const ptrdiff_t offset = static_cast<ptrdiff_t>(h * a.k.stride(2));
      const CacheRows<E> block{k_element, key_rows + c, offset, key_rows + c + kScoreBlockKeys,
                               nullptr,   offset};
      DotScores(d, s.Head(h).q, plan.dim_pad, rows, block, keys, plan.dim_pad,
                st + static_cast<size_t>(h) * plan.packed_st_stride + c * rows, rows);
    }
  }
}

// One head's online softmax over its packed scores, leaving P in st and the rows' rescale
// factors in alpha for AccumulatePackedPV.
template <class D>
HWY_INLINE void SoftmaxPackedHead(D d, const AttentionArgs& a, size_t rows, size_t nb,
                                  const HeadScratch& head, float* HWY_RESTRICT st,
                                  float* HWY_RESTRICT alpha) {
  const size_t N = hn::Lanes(d);
  if (a.softcap > 0.0f) ApplySoftcap(d, a.softcap * kLog2e, st, N, (nb * rows + N - 1) / N, N);
  OnlineSoftmaxPacked(d, st, nb, rows, head.m, head.l, alpha);
}

// O = alpha O + P V for the head whose P and alpha SoftmaxPackedHead left in st and alpha
// (alpha == nullptr: O += P V, for a later step of a tile's keys).
template <class E, class D>
HWY_INLINE void AccumulatePackedPV(D d, const AttentionPlan& plan, size_t rows, size_t nb,
                                   const CacheRows<E>& values, const HeadScratch& head,
                                   const float* HWY_RESTRICT st, const float* HWY_RESTRICT alpha) {
  const size_t dvp = plan.dim_v_pad;
  for (size_t r = 0; r < rows; r += kMrP) {  // the first block of rows prefetches
    AccumulatePV(d, std::min(kMrP, rows - r), dvp, st + r, rows,
                 r == 0 ? values : values.WithoutPrefetch(), nb, head.o + r * dvp,
                 alpha == nullptr ? nullptr : alpha + r);
  }
}

// The row pointers of a tile read in place, at the item's first kv head (each head adds its
// offset): the tile's K rows, then the next tile's K rows, the tile's V rows, the next tile's V
// rows, keys_per_tile pointers each. Padding keys (to nb_pad) reuse the tile's first row: their
// scores are computed but never read; so do the entries past them, which only the prefetch
// reads. Keys past key_end have no next tile: the prefetch then requests this tile's first row
// again. The next tile's K rows follow this tile's, so ScorePackedHeads' last block requests
// the next tile's first.
template <typename T>
HWY_INLINE void FillCacheTileRows(const AttentionArgs& a, const AttentionPlan& plan,
                                  const WorkItem& item, const TileKeys& tile, int64_t key_end,
                                  const T** key_rows) {
  const size_t kpt = plan.keys_per_tile, nb = tile.nb;
  const T** next_key_rows = key_rows + kpt;
  const T** value_rows = next_key_rows + kpt;
  const T** next_value_rows = value_rows + kpt;
  a.KeyRows(item.b, tile.k0, static_cast<int64_t>(nb), item.hkv_begin, key_rows, value_rows);
  for (size_t c = nb; c < kpt; ++c) key_rows[c] = key_rows[0], value_rows[c] = value_rows[0];
  const int64_t next_k0 = tile.k0 + static_cast<int64_t>(kpt);
  const int64_t next_count = std::clamp<int64_t>(key_end - next_k0, 0, static_cast<int64_t>(kpt));
  a.KeyRows(item.b, next_k0, next_count, item.hkv_begin, next_key_rows, next_value_rows);
  for (size_t c = static_cast<size_t>(next_count); c < kpt; ++c) {
    next_key_rows[c] = key_rows[0], next_value_rows[c] = value_rows[0];
  }
}

// Every kv head of the item over one tile read from the cache in place (K and V of one element
// type E, read as k_element and v_element), a tile every row sees whole, so no key is hidden and
// no V row needs the NaN-safe product. Each head's rows also carry the rows to prefetch as the
// products walk them (kv_rows-inl.h): the next head's K rows during the scores, its V rows
// during the P.V.
template <class E, class D>
HWY_NOINLINE void AdvanceHeadsOverCacheTile(D d, const E& k_element, const E& v_element,
                                            const AttentionArgs& a, const AttentionPlan& plan,
                                            const WorkItem& item, const TileKeys& tile,
                                            int64_t key_end, const AttentionScratch& s) {
  using T = typename E::Stored;
  const size_t heads = static_cast<size_t>(plan.heads), kpt = plan.keys_per_tile;
  const size_t rows = item.Rows(a), nb = tile.nb;
  const T** key_rows = s.RowPointers<T>();
  FillCacheTileRows(a, plan, item, tile, key_end, key_rows);
  const T** next_key_rows = key_rows + kpt;  // the next tile's, for the last head's prefetch
  const T** value_rows = next_key_rows + kpt;
  const T** next_value_rows = value_rows + kpt;
  // Head h's K and V rows: the tile's pointers plus the head's offset. For the prefetch, K rows
  // carry the K rows of the head after h (the next tile's first head after the last), and V
  // rows the V rows of the head after h, whose P.V comes next.
  auto after = [&](size_t h, const T** this_tile, const T** next_tile, const Tensor& t) {
    const bool last = h + 1 == heads;
    return std::make_pair(last ? next_tile : this_tile,
                          last ? 0 : static_cast<ptrdiff_t>(h + 1) * t.stride(2));
  };
  auto head_values = [&](size_t h) {
    const auto [next, next_offset] = after(h, value_rows, next_value_rows, a.v);
    return CacheRows<E>{v_element,  value_rows, static_cast<ptrdiff_t>(h) * a.v.stride(2),
                        nullptr,    next,       0,
                        next_offset};
  };
  if (!plan.packed_scores) {
    for (size_t h = 0; h < heads; ++h) {
      const auto [next, next_offset] = after(h, key_rows, next_key_rows, a.k);
      const CacheRows<E> keys{k_element, key_rows, static_cast<ptrdiff_t>(h) * a.k.stride(2),
                              next,      nullptr,  next_offset};
      AdvanceHeadByDots(d, a, plan, item, static_cast<int64_t>(h), tile, keys, head_values(h), s);
    }
    return;
  }
  // Every head's scores first; then the heads' softmax and P.V, software-pipelined: head h's
  // P.V runs after head h + 1's softmax, so the softmax's long dependency chain (max, exp2,
  // lane rotations) overlaps with independent products instead of stalling the P.V that waits
  // on it. Two sets of alpha alternate between the heads.
  ScorePackedHeads(d, k_element, a, plan, rows, tile.nb_pad, key_rows, s, s.scores);
  float* alpha[2] = {s.alpha, s.alpha + plan.rows_pad};
  for (size_t h = 0; h <= heads; ++h) {
    if (h < heads) {
      SoftmaxPackedHead(d, a, rows, nb, s.Head(static_cast<int64_t>(h)),
                        s.scores + h * plan.packed_st_stride, alpha[h % 2]);
    }
    if (h > 0) {
      const size_t prev = h - 1;
      AccumulatePackedPV(d, plan, rows, nb, head_values(prev), s.Head(static_cast<int64_t>(prev)),
                         s.scores + prev * plan.packed_st_stride, alpha[prev % 2]);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_DECODE_TILE_INL_H_
