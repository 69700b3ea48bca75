// The prefill driver: one work item of at least a vector of query rows per kv head (prefill and
// chunked prefill: 384 rows of one kv head, 192 for wide heads; decoding of large GQA groups or a
// few speculative tokens: 16 to 64 rows of every kv head), streamed over the key tiles of one
// chunk.
//
// Per tile of keys_per_tile keys that some row sees: the tile kernel (prefill/tile_kernels-inl.h)
// loads the K/V tile once for every head of the item; per head and panel of rows, its scores
// S^T[key][row] (one SIMD lane per query row), then the online softmax of the panel
// (FinishPanelScores), then O = alpha O + P V. Tiles no row sees are never touched; tiles every
// row sees skip the visibility test. Cost: 4 * rows * keys * head_dim flops in the two
// products, ~16 vector ops per 16 scores for the softmax, and the tile kernel's conversion of
// each K/V element once per work item.
#if defined(STREAMATTN_CPU_PREFILL_PREFILL_DRIVER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_PREFILL_DRIVER_INL_H_
#undef STREAMATTN_CPU_PREFILL_PREFILL_DRIVER_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_PREFILL_DRIVER_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "core/attention_args.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/tile_update-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// The item's h-th kv head over one loaded tile: per panel of rows that sees it, scores and
// the online softmax; then the P.V of every such panel.
template <class Tiles, class D>
HWY_NOINLINE void AdvanceHeadOverTile(D d, const AttentionArgs& a, const AttentionPlan& plan,
                                      const WorkItem& item, int64_t h, const TileKeys& tile,
                                      const AttentionScratch& s) {
  const HeadScratch head = s.Head(h);
  const size_t panels = (item.Rows(a) + plan.panel_rows - 1) / plan.panel_rows;
  for (size_t p = 0; p < panels; ++p) {
    if (!s.panel_active[p]) continue;
    Tiles::ScorePanel(d, a, plan, item, p, h, tile, s, head);
    FinishPanelScores(d, a, plan, item, item.hkv_begin + h, p, tile, s, head);
  }
  Tiles::AccumulatePV(d, a, plan, h, item, tile, s, head);
}

template <class Tiles, class D>
void PrefillWorkItem(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                     const AttentionScratch& s) {
  const ItemKeys keys = FindVisibleKeys(a, plan, item, s);
  for (int64_t h = 0; h < plan.heads; ++h) {
    const HeadScratch head = s.Head(h);
    Tiles::PackQueries(d, a, plan, item, item.hkv_begin + h, head.q, s.row);
    StartHeadState(a, plan, item, item.hkv_begin + h, head);
  }
  const int64_t kpt = static_cast<int64_t>(plan.keys_per_tile);
  for (int64_t k0 = keys.key_lo; k0 <= keys.key_hi; k0 += kpt) {
    const TileKeys tile = TileAt(plan, keys, k0, kMrS);
    if (!MarkPanelsForTile(a, plan, item, keys, tile, s)) continue;
    Tiles::LoadTile(d, a, plan, item, tile, s);
    for (int64_t h = 0; h < plan.heads; ++h)
      AdvanceHeadOverTile<Tiles>(d, a, plan, item, h, tile, s);
  }
  FinishWorkItem(d, a, plan, item, s);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_PREFILL_DRIVER_INL_H_
