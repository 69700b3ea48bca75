// The flash forward on one work item: a block of query positions x the query heads that share
// one kv head (GQA rows packed together, so each K/V tile is converted and read once for the
// whole group), streamed over the tiles of one chunk of keys.
//
// Per tile of bc keys: convert the K/V rows to dense f32 (contiguous or paged cache alike),
// scores S^T[key][row] (GEMM or dot products, flash_tile-inl.h; Q is packed once per work item,
// already multiplied by scale * log2(e)), the online softmax with one lane per query row
// (flash_softmax-inl.h), then O = alpha O + P V (GemmTile, the rescale folded into loading O).
// Decoding (dot scores) skips the conversion on tiles every row sees whole: its few rows per
// head cannot amortise a store and reload of each K/V element, so the products read the cache
// in place and convert in registers (kv_rows-inl.h); edge tiles still convert. There, the
// scores of few rows per head (packed) read the tile key block by key block across the heads,
// and each head's P.V runs after the next head's softmax (software pipelining over heads);
// runs of such tiles, where the target has the registers, stream instead: the next tile's
// scores beside this tile's P.V, 4 keys at a time (flash_decode_tiles-inl.h).
// Tiles no row can see are never touched; tiles every row sees skip the visibility test.
// The result is a state (m, l, O) per row: finished (sink, O / l, lse) when the chunk is all of
// the keys, else kept as a partial result for the split-KV merge (flash_forward.cc).
// Cost: 4 * rows * keys * head_dim flops in the products, ~16 vector ops per 16 scores for the
// softmax, one conversion of each K/V element per work item (~192 rows), and for dot scores a
// horizontal sum per score. Scratch: O(rows * (head_dim + bc) + bc * head_dim) floats.
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
#include <type_traits>
#include <utility>

#include "core/attention_args.h"
#include "core/online_state.h"
#include "cpu/convert-inl.h"
#include "cpu/flash_decode_tiles-inl.h"
#include "cpu/flash_softmax-inl.h"
#include "cpu/flash_tile-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/online_state-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One work item: rows r = (position pos0 + r / group, query head hkv * group + r % group) of
// sequence b for each kv head hkv in [hkv_begin, hkv_begin + cfg.heads), against keys
// [chunk_begin, chunk_end).
struct WorkItem {
  int64_t b, hkv_begin, pos0, pos1;
  int64_t chunk_begin, chunk_end;
  float* partial;  // nullptr: write the finished rows; else m, l, O of every row go here
};

// Finishes one row: the sink joins the state as one more logit with a zero value, then
// out = O / l and lse = ln(sum e^s). o_row (dim_v_pad floats) is scaled in place.
template <class D>
HWY_INLINE void FinishRow(D d, const AttentionArgs& a, int64_t b, int64_t pos, int64_t h,
                          RowState state, float* HWY_RESTRICT o_row, size_t dim_v_pad) {
  float o_factor = 1.0f;
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
    const auto inv = hn::Set(d, o_factor / state.l);
    for (size_t i = 0; i < dim_v_pad; i += hn::Lanes(d)) {
      hn::StoreU(hn::Mul(hn::LoadU(d, o_row + i), inv), d, o_row + i);
    }
  }
  StoreRowFromF32(d, o_row, static_cast<size_t>(a.head_dim_v), a.out.dtype, a.out.At(b, pos, h, 0),
                  a.out.stride(3));
  if (a.has_lse) *a.lse.At<float>(b, h, pos) = NaturalLse(state);
}

