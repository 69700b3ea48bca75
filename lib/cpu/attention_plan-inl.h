// What runs for one sattn_attention call on the CPU, and in what shapes: the path (prefill or
// decode, ChooseAttentionPath), the work items (query positions x kv heads), the key tiles and
// the register blocks of this target. Computed once per call (MakeAttentionPlan) from shapes,
// strides and dtypes only, so it never depends on timing or the thread count; the worker
// scratch is laid out from it (attention_scratch-inl.h).
#if defined(STREAMATTN_CPU_ATTENTION_PLAN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_ATTENTION_PLAN_INL_H_
#undef STREAMATTN_CPU_ATTENTION_PLAN_INL_H_
#else
#define STREAMATTN_CPU_ATTENTION_PLAN_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/attention_args.h"
#include "cpu/convert-inl.h"
#include "cpu/gemm_tile-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Register blocks for this target (see gemm_tile-inl.h): S^T blocks are kMrS keys x up to kNvS
// vectors of query rows, P.V blocks up to kMrP query rows x up to kNvP vectors of head_dim
// (PVVectors, pv_block-inl.h: 3 for blocks of 3 or 4 rows on 16 registers).
constexpr size_t kNvS = 3;
constexpr size_t kMrS = kVectorRegisters >= 32 ? 8 : 4;
constexpr size_t kMrP = HWY_TARGET == HWY_SCALAR ? 3 : 6;
constexpr size_t kNvP = kVectorRegisters >= 32 ? 4 : 2;
constexpr size_t kKeysPerTile = 128;  // keys per tile and head; a multiple of kMrS and 4
// Keys per step of decoding's streamed tiles (decode/stream_tiles-inl.h): a DotBlock's keys.
constexpr size_t kStreamStepKeys = 4;
// The keys of a wide step (StreamStep), and the most any step takes.
constexpr size_t kWideStreamStepKeys = 2 * kStreamStepKeys;
// The most bytes of K rows (8 kv heads of head_dim 128 in f16, or of head_dim 64 in f32) a
// streamed step reads. Steps of twice that, 8 kv heads of head_dim 128 in f32, decoded 4-8%
// slower streamed than tile by tile (20% when paged) on a Sapphire Rapids host; those tiles
// hold only 4 steps.
constexpr size_t kStreamStepBytes = 8192;
// Targets that stream: x86 from AVX2 on. With 16 registers (AVX2) the steps' fixed register
// blocks are smaller for 4 rows per head (StreamStep); alternated against tile by tile on a
// Sapphire Rapids host forced to AVX2 (2 threads, 32768 keys, 8 kv heads): from memory 1.17-1.27x
// as fast with 1 or 2 rows per head (f16, bf16; f32 of head_dim 64 1.14x), 1.05-1.07x with 4;
// from L2 1.45-1.56x with 1 or 2 rows, 0.93-0.99x with 4. (Through the general path's calls
// per 4 keys, AVX2 had run 23-37% slower streamed.) Arm's 32 registers would take the fixed
// blocks too, but no Arm host has measured them yet.
constexpr bool kStreamTilesOnTarget = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2;
// Decoding work items of several kv heads take at least this many bytes of K rows per head
// and tile (32 keys of head_dim 128 in f16, 64 of head_dim 64): with kKeysPerTile / heads, 16
// keys for 8 kv heads, each head's per-tile work (the softmax's reductions, the P.V's reload
// of O) took a larger share: from memory on a Zen 4 host, 3-5% slower at head_dim 128 and
// 18-38% at head_dim 64 in f16. f32 rows of head_dim 128 stay at 16 keys, which measured
// 5-7% faster than 32.
constexpr size_t kDecodeHeadTileBytes = 8192;
// Rows per work item: each item converts every K/V tile it sees once, so more rows share each
// conversion. Prefill's tiles of one kv head are rows a key stride apart (4 KiB for 8 kv heads
// of head_dim 128 in f32), each on its own page: the conversion ran at the latency of memory
// and page walks (the tile's memcpy was 15-16% of a single-threaded h8/8 d128 s4096 f32
// profile on a Zen 4 host with 192 rows; software requests for the next tile's lines stalled
// as long as the copy did). 384 rows measured 5-8% faster there than 192 (alternated, f32 and
// causal), their scratch (Q^T, S^T and O, 192 KiB each at head_dim 128) still inside L2.
// Wider rows keep 192: at head_dim 256, or MLA's 576/512, 384 rows would need 1-2.3 MiB of
// scratch per thread, beyond most L2s (a 64-token item's work is the same either way).
constexpr int64_t kTargetRows = 384;
constexpr int64_t kTargetRowsWide = 192;

