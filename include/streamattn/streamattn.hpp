// streamattn.hpp: a header-only C++17 wrapper over the C ABI in streamattn.h.
//
//   streamattn::Context ctx;                                  // all cores, best backend
//   streamattn::Tensor q(q_data, {1, seq, 32, 128}), ...;     // views: pointer + shape (+ strides)
//   ctx.Attention(q, k, v, out, streamattn::AttentionOptions().set_causal(true));
//
// It adds ownership (a Context frees its sattn_context), typed views (float, int32_t, and the
// 16-bit storage types Float16 and BFloat16; std::span under C++20), options with named
// setters, and exceptions: a failed call throws streamattn::Error carrying the sattn_status and
// the library's message. Nothing here changes what a call computes or checks; every rule of
// streamattn.h (layouts, strides, in-place, threads) holds as written there.
#ifndef STREAMATTN_STREAMATTN_HPP_
#define STREAMATTN_STREAMATTN_HPP_

#ifndef __cplusplus
#error \
    "streamattn.hpp is the C++ wrapper (C++17 or later); C programs include streamattn/streamattn.h"
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if __cplusplus >= 202002L && defined(__has_include)
#if __has_include(<span>)
#include <span>
#define STREAMATTN_HPP_HAS_SPAN 1
#endif
#endif

#include "streamattn/streamattn.h"

namespace streamattn {

// A failed call: status() is the sattn_status, message() the library's text for it
// (sattn_last_error() at the time of the failure); what() is "status: message".
class Error : public std::runtime_error {
 public:
  Error(sattn_status status, const std::string& message)
      : std::runtime_error(std::string(sattn_status_string(status)) + ": " + message),
        status_(status),
        message_(message) {}
  sattn_status status() const noexcept { return status_; }
  const std::string& message() const noexcept { return message_; }

 private:
  sattn_status status_;
  std::string message_;
};

// Throws Error for anything but SATTN_OK, with this thread's last error message.
inline void ThrowIfFailed(sattn_status status) {
  if (status != SATTN_OK) throw Error(status, sattn_last_error());
}

// The version of the library actually loaded (the header's is SATTN_VERSION_*).
inline std::string Version() { return sattn_version(); }

// 16-bit float storage, so views of f16 and bf16 buffers are typed like float ones. The bits
// are IEEE binary16 and bfloat16 respectively; no arithmetic is provided.
struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
// Quantized KV-cache storage (streamattn.h, sattn_dtype, has their bytes): an FP8 E4M3 byte, and
// a byte of two I4 elements. A view of Int4x2 counts its shape and strides in elements, two to
// a byte. int8_t views are I8.
struct Float8E4M3 {
  uint8_t bits;
};
struct Int4x2 {
  uint8_t bits;
};

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr sattn_dtype value = SATTN_DTYPE_F32;
};
template <>
struct DTypeOf<Float16> {
  static constexpr sattn_dtype value = SATTN_DTYPE_F16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr sattn_dtype value = SATTN_DTYPE_BF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr sattn_dtype value = SATTN_DTYPE_I32;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr sattn_dtype value = SATTN_DTYPE_I8;
};
template <>
struct DTypeOf<Float8E4M3> {
  static constexpr sattn_dtype value = SATTN_DTYPE_FP8_E4M3;
};
template <>
struct DTypeOf<Int4x2> {
  static constexpr sattn_dtype value = SATTN_DTYPE_I4;
};

// A view of host memory: pointer, dtype, shape and strides in elements (row-major when not
// given). It owns nothing; the buffer must outlive the calls that use the view. Inputs are only
// read, so a view may be made from a const pointer and still be passed as an output, where the
// library would write through it: keep output buffers non-const.
class Tensor {
 public:
  using Dims = std::vector<int64_t>;

