// What both attention drivers do around their tile loops, for one work item: which keys each
// query row sees, which panels of rows a tile reaches, the queries loaded and scaled, the rows'
// states started empty and, at the end, finished (the sink, O / l, lse) or kept as a partial
// result for the split-KV merge (MergeSplitsAndFinish, the state's merge per row).
#if defined(STREAMATTN_CPU_WORK_ITEM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_WORK_ITEM_INL_H_
#undef STREAMATTN_CPU_WORK_ITEM_INL_H_
#else
#define STREAMATTN_CPU_WORK_ITEM_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/attention_args.h"
#include "core/online_state.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/convert-inl.h"
#include "cpu/online_state-inl.h"
#include "cpu/quantized_element-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One work item: rows r = (position pos0 + r / group, query head hkv * group + r % group) of
// sequence b for each kv head hkv in [hkv_begin, hkv_begin + plan.heads), against keys
// [chunk_begin, chunk_end).
struct WorkItem {
  int64_t b, hkv_begin, pos0, pos1;
  int64_t chunk_begin, chunk_end;
  float* partial;  // nullptr: write the finished rows; else m, l, O of every row go here

  // Query rows per kv head (padding rows excluded).
  size_t Rows(const AttentionArgs& a) const { return static_cast<size_t>((pos1 - pos0) * a.group); }
  int64_t Position(const AttentionArgs& a, size_t r) const {
    return pos0 + static_cast<int64_t>(r) / a.group;
  }
  int64_t QueryHead(const AttentionArgs& a, int64_t hkv, size_t r) const {
    return hkv * a.group + static_cast<int64_t>(r) % a.group;
  }
};

// The keys the rows of a work item see in its chunk: their union [key_lo, key_hi] and the keys
// every real row sees [common_lo, common_hi] (empty when some row sees nothing).
struct ItemKeys {
  int64_t key_lo, key_hi, common_lo, common_hi;
};

// Fills s.lo, s.hi with each row's visible keys in the chunk (padding rows see nothing).
inline ItemKeys FindVisibleKeys(const AttentionArgs& a, const AttentionPlan& plan,
                                const WorkItem& item, const AttentionScratch& s) {
  const size_t rows = item.Rows(a);
  const int64_t seq_k = a.SeqK(item.b);
  ItemKeys keys{item.chunk_end, item.chunk_begin - 1, item.chunk_begin, item.chunk_end - 1};
  for (size_t r = 0; r < plan.FilledRows(rows); ++r) {
    if (r >= rows) {
      s.lo[r] = 1, s.hi[r] = 0;
      continue;
    }
    const KeyRange range = VisibleKeys(a, item.b, item.Position(a, r), seq_k);
    s.lo[r] = std::max(range.lo, item.chunk_begin);
    s.hi[r] = std::min(range.hi, item.chunk_end - 1);
    if (s.lo[r] <= s.hi[r]) {
      keys.key_lo = std::min(keys.key_lo, s.lo[r]);
      keys.key_hi = std::max(keys.key_hi, s.hi[r]);
    }
    keys.common_lo = std::max(keys.common_lo, s.lo[r]);
    keys.common_hi = std::min(keys.common_hi, s.hi[r]);
  }
  return keys;
}

// One tile of keys [k0, k0 + nb), nb padded to nb_pad for the micro-kernels' key blocks.
struct TileKeys {
  int64_t k0;
  size_t nb, nb_pad;
  int64_t last() const { return k0 + static_cast<int64_t>(nb) - 1; }
};

// The tile of keys from k0 on (at most plan.keys_per_tile, none past keys.key_hi), padded to
// whole key blocks of the scores' micro-kernel.
inline TileKeys TileAt(const AttentionPlan& plan, const ItemKeys& keys, int64_t k0,
                       size_t key_block) {
  const size_t nb = static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(plan.keys_per_tile), keys.key_hi + 1 - k0));
  return TileKeys{k0, nb, RoundUp(nb, key_block)};
}

