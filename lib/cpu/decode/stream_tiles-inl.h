// Decoding's streamed tiles: runs of whole in-place tiles with few rows per head
// (plan.stream_tiles: 1, 2 or 4 query rows per kv head, packed scores, no ALiBi, no mask),
// where every K and V byte is read once and memory, not arithmetic, sets the speed.
//
// Tile by tile (AdvanceHeadsOverCacheTile, decode/decode_tile-inl.h) the memory serves K alone
// through every head's scores and V alone through the P.V. Streamed (StreamCacheTiles): a run of
// whole tiles that every row sees goes with the scores of tile t + 1 beside the P.V of tile t, step
// by step of kStreamStepKeys keys and, within a step, head by head: the next tile's K rows, then
// this tile's V rows. Two streams of reads run side by side through all the arithmetic. Each step
// also requests the next step's rows of its own stream into L2, in address order (key, then head),
// one row per row it reads (8 KiB ahead at 8 kv heads of head_dim 128 in f16). A head's softmax
// runs after its tile's last step of scores; its P.V starts with the next iteration's first step.
// Measured on a 2-core Sapphire Rapids host (bench decode, 128 rows, against tile by tile run
// minutes apart): median 1.08x the speed; 32 query heads over 8 of head_dim 128 in f16 from
// 0.81 to 0.86-0.90 of the machine's read bandwidth, 8 over 8 from 0.89 to 0.91-0.95. A
// synthetic loop first showed it: with the same arithmetic per line, K then V per tile read
// 13.4-13.9 GB/s per core, the two streams side by side 15.7-17.4, a plain read 16.3; steps of
// 8 keys or requests two steps ahead lost most of that.
// Paged caches: with a shuffled block table (pages of 32 KiB) the same host decoded 0.91-0.95
// as fast as from a contiguous cache, and a plain read of the pages in that order lost as much
// (0.88-0.96), with 2 MiB pages too: the price is the memory's order, not the TLB. Requests
// for a line per 4 KiB of the tile one or two ahead, to walk the page tables early, measured
// no faster (alternated on the same cache); 8 lines per 4 KiB, 17% slower. With the pages in
// address order, paged decoding runs at 0.98-1.0 of contiguous (bench decode reports both).
// Cost: per step and head one DotBlock of 4 keys (two of 2 for 4 rows on 16 registers) and
// the P.V of 4 keys, whose O rows are loaded and stored each step; the calls per 4 keys are
// what cost (as separate GemmTile calls the P.V took 40% longer than in whole tiles, inlined
// 15%), which is why the steps take fixed register blocks (StepBlock) and 8 rows per head,
// bound by the arithmetic, do not stream.
// Scratch: two sets of per-head score buffers and one alpha per head (attention_scratch-inl.h).
// Over I4 keys with int8_queries, the scores of a step of 1 or 4 rows are integer dot products
// of int8 queries (decode/int8_scores-inl.h); the P.V is unchanged.
// Wide steps (plan.stream_step_keys, WideStreamSteps): one row per head over I8 or I4 on AVX2
// takes 8 keys a step, two ScaledDotRows and one P.V, so that a step's set-up per head is paid
// per 8 keys; a step then reads no more bytes than an f16 step of 4. With the walk below, and
// alternated against the build before both on a Zen 3 host (8 kv heads of head_dim 128, 32768
// keys in groups of 32, medians of 15 pairs): I8 1.04x as fast on 1 thread, 1.09x on 2; I4
// 1.09x and 1.11x; the same bytes out (callgrind: I8 218 -> 202 instructions per key and kv
// head, I4 302 -> 278). FP8 in wide steps ran 0.97-1.03x, so it keeps steps of 4.
// A wide step's requests for the next step, per head, all fall in one key's row when the heads
// are at least its keys (NextStepWalk::Rows): a pointer and a head's stride apart, where the
// general walk loaded, multiplied and compared per row (9 fewer instructions per key and kv
// head for I8, 11 for I4, callgrind).
#if defined(STREAMATTN_CPU_DECODE_STREAM_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_DECODE_STREAM_TILES_INL_H_
#undef STREAMATTN_CPU_DECODE_STREAM_TILES_INL_H_
#else
#define STREAMATTN_CPU_DECODE_STREAM_TILES_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/attention_args.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/decode/decode_tile-inl.h"
#include "cpu/decode/dot_scores-inl.h"
#include "cpu/decode/int8_scores-inl.h"
#include "cpu/decode/row_pv_step-inl.h"
#include "cpu/decode/scaled_row_step-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/pv_block-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Where head h's requests for the next step of its stream go, in address order: the next
// step's rows, key after key and head after head, are numbered s = 0, 1, ...; head h takes
// s = h * kKeys + i for i < kKeys (the step's keys), which is (key, head) = divmod(s, heads).
// The walk over h keeps divmod(h * kKeys, heads) in `key`, `head` (no division).
template <size_t kKeys>
struct NextStepWalk {
  size_t key = 0, head = 0;
  // Row pointers for head h's requests; tile_rows from this step's tile start, next_step the
  // index of the next step's first key in it, head_stride the tensor's stride(2).
  template <class E, typename T = typename E::Stored>
  void Rows(const T* const* tile_rows, size_t next_step, size_t heads, int64_t head_stride,
            const T** out) const {
    if (kKeys == kWideStreamStepKeys && head + kKeys <= heads) {
      // All in one key's row (as with 8 kv heads): one pointer, then a head's stride apart.
      // Wide steps only: in steps of 4, GCC spilled more (FP8: 5 more instructions per key and
      // kv head, 4% slower, alternated), so those keep the walk below.
      const T* row =
          tile_rows[next_step + key] + StoredUnits<E>(static_cast<ptrdiff_t>(head) * head_stride);
      for (size_t i = 0; i < kKeys; ++i) {
        out[i] = row + StoredUnits<E>(static_cast<ptrdiff_t>(i) * head_stride);
      }
      return;
    }
    size_t k = key, hh = head;
    for (size_t i = 0; i < kKeys; ++i) {
      out[i] = tile_rows[next_step + k] + StoredUnits<E>(static_cast<ptrdiff_t>(hh) * head_stride);
      if (++hh == heads) hh = 0, ++k;
    }
  }
  void NextHead(size_t heads) {
    head += kKeys;
    while (head >= heads) head -= heads, ++key;
  }
};

