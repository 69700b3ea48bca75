// Dispatch on a CUDA context, checked without a GPU: STREAMATTN_CUDA_PLUGIN names a fake plugin
// (fake_plugin.c) that reports one device and records the calls it receives instead of
// computing them; its "device memory" is host memory.
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/plugin_abi.h"
#include "gtest/gtest.h"
#include "streamattn/streamattn.h"

namespace {

// The fake plugin's record, read through the already loaded file.
struct FakePlugin {
  FakePlugin() {
    const char* path = std::getenv("STREAMATTN_CUDA_PLUGIN");
    handle = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  }
  template <typename F>
  F Get(const char* name) const {
    return handle != nullptr ? reinterpret_cast<F>(dlsym(handle, name)) : nullptr;
  }
  int AttentionCalls() const { return Get<int (*)()>("fake_attention_calls")(); }
  int MergeCalls() const { return Get<int (*)()>("fake_merge_calls")(); }
  int CopyCalls() const { return Get<int (*)()>("fake_copy_calls")(); }
  sattn_cuda_attention_args LastAttention() const {
    return *Get<const sattn_cuda_attention_args* (*)()>("fake_last_attention")();
  }
  sattn_cuda_merge_args LastMerge() const {
    return *Get<const sattn_cuda_merge_args* (*)()>("fake_last_merge")();
  }
  void* handle;
};

// batch 2, seq_q 3, seq_k 5, heads 4 over 2 kv heads, head_dim 8; f32 host buffers whose views
// can be marked as device views.
struct Call {
  Call() {
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * i);
    for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.21f * i);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.11f * i + 1.0f);
    tq = View(q.data(), {2, 3, 4, 8});
    tk = View(k.data(), {2, 5, 2, 8});
    tv = View(v.data(), {2, 5, 2, 8});
    to = View(out.data(), {2, 3, 4, 8});
    const int64_t lse_shape[3] = {2, 4, 3};
    tl = sattn_tensor_contiguous(lse.data(), SATTN_DTYPE_F32, 3, lse_shape);
  }
  static sattn_tensor View(float* data, std::vector<int64_t> shape) {
    return sattn_tensor_contiguous(data, SATTN_DTYPE_F32, 4, shape.data());
  }
  void OnDevice() { tq.device = tk.device = tv.device = to.device = tl.device = SATTN_DEVICE_CUDA; }
  sattn_status Run(sattn_context* ctx, const sattn_attention_options* o = nullptr) {
    return sattn_attention(ctx, &tq, &tk, &tv, &to, &tl, o);
  }
  bool Untouched() const {
    for (float x : out) {
      if (x != -7.0f) return false;
    }
    for (float x : lse) {
      if (x != -7.0f) return false;
    }
    return true;
  }

  std::vector<float> q = std::vector<float>(2 * 3 * 4 * 8), k = std::vector<float>(2 * 5 * 2 * 8),
                     v = std::vector<float>(2 * 5 * 2 * 8);
  std::vector<float> out = std::vector<float>(2 * 3 * 4 * 8, -7.0f),
                     lse = std::vector<float>(2 * 4 * 3, -7.0f);
  sattn_tensor tq, tk, tv, to, tl;
};

class FakeDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(plugin.handle, nullptr) << "run through ctest (tests/cuda/CMakeLists.txt)";
    ASSERT_EQ(sattn_context_create(nullptr, &ctx), SATTN_OK) << sattn_last_error();
  }
  void TearDown() override { sattn_context_destroy(ctx); }
  std::string Error() const { return sattn_last_error(); }

  FakePlugin plugin;
  sattn_context* ctx = nullptr;
};

TEST_F(FakeDevice, AutoChoosesCudaAndSaysWhy) {
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK);
  EXPECT_EQ(info.backend, SATTN_BACKEND_CUDA);
  const std::string reason = info.backend_reason;
  EXPECT_EQ(reason.rfind("cuda: options->backend=auto, 1 device(s), plugin ", 0), 0u) << reason;
  EXPECT_NE(reason.find("fake plugin for tests"), std::string::npos) << reason;
  EXPECT_EQ(std::string(info.cuda_availability).rfind("available: 1 device(s)", 0), 0u);
}

