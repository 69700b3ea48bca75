// CUDA against the CPU backend and the float64 oracle, on a GPU (bench/gpu_check.sh; ctest only
// with STREAMATTN_GPU_TESTS=ON). Every case runs on fresh random inputs (the seed is printed),
// the same call on both backends, with the device outputs poisoned with NaN beforehand, and is
// judged by normalised mean squared error: sum (got - want)^2 / sum want^2 over finite entries,
// with non-finite entries required to match. A host without a GPU fails here, never skips.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention_case.h"
#include "gtest/gtest.h"
#include "reference/reference_attention.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace testing_util {
namespace {

uint64_t FreshSeed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

// sum (got - want)^2 / sum want^2 over entries where want is finite; +inf when a non-finite
// entry of want is not matched exactly (NaN by NaN).
double Nmse(const Array& got, const Array& want) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    if (!std::isfinite(w)) {
      if (!(g == w || (std::isnan(g) && std::isnan(w)))) return INFINITY;
      continue;
    }
    if (!std::isfinite(g)) return INFINITY;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den > 0.0 ? num / den : num;
}

double MaxAbsLseError(const Array& got, const Array& want) {
  double worst = 0.0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    if (!std::isfinite(w)) {
      if (!(g == w || (std::isnan(g) && std::isnan(w)))) return INFINITY;
    } else {
      worst = std::max(worst, std::isfinite(g) ? std::fabs(g - w) : INFINITY);
    }
  }
  return worst;
}

