// What every native prefill tile kernel shares, whatever its instruction (AVX512_BF16's
// vdpbf16ps, Arm's BFDOT and FMLAL): NativeTiles assembles a tile kernel (the four members of
// prefill/f32_fma_tiles-inl.h) from a Scores part (how Q and K are packed and multiplied) and a
// Values part (how V and P are packed and multiplied), and adds what no part should repeat:
// the f32 P.V of kF32PV (V converted to f32 as the f32 kernel has it, P unrounded), the NaN-safe
// P.V of tiles whose hidden keys have non-finite values, and the loops that cut the P.V into
// register blocks. K and V rows of 16-bit elements are copied as they are (CopyTileRows).
//
// A Scores part: kName; Supports(a) (the call's dtypes and this CPU); PackQueries(a, plan,
// item, hkv, q); LoadKeys(a, plan, item, tile, s); ScorePanel(a, plan, p, h, tile, s, head)
// writing raw S^T scaled to base-2 scores, as F32FmaTiles::ScorePanel does.
// A Values part: Stored (the element type of its V tile); Value(v, ldv, c, x), key c's column
// x as float; LoadValues(d, a, plan, item, tile, v_tile); RoundProbabilities(d, plan, rows,
// tile, scores), P^T in place in its layout; Accumulate(plan, rows, tile, v, ldv, s, head),
// O = alpha O + P V; ReadsValuesInPlace(a, plan, item), whether it skips LoadValues and instead
// takes the whole P.V of the item's kv head h in AccumulateInPlace(d, a, plan, item, h, tile, s,
// head), rounding P and reading V where it lies (LoadedValues: never).
#if defined(STREAMATTN_CPU_PREFILL_NATIVE_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_NATIVE_TILES_INL_H_
#undef STREAMATTN_CPU_PREFILL_NATIVE_TILES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_NATIVE_TILES_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/attention_args.h"
#include "core/tensor.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/cache_element-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/tile_update-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// The targets where the Arm native kernels compile: the aarch64 targets of whole 128-bit
// vectors (NEON and every SVE width), whose panels and head dims are multiples of 4 floats, with
// GCC 12 or later (the compiler the ARM CI builds with; clang 14's arm_neon.h declares the bf16
// types only for files compiled for BF16 throughout, not per function).
#undef SATTN_ARM_NATIVE_TARGET  // defined once per target
#if HWY_ARCH_ARM_A64 && HWY_COMPILER_GCC_ACTUAL >= 1200 &&                        \
    (HWY_TARGET == HWY_NEON || HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || \
     HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128)
#define SATTN_ARM_NATIVE_TARGET 1
#else
#define SATTN_ARM_NATIVE_TARGET 0
#endif

// The bits of a 16-bit tensor's element i of row `row` (stride in elements).
inline uint16_t Bits16(const void* row, int64_t stride, size_t i) {
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(row) + static_cast<int64_t>(i) * stride * 2, 2);
  return bits;
}

// A row of a 16-bit tensor copied as it is into `dim_pad` elements, zero past `dim`.
inline void CopyRow16(const void* row, int64_t stride, size_t dim, size_t dim_pad,
                      uint16_t* HWY_RESTRICT out) {
  if (stride == 1) {
    std::memcpy(out, row, dim * sizeof(uint16_t));
  } else {
    for (size_t i = 0; i < dim; ++i) out[i] = Bits16(row, stride, i);
  }
  std::fill(out + dim, out + dim_pad, uint16_t{0});
}

// The tile's rows of `cache` (K or V, 16-bit elements) for the item's kv heads, as they are:
// key c of head h at out + (c * heads + h) * dim_pad; keys from nb to nb_pad zero.
inline void CopyTileRows(const AttentionArgs& a, const Tensor& cache, const AttentionPlan& plan,
                         const WorkItem& item, const TileKeys& tile, size_t dim, size_t dim_pad,
                         uint16_t* HWY_RESTRICT out) {
  const size_t heads = static_cast<size_t>(plan.heads);
  for (size_t c = 0; c < tile.nb; ++c) {
    for (size_t h = 0; h < heads; ++h) {
      const int64_t key = tile.k0 + static_cast<int64_t>(c);
      CopyRow16(a.KeyRow(cache, item.b, key, item.hkv_begin + static_cast<int64_t>(h)),
                cache.stride(3), dim, dim_pad, out + (c * heads + h) * dim_pad);
    }
  }
  std::fill(out + tile.nb * heads * dim_pad, out + tile.nb_pad * heads * dim_pad, uint16_t{0});
}

