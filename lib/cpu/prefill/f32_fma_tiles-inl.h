// The prefill tile kernel of f32 FMAs, on every target: each K/V tile converted once to dense
// f32 (ConvertKeyTile), the queries packed as Q^T panels of f32, and both products by GemmTile:
// S^T = K . Q^T (kMrS keys x up to kNvS vectors of query rows per register block) and
// O = alpha O + P V (AccumulateTilePV). Cost per key and head: head_dim FMAs per vector of rows
// for each product, plus one conversion of each K/V element per work item of ~384 rows (192
// for heads wider than 128 + 128 channels: TargetRows, attention_plan-inl.h).
//
// A tile kernel is a struct with these four members (PackQueries, LoadTile, ScorePanel,
// AccumulatePV) that the prefill driver is instantiated with; prefill/tile_kernels-inl.h
// chooses one per call.
#if defined(STREAMATTN_CPU_PREFILL_F32_FMA_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_F32_FMA_TILES_INL_H_
#undef STREAMATTN_CPU_PREFILL_F32_FMA_TILES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_F32_FMA_TILES_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/attention_args.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/cache_element-inl.h"
#include "cpu/gemm_tile-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/tile_update-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct F32FmaTiles {
  static constexpr const char* kName = "f32-fma";
  // Kv head hkv's query rows, scaled (QueryScaleOfHead), as Q^T panels: panel p's element i of its
  // panel_rows rows at q + p * dim * panel_rows + i * panel_rows. Padding rows are zero.
  // A vector of rows at a time: the rows are converted into `stage` (plan.lanes rows of dim_pad),
  // then each channel's lanes are gathered from it and stored as one vector. Writing a row's
  // channels straight into the panels stored one float per line (panel_rows floats apart, over
  // tens of KiB) and stalled on the stores: on a Zen 4 core thirty packed prompts of 64 tokens
  // (h8/8 d128 f16, causal) ran 9% faster this way.
  template <class D>
  static void PackQueries(D d, const AttentionArgs& a, const AttentionPlan& plan,
                          const WorkItem& item, int64_t hkv, float* HWY_RESTRICT q,
                          float* HWY_RESTRICT stage) {
    const hn::RebindToSigned<D> di;
    const size_t N = hn::Lanes(d), rows = item.Rows(a), step = plan.panel_rows;
    const auto scale = hn::Set(d, QueryScaleOfHead(a, hkv));
    const auto lane_rows =
        hn::Mul(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(plan.dim_pad)));
    for (size_t r0 = 0; r0 < plan.FilledRows(rows); r0 += N) {  // the rows ScorePanel reads
      for (size_t j = 0; j < N; ++j) {
        float* staged = stage + j * plan.dim_pad;
        if (r0 + j < rows) {
          LoadQueryRow(d, a, plan, item, hkv, r0 + j, staged);
        } else {
          std::fill(staged, staged + plan.dim, 0.0f);
        }
      }
      float* column = q + (r0 / step) * plan.dim * step + r0 % step;
      for (size_t i = 0; i < plan.dim; ++i) {
        hn::StoreU(hn::Mul(hn::GatherIndex(d, stage + i, lane_rows), scale), d, column + i * step);
      }
    }
  }

  // The tile's K and V rows of the item's kv heads, converted to dense f32 in s.k_tile and
  // s.v_tile (key-major, ConvertKeyTile; V inside K: the K tile alone, ConvertedValueRows).
  template <class D>
  static void LoadTile(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                       const TileKeys& tile, const AttentionScratch& s) {
    ConvertKeyTile(d, a, plan, item.b, item.hkv_begin, tile.k0, tile.nb, tile.nb_pad, s.k_tile,
                   s.v_tile);
  }

  // Raw products of panel p of the item's h-th kv head against the tile (already scaled to
  // base-2 scores, as the queries are): S^T[key][row] in s.scores (rows_pad apart), keys to
  // tile.nb_pad, or to the block holding the last key the panel sees (s.panel_keys): the
  // softmax selects -inf for every later key, whatever its slot holds.
  template <class D>
  static void ScorePanel(D d, const AttentionArgs& a, const AttentionPlan& plan,
                         const WorkItem& item, size_t p, int64_t h, const TileKeys& tile,
                         const AttentionScratch& s, const HeadScratch& head) {
    const size_t R = plan.rows_pad, ldk = static_cast<size_t>(plan.heads) * plan.dim_pad;
    const DenseRows keys{s.k_tile + static_cast<size_t>(h) * plan.dim_pad, ldk};
    const DenseRows qt_panel{head.q + p * plan.dim * plan.panel_rows, plan.panel_rows};
    const size_t key_end = std::min<size_t>(tile.nb_pad, RoundUp(s.panel_keys[p], kMrS));
    // The item's last panel may hold fewer rows than the plan's (PanelWidth).
    const size_t vectors = plan.PanelWidth(item.Rows(a), p) / hn::Lanes(d);
    for (size_t c = 0; c < key_end; c += kMrS) {
      const float* k = keys.Row(c);
      float* out = s.scores + c * R + p * plan.panel_rows;
      switch (vectors) {
        case 1:
          GemmTile<kMrS, 1, ALayout::kRowsAlongK>(d, k, ldk, qt_panel, plan.dim, out, R, nullptr);
          break;
        case 2:
          GemmTile<kMrS, 2, ALayout::kRowsAlongK>(d, k, ldk, qt_panel, plan.dim, out, R, nullptr);
          break;
        default:
          static_assert(kNvS == 3, "one case per panel width");
          GemmTile<kMrS, kNvS, ALayout::kRowsAlongK>(d, k, ldk, qt_panel, plan.dim, out, R,
                                                     nullptr);
          break;
      }
    }
  }

  // O = alpha O + P V for the item's h-th kv head, P^T in s.scores.
  template <class D>
  static void AccumulatePV(D d, const AttentionArgs& a, const AttentionPlan& plan, int64_t h,
                           const WorkItem& item, const TileKeys& tile, const AttentionScratch& s,
                           const HeadScratch& head) {
    AccumulateTilePV(d, a, plan, item.Rows(a), tile, ConvertedValueRows(plan, s, h), s, head);
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_F32_FMA_TILES_INL_H_
