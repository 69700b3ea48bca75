// The malformed-call matrix: one table of broken calls across every entry point of the C ABI
// (contexts, info, exp2, attention dense and paged, merge_states, softmax, log_softmax,
// softmax_topk; quantized caches and sattn_quantize_kv in malformed_quantized_call.cc). Each breaks
// one thing in an otherwise valid call and must return the documented status, a message naming the
// argument, and leave every output of every call untouched (all are canary-filled, so a stray write
// anywhere shows up).
#include "malformed_call.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace {

using testing_util::AttentionCall;
using testing_util::AttentionCase;
using testing_util::Calls;
using testing_util::HostTensor;
using testing_util::kHuge;
using testing_util::Malformed;
using testing_util::NoAlloc;
using testing_util::NoFree;
using testing_util::ScopedContext;

constexpr float kNaN = testing_util::kNaNf;

std::vector<Malformed> Matrix() {
  const sattn_status kInvalid = SATTN_ERR_INVALID_ARGUMENT;
  return {
      // ---- contexts and info
      {"create: NULL output pointer", kInvalid, "ctx (the output pointer)",
       [](Calls& c) { return sattn_context_create(&c.options, nullptr); }},
      {"create: struct_size below the first version", kInvalid, "options->struct_size=4",
       [](Calls& c) {
         c.options.struct_size = 4;
         return c.Create();
       }},
      {"create: struct_size cutting the allocator", kInvalid, "options->struct_size=20",
       [](Calls& c) {
         c.options.struct_size = 20;
         return c.Create();
       }},
      {"create: negative num_threads", kInvalid, "options->num_threads=-1",
       [](Calls& c) {
         c.options.num_threads = -1;
         return c.Create();
       }},
      {"create: num_threads past the limit", kInvalid, "options->num_threads=5000",
       [](Calls& c) {
         c.options.num_threads = 5000;
         return c.Create();
       }},
      {"create: unknown backend", kInvalid, "options->backend=7",
       [](Calls& c) {
         c.options.backend = 7;
         return c.Create();
       }},
      {"create: cpu_kernel past the last", kInvalid, "options->cpu_kernel=5",
       [](Calls& c) {
         c.options.cpu_kernel = SATTN_CPU_KERNEL_NEON_FP16 + 1;
         return c.Create();
       }},
      {"create: negative cpu_kernel", kInvalid, "options->cpu_kernel=-1",
       [](Calls& c) {
         c.options.cpu_kernel = -1;
         return c.Create();
       }},
      {"create: cuda without a plugin", SATTN_ERR_BACKEND_UNAVAILABLE, "options->backend=cuda",
       [](Calls& c) {
         c.options.backend = SATTN_BACKEND_CUDA;
         return c.Create();
       }},
      {"create: alloc_fn without free_fn", kInvalid, "options->alloc_fn (set)",
       [](Calls& c) {
         c.options.alloc_fn = NoAlloc;
         return c.Create();
       }},
      {"create: free_fn without alloc_fn", kInvalid, "options->free_fn (set)",
       [](Calls& c) {
         c.options.free_fn = NoFree;
         return c.Create();
       }},
      {"create: runner_data without a runner", kInvalid, "options->runner is NULL",
       [](Calls& c) {
         c.options.runner_data = &c;
         return c.Create();
       }},
      {"create: a newer struct setting an unknown field", SATTN_ERR_UNSUPPORTED, "options sets",
       [](Calls& c) {
         struct Newer {
           sattn_context_options base;
           int64_t future;
         } newer{};
         newer.base.struct_size = sizeof(newer);
         newer.future = 3;
         return sattn_context_create(&newer.base, &c.created);
       }},
      {"info: NULL context", kInvalid, "ctx must not be NULL",
       [](Calls& c) { return sattn_context_get_info(nullptr, &c.info); }},
      {"info: NULL info", kInvalid, "info must not be NULL",
       [](Calls& c) { return sattn_context_get_info(c.ctx.get(), nullptr); }},
      {"info: struct_size too small", kInvalid, "info->struct_size=8",
       [](Calls& c) {
         c.info.struct_size = 8;
         return sattn_context_get_info(c.ctx.get(), &c.info);
       }},
      // ---- exp2
      {"exp2: NULL context", kInvalid, "ctx must not be NULL",
       [](Calls& c) { return sattn_exp2(nullptr, c.x.data(), c.y.data(), c.n); }},
      {"exp2: NULL x", kInvalid, "x must not be NULL",
       [](Calls& c) { return sattn_exp2(c.ctx.get(), nullptr, c.y.data(), c.n); }},
      {"exp2: negative n", kInvalid, "n=-5",
       [](Calls& c) {
         c.n = -5;
         return c.Exp2();
       }},
      {"exp2: y overlaps x by one element", kInvalid, "y overlaps x",
       [](Calls& c) { return sattn_exp2(c.ctx.get(), c.x.data(), c.x.data() + 1, 32); }},
      {"exp2: n past the address space", kInvalid, "do not fit in the address space",
       [](Calls& c) {
         c.n = std::numeric_limits<int64_t>::max();
         return c.Exp2();
       }},
      // ---- attention: null pointers, dtypes, devices, ranks
      {"attention: NULL context", kInvalid, "ctx must not be NULL",
       [](Calls& c) { return c.dense.Run(nullptr); }},
      {"attention: NULL q", kInvalid, "q must not be NULL",
       [](Calls& c) {
         const AttentionCall& a = c.dense;
         return sattn_attention(c.ctx.get(), nullptr, &a.k_view, &a.v_view, &a.out_view,
                                &a.lse_view, &a.options);
       }},
      {"attention: NULL k data", kInvalid, "k.data must not be NULL",
       [](Calls& c) {
         c.dense.k_view.data = nullptr;
         return c.Dense();
       }},
      {"attention: unknown v dtype", kInvalid, "v.dtype=9",
       [](Calls& c) {
         c.dense.v_view.dtype = 9;
         return c.Dense();
       }},
      {"attention: integer out", kInvalid, "out.dtype=i32",
       [](Calls& c) {
         c.dense.out_view.dtype = SATTN_DTYPE_I32;
         return c.Dense();
       }},
      {"attention: q rank 3", kInvalid, "q.ndim=3 must be 4",
       [](Calls& c) {
         c.dense.q_view.ndim = 3;
         return c.Dense();
       }},
      {"attention: k on a cuda device (mixed devices)", kInvalid, "k.device=cuda",
       [](Calls& c) {
         c.dense.k_view.device = SATTN_DEVICE_CUDA;
         return c.Dense();
       }},
      {"attention: unknown device", kInvalid, "v.device=3",
       [](Calls& c) {
         c.dense.v_view.device = 3;
         return c.Dense();
       }},
      {"attention: negative device_index", kInvalid, "out.device_index=-1",
       [](Calls& c) {
         c.dense.out_view.device_index = -1;
         return c.Dense();
       }},
      // ---- attention: each shape relation
      {"attention: batch of k", kInvalid, "k.shape[0]=1 must equal q.shape[0]=2",
       [](Calls& c) {
         c.dense.k_view.shape[0] = 1;
         return c.Dense();
       }},
      {"attention: seq_k of v", kInvalid, "v.shape[1]=6 must equal k.shape[1]=7",
       [](Calls& c) {
         c.dense.v_view.shape[1] = 6;
         return c.Dense();
       }},
      {"attention: heads_kv of v", kInvalid, "v.shape[2]=1 must equal k.shape[2]=2",
       [](Calls& c) {
         c.dense.v_view.shape[2] = 1;
         return c.Dense();
       }},
      {"attention: head_dim of k", kInvalid, "k.shape[3]=6 must equal q.shape[3]=8",
       [](Calls& c) {
         c.dense.k_view.shape[3] = 6;
         return c.Dense();
       }},
      {"attention: heads_q not a multiple of heads_kv", kInvalid, "must be a multiple of",
       [](Calls& c) {
         c.dense.k_view.shape[2] = 3;
         c.dense.v_view.shape[2] = 3;
         return c.Dense();
       }},
      {"attention: head_dim above 576", kInvalid, "q.shape[3]=577 (head_dim) must be <= 576",
       [](Calls& c) {
         c.dense.q_view.shape[3] = 577;
         c.dense.k_view.shape[3] = 577;
         return c.Dense();
       }},
      // MLA's widths (576 scored, 512 of V) are the limits; V one channel wider is refused by
      // name before anything is read or written.
      {"attention: head_dim_v above 512", kInvalid, "v.shape[3]=513 (head_dim_v) must be <= 512",
       [](Calls& c) {
         c.dense.v_view.shape[3] = 513;
         c.dense.out_view.shape[3] = 513;
         return c.Dense();
       }},
      {"attention: seq_q of out", kInvalid, "out.shape[1]=4 must equal q.shape[1]=5",
       [](Calls& c) {
         c.dense.out_view.shape[1] = 4;
         return c.Dense();
       }},
      {"attention: head_dim_v of out", kInvalid, "out.shape[3]=4 must equal v.shape[3]=8",
       [](Calls& c) {
         c.dense.out_view.shape[3] = 4;
         return c.Dense();
       }},
      {"attention: lse seq", kInvalid, "lse.shape[2]=4 must equal q.shape[1]=5",
       [](Calls& c) {
         c.dense.lse_view.shape[2] = 4;
         return c.Dense();
       }},
      {"attention: f16 lse", kInvalid, "lse.dtype=f16 must be f32",
       [](Calls& c) {
         c.dense.lse_view.dtype = SATTN_DTYPE_F16;
         return c.Dense();
       }},
      {"attention: zero seq_k", kInvalid, "k.shape[1]=0 must be >= 1",
       [](Calls& c) {
         c.dense.k_view.shape[1] = 0;
         return c.Dense();
       }},
      // ---- attention: sizes that overflow, strides it cannot take
      {"attention: element count overflows int64", kInvalid, "q has more elements than int64",
       [](Calls& c) {
         c.dense.q_view.shape[0] = kHuge;
         c.dense.q_view.shape[1] = kHuge;
         return c.Dense();
       }},
      {"attention: byte span overflows int64", kInvalid, "v spans more bytes than int64",
       [](Calls& c) {
         c.dense.v_view.strides[0] = kHuge;
         return c.Dense();
       }},
      // Found by fuzz_softmax: the lowest offset overflowed before the span was checked.
      {"attention: negative byte span overflows int64", kInvalid, "v spans more bytes than int64",
       [](Calls& c) {
         c.dense.v_view.strides[0] = -kHuge;
         c.dense.v_view.shape[0] = 240;
         return c.Dense();
       }},
      {"attention: negative stride wrapping the address space", kInvalid,
       "k: its negative strides or extent wrap around",
       [](Calls& c) {
         c.dense.k_view.strides[1] = -(int64_t{1} << 45);  // 6 keys x 2^47 bytes below data
         return c.Dense();
       }},
      {"attention: stride INT64_MIN", kInvalid, "q.strides[2] is out of range",
       [](Calls& c) {
         c.dense.q_view.strides[2] = std::numeric_limits<int64_t>::min();
         return c.Dense();
       }},
      {"attention: output broadcast over heads (stride 0)", kInvalid,
       "out.strides[2]=0 makes the output overlap itself",
       [](Calls& c) {
         c.dense.out_view.strides[2] = 0;
         return c.Dense();
       }},
      {"attention: negative lse stride overlapping itself", kInvalid, "lse.strides[1]=-2",
       [](Calls& c) {
         c.dense.lse_view.strides[1] = -2;
         return c.Dense();
       }},
      // ---- attention: aliasing
      {"attention: out one element into q", kInvalid, "out overlaps q",
       [](Calls& c) {
         c.dense.out_view = c.dense.q_view;
         c.dense.out_view.data = static_cast<float*>(c.dense.q_view.data) + 1;
         return c.Dense();
       }},
      {"attention: lse inside k", kInvalid, "lse overlaps k",
       [](Calls& c) {
         c.dense.lse_view.data = c.dense.k_view.data;
         return c.Dense();
       }},
      {"attention: out inside the mask", kInvalid, "out overlaps options->mask",
       [](Calls& c) {
         c.dense.mask_view.data = c.dense.out_view.data;
         return c.Dense();
       }},
      // ---- attention: options
      {"attention: options struct_size 8", kInvalid, "options->struct_size=8",
       [](Calls& c) {
         c.dense.options.struct_size = 8;
         return c.Dense();
       }},
      {"attention: NaN scale", kInvalid, "options->scale=nan",
       [](Calls& c) {
         c.dense.options.scale = kNaN;
         return c.Dense();
       }},
      {"attention: negative softcap", kInvalid, "options->softcap=-1",
       [](Calls& c) {
         c.dense.options.softcap = -1.0f;
         return c.Dense();
       }},
      {"attention: window_left below -1", kInvalid, "options->window_left=-2",
       [](Calls& c) {
         c.dense.options.has_window = 1;
         c.dense.options.window_left = -2;
         return c.Dense();
       }},
      {"attention: NaN ALiBi slope", kInvalid, "options->alibi_slopes[2]=nan",
       [](Calls& c) {
         c.dense.alibi.Set({2}, NAN);
         return c.Dense();
       }},
      {"attention: +inf sink", kInvalid, "options->sinks[1]=inf",
       [](Calls& c) {
         c.dense.sinks.Set({1}, INFINITY);
         return c.Dense();
       }},
      {"attention: mask broadcast over kv heads only", kInvalid, "mask.shape[1]=2",
       [](Calls& c) {
         c.dense.mask_view.shape[1] = 2;
         return c.Dense();
       }},
      // ---- attention: ragged and paged caches
      {"attention: seqused_k past the cache", kInvalid, "options->seqused_k[1]=9 must be in [0, 8]",
       [](Calls& c) {
         c.paged.seqused_k.Set({1}, 9);
         return c.Paged();
       }},
      {"attention: float seqused_k", kInvalid, "options->seqused_k.dtype=f32 must be i32",
       [](Calls& c) {
         c.paged.seqused_k_view.dtype = SATTN_DTYPE_F32;
         return c.Paged();
       }},
      {"attention: block table entry past the pages", kInvalid,
       "options->block_table[0, 1]=7 must be in [0, 7)",
       [](Calls& c) {
         c.paged.block_table.Set({0, 1}, 7);
         return c.Paged();
       }},
      {"attention: negative block table entry", kInvalid, "options->block_table[1, 0]=-2",
       [](Calls& c) {
         c.paged.block_table.Set({1, 0}, -2);
         return c.Paged();
       }},
      {"attention: block table batch", kInvalid, "options->block_table.shape[0]=3",
       [](Calls& c) {
         c.paged.block_table_view.shape[0] = 3;
         return c.Paged();
       }},
      {"attention: block table pages x page size overflows", kInvalid,
       "options->block_table.shape[1] x page_size overflows",
       [](Calls& c) {
         c.paged.block_table_view.shape[1] = int64_t{1} << 61;  // 2^61 pages of 4 keys
         c.paged.block_table_view.strides[1] = 0;
         c.paged.block_table_view.strides[0] = 0;
         return c.Paged();
       }},
      {"attention: v paged differently from k", kInvalid, "v.shape[1]=2 must equal k.shape[1]=4",
       [](Calls& c) {
         c.paged.v_view.shape[1] = 2;
         return c.Paged();
       }},
      // ---- merge_states
      {"merge: negative num_parts", kInvalid, "num_parts=-1",
       [](Calls& c) {
         c.num_parts = -1;
         return c.Merge();
       }},
      {"merge: NULL o_parts", kInvalid, "o_parts must not be NULL",
       [](Calls& c) {
         return sattn_merge_states(c.ctx.get(), 2, nullptr, c.lse_views, &c.merge_out_view,
                                   nullptr);
       }},
      {"merge: integer part", kInvalid, "o_parts[1].dtype=i32",
       [](Calls& c) {
         c.o_views[1].dtype = SATTN_DTYPE_I32;
         return c.Merge();
       }},
      {"merge: lse part seq", kInvalid, "lse_parts[1].shape[2]=2 must equal out.shape[1]=3",
       [](Calls& c) {
         c.lse_views[1].shape[2] = 2;
         return c.Merge();
       }},
      {"merge: out one element into a part", kInvalid, "out overlaps o_parts[0]",
       [](Calls& c) {
         c.merge_out_view = c.o_views[0];
         c.merge_out_view.data = static_cast<float*>(c.merge_out_view.data) + 1;
         return c.Merge();
       }},
      {"merge: lse_out on out", kInvalid, "lse_out overlaps out",
       [](Calls& c) {
         c.merge_lse_view.data = c.merge_out_view.data;
         return c.Merge();
       }},
      // ---- softmax and log_softmax
      {"softmax: NULL in", kInvalid, "in must not be NULL",
       [](Calls& c) {
         return sattn_softmax(c.ctx.get(), nullptr, &c.probs_out_view, &c.softmax_options);
       }},
      {"softmax: rank 3", kInvalid, "in.ndim=3",
       [](Calls& c) {
         c.scores_view.ndim = 3;
         return c.Softmax();
       }},
      {"softmax: out neither f32 nor in's dtype", kInvalid, "out.dtype=bf16",
       [](Calls& c) {
         c.probs_out_view.dtype = SATTN_DTYPE_BF16;
         return c.Softmax();
       }},
      {"softmax: out row length", kInvalid, "out.shape[1]=9",
       [](Calls& c) {
         c.probs_out_view.shape[1] = 9;
         return c.Softmax();
       }},
      {"softmax: negative temperature", kInvalid, "options->temperature=-1",
       [](Calls& c) {
         c.softmax_options.temperature = -1.0f;
         return c.Softmax();
       }},
      {"log_softmax: subnormal temperature", kInvalid, "must be finite and at least",
       [](Calls& c) {
         c.softmax_options.temperature = 1e-40f;
         return c.LogSoftmax();
       }},
      {"log_softmax: out shifted by one score", kInvalid, "out overlaps in",
       [](Calls& c) {
         c.probs_out_view = c.scores_view;
         c.probs_out_view.data = static_cast<uint16_t*>(c.scores_view.data) + 1;
         return c.LogSoftmax();
       }},
      {"log_softmax: options struct_size 2", kInvalid, "options->struct_size=2",
       [](Calls& c) {
         c.softmax_options.struct_size = 2;
         return c.LogSoftmax();
       }},
      // ---- softmax_topk
      {"topk: k = 0", kInvalid, "k=0 must be in [1, n]",
       [](Calls& c) {
         c.k = 0;
         return c.TopK();
       }},
      {"topk: k above n", kInvalid, "k=51 must be in [1, n]",
       [](Calls& c) {
         c.k = 51;
         return c.TopK();
       }},
      {"topk: k above 1024", SATTN_ERR_UNSUPPORTED, "k=2000",
       [](Calls& c) {
         static HostTensor wide(SATTN_DTYPE_F32, {1, 4000});
         sattn_tensor in = wide.view();
         return sattn_softmax_topk(c.ctx.get(), &in, 2000, &c.indices_view, &c.topk_probs_view,
                                   nullptr, nullptr);
       }},
      {"topk: rows of 2^31 scores", kInvalid, "in.shape[1]=2147483648 must be < 2^31",
       [](Calls& c) {
         c.topk_in_view.shape[1] = int64_t{1} << 31;
         c.topk_in_view.strides[1] = 0;
         return c.TopK();
       }},
      {"topk: float indices", kInvalid, "indices.dtype=f32 must be i32",
       [](Calls& c) {
         c.indices_view.dtype = SATTN_DTYPE_F32;
         return c.TopK();
       }},
      {"topk: probs row length", kInvalid, "probs.shape[1]=5 must equal k=4",
       [](Calls& c) {
         c.topk_probs_view.shape[1] = 5;
         return c.TopK();
       }},
      {"topk: lse length", kInvalid, "lse.shape[0]=2 must equal the number of rows, 3",
       [](Calls& c) {
         c.topk_lse_view.shape[0] = 2;
         return c.TopK();
       }},
      {"topk: probs on indices", kInvalid, "probs overlaps indices",
       [](Calls& c) {
         c.topk_probs_view.data = c.indices_view.data;
         return c.TopK();
       }},
  };
}