  Tensor(const void* data, sattn_dtype dtype, const Dims& shape) : Tensor(data, dtype, shape, {}) {}
  Tensor(const void* data, sattn_dtype dtype, const Dims& shape, const Dims& strides) {
    if (shape.empty() || shape.size() > SATTN_MAX_NDIM) {
      throw Error(SATTN_ERR_INVALID_ARGUMENT, "a view needs 1 to " +
                                                  std::to_string(SATTN_MAX_NDIM) + " dims, not " +
                                                  std::to_string(shape.size()));
    }
    if (!strides.empty() && strides.size() != shape.size()) {
      throw Error(SATTN_ERR_INVALID_ARGUMENT, std::to_string(strides.size()) + " strides for " +
                                                  std::to_string(shape.size()) + " dims");
    }
    view_ = sattn_tensor_contiguous(const_cast<void*>(data), dtype,
                                    static_cast<int32_t>(shape.size()), shape.data());
    for (size_t i = 0; i < strides.size(); ++i) view_.strides[i] = strides[i];
  }

  // Typed: the dtype follows T (float, int32_t, Float16, BFloat16).
  template <typename T>
  Tensor(T* data, const Dims& shape)
      : Tensor(static_cast<const void*>(data), DTypeOf<std::remove_cv_t<T>>::value, shape) {}
  template <typename T>
  Tensor(T* data, const Dims& shape, const Dims& strides)
      : Tensor(static_cast<const void*>(data), DTypeOf<std::remove_cv_t<T>>::value, shape,
               strides) {}

#ifdef STREAMATTN_HPP_HAS_SPAN
  // A view of a span, checked to hold every element the shape and strides reach (strides >= 0).
  template <typename T, std::size_t N>
  Tensor(std::span<T, N> data, const Dims& shape, const Dims& strides = {})
      : Tensor(data.data(), shape, strides) {
    int64_t last = 0;
    for (int i = 0; i < ndim(); ++i) {
      if (view_.strides[i] < 0)
        throw Error(SATTN_ERR_INVALID_ARGUMENT, "negative stride in a span view");
      last += (view_.shape[i] - 1) * view_.strides[i];
    }
    if (last + 1 > static_cast<int64_t>(data.size())) {
      throw Error(SATTN_ERR_INVALID_ARGUMENT, "the view reaches element " + std::to_string(last) +
                                                  " of a span of " + std::to_string(data.size()));
    }
  }
#endif

  // The same memory with its axes reordered: axes[i] is the old axis that becomes axis i. For
  // a [batch, heads, seq, dim] buffer, View(...).Permute({0, 2, 1, 3}) is the [batch, seq,
  // heads, dim] view the attention layouts name, without a copy.
  Tensor Permute(const std::vector<int>& axes) const {
    if (static_cast<int>(axes.size()) != ndim()) {
      throw Error(SATTN_ERR_INVALID_ARGUMENT, "Permute needs one axis per dim");
    }
    Tensor permuted = *this;
    unsigned seen = 0;
    for (int i = 0; i < ndim(); ++i) {
      const int from = axes[i];
      if (from < 0 || from >= ndim() || (seen & (1u << from))) {
        throw Error(SATTN_ERR_INVALID_ARGUMENT, "Permute axes must be a permutation");
      }
      seen |= 1u << from;
      permuted.view_.shape[i] = view_.shape[from];
      permuted.view_.strides[i] = view_.strides[from];
    }
    return permuted;
  }

  void* data() const { return view_.data; }
  sattn_dtype dtype() const { return static_cast<sattn_dtype>(view_.dtype); }
  int ndim() const { return view_.ndim; }
  int64_t shape(int i) const { return view_.shape[i]; }
  int64_t stride(int i) const { return view_.strides[i]; }
  const sattn_tensor& c_tensor() const { return view_; }

 private:
  sattn_tensor view_;
};

struct ContextInfo {
  sattn_backend backend;
  int num_threads;
  std::string backend_reason, simd_target, compiled_targets, cuda_availability;
  // The CPU's prefill tile kernel for q, k and v of each dtype ("f32-fma", "avx512-bf16").
  std::string f32_kernel, f16_kernel, bf16_kernel;
};

