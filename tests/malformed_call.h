// The malformed-call matrix's shared parts: valid arguments for every entry point (Calls), and
// a broken call (Malformed). The matrix is split by entry point across
// malformed_call_test.cc and malformed_quantized_call.cc.
#ifndef STREAMATTN_TESTS_MALFORMED_CALL_H_
#define STREAMATTN_TESTS_MALFORMED_CALL_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "attention_case.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace testing_util {

inline constexpr int64_t kHuge = int64_t{1} << 62;
inline constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

inline AttentionCase DenseCase() {
  AttentionCase c;
  c.batch = 2, c.seq_q = 5, c.seq_k = 7, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 8;
  c.alibi = true, c.sinks = true, c.mask = true, c.mask_heads = 4;
  return c;
}

// Paged and ragged: 2 sequences, pages of 4 keys, cache length 8, 7 pages in all.
inline AttentionCase PagedCase() {
  AttentionCase c;
  c.batch = 2, c.seq_q = 1, c.seq_k = 8, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 8;
  c.page_size = 4, c.seqused_k = {8, 3};
  return c;
}

// A paged cache with K in I4 (groups of 4 channels, f16 scales) and V in FP8 (a scale a kv
// head).
inline AttentionCase QuantizedCase() {
  AttentionCase c = PagedCase();
  c.seq_q = 2;
  c.k_format = SATTN_DTYPE_I4, c.k_group = 4, c.scale_dtype = SATTN_DTYPE_F16;
  c.v_format = SATTN_DTYPE_FP8_E4M3;
  return c;
}

// Valid arguments for every entry point; a case breaks one of them and makes one call.
struct Calls {
  ScopedContext ctx{2};
  AttentionCall dense{DenseCase()};
  AttentionCall paged{PagedCase()};
  AttentionCall quantized{QuantizedCase()};

  // Packed: the dense call's two sequences end to end (q, k, v and out reinterpreted as
  // [1, 10, ..] and [1, 14, ..]; no mask, no lse), cu_seqlens_q {0, 5, 10}, cu_seqlens_k
  // {0, 7, 14}.
  HostTensor cu_q{SATTN_DTYPE_I32, {3}}, cu_k{SATTN_DTYPE_I32, {3}};
  sattn_tensor packed_q, packed_k, packed_v, packed_out, cu_q_view, cu_k_view;
  sattn_attention_options packed_options{};

  // quantize_kv: 3 new rows of 2 sequences into an I8 cache of 6 keys, groups of 4, at
  // positions 1 and 3.
  HostTensor kv_src{SATTN_DTYPE_F32, {2, 3, 2, 8}}, kv_values{SATTN_DTYPE_I8, {2, 6, 2, 8}};
  HostTensor kv_scales{SATTN_DTYPE_F32, {2, 6, 2, 2}}, kv_positions{SATTN_DTYPE_I32, {2}};
  sattn_tensor kv_src_view, kv_values_view, kv_scales_view, kv_positions_view;
  sattn_quantize_kv_options quantize_options{};

  // merge_states: two parts of [2, 3, 4, 8].
  HostTensor o0{SATTN_DTYPE_F32, {2, 3, 4, 8}}, o1{SATTN_DTYPE_F16, {2, 3, 4, 8}};
  HostTensor l0{SATTN_DTYPE_F32, {2, 4, 3}}, l1{SATTN_DTYPE_F32, {2, 4, 3}};
  HostTensor merge_out{SATTN_DTYPE_F32, {2, 3, 4, 8}}, merge_lse{SATTN_DTYPE_F32, {2, 4, 3}};
  sattn_tensor o_views[2], lse_views[2], merge_out_view, merge_lse_view;
  int32_t num_parts = 2;

  // softmax and log_softmax: [3, 10] f16 to f16.
  HostTensor scores{SATTN_DTYPE_F16, {3, 10}}, probs_out{SATTN_DTYPE_F16, {3, 10}};
  sattn_tensor scores_view, probs_out_view;
  sattn_softmax_options softmax_options{};

  // softmax_topk: [3, 50] f32, k = 4.
  HostTensor topk_in{SATTN_DTYPE_F32, {3, 50}}, indices{SATTN_DTYPE_I32, {3, 4}};
  HostTensor topk_probs{SATTN_DTYPE_F32, {3, 4}}, topk_lse{SATTN_DTYPE_F32, {3}};
  sattn_tensor topk_in_view, indices_view, topk_probs_view, topk_lse_view;
  int32_t k = 4;

  // exp2 over 64 floats.
  std::vector<float> x = std::vector<float>(64, 1.5f), y = std::vector<float>(64, 7.0f);
  int64_t n = 64;

  // context creation and info.
  sattn_context_options options{};
  sattn_context* created = reinterpret_cast<sattn_context*>(&options);  // must become NULL
  sattn_context_info info{};

