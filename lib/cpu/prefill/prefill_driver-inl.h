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
#include "cpu/kv_rows-inl.h"
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

// Items of at most this many rows per kv head over at most this many keys request all their
// inputs and output rows into L2 when they start (RequestSmallItemRows).
constexpr size_t kRequestAllRows = 64;
constexpr int64_t kRequestAllKeys = 256;

// A short prompt's item (64 rows seeing 64 keys, one kv head) reads each row of q, k, v and
// out once, 256 bytes from each 2 KiB row at 8 kv heads, cold from memory (a packed batch runs
// it after the long prompts' blocks): the tile copy, the query packing and the rows' finishing
// each waited on its misses a few at a time. Requesting every line first lets them all be in
// flight at once. Thirty packed prompts of 64 tokens (h8/8 d128 f16, causal, 1 thread, Zen 4,
// inputs in L3) ran 9% faster alone and 16% faster beside a longer prompt's plan; larger items
// reuse each row enough that their loads overlap with the products anyway.
HWY_INLINE void RequestSmallItemRows(const AttentionArgs& a, const AttentionPlan& plan,
                                     const WorkItem& item, const ItemKeys& keys) {
  const size_t rows = item.Rows(a);
  if (rows > kRequestAllRows || keys.key_hi - keys.key_lo >= kRequestAllKeys) return;
  const auto bytes = [](const Tensor& t, int64_t elements) {
    return static_cast<size_t>(ElementBytes(t.dtype, elements));
  };
  for (int64_t h = 0; h < plan.heads; ++h) {
    const int64_t hkv = item.hkv_begin + h;
    for (size_t r = 0; r < rows; ++r) {
      const int64_t pos = item.Position(a, r), head = item.QueryHead(a, hkv, r);
      RequestRowIntoL2(static_cast<const char*>(a.QueryRow(item.b, pos, head)),
                       bytes(a.q, a.head_dim));
      const AttentionArgs::RowIndex at = a.QueryAt(item.b, pos);
      const char* out = static_cast<const char*>(a.out.At(at.batch, at.row, head, 0));
      for (size_t byte = 0; byte < bytes(a.out, a.head_dim_v); byte += 64) {
        __builtin_prefetch(out + byte, /*rw=*/1, /*locality=*/2);
      }
    }
    for (int64_t key = keys.key_lo; key <= keys.key_hi; ++key) {
      RequestRowIntoL2(static_cast<const char*>(a.KeyRow(a.k, item.b, key, hkv)),
                       bytes(a.k, a.head_dim));
      RequestRowIntoL2(static_cast<const char*>(a.KeyRow(a.v, item.b, key, hkv)),
                       bytes(a.v, a.head_dim_v));
    }
  }
}

template <class Tiles, class D>
void PrefillWorkItem(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                     const AttentionScratch& s) {
  const ItemKeys keys = FindVisibleKeys(a, plan, item, s);
  RequestSmallItemRows(a, plan, item, keys);
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