// Calls f(std::integral_constant<size_t, n>()) for a run-time n >= 1, capped at kMax (a panel
// wider than the widest block takes that block): micro-kernels take their register block's
// shape as template arguments.
template <size_t kMax, class F>
HWY_INLINE void WithCount(size_t n, const F& f) {
  if constexpr (kMax > 1) {
    if (n < kMax) return WithCount<kMax - 1>(n, f);
  }
  f(std::integral_constant<size_t, kMax>());
}

// O = alpha O + P V in Blocks' register blocks, for the rows (below `rows`) of every panel
// that sees the tile: blocks of mr <= Blocks::kPVRows rows from row r and nv <=
// Blocks::kPVVectors vectors of Blocks::kColumns columns from column x, each
// Blocks::PVBlock<mr, nv>(p + r, rows_pad, v + x, ldv, count, o, dim_v_pad, alpha + r) over
// `count` steps of `keys_per_step` keys (1, or 2 for pairs) of the tile's P (p) and V (v, rows
// ldv apart), each block of rows up to the step of the last key it sees (RowBlockKeys).
template <class Blocks, typename P, typename V>
HWY_INLINE void AccumulateInBlocks(const AttentionPlan& plan, size_t rows, const P* p, const V* v,
                                   size_t ldv, const TileKeys& tile, size_t count,
                                   size_t keys_per_step, const AttentionScratch& s,
                                   const HeadScratch& head) {
  constexpr size_t kRows = Blocks::kPVRows, kVectors = Blocks::kPVVectors;
  const size_t panels = (rows + plan.panel_rows - 1) / plan.panel_rows;
  const size_t R = plan.rows_pad, dvp = plan.dim_v_pad;
  for (size_t panel = 0; panel < panels; ++panel) {
    if (!s.panel_active[panel]) continue;
    const size_t end = std::min((panel + 1) * plan.panel_rows, rows);
    for (size_t r = panel * plan.panel_rows; r < end; r += kRows) {
      const size_t keys = RowBlockKeys(s, tile, panel, r, std::min(r + kRows, end));
      const size_t steps = std::min(count, (keys + keys_per_step - 1) / keys_per_step);
      for (size_t x = 0; x < dvp; x += kVectors * Blocks::kColumns) {
        WithCount<kRows>(std::min(kRows, end - r), [&](auto mr) {
          WithCount<kVectors>(std::min(kVectors, (dvp - x) / Blocks::kColumns), [&](auto nv) {
            Blocks::template PVBlock<decltype(mr)::value, decltype(nv)::value>(
                p + r, R, v + x, ldv, steps, head.o + r * dvp + x, dvp, s.alpha + r);
          });
        });
      }
    }
  }
}

// Whether a panel that sees the tile hides some of its keys while a V value of the tile is not
// finite: a hidden key's zero probability must then never meet its NaN or Inf.
template <class Values>
bool HidesNonFiniteValues(const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                          const TileKeys& tile, const typename Values::Stored* v, size_t ldv,
                          const AttentionScratch& s) {
  const size_t panels = (item.Rows(a) + plan.panel_rows - 1) / plan.panel_rows;
  bool any_partial = false;
  for (size_t p = 0; p < panels; ++p) any_partial |= s.panel_active[p] && s.panel_partial[p];
  if (!any_partial) return false;
  const size_t dim_v = static_cast<size_t>(a.head_dim_v);
  for (size_t c = 0; c < tile.nb; ++c) {
    for (size_t x = 0; x < dim_v; ++x) {
      if (!std::isfinite(Values::Value(v, ldv, c, x))) return true;
    }
  }
  return false;
}