template <size_t N>
using SizeConstant = std::integral_constant<size_t, N>;

// The elements whose one-row steps may be wide (plan.stream_step_keys; WideStreamSteps), on the
// targets that take them (16 registers).
template <class E>
constexpr bool kWideStepElement = kVectorRegisters < 32 && E::kGroupScales;

// The register blocks of a streamed step with kRows rows per head: the keys of a DotBlock and
// the vectors of a P.V column block, 4 and 4 (kRows x 4 accumulators). 4 rows with 16
// registers (AVX2) take 2 and 2, 8 accumulators, as a step's 4 keys in two DotBlocks.
template <size_t kRows>
constexpr size_t StepBlock() {
  return kVectorRegisters >= 32 || kRows <= 2 ? 4 : 2;
}

// The P.V of one streamed step for one head, head_dim_v's column blocks of StepBlock
// vectors: O rows o + r * dim_v_pad += the step's P (kRows rows of kStreamStepKeys) times its
// V rows. kDimV > 0 fixes dim_v_pad at compile time (head dims 64 and 128), so that a block's
// O vectors are addressed from one register by displacement: with the stride known only at
// run time, GCC computed an address per vector and spilled them to vector registers.
// Alternated on a Sapphire Rapids host from L2 (one thread): 5-10% faster per step with 4
// rows per kv head, 2-4% with 2, in f16, bf16 and f32. One row has one O row to address, and
// StreamStep<1> keeps its own loop (see there).
template <size_t kRows, size_t kDimV, class VRows, class D>
HWY_INLINE void StepPV(D d, size_t dim_v_pad, const float* p, const VRows& values, float* o,
                       const float* alpha) {
  constexpr size_t kNv = StepBlock<kRows>();
  const size_t dvp = kDimV > 0 ? kDimV : dim_v_pad;
  for (size_t v = 0; v < dvp / hn::Lanes(d); v += kNv) {
    PVColumnBlock<kRows, kNv, /*kInline=*/true>(d, v, dvp, p, kRows, values, kStreamStepKeys, o,
                                                alpha);
  }
}

