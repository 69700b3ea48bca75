// The CUDA plugin as the core sees it, on any host: which backend a context gets and why
// (RealPlugin, RejectedPlugin; the dispatch on a CUDA context is cuda_dispatch_test.cc). Each
// suite runs as its own ctest with STREAMATTN_CUDA_PLUGIN set (tests/cuda/CMakeLists.txt): the
// loader caches its result per process.

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "streamattn/streamattn.h"

namespace {

struct Info {
  sattn_status status;
  sattn_backend backend;
  std::string reason;        // backend_reason
  std::string availability;  // cuda_availability
  std::string error;         // sattn_last_error() when status != OK
};

Info Create(int32_t backend) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.backend = backend;
  sattn_context* ctx = nullptr;
  Info result{};
  result.status = sattn_context_create(&options, &ctx);
  if (result.status != SATTN_OK) {
    result.error = sattn_last_error();
    EXPECT_EQ(ctx, nullptr);
    return result;
  }
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK);
  result.backend = static_cast<sattn_backend>(info.backend);
  result.reason = info.backend_reason;
  result.availability = info.cuda_availability;
  sattn_context_destroy(ctx);
  return result;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// --------------------------------------------------------------- the real plugin

// Built beside libstreamattn, so found there. On a host without a GPU (CI) it loads and reports
// why it cannot run; with a GPU the context runs on CUDA. Either way the answers agree.
TEST(RealPlugin, LoadsAndExplainsTheBackendChoice) {
  const Info automatic = Create(SATTN_BACKEND_AUTO);
  ASSERT_EQ(automatic.status, SATTN_OK) << automatic.error;
  const Info forced = Create(SATTN_BACKEND_CUDA);
  if (automatic.backend == SATTN_BACKEND_CPU) {
    // Loaded (not "no CUDA plugin at", not "failed to load"), but no driver or device.
    EXPECT_TRUE(Contains(automatic.reason, "cpu: options->backend=auto, and CUDA is unavailable: "))
        << automatic.reason;
    EXPECT_TRUE(Contains(automatic.reason, "libstreamattn_cuda.so: ")) << automatic.reason;
    EXPECT_FALSE(Contains(automatic.reason, "no CUDA plugin at")) << automatic.reason;
    EXPECT_FALSE(Contains(automatic.reason, "failed to load")) << automatic.reason;
    EXPECT_TRUE(Contains(automatic.reason, "cudaError") || Contains(automatic.reason, "no device"))
        << automatic.reason;
    EXPECT_EQ(automatic.availability.rfind("unavailable: ", 0), 0u) << automatic.availability;
    EXPECT_EQ(forced.status, SATTN_ERR_BACKEND_UNAVAILABLE);
    EXPECT_TRUE(Contains(forced.error, "options->backend=cuda: the CUDA backend is unavailable: "))
        << forced.error;
    EXPECT_TRUE(Contains(forced.error, automatic.availability.substr(13))) << forced.error;
  } else {
    EXPECT_EQ(automatic.backend, SATTN_BACKEND_CUDA);
    EXPECT_EQ(automatic.availability.rfind("available: ", 0), 0u) << automatic.availability;
    EXPECT_EQ(forced.status, SATTN_OK) << forced.error;
  }
}