// Whether every real row sees the whole tile (most tiles): the per-row visibility is then never
// read. ALiBi needs the per-row diagonals, so it always takes the per-row path.
inline bool EveryRowSeesTile(const AttentionArgs& a, const ItemKeys& keys, const TileKeys& tile) {
  return keys.common_lo <= tile.k0 && keys.common_hi >= tile.last() && a.alibi_slopes.empty();
}

// The keys of the tile, from its first, up to the last that any of rows [r0, r1) sees (0 when
// none sees the tile): past them every one of those rows has P = 0. Padding rows see nothing
// (FindVisibleKeys).
inline size_t KeysSeenInTile(const AttentionScratch& s, const TileKeys& tile, size_t r0,
                             size_t r1) {
  int64_t last_seen = -1;  // relative to tile.k0
  for (size_t r = r0; r < r1; ++r) {
    const bool sees = s.lo[r] <= tile.last() && s.hi[r] >= tile.k0 && s.lo[r] <= s.hi[r];
    if (sees) last_seen = std::max(last_seen, s.hi[r] - tile.k0);
  }
  return static_cast<size_t>(std::clamp<int64_t>(last_seen + 1, 0, static_cast<int64_t>(tile.nb)));
}

// Sets each panel's flags for the tile (s.panel_active: some row sees a key; panel_partial:
// some row hides a key, or the caller's mask may; panel_covered: every row sees every key),
// s.panel_keys (the keys from the tile's first to the last any of the panel's rows sees: past
// them every row hides every key, so the products may stop there; on the causal diagonal that
// is about half a tile per panel, 2-3% of a long prompt's work) and the rows' visibility
// relative to the tile (s.lo_rel, hi_rel, diagonal_rel, for TileScoring).
// Returns whether any panel sees the tile.
inline bool MarkPanelsForTile(const AttentionArgs& a, const AttentionPlan& plan,
                              const WorkItem& item, const ItemKeys& keys, const TileKeys& tile,
                              const AttentionScratch& s) {
  const size_t rows = item.Rows(a);
  const size_t panels = (rows + plan.panel_rows - 1) / plan.panel_rows;
  if (EveryRowSeesTile(a, keys, tile)) {
    std::fill(s.panel_active, s.panel_active + panels, uint8_t{1});
    std::fill(s.panel_partial, s.panel_partial + panels, uint8_t{a.has_mask});
    std::fill(s.panel_covered, s.panel_covered + panels, uint8_t{1});
    std::fill(s.panel_keys, s.panel_keys + panels, static_cast<uint32_t>(tile.nb));
    return true;
  }
  const int64_t k0 = tile.k0, tile_hi = tile.last(), seq_k = a.SeqK(item.b);
  bool any_active = false;
  for (size_t p = 0; p < panels; ++p) {
    bool full = true;
    const size_t r0 = p * plan.panel_rows, r1 = r0 + plan.PanelWidth(rows, p);
    for (size_t r = r0; r < r1; ++r) {
      // Padding rows' lanes are never read out: they need not see the tile.
      full = full && (r >= rows || (s.lo[r] <= k0 && s.hi[r] >= tile_hi));
      s.lo_rel[r] = static_cast<float>(std::max<int64_t>(s.lo[r] - k0, -1));
      s.hi_rel[r] =
          static_cast<float>(std::min<int64_t>(s.hi[r] - k0, static_cast<int64_t>(tile.nb)));
      s.diagonal_rel[r] = static_cast<float>(Diagonal(a, item.b, item.Position(a, r), seq_k) - k0);
    }
    s.panel_keys[p] = static_cast<uint32_t>(KeysSeenInTile(s, tile, r0, r1));
    s.panel_active[p] = s.panel_keys[p] > 0;  // some row sees a key of the tile
    any_active = any_active || s.panel_active[p];
    // A caller's mask can hide keys too: the P.V must then be NaN-safe (tile_update-inl.h),
    // though the scores need no visibility test when the ranges cover the tile.
    s.panel_partial[p] = !full || a.has_mask;
    s.panel_covered[p] = full;
  }
  return any_active;
}