// One step of StreamCacheTiles (keys j.. j + kKeys - 1: kStreamStepKeys, or kWideStreamStepKeys
// for a wide step) for every head: head after head, the scores of the tile being
// scored (when `score`; its softmax after the tile's last step) and the P.V of the tile being
// multiplied (when `multiply`). kRows > 0: that many rows per head with head_dim_v in blocks
// of 4 vectors, the register blocks (StepBlock) fixed at compile time and the P.V inlined
// (DotBlock, PVColumnBlock<.., kInline>: a call per 4 keys would cost a third of the P.V's
// work in calls); 0: any packed shape, through DotScores and AccumulatePackedPV. A function of
// its own, not inlined into the tile loop, so that its registers are allocated for the
// products alone.
template <size_t kRows, size_t kKeys, class E, class D>
HWY_NOINLINE void StreamStep(D d, const E& k_element, const E& v_element, const AttentionArgs& a,
                             const AttentionPlan& plan, size_t rows, size_t j, bool score,
                             const typename E::Stored* const* k_rows, float* score_tiles,
                             bool multiply, const typename E::Stored* const* v_rows,
                             const float* p_tiles, float* HWY_RESTRICT alpha,
                             const AttentionScratch& s) {
  using T = typename E::Stored;
  const size_t heads = static_cast<size_t>(plan.heads), kpt = plan.keys_per_tile;
  const size_t N = hn::Lanes(d), dvp = plan.dim_v_pad, R = plan.rows_pad;
  const int64_t k_stride = a.k.stride(2), v_stride = a.v.stride(2);
  static_assert(kKeys == kStreamStepKeys || (kKeys == kWideStreamStepKeys && kRows == 1),
                "wide steps have one row per head");
  const bool last_step = j + kKeys == kpt;
  // Group-scaled rows of a step of 4 rows per head, converted (ConvertStepRows): K's, then
  // V's. Alternated against the rows read in place on a Zen 3 host (I8 and I4 in groups of 32,
  // 32 query heads over 8, head_dim 128): 688 -> 554 instructions per key and kv head for I8,
  // 805 -> 643 for I4, 1.05-1.13x as fast, the same bytes. At 2 rows per head, 504 -> 407
  // instructions but 0.91-0.93x as fast, so those stay in place; with 32 registers (AVX-512)
  // not yet measured, so in place too.
  constexpr bool kConvertSteps = kRows == 4 && E::kGroupScales && kVectorRegisters < 32;
  HWY_ALIGN float step_rows[kConvertSteps ? kStepRows * kMaxStepDim : 1];
  NextStepWalk<kKeys> walk;
  for (size_t h = 0; h < heads; ++h, walk.NextHead(heads)) {
    const HeadScratch head = s.Head(static_cast<int64_t>(h));
    const T* next[kKeys];
    if (score) {
      walk.template Rows<E>(k_rows, j + kKeys, heads, k_stride, next);
      const CacheRows<E> keys{k_element, k_rows + j, static_cast<ptrdiff_t>(h) * k_stride,
                              next,      nullptr,    0};
      float* st = score_tiles + h * plan.packed_st_stride;
      bool integer_scores = false;  // int8 queries (plan.int8_scores)
#if SATTN_INT8_SCORES
      if constexpr ((kRows == 1 || kRows == 4) && E::kGroupScales && E::kBits == 4) {
        if (plan.int8_scores) {
          for (size_t c = 0; c < kKeys; c += kStreamStepKeys) {
            IntScoreStep<kRows>(keys, c, plan.dim_pad, head.q8, head.q8_bias, head.q8_scale,
                                st + (j + c) * kRows);
          }
          integer_scores = true;
        }
      }
#endif
      if (integer_scores) {
        // The scores are in st.
      } else if constexpr (kRows == 1 && E::kGroupScales) {
        static_assert(kStreamStepKeys == kStepRows, "a step is ScaledDotRows of 4 keys");
        for (size_t c = 0; c < kKeys; c += kStepRows) {
          ScaledDotRow(d, head.q, keys, c, plan.dim_pad, st + j + c);
        }
      } else if constexpr (kConvertSteps) {
        static_assert(kStreamStepKeys == kStepRows, "a step converts its 4 keys' rows");
        const char* next_rows[kStreamStepKeys];
        for (size_t c = 0; c < kStreamStepKeys; ++c) next_rows[c] = keys.NextKey(c);
        ConvertStepRows(d, keys, plan.dim_pad, next_rows, step_rows);
        const DenseRows converted{step_rows, plan.dim_pad};
        constexpr size_t kBlockKeys = StepBlock<kRows>();
        for (size_t c = 0; c < kStreamStepKeys; c += kBlockKeys) {
          DotBlock<kRows, kBlockKeys>(d, head.q, plan.dim_pad, converted, c, plan.dim_pad,
                                      st + (j + c) * kRows, kRows, /*prefetch=*/false);
        }
      } else if constexpr (kRows > 0) {
        constexpr size_t kBlockKeys = StepBlock<kRows>();
        for (size_t c = 0; c < kKeys; c += kBlockKeys) {
          DotBlock<kRows, kBlockKeys>(d, head.q, plan.dim_pad, keys, c, plan.dim_pad,
                                      st + (j + c) * kRows, kRows, /*prefetch=*/true);
        }
      } else {
        DotScores(d, head.q, plan.dim_pad, rows, keys, kStreamStepKeys, plan.dim_pad, st + j * rows,
                  rows);
      }
      if (last_step) SoftmaxPackedHead(d, a, rows, kpt, head, st, alpha + h * R);
    }
    if (multiply) {
      walk.template Rows<E>(v_rows, j + kKeys, heads, v_stride, next);
      const CacheRows<E> values{
          v_element, v_rows + j, static_cast<ptrdiff_t>(h) * v_stride, nullptr, next, 0, 0};
      const float* p = p_tiles + h * plan.packed_st_stride + j * rows;
      const float* head_alpha = j == 0 ? alpha + h * R : nullptr;
      if constexpr (kConvertSteps) {
        const char* next_rows[kStreamStepKeys];
        for (size_t c = 0; c < kStreamStepKeys; ++c) next_rows[c] = values.NextValue(c);
        ConvertStepRows(d, values, dvp, next_rows, step_rows);
        const DenseRows converted{step_rows, dvp};
        if (dvp == 128) {
          StepPV<kRows, 128>(d, dvp, p, converted, head.o, head_alpha);
        } else {
          StepPV<kRows, 0>(d, dvp, p, converted, head.o, head_alpha);
        }
      } else if constexpr (kRows > 1) {
        if (dvp == 128) {
          StepPV<kRows, 128>(d, dvp, p, values, head.o, head_alpha);
        } else if (dvp == 64) {
          StepPV<kRows, 64>(d, dvp, p, values, head.o, head_alpha);
        } else {
          StepPV<kRows, 0>(d, dvp, p, values, head.o, head_alpha);
        }
      } else if constexpr (kRows == 1) {
        // StepPV's loop written out: through StepPV<1, 0>, GCC allocated this function's
        // registers otherwise, 4-15% slower from L2 (alternated, f16, one thread).
        if constexpr (E::kGroupScales) {
          ScaledPVRow<kKeys>(d, dvp, p, values, head.o, head_alpha);
        } else if constexpr (std::is_same_v<E, E4M3Element>) {
          static_assert(kKeys == 4, "a step's P.V is RowPVStep's 4 keys");
          RowPVStep(d, dvp, p, values, head.o, head_alpha);
        } else {
          static_assert(kKeys == kStreamStepKeys, "f16, bf16 and f32 take steps of 4 keys");
          constexpr size_t kNv = StepBlock<kRows>();
          for (size_t v = 0; v < dvp / N; v += kNv) {
            PVColumnBlock<kRows, kNv, /*kInline=*/true>(d, v, dvp, p, kRows, values,
                                                        kStreamStepKeys, head.o, head_alpha);
          }
        }
      } else {
        AccumulatePackedPV(d, plan, rows, kStreamStepKeys, values, head, p, head_alpha);
      }
    }
  }
}