// Converts keys [k0, k0 + nb) of the item's kv heads to dense f32, key after key and head
// after head, so the reads sweep the cache in address order (contiguous or paged alike). The
// tile is key-major: head h's row of key c is at kt + (c * heads + h) * dim_pad (so a head's
// rows are heads * dim_pad apart), V likewise; K rows past nb, to nb_pad, are zero.
template <class D>
HWY_INLINE void LoadKeyTile(D d, const AttentionArgs& a, const FlashConfig& cfg, int64_t b,
                            int64_t hkv_begin, int64_t k0, size_t nb, size_t nb_pad, float* kt,
                            float* vt) {
  const size_t heads = static_cast<size_t>(cfg.heads);
  const size_t dim_v = static_cast<size_t>(a.head_dim_v);
  // When a key's heads are one dense run of elements (the usual [.., heads_kv, dim] layout
  // with unpadded dims), one conversion covers all of them.
  const bool k_dense =
      cfg.dim == cfg.dim_pad && a.k.stride(3) == 1 && (heads == 1 || a.k.stride(2) == a.head_dim);
  const bool v_dense =
      dim_v == cfg.dim_v_pad && a.v.stride(3) == 1 && (heads == 1 || a.v.stride(2) == a.head_dim_v);
  for (size_t c = 0; c < nb; ++c) {
    const int64_t key = k0 + static_cast<int64_t>(c);
    float* krow = kt + c * heads * cfg.dim_pad;
    if (k_dense) {
      LoadRowAsF32(d, a.k.dtype, a.KeyRow(a.k, b, key, hkv_begin), 1, heads * cfg.dim, krow);
    } else {
      for (size_t h = 0; h < heads; ++h) {
        float* row = krow + h * cfg.dim_pad;
        LoadRowAsF32(d, a.k.dtype, a.KeyRow(a.k, b, key, hkv_begin + static_cast<int64_t>(h)),
                     a.k.stride(3), cfg.dim, row);
        std::fill(row + cfg.dim, row + cfg.dim_pad, 0.0f);
      }
    }
    float* vrow = vt + c * heads * cfg.dim_v_pad;
    if (v_dense) {
      LoadRowAsF32(d, a.v.dtype, a.KeyRow(a.v, b, key, hkv_begin), 1, heads * dim_v, vrow);
    } else {
      for (size_t h = 0; h < heads; ++h) {
        float* row = vrow + h * cfg.dim_v_pad;
        LoadRowAsF32(d, a.v.dtype, a.KeyRow(a.v, b, key, hkv_begin + static_cast<int64_t>(h)),
                     a.v.stride(3), dim_v, row);
        std::fill(row + dim_v, row + cfg.dim_v_pad, 0.0f);
      }
    }
  }
  std::fill(kt + nb * heads * cfg.dim_pad, kt + nb_pad * heads * cfg.dim_pad, 0.0f);
}

// Packs head hkv's query rows, scaled so products are base-2 scores (or tanh arguments under
// softcap): Q^T panels for the GEMM, rows for dot scores. Padding rows are zero.
template <class D>
HWY_INLINE void PackQueries(D d, const AttentionArgs& a, const FlashConfig& cfg,
                            const WorkItem& item, int64_t hkv, size_t rows, float* q, float* tmp) {
  const float q_scale = a.softcap > 0.0f ? a.scale / a.softcap : a.scale * kLog2e;
  const size_t step = cfg.dot_scores ? 1 : cfg.panel_rows;
  for (size_t r = 0; r < cfg.rows_pad; ++r) {
    float* column = cfg.dot_scores
                        ? q + r * cfg.dim_pad
                        : q + (r / cfg.panel_rows) * cfg.dim * cfg.panel_rows + r % cfg.panel_rows;
    if (r >= rows) {
      for (size_t i = 0; i < (cfg.dot_scores ? cfg.dim_pad : cfg.dim); ++i) column[i * step] = 0.0f;
      continue;
    }
    const int64_t pos = item.pos0 + static_cast<int64_t>(r) / a.group;
    const int64_t h = hkv * a.group + static_cast<int64_t>(r) % a.group;
    LoadRowAsF32(d, a.q.dtype, a.q.At(item.b, pos, h, 0), a.q.stride(3), cfg.dim, tmp);
    for (size_t i = 0; i < cfg.dim; ++i) column[i * step] = tmp[i] * q_scale;
    for (size_t i = cfg.dim; i < cfg.dim_pad && cfg.dot_scores; ++i) column[i] = 0.0f;
  }
}