// The rows per work item for heads of head_dim + head_dim_v channels.
inline int64_t TargetRows(int64_t head_dim, int64_t head_dim_v) {
  return head_dim + head_dim_v <= 256 ? kTargetRows : kTargetRowsWide;
}

inline size_t RoundUp(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Query positions per work item: TargetRows' worth, or fewer where that many rows would put the
// rows of S^T (a key's scores, rows_pad floats apart) a multiple of 128 bytes apart. The P.V
// reads P^T a key at a time down a block of rows, and lines a multiple of 128 bytes apart fall
// in a fraction of L1's 64 sets (384 rows: 1536 bytes, 8 sets; 8 ways each hold 64 of a tile's
// 128 keys): each block's pass over the tile then missed L1 on every key. 360 rows (24-row
// panels, AVX2) ran 1.08-1.13x as fast as 384 on a Zen 3 core (h8/8 and h32/8 d128 s4096 in
// f32, bf16 and f16, causal or not, 1 and 2 threads, alternated; the same bytes out), the P.V
// micro-kernel going from 46% of the time to even with the scores'. Items keep whole widest
// panels (kNvS vectors: their S^T blocks) and more than half the target's rows; a call of one
// item keeps its rows, whatever they are.
// Only x86 below AVX-512 (kSpreadScoreRows), where it was measured: AVX-512's P.V blocks do
// twice the FMAs per line of P^T, and 336 rows would convert each tile for 12% fewer rows.
constexpr bool kSpreadScoreRows = HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3;
inline int64_t PositionsPerItem(const AttentionArgs& a, size_t lanes) {
  const int64_t target = std::max<int64_t>(1, TargetRows(a.head_dim, a.head_dim_v) / a.group);
  if (target >= a.seq_q) return a.seq_q;
  if (!kSpreadScoreRows) return target;
  const size_t panel = kNvS * lanes;
  auto spread = [&](int64_t positions) {
    return RoundUp(static_cast<size_t>(positions * a.group), panel) * sizeof(float) % 128 != 0;
  };
  if (spread(target)) return target;
  for (int64_t positions = target - 1; positions > target / 2; --positions) {
    if (static_cast<size_t>(positions * a.group) % panel == 0 && spread(positions)) {
      return positions;
    }
  }
  return target;
}

// Decoding's integer scores (decode/int8_scores-inl.h, sattn_attention_options.int8_queries):
// compiled for the AVX3 targets, run on CPUs with AVX512-VNNI, and for AVX2 (vpmaddubsw).
constexpr bool kInt8ScoresOnTarget =
    HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2;

// Whether a streamed decode of `rows` rows per kv head takes the integer scores: asked for,
// 1 or 4 rows, an I4 key cache of head_dim a multiple of 128 (in place, so groups of at least
// a vector: each of vpdpbusd's lanes, 8 channels, in one group), on a CPU that has the
// instruction. (I8 keys keep the exact scores: decode/int8_scores-inl.h says why.)
inline bool Int8ScoresApply(const AttentionArgs& a, size_t rows, size_t dim_pad) {
  if (!kInt8ScoresOnTarget || !a.int8_queries || (rows != 1 && rows != 4)) return false;
  if (a.k.dtype != DType::kI4 || a.k_group_scales.group == 0) return false;
#if HWY_ARCH_X86
  return dim_pad % 128 == 0 && (HWY_TARGET == HWY_AVX2 || __builtin_cpu_supports("avx512vnni"));
#else
  return false;
#endif
}

// The two drivers. Prefill (prefill/prefill_driver-inl.h): converted K/V tiles and GEMM
// scores, one lane per query row. Decode (decode/decode_driver-inl.h): dot-product scores,
// the cache read in place where it can be.
enum class AttentionPath { kPrefill, kDecode };

// Decode when a work item has fewer query rows per kv head than a vector has lanes (one
// position of MHA or GQA groups up to 8 on AVX-512; speculative decoding of a few tokens):
// the GEMM would leave most lanes idle, and each K/V element serves so few rows that converting
// it into a tile (a store and a reload) costs more than reading the cache in place. Everything
// else, prefill, chunked prefill and decoding of large GQA groups (16 or 32 rows per kv head)
// included, has a vector of rows to fill the GEMM's lanes and reuses each converted element.
inline AttentionPath ChooseAttentionPath(size_t rows_per_kv_head, size_t lanes) {
  return rows_per_kv_head < lanes ? AttentionPath::kDecode : AttentionPath::kPrefill;
}

// Whether K and V are read as one element type (cache_element-inl.h), as the kernels that read
// the cache in place need (they are compiled for one type per call): the same dtype and, for
// group-scaled formats, the same scales' dtype, scales found from each value's address
// (GroupScales::addressable) and groups of whole vectors of `lanes` (a vector's values share
// one scale).
inline bool CacheReadInPlaceAsOneElement(const AttentionArgs& a, size_t lanes) {
  if (a.k.dtype != a.v.dtype) return false;
  const GroupScales &k = a.k_group_scales, &v = a.v_group_scales;
  if (k.group == 0) return true;
  const int64_t vector = static_cast<int64_t>(lanes);
  return k.addressable && v.addressable && k.scales.dtype == v.scales.dtype && k.group >= vector &&
         v.group >= vector;
}

// A work item covers `heads` kv heads: one for prefill (its 384 rows reuse each K/V tile
// enough), all of them when every query of a sequence fits one item of few rows (decoding:
// up to 64 rows, all of seq_q), so a tile's keys are read for every head at once, sequentially
// through the cache, instead of one head's rows at a stride the hardware prefetchers do not
// follow.
struct AttentionPlan {
  AttentionPath path;
  size_t lanes;
  size_t panel_vectors;  // vectors of rows per S^T panel: 1..kNvS (prefill) or 1 (decode)
  size_t panel_rows;     // panel_vectors * lanes
  size_t rows_pad;       // rows of a work item per head, padded to whole panels
  size_t dim, dim_pad, dim_v_pad;
  int64_t positions;     // query positions per work item
  int64_t heads;         // kv heads per work item
  size_t keys_per_tile;  // a multiple of kMrS and 4
  // Decode only. Whole tiles' K and V rows are read from the cache in place (kv_rows-inl.h)
  // rather than converted first: head dims of whole vectors, unit element strides, one dtype.
  bool cache_in_place;
  // In-place tiles pack their scores densely, key after key (OnlineSoftmaxPacked): the rows
  // per head divide the lanes, both powers of two, and there is no ALiBi.
  bool packed_scores;
  // Runs of whole packed tiles stream (decode/stream_tiles-inl.h): up to 4 rows per head, and
  // a step's rows of one stream (K or V) take at most kStreamStepBytes. With 8 rows per head
  // (64 query heads over 8, in f16) decoding is bound by the arithmetic, which the streamed
  // steps add to: 12% slower streamed on a Sapphire Rapids host (2 kv heads: 9% faster).
  bool stream_tiles;
  // Streamed steps take their scores from int8 queries (Int8ScoresApply).
  bool int8_scores;
  // Keys per streamed step: kStreamStepKeys, or kWideStreamStepKeys (WideStreamSteps).
  size_t stream_step_keys;
  // Packed scores: floats from one head's score buffer to the next's.
  size_t packed_st_stride;
  // V is the leading channels of K's rows (AttentionArgs::ValuesInsideKeys, MLA): a converted
  // tile's V rows are its K rows (ConvertKeyTile converts once; ConvertedValueRows), and the
  // in-place paths read V from the cache lines the scores just loaded.
  bool values_in_key_tile;

  bool decode() const { return path == AttentionPath::kDecode; }
  // The rows an item of `rows` query rows per head computes: its rows padded to whole vectors.
  // An item may have fewer rows than the plan's (a sequence's last block; a packed batch's
  // short prompts beside a long one, under the long one's plan), so its last panel is computed
  // only this far: padding to the plan's panels, a 64-row prompt's item in a plan of 48-row
  // panels computed 96 rows, and packed 384 rows of queries. One 8192-token prompt beside
  // thirty of 64 (f16, 2 threads, Zen 4) took the short ones twice as long as their own call.
  size_t FilledRows(size_t rows) const { return RoundUp(rows, lanes); }
  // Rows of panel p an item of `rows` rows computes (a multiple of lanes, at most panel_rows).
  size_t PanelWidth(size_t rows, size_t p) const {
    return std::min(panel_rows, FilledRows(rows) - p * panel_rows);
  }
};

// Whether streamed steps take kWideStreamStepKeys keys: one row per kv head over an I8 or I4
// cache (K and V alike) with 16 registers (AVX2), where a wide step's K rows still fit
// kStreamStepBytes. A step of 4 such keys reads half an f16 step's bytes or less, and its set-up
// per head (row and scale addresses, the next step's rows, the P.V's O loads and stores) is
// what those formats' arithmetic-bound steps spend most on besides the products (see
// decode/stream_tiles-inl.h). FP8 measured no faster in wide steps, and 32 registers
// (AVX-512) are not yet measured.
inline bool WideStreamSteps(const AttentionArgs& a, size_t rows, const AttentionPlan& c) {
  if (kVectorRegisters >= 32 || rows != 1 || a.k.dtype != a.v.dtype) return false;
  if (c.dim_v_pad % (4 * c.lanes) != 0) return false;  // StreamStep<1>'s blocks
  if (a.k.dtype != DType::kI8 && a.k.dtype != DType::kI4) return false;
  return kWideStreamStepKeys * static_cast<size_t>(c.heads) *
             static_cast<size_t>(ElementBytes(a.k.dtype, static_cast<int64_t>(c.dim_pad))) <=
         kStreamStepBytes;
}

template <class D>
AttentionPlan MakeAttentionPlan(D d, const AttentionArgs& a) {
  AttentionPlan c;
  c.lanes = hn::Lanes(d);
  c.positions = PositionsPerItem(a, c.lanes);
  const size_t rows = static_cast<size_t>(c.positions * a.group);
  c.path = ChooseAttentionPath(rows, c.lanes);
  // GEMM panels of 3, 2 or 1 vectors, whichever pads the rows least (the widest on a tie):
  // decoding's 16 or 32 rows per kv head (GQA groups of 16, MQA, speculative decoding) would
  // pad to 48 and waste half the scores' products or more.
  c.panel_vectors = c.decode() ? 1 : kNvS;
  for (size_t nv = c.panel_vectors; nv >= 1; --nv) {
    if (RoundUp(rows, nv * c.lanes) < RoundUp(rows, c.panel_vectors * c.lanes)) {
      c.panel_vectors = nv;
    }
  }
  c.panel_rows = c.panel_vectors * c.lanes;
  c.rows_pad = RoundUp(rows, c.panel_rows);
  c.dim = static_cast<size_t>(a.head_dim);
  c.dim_pad = RoundUp(c.dim, c.lanes);
  c.dim_v_pad = RoundUp(static_cast<size_t>(a.head_dim_v), c.lanes);
  // Decoding, speculative decoding included: all of seq_q fits one work item of few rows.
  c.heads = rows <= 64 && c.positions == a.seq_q ? a.heads_kv : 1;
  size_t keys = kKeysPerTile / static_cast<size_t>(c.heads);
  if (c.heads > 1) {
    keys = std::max(keys, kDecodeHeadTileBytes / static_cast<size_t>(ElementBytes(
                                                     a.k.dtype, static_cast<int64_t>(c.dim_pad))));
  }
  c.keys_per_tile = std::min(kKeysPerTile, std::max<size_t>(16, keys)) / 8 * 8;
  // Reading the cache in place is compiled only where f16 converts by an instruction
  // (kNativeF16: AVX2 and up, Arm): its per-dtype micro-kernels would more than double the
  // compile time of the older targets.
  c.cache_in_place = kNativeF16 && c.decode() && c.dim == c.dim_pad &&
                     static_cast<size_t>(a.head_dim_v) == c.dim_v_pad && a.k.stride(3) == 1 &&
                     a.v.stride(3) == 1 && CacheReadInPlaceAsOneElement(a, c.lanes);
  const bool lanes_power_of_two = (c.lanes & (c.lanes - 1)) == 0;
  c.packed_scores = c.cache_in_place && lanes_power_of_two && c.lanes % rows == 0 &&
                    (rows & (rows - 1)) == 0 && a.alibi_slopes.empty();
  c.stream_tiles =
      kStreamTilesOnTarget && c.packed_scores && rows <= 4 &&
      kStreamStepKeys * static_cast<size_t>(c.heads) *
              static_cast<size_t>(ElementBytes(a.k.dtype, static_cast<int64_t>(c.dim_pad))) <=
          kStreamStepBytes;
  c.int8_scores = c.stream_tiles && Int8ScoresApply(a, rows, c.dim_pad);
  c.stream_step_keys =
      c.stream_tiles && WideStreamSteps(a, rows, c) ? kWideStreamStepKeys : kStreamStepKeys;
  c.packed_st_stride = RoundUp(c.keys_per_tile * rows, c.lanes);
  c.values_in_key_tile = a.ValuesInsideKeys();
  return c;
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_ATTENTION_PLAN_INL_H_