// Advances the item's kv heads over `tiles` whole tiles from key k_first, each seen whole by
// every row and read in place (K and V of element type E, read as k_element and v_element),
// software-pipelined as the top of this file says. Keys from key_end on are never read (row
// pointers past it repeat the first key's). Called (so compiled) only where kStreamTilesOnTarget
// (AVX2 and up).
template <class E, class D>
HWY_NOINLINE void StreamCacheTiles(D d, const E& k_element, const E& v_element,
                                   const AttentionArgs& a, const AttentionPlan& plan,
                                   const WorkItem& item, int64_t k_first, int64_t tiles,
                                   int64_t key_end, const AttentionScratch& s) {
  static_assert(kKeysPerTile % kWideStreamStepKeys == 0, "tiles hold whole steps");
  using T = typename E::Stored;
  const size_t heads = static_cast<size_t>(plan.heads), kpt = plan.keys_per_tile;
  const size_t rows = item.Rows(a);
  const size_t step_keys = kWideStepElement<E> ? plan.stream_step_keys : kStreamStepKeys;
  const size_t with_next = kpt + step_keys;  // a tile's keys and the next's first step
  // Row pointers of two tiles (K and V of each), by the tile's parity: the tile being scored
  // and the tile in its P.V.
  const T** pointers = s.RowPointers<T>();
  const T** key_rows[2] = {pointers, pointers + with_next};
  const T** value_rows[2] = {pointers + 2 * with_next, pointers + 3 * with_next};
  auto fetch_rows = [&](int64_t tile) {
    const int64_t k0 = k_first + tile * static_cast<int64_t>(kpt);
    const T** k = key_rows[tile & 1];
    const T** v = value_rows[tile & 1];
    const int64_t count = std::clamp<int64_t>(key_end - k0, 1, static_cast<int64_t>(with_next));
    a.KeyRows(item.b, k0, count, item.hkv_begin, k, v);
    for (size_t c = static_cast<size_t>(count); c < with_next; ++c) k[c] = k[0], v[c] = v[0];
  };
  float* alpha = s.alpha;               // R per head: each head's tile in its P.V
  auto scores_of = [&](int64_t tile) {  // the tile's score buffers, one per head
    return s.scores + (tile & 1) * heads * plan.packed_st_stride;
  };
  fetch_rows(0);
  // Iteration t scores tile t + 1 and runs the P.V of tile t: t = -1 only scores, the last
  // only multiplies.
  for (int64_t t = -1; t < tiles; ++t) {
    const int64_t scored = t + 1;
    const bool score = scored < tiles, multiply = t >= 0;
    if (score && scored > 0) fetch_rows(scored);
    const T** k_rows = key_rows[scored & 1];
    const T** v_rows = value_rows[t & 1];
    float* score_tiles = scores_of(scored);
    const float* p_tiles = scores_of(t);
    for (size_t j = 0; j < kpt; j += step_keys) {
      auto step = [&](auto rows_per_head, auto keys) SATTN_INLINE_LAMBDA {
        StreamStep<decltype(rows_per_head)::value, decltype(keys)::value>(
            d, k_element, v_element, a, plan, rows, j, score, k_rows, score_tiles, multiply, v_rows,
            p_tiles, alpha, s);
      };
      if constexpr (kWideStepElement<E>) {
        if (step_keys == kWideStreamStepKeys) {
          step(SizeConstant<1>(), SizeConstant<kWideStreamStepKeys>());
          continue;
        }
      }
      // The shapes decoding meets most (GQA groups of 4, MHA, groups of 2) get fixed register
      // blocks (plan.stream_tiles: 1, 2 or 4 rows) when head_dim_v is whole blocks of 4 vectors.
      if (plan.dim_v_pad % (4 * hn::Lanes(d)) == 0) {
        if (rows == 4) {
          step(SizeConstant<4>(), SizeConstant<kStreamStepKeys>());
        } else if (rows == 2) {
          step(SizeConstant<2>(), SizeConstant<kStreamStepKeys>());
        } else {
          step(SizeConstant<1>(), SizeConstant<kStreamStepKeys>());
        }
        continue;
      }
      step(SizeConstant<0>(), SizeConstant<kStreamStepKeys>());
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_DECODE_STREAM_TILES_INL_H_