// One kv head's scores, softmax and P.V for one tile: rows' states in `head` advance by the
// keys [k0, k0 + nb), whose rows come from `keys` and `values` (kv_rows-inl.h): the converted
// tile (DenseRows), or the cache in place (CacheRows), which FlashForwardWorkItem uses only
// for dot scores on tiles every row sees whole.
template <class D, class KRows, class VRows>
HWY_NOINLINE void AdvanceHeadOverTile(D d, const AttentionArgs& a, const FlashConfig& cfg,
                                      const WorkItem& item, int64_t hkv, size_t rows, int64_t k0,
                                      size_t nb, size_t nb_pad, const KRows& keys,
                                      const VRows& values, const TileScoring& scoring, float* head,
                                      float* HWY_RESTRICT scratch) {
  constexpr bool kDense = std::is_same_v<KRows, DenseRows> && std::is_same_v<VRows, DenseRows>;
  const size_t R = cfg.rows_pad, dvp = cfg.dim_v_pad;
  const size_t panels = (rows + cfg.panel_rows - 1) / cfg.panel_rows;
  const uint8_t* panel_active = reinterpret_cast<const uint8_t*>(scratch + cfg.flags);
  const uint8_t* panel_partial = panel_active + panels;
  const uint8_t* panel_covered = panel_partial + panels;
  float* q = head + cfg.head_q;
  float* o = head + cfg.head_o;
  float* m = head + cfg.head_m;
  float* l = head + cfg.head_l;
  float* st = scratch + cfg.st;
  float* alpha = scratch + cfg.alpha;
  bool any_partial = false;
  for (size_t p = 0; p < panels; ++p) {
    if (!panel_active[p]) continue;
    any_partial = any_partial || panel_partial[p];
    const size_t r0 = p * cfg.panel_rows;
    if (cfg.dot_scores) {
      // Padding lanes score 0 rather than a stale value, so no lane meets a NaN or a
      // subnormal (whose arithmetic is slow on x86); a row of S^T is one vector here.
      for (size_t c = 0; c < nb; ++c) hn::StoreU(hn::Zero(d), d, st + c * R);
      DotScores(d, q, cfg.dim_pad, rows, keys, nb_pad, cfg.dim_pad, st, R);
    } else if constexpr (std::is_same_v<KRows, DenseRows>) {
      const DenseRows qt_panel{q + p * cfg.dim * cfg.panel_rows, cfg.panel_rows};
      for (size_t c = 0; c < nb_pad; c += kMrS) {
        const float* k = keys.Row(c);
        float* out = st + c * R + r0;
        switch (cfg.panel_vectors) {
          case 1:
            GemmTile<kMrS, 1, ALayout::kRowsAlongK>(d, k, keys.ld, qt_panel, cfg.dim, out, R,
                                                    nullptr);
            break;
          case 2:
            GemmTile<kMrS, 2, ALayout::kRowsAlongK>(d, k, keys.ld, qt_panel, cfg.dim, out, R,
                                                    nullptr);
            break;
          default:
            static_assert(kNvS == 3, "one case per panel width");
            GemmTile<kMrS, kNvS, ALayout::kRowsAlongK>(d, k, keys.ld, qt_panel, cfg.dim, out, R,
                                                       nullptr);
            break;
        }
      }
    }
    const size_t panel_end = std::min(r0 + cfg.panel_rows, rows);
    if (a.softcap > 0.0f) ApplySoftcap(d, a.softcap * kLog2e, st + r0, R, nb, cfg.panel_rows);
    if (a.has_mask) AddMask(a, item.b, hkv, item.pos0, r0, panel_end, k0, nb, st, R);
    TileScoring panel_scoring = scoring;  // per-row arrays start at the panel's first row
    panel_scoring.full = panel_covered[p];
    panel_scoring.lo += r0, panel_scoring.hi += r0;
    if (!a.alibi_slopes.empty()) {
      panel_scoring.alibi_slope2 = head + cfg.head_slope2 + r0;
      panel_scoring.diagonal += r0;
    }
    OnlineSoftmaxPanel(d, panel_scoring, st + r0, R, nb, cfg.panel_rows, m + r0, l + r0,
                       alpha + r0);
  }
  bool careful = false;  // a hidden key's V may hold NaN or Inf: never multiply it by zero
  if constexpr (kDense) {
    careful = any_partial &&
              AnyNonFinite(d, values.base, values.ld, nb, static_cast<size_t>(a.head_dim_v));
  }
  for (size_t p = 0; p < panels; ++p) {
    if (!panel_active[p]) continue;
    const size_t panel_end = std::min((p + 1) * cfg.panel_rows, rows);
    for (size_t r = p * cfg.panel_rows; r < panel_end; r += kMrP) {
      const size_t block = std::min(kMrP, panel_end - r);
      if constexpr (kDense) {
        if (careful && panel_partial[p]) {
          AccumulatePVSkippingZeros(d, block, dvp, st + r, R, values.base, values.ld, nb,
                                    o + r * dvp, alpha + r);
          continue;
        }
      }
      AccumulatePV(d, block, dvp, st + r, R, r == 0 ? values : values.WithoutPrefetch(), nb,
                   o + r * dvp, alpha + r);
    }
  }
}