TEST(MalformedCallTest, EveryEntryPointRejectsEachBrokenArgumentAndWritesNothing) {
  std::vector<Malformed> matrix = Matrix();
  for (Malformed& m : testing_util::QuantizedCacheMatrix()) matrix.push_back(std::move(m));
  for (Malformed& m : testing_util::PackedBatchMatrix()) matrix.push_back(std::move(m));
  std::set<std::string> names;
  for (const Malformed& m : matrix) {
    SCOPED_TRACE(m.name);
    EXPECT_TRUE(names.insert(m.name).second) << "duplicate case";
    Calls calls;
    const std::vector<std::vector<uint8_t>> before = calls.Outputs();
    EXPECT_EQ(m.call(calls), m.status) << sattn_last_error();
    const std::string message = sattn_last_error();
    EXPECT_NE(message.find(m.message), std::string::npos)
        << "message \"" << message << "\" does not name \"" << m.message << "\"";
    EXPECT_EQ(calls.Outputs(), before) << "an output was written";
    // A failed create sets *ctx to NULL and creates nothing.
    EXPECT_TRUE(calls.created == nullptr ||
                calls.created == reinterpret_cast<sattn_context*>(&calls.options));
  }
  std::printf("malformed-call matrix: %zu cases\n", matrix.size());
  EXPECT_GE(matrix.size(), 40u);
}

// The unbroken calls succeed, so each case above failed for the reason it names.
TEST(MalformedCallTest, TheUnbrokenCallsSucceed) {
  Calls c;
  EXPECT_EQ(c.Create(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(sattn_context_destroy(c.created), SATTN_OK);
  EXPECT_EQ(sattn_context_get_info(c.ctx.get(), &c.info), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.Exp2(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.Dense(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.Paged(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.Quantized(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.Packed(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.QuantizeKV(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.Merge(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.Softmax(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.LogSoftmax(), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(c.TopK(), SATTN_OK) << sattn_last_error();
}

}  // namespace
}  // namespace streamattn