TEST_F(FakeDevice, DeviceTensorsGoToThePluginOnTheContextStream) {
  void* const stream = reinterpret_cast<void*>(0x5eed);
  ASSERT_EQ(sattn_context_set_cuda_stream(ctx, stream), SATTN_OK) << Error();
  Call call;
  call.OnDevice();
  int32_t used[2] = {4, 0};
  const int64_t batch[1] = {2};
  sattn_tensor seqused = sattn_tensor_contiguous(used, SATTN_DTYPE_I32, 1, batch);
  seqused.device = SATTN_DEVICE_CUDA;
  sattn_attention_options o{};
  o.struct_size = sizeof(o);
  o.causal = 1;
  o.softcap = 30.0f;
  o.seqused_k = &seqused;
  const int calls = plugin.AttentionCalls(), copies = plugin.CopyCalls();
  ASSERT_EQ(call.Run(ctx, &o), SATTN_OK) << Error();
  EXPECT_EQ(plugin.AttentionCalls(), calls + 1);
  EXPECT_EQ(plugin.CopyCalls(), copies + 1);  // seqused_k, read for validation
  const sattn_cuda_attention_args a = plugin.LastAttention();
  EXPECT_EQ(a.stream, stream);
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.seq_q, 3);
  EXPECT_EQ(a.seq_k, 5);
  EXPECT_EQ(a.heads_q, 4);
  EXPECT_EQ(a.heads_kv, 2);
  EXPECT_EQ(a.head_dim, 8);
  EXPECT_FLOAT_EQ(a.scale, 1.0f / std::sqrt(8.0f));
  EXPECT_EQ(a.softcap, 30.0f);
  EXPECT_EQ(a.window_left, -1);
  EXPECT_EQ(a.window_right, 0);  // causal
  EXPECT_EQ(a.has_alibi + a.has_mask + a.has_sinks, 0);
  EXPECT_EQ(a.block_table, nullptr);
  EXPECT_EQ(a.device_index, 0);
  EXPECT_TRUE(call.Untouched());  // the fake computes nothing
}

TEST_F(FakeDevice, HostTensorsRunOnTheCpu) {
  Call on_cuda_context, on_cpu_context;
  const int calls = plugin.AttentionCalls();
  ASSERT_EQ(on_cuda_context.Run(ctx), SATTN_OK) << Error();
  EXPECT_EQ(plugin.AttentionCalls(), calls);
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.backend = SATTN_BACKEND_CPU;
  sattn_context* cpu = nullptr;
  ASSERT_EQ(sattn_context_create(&options, &cpu), SATTN_OK);
  ASSERT_EQ(on_cpu_context.Run(cpu), SATTN_OK) << Error();
  sattn_context_destroy(cpu);
  EXPECT_EQ(on_cuda_context.out, on_cpu_context.out);
  EXPECT_EQ(on_cuda_context.lse, on_cpu_context.lse);
}