// Advances every head of the work item over one tile read from the cache in place (elements
// of type T: f32, f16 or bf16), for dot scores on a tile that every row sees whole, so no key
// is hidden and no V row needs the NaN-safe product. Each head's rows also carry the rows to
// prefetch as the products walk them (kv_rows-inl.h): the next head's K rows during the
// scores, its V rows during the P.V.
template <typename T, class D>
HWY_NOINLINE void AdvanceHeadsOverCacheTile(D d, const AttentionArgs& a, const FlashConfig& cfg,
                                            const WorkItem& item, size_t rows, int64_t k0,
                                            size_t nb, size_t nb_pad, int64_t key_end,
                                            const TileScoring& scoring,
                                            float* HWY_RESTRICT scratch) {
  const size_t heads = static_cast<size_t>(cfg.heads), kpt = cfg.keys_per_tile;
  // One pointer per key, at the item's first kv head; each head adds its offset. Padding keys
  // (to nb_pad) reuse the tile's first row: their scores are computed but never read; so do
  // the entries past them, which only the prefetch reads. Keys past key_end have no next tile:
  // the prefetch then requests this tile's first row again. The next tile's K rows follow this
  // tile's, so ScorePackedHeads' last block requests the next tile's first.
  const T** key_rows = reinterpret_cast<const T**>(scratch + cfg.cache_rows);
  const T** next_key_rows = key_rows + kpt;  // the next tile's, for the last head's prefetch
  const T** value_rows = next_key_rows + kpt;
  const T** next_value_rows = value_rows + kpt;
  a.KeyRows(item.b, k0, static_cast<int64_t>(nb), item.hkv_begin, key_rows, value_rows);
  for (size_t c = nb; c < kpt; ++c) key_rows[c] = key_rows[0], value_rows[c] = value_rows[0];
  const int64_t next_count =
      std::clamp<int64_t>(key_end - (k0 + static_cast<int64_t>(kpt)), 0, static_cast<int64_t>(kpt));
  a.KeyRows(item.b, k0 + static_cast<int64_t>(kpt), next_count, item.hkv_begin, next_key_rows,
            next_value_rows);
  for (size_t c = static_cast<size_t>(next_count); c < kpt; ++c) {
    next_key_rows[c] = key_rows[0], next_value_rows[c] = value_rows[0];
  }
  // Head h's K and V rows: the tile's pointers plus the head's offset. For the prefetch
  // (kv_rows-inl.h), K rows carry the K rows of the head after h (the next tile's first head
  // after the last), and V rows the V rows of the head after h, whose P.V comes next.
  // The rows of the head after h: this tile's, or after the last head the next tile's first.
  auto after = [&](size_t h, const T** this_tile, const T** next_tile, const Tensor& t) {
    const bool last = h + 1 == heads;
    return std::make_pair(last ? next_tile : this_tile,
                          last ? 0 : static_cast<ptrdiff_t>(h + 1) * t.stride(2));
  };
  auto head_keys = [&](size_t h) {
    const auto [next, next_offset] = after(h, key_rows, next_key_rows, a.k);
    return CacheRows<T>{key_rows, static_cast<ptrdiff_t>(h) * a.k.stride(2), next, nullptr,
                        next_offset};
  };
  auto head_values = [&](size_t h) {
    const auto [next, next_offset] = after(h, value_rows, next_value_rows, a.v);
    return CacheRows<T>{value_rows, static_cast<ptrdiff_t>(h) * a.v.stride(2), nullptr, next, 0,
                        next_offset};
  };
  if (cfg.packed_scores) {
    // Every head's scores first, key block by key block; then the heads' softmax and P.V,
    // software-pipelined: head h's P.V runs after head h + 1's softmax, so the softmax's long
    // dependency chain (max, exp2, lane rotations) overlaps with independent products instead
    // of stalling the P.V that waits on it. Two sets of alpha alternate between the heads.
    float* st = scratch + cfg.st;
    ScorePackedHeads(d, a, cfg, rows, nb_pad, key_rows, scratch, st);
    float* alpha[2] = {scratch + cfg.alpha, scratch + cfg.alpha + cfg.rows_pad};
    for (size_t h = 0; h <= heads; ++h) {
      if (h < heads) {
        SoftmaxPackedHead(d, a, cfg, rows, nb, cfg.Head(scratch, static_cast<int64_t>(h)),
                          st + h * cfg.packed_st_stride, alpha[h % 2]);
      }
      if (h > 0) {
        const size_t prev = h - 1;
        AccumulatePackedPV(d, cfg, rows, nb, head_values(prev),
                           cfg.Head(scratch, static_cast<int64_t>(prev)),
                           st + prev * cfg.packed_st_stride, alpha[prev % 2]);
      }
    }
    return;
  }
  for (size_t h = 0; h < heads; ++h) {
    AdvanceHeadOverTile(d, a, cfg, item, item.hkv_begin + static_cast<int64_t>(h), rows, k0, nb,
                        nb_pad, head_keys(h), head_values(h), scoring,
                        cfg.Head(scratch, static_cast<int64_t>(h)), scratch);
  }
}

