// The flash forward on one work item: a block of query positions x the query heads that share
// one kv head (GQA rows are packed together, so each K/V tile is converted and read once for
// the whole group), streamed over tiles of keys.
//
// Per tile of bc keys: S^T = K . Q^T (GemmTile; Q^T is packed once per work item, already
// multiplied by scale * log2(e); the K/V tile is converted to dense f32 rows), the online
// softmax on S^T with one lane per query row (flash_softmax-inl.h), then O = alpha O + P V
// (GemmTile again, with the rescale folded into loading O). One division per row at the end.
// Tiles no row can see are never touched; tiles every row sees fully skip the visibility test.
// Cost: 4 * rows * keys * head_dim flops in the two products, plus ~20 vector ops per 16 scores
// for the softmax, and one conversion of each K/V element per work item (~192 rows).
// Scratch: O(rows * (head_dim + bc) + bc * head_dim) floats, independent of the sequences.
#if defined(STREAMATTN_CPU_FLASH_FORWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_FLASH_FORWARD_INL_H_
#undef STREAMATTN_CPU_FLASH_FORWARD_INL_H_
#else
#define STREAMATTN_CPU_FLASH_FORWARD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/attention_args.h"
#include "core/online_state.h"
#include "cpu/convert-inl.h"
#include "cpu/flash_softmax-inl.h"
#include "cpu/gemm_tile-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register blocks for this target (see gemm_tile-inl.h): S^T blocks are kMrS keys x kNvS
// vectors of query rows, P.V blocks kMrP query rows x up to kNvP vectors of head_dim.
constexpr size_t kNvS = 3;
constexpr size_t kMrS = kVectorRegisters >= 32 ? 8 : 4;
constexpr size_t kMrP = HWY_TARGET == HWY_SCALAR ? 3 : 6;  // divides kNvS * lanes
constexpr size_t kNvP = kVectorRegisters >= 32 ? 4 : 2;
constexpr size_t kKeysPerTile = 128;  // a multiple of kMrS
constexpr int64_t kTargetRows = 192;  // rows per work item: amortises the K/V conversion

// Shapes and scratch layout of one work item, fixed for the whole call.
struct FlashConfig {
  size_t lanes, panel_rows, rows_pad, dim, dim_v_pad;
  int64_t positions;  // query positions per work item
  // Offsets into the worker's scratch, in floats.
  size_t qt, kc, vc, st, o, m, l, alpha, lo_rel, hi_rel, slope2, diag_rel, tmp, lo, hi, flags;
  size_t total_floats;
};

inline size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

