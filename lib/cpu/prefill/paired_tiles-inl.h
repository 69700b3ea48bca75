// The layouts of the native kernels whose scores take their operands in pairs of channels:
// AVX512_BF16's vdpbf16ps and Arm's BFDOT add to an f32 lane the two products of a pair of
// bf16 lanes; Arm's FMLAL/FMLAL2 take the two channels of a pair from the two halves of one
// register. PairedScores<Blocks> is their Q.K^T: K rows read as they are (pairs along
// head_dim), the queries packed unscaled (exactly, in their own 16-bit type) as pairs of
// channels, panel by panel: pair j of the panel's rows in the 2 * panel_rows halves at
// (p * pairs + j) * 2 * panel_rows, each row's two halves where Blocks::QueryHalf puts them;
// the scale is applied to the f32 sums.
// PairedBf16Tiles<Blocks, kF32PV> is the tile kernel of a bf16 dot product: those scores, and
// a P.V with P rounded to bf16 (nearest even) and paired by keys in place (pair kp of row r in
// the word kp * rows_pad + r, key 2kp in the low half), V repacked so each 32-bit word holds
// one column of two keys (pair kp of column x at word kp * ldv + x).
// Blocks: kName; kDType (q, k and v's dtype); Supported() (this CPU has the instruction);
// QueryHalf(r, parity), where channel 2j + parity of the panel's row r goes among pair j's
// halves; kRows, query rows per vector of the scores; kScoreVectors, the most vectors of rows
// per score block; kKeys (kMrS), keys per score block; ScoreBlock<NV>(k, ldk, q, ldq, pairs,
// scale, c, ldc), the scores of kKeys keys against NV vectors of rows (q in 32-bit words, one per
// row and pair); and for the P.V kColumns, columns of head_dim_v per vector, kPVRows and
// kPVVectors, its largest register block, and PVBlock<MR, NV>(p, ldp, v, ldv, count, o, ldo,
// alpha), O = alpha O + P V for MR rows x NV vectors over `count` keys or key pairs (alpha nullptr:
// O += P V).
#if defined(STREAMATTN_CPU_PREFILL_PAIRED_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_PAIRED_TILES_INL_H_
#undef STREAMATTN_CPU_PREFILL_PAIRED_TILES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_PAIRED_TILES_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/attention_args.h"
#include "core/dtype.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/convert-inl.h"
#include "cpu/prefill/native_tiles-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Two V rows of bf16 (row1 nullptr: a zero row) into one row of pairs: column x's two values
// in the 32-bit word out[x], row0's in the low half; zero from dim to dim_pad.
template <class D>
HWY_INLINE void PairBf16Rows(D /* d */, const void* row0, const void* row1, int64_t stride,
                             size_t dim, size_t dim_pad, uint32_t* HWY_RESTRICT out) {
  size_t x = 0;
  if (stride == 1) {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint16_t, D> d16;
    const auto* r0 = static_cast<const uint16_t*>(row0);
    const auto* r1 = static_cast<const uint16_t*>(row1);
    for (; x + hn::Lanes(du) <= dim; x += hn::Lanes(du)) {
      const auto low = hn::PromoteTo(du, hn::LoadU(d16, r0 + x));
      const auto high = r1 == nullptr ? hn::Zero(du) : hn::PromoteTo(du, hn::LoadU(d16, r1 + x));
      hn::StoreU(hn::Or(low, hn::ShiftLeft<16>(high)), du, out + x);
    }
  }
  for (; x < dim; ++x) {
    const uint32_t high = row1 == nullptr ? 0u : Bits16(row1, stride, x);
    out[x] = Bits16(row0, stride, x) | high << 16;
  }
  std::fill(out + dim, out + dim_pad, 0u);
}