TEST_F(FakeDevice, MixingHostAndDeviceTensorsIsAnError) {
  Call call;
  call.tv.device = SATTN_DEVICE_CUDA;
  EXPECT_EQ(call.Run(ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("v.device=cuda but q.device=cpu: one call cannot mix host and device"),
            std::string::npos)
      << Error();
  Call device;
  device.OnDevice();
  device.tl.device = SATTN_DEVICE_CPU;
  EXPECT_EQ(device.Run(ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("lse.device=cpu but q.device=cuda"), std::string::npos) << Error();
  device.tl.device = SATTN_DEVICE_CUDA;
  device.tq.device_index = 1;
  EXPECT_EQ(device.Run(ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("k.device_index=0 but q.device_index=1"), std::string::npos) << Error();
  // An option tensor on the host for a device call.
  device.tq.device_index = 0;
  int32_t used[2] = {1, 1};
  const int64_t batch[1] = {2};
  const sattn_tensor seqused = sattn_tensor_contiguous(used, SATTN_DTYPE_I32, 1, batch);
  sattn_attention_options o{};
  o.struct_size = sizeof(o);
  o.seqused_k = &seqused;
  EXPECT_EQ(device.Run(ctx, &o), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("options->seqused_k.device=cpu but q.device=cuda"), std::string::npos)
      << Error();
  EXPECT_TRUE(call.Untouched());
  EXPECT_TRUE(device.Untouched());
}

TEST_F(FakeDevice, DeviceOptionValuesAreCopiedAndChecked) {
  Call call;
  call.OnDevice();
  int32_t used[2] = {5, 6};  // 6 > seq_k
  const int64_t batch[1] = {2};
  sattn_tensor seqused = sattn_tensor_contiguous(used, SATTN_DTYPE_I32, 1, batch);
  seqused.device = SATTN_DEVICE_CUDA;
  sattn_attention_options o{};
  o.struct_size = sizeof(o);
  o.seqused_k = &seqused;
  const int calls = plugin.AttentionCalls();
  EXPECT_EQ(call.Run(ctx, &o), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("options->seqused_k[1]=6 must be in [0, 5]"), std::string::npos)
      << Error();
  // Paged: k, v [3 pages, 2 keys, 2 heads, 8], block table [2, 3] naming page 7 of 3.
  const int64_t table_shape[2] = {2, 3};
  int32_t table[6] = {0, 1, 2, 2, 7, 0};
  sattn_tensor block_table = sattn_tensor_contiguous(table, SATTN_DTYPE_I32, 2, table_shape);
  block_table.device = SATTN_DEVICE_CUDA;
  call.tk = Call::View(call.k.data(), {3, 2, 2, 8});
  call.tv = Call::View(call.v.data(), {3, 2, 2, 8});
  call.tk.device = call.tv.device = SATTN_DEVICE_CUDA;
  sattn_attention_options paged{};
  paged.struct_size = sizeof(paged);
  paged.block_table = &block_table;
  EXPECT_EQ(call.Run(ctx, &paged), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Error().find("options->block_table[1, 1]=7 must be in [0, 3)"), std::string::npos)
      << Error();
  table[4] = 1;
  EXPECT_EQ(call.Run(ctx, &paged), SATTN_OK) << Error();
  EXPECT_EQ(plugin.AttentionCalls(), calls + 1);
  const sattn_cuda_attention_args a = plugin.LastAttention();
  EXPECT_EQ(a.page_size, 2);
  EXPECT_EQ(a.seq_k, 6);
  ASSERT_NE(a.block_table, nullptr);
  EXPECT_TRUE(call.Untouched());
}

// A packed batch (cu_seqlens_q) is refused by name before the plugin is called: its two
// sequences of 3 queries as q [1, 6, ..] over one cache per sequence.
TEST_F(FakeDevice, PackedBatchesAreRefusedByName) {
  Call call;
  call.OnDevice();
  call.tq.shape[0] = call.to.shape[0] = 1;
  call.tq.shape[1] = call.to.shape[1] = 6;
  const int64_t lse_shape[3] = {1, 4, 6};
  call.tl = sattn_tensor_contiguous(call.lse.data(), SATTN_DTYPE_F32, 3, lse_shape);
  call.tl.device = SATTN_DEVICE_CUDA;
  int32_t starts[3] = {0, 3, 6};
  const int64_t n[1] = {3};
  sattn_tensor cu_seqlens_q = sattn_tensor_contiguous(starts, SATTN_DTYPE_I32, 1, n);
  cu_seqlens_q.device = SATTN_DEVICE_CUDA;
  sattn_attention_options o{};
  o.struct_size = sizeof(o);
  o.cu_seqlens_q = &cu_seqlens_q;
  const int calls = plugin.AttentionCalls();
  EXPECT_EQ(call.Run(ctx, &o), SATTN_ERR_UNSUPPORTED);
  EXPECT_NE(Error().find("options->cu_seqlens_q"), std::string::npos) << Error();
  EXPECT_EQ(plugin.AttentionCalls(), calls);
  EXPECT_TRUE(call.Untouched());
}

TEST_F(FakeDevice, OptionsTheGpuLacksAreRefusedByName) {
  Call call;
  call.OnDevice();
  float per_head[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
  const int64_t heads[1] = {4};
  sattn_tensor slopes = sattn_tensor_contiguous(per_head, SATTN_DTYPE_F32, 1, heads);
  slopes.device = SATTN_DEVICE_CUDA;
  float bias[2 * 4 * 3 * 5] = {};
  const int64_t mask_shape[4] = {2, 4, 3, 5};
  sattn_tensor mask = sattn_tensor_contiguous(bias, SATTN_DTYPE_F32, 4, mask_shape);
  mask.device = SATTN_DEVICE_CUDA;
  const int calls = plugin.AttentionCalls();
  struct Case {
    const char* name;
    sattn_attention_options o;
  } cases[3] = {};
  for (Case& c : cases) c.o.struct_size = sizeof(c.o);
  cases[0] = {"options->alibi_slopes", cases[0].o};
  cases[0].o.alibi_slopes = &slopes;
  cases[1] = {"options->sinks", cases[1].o};
  cases[1].o.sinks = &slopes;
  cases[2] = {"options->mask", cases[2].o};
  cases[2].o.mask = &mask;
  for (const Case& c : cases) {
    EXPECT_EQ(call.Run(ctx, &c.o), SATTN_ERR_UNSUPPORTED) << c.name;
    EXPECT_NE(Error().find(c.name), std::string::npos) << Error();
  }
  EXPECT_EQ(plugin.AttentionCalls(), calls);
  EXPECT_TRUE(call.Untouched());
}

TEST_F(FakeDevice, MergeAndSoftmaxOnDevice) {
  Call call;
  call.OnDevice();
  const int merges = plugin.MergeCalls();
  ASSERT_EQ(sattn_merge_states(ctx, 1, &call.tq, &call.tl, &call.to, nullptr), SATTN_OK) << Error();
  EXPECT_EQ(plugin.MergeCalls(), merges + 1);
  const sattn_cuda_merge_args m = plugin.LastMerge();
  EXPECT_EQ(m.num_parts, 1);
  EXPECT_EQ(m.lse_out, nullptr);
  const int64_t shape[1] = {4};
  float x[4] = {}, y[4] = {};
  sattn_tensor in = sattn_tensor_contiguous(x, SATTN_DTYPE_F32, 1, shape);
  sattn_tensor out = sattn_tensor_contiguous(y, SATTN_DTYPE_F32, 1, shape);
  in.device = out.device = SATTN_DEVICE_CUDA;
  EXPECT_EQ(sattn_softmax(ctx, &in, &out, nullptr), SATTN_ERR_UNSUPPORTED);
  EXPECT_NE(Error().find("sattn_softmax on device tensors"), std::string::npos) << Error();
  in.device = out.device = SATTN_DEVICE_CPU;  // host tensors on a CUDA context: the CPU
  EXPECT_EQ(sattn_softmax(ctx, &in, &out, nullptr), SATTN_OK) << Error();
  EXPECT_FLOAT_EQ(y[0], 0.25f);
}

}  // namespace
