// One sattn_attention call described as data, run through the C API and judged by the oracle.
// Shared by the flash forward tests (shapes, dtypes, layouts, every option, adversarial data).
#ifndef STREAMATTN_TESTS_ATTENTION_CASE_H_
#define STREAMATTN_TESTS_ATTENTION_CASE_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/reference_attention.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace testing_util {

struct AttentionCase {
  int64_t batch = 1, seq_q = 1, seq_k = 1, heads_q = 1, heads_kv = 1, head_dim = 16;
  int64_t head_dim_v = 0;  // 0: head_dim
  sattn_dtype q_dtype = SATTN_DTYPE_F32, kv_dtype = SATTN_DTYPE_F32, out_dtype = SATTN_DTYPE_F32;
  std::vector<int> q_order, kv_order, out_order;  // storage orders (HostTensor); empty = BSHD
  double value_lo = -1.0, value_hi = 1.0;         // uniform inputs
  // Options (the C struct is built from these).
  float scale = 0.0f;
  bool causal = false;
  bool has_window = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool alibi = false, sinks = false, mask = false;
  int64_t mask_batch = 1, mask_heads = 1;  // 1 broadcasts
  double mask_hide_fraction = 0.0;         // share of mask entries that are -inf
  bool with_lse = true;
  bool f32_pv = false;             // sattn_attention_options.f32_pv
  bool int8_queries = false;       // sattn_attention_options.int8_queries
  std::vector<int64_t> seqused_k;  // per sequence; empty: every sequence has seq_k keys
  int64_t page_size = 0;           // > 0: a paged cache of seq_k / page_size pages per sequence
  // Quantized caches: k (v) stored in this format (SATTN_DTYPE_I8, FP8_E4M3 or I4; 0: kv_dtype)
  // with random values and scales, compared with the oracle on the values they stand for.
  sattn_dtype k_format = static_cast<sattn_dtype>(0), v_format = static_cast<sattn_dtype>(0);
  int64_t k_group = 0, v_group = 0;           // channels per scale (I8, I4); 0: a whole row
  sattn_dtype scale_dtype = SATTN_DTYPE_F32;  // of I8 and I4 group scales
  std::vector<int> scales_order;              // their storage order; empty: kv_order's
  bool fp8_per_tensor = false;                // FP8: one scale for the tensor, not one a kv head
  // v is a view of k's own leading head_dim_v channels (MLA's latent cache: one buffer, K rows
  // of 576 channels, V their first 512), its scales likewise a view of k's (v_format and
  // v_group must then be k's, or v_group 0 with k_group 0: one scale a row).
  bool v_in_k = false;
  bool v_copies_k = false;  // v holds a copy of k's leading channels in its own buffer
  uint64_t seed = 1;

  bool Quantized() const { return k_format != 0 || v_format != 0; }

  std::string Describe() const;
};

// Inputs, outputs and options of a case, kept alive for the call.
// A paged cache (AttentionCase::page_size > 0) stores k and v as
// [num_pages, page_size, heads_kv, dim] with shuffled pages; pages no sequence uses hold NaN.
struct AttentionCall {
  HostTensor q, k, v, out, lse, alibi, sinks, mask, seqused_k, block_table;
  HostTensor k_scales, v_scales;  // quantized k, v only
  sattn_attention_options options{};
  sattn_tensor q_view, k_view, v_view, out_view, lse_view, alibi_view, sinks_view, mask_view,
      seqused_k_view, block_table_view, k_scales_view, v_scales_view;

  explicit AttentionCall(const AttentionCase& c);
  sattn_status Run(sattn_context* ctx) const;
  reference::AttentionSpec Spec(const AttentionCase& c) const;
  // k or v (or their group scales) as the oracle sees them: [batch, seq_k, heads_kv, dim],
  // gathered from pages.
  Array LogicalKeys(const AttentionCase& c, const HostTensor& t) const;
  // The values of k or v the oracle computes with: LogicalKeys, dequantized where quantized.
  Array KeyValues(const AttentionCase& c, const HostTensor& t) const;

 private:
  bool with_lse_ = true;
};

struct AttentionErrors {
  double out = 0.0;  // MaxRelativeError of out against the oracle
  double lse = 0.0;  // max |lse - oracle| over finite entries (inf entries must match exactly)
};

// Runs the case through the C API and compares with the oracle on the values actually stored
// (CompareWithOracle alone serves tests that plant adversarial values in a call first).
AttentionErrors RunAgainstOracle(sattn_context* ctx, const AttentionCase& c);
AttentionErrors CompareWithOracle(const AttentionCase& c, const AttentionCall& call);

// The tolerance for out: f32 accumulation (1e-5 of the largest |out|) plus out's own rounding,
// and where a native CPU kernel runs (q, k and v all bf16 or all f16), its rounding of P.
double OutTolerance(const AttentionCase& c);

// Whether a context created now (at the SIMD target the test runs, STREAMATTN_CPU_KERNEL
// applying) multiplies prefill of q, k and v of `dtype` natively, rounding P to it.
bool NativePrefill(sattn_dtype dtype);

// Runs the case and expects out within OutTolerance and lse within 2e-5 of the oracle.
void ExpectMatchesOracle(sattn_context* ctx, const AttentionCase& c);

// The bytes of out and lse after running the case on a context with `threads` threads.
std::vector<uint8_t> OutputBytes(const AttentionCase& c, int threads);

}  // namespace testing_util
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_ATTENTION_CASE_H_
