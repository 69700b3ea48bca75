// streamattn_gpu_bench: the CUDA plugin's throughput on the shapes below, as CSV lines
// for bench/gpu_check.sh to put beside PyTorch's numbers:
//   forward,<head_dim>,<seq>,<causal>,<TFLOP/s>     batch 4, 16 heads, f16, seq_q = seq_k
//   decode,<head_dim>,<seq_k>,<paged>,<GB/s>        batch 4, 32 query heads over 8, one query
//   copy,0,0,0,<GB/s>                               device-to-device copy, read + write bytes
// Flops count 4 * seq_q * seq_k * head_dim per head (half with a causal mask); decode bytes
// count K and V once. Each figure is the median of timed runs after a warm-up, with CUDA events
// on the context's stream.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "streamattn/streamattn.h"

namespace {

void Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

void Check(sattn_status status, const char* what) {
  if (status == SATTN_OK) return;
  std::fprintf(stderr, "%s: %s\n", what, sattn_last_error());
  std::exit(1);
}

// A device buffer of f16 values uniform in [-1, 1) (a 1M-value random pattern, repeated).
struct Buffer {
  explicit Buffer(size_t count) : count(count) {
    Check(cudaMalloc(&data, count * sizeof(__half)), "cudaMalloc");
    static std::vector<__half> pattern = [] {
      std::mt19937 rng(42);
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      std::vector<__half> p(1 << 20);
      for (__half& x : p) x = __float2half(u(rng));
      return p;
    }();
    for (size_t at = 0; at < count; at += pattern.size()) {
      const size_t n = std::min(pattern.size(), count - at);
      Check(cudaMemcpy(static_cast<__half*>(data) + at, pattern.data(), n * sizeof(__half),
                       cudaMemcpyHostToDevice),
            "cudaMemcpy");
    }
  }
  ~Buffer() { cudaFree(data); }
  sattn_tensor View(std::vector<int64_t> shape) const {
    sattn_tensor t = sattn_tensor_contiguous(data, SATTN_DTYPE_F16, 4, shape.data());
    t.device = SATTN_DEVICE_CUDA;
    return t;
  }
  void* data = nullptr;
  size_t count;
};

// Median seconds per call of `run` on `stream`.
template <typename Run>
double Time(cudaStream_t stream, Run&& run, int iterations) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "event");
  Check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 2; ++i) run();
  std::vector<double> seconds;
  for (int i = 0; i < iterations; ++i) {
    Check(cudaEventRecord(start, stream), "record");
    run();
    Check(cudaEventRecord(stop, stream), "record");
    Check(cudaEventSynchronize(stop), "sync");
    float ms = 0.0f;
    Check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    seconds.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main() {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.backend = SATTN_BACKEND_CUDA;
  sattn_context* ctx = nullptr;
  Check(sattn_context_create(&options, &ctx), "sattn_context_create(cuda)");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  Check(sattn_context_set_cuda_stream(ctx, stream), "set stream");

  const int64_t batch = 4, heads = 16;
  for (int64_t d : {64, 128}) {
    for (int64_t seq : {1024, 4096, 16384}) {
      const size_t n = static_cast<size_t>(batch * seq * heads * d);
      Buffer q(n), k(n), v(n), out(n);
      const sattn_tensor tq = q.View({batch, seq, heads, d}), tk = k.View({batch, seq, heads, d}),
                         tv = v.View({batch, seq, heads, d}), to = out.View({batch, seq, heads, d});
      for (int causal : {0, 1}) {
        sattn_attention_options o{};
        o.struct_size = sizeof(o);
        o.causal = causal;
        const double s = Time(
            stream, [&] { Check(sattn_attention(ctx, &tq, &tk, &tv, &to, nullptr, &o), "fwd"); },
            seq >= 16384 ? 5 : 10);
        const double flops = 4.0 * batch * heads * seq * seq * d / (causal ? 2.0 : 1.0);
        std::printf("forward,%lld,%lld,%d,%.1f\n", static_cast<long long>(d),
                    static_cast<long long>(seq), causal, flops / s * 1e-12);
        std::fflush(stdout);
      }
    }
  }

  const int64_t heads_q = 32, heads_kv = 8, d = 128, page = 16;
  for (int64_t seq_k : {4096, 16384, 65536}) {
    const size_t kv = static_cast<size_t>(batch * seq_k * heads_kv * d);
    Buffer q(batch * heads_q * d), k(kv), v(kv), out(batch * heads_q * d);
    const sattn_tensor tq = q.View({batch, 1, heads_q, d}), to = out.View({batch, 1, heads_q, d});
    for (int paged : {0, 1}) {
      sattn_tensor tk, tv, table_view{};
      std::vector<int32_t> table;
      void* table_device = nullptr;
      sattn_attention_options o{};
      o.struct_size = sizeof(o);
      if (paged) {  // pages in a shuffled order
        const int64_t pages = seq_k / page;
        tk = k.View({batch * pages, page, heads_kv, d});
        tv = v.View({batch * pages, page, heads_kv, d});
        table.resize(batch * pages);
        for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
        std::shuffle(table.begin(), table.end(), std::mt19937(7));
        const int64_t shape[2] = {batch, pages};
        // On the device, as a device call needs; its validation costs one wait for the stream
        // per call (sattn_context_set_cuda_stream), which this figure includes.
        Check(cudaMalloc(&table_device, table.size() * sizeof(int32_t)), "cudaMalloc");
        Check(cudaMemcpy(table_device, table.data(), table.size() * sizeof(int32_t),
                         cudaMemcpyHostToDevice),
              "cudaMemcpy");
        table_view = sattn_tensor_contiguous(table_device, SATTN_DTYPE_I32, 2, shape);
        table_view.device = SATTN_DEVICE_CUDA;
        o.block_table = &table_view;
      } else {
        tk = k.View({batch, seq_k, heads_kv, d});
        tv = v.View({batch, seq_k, heads_kv, d});
      }
      const double s = Time(
          stream, [&] { Check(sattn_attention(ctx, &tq, &tk, &tv, &to, nullptr, &o), "decode"); },
          20);
      std::printf("decode,%lld,%lld,%d,%.1f\n", static_cast<long long>(d),
                  static_cast<long long>(seq_k), paged, 2.0 * kv * sizeof(__half) / s * 1e-9);
      std::fflush(stdout);
      if (table_device != nullptr) cudaFree(table_device);
    }
  }

  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  Check(cudaMalloc(&src, bytes), "cudaMalloc");
  Check(cudaMalloc(&dst, bytes), "cudaMalloc");
  const double s = Time(
      stream,
      [&] { Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); },
      10);
  std::printf("copy,0,0,0,%.1f\n", 2.0 * bytes / s * 1e-9);
  cudaFree(src);
  cudaFree(dst);
  cudaStreamDestroy(stream);
  sattn_context_destroy(ctx);
  return 0;
}
