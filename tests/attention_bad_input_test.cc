// Malformed sattn_attention calls: each returns SATTN_ERR_INVALID_ARGUMENT (or UNSUPPORTED), a
// message naming the argument, and writes nothing to out or lse.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attention_case.h"
#include "gtest/gtest.h"

namespace streamattn {
namespace {

using testing_util::AttentionCall;
using testing_util::AttentionCase;
using testing_util::ScopedContext;

struct BadCall {
  const char* name;
  sattn_status status;
  const char* message_names;  // a substring the message must contain
  std::function<void(AttentionCall&)> corrupt;
};

AttentionCase ValidCase() {
  AttentionCase c;
  c.batch = 2, c.seq_q = 5, c.seq_k = 7, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 8;
  c.alibi = true, c.sinks = true, c.mask = true, c.mask_heads = 4;
  return c;
}

std::vector<BadCall> BadCalls() {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  return {
      {"q rank", SATTN_ERR_INVALID_ARGUMENT, "q.ndim", [](AttentionCall& c) { c.q_view.ndim = 3; }},
      {"k null data", SATTN_ERR_INVALID_ARGUMENT, "k.data",
       [](AttentionCall& c) { c.k_view.data = nullptr; }},
      {"v unknown dtype", SATTN_ERR_INVALID_ARGUMENT, "v.dtype",
       [](AttentionCall& c) { c.v_view.dtype = 9; }},
      {"out integer dtype", SATTN_ERR_INVALID_ARGUMENT, "out.dtype",
       [](AttentionCall& c) { c.out_view.dtype = SATTN_DTYPE_I32; }},
      {"batch mismatch", SATTN_ERR_INVALID_ARGUMENT, "k.shape[0]=1 must equal q.shape[0]=2",
       [](AttentionCall& c) { c.k_view.shape[0] = 1; }},
      {"k and v seq mismatch", SATTN_ERR_INVALID_ARGUMENT, "v.shape[1]=6 must equal k.shape[1]=7",
       [](AttentionCall& c) { c.v_view.shape[1] = 6; }},
      {"k and v heads mismatch", SATTN_ERR_INVALID_ARGUMENT, "v.shape[2]",
       [](AttentionCall& c) { c.v_view.shape[2] = 1; }},
      {"head_dim mismatch", SATTN_ERR_INVALID_ARGUMENT, "k.shape[3]=6 must equal q.shape[3]=8",
       [](AttentionCall& c) { c.k_view.shape[3] = 6; }},
      {"heads_q not a multiple", SATTN_ERR_INVALID_ARGUMENT, "heads_kv",
       [](AttentionCall& c) {
         c.k_view.shape[2] = 3;
         c.v_view.shape[2] = 3;
       }},
      {"head_dim above 576", SATTN_ERR_INVALID_ARGUMENT, "head_dim",
       [](AttentionCall& c) {
         for (sattn_tensor* t : {&c.q_view, &c.k_view}) t->shape[3] = 577;
       }},
      {"head_dim_v above 512", SATTN_ERR_INVALID_ARGUMENT, "head_dim_v",
       [](AttentionCall& c) {
         for (sattn_tensor* t : {&c.v_view, &c.out_view}) t->shape[3] = 513;
       }},
      {"out seq mismatch", SATTN_ERR_INVALID_ARGUMENT, "out.shape[1]",
       [](AttentionCall& c) { c.out_view.shape[1] = 4; }},
      {"out head_dim differs from v", SATTN_ERR_INVALID_ARGUMENT, "out.shape[3]",
       [](AttentionCall& c) { c.out_view.shape[3] = 4; }},
      {"lse shape", SATTN_ERR_INVALID_ARGUMENT, "lse.shape[2]",
       [](AttentionCall& c) { c.lse_view.shape[2] = 4; }},
      {"lse dtype", SATTN_ERR_INVALID_ARGUMENT, "lse.dtype",
       [](AttentionCall& c) { c.lse_view.dtype = SATTN_DTYPE_F16; }},
      {"mask does not broadcast over heads", SATTN_ERR_INVALID_ARGUMENT, "mask.shape[1]",
       [](AttentionCall& c) { c.mask_view.shape[1] = 2; }},
      {"mask seq_k", SATTN_ERR_INVALID_ARGUMENT, "mask.shape[3]",
       [](AttentionCall& c) { c.mask_view.shape[3] = 6; }},
      {"mask rank", SATTN_ERR_INVALID_ARGUMENT, "mask.ndim",
       [](AttentionCall& c) { c.mask_view.ndim = 2; }},
      {"window_left below -1", SATTN_ERR_INVALID_ARGUMENT, "window_left=-2",
       [](AttentionCall& c) {
         c.options.has_window = 1;
         c.options.window_left = -2;
       }},
      {"window_right below -1", SATTN_ERR_INVALID_ARGUMENT, "window_right=-5",
       [](AttentionCall& c) {
         c.options.has_window = 1;
         c.options.window_right = -5;
       }},
      {"NaN scale", SATTN_ERR_INVALID_ARGUMENT, "scale",
       [kNaN](AttentionCall& c) { c.options.scale = kNaN; }},
      {"infinite scale", SATTN_ERR_INVALID_ARGUMENT, "scale",
       [](AttentionCall& c) { c.options.scale = INFINITY; }},
      {"negative softcap", SATTN_ERR_INVALID_ARGUMENT, "softcap",
       [](AttentionCall& c) { c.options.softcap = -1.0f; }},
      {"NaN softcap", SATTN_ERR_INVALID_ARGUMENT, "softcap",
       [kNaN](AttentionCall& c) { c.options.softcap = kNaN; }},
      {"alibi length", SATTN_ERR_INVALID_ARGUMENT, "alibi_slopes.shape[0]=3 must equal heads_q=4",
       [](AttentionCall& c) { c.alibi_view.shape[0] = 3; }},
      {"alibi NaN", SATTN_ERR_INVALID_ARGUMENT, "alibi_slopes[2]",
       [kNaN](AttentionCall& c) { c.alibi.Set({2}, kNaN); }},
      {"sinks dtype", SATTN_ERR_INVALID_ARGUMENT, "sinks.dtype",
       [](AttentionCall& c) { c.sinks_view.dtype = SATTN_DTYPE_BF16; }},
      {"options struct_size too small", SATTN_ERR_INVALID_ARGUMENT, "struct_size",
       [](AttentionCall& c) { c.options.struct_size = 8; }},
      {"out partially aliases q", SATTN_ERR_INVALID_ARGUMENT, "out overlaps q",
       [](AttentionCall& c) {
         c.out_view = c.q_view;
         c.out_view.data = static_cast<float*>(c.q_view.data) + 1;
       }},
      {"out aliases k", SATTN_ERR_INVALID_ARGUMENT, "out overlaps k",
       [](AttentionCall& c) { c.k_view.data = c.out_view.data; }},
      {"lse inside v", SATTN_ERR_INVALID_ARGUMENT, "lse overlaps v",
       [](AttentionCall& c) { c.lse_view.data = c.v_view.data; }},
      {"out overlaps itself", SATTN_ERR_INVALID_ARGUMENT, "out.strides",
       [](AttentionCall& c) { c.out_view.strides[2] = 0; }},
      {"device tensor on the cpu", SATTN_ERR_INVALID_ARGUMENT, "q.device",
       [](AttentionCall& c) { c.q_view.device = SATTN_DEVICE_CUDA; }},
      {"zero seq_k", SATTN_ERR_INVALID_ARGUMENT, "k.shape[1]",
       [](AttentionCall& c) { c.k_view.shape[1] = 0; }},
      {"byte size overflow", SATTN_ERR_INVALID_ARGUMENT, "v",
       [](AttentionCall& c) { c.v_view.strides[0] = int64_t{1} << 62; }},
  };
}

// A paged, ragged decode call: 2 sequences of pages of 4 keys, cache length 8.
AttentionCase ValidDecodeCase() {
  AttentionCase c;
  c.batch = 2, c.seq_q = 1, c.seq_k = 8, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 8;
  c.page_size = 4, c.seqused_k = {8, 3};
  return c;
}

std::vector<BadCall> BadDecodeCalls() {
  return {
      {"seqused_k above the cache length", SATTN_ERR_INVALID_ARGUMENT,
       "options->seqused_k[1]=9 must be in [0, 8]",
       [](AttentionCall& c) { c.seqused_k.Set({1}, 9); }},
      {"negative seqused_k", SATTN_ERR_INVALID_ARGUMENT, "options->seqused_k[0]=-1",
       [](AttentionCall& c) { c.seqused_k.Set({0}, -1); }},
      {"seqused_k not int32", SATTN_ERR_INVALID_ARGUMENT, "options->seqused_k.dtype",
       [](AttentionCall& c) { c.seqused_k_view.dtype = SATTN_DTYPE_F32; }},
      {"seqused_k length", SATTN_ERR_INVALID_ARGUMENT, "options->seqused_k.shape[0]",
       [](AttentionCall& c) { c.seqused_k_view.shape[0] = 1; }},
      {"block table entry past the pages", SATTN_ERR_INVALID_ARGUMENT,
       "options->block_table[0, 1]=7 must be in [0, 7)",
       [](AttentionCall& c) {
         c.block_table.Set({0, 1}, 7);
       }},
      {"negative block table entry", SATTN_ERR_INVALID_ARGUMENT, "options->block_table[1, 0]=-2",
       [](AttentionCall& c) {
         c.block_table.Set({1, 0}, -2);
       }},
      {"block table not int32", SATTN_ERR_INVALID_ARGUMENT, "options->block_table.dtype",
       [](AttentionCall& c) { c.block_table_view.dtype = SATTN_DTYPE_F16; }},
      {"block table batch", SATTN_ERR_INVALID_ARGUMENT, "options->block_table.shape[0]",
       [](AttentionCall& c) { c.block_table_view.shape[0] = 3; }},
      {"page size 0", SATTN_ERR_INVALID_ARGUMENT, "k.shape[1]=0",
       [](AttentionCall& c) { c.k_view.shape[1] = 0; }},
      {"paged k with a differently paged v", SATTN_ERR_INVALID_ARGUMENT,
       "v.shape[1]=2 must equal k.shape[1]=4", [](AttentionCall& c) { c.v_view.shape[1] = 2; }},
      {"paged k with a contiguous v", SATTN_ERR_INVALID_ARGUMENT,
       "v.shape[0]=2 must equal k.shape[0]=7",
       [](AttentionCall& c) {
         c.v_view.shape[0] = 2;
         c.v_view.shape[1] = 8;
       }},
  };
}

void ExpectRejected(sattn_context* ctx, const AttentionCase& base, const BadCall& bad) {
  AttentionCall call(base);
  bad.corrupt(call);
  const std::vector<uint8_t> out_before = call.out.bytes(), lse_before = call.lse.bytes();
  EXPECT_EQ(call.Run(ctx), bad.status) << bad.name;
  EXPECT_NE(std::string(sattn_last_error()).find(bad.message_names), std::string::npos)
      << bad.name << ": " << sattn_last_error();
  EXPECT_EQ(call.out.bytes(), out_before) << bad.name << " wrote to out";
  EXPECT_EQ(call.lse.bytes(), lse_before) << bad.name << " wrote to lse";
}

TEST(AttentionBadInputTest, MalformedDecodeCallsAreRejected) {
  ScopedContext ctx;
  for (const BadCall& bad : BadDecodeCalls()) ExpectRejected(ctx.get(), ValidDecodeCase(), bad);
  AttentionCall good(ValidDecodeCase());
  EXPECT_EQ(good.Run(ctx.get()), SATTN_OK) << sattn_last_error();
}

TEST(AttentionBadInputTest, EveryMalformedCallIsRejectedAndWritesNothing) {
  ScopedContext ctx;
  for (const BadCall& bad : BadCalls()) {
    AttentionCall call(ValidCase());
    bad.corrupt(call);
    const std::vector<uint8_t> out_before = call.out.bytes(), lse_before = call.lse.bytes();
    EXPECT_EQ(call.Run(ctx.get()), bad.status) << bad.name;
    EXPECT_NE(std::string(sattn_last_error()).find(bad.message_names), std::string::npos)
        << bad.name << ": " << sattn_last_error();
    EXPECT_EQ(call.out.bytes(), out_before) << bad.name << " wrote to out";
    EXPECT_EQ(call.lse.bytes(), lse_before) << bad.name << " wrote to lse";
  }
  AttentionCall good(ValidCase());
  EXPECT_EQ(good.Run(ctx.get()), SATTN_OK) << sattn_last_error();
}

TEST(AttentionBadInputTest, NullArguments) {
  ScopedContext ctx;
  AttentionCall c(ValidCase());
  EXPECT_EQ(
      sattn_attention(nullptr, &c.q_view, &c.k_view, &c.v_view, &c.out_view, nullptr, nullptr),
      SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("ctx"), std::string::npos);
  const sattn_tensor* views[4] = {&c.q_view, &c.k_view, &c.v_view, &c.out_view};
  const char* names[4] = {"q", "k", "v", "out"};
  for (int i = 0; i < 4; ++i) {
    const sattn_tensor* args[4] = {views[0], views[1], views[2], views[3]};
    args[i] = nullptr;
    EXPECT_EQ(sattn_attention(ctx.get(), args[0], args[1], args[2], args[3], nullptr, nullptr),
              SATTN_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(sattn_last_error()), std::string(names[i]) + " must not be NULL");
  }
  // NULL options mean the defaults.
  EXPECT_EQ(
      sattn_attention(ctx.get(), &c.q_view, &c.k_view, &c.v_view, &c.out_view, nullptr, nullptr),
      SATTN_OK);
}

}  // namespace
}  // namespace streamattn
