// What both attention drivers do with one kv head's tile once its raw scores q.k are in S^T
// (GEMM or dot products): per panel of rows, softcap, ALiBi and the caller's mask, then the
// online softmax (FinishPanelScores); then O = alpha O + P V over the panels that see the tile
// (AccumulateTilePV), NaN-safe where a hidden key's V may hold NaN or Inf.
#if defined(STREAMATTN_CPU_TILE_UPDATE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_TILE_UPDATE_INL_H_
#undef STREAMATTN_CPU_TILE_UPDATE_INL_H_
#else
#define STREAMATTN_CPU_TILE_UPDATE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/attention_args.h"
#include "core/online_state.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/pv_block-inl.h"
#include "cpu/tile_softmax-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Adds the caller's additive mask (times log2 e) to the raw products of rows [r0, r1) and
// keys [k0, k0 + nb); -inf in the mask hides the key whatever the product is.
inline void AddMask(const AttentionArgs& a, int64_t b, int64_t hkv, int64_t pos0, size_t r0,
                    size_t r1, int64_t k0, size_t nb, float* st, size_t ldst) {
  const Tensor& mask = a.mask;
  const int64_t mb = mask.dim(0) == 1 ? 0 : b;
  const int64_t key_step = ElementBytes(mask.dtype, mask.stride(3));
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

// Panel p of kv head hkv's rows over the tile: raw products in S^T (s.scores, rows_pad apart)
// become base-2 scores (softcap, ALiBi, mask, visibility), then the online softmax leaves P^T
// in their place and each row's rescale factor in s.alpha.
template <class D>
HWY_INLINE void FinishPanelScores(D d, const AttentionArgs& a, const AttentionPlan& plan,
                                  const WorkItem& item, int64_t hkv, size_t p, const TileKeys& tile,
                                  const AttentionScratch& s, const HeadScratch& head) {
  const size_t R = plan.rows_pad, r0 = p * plan.panel_rows;
  const size_t panel_end = std::min(r0 + plan.panel_rows, item.Rows(a));
  const size_t width = plan.PanelWidth(item.Rows(a), p);  // the lanes ScorePanel computed
  float* st = s.scores;
  if (a.softcap > 0.0f) ApplySoftcap(d, a.softcap * kLog2e, st + r0, R, tile.nb, width);
  if (a.has_mask) AddMask(a, item.b, hkv, item.pos0, r0, panel_end, tile.k0, tile.nb, st, R);
  TileScoring scoring;  // per-row arrays start at the panel's first row
  scoring.full = s.panel_covered[p];
  scoring.lo = s.lo_rel + r0;
  scoring.hi = s.hi_rel + r0;
  if (!a.alibi_slopes.empty()) {
    scoring.alibi_slope2 = head.slope2 + r0;
    scoring.diagonal = s.diagonal_rel + r0;
  }
  OnlineSoftmaxPanel(d, scoring, st + r0, R, tile.nb, width, head.m + r0, head.l + r0,
                     s.alpha + r0);
}

// O = alpha O + P V for the rows of every panel that sees the tile, P^T in s.scores and V rows
// from `values` (kv_rows-inl.h). A hidden key's V may hold NaN or Inf, which must never be
// multiplied by its zero probability: where some panel hides keys and a converted V row is not
// finite, those panels skip zero probabilities instead. (Rows read in place come only from
// tiles every row sees whole.)
template <class D, class VRows>
HWY_INLINE void AccumulateTilePV(D d, const AttentionArgs& a, const AttentionPlan& plan,
                                 size_t rows, const TileKeys& tile, const VRows& values,
                                 const AttentionScratch& s, const HeadScratch& head) {
  const size_t R = plan.rows_pad, dvp = plan.dim_v_pad;
  const size_t panels = (rows + plan.panel_rows - 1) / plan.panel_rows;
  bool careful = false;
  if constexpr (std::is_same_v<VRows, DenseRows>) {
    bool any_partial = false;
    for (size_t p = 0; p < panels; ++p) any_partial |= s.panel_active[p] && s.panel_partial[p];
    careful = any_partial &&
              AnyNonFinite(d, values.base, values.ld, tile.nb, static_cast<size_t>(a.head_dim_v));
  }
  for (size_t p = 0; p < panels; ++p) {
    if (!s.panel_active[p]) continue;
    const size_t panel_end = std::min((p + 1) * plan.panel_rows, rows);
    for (size_t r = p * plan.panel_rows; r < panel_end; r += kMrP) {
      const size_t block = std::min(kMrP, panel_end - r);
      const size_t keys = std::min(tile.nb, RowBlockKeys(s, tile, p, r, r + block));  // then P = 0
      if constexpr (std::is_same_v<VRows, DenseRows>) {
        if (careful && s.panel_partial[p]) {
          AccumulatePVSkippingZeros(d, block, dvp, s.scores + r, R, values.base, values.ld, keys,
                                    head.o + r * dvp, s.alpha + r);
          continue;
        }
      }
      AccumulatePV(d, block, dvp, s.scores + r, R, r == 0 ? values : values.WithoutPrefetch(), keys,
                   head.o + r * dvp, s.alpha + r);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_TILE_UPDATE_INL_H_
