// Contexts, options structs, backend choice, version and error reporting through the C API.
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace {

TEST(VersionTest, MatchesHeader) {
  const std::string want = std::to_string(SATTN_VERSION_MAJOR) + "." +
                           std::to_string(SATTN_VERSION_MINOR) + "." +
                           std::to_string(SATTN_VERSION_PATCH);
  EXPECT_EQ(want, sattn_version());
}

TEST(StatusTest, EveryStatusHasAName) {
  for (int s = SATTN_OK; s <= SATTN_ERR_RUNNER_FAILED; ++s) {
    EXPECT_STRNE(sattn_status_string(static_cast<sattn_status>(s)), "unknown status");
  }
  EXPECT_STREQ(sattn_status_string(static_cast<sattn_status>(999)), "unknown status");
}

TEST(ContextTest, DefaultsAndInfo) {
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(nullptr, &ctx), SATTN_OK) << sattn_last_error();
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK);
  EXPECT_EQ(info.backend, SATTN_BACKEND_CPU);
  EXPECT_EQ(info.num_threads, streamattn::testing_util::BuiltInThreads());
  EXPECT_GT(std::strlen(info.simd_target), 0u);
  EXPECT_NE(std::string(info.compiled_targets).find(info.simd_target), std::string::npos)
      << info.simd_target << " not in " << info.compiled_targets;
  EXPECT_EQ(std::string(info.cuda_availability).rfind("unavailable", 0), 0u);
  EXPECT_GT(std::strlen(info.backend_reason), 0u);
  EXPECT_EQ(sattn_context_destroy(ctx), SATTN_OK);
}

TEST(ContextTest, ThreadCountAndExplicitCpu) {
  for (int threads : {1, 2, 7}) {
    sattn_context_options options{};
    options.struct_size = sizeof(options);
    options.num_threads = threads;
    options.backend = SATTN_BACKEND_CPU;
    sattn_context* ctx = nullptr;
    ASSERT_EQ(sattn_context_create(&options, &ctx), SATTN_OK) << sattn_last_error();
    sattn_context_info info{};
    info.struct_size = sizeof(info);
    ASSERT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK);
    EXPECT_EQ(info.num_threads, std::min(threads, streamattn::testing_util::BuiltInThreads()));
    EXPECT_EQ(info.backend, SATTN_BACKEND_CPU);
    sattn_context_destroy(ctx);
  }
}

TEST(ContextTest, CudaIsUnavailableWithAReason) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.backend = SATTN_BACKEND_CUDA;
  sattn_context* ctx = reinterpret_cast<sattn_context*>(0x1);
  EXPECT_EQ(sattn_context_create(&options, &ctx), SATTN_ERR_BACKEND_UNAVAILABLE);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(sattn_last_error()).find("cuda"), std::string::npos) << sattn_last_error();
}

TEST(ContextTest, NewerCallerWithZeroedExtraFieldsIsAccepted) {
  struct Bigger {
    sattn_context_options base;
    int64_t future_field;
  } bigger{};
  bigger.base.struct_size = sizeof(bigger);
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(&bigger.base, &ctx), SATTN_OK) << sattn_last_error();
  sattn_context_destroy(ctx);
  bigger.future_field = 1;  // an option this version cannot honour
  EXPECT_EQ(sattn_context_create(&bigger.base, &ctx), SATTN_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(sattn_last_error()).find("options"), std::string::npos);
}

TEST(ContextTest, DestroyNullIsFine) { EXPECT_EQ(sattn_context_destroy(nullptr), SATTN_OK); }

TEST(LastErrorTest, IsPerThreadAndKeptUntilTheNextFailure) {
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(nullptr, nullptr), SATTN_ERR_INVALID_ARGUMENT);
  const std::string mine = sattn_last_error();
  EXPECT_NE(mine.find("ctx"), std::string::npos);
  std::string other;
  std::thread([&] { other = sattn_last_error(); }).join();
  EXPECT_EQ(other, "");
  ASSERT_EQ(sattn_context_create(nullptr, &ctx), SATTN_OK);
  EXPECT_EQ(mine, sattn_last_error());
  sattn_context_destroy(ctx);
}

TEST(TensorTest, ContiguousHelperComputesRowMajorStrides) {
  float data[2 * 3 * 4];
  const int64_t shape[3] = {2, 3, 4};
  const sattn_tensor t = sattn_tensor_contiguous(data, SATTN_DTYPE_F32, 3, shape);
  EXPECT_EQ(t.data, data);
  EXPECT_EQ(t.device, SATTN_DEVICE_CPU);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
}

}  // namespace