// The keys of the tile (from its first) that a block of rows [r0, r1) of panel p multiplies in
// the P.V: KeysSeenInTile of its own rows, a part of the panel's (s.panel_keys). On the causal
// diagonal a panel's rows see a triangle of its keys: blocks of 6 rows stopping at their own
// last key skip about 40% of the panel's P.V there, where the panel's count alone computes the
// whole square.
inline size_t RowBlockKeys(const AttentionScratch& s, const TileKeys& tile, size_t p, size_t r0,
                           size_t r1) {
  if (s.panel_covered[p]) return s.panel_keys[p];  // every row sees every key
  return KeysSeenInTile(s, tile, r0, r1);
}

// The factor queries are multiplied by, so that products with a float cache are base-2 scores
// (or tanh arguments under softcap).
inline float QueryScale(const AttentionArgs& a) {
  return a.softcap > 0.0f ? a.scale / a.softcap : a.scale * kLog2e;
}

// An FP8 cache's scale for kv head hkv (1 for other caches): K's joins the queries' factor,
// V's the output's, since a per-head factor of every key or value is one of their products.
// The E4M3 loads return value * 2^-8 (quantized_element-inl.h); the 2^8 is made up here.
inline float KeyHeadFactor(const AttentionArgs& a, int64_t hkv) {
  return a.k_head_scales.empty() ? 1.0f : a.k_head_scales[hkv] * kE4M3LoadFactor;
}
inline float ValueHeadFactor(const AttentionArgs& a, int64_t hkv) {
  return a.v_head_scales.empty() ? 1.0f : a.v_head_scales[hkv] * kE4M3LoadFactor;
}

// QueryScale for kv head hkv's queries, whatever the cache.
inline float QueryScaleOfHead(const AttentionArgs& a, int64_t hkv) {
  return QueryScale(a) * KeyHeadFactor(a, hkv);
}

// Row r of kv head hkv's queries in the work item, as f32 (unscaled), into `row`.
template <class D>
HWY_INLINE void LoadQueryRow(D d, const AttentionArgs& a, const AttentionPlan& plan,
                             const WorkItem& item, int64_t hkv, size_t r, float* HWY_RESTRICT row) {
  LoadRowAsF32(d, a.q.dtype, a.QueryRow(item.b, item.Position(a, r), item.QueryHead(a, hkv, r)),
               a.q.stride(3), plan.dim, row);
}

// Starts kv head hkv's rows empty: m = -inf, l = 0, O = 0, and the rows' ALiBi slopes.
inline void StartHeadState(const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                           int64_t hkv, const HeadScratch& head) {
  const size_t R = plan.rows_pad, rows = item.Rows(a);
  std::fill(head.m, head.m + R, kNegInf);
  std::fill(head.l, head.l + R, 0.0f);
  std::fill(head.o, head.o + rows * plan.dim_v_pad, 0.0f);  // padding rows: unread
  for (size_t r = 0; r < R && !a.alibi_slopes.empty(); ++r) {
    head.slope2[r] = r < rows ? -a.alibi_slopes[item.QueryHead(a, hkv, r)] * kLog2e : 0.0f;
  }
}

