// Backend: what a device must provide. The API layer validates every argument and builds these
// argument structs; a backend only computes (and may still refuse with SATTN_ERR_UNSUPPORTED).
#ifndef STREAMATTN_CORE_BACKEND_H_
#define STREAMATTN_CORE_BACKEND_H_

#include <cstdint>

#include "core/allocator.h"
#include "core/attention_args.h"
#include "core/status.h"
#include "core/tensor.h"
#include "streamattn/streamattn.h"

namespace streamattn {

// sattn_merge_states after validation: num_parts (o, lse) pairs, all of shape
// [batch, seq, heads, head_dim] and [batch, heads, seq].
struct MergeStatesArgs {
  int32_t num_parts = 0;
  const Tensor* o_parts = nullptr;
  const Tensor* lse_parts = nullptr;
  Tensor out;
  const Tensor* lse_out = nullptr;  // optional
};

// sattn_softmax / sattn_log_softmax after validation: in and out [rows, n] (a 1-D call is one
// row with stride 0), out f32 or in's dtype, out either exactly in or disjoint from it.
struct SoftmaxArgs {
  Tensor in;
  Tensor out;
  float temperature = 1.0f;  // finite, >= FLT_MIN
  bool log = false;          // log-softmax
};

// sattn_softmax_topk after validation: in [rows, n] with n < 2^31, 1 <= k <= min(n, 1024);
// indices (i32) and probs (f32) [rows, k]; lse optional, f32 [rows]. No output overlaps another
// or in.
struct SoftmaxTopKArgs {
  Tensor in;
  int32_t k = 1;
  Tensor indices;
  Tensor probs;
  const Tensor* lse = nullptr;
  float temperature = 1.0f;
};

// sattn_quantize_kv after validation: src [batch, n, heads_kv, head_dim] (f32, f16, bf16,
// every element finite) into values (I8, I4, FP8) and, for I8 and I4, scales (f16 or f32, the
// last dimension head_dim / group), both [batch, cache_len, ...] or, paged, [num_pages,
// page_size, ...]. Row t of sequence b goes to key positions[b] + t (checked to fit, and, paged,
// to map to a page in range).
struct QuantizeKVArgs {
  explicit QuantizeKVArgs(const Allocator& alloc = Allocator())
      : positions(alloc), head_scales(alloc) {}
  Tensor src, values, scales;
  int64_t group = 0;          // I8, I4: channels per scale
  Vector<int64_t> positions;  // [batch]
  bool paged = false;
  Tensor block_table;  // paged: [batch, max_pages] int32
  int64_t page_size = 0;
  Vector<float> head_scales;  // FP8: [heads_kv], each finite and > 0

  // Where key `key` of sequence b, kv head `head`, lives in t (values or scales).
  void* KeyRow(const Tensor& t, int64_t b, int64_t key, int64_t head) const {
    return CacheKeyRow(t, paged, block_table, page_size, b, key, head);
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual sattn_backend kind() const = 0;

  virtual Status Exp2(const float* x, float* y, int64_t n) = 0;
  virtual Status MergeStates(const MergeStatesArgs& args) = 0;
  virtual Status Softmax(const SoftmaxArgs& args) = 0;
  virtual Status SoftmaxTopK(const SoftmaxTopKArgs& args) = 0;
  virtual Status Attention(const AttentionArgs& args) = 0;
  virtual Status QuantizeKV(const QuantizeKVArgs& args) = 0;

  // What validation reads of a small option tensor on this backend's device (seqused_k,
  // block_table, ALiBi slopes, sinks): `host` gets t's shape and strides, and views either t
  // itself, where the host reads that memory directly, or a copy in `storage`, which the caller
  // keeps for as long as it reads `host`. `name` is the argument's, for messages.
  virtual Status CopyToHost(const Tensor& t, const char* name, Vector<unsigned char>* storage,
                            Tensor* host) const = 0;
};

}  // namespace streamattn

#endif  // STREAMATTN_CORE_BACKEND_H_