// A host tensor's whole buffer (canaries included) on the device, and its device view.
class DeviceCopy {
 public:
  explicit DeviceCopy(const HostTensor& host) {
    const std::vector<uint8_t>& bytes = host.bytes();
    if (bytes.empty()) return;  // an option the case does not use
    EXPECT_EQ(cudaMalloc(&data_, bytes.size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    view_ = host.view();
    view_.data = static_cast<uint8_t*>(data_) +
                 (static_cast<const uint8_t*>(host.view().data) - bytes.data());
    view_.device = SATTN_DEVICE_CUDA;
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() { cudaFree(data_); }
  const sattn_tensor* view() const { return &view_; }
  void CopyBackInto(HostTensor* host) const {
    std::vector<uint8_t>& bytes = host->mutable_bytes();
    EXPECT_EQ(cudaMemcpy(bytes.data(), data_, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  void* data_ = nullptr;
  sattn_tensor view_{};
};

void Poison(HostTensor* t) {
  ForEachIndex(t->shape(), [&](const std::vector<int64_t>& i) { t->Set(i, kNaN); });
}

bool CanariesIntact(const HostTensor& t) {
  const std::vector<uint8_t>& b = t.bytes();
  for (size_t i = 0; i < 64; ++i) {
    if (b[i] != 0xA5 || b[b.size() - 1 - i] != 0xA5) return false;
  }
  return true;
}

class CrossBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    sattn_context_options options{};
    options.struct_size = sizeof(options);
    options.backend = SATTN_BACKEND_CUDA;
    ASSERT_EQ(sattn_context_create(&options, &cuda_), SATTN_OK) << sattn_last_error();
    options.backend = SATTN_BACKEND_CPU;
    ASSERT_EQ(sattn_context_create(&options, &cpu_), SATTN_OK) << sattn_last_error();
  }
  void TearDown() override {
    sattn_context_destroy(cuda_);
    sattn_context_destroy(cpu_);
  }

  // Runs `c` on both backends (after `plant` changed the inputs of both) and checks both
  // against the oracle and each other.
  void Check(AttentionCase c, const std::function<void(AttentionCall*)>& plant = nullptr) {
    c.seed = FreshSeed();
    SCOPED_TRACE(c.Describe() + " seed=" + std::to_string(c.seed));
    AttentionCall cpu_call(c), gpu_call(c);
    if (plant) {
      plant(&cpu_call);
      plant(&gpu_call);
    }
    ASSERT_EQ(cpu_call.Run(cpu_), SATTN_OK) << sattn_last_error();
    Poison(&gpu_call.out);
    Poison(&gpu_call.lse);
    const DeviceCopy q(gpu_call.q), k(gpu_call.k), v(gpu_call.v), out(gpu_call.out),
        lse(gpu_call.lse), seqused(gpu_call.seqused_k), table(gpu_call.block_table);
    sattn_attention_options options = gpu_call.options;
    if (options.seqused_k != nullptr) options.seqused_k = seqused.view();
    if (options.block_table != nullptr) options.block_table = table.view();
    ASSERT_EQ(sattn_attention(cuda_, q.view(), k.view(), v.view(), out.view(),
                              c.with_lse ? lse.view() : nullptr, &options),
              SATTN_OK)
        << sattn_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.CopyBackInto(&gpu_call.out);
    lse.CopyBackInto(&gpu_call.lse);
    EXPECT_TRUE(CanariesIntact(gpu_call.out)) << "CUDA wrote outside out";
    EXPECT_TRUE(CanariesIntact(gpu_call.lse)) << "CUDA wrote outside lse";

    const reference::AttentionResult oracle =
        reference::Attention(cpu_call.q.ToArray(), cpu_call.LogicalKeys(c, cpu_call.k),
                             cpu_call.LogicalKeys(c, cpu_call.v), cpu_call.Spec(c));
    const Array gpu_out = gpu_call.out.ToArray(), cpu_out = cpu_call.out.ToArray();
    const double tolerance = c.q_dtype == SATTN_DTYPE_BF16 ? 2e-4 : 1e-5;
    const double vs_oracle = Nmse(gpu_out, oracle.out), vs_cpu = Nmse(gpu_out, cpu_out);
    const double cpu_vs_oracle = Nmse(cpu_out, oracle.out);
    std::printf("  nmse cuda/oracle %.2e  cuda/cpu %.2e  cpu/oracle %.2e  %s\n", vs_oracle, vs_cpu,
                cpu_vs_oracle, c.Describe().c_str());
    EXPECT_LE(vs_oracle, tolerance);
    EXPECT_LE(vs_cpu, tolerance);
    if (c.with_lse) {
      EXPECT_LE(MaxAbsLseError(gpu_call.lse.ToArray(), oracle.lse), 1e-3);
      EXPECT_LE(MaxAbsLseError(gpu_call.lse.ToArray(), cpu_call.lse.ToArray()), 1e-3);
    }
  }

  sattn_context* cuda_ = nullptr;
  sattn_context* cpu_ = nullptr;
};

AttentionCase Base(sattn_dtype dtype, int64_t head_dim) {
  AttentionCase c;
  c.q_dtype = c.kv_dtype = c.out_dtype = dtype;
  c.head_dim = head_dim;
  return c;
}

TEST_F(CrossBackend, Forward) {
  for (sattn_dtype dtype : {SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
    for (int64_t d : {64, 128, 256}) {
      AttentionCase c = Base(dtype, d);
      c.batch = 2;
      c.seq_q = 257;
      c.seq_k = 300;
      c.heads_q = 8;
      c.heads_kv = 2;
      Check(c);  // no mask, GQA
      c.causal = true;
      Check(c);
      c.seq_q = 300;  // more queries than keys: the first rows see nothing
      c.seq_k = 100;
      Check(c);
      c.causal = false;
      c.seq_q = 190;
      c.seq_k = 333;
      c.has_window = true;
      c.window_left = 40;
      c.window_right = 8;
      c.softcap = 20.0f;
      c.value_lo = -3.0;
      c.value_hi = 3.0;
      Check(c);
      AttentionCase layout = Base(dtype, d);  // [b, h, s, d] storage, f32 out, MQA
      layout.seq_q = 70;
      layout.seq_k = 129;
      layout.heads_q = 4;
      layout.heads_kv = 1;
      layout.q_order = layout.kv_order = {0, 2, 1, 3};
      layout.out_dtype = SATTN_DTYPE_F32;
      layout.causal = true;
      Check(layout);
    }
  }
}

// A NaN in v at a key that rows before it do not see (causal): only the rows that see it turn
// NaN, although the key shares a tile with rows that do not (the kernel's slow path).
TEST_F(CrossBackend, NonFiniteValueOfAHiddenKey) {
  for (sattn_dtype dtype : {SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
    for (int64_t d : {64, 128, 256}) {
      AttentionCase c = Base(dtype, d);
      c.seq_q = c.seq_k = 150;
      c.heads_q = c.heads_kv = 2;
      c.causal = true;
      Check(c, [](AttentionCall* call) {
        for (int64_t x = 0; x < call->v.shape()[3]; x += 7) call->v.Set({0, 100, 1, x}, kNaN);
        call->v.Set({0, 40, 0, 3}, kInf);
      });
    }
  }
}

TEST_F(CrossBackend, DecodePagedAndRagged) {
  for (sattn_dtype dtype : {SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
    for (int64_t d : {64, 128}) {
      for (int64_t seq_q : {1, 4}) {
        AttentionCase c = Base(dtype, d);
        c.batch = 4;
        c.seq_q = seq_q;
        c.seq_k = 4096;
        c.heads_q = 32;
        c.heads_kv = 8;
        c.seqused_k = {4096, 17, 0, 2049};
        c.causal = seq_q > 1;
        Check(c);  // dense, ragged, split-KV
        c.page_size = 16;
        Check(c);  // paged: unused pages hold NaN
        c.seqused_k.clear();
        c.has_window = true;
        c.window_left = 1000;
        Check(c);
      }
    }
  }
}

// Merge on device tensors: three parts of mixed dtypes, one empty with NaN in its o.
// MLA's widths (576 channels scored, V the first 512 of the same rows) run on the CPU only: the
// CUDA kernels refuse them by name (lib/cuda/attention.cu) and write nothing.
TEST_F(CrossBackend, MlaWidthsAreRefusedByName) {
  AttentionCase c = Base(SATTN_DTYPE_BF16, 576);
  c.head_dim_v = 512, c.heads_q = 16, c.seq_k = 64, c.v_in_k = true;
  AttentionCall call(c);
  Poison(&call.out);
  const std::vector<uint8_t> before = call.out.bytes();
  const DeviceCopy q(call.q), k(call.k), out(call.out);
  sattn_tensor v = *k.view();
  v.shape[3] = 512;
  EXPECT_EQ(sattn_attention(cuda_, q.view(), k.view(), &v, out.view(), nullptr, &call.options),
            SATTN_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(sattn_last_error()).find("head_dim=576"), std::string::npos)
      << sattn_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.CopyBackInto(&call.out);
  EXPECT_EQ(call.out.bytes(), before);
}

TEST_F(CrossBackend, MergeStates) {
  std::mt19937_64 rng(FreshSeed());
  const std::vector<int64_t> shape = {2, 5, 3, 128}, lse_shape = {2, 3, 5};
  std::vector<HostTensor> o, lse;
  for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
    o.emplace_back(dtype, shape);
    o.back().FillUniform(rng, -1.0, 1.0);
    lse.emplace_back(SATTN_DTYPE_F32, lse_shape);
    lse.back().FillUniform(rng, -5.0, 5.0);
  }
  ForEachIndex(lse_shape, [&](const std::vector<int64_t>& i) { lse[2].Set(i, -kInf); });
  ForEachIndex(shape, [&](const std::vector<int64_t>& i) { o[2].Set(i, kNaN); });
  HostTensor cpu_out(SATTN_DTYPE_F32, shape), cpu_lse(SATTN_DTYPE_F32, lse_shape);
  HostTensor gpu_out(SATTN_DTYPE_F32, shape), gpu_lse(SATTN_DTYPE_F32, lse_shape);
  Poison(&gpu_out);
  Poison(&gpu_lse);
  std::vector<sattn_tensor> o_views, lse_views, o_dev, lse_dev;
  std::vector<std::unique_ptr<DeviceCopy>> copies;
  for (int p = 0; p < 3; ++p) {
    o_views.push_back(o[p].view());
    lse_views.push_back(lse[p].view());
    copies.push_back(std::make_unique<DeviceCopy>(o[p]));
    o_dev.push_back(*copies.back()->view());
    copies.push_back(std::make_unique<DeviceCopy>(lse[p]));
    lse_dev.push_back(*copies.back()->view());
  }
  const sattn_tensor co = cpu_out.view(), cl = cpu_lse.view();
  ASSERT_EQ(sattn_merge_states(cpu_, 3, o_views.data(), lse_views.data(), &co, &cl), SATTN_OK);
  const DeviceCopy out(gpu_out), l(gpu_lse);
  ASSERT_EQ(sattn_merge_states(cuda_, 3, o_dev.data(), lse_dev.data(), out.view(), l.view()),
            SATTN_OK)
      << sattn_last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out.CopyBackInto(&gpu_out);
  l.CopyBackInto(&gpu_lse);
  // The oracle: the merge formula in double.
  Array want(shape), want_lse(lse_shape);
  ForEachIndex(lse_shape, [&](const std::vector<int64_t>& i) {
    std::vector<double> parts = {lse[0].Get(i), lse[1].Get(i), lse[2].Get(i)};
    const double total = reference::LogSumExp(parts);
    want_lse({i[0], i[1], i[2]}) = total;
    for (int64_t d = 0; d < shape[3]; ++d) {
      double acc = 0.0;
      for (int p = 0; p < 2; ++p)
        acc += std::exp(parts[p] - total) * o[p].Get({i[0], i[2], i[1], d});
      want({i[0], i[2], i[1], d}) = acc;
    }
  });
  const double vs_oracle = Nmse(gpu_out.ToArray(), want);
  const double vs_cpu = Nmse(gpu_out.ToArray(), cpu_out.ToArray());
  std::printf("  merge nmse cuda/oracle %.2e  cuda/cpu %.2e\n", vs_oracle, vs_cpu);
  EXPECT_LE(vs_oracle, 1e-10);
  EXPECT_LE(vs_cpu, 1e-10);
  EXPECT_LE(MaxAbsLseError(gpu_lse.ToArray(), want_lse), 1e-5);
}

}  // namespace
}  // namespace testing_util
}  // namespace streamattn
