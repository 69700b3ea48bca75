// Merging S partial states per row: lse = log(sum_p exp(lse_p)), out = sum_p exp(lse_p - lse) o_p.
// One block of 128 threads per (batch, seq, head) row: the part weights are computed once per
// row into shared memory (chunks of kChunk parts), then each thread sums its dims over the
// parts. Cost: S * dim multiply-adds and S exps per row, reading each o_p once: bandwidth-bound.
// Empty parts (lse = -inf) are never read; a NaN lse makes the row NaN; no part: the identity.
#include <cmath>
#include <vector>

#include "cuda/cuda_common.cuh"
#include "cuda/merge_states.cuh"
#include "cuda/plugin_entries.h"

namespace streamattn {
namespace cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kChunk = 1024;

__device__ __forceinline__ const float* LsePtr(const MergeJob& j, int32_t p, int64_t b, int64_t h,
                                               int64_t i) {
  const LseView& v = j.uniform ? j.lse0 : j.lse_parts[p];
  const int64_t step = j.uniform ? p * j.lse_step : 0;
  return v.data + step + b * v.strides[0] + h * v.strides[1] + i * v.strides[2];
}

__device__ __forceinline__ float LoadState(const MergeJob& j, int32_t p, int64_t b, int64_t i,
                                           int64_t h, int64_t d) {
  const StateView& v = j.uniform ? j.o0 : j.o_parts[p];
  const int64_t step = j.uniform ? p * j.o_step : 0;
  return LoadAsFloat(
      v.data, v.dtype,
      step + b * v.strides[0] + i * v.strides[1] + h * v.strides[2] + d * v.strides[3]);
}

template <typename Op>
__device__ float BlockReduce(float x, float* scratch, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < kThreads / 32; ++w) x = op(x, scratch[w]);
  return x;
}

__global__ void __launch_bounds__(kThreads) MergeKernel(MergeJob j) {
  __shared__ float weights[kChunk];
  __shared__ float scratch[kThreads / 32];
  int64_t row = blockIdx.x;
  const int64_t h = row % j.heads;
  row /= j.heads;
  const int64_t i = row % j.seq;
  const int64_t b = row / j.seq;

  float max_lse = -INFINITY, nan = 0.0f;
  for (int32_t p = threadIdx.x; p < j.num_parts; p += kThreads) {
    const float x = *LsePtr(j, p, b, h, i);
    if (isnan(x)) nan = 1.0f;
    max_lse = fmaxf(max_lse, x);
  }
  max_lse = BlockReduce(max_lse, scratch, [](float a, float c) { return fmaxf(a, c); });
  nan = BlockReduce(nan, scratch, [](float a, float c) { return fmaxf(a, c); });
  float sum = 0.0f;
  const bool empty = nan == 0.0f && max_lse == -INFINITY;
  if (nan == 0.0f && !empty) {
    for (int32_t p = threadIdx.x; p < j.num_parts; p += kThreads) {
      sum += expf(*LsePtr(j, p, b, h, i) - max_lse);
    }
    sum = BlockReduce(sum, scratch, [](float a, float c) { return a + c; });
  }
  const float inv = nan != 0.0f ? NAN : empty ? 0.0f : 1.0f / sum;

  // Each thread owns dims d = threadIdx.x + k * kThreads; its sums live in registers only for
  // head_dim <= 256 (the CUDA attention's widest; wider rows are refused below), two per thread.
  float acc[2] = {0.0f, 0.0f};
  if (nan == 0.0f && !empty) {
    for (int32_t base = 0; base < j.num_parts; base += kChunk) {
      const int32_t count = min(kChunk, j.num_parts - base);
      __syncthreads();
      for (int32_t p = threadIdx.x; p < count; p += kThreads) {
        const float lse = *LsePtr(j, base + p, b, h, i);
        weights[p] = lse == -INFINITY ? -1.0f : expf(lse - max_lse);  // -1: an empty part
      }
      __syncthreads();
      for (int32_t p = 0; p < count; ++p) {
        const float w = weights[p];
        if (w < 0.0f) continue;  // an empty part: o_p is not read
        for (int k = 0; k < 2; ++k) {
          const int64_t d = threadIdx.x + k * kThreads;
          if (d < j.dim) acc[k] += w * LoadState(j, base + p, b, i, h, d);
        }
      }
    }
  }
  // Every read of this row (o_p and lse_p, which out and lse_out may alias) is done.
  __syncthreads();
  for (int k = 0; k < 2; ++k) {
    const int64_t d = threadIdx.x + k * kThreads;
    if (d >= j.dim) continue;
    StoreFromFloat(
        j.out, j.out_dtype,
        b * j.out_strides[0] + i * j.out_strides[1] + h * j.out_strides[2] + d * j.out_strides[3],
        acc[k] * inv);
  }
  if (j.lse_out.data != nullptr && threadIdx.x == 0) {
    const float lse = nan != 0.0f ? NAN : empty ? -INFINITY : max_lse + logf(sum);
    float* dst = const_cast<float*>(j.lse_out.data);
    dst[b * j.lse_out.strides[0] + h * j.lse_out.strides[1] + i * j.lse_out.strides[2]] = lse;
  }
}

}  // namespace