// P^T (f32, key c of row r at st[c * R + r]) rounded to bf16 (nearest even) and paired by keys
// in place: pair kp of row r in the 32-bit word at st[kp * R + r], key 2 kp in the low half, a
// missing key (past nb) zero. Pair kp overwrites key kp's row, which pair kp / 2 (at most kp)
// has already read: ascending kp never overwrites a key still to be read.
template <class D>
void PairBf16Probabilities(D d, const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                           float* HWY_RESTRICT st) {
  const hn::RebindToUnsigned<D> du;
  const size_t R = plan.rows_pad, N = hn::Lanes(d);
  for (size_t kp = 0; kp < (tile.nb + 1) / 2; ++kp) {
    const float* even = st + 2 * kp * R;
    const float* odd = 2 * kp + 1 < tile.nb ? even + R : nullptr;
    for (size_t r = 0; r < rows; r += N) {
      const auto low = F32LanesToBF16Bits(d, hn::LoadU(d, even + r));
      const auto high =
          odd == nullptr ? hn::Zero(du) : F32LanesToBF16Bits(d, hn::LoadU(d, odd + r));
      hn::StoreU(hn::BitCast(d, hn::Or(low, hn::ShiftLeft<16>(high))), d, st + kp * R + r);
    }
  }
}

// A query row (bf16 or f16, stride 1; nullptr: a padding row) whose pairs are the layout's
// 32-bit words (QueryHalf(r, parity) == 2r + parity): pair j to out[j * R], the same bits the
// halves' loop writes, a word at a time (that loop's per-half branches took ~5% of MLA decode
// at 512 keys); zero past dim.
inline void CopyQueryPairs(const void* src, size_t dim, size_t pairs, size_t R,
                           uint32_t* HWY_RESTRICT out) {
  size_t j = 0;
  if (src != nullptr) {
    const auto* bytes = static_cast<const char*>(src);
    for (; j < dim / 2; ++j) std::memcpy(out + j * R, bytes + 4 * j, 4);
    if (dim % 2 != 0) out[j++ * R] = Bits16(src, 1, dim - 1);  // the high half zero
  }
  for (; j < pairs; ++j) out[j * R] = 0u;
}

template <class Blocks>
struct PairedScores {
  static constexpr const char* kName = Blocks::kName;
  // Whether the call can take the kernel on this CPU: q, k and v all of its dtype.
  static bool Supports(const AttentionArgs& a) {
    return a.q.dtype == Blocks::kDType && a.k.dtype == Blocks::kDType &&
           a.v.dtype == Blocks::kDType && Blocks::Supported();
  }

  // Kv head hkv's query rows as they are (unscaled), in panels of pairs of channels: pair j of
  // panel p in the halves from (p * pairs + j) * 2 * panel_rows, pairs = dim_pad / 2, row r's
  // channel 2j + parity at Blocks::QueryHalf(r, parity) among them. Padding rows and channels
  // are zero.
  static void PackQueries(const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                          int64_t hkv, float* HWY_RESTRICT q) {
    uint16_t* out = SlotAs<uint16_t>(q);
    const size_t R = plan.panel_rows, pairs = plan.dim_pad / 2, rows = item.Rows(a);
    for (size_t r = 0; r < plan.FilledRows(rows); ++r) {  // the rows ScorePanel reads
      const void* src =
          r < rows ? a.QueryRow(item.b, item.Position(a, r), item.QueryHead(a, hkv, r)) : nullptr;
      uint16_t* panel = out + (r / R) * pairs * 2 * R;  // pair j from panel + 2 j R
      const size_t low = Blocks::QueryHalf(r % R, 0), high = Blocks::QueryHalf(r % R, 1);
      if (low == 2 * (r % R) && high == low + 1 && (src == nullptr || a.q.stride(3) == 1)) {
        CopyQueryPairs(src, plan.dim, pairs, R, SlotAs<uint32_t>(q) + (panel - out) / 2 + r % R);
        continue;
      }
      for (size_t i = 0; i < plan.dim_pad; ++i) {
        panel[2 * (i / 2) * R + (i % 2 == 0 ? low : high)] =
            src != nullptr && i < plan.dim ? Bits16(src, a.q.stride(3), i) : uint16_t{0};
      }
    }
  }

  // Whether the tile's K rows are read where they lie rather than copied: MLA's cache (V inside
  // K, so the lines the scores load are the ones the V repacking reads next), dense rows of
  // stride 1 already as long as dim_pad, and whole blocks of keys (no zero rows to add). Why:
  // at 16 rows per kv head the copy of 128 rows of 1152 bytes met them cold from memory and
  // took about as long as the scores (perf, b1 h16/1 c32768); in place, the score blocks'
  // loads overlap with their products and each block asks for the next one's lines.
  static bool ReadsKeysInPlace(const AttentionArgs& a, const AttentionPlan& plan,
                               const TileKeys& tile) {
    return a.ValuesInsideKeys() && !a.paged && a.k.stride(3) == 1 && plan.dim == plan.dim_pad &&
           tile.nb == tile.nb_pad;
  }