// The optional parts of an attention call, set by name; unset means the C default. Tensors
// given here are views too: their buffers must outlive the call.
class AttentionOptions {
 public:
  // 0 (the default) means 1 / sqrt(head_dim).
  AttentionOptions& set_scale(float scale) {
    options_.scale = scale;
    return *this;
  }
  AttentionOptions& set_causal(bool causal = true) {
    options_.causal = causal ? 1 : 0;
    return *this;
  }
  // Keys within [i' - left, i' + right] of the query's aligned position i'; -1 = unbounded.
  AttentionOptions& set_window(int64_t left, int64_t right) {
    options_.has_window = 1;
    options_.window_left = left;
    options_.window_right = right;
    return *this;
  }
  AttentionOptions& set_softcap(float softcap) {
    options_.softcap = softcap;
    return *this;
  }
  // P.V in f32 where a native CPU kernel would round P to the inputs' type.
  AttentionOptions& set_f32_pv(bool f32_pv = true) {
    options_.f32_pv = f32_pv ? 1 : 0;
    return *this;
  }
  // Over an I4 k: int8 queries and integer Q.K^T where decoding can take them
  // (sattn_attention_options.int8_queries: faster, approximate).
  AttentionOptions& set_int8_queries(bool int8_queries = true) {
    options_.int8_queries = int8_queries ? 1 : 0;
    return *this;
  }
  AttentionOptions& set_alibi_slopes(const Tensor& slopes) { return Keep(alibi_slopes_, slopes); }
  AttentionOptions& set_mask(const Tensor& mask) { return Keep(mask_, mask); }
  AttentionOptions& set_sinks(const Tensor& sinks) { return Keep(sinks_, sinks); }
  AttentionOptions& set_seqused_k(const Tensor& seqused_k) { return Keep(seqused_k_, seqused_k); }
  AttentionOptions& set_block_table(const Tensor& block_table) {
    return Keep(block_table_, block_table);
  }
  // Packed variable-length batches: int32 [batch + 1] prefix sums of the query (key) lengths,
  // q and out [1, total_q, ..], k and v [1, total_k, ..] (sattn_attention_options.cu_seqlens_q,
  // cu_seqlens_k).
  AttentionOptions& set_cu_seqlens_q(const Tensor& cu_seqlens_q) {
    return Keep(cu_seqlens_q_, cu_seqlens_q);
  }
  AttentionOptions& set_cu_seqlens_k(const Tensor& cu_seqlens_k) {
    return Keep(cu_seqlens_k_, cu_seqlens_k);
  }
  // The scales of a quantized k and v (sattn_attention_options.k_scales, v_scales).
  AttentionOptions& set_k_scales(const Tensor& scales) { return Keep(k_scales_, scales); }
  AttentionOptions& set_v_scales(const Tensor& scales) { return Keep(v_scales_, scales); }

  // The C struct, pointing into this object (valid while it lives and is not modified).
  sattn_attention_options c_options() const {
    sattn_attention_options c = options_;
    c.struct_size = sizeof(c);
    c.alibi_slopes = Pointer(alibi_slopes_);
    c.mask = Pointer(mask_);
    c.sinks = Pointer(sinks_);
    c.seqused_k = Pointer(seqused_k_);
    c.block_table = Pointer(block_table_);
    c.k_scales = Pointer(k_scales_);
    c.v_scales = Pointer(v_scales_);
    c.cu_seqlens_q = Pointer(cu_seqlens_q_);
    c.cu_seqlens_k = Pointer(cu_seqlens_k_);
    return c;
  }

 private:
  AttentionOptions& Keep(std::optional<Tensor>& slot, const Tensor& t) {
    slot = t;
    return *this;
  }
  static const sattn_tensor* Pointer(const std::optional<Tensor>& t) {
    return t ? &t->c_tensor() : nullptr;
  }

  sattn_attention_options options_{};
  std::optional<Tensor> alibi_slopes_, mask_, sinks_, seqused_k_, block_table_, k_scales_,
      v_scales_, cu_seqlens_q_, cu_seqlens_k_;
};