cudaError_t LaunchMerge(const MergeJob& job, cudaStream_t stream) {
  const int64_t rows = job.batch * job.seq * job.heads;
  if (rows == 0) return cudaSuccess;
  MergeKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(job);
  return cudaGetLastError();
}

// sattn_merge_states on device tensors: the part views go to the device in one copy.
int32_t RunMergeStates(const sattn_cuda_merge_args* args, char* message, size_t message_size) {
  const Reply reply{message, message_size};
  const sattn_tensor& out = *args->out;
  if (out.shape[3] > 2 * kThreads) {
    return reply.Fail(SATTN_ERR_UNSUPPORTED,
                      "out.shape[3]=%lld: the CUDA merge handles head_dim up to %d",
                      static_cast<long long>(out.shape[3]), 2 * kThreads);
  }
  const int64_t rows = out.shape[0] * out.shape[1] * out.shape[2];
  if (rows > INT32_MAX) {
    return reply.Fail(SATTN_ERR_UNSUPPORTED, "batch x seq x heads=%lld exceeds the CUDA grid",
                      static_cast<long long>(rows));
  }
  MergeJob job{};
  job.batch = out.shape[0];
  job.seq = out.shape[1];
  job.heads = out.shape[2];
  job.dim = out.shape[3];
  job.num_parts = args->num_parts;
  job.uniform = true;  // until parts are given
  job.out = out.data;
  job.out_dtype = out.dtype;
  for (int i = 0; i < 4; ++i) job.out_strides[i] = out.strides[i];
  if (args->lse_out != nullptr) {
    const sattn_tensor& l = *args->lse_out;
    job.lse_out = {static_cast<const float*>(l.data), {l.strides[0], l.strides[1], l.strides[2]}};
  }

  DeviceGuard guard;
  cudaError_t error = guard.Enter(args->device_index);
  if (error != cudaSuccess) return reply.FailCuda(error, "selecting the device of out");
  const auto stream = static_cast<cudaStream_t>(args->stream);
  if (args->num_parts == 0) {
    error = LaunchMerge(job, stream);
    return error == cudaSuccess ? SATTN_OK : reply.FailCuda(error, "launching the merge");
  }
  const size_t n = static_cast<size_t>(args->num_parts);
  std::vector<StateView> o(n);
  std::vector<LseView> lse(n);
  for (size_t p = 0; p < n; ++p) {
    const sattn_tensor& ov = args->o_parts[p];
    const sattn_tensor& lv = args->lse_parts[p];
    o[p] = {ov.data, ov.dtype, {ov.strides[0], ov.strides[1], ov.strides[2], ov.strides[3]}};
    lse[p] = {static_cast<const float*>(lv.data), {lv.strides[0], lv.strides[1], lv.strides[2]}};
  }
  const size_t o_bytes = n * sizeof(StateView), lse_bytes = n * sizeof(LseView);
  void* views = nullptr;
  error = cudaMallocAsync(&views, o_bytes + lse_bytes, stream);
  if (error != cudaSuccess) return reply.FailCuda(error, "allocating the part views");
  // From pageable memory: the copy has taken the host bytes when it returns.
  error = cudaMemcpyAsync(views, o.data(), o_bytes, cudaMemcpyHostToDevice, stream);
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(static_cast<char*>(views) + o_bytes, lse.data(), lse_bytes,
                            cudaMemcpyHostToDevice, stream);
  }
  if (error == cudaSuccess) {
    job.uniform = false;
    job.o_parts = static_cast<const StateView*>(views);
    job.lse_parts = reinterpret_cast<const LseView*>(static_cast<char*>(views) + o_bytes);
    error = LaunchMerge(job, stream);
  }
  return reply.FreeAfterLaunch(views, stream, error, "launching the merge",
                               "freeing the part views");
}

}  // namespace cuda
}  // namespace streamattn