// The NaN-safe P.V, one row and key at a time, P unrounded (only for tiles with non-finite
// hidden values).
template <class Values>
void AccumulateSkippingZeros(const AttentionArgs& a, const AttentionPlan& plan,
                             const WorkItem& item, const TileKeys& tile,
                             const typename Values::Stored* v, size_t ldv,
                             const AttentionScratch& s, const HeadScratch& head) {
  const size_t R = plan.rows_pad, dvp = plan.dim_v_pad, rows = item.Rows(a);
  for (size_t r = 0; r < rows; ++r) {
    if (!s.panel_active[r / plan.panel_rows]) continue;
    float* o = head.o + r * dvp;
    for (size_t x = 0; x < dvp; ++x) o[x] *= s.alpha[r];
    for (size_t c = 0; c < tile.nb; ++c) {
      const float p = s.scores[c * R + r];
      if (p == 0.0f) continue;
      for (size_t x = 0; x < dvp; ++x) o[x] += p * Values::Value(v, ldv, c, x);
    }
  }
}

// The in-place members of a Values part that always loads its V tile.
struct LoadedValues {
  static bool ReadsValuesInPlace(const AttentionArgs&, const AttentionPlan&, const WorkItem&) {
    return false;
  }
  template <class D>
  static void AccumulateInPlace(D, const AttentionArgs&, const AttentionPlan&, const WorkItem&,
                                int64_t, const TileKeys&, const AttentionScratch&,
                                const HeadScratch&) {}
};

template <class Scores, class Values, bool kF32PV>
struct NativeTiles {
  static constexpr const char* kName = Scores::kName;
  static bool Supports(const AttentionArgs& a) { return Scores::Supports(a); }

  template <class D>
  static void PackQueries(D /* d */, const AttentionArgs& a, const AttentionPlan& plan,
                          const WorkItem& item, int64_t hkv, float* HWY_RESTRICT q,
                          float* HWY_RESTRICT /* row */) {
    Scores::PackQueries(a, plan, item, hkv, q);
  }

  // K in the Scores part's layout; V in the Values part's, or for kF32PV converted to f32.
  template <class D>
  static void LoadTile(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                       const TileKeys& tile, const AttentionScratch& s) {
    Scores::LoadKeys(a, plan, item, tile, s);
    if constexpr (kF32PV) {
      ConvertKeyTile(d, a, plan, item.b, item.hkv_begin, tile.k0, tile.nb, tile.nb_pad, nullptr,
                     s.v_tile);
    } else if (!Values::ReadsValuesInPlace(a, plan, item)) {
      Values::LoadValues(d, a, plan, item, tile, s.v_tile);
    }
  }

  template <class D>
  static void ScorePanel(D /* d */, const AttentionArgs& a, const AttentionPlan& plan,
                         const WorkItem& item, size_t p, int64_t h, const TileKeys& tile,
                         const AttentionScratch& s, const HeadScratch& head) {
    Scores::ScorePanel(a, plan, item, p, h, tile, s, head);
  }

  // O = alpha O + P V for the item's h-th kv head, P^T in s.scores.
  template <class D>
  static void AccumulatePV(D d, const AttentionArgs& a, const AttentionPlan& plan, int64_t h,
                           const WorkItem& item, const TileKeys& tile, const AttentionScratch& s,
                           const HeadScratch& head) {
    const size_t dvp = plan.dim_v_pad, ldv = static_cast<size_t>(plan.heads) * dvp;
    if constexpr (kF32PV) {
      AccumulateTilePV(d, a, plan, item.Rows(a), tile,
                       DenseRows{s.v_tile + static_cast<size_t>(h) * dvp, ldv}, s, head);
    } else {
      if (Values::ReadsValuesInPlace(a, plan, item)) {
        Values::AccumulateInPlace(d, a, plan, item, h, tile, s, head);
        return;
      }
      const auto* v = SlotAs<typename Values::Stored>(s.v_tile) + static_cast<size_t>(h) * dvp;
      if (HidesNonFiniteValues<Values>(a, plan, item, tile, v, ldv, s)) {
        AccumulateSkippingZeros<Values>(a, plan, item, tile, v, ldv, s, head);
        return;
      }
      Values::RoundProbabilities(d, plan, item.Rows(a), tile, s.scores);
      Values::Accumulate(plan, item.Rows(a), tile, v, ldv, s, head);
    }
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_NATIVE_TILES_INL_H_