template <class D>
FlashConfig MakeFlashConfig(D d, const AttentionArgs& a) {
  FlashConfig c;
  c.lanes = hn::Lanes(d);
  c.panel_rows = kNvS * c.lanes;  // a multiple of kMrP
  c.positions = std::min<int64_t>(a.seq_q, std::max<int64_t>(1, kTargetRows / a.group));
  c.rows_pad = RoundUp(static_cast<size_t>(c.positions * a.group), c.panel_rows);
  c.dim = static_cast<size_t>(a.head_dim);
  c.dim_v_pad = RoundUp(static_cast<size_t>(a.head_dim_v), c.lanes);
  size_t at = 0;
  auto take = [&](size_t floats) {
    const size_t offset = at;
    at += RoundUp(floats, 16);  // keep every array 64-byte aligned
    return offset;
  };
  c.qt = take(c.rows_pad * c.dim);
  c.kc = take(kKeysPerTile * c.dim);
  c.vc = take(kKeysPerTile * c.dim_v_pad);
  c.st = take(kKeysPerTile * c.rows_pad);
  c.o = take(c.rows_pad * c.dim_v_pad);
  c.m = take(c.rows_pad);
  c.l = take(c.rows_pad);
  c.alpha = take(c.rows_pad);
  c.lo_rel = take(c.rows_pad);
  c.hi_rel = take(c.rows_pad);
  c.slope2 = take(c.rows_pad);
  c.diag_rel = take(c.rows_pad);
  c.tmp = take(std::max(c.dim, c.dim_v_pad));
  c.lo = take(2 * c.rows_pad);  // int64
  c.hi = take(2 * c.rows_pad);  // int64
  c.flags = take(c.rows_pad);   // two bytes per panel
  c.total_floats = at;
  return c;
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

// O[r] = alpha[r] O[r] + P[r] V for kMrP rows, over all head_dim column blocks.
template <class D>
HWY_INLINE void AccumulatePV(D d, const FlashConfig& cfg, const float* pt, size_t ldpt,
                             const float* v, size_t ldv, size_t nb, float* o, const float* alpha) {
  const size_t N = cfg.lanes;
  const size_t vectors = cfg.dim_v_pad / N;
  size_t j = 0;
  for (; j + kNvP <= vectors; j += kNvP) {
    GemmTile<kMrP, kNvP, ALayout::kRowsAdjacent>(d, pt, ldpt, v + j * N, ldv, nb, o + j * N,
                                                 cfg.dim_v_pad, alpha);
  }
  switch (vectors - j) {
    case 3:
      GemmTile<kMrP, 3, ALayout::kRowsAdjacent>(d, pt, ldpt, v + j * N, ldv, nb, o + j * N,
                                                cfg.dim_v_pad, alpha);
      break;
    case 2:
      GemmTile<kMrP, 2, ALayout::kRowsAdjacent>(d, pt, ldpt, v + j * N, ldv, nb, o + j * N,
                                                cfg.dim_v_pad, alpha);
      break;
    case 1:
      GemmTile<kMrP, 1, ALayout::kRowsAdjacent>(d, pt, ldpt, v + j * N, ldv, nb, o + j * N,
                                                cfg.dim_v_pad, alpha);
      break;
    default:
      break;
  }
}

// The same product for tiles where some row hides a key whose V is not finite: zero
// probabilities are skipped instead of multiplied, so 0 * NaN never reaches a row.
template <class D>
HWY_INLINE void AccumulatePVSkippingZeros(D d, const FlashConfig& cfg, const float* pt, size_t ldpt,
                                          const float* v, size_t ldv, size_t nb, float* o,
                                          const float* alpha) {
  for (size_t r = 0; r < kMrP; ++r) {
    float* orow = o + r * cfg.dim_v_pad;
    for (size_t i = 0; i < cfg.dim_v_pad; i += cfg.lanes) {
      hn::StoreU(hn::Mul(hn::LoadU(d, orow + i), hn::Set(d, alpha[r])), d, orow + i);
    }
    for (size_t c = 0; c < nb; ++c) {
      const float p = pt[c * ldpt + r];
      if (p == 0.0f) continue;
      const float* vrow = v + c * ldv;
      for (size_t i = 0; i < cfg.dim_v_pad; i += cfg.lanes) {
        hn::StoreU(hn::MulAdd(hn::Set(d, p), hn::LoadU(d, vrow + i), hn::LoadU(d, orow + i)), d,
                   orow + i);
      }
    }
  }
}

// Rows r = (position pos0 + r / group, query head hkv * group + r % group).
template <class D>
void FlashForwardWorkItem(D d, const AttentionArgs& a, const FlashConfig& cfg, int64_t b,
                          int64_t hkv, int64_t pos0, int64_t pos1, float* HWY_RESTRICT scratch) {
  const size_t N = cfg.lanes, R = cfg.rows_pad, dim = cfg.dim, dvp = cfg.dim_v_pad;
  const size_t rows = static_cast<size_t>((pos1 - pos0) * a.group);
  float* qt = scratch + cfg.qt;
  float* st = scratch + cfg.st;
  float* o = scratch + cfg.o;
  float* m = scratch + cfg.m;
  float* l = scratch + cfg.l;
  float* alpha = scratch + cfg.alpha;
  float* tmp = scratch + cfg.tmp;
  int64_t* lo = reinterpret_cast<int64_t*>(scratch + cfg.lo);
  int64_t* hi = reinterpret_cast<int64_t*>(scratch + cfg.hi);

  // Per row: visible keys, ALiBi, and the row of Q^T (scaled so products are base-2 scores,
  // or tanh arguments under softcap).
  const float q_scale = a.softcap > 0.0f ? a.scale / a.softcap : a.scale * kLog2e;
  int64_t key_lo = a.seq_k, key_hi = -1;  // union of the rows' visible keys
  for (size_t r = 0; r < R; ++r) {
    float* qt_col = qt + (r / cfg.panel_rows) * dim * cfg.panel_rows + r % cfg.panel_rows;
    m[r] = kNegInf;
    l[r] = 0.0f;
    if (r >= rows) {
      lo[r] = 1, hi[r] = 0;  // a padding row sees nothing
      for (size_t i = 0; i < dim; ++i) qt_col[i * cfg.panel_rows] = 0.0f;
      continue;
    }
    const int64_t pos = pos0 + static_cast<int64_t>(r) / a.group;
    const int64_t h = hkv * a.group + static_cast<int64_t>(r) % a.group;
    const KeyRange range = VisibleKeys(a, pos, a.seq_k);
    lo[r] = range.lo, hi[r] = range.hi;
    if (!range.empty()) key_lo = std::min(key_lo, range.lo), key_hi = std::max(key_hi, range.hi);
    LoadRowAsF32(d, a.q.dtype, a.q.At(b, pos, h, 0), a.q.stride(3), dim, tmp);
    for (size_t i = 0; i < dim; ++i) qt_col[i * cfg.panel_rows] = tmp[i] * q_scale;
  }
  std::fill(o, o + R * dvp, 0.0f);

  TileScoring scoring;
  scoring.lo = scratch + cfg.lo_rel;
  scoring.hi = scratch + cfg.hi_rel;
  if (!a.alibi_slopes.empty()) {
    scoring.alibi_slope2 = scratch + cfg.slope2;
    scoring.diagonal = scratch + cfg.diag_rel;
    for (size_t r = 0; r < R; ++r) {
      const int64_t h = hkv * a.group + static_cast<int64_t>(r) % a.group;
      scratch[cfg.slope2 + r] = r < rows ? -a.alibi_slopes[h] * kLog2e : 0.0f;
    }
  }
  const size_t panels = (rows + cfg.panel_rows - 1) / cfg.panel_rows;
  uint8_t* panel_active = reinterpret_cast<uint8_t*>(scratch + cfg.flags);
  uint8_t* panel_partial = panel_active + panels;

  for (int64_t k0 = key_lo; k0 <= key_hi; k0 += kKeysPerTile) {
    const size_t nb = static_cast<size_t>(std::min<int64_t>(kKeysPerTile, key_hi + 1 - k0));
    const size_t nb_pad = RoundUp(nb, kMrS);
    // The tile's K and V rows, converted to dense f32 (even from f32: contiguous rows beat the
    // caller's strided ones, whose 4 KiB-apart rows fight over L1 sets, and the copy is paid
    // once per work item, not per row of it).
    float* kt = scratch + cfg.kc;
    float* vt = scratch + cfg.vc;
    const size_t ldk = dim, ldv = dvp;
    for (size_t c = 0; c < nb; ++c) {
      const int64_t key = k0 + static_cast<int64_t>(c);
      LoadRowAsF32(d, a.k.dtype, a.k.At(b, key, hkv, 0), a.k.stride(3), dim, kt + c * ldk);
      float* vrow = vt + c * ldv;
      LoadRowAsF32(d, a.v.dtype, a.v.At(b, key, hkv, 0), a.v.stride(3),
                   static_cast<size_t>(a.head_dim_v), vrow);
      std::fill(vrow + a.head_dim_v, vrow + dvp, 0.0f);
    }
    std::fill(kt + nb * ldk, kt + nb_pad * ldk, 0.0f);  // whole S^T register blocks

    bool any_partial = false;
    for (size_t p = 0; p < panels; ++p) {
      const size_t r0 = p * cfg.panel_rows;
      bool any = false, full = true;
      for (size_t r = r0; r < r0 + cfg.panel_rows; ++r) {
        const int64_t tile_hi = k0 + static_cast<int64_t>(nb) - 1;
        const bool sees_some = lo[r] <= tile_hi && hi[r] >= k0 && lo[r] <= hi[r];
        any = any || sees_some;
        full = full && lo[r] <= k0 && hi[r] >= tile_hi;
        scratch[cfg.lo_rel + r] = static_cast<float>(std::max<int64_t>(lo[r] - k0, -1));
        scratch[cfg.hi_rel + r] =
            static_cast<float>(std::min<int64_t>(hi[r] - k0, static_cast<int64_t>(nb)));
        if (scoring.alibi_slope2 != nullptr) {
          const int64_t pos = pos0 + static_cast<int64_t>(r) / a.group;
          scratch[cfg.diag_rel + r] = static_cast<float>(pos + a.seq_k - a.seq_q - k0);
        }
      }
      // A caller's mask can hide keys too: such tiles count as partial for the NaN-safe P.V.
      panel_active[p] = any;
      panel_partial[p] = !full || a.has_mask;
      if (!any) continue;
      any_partial = any_partial || panel_partial[p];
      const float* qt_panel = qt + p * dim * cfg.panel_rows;
      for (size_t c = 0; c < nb_pad; c += kMrS) {
        GemmTile<kMrS, kNvS, ALayout::kRowsAlongK>(d, kt + c * ldk, ldk, qt_panel, cfg.panel_rows,
                                                   dim, st + c * R + r0, R, nullptr);
      }
      if (a.softcap > 0.0f) {
        ApplySoftcap(d, a.softcap * kLog2e, st + r0, R, nb, cfg.panel_rows);
      }
      if (a.has_mask) {
        AddMask(a, b, hkv, pos0, r0, std::min(r0 + cfg.panel_rows, rows), k0, nb, st, R);
      }
      TileScoring panel_scoring = scoring;  // per-row arrays start at the panel's first row
      panel_scoring.full = full;
      panel_scoring.lo += r0, panel_scoring.hi += r0;
      if (scoring.alibi_slope2) panel_scoring.alibi_slope2 += r0, panel_scoring.diagonal += r0;
      OnlineSoftmaxPanel(d, panel_scoring, st + r0, R, nb, cfg.panel_rows, m + r0, l + r0,
                         alpha + r0);
    }
    const bool careful =
        any_partial && AnyNonFinite(d, vt, ldv, nb, static_cast<size_t>(a.head_dim_v));
    for (size_t p = 0; p < panels; ++p) {
      if (!panel_active[p]) continue;
      for (size_t r = p * cfg.panel_rows; r < (p + 1) * cfg.panel_rows && r < rows; r += kMrP) {
        if (careful && panel_partial[p]) {
          AccumulatePVSkippingZeros(d, cfg, st + r, R, vt, ldv, nb, o + r * dvp, alpha + r);
        } else {
          AccumulatePV(d, cfg, st + r, R, vt, ldv, nb, o + r * dvp, alpha + r);
        }
      }
    }
  }

  // Finish each row: the sink joins the state as one more logit with a zero value, then
  // out = O / l and lse = ln(sum e^s).
  for (size_t r = 0; r < rows; ++r) {
    const int64_t pos = pos0 + static_cast<int64_t>(r) / a.group;
    const int64_t h = hkv * a.group + static_cast<int64_t>(r) % a.group;
    RowState state{m[r], l[r]};
    float o_factor = 1.0f;
    if (!a.sinks.empty() && a.sinks[h] != kNegInf) {
      const float sink = a.sinks[h] * kLog2e;
      const float m_new = std::isnan(state.m) || state.m > sink ? state.m : sink;
      o_factor = RescaleFactor(state.m, m_new);
      state.l = state.l * o_factor + RescaleFactor(sink, m_new);
      state.m = m_new;
    }
    float* orow = o + r * dvp;
    if (state.l == 0.0f) {
      std::fill(orow, orow + dvp, 0.0f);  // a row that sees nothing: 0, never 0/0
    } else {
      const auto inv = hn::Set(d, o_factor / state.l);
      for (size_t i = 0; i < dvp; i += N)
        hn::StoreU(hn::Mul(hn::LoadU(d, orow + i), inv), d, orow + i);
    }
    StoreRowFromF32(orow, static_cast<size_t>(a.head_dim_v), a.out.dtype, a.out.At(b, pos, h, 0),
                    a.out.stride(3));
    if (a.has_lse) *a.lse.At<float>(b, h, pos) = NaturalLse(state);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_FLASH_FORWARD_INL_H_
