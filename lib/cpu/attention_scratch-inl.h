// A worker's scratch for the attention drivers, as typed arrays: the layout is computed once
// per call from the plan (MakeAttentionScratchLayout: sizes from tile shapes only, never from
// the sequence length), and each work item binds it to its worker's buffer (Bind), so the
// drivers and kernels see named, typed pointers rather than offsets into one float array.
// Every array starts on its own cache line (64 bytes: also the widest vector).
#if defined(STREAMATTN_CPU_ATTENTION_SCRATCH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_ATTENTION_SCRATCH_INL_H_
#undef STREAMATTN_CPU_ATTENTION_SCRATCH_INL_H_
#else
#define STREAMATTN_CPU_ATTENTION_SCRATCH_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cpu/attention_plan-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// `count` elements of T, `offset` bytes into a buffer.
template <typename T>
struct ScratchSlot {
  size_t offset = 0;
  size_t count = 0;
  // The slot's elements in `base`, a buffer at least as long as the layout and aligned as it.
  T* In(unsigned char* base) const { return static_cast<T*>(static_cast<void*>(base + offset)); }
};

// Hands out slots one after another, each on its own cache line.
class ScratchArena {
 public:
  static constexpr size_t kAlignment = 64;
  template <typename T>
  ScratchSlot<T> Take(size_t count) {
    static_assert(alignof(T) <= kAlignment, "slots are aligned to a cache line");
    ScratchSlot<T> slot{bytes_, count};
    bytes_ += RoundUp(count * sizeof(T), kAlignment);
    return slot;
  }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
};

// One kv head's state in a work item: its packed queries (Q^T panels for the GEMM, rows for
// dot scores) and the online-softmax state (m, l, O) of its rows.
struct HeadScratch {
  float* q;       // rows_pad x dim_pad
  float* o;       // rows_pad x dim_v_pad (padding rows unread)
  float* m;       // rows_pad
  float* l;       // rows_pad
  float* slope2;  // rows_pad: -ALiBi slope * log2(e) per row (0 for padding rows)
  // plan.int8_scores only (decode/int8_scores-inl.h): the rows rounded to int8 (dim_pad bytes
  // each), their lanes' starting sums (dim_pad / 8 each) and their scales.
  int8_t* q8;
  int32_t* q8_bias;
  float* q8_scale;
};

// A slot's memory seen as another element type: tile kernels whose packed layouts are not f32
// (bf16 rows, pairs of bf16 in 32-bit words) use the f32 layout's slots, which are at least as
// long in bytes.
template <typename T>
T* SlotAs(float* slot) {
  static_assert(alignof(T) <= alignof(float), "a slot holds floats");
  return static_cast<T*>(static_cast<void*>(slot));
}

struct AttentionScratch;

struct AttentionScratchLayout {
  // A converted tile, key-major: head h's row of key c at (c * heads + h) * dim_pad.
  ScratchSlot<float> k_tile, v_tile;
  // S^T (keys x rows_pad), or for packed scores two sets of one buffer per head
  // (packed_st_stride floats each: streamed tiles score one tile while the P.V reads the last).
  ScratchSlot<float> scores;
  // The rows' rescale factors: at least two sets (tiles alternate two between heads), one per
  // head for streamed tiles.
  ScratchSlot<float> alpha;
  // Per row, relative to the tile (TileScoring): first and last visible key, the diagonal.
  ScratchSlot<float> lo_rel, hi_rel, diagonal_rel;
  // plan.lanes rows of max(dim_pad, dim_v_pad) floats: one row's conversion, or a vector of
  // query rows staged to be written into Q^T panels (F32FmaTiles::PackQueries).
  ScratchSlot<float> row;
  ScratchSlot<int64_t> lo, hi;  // per row: the keys it sees in the work item's chunk
  // Per panel: some row sees the tile; some row hides some of its keys; every row sees all.
  ScratchSlot<uint8_t> panel_active, panel_partial, panel_covered;
  // Per panel: the tile's keys, from its first, up to the last that some row sees.
  ScratchSlot<uint32_t> panel_keys;
  // In-place tiles: K and V row pointers of two tiles and a step beyond (typed when bound).
  ScratchSlot<unsigned char> row_pointers;
  size_t row_pointer_count = 0;
  // Then one block per kv head: head h's arrays at head_block + h * head_bytes + their offset.
  size_t head_block = 0, head_bytes = 0;
  ScratchSlot<float> head_q, head_o, head_m, head_l, head_slope2;
  ScratchSlot<int8_t> head_q8;
  ScratchSlot<int32_t> head_q8_bias;
  ScratchSlot<float> head_q8_scale;
  size_t bytes = 0;