// Calls f with a value of the element type of a cache of `dtype` read in place: f32, f16 or
// bf16 (hwy::float16_t, hwy::bfloat16_t).
template <class F>
HWY_INLINE void WithCacheElement(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF16:
      return f(hwy::float16_t{});
    case DType::kBF16:
      return f(hwy::bfloat16_t{});
    default:
      return f(0.0f);
  }
}

template <class D>
void FlashForwardWorkItem(D d, const AttentionArgs& a, const FlashConfig& cfg, const WorkItem& item,
                          float* HWY_RESTRICT scratch) {
  const size_t R = cfg.rows_pad, dvp = cfg.dim_v_pad;
  const size_t rows = static_cast<size_t>((item.pos1 - item.pos0) * a.group);
  const int64_t b = item.b, seq_k = a.SeqK(b);
  int64_t* lo = reinterpret_cast<int64_t*>(scratch + cfg.lo);
  int64_t* hi = reinterpret_cast<int64_t*>(scratch + cfg.hi);

  // The keys each row sees in this chunk (the same for every head), their union, and the keys
  // every real row sees (common_lo..common_hi; empty when some row sees nothing).
  int64_t key_lo = item.chunk_end, key_hi = item.chunk_begin - 1;
  int64_t common_lo = item.chunk_begin, common_hi = item.chunk_end - 1;
  for (size_t r = 0; r < R; ++r) {
    if (r >= rows) {
      lo[r] = 1, hi[r] = 0;  // a padding row sees nothing
      continue;
    }
    const KeyRange range = VisibleKeys(a, item.pos0 + static_cast<int64_t>(r) / a.group, seq_k);
    lo[r] = std::max(range.lo, item.chunk_begin);
    hi[r] = std::min(range.hi, item.chunk_end - 1);
    if (lo[r] <= hi[r]) key_lo = std::min(key_lo, lo[r]), key_hi = std::max(key_hi, hi[r]);
    common_lo = std::max(common_lo, lo[r]);
    common_hi = std::min(common_hi, hi[r]);
  }
  for (int64_t h = 0; h < cfg.heads; ++h) {
    float* head = cfg.Head(scratch, h);
    PackQueries(d, a, cfg, item, item.hkv_begin + h, rows, head + cfg.head_q, scratch + cfg.tmp);
    std::fill(head + cfg.head_m, head + cfg.head_m + R, kNegInf);
    std::fill(head + cfg.head_l, head + cfg.head_l + R, 0.0f);
    std::fill(head + cfg.head_o, head + cfg.head_o + rows * dvp, 0.0f);  // padding rows: unread
    for (size_t r = 0; r < R && !a.alibi_slopes.empty(); ++r) {
      const int64_t hq = (item.hkv_begin + h) * a.group + static_cast<int64_t>(r) % a.group;
      head[cfg.head_slope2 + r] = r < rows ? -a.alibi_slopes[hq] * kLog2e : 0.0f;
    }
  }

  TileScoring scoring;
  scoring.lo = scratch + cfg.lo_rel;
  scoring.hi = scratch + cfg.hi_rel;
  scoring.diagonal = scratch + cfg.diag_rel;  // read only with ALiBi
  const size_t panels = (rows + cfg.panel_rows - 1) / cfg.panel_rows;
  uint8_t* panel_active = reinterpret_cast<uint8_t*>(scratch + cfg.flags);
  uint8_t* panel_partial = panel_active + panels;
  uint8_t* panel_covered = panel_partial + panels;
  for (int64_t k0 = key_lo; k0 <= key_hi; k0 += static_cast<int64_t>(cfg.keys_per_tile)) {
    const size_t nb = static_cast<size_t>(
        std::min<int64_t>(static_cast<int64_t>(cfg.keys_per_tile), key_hi + 1 - k0));
    const size_t nb_pad = RoundUp(nb, cfg.dot_scores ? 4 : kMrS);
    // Which panels see the tile, and whether every row of a panel sees all of it. When every
    // real row sees the whole tile (most tiles) and there is no ALiBi, the per-row visibility
    // arrays are not read: every panel is active and covered, and the row loop is skipped.
    const int64_t tile_hi = k0 + static_cast<int64_t>(nb) - 1;
    const bool every_row_sees_tile =
        common_lo <= k0 && common_hi >= tile_hi && a.alibi_slopes.empty();
    bool any_active = every_row_sees_tile;
    if (every_row_sees_tile) {
      std::fill(panel_active, panel_active + panels, uint8_t{1});
      std::fill(panel_partial, panel_partial + panels, uint8_t{a.has_mask});
      std::fill(panel_covered, panel_covered + panels, uint8_t{1});
    } else {
      for (size_t p = 0; p < panels; ++p) {
        bool any = false, full = true;
        for (size_t r = p * cfg.panel_rows; r < (p + 1) * cfg.panel_rows; ++r) {
          any = any || (lo[r] <= tile_hi && hi[r] >= k0 && lo[r] <= hi[r]);
          // Padding rows' lanes are never read out: they need not see the tile.
          full = full && (r >= rows || (lo[r] <= k0 && hi[r] >= tile_hi));
          scratch[cfg.lo_rel + r] = static_cast<float>(std::max<int64_t>(lo[r] - k0, -1));
          scratch[cfg.hi_rel + r] =
              static_cast<float>(std::min<int64_t>(hi[r] - k0, static_cast<int64_t>(nb)));
          const int64_t pos = item.pos0 + static_cast<int64_t>(r) / a.group;
          scratch[cfg.diag_rel + r] = static_cast<float>(pos + seq_k - a.seq_q - k0);
        }
        panel_active[p] = any;
        any_active = any_active || any;
        // A caller's mask can hide keys too: the P.V must then be NaN-safe (see careful below),
        // though the scores need no visibility test when the ranges cover the tile.
        panel_partial[p] = !full || a.has_mask;
        panel_covered[p] = full;
      }
    }
    if (!any_active) continue;
    if constexpr (kStreamTilesOnTarget) {
      // Decoding with few rows per head: the whole tiles every row sees, from here on, stream
      // as one run (flash_decode_tiles-inl.h).
      if (cfg.stream_tiles && every_row_sees_tile && !a.has_mask && nb == cfg.keys_per_tile) {
        const int64_t kpt = static_cast<int64_t>(cfg.keys_per_tile);
        const int64_t tiles = (std::min(common_hi, key_hi) + 1 - k0) / kpt;
        WithCacheElement(a.k.dtype, [&](auto element) {
          StreamCacheTiles<decltype(element)>(d, a, cfg, b, item.hkv_begin, rows, k0, tiles,
                                              key_hi + 1, scratch);
        });
        k0 += (tiles - 1) * kpt;
        continue;
      }
    }
    // Reading the cache in place is compiled only where f16 converts by an instruction
    // (kNativeF16: AVX2 and up, Arm; cfg.cache_in_place is false elsewhere): its per-dtype
    // micro-kernels would more than double the compile time of the older targets.
    if constexpr (kNativeF16) {
      if (cfg.cache_in_place && !panel_partial[0]) {  // dot scores: a single panel
        WithCacheElement(a.k.dtype, [&](auto element) {
          AdvanceHeadsOverCacheTile<decltype(element)>(d, a, cfg, item, rows, k0, nb, nb_pad,
                                                       key_hi + 1, scoring, scratch);
        });
        continue;
      }
    }
    float* kt = scratch + cfg.kc;
    float* vt = scratch + cfg.vc;
    LoadKeyTile(d, a, cfg, b, item.hkv_begin, k0, nb, nb_pad, kt, vt);
    const size_t ldk = static_cast<size_t>(cfg.heads) * cfg.dim_pad;  // the key-major tile
    const size_t ldv = static_cast<size_t>(cfg.heads) * dvp;
    for (int64_t h = 0; h < cfg.heads; ++h) {
      AdvanceHeadOverTile(d, a, cfg, item, item.hkv_begin + h, rows, k0, nb, nb_pad,
                          DenseRows{kt + h * cfg.dim_pad, ldk}, DenseRows{vt + h * dvp, ldv},
                          scoring, cfg.Head(scratch, h), scratch);
    }
  }

  for (int64_t h = 0; h < cfg.heads; ++h) {
    float* head = cfg.Head(scratch, h);
    if (item.partial != nullptr) {
      float* slot = item.partial + h * R * (2 + dvp);
      std::memcpy(slot, head + cfg.head_m, R * sizeof(float));
      std::memcpy(slot + R, head + cfg.head_l, R * sizeof(float));
      std::memcpy(slot + 2 * R, head + cfg.head_o, rows * dvp * sizeof(float));
      continue;
    }
    for (size_t r = 0; r < rows; ++r) {
      const int64_t pos = item.pos0 + static_cast<int64_t>(r) / a.group;
      const int64_t hq = (item.hkv_begin + h) * a.group + static_cast<int64_t>(r) % a.group;
      FinishRow(d, a, b, pos, hq, RowState{head[cfg.head_m + r], head[cfg.head_l + r]},
                head + cfg.head_o + r * dvp, dvp);
    }
  }
}