TEST(RealPlugin, EnvironmentOverridesTheOption) {
  const Info baseline = Create(SATTN_BACKEND_AUTO);
  ASSERT_EQ(baseline.status, SATTN_OK) << baseline.error;
  {
    const ScopedEnv env("STREAMATTN_BACKEND", "cpu");
    const Info info = Create(SATTN_BACKEND_CUDA);
    ASSERT_EQ(info.status, SATTN_OK) << info.error;
    EXPECT_EQ(info.backend, SATTN_BACKEND_CPU);
    EXPECT_EQ(info.reason, "cpu: requested by STREAMATTN_BACKEND");
  }
  {
    const ScopedEnv env("STREAMATTN_BACKEND", "cuda");
    const Info info = Create(SATTN_BACKEND_CPU);
    if (baseline.backend == SATTN_BACKEND_CPU) {
      EXPECT_EQ(info.status, SATTN_ERR_BACKEND_UNAVAILABLE);
      EXPECT_TRUE(Contains(info.error, "STREAMATTN_BACKEND=cuda: the CUDA backend is unavailable"))
          << info.error;
    } else {
      EXPECT_EQ(info.status, SATTN_OK);
      EXPECT_EQ(info.backend, SATTN_BACKEND_CUDA);
    }
  }
  {
    const ScopedEnv env("STREAMATTN_BACKEND", "auto");
    const Info info = Create(SATTN_BACKEND_CPU);
    ASSERT_EQ(info.status, SATTN_OK) << info.error;
    EXPECT_EQ(info.backend, baseline.backend);
    EXPECT_TRUE(Contains(info.reason, "STREAMATTN_BACKEND=auto")) << info.reason;
  }
  {
    const ScopedEnv env("STREAMATTN_BACKEND", "gpu");
    const Info info = Create(SATTN_BACKEND_AUTO);
    EXPECT_EQ(info.status, SATTN_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(Contains(info.error, "STREAMATTN_BACKEND=gpu must be cpu, cuda or auto"))
        << info.error;
  }
}

// A CPU context refuses device tensors, naming the argument, and writes nothing.
TEST(RealPlugin, DeviceTensorsOnACpuContextWriteNothing) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.backend = SATTN_BACKEND_CPU;
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(&options, &ctx), SATTN_OK);
  const int64_t shape[4] = {1, 4, 2, 8}, lse_shape[3] = {1, 2, 4};
  std::vector<float> q(64, 1.0f), k(64, 1.0f), v(64, 1.0f), out(64, -7.0f), lse(8, -7.0f);
  sattn_tensor tq = sattn_tensor_contiguous(q.data(), SATTN_DTYPE_F32, 4, shape);
  sattn_tensor tk = sattn_tensor_contiguous(k.data(), SATTN_DTYPE_F32, 4, shape);
  sattn_tensor tv = sattn_tensor_contiguous(v.data(), SATTN_DTYPE_F32, 4, shape);
  sattn_tensor to = sattn_tensor_contiguous(out.data(), SATTN_DTYPE_F32, 4, shape);
  sattn_tensor tl = sattn_tensor_contiguous(lse.data(), SATTN_DTYPE_F32, 3, lse_shape);
  tq.device = tk.device = tv.device = to.device = tl.device = SATTN_DEVICE_CUDA;
  EXPECT_EQ(sattn_attention(ctx, &tq, &tk, &tv, &to, &tl, nullptr), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(sattn_last_error(), "q.device=cuda but this context runs on the cpu"))
      << sattn_last_error();
  EXPECT_EQ(sattn_merge_states(ctx, 1, &to, &tl, &to, &tl), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(sattn_last_error(), "out.device=cuda")) << sattn_last_error();
  EXPECT_EQ(sattn_context_set_cuda_stream(ctx, nullptr), SATTN_ERR_BACKEND_UNAVAILABLE);
  for (float x : out) EXPECT_EQ(x, -7.0f);
  for (float x : lse) EXPECT_EQ(x, -7.0f);
  sattn_context_destroy(ctx);
}

// --------------------------------------------------------------- plugins that must be rejected

// STREAMATTN_CUDA_PLUGIN names a broken plugin and STREAMATTN_TEST_REASON the reason the
// context must give: auto falls back to the CPU saying it, forced cuda fails with it.
TEST(RejectedPlugin, AutoFallsBackAndCudaFailsWithTheReason) {
  const char* reason = std::getenv("STREAMATTN_TEST_REASON");
  ASSERT_NE(reason, nullptr) << "run through ctest (tests/cuda/CMakeLists.txt)";
  const Info automatic = Create(SATTN_BACKEND_AUTO);
  ASSERT_EQ(automatic.status, SATTN_OK) << automatic.error;
  EXPECT_EQ(automatic.backend, SATTN_BACKEND_CPU);
  EXPECT_TRUE(Contains(automatic.reason, reason)) << automatic.reason << " lacks " << reason;
  EXPECT_TRUE(Contains(automatic.availability, reason)) << automatic.availability;
  const Info forced = Create(SATTN_BACKEND_CUDA);
  EXPECT_EQ(forced.status, SATTN_ERR_BACKEND_UNAVAILABLE);
  EXPECT_TRUE(Contains(forced.error, reason)) << forced.error << " lacks " << reason;
  // The CPU context works as ever.
  const int64_t shape[1] = {3};
  float x[3] = {0.0f, 1.0f, 2.0f}, y[3] = {};
  const sattn_tensor in = sattn_tensor_contiguous(x, SATTN_DTYPE_F32, 1, shape);
  const sattn_tensor out = sattn_tensor_contiguous(y, SATTN_DTYPE_F32, 1, shape);
  sattn_context* ctx = nullptr;
  ASSERT_EQ(sattn_context_create(nullptr, &ctx), SATTN_OK);
  EXPECT_EQ(sattn_softmax(ctx, &in, &out, nullptr), SATTN_OK);
  EXPECT_NEAR(y[0] + y[1] + y[2], 1.0f, 1e-6f);
  sattn_context_destroy(ctx);
}

}  // namespace