// Where sattn_quantize_kv writes new rows: at per-sequence positions, through a block table.
class QuantizeKVOptions {
 public:
  QuantizeKVOptions& set_positions(const Tensor& positions) {
    positions_ = positions;
    return *this;
  }
  QuantizeKVOptions& set_block_table(const Tensor& block_table) {
    block_table_ = block_table;
    return *this;
  }
  sattn_quantize_kv_options c_options() const {
    sattn_quantize_kv_options c{};
    c.struct_size = sizeof(c);
    c.positions = positions_ ? &positions_->c_tensor() : nullptr;
    c.block_table = block_table_ ? &block_table_->c_tensor() : nullptr;
    return c;
  }

 private:
  std::optional<Tensor> positions_, block_table_;
};

// Owns a sattn_context: thread arena, scratch and backend choice. Use one from one thread at a
// time (one Context per thread for concurrency). Movable, not copyable.
class Context {
 public:
  // num_threads 0 = every core the process may use; backend SATTN_BACKEND_AUTO picks CUDA when
  // a usable GPU is present, else the CPU; cpu_kernel forces the CPU's prefill tile kernel.
  explicit Context(int num_threads = 0, sattn_backend backend = SATTN_BACKEND_AUTO,
                   sattn_cpu_kernel cpu_kernel = SATTN_CPU_KERNEL_AUTO) {
    sattn_context_options options{};
    options.struct_size = sizeof(options);
    options.num_threads = num_threads;
    options.backend = backend;
    options.cpu_kernel = cpu_kernel;
    sattn_context* ctx = nullptr;
    ThrowIfFailed(sattn_context_create(&options, &ctx));
    ctx_.reset(ctx);
  }

  sattn_context* get() const { return ctx_.get(); }

  ContextInfo Info() const {
    sattn_context_info info{};
    info.struct_size = sizeof(info);
    ThrowIfFailed(sattn_context_get_info(ctx_.get(), &info));
    return {static_cast<sattn_backend>(info.backend),
            info.num_threads,
            info.backend_reason,
            info.simd_target,
            info.compiled_targets,
            info.cuda_availability,
            info.f32_kernel,
            info.f16_kernel,
            info.bf16_kernel};
  }

  // out = softmax(scale q k^T + bias) v; layouts as in sattn_attention.
  void Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const AttentionOptions& options = AttentionOptions()) {
    Attention(q, k, v, out, nullptr, options);
  }
  // The same, also writing the row log-sum-exps, float32 [batch, heads_q, seq_q].
  void Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, const AttentionOptions& options = AttentionOptions()) {
    Attention(q, k, v, out, &lse, options);
  }

  // Quantizes new K or V rows `src` into a quantized cache's values and scales (I8, I4: written;
  // FP8: read); see sattn_quantize_kv.
  void QuantizeKV(const Tensor& src, const Tensor& values, const Tensor& scales,
                  const QuantizeKVOptions& options = QuantizeKVOptions()) {
    const sattn_quantize_kv_options c = options.c_options();
    ThrowIfFailed(
        sattn_quantize_kv(ctx_.get(), &src.c_tensor(), &values.c_tensor(), &scales.c_tensor(), &c));
  }

  // Merges partial results (o_i, lse_i) over disjoint key sets into out (and lse_out).
  void MergeStates(const std::vector<Tensor>& o_parts, const std::vector<Tensor>& lse_parts,
                   const Tensor& out) {
    MergeStates(o_parts, lse_parts, out, nullptr);
  }
  void MergeStates(const std::vector<Tensor>& o_parts, const std::vector<Tensor>& lse_parts,
                   const Tensor& out, const Tensor& lse_out) {
    MergeStates(o_parts, lse_parts, out, &lse_out);
  }

  // Softmax and log-softmax over the last axis, at a temperature (1 = none).
  void Softmax(const Tensor& in, const Tensor& out, float temperature = 1.0f) {
    const sattn_softmax_options options = SoftmaxOptions(temperature);
    ThrowIfFailed(sattn_softmax(ctx_.get(), &in.c_tensor(), &out.c_tensor(), &options));
  }
  void LogSoftmax(const Tensor& in, const Tensor& out, float temperature = 1.0f) {
    const sattn_softmax_options options = SoftmaxOptions(temperature);
    ThrowIfFailed(sattn_log_softmax(ctx_.get(), &in.c_tensor(), &out.c_tensor(), &options));
  }

  // The k most likely entries of each row (int32 indices, float32 probabilities), in one read.
  void SoftmaxTopK(const Tensor& in, int32_t k, const Tensor& indices, const Tensor& probs,
                   float temperature = 1.0f) {
    SoftmaxTopK(in, k, indices, probs, nullptr, temperature);
  }
  void SoftmaxTopK(const Tensor& in, int32_t k, const Tensor& indices, const Tensor& probs,
                   const Tensor& lse, float temperature = 1.0f) {
    SoftmaxTopK(in, k, indices, probs, &lse, temperature);
  }

  // y[i] = 2^x[i] by the library's SIMD exp2 (y may be x).
  void Exp2(const float* x, float* y, int64_t n) { ThrowIfFailed(sattn_exp2(ctx_.get(), x, y, n)); }
