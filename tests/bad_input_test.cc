// Malformed calls: each returns the documented status, a message naming the argument, and
// leaves every output byte untouched.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace {

using testing_util::HostTensor;
using testing_util::ScopedContext;

// Valid arguments for sattn_merge_states, that each case corrupts in one way.
struct MergeCall {
  HostTensor o0{SATTN_DTYPE_F32, {2, 3, 4, 8}}, o1{SATTN_DTYPE_F16, {2, 3, 4, 8}};
  HostTensor l0{SATTN_DTYPE_F32, {2, 4, 3}}, l1{SATTN_DTYPE_F32, {2, 4, 3}};
  HostTensor out{SATTN_DTYPE_F32, {2, 3, 4, 8}}, lse{SATTN_DTYPE_F32, {2, 4, 3}};
  sattn_tensor o_views[2], lse_views[2], out_view, lse_view;
  int32_t num_parts = 2;
  bool pass_lse = true;

  MergeCall() {
    std::mt19937_64 rng(9);
    for (HostTensor* t : {&o0, &o1, &l0, &l1}) t->FillUniform(rng, -1, 1);
    out.FillBytes(0xCD);
    lse.FillBytes(0xCD);
    o_views[0] = o0.view();
    o_views[1] = o1.view();
    lse_views[0] = l0.view();
    lse_views[1] = l1.view();
    out_view = out.view();
    lse_view = lse.view();
  }
  sattn_status Run(sattn_context* ctx) {
    return sattn_merge_states(ctx, num_parts, o_views, lse_views, &out_view,
                              pass_lse ? &lse_view : nullptr);
  }
};

struct MergeCase {
  const char* name;
  sattn_status status;
  const char* message_names;  // a substring the message must contain
  std::function<void(MergeCall&)> corrupt;
};

std::vector<MergeCase> MergeCases() {
  const int64_t kHuge = int64_t{1} << 62;
  return {
      {"negative num_parts", SATTN_ERR_INVALID_ARGUMENT, "num_parts",
       [](MergeCall& c) { c.num_parts = -1; }},
      {"too many parts", SATTN_ERR_INVALID_ARGUMENT, "num_parts",
       [](MergeCall& c) { c.num_parts = std::numeric_limits<int32_t>::max(); }},
      {"null data in a part", SATTN_ERR_INVALID_ARGUMENT, "o_parts[1].data",
       [](MergeCall& c) { c.o_views[1].data = nullptr; }},
      {"unknown dtype", SATTN_ERR_INVALID_ARGUMENT, "o_parts[0].dtype",
       [](MergeCall& c) { c.o_views[0].dtype = 7; }},
      {"integer dtype for values", SATTN_ERR_INVALID_ARGUMENT, "o_parts[1].dtype=i32",
       [](MergeCall& c) { c.o_views[1].dtype = SATTN_DTYPE_I32; }},
      {"unknown device", SATTN_ERR_INVALID_ARGUMENT, "out.device",
       [](MergeCall& c) { c.out_view.device = 5; }},
      {"device tensor on a cpu context", SATTN_ERR_INVALID_ARGUMENT, "o_parts[1].device",
       [](MergeCall& c) { c.o_views[1].device = SATTN_DEVICE_CUDA; }},
      {"wrong rank", SATTN_ERR_INVALID_ARGUMENT, "out.ndim",
       [](MergeCall& c) { c.out_view.ndim = 3; }},
      {"rank above 4", SATTN_ERR_INVALID_ARGUMENT, "lse_parts[0].ndim",
       [](MergeCall& c) { c.lse_views[0].ndim = 9; }},
      {"zero extent", SATTN_ERR_INVALID_ARGUMENT, "out.shape[2]",
       [](MergeCall& c) { c.out_view.shape[2] = 0; }},
      {"negative extent", SATTN_ERR_INVALID_ARGUMENT, "o_parts[0].shape[0]",
       [](MergeCall& c) { c.o_views[0].shape[0] = -2; }},
      {"head_dim mismatch", SATTN_ERR_INVALID_ARGUMENT,
       "o_parts[0].shape[3]=8 must equal out.shape[3]=4",
       [](MergeCall& c) { c.out_view.shape[3] = 4; }},
      {"seq mismatch in lse", SATTN_ERR_INVALID_ARGUMENT, "lse_parts[1].shape[2]",
       [](MergeCall& c) { c.lse_views[1].shape[2] = 2; }},
      {"lse not f32", SATTN_ERR_INVALID_ARGUMENT, "lse_parts[0].dtype",
       [](MergeCall& c) { c.lse_views[0].dtype = SATTN_DTYPE_F16; }},
      {"lse_out not f32", SATTN_ERR_INVALID_ARGUMENT, "lse_out.dtype",
       [](MergeCall& c) { c.lse_view.dtype = SATTN_DTYPE_BF16; }},
      {"byte count overflows", SATTN_ERR_INVALID_ARGUMENT, "o_parts[0]",
       [kHuge](MergeCall& c) {
         c.o_views[0].shape[0] = 4;
         c.o_views[0].strides[0] = kHuge;
       }},
      {"element count overflows", SATTN_ERR_INVALID_ARGUMENT, "out",
       [kHuge](MergeCall& c) {
         c.out_view.shape[0] = kHuge;
         c.out_view.shape[1] = kHuge;
       }},
      {"output overlaps itself", SATTN_ERR_INVALID_ARGUMENT, "out.strides[1]",
       [](MergeCall& c) { c.out_view.strides[1] = 0; }},
      {"out partially aliases a part", SATTN_ERR_INVALID_ARGUMENT, "o_parts[0]",
       [](MergeCall& c) {
         c.out_view = c.o_views[0];
         c.out_view.data = static_cast<float*>(c.out_view.data) + 1;
       }},
      {"an lse part lies inside out", SATTN_ERR_INVALID_ARGUMENT, "lse_parts[1]",
       [](MergeCall& c) { c.lse_views[1].data = c.out_view.data; }},
      {"lse_out aliases out", SATTN_ERR_INVALID_ARGUMENT, "lse_out",
       [](MergeCall& c) { c.lse_view.data = c.out_view.data; }},
      {"strides wrap the address space", SATTN_ERR_INVALID_ARGUMENT, "o_parts[1]",
       [kHuge](MergeCall& c) {
         c.o_views[1].shape[1] = 3;
         c.o_views[1].strides[1] = -kHuge / 2;
       }},
  };
}