  // The tile's K rows copied as they are (c * heads + h, dim_pad apart), rows past nb zero;
  // nothing where ScorePanel reads them in place (ReadsKeysInPlace).
  static void LoadKeys(const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                       const TileKeys& tile, const AttentionScratch& s) {
    if (ReadsKeysInPlace(a, plan, tile)) return;
    CopyTileRows(a, a.k, plan, item, tile, plan.dim, plan.dim_pad, SlotAs<uint16_t>(s.k_tile));
  }

  // Raw products of panel p of the item's h-th kv head against the tile, scaled to base-2
  // scores: S^T[key][row] in s.scores (rows_pad apart), keys to tile.nb_pad; the panel's rows
  // in blocks of up to kScoreVectors vectors.
  static void ScorePanel(const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                         size_t p, int64_t h, const TileKeys& tile, const AttentionScratch& s,
                         const HeadScratch& head) {
    static_assert(Blocks::kKeys == kMrS, "a score block covers a step of the tile's keys");
    constexpr size_t kBlockRows = Blocks::kScoreVectors * Blocks::kRows;
    const size_t R = plan.rows_pad, pairs = plan.dim_pad / 2;
    size_t ldk = static_cast<size_t>(plan.heads) * plan.dim_pad;
    const uint16_t* k = SlotAs<uint16_t>(s.k_tile) + static_cast<size_t>(h) * plan.dim_pad;
    if (ReadsKeysInPlace(a, plan, tile)) {
      k = static_cast<const uint16_t*>(a.KeyRow(a.k, item.b, tile.k0, item.hkv_begin + h));
      ldk = static_cast<size_t>(a.k.stride(1));
    }
    const uint32_t* q = SlotAs<uint32_t>(head.q) + p * pairs * plan.panel_rows;
    const float scale = QueryScale(a);
    // Keys past the last the panel sees: the softmax selects -inf for them (as F32FmaTiles).
    const size_t key_end = std::min<size_t>(tile.nb_pad, RoundUp(s.panel_keys[p], kMrS));
    // The item's last panel may hold fewer rows than the plan's (PanelWidth).
    const size_t width = RoundUp(plan.PanelWidth(item.Rows(a), p), Blocks::kRows);
    for (size_t c = 0; c < key_end; c += kMrS) {
      float* out = s.scores + c * R + p * plan.panel_rows;
      for (size_t r = 0; r < width; r += kBlockRows) {
        WithCount<Blocks::kScoreVectors>((width - r) / Blocks::kRows, [&](auto nv) {
          Blocks::template ScoreBlock<decltype(nv)::value>(k + c * ldk, ldk, q + r, plan.panel_rows,
                                                           pairs, scale, out + r, R);
        });
      }
    }
  }
};

// V's bf16 rows where they lie (key c's row at v + c * ldv), for the NaN-safe P.V of
// PairedBf16Values' in-place tiles.
struct InPlaceBf16Values {
  using Stored = uint16_t;
  static float Value(const uint16_t* v, size_t ldv, size_t c, size_t x) {
    return BF16ToF32(v[c * ldv + x]);
  }
};

template <class Blocks>
struct PairedBf16Values {
  using Stored = uint32_t;  // a column of two keys
  static float Value(const uint32_t* v, size_t ldv, size_t c, size_t x) {
    const uint32_t w = v[c / 2 * ldv + x];
    return BF16ToF32(static_cast<uint16_t>(c % 2 == 0 ? w : w >> 16));
  }

  // Whether the P.V reads V's rows where they lie, pairing each two keys' rows in registers
  // (Blocks::InPlacePVBlock), rather than repacking the tile: Blocks that have such a block, kv
  // heads of at most Blocks::kInPlaceRows query rows (decoding: MLA's 16 to 64 heads, GQA
  // groups, speculative tokens), dense rows of stride 1 and no padding columns. Why: with so
  // few rows the repacking's 64 KiB written and read back per 64-key tile is ~12% of the
  // products at 16 rows, and a pass of up to 16 rows reads V once.
  static bool ReadsValuesInPlace(const AttentionArgs& a, const AttentionPlan& plan,
                                 const WorkItem& item) {
    if constexpr (Blocks::kInPlaceRows == 0) {
      return false;
    } else {
      return item.Rows(a) <= Blocks::kInPlaceRows && !a.paged && a.v.stride(3) == 1 &&
             a.v.stride(1) > 0 && static_cast<size_t>(a.head_dim_v) == plan.dim_v_pad;
    }
  }

