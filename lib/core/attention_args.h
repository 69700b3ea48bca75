// AttentionArgs: a validated sattn_attention call in canonical form, shared by every backend.
// Options are resolved once here (default scale, causal folded into the window, slopes and
// sinks copied out of their views), so kernels see one representation of "which keys does
// query i see" and never re-derive it.
#ifndef STREAMATTN_CORE_ATTENTION_ARGS_H_
#define STREAMATTN_CORE_ATTENTION_ARGS_H_

#include <algorithm>
#include <cstdint>

#include "core/allocator.h"
#include "core/tensor.h"

namespace streamattn {

// The scales of a group-quantized cache (I8, I4: core/quantized.h): a view laid out like the
// cache, its last dimension head_dim / group.
struct GroupScales {
  Tensor scales;
  int64_t group = 0;  // channels per scale; 0: the cache has no group scales
  // The scale of the value at element offset e of the cache (from its data, in elements) is at
  // element offset e >> log2(group) of the scales: each of the scales' strides is the cache's
  // divided by group, the last one 1 (or one scale per row), and group a power of two. The
  // kernels that read the cache in place find each value's scale so; other layouts are read
  // through converted tiles.
  bool addressable = false;
  int log2_group = 0;
};

// Key `key` of sequence b, kv head `head`: its row of t (a cache, or scales laid out like one),
// in a contiguous cache [batch, seq, heads, ..] or a paged one [num_pages, page_size, heads, ..]
// through block_table [batch, max_pages].
inline void* CacheKeyRow(const Tensor& t, bool paged, const Tensor& block_table, int64_t page_size,
                         int64_t b, int64_t key, int64_t head) {
  if (!paged) return t.At(b, key, head, 0);
  const int32_t page = *block_table.At<const int32_t>(b, key / page_size);
  return t.At(page, key % page_size, head, 0);
}

struct AttentionArgs {
  // The per-head and per-sequence copies below come from `alloc` (the context's).
  explicit AttentionArgs(const Allocator& alloc = Allocator())
      : alibi_slopes(alloc),
        sinks(alloc),
        k_head_scales(alloc),
        v_head_scales(alloc),
        seqused_k(alloc),
        q_offsets(alloc),
        k_offsets(alloc) {}

  Tensor q, k, v, out;
  Tensor lse;  // valid when has_lse
  bool has_lse = false;

  // seq_q and seq_k are the longest sequence's (packed batches: see q_offsets); a sequence's
  // own lengths are SeqQ(b) and SeqK(b).
  int64_t batch = 0, seq_q = 0, seq_k = 0, heads_q = 0, heads_kv = 0;
  int64_t head_dim = 0, head_dim_v = 0;
  int64_t group = 1;  // heads_q / heads_kv: query heads sharing one kv head

  float scale = 1.0f;  // natural units; the kernels fold log2(e) in
  // Visible keys of query i: [diag - window_left, diag + window_right] with
  // diag = i + seq_k - seq_q, clipped to [0, seq_k); -1 = unbounded. Causal is window_right = 0.
  int64_t window_left = -1;
  int64_t window_right = -1;
  float softcap = 0.0f;        // 0: none
  Vector<float> alibi_slopes;  // [heads_q] or empty
  Vector<float> sinks;         // [heads_q] or empty
  Tensor mask;                 // valid when has_mask: [batch|1, heads_q|1, seq_q, seq_k]
  bool has_mask = false;
  // Multiply P.V in f32 where a native tile kernel would round P to the inputs' type.
  bool f32_pv = false;
  // Decoding over I8/I4 keys may round the queries to int8 for integer dot products
  // (sattn_attention_options.int8_queries; decode/int8_scores-inl.h).
  bool int8_queries = false;
  // Quantized caches: group scales of I8 and I4 k and v, and the per-kv-head scales of FP8 ones
  // ([heads_kv], a per-tensor scale repeated; empty when the cache is not FP8).
  GroupScales k_group_scales, v_group_scales;
  Vector<float> k_head_scales, v_head_scales;

  // Ragged batches: keys [0, seqused_k[b]) of sequence b exist (empty: all seq_k of them).
  Vector<int64_t> seqused_k;
  Tensor seqused_k_view;  // the caller's view (data nullptr: none), for a device backend
  // Paged caches: k and v are [num_pages, page_size, heads_kv, dim] and block_table
  // [batch, max_pages] int32 maps a sequence's page index to a cache page; seq_k is then
  // max_pages * page_size.
  bool paged = false;
  Tensor block_table;
  int64_t page_size = 0;

  // Packed batches (cu_seqlens_q, cu_seqlens_k): [batch + 1] prefix sums. Sequence b's
  // queries are rows [q_offsets[b], q_offsets[b + 1]) of q, out and lse (whose batch extent
  // is 1); with k_offsets likewise its keys in k, v and their scales. Empty: not packed, the
  // sequence is index b of the batch dimension. Every kernel reads rows through QueryAt and
  // KeyRow(s), so this is the one place that knows the layout.
  Vector<int64_t> q_offsets;
  Vector<int64_t> k_offsets;

  // The queries sequence b has.
  int64_t SeqQ(int64_t b) const {
    return q_offsets.empty() ? seq_q : q_offsets[b + 1] - q_offsets[b];
  }
  // The keys sequence b has (seqused_k, else its packed length, else the cache's).
  int64_t SeqK(int64_t b) const {
    if (!seqused_k.empty()) return seqused_k[b];
    return k_offsets.empty() ? seq_k : k_offsets[b + 1] - k_offsets[b];
  }