TEST(BadInputTest, MergeStates) {
  ScopedContext ctx;
  for (const MergeCase& bad : MergeCases()) {
    MergeCall call;
    bad.corrupt(call);
    const std::vector<uint8_t> out_before = call.out.bytes(), lse_before = call.lse.bytes();
    EXPECT_EQ(call.Run(ctx.get()), bad.status) << bad.name;
    EXPECT_NE(std::string(sattn_last_error()).find(bad.message_names), std::string::npos)
        << bad.name << ": " << sattn_last_error();
    EXPECT_EQ(call.out.bytes(), out_before) << bad.name << " wrote to out";
    EXPECT_EQ(call.lse.bytes(), lse_before) << bad.name << " wrote to lse";
  }
  // The unmodified call works, so the cases above failed for the reason they name.
  MergeCall good;
  EXPECT_EQ(good.Run(ctx.get()), SATTN_OK) << sattn_last_error();
}

TEST(BadInputTest, MergeStatesNullArguments) {
  ScopedContext ctx;
  MergeCall call;
  EXPECT_EQ(sattn_merge_states(nullptr, 2, call.o_views, call.lse_views, &call.out_view, nullptr),
            SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("ctx"), std::string::npos);
  EXPECT_EQ(sattn_merge_states(ctx.get(), 2, nullptr, call.lse_views, &call.out_view, nullptr),
            SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("o_parts"), std::string::npos);
  EXPECT_EQ(sattn_merge_states(ctx.get(), 2, call.o_views, nullptr, &call.out_view, nullptr),
            SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("lse_parts"), std::string::npos);
  EXPECT_EQ(sattn_merge_states(ctx.get(), 2, call.o_views, call.lse_views, nullptr, nullptr),
            SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("out"), std::string::npos);
}

TEST(BadInputTest, Exp2) {
  ScopedContext ctx;
  std::vector<float> x(64, 1.0f), y(64, 5.0f);
  EXPECT_EQ(sattn_exp2(nullptr, x.data(), y.data(), 64), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sattn_exp2(ctx.get(), nullptr, y.data(), 64), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("x"), std::string::npos);
  EXPECT_EQ(sattn_exp2(ctx.get(), x.data(), nullptr, 64), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sattn_exp2(ctx.get(), x.data(), y.data(), -1), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("n=-1"), std::string::npos);
  EXPECT_EQ(sattn_exp2(ctx.get(), x.data(), x.data() + 1, 32), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("overlaps"), std::string::npos);
  EXPECT_EQ(sattn_exp2(ctx.get(), x.data(), y.data(), std::numeric_limits<int64_t>::max()),
            SATTN_ERR_INVALID_ARGUMENT);
  for (float v : y) EXPECT_EQ(v, 5.0f);
  // In place and empty are fine.
  EXPECT_EQ(sattn_exp2(ctx.get(), x.data(), x.data(), 64), SATTN_OK);
  EXPECT_EQ(x[63], 2.0f);
  EXPECT_EQ(sattn_exp2(ctx.get(), nullptr, nullptr, 0), SATTN_OK);
}

TEST(BadInputTest, ContextOptions) {
  sattn_context* ctx = nullptr;
  sattn_context_options options{};
  // struct_size smaller than the first version's.
  options.struct_size = 4;
  EXPECT_EQ(sattn_context_create(&options, &ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("struct_size"), std::string::npos);
  EXPECT_EQ(ctx, nullptr);
  options.struct_size = sizeof(options);
  options.num_threads = -3;
  EXPECT_EQ(sattn_context_create(&options, &ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("num_threads=-3"), std::string::npos);
  options.num_threads = 0;
  options.backend = 42;
  EXPECT_EQ(sattn_context_create(&options, &ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("backend=42"), std::string::npos);
  EXPECT_EQ(sattn_context_create(&options, nullptr), SATTN_ERR_INVALID_ARGUMENT);

  ScopedContext good;
  sattn_context_info info{};
  info.struct_size = 3;
  EXPECT_EQ(sattn_context_get_info(good.get(), &info), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("struct_size"), std::string::npos);
  EXPECT_EQ(sattn_context_get_info(good.get(), nullptr), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sattn_context_get_info(nullptr, &info), SATTN_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace streamattn