#ifdef STREAMATTN_HPP_HAS_SPAN
  void Exp2(std::span<const float> x, std::span<float> y) {
    if (y.size() < x.size()) throw Error(SATTN_ERR_INVALID_ARGUMENT, "Exp2: y is shorter than x");
    Exp2(x.data(), y.data(), static_cast<int64_t>(x.size()));
  }
#endif

 private:
  struct Deleter {
    void operator()(sattn_context* ctx) const { sattn_context_destroy(ctx); }
  };

  static sattn_softmax_options SoftmaxOptions(float temperature) {
    sattn_softmax_options options{};
    options.struct_size = sizeof(options);
    options.temperature = temperature;
    return options;
  }

  void Attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor* lse, const AttentionOptions& options) {
    const sattn_attention_options c = options.c_options();
    ThrowIfFailed(sattn_attention(ctx_.get(), &q.c_tensor(), &k.c_tensor(), &v.c_tensor(),
                                  &out.c_tensor(), lse ? &lse->c_tensor() : nullptr, &c));
  }

  void MergeStates(const std::vector<Tensor>& o_parts, const std::vector<Tensor>& lse_parts,
                   const Tensor& out, const Tensor* lse_out) {
    if (o_parts.size() != lse_parts.size()) {
      throw Error(SATTN_ERR_INVALID_ARGUMENT, "MergeStates: " + std::to_string(o_parts.size()) +
                                                  " o_parts but " +
                                                  std::to_string(lse_parts.size()) + " lse_parts");
    }
    std::vector<sattn_tensor> o, lse;
    for (const Tensor& t : o_parts) o.push_back(t.c_tensor());
    for (const Tensor& t : lse_parts) lse.push_back(t.c_tensor());
    ThrowIfFailed(sattn_merge_states(ctx_.get(), static_cast<int32_t>(o.size()), o.data(),
                                     lse.data(), &out.c_tensor(),
                                     lse_out ? &lse_out->c_tensor() : nullptr));
  }

  void SoftmaxTopK(const Tensor& in, int32_t k, const Tensor& indices, const Tensor& probs,
                   const Tensor* lse, float temperature) {
    const sattn_softmax_options options = SoftmaxOptions(temperature);
    ThrowIfFailed(sattn_softmax_topk(ctx_.get(), &in.c_tensor(), k, &indices.c_tensor(),
                                     &probs.c_tensor(), lse ? &lse->c_tensor() : nullptr,
                                     &options));
  }

  std::unique_ptr<sattn_context, Deleter> ctx_;
};

}  // namespace streamattn

#endif  // STREAMATTN_STREAMATTN_HPP_