// Merges the partial results of num_splits chunks of one work item's keys (each cfg's
// PartialFloats() long, consecutive) and finishes its rows; o_row is dim_v_pad floats of
// scratch.
template <class D>
void MergeSplitsAndFinish(D d, const AttentionArgs& a, const FlashConfig& cfg, const WorkItem& item,
                          const float* partials, int64_t num_splits, float* HWY_RESTRICT o_row) {
  const size_t R = cfg.rows_pad, dvp = cfg.dim_v_pad;
  const size_t rows = static_cast<size_t>((item.pos1 - item.pos0) * a.group);
  for (int64_t h = 0; h < cfg.heads; ++h) {
    for (size_t r = 0; r < rows; ++r) {
      RowState state;
      std::fill(o_row, o_row + dvp, 0.0f);
      for (int64_t s = 0; s < num_splits; ++s) {
        const float* part = partials + s * cfg.PartialFloats() + h * R * (2 + dvp);
        const MergeFactors f = MergeRowStateScalars(&state, RowState{part[r], part[R + r]});
        ScaleAndAddRow(d, o_row, f.a, part + 2 * R + r * dvp, f.b, dvp);
      }
      const int64_t pos = item.pos0 + static_cast<int64_t>(r) / a.group;
      const int64_t hq = (item.hkv_begin + h) * a.group + static_cast<int64_t>(r) % a.group;
      FinishRow(d, a, item.b, pos, hq, state, o_row, dvp);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_FLASH_FORWARD_INL_H_