  // O = alpha O + P V of the item's kv head h over the tile, V in place (ReadsValuesInPlace);
  // the NaN-safe P.V reads the same rows.
  template <class D>
  static void AccumulateInPlace(D d, const AttentionArgs& a, const AttentionPlan& plan,
                                const WorkItem& item, int64_t h, const TileKeys& tile,
                                const AttentionScratch& s, const HeadScratch& head) {
    if constexpr (Blocks::kInPlaceRows > 0) {
      const auto* v =
          static_cast<const uint16_t*>(a.KeyRow(a.v, item.b, tile.k0, item.hkv_begin + h));
      const size_t ldv = static_cast<size_t>(a.v.stride(1));
      if (HidesNonFiniteValues<InPlaceBf16Values>(a, plan, item, tile, v, ldv, s)) {
        AccumulateSkippingZeros<InPlaceBf16Values>(a, plan, item, tile, v, ldv, s, head);
        return;
      }
      RoundProbabilities(d, plan, item.Rows(a), tile, s.scores);
      AccumulateInBlocks<InPlaceBlocks>(plan, item.Rows(a), SlotAs<uint32_t>(s.scores), v, ldv,
                                        tile, tile.nb, /*keys_per_step=*/1, s, head);
    } else {
      (void)d, (void)a, (void)plan, (void)item, (void)h, (void)tile, (void)s, (void)head;
    }
  }

  // V as rows of key pairs: pair kp of head h at words (kp * heads + h) * dim_v_pad.
  template <class D>
  static void LoadValues(D d, const AttentionArgs& a, const AttentionPlan& plan,
                         const WorkItem& item, const TileKeys& tile, float* v_tile) {
    const size_t heads = static_cast<size_t>(plan.heads), dim_v = static_cast<size_t>(a.head_dim_v);
    uint32_t* v = SlotAs<uint32_t>(v_tile);
    for (size_t c = 0; c < tile.nb; c += 2) {
      for (size_t h = 0; h < heads; ++h) {
        const int64_t key = tile.k0 + static_cast<int64_t>(c);
        const int64_t head = item.hkv_begin + static_cast<int64_t>(h);
        PairBf16Rows(d, a.KeyRow(a.v, item.b, key, head),
                     c + 1 < tile.nb ? a.KeyRow(a.v, item.b, key + 1, head) : nullptr,
                     a.v.stride(3), dim_v, plan.dim_v_pad,
                     v + (c / 2 * heads + h) * plan.dim_v_pad);
      }
    }
  }

  template <class D>
  static void RoundProbabilities(D d, const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                                 float* HWY_RESTRICT st) {
    PairBf16Probabilities(d, plan, rows, tile, st);
  }

  // O = alpha O + P V over the tile's key pairs, P paired in s.scores.
  static void Accumulate(const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                         const uint32_t* v, size_t ldv, const AttentionScratch& s,
                         const HeadScratch& head) {
    AccumulateInBlocks<Blocks>(plan, rows, SlotAs<uint32_t>(s.scores), v, ldv, tile,
                               (tile.nb + 1) / 2, /*keys_per_step=*/2, s, head);
  }

  // Blocks' in-place P.V as AccumulateInBlocks takes it: counts of keys, not pairs.
  struct InPlaceBlocks {
    static constexpr size_t kPVRows = Blocks::kInPlacePVRows;
    static constexpr size_t kPVVectors = Blocks::kInPlacePVVectors;
    static constexpr size_t kColumns = Blocks::kColumns;
    template <size_t MR, size_t NV>
    static constexpr auto PVBlock = Blocks::template InPlacePVBlock<MR, NV>;
  };
};

template <class Blocks, bool kF32PV>
using PairedBf16Tiles = NativeTiles<PairedScores<Blocks>, PairedBf16Values<Blocks>, kF32PV>;

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_PAIRED_TILES_INL_H_
