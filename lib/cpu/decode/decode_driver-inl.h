// The decode driver: one work item of fewer query rows per kv head than a vector has lanes
// (decoding; speculative decoding of a few tokens), covering every kv head of a sequence
// (all of seq_q), streamed over the keys of one chunk (split-KV: attention.cc).
//
// The keys go in segments: a run of whole tiles every row sees streams where the target and
// the shape allow it (StreamCacheTiles: the next tile's scores beside this tile's P.V); any
// other tile goes alone, read from the cache in place when every row sees all of it
// (AdvanceHeadsOverCacheTile), else converted first (ConvertKeyTile: the edges of a causal
// mask or window, masks, strided or mixed-dtype caches) and taken head by head
// (AdvanceHeadByDots). Tile boundaries are the same whichever way a tile goes, so every path
// gives the same bytes. Cost: per key and head, rows x head_dim FMAs for the scores (plus a
// horizontal sum per score) and as many for the P.V; memory: each K and V byte read once.
#if defined(STREAMATTN_CPU_DECODE_DECODE_DRIVER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_DECODE_DRIVER_INL_H_
#undef STREAMATTN_CPU_DECODE_DECODE_DRIVER_INL_H_
#else
#define STREAMATTN_CPU_DECODE_DECODE_DRIVER_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/attention_args.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/cache_element-inl.h"
#include "cpu/decode/decode_entry-inl.h"
#include "cpu/decode/decode_tile-inl.h"
#include "cpu/decode/int8_scores-inl.h"
#include "cpu/decode/stream_tiles-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// How many whole tiles from `tile` on stream as one run: those every row sees whole, up to the
// last key every row sees; 0 when the tile at k0 does not stream (the target or the shape does
// not allow it, a mask, a partial tile).
inline int64_t StreamedTiles(const AttentionArgs& a, const AttentionPlan& plan,
                             const ItemKeys& keys, const TileKeys& tile) {
  if (!kStreamTilesOnTarget || !plan.stream_tiles || a.has_mask || tile.nb != plan.keys_per_tile ||
      !EveryRowSeesTile(a, keys, tile)) {
    return 0;
  }
  const int64_t kpt = static_cast<int64_t>(plan.keys_per_tile);
  return (std::min(keys.common_hi, keys.key_hi) + 1 - tile.k0) / kpt;
}

// The kernels that read the cache in place, for K and V of one element type of a family
// (WithCacheElementsOf): a run of streamed tiles and a tile alone. The float dtypes' are
// compiled with the driver; the quantized formats' in decode_quantized_attention.cc
// (decode_entry-inl.h).
template <bool kQuantized, class D>
void StreamTilesInPlace(D d, const AttentionArgs& a, const AttentionPlan& plan,
                        const WorkItem& item, int64_t k_first, int64_t tiles, int64_t key_end,
                        const AttentionScratch& s) {
  WithCacheElementsOf<kQuantized>(a, [&](const auto& k_element, const auto& v_element) {
    StreamCacheTiles(d, k_element, v_element, a, plan, item, k_first, tiles, key_end, s);
  });
}
template <bool kQuantized, class D>
void AdvanceTileInPlace(D d, const AttentionArgs& a, const AttentionPlan& plan,
                        const WorkItem& item, const TileKeys& tile, int64_t key_end,
                        const AttentionScratch& s) {
  WithCacheElementsOf<kQuantized>(a, [&](const auto& k_element, const auto& v_element) {
    AdvanceHeadsOverCacheTile(d, k_element, v_element, a, plan, item, tile, key_end, s);
  });
}

// One tile alone: read in place when every row sees all of it (no key hidden, so no V row needs
// the NaN-safe product), else converted.
template <class D>
void DecodeTile(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                const ItemKeys& keys, const TileKeys& tile, const AttentionScratch& s) {
  if (!MarkPanelsForTile(a, plan, item, keys, tile, s)) return;
  // Compiled only where f16 converts by an instruction (plan.cache_in_place is false elsewhere).
  if constexpr (kNativeF16) {
    if (plan.cache_in_place && !s.panel_partial[0]) {
      if (IsQuantizedDType(a.k.dtype)) {
        AdvanceQuantizedTileInPlace(a, plan, item, tile, keys.key_hi + 1, s);
      } else {
        AdvanceTileInPlace</*kQuantized=*/false>(d, a, plan, item, tile, keys.key_hi + 1, s);
      }
      return;
    }
  }
  ConvertKeyTile(d, a, plan, item.b, item.hkv_begin, tile.k0, tile.nb, tile.nb_pad, s.k_tile,
                 s.v_tile);
  const size_t ldk = static_cast<size_t>(plan.heads) * plan.dim_pad;  // the key-major tile
  for (int64_t h = 0; h < plan.heads; ++h) {
    const DenseRows keys_of_head{s.k_tile + static_cast<size_t>(h) * plan.dim_pad, ldk};
    AdvanceHeadByDots(d, a, plan, item, h, tile, keys_of_head, ConvertedValueRows(plan, s, h), s);
  }
}

template <class D>
void DecodeWorkItem(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                    const AttentionScratch& s) {
  const ItemKeys keys = FindVisibleKeys(a, plan, item, s);
  for (int64_t h = 0; h < plan.heads; ++h) {
    const HeadScratch head = s.Head(h);
    PackQueryRows(d, a, plan, item, item.hkv_begin + h, head.q, s.row);
    if (plan.int8_scores) {
      QuantizeQueryRows(head.q, plan.dim_pad, item.Rows(a), plan.dim_pad, head.q8, head.q8_bias,
                        head.q8_scale);
    }
    StartHeadState(a, plan, item, item.hkv_begin + h, head);
  }
  const int64_t kpt = static_cast<int64_t>(plan.keys_per_tile);
  int64_t k0 = keys.key_lo;
  while (k0 <= keys.key_hi) {
    const TileKeys tile = TileAt(plan, keys, k0, 4);  // DotScores' key blocks
    if constexpr (kStreamTilesOnTarget) {
      if (const int64_t run = StreamedTiles(a, plan, keys, tile); run > 0) {
        if (IsQuantizedDType(a.k.dtype)) {
          StreamQuantizedTilesInPlace(a, plan, item, k0, run, keys.key_hi + 1, s);
        } else {
          StreamTilesInPlace</*kQuantized=*/false>(d, a, plan, item, k0, run, keys.key_hi + 1, s);
        }
        k0 += run * kpt;
        continue;
      }
    }
    DecodeTile(d, a, plan, item, keys, tile, s);
    k0 += kpt;
  }
  FinishWorkItem(d, a, plan, item, s);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_DECODE_DRIVER_INL_H_