  Calls() {
    std::mt19937_64 rng(5);
    kv_src.FillUniform(rng, -1, 1);
    kv_values.FillBytes(0xA5);
    kv_scales.FillBytes(0xA5);
    kv_positions.Set({0}, 1), kv_positions.Set({1}, 3);
    kv_src_view = kv_src.view(), kv_values_view = kv_values.view();
    kv_scales_view = kv_scales.view(), kv_positions_view = kv_positions.view();
    quantize_options.struct_size = sizeof(quantize_options);
    quantize_options.positions = &kv_positions_view;
    for (HostTensor* t : {&o0, &o1, &l0, &l1, &scores, &topk_in}) t->FillUniform(rng, -1, 1);
    for (HostTensor* t : {&merge_out, &merge_lse, &probs_out, &indices, &topk_probs, &topk_lse}) {
      t->FillBytes(0xA5);
    }
    o_views[0] = o0.view(), o_views[1] = o1.view();
    lse_views[0] = l0.view(), lse_views[1] = l1.view();
    merge_out_view = merge_out.view(), merge_lse_view = merge_lse.view();
    scores_view = scores.view(), probs_out_view = probs_out.view();
    softmax_options.struct_size = sizeof(softmax_options);
    topk_in_view = topk_in.view(), indices_view = indices.view();
    topk_probs_view = topk_probs.view(), topk_lse_view = topk_lse.view();
    options.struct_size = sizeof(options);
    info.struct_size = sizeof(info);
    cu_q.Set({0}, 0), cu_q.Set({1}, 5), cu_q.Set({2}, 10);
    cu_k.Set({0}, 0), cu_k.Set({1}, 7), cu_k.Set({2}, 14);
    cu_q_view = cu_q.view(), cu_k_view = cu_k.view();
    // [2, s, h, d] contiguous is [1, 2 s, h, d] with the same strides.
    auto packed = [](sattn_tensor t) {
      t.shape[1] *= t.shape[0];
      t.shape[0] = 1;
      return t;
    };
    packed_q = packed(dense.q_view), packed_k = packed(dense.k_view);
    packed_v = packed(dense.v_view), packed_out = packed(dense.out_view);
    packed_options = dense.options;
    packed_options.mask = nullptr;
    packed_options.cu_seqlens_q = &cu_q_view;
    packed_options.cu_seqlens_k = &cu_k_view;
  }

  sattn_status Dense() { return dense.Run(ctx.get()); }
  sattn_status Paged() { return paged.Run(ctx.get()); }
  sattn_status Quantized() { return quantized.Run(ctx.get()); }
  sattn_status Packed() {
    return sattn_attention(ctx.get(), &packed_q, &packed_k, &packed_v, &packed_out, nullptr,
                           &packed_options);
  }
  sattn_status QuantizeKV() {
    return sattn_quantize_kv(ctx.get(), &kv_src_view, &kv_values_view, &kv_scales_view,
                             &quantize_options);
  }
  sattn_status Merge() {
    return sattn_merge_states(ctx.get(), num_parts, o_views, lse_views, &merge_out_view,
                              &merge_lse_view);
  }
  sattn_status Softmax() {
    return sattn_softmax(ctx.get(), &scores_view, &probs_out_view, &softmax_options);
  }
  sattn_status LogSoftmax() {
    return sattn_log_softmax(ctx.get(), &scores_view, &probs_out_view, &softmax_options);
  }
  sattn_status TopK() {
    return sattn_softmax_topk(ctx.get(), &topk_in_view, k, &indices_view, &topk_probs_view,
                              &topk_lse_view, &softmax_options);
  }
  sattn_status Exp2() { return sattn_exp2(ctx.get(), x.data(), y.data(), n); }
  sattn_status Create() { return sattn_context_create(&options, &created); }

  // Every output byte of every call, canaries included.
  std::vector<std::vector<uint8_t>> Outputs() const {
    std::vector<std::vector<uint8_t>> all;
    for (const HostTensor* t : {&dense.out, &dense.lse, &paged.out, &paged.lse, &quantized.out,
                                &quantized.lse, &kv_values, &kv_scales, &merge_out, &merge_lse,
                                &probs_out, &indices, &topk_probs, &topk_lse}) {
      all.push_back(t->bytes());
    }
    std::vector<uint8_t> y_bytes(y.size() * sizeof(float));
    std::memcpy(y_bytes.data(), y.data(), y_bytes.size());
    all.push_back(y_bytes);
    return all;
  }
};

struct Malformed {
  const char* name;
  sattn_status status;
  const char* message;  // a substring the message must contain: the argument, often its value
  std::function<sattn_status(Calls&)> call;
};

// Not a function's own allocator: the matrix only checks the pairing rule.
inline void* NoAlloc(void*, size_t, size_t) { return nullptr; }
inline void NoFree(void*, void*) {}

// The cases of sattn_attention with quantized caches and of sattn_quantize_kv.
std::vector<Malformed> QuantizedCacheMatrix();
// The cases of sattn_attention with packed batches (cu_seqlens_q, cu_seqlens_k).
std::vector<Malformed> PackedBatchMatrix();

}  // namespace testing_util
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_MALFORMED_CALL_H_