// Finishes one row: the sink joins the state as one more logit with a zero value, then
// out = O / l and lse = ln(sum e^s). o_row (dim_v_pad floats) is scaled in place.
template <class D>
HWY_INLINE void FinishRow(D d, const AttentionArgs& a, int64_t b, int64_t pos, int64_t h,
                          RowState state, float* HWY_RESTRICT o_row, size_t dim_v_pad) {
  float o_factor = 1.0f;
  const float value_factor = ValueHeadFactor(a, h / a.group);
  if (!a.sinks.empty() && a.sinks[h] != kNegInf) {
    const float sink = a.sinks[h] * kLog2e;
    const float m_new = std::isnan(state.m) || state.m > sink ? state.m : sink;
    o_factor = RescaleFactor(state.m, m_new);
    state.l = state.l * o_factor + RescaleFactor(sink, m_new);
    state.m = m_new;
  }
  if (state.l == 0.0f) {
    std::fill(o_row, o_row + dim_v_pad, 0.0f);  // a row that sees nothing: 0, never 0/0
  } else {
    const auto inv = hn::Set(d, o_factor / state.l * value_factor);
    for (size_t i = 0; i < dim_v_pad; i += hn::Lanes(d)) {
      hn::StoreU(hn::Mul(hn::LoadU(d, o_row + i), inv), d, o_row + i);
    }
  }
  const AttentionArgs::RowIndex at = a.QueryAt(b, pos);
  StoreRowFromF32(d, o_row, static_cast<size_t>(a.head_dim_v), a.out.dtype,
                  a.out.At(at.batch, at.row, h, 0), a.out.stride(3));
  if (a.has_lse) *a.lse.At<float>(at.batch, h, at.row) = NaturalLse(state);
}

// Floats of one work item's split-KV partial result: m, l and O of every row of every head.
inline size_t PartialFloats(const AttentionPlan& plan) {
  return static_cast<size_t>(plan.heads) * plan.rows_pad * (2 + plan.dim_v_pad);
}

// The end of a work item: every head's rows finished into out (and lse), or, for a chunk of a
// split-KV item, their states copied to item.partial for MergeSplitsAndFinish.
template <class D>
void FinishWorkItem(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                    const AttentionScratch& s) {
  const size_t R = plan.rows_pad, dvp = plan.dim_v_pad, rows = item.Rows(a);
  for (int64_t h = 0; h < plan.heads; ++h) {
    const HeadScratch head = s.Head(h);
    if (item.partial != nullptr) {
      float* slot = item.partial + h * R * (2 + dvp);
      std::memcpy(slot, head.m, R * sizeof(float));
      std::memcpy(slot + R, head.l, R * sizeof(float));
      std::memcpy(slot + 2 * R, head.o, rows * dvp * sizeof(float));
      continue;
    }
    const int64_t hkv = item.hkv_begin + h;
    for (size_t r = 0; r < rows; ++r) {
      FinishRow(d, a, item.b, item.Position(a, r), item.QueryHead(a, hkv, r),
                RowState{head.m[r], head.l[r]}, head.o + r * dvp, dvp);
    }
  }
}

// Merges the partial results of num_splits chunks of one work item's keys (each
// PartialFloats(plan) long, consecutive) in order and finishes its rows; o_row is dim_v_pad
// floats of scratch.
template <class D>
void MergeSplitsAndFinish(D d, const AttentionArgs& a, const AttentionPlan& plan,
                          const WorkItem& item, const float* partials, int64_t num_splits,
                          float* HWY_RESTRICT o_row) {
  const size_t R = plan.rows_pad, dvp = plan.dim_v_pad, rows = item.Rows(a);
  for (int64_t h = 0; h < plan.heads; ++h) {
    for (size_t r = 0; r < rows; ++r) {
      RowState state;
      std::fill(o_row, o_row + dvp, 0.0f);
      for (int64_t split = 0; split < num_splits; ++split) {
        const float* part = partials + split * PartialFloats(plan) + h * R * (2 + dvp);
        const MergeFactors f = MergeRowStateScalars(&state, RowState{part[r], part[R + r]});
        ScaleAndAddRow(d, o_row, f.a, part + 2 * R + r * dvp, f.b, dvp);
      }
      const int64_t hkv = item.hkv_begin + h;
      FinishRow(d, a, item.b, item.Position(a, r), item.QueryHead(a, hkv, r), state, o_row, dvp);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_WORK_ITEM_INL_H_