  // Where query `pos` of sequence b is in q, out and lse: index (batch, row) of their batch and
  // sequence dimensions.
  struct RowIndex {
    int64_t batch, row;
  };
  RowIndex QueryAt(int64_t b, int64_t pos) const {
    return q_offsets.empty() ? RowIndex{b, pos} : RowIndex{0, q_offsets[b] + pos};
  }
  // Query `pos` of sequence b, query head h: its row of q.
  const void* QueryRow(int64_t b, int64_t pos, int64_t h) const {
    const RowIndex at = QueryAt(b, pos);
    return q.At(at.batch, at.row, h, 0);
  }
  // Likewise for key `key` of sequence b in a contiguous (not paged) k or v.
  RowIndex DenseKeyAt(int64_t b, int64_t key) const {
    return k_offsets.empty() ? RowIndex{b, key} : RowIndex{0, k_offsets[b] + key};
  }

  // Whether v is a view of the leading channels of k's own rows (MLA after weight absorption:
  // K rows of 512 latent + 64 rotary channels, V their first 512): the same data, dtype and
  // strides, and the same scales where quantized. Then every value element is a key element
  // already read for the scores, so a kernel that converts K rows may take V from the converted
  // K tile instead of converting the same bytes again (ConvertKeyTile), and kernels reading the
  // cache in place find V rows in the lines the scores just loaded.
  bool ValuesInsideKeys() const {
    if (v.data != k.data || v.dtype != k.dtype || head_dim_v > head_dim) return false;
    for (int i = 0; i < 4; ++i) {
      if (v.stride(i) != k.stride(i)) return false;
    }
    const GroupScales &ks = k_group_scales, &vs = v_group_scales;
    if (ks.group != vs.group) return false;
    if (ks.group != 0) {
      if (ks.scales.data != vs.scales.data || ks.scales.dtype != vs.scales.dtype) return false;
      for (int i = 0; i < 4; ++i) {
        if (ks.scales.stride(i) != vs.scales.stride(i)) return false;
      }
    }
    if (k_head_scales.size() != v_head_scales.size()) return false;
    for (size_t h = 0; h < k_head_scales.size(); ++h) {
      if (k_head_scales[h] != v_head_scales[h]) return false;
    }
    return true;
  }

  const GroupScales& GroupScalesOf(const Tensor& cache) const {
    return &cache == &v ? v_group_scales : k_group_scales;
  }

  // Key `key` of sequence b, kv head `head`: its row of t (k or v, or their scales, which share
  // the cache's layout and block table).
  const void* KeyRow(const Tensor& t, int64_t b, int64_t key, int64_t head) const {
    if (!paged) {
      const RowIndex at = DenseKeyAt(b, key);
      return t.At(at.batch, at.row, head, 0);
    }
    return CacheKeyRow(t, paged, block_table, page_size, b, key, head);
  }

  // KeyRow of keys [first, first + count) of sequence b, kv head `head`, in k and in v: a
  // tile's rows with one division for the whole range rather than two per key and tensor
  // (decoding fills these per tile, where per-key divisions cost as much as a tenth of the
  // arithmetic).
  template <typename Row>
  void KeyRows(int64_t b, int64_t first, int64_t count, int64_t head, Row* k_rows,
               Row* v_rows) const {
    if (count <= 0) return;
    const int64_t k_step = ElementBytes(k.dtype, k.stride(1));
    const int64_t v_step = ElementBytes(v.dtype, v.stride(1));
    // Rows [i, end): the first at k_row and v_row, each next one a stride further.
    auto fill = [&](int64_t i, int64_t end, const void* k_row, const void* v_row) {
      const char* k_at = static_cast<const char*>(k_row);
      const char* v_at = static_cast<const char*>(v_row);
      for (; i < end; ++i, k_at += k_step, v_at += v_step) {
        k_rows[i] = reinterpret_cast<Row>(k_at);
        v_rows[i] = reinterpret_cast<Row>(v_at);
      }
    };
    if (!paged) {
      const RowIndex at = DenseKeyAt(b, first);
      fill(0, count, k.At(at.batch, at.row, head, 0), v.At(at.batch, at.row, head, 0));
      return;
    }
    // Page by page: one table entry and one address computation a page.
    int64_t page_index = first / page_size, within = first % page_size;
    for (int64_t i = 0; i < count; within = 0, ++page_index) {
      const int32_t page = *block_table.At<const int32_t>(b, page_index);
      const int64_t end = std::min(count, i + page_size - within);
      fill(i, end, k.At(page, within, head, 0), v.At(page, within, head, 0));
      i = end;
    }
  }
};

// The keys query i of sequence b sees, as an inclusive range [lo, hi] (empty when lo > hi),
// for a sequence of seq_k keys (args.SeqK(b)) and its own SeqQ(b) queries.
struct KeyRange {
  int64_t lo;
  int64_t hi;
  bool empty() const { return lo > hi; }
};

// The diagonal of query i of sequence b, which causal masks, windows and ALiBi are measured
// from (bottom-right aligned per sequence).
inline int64_t Diagonal(const AttentionArgs& args, int64_t b, int64_t i, int64_t seq_k) {
  return i + seq_k - args.SeqQ(b);
}

inline KeyRange VisibleKeys(const AttentionArgs& args, int64_t b, int64_t i, int64_t seq_k) {
  const int64_t diagonal = Diagonal(args, b, i, seq_k);
  KeyRange range{0, seq_k - 1};
  if (args.window_left >= 0) range.lo = std::max(range.lo, diagonal - args.window_left);
  if (args.window_right >= 0) range.hi = std::min(range.hi, diagonal + args.window_right);
  return range;
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_ATTENTION_ARGS_H_