  AttentionScratch Bind(void* buffer) const;
};

// A layout bound to one worker's buffer.
struct AttentionScratch {
  const AttentionScratchLayout* layout;
  unsigned char* base;
  float *k_tile, *v_tile, *scores, *alpha, *lo_rel, *hi_rel, *diagonal_rel, *row;
  int64_t *lo, *hi;
  uint8_t *panel_active, *panel_partial, *panel_covered;
  uint32_t* panel_keys;

  HeadScratch Head(int64_t h) const {
    unsigned char* block = base + layout->head_block + static_cast<size_t>(h) * layout->head_bytes;
    return HeadScratch{layout->head_q.In(block),       layout->head_o.In(block),
                       layout->head_m.In(block),       layout->head_l.In(block),
                       layout->head_slope2.In(block),  layout->head_q8.In(block),
                       layout->head_q8_bias.In(block), layout->head_q8_scale.In(block)};
  }
  // The in-place tiles' row pointers, as pointers to the cache's stored elements.
  template <typename Stored>
  const Stored** RowPointers() const {
    static_assert(sizeof(const Stored*) == sizeof(const void*), "one pointer size");
    return static_cast<const Stored**>(static_cast<void*>(layout->row_pointers.In(base)));
  }
};

inline AttentionScratch AttentionScratchLayout::Bind(void* buffer) const {
  unsigned char* b = static_cast<unsigned char*>(buffer);
  return AttentionScratch{this,
                          b,
                          k_tile.In(b),
                          v_tile.In(b),
                          scores.In(b),
                          alpha.In(b),
                          lo_rel.In(b),
                          hi_rel.In(b),
                          diagonal_rel.In(b),
                          row.In(b),
                          lo.In(b),
                          hi.In(b),
                          panel_active.In(b),
                          panel_partial.In(b),
                          panel_covered.In(b),
                          panel_keys.In(b)};
}

inline AttentionScratchLayout MakeAttentionScratchLayout(const AttentionPlan& plan) {
  AttentionScratchLayout s;
  ScratchArena arena;
  const size_t heads = static_cast<size_t>(plan.heads), kpt = plan.keys_per_tile;
  const size_t R = plan.rows_pad;
  s.k_tile = arena.Take<float>(heads * kpt * plan.dim_pad);
  s.v_tile = arena.Take<float>(heads * kpt * plan.dim_v_pad);
  s.scores = arena.Take<float>(std::max(
      kpt * R + 2 * plan.lanes, plan.packed_scores ? 2 * heads * plan.packed_st_stride : 0));
  s.alpha = arena.Take<float>(std::max<size_t>(2, heads) * R);
  s.lo_rel = arena.Take<float>(R);
  s.hi_rel = arena.Take<float>(R);
  s.diagonal_rel = arena.Take<float>(R);
  s.row = arena.Take<float>(plan.lanes * std::max(plan.dim_pad, plan.dim_v_pad));
  s.lo = arena.Take<int64_t>(R);
  s.hi = arena.Take<int64_t>(R);
  const size_t panels = R / plan.panel_rows;
  s.panel_active = arena.Take<uint8_t>(panels);
  s.panel_partial = arena.Take<uint8_t>(panels);
  s.panel_covered = arena.Take<uint8_t>(panels);
  s.panel_keys = arena.Take<uint32_t>(panels);
  s.row_pointer_count = plan.cache_in_place ? 4 * (kpt + kWideStreamStepKeys) : 0;
  s.row_pointers = arena.Take<unsigned char>(s.row_pointer_count * sizeof(const void*));
  ScratchArena head;
  s.head_q = head.Take<float>(R * plan.dim_pad);
  s.head_o = head.Take<float>(R * plan.dim_v_pad);
  s.head_m = head.Take<float>(R);
  s.head_l = head.Take<float>(R);
  s.head_slope2 = head.Take<float>(R);
  const size_t q8_rows = plan.int8_scores ? R : 0;
  s.head_q8 = head.Take<int8_t>(q8_rows * plan.dim_pad);
  s.head_q8_bias = head.Take<int32_t>(q8_rows * plan.dim_pad / 8);
  s.head_q8_scale = head.Take<float>(q8_rows);
  s.head_bytes = head.bytes();
  s.head_block = arena.Take<unsigned char>(heads * s.head_bytes).offset;
  s.bytes = arena.bytes();
  return s;
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_ATTENTION_SCRATCH_INL_H_
