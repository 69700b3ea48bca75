// libstreamattn_cuda.so: the CUDA side of streamattn, loaded by the core with dlopen (see
// plugin_abi.h). The CUDA runtime is linked statically, so the plugin needs only the driver
// (libcuda.so.1) at run time; on a host without one, cudaGetDeviceCount fails (error 35, "driver
// version is insufficient") and the plugin reports no device with that reason, which the core
// turns into "use the CPU". No C++ exception leaves the table's functions.
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <new>

#include "cuda/cuda_common.cuh"
#include "cuda/plugin_abi.h"
#include "cuda/plugin_entries.h"

namespace streamattn {
namespace cuda {
namespace {

#define SATTN_STRINGIFY_(x) #x
#define SATTN_STRINGIFY(x) SATTN_STRINGIFY_(x)

int32_t DeviceCount(char* reason, size_t reason_size) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    std::snprintf(reason, reason_size, "no usable CUDA driver or device: %s (cudaError %d)",
                  cudaGetErrorString(error), static_cast<int>(error));
    return -1;
  }
  if (count == 0) std::snprintf(reason, reason_size, "the CUDA driver reports no device");
  return count;
}

int32_t CopyToHost(void* host_dst, const void* device_src, size_t bytes, int32_t device_index,
                   void* stream, char* message, size_t message_size) {
  const Reply reply{message, message_size};
  DeviceGuard guard;
  cudaError_t error = guard.Enter(device_index);
  if (error != cudaSuccess) return reply.FailCuda(error, "selecting the device");
  const auto s = static_cast<cudaStream_t>(stream);
  error = cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, s);
  if (error == cudaSuccess) error = cudaStreamSynchronize(s);
  return error == cudaSuccess ? SATTN_OK : reply.FailCuda(error, "copying an option tensor");
}

// Runs an operation, turning an escaping exception into a status.
template <typename Body>
int32_t Guarded(char* message, size_t message_size, Body&& body) noexcept {
  const Reply reply{message, message_size};
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return reply.Fail(SATTN_ERR_OUT_OF_MEMORY, "out of host memory in the CUDA plugin");
  } catch (const std::exception& e) {
    return reply.Fail(SATTN_ERR_INTERNAL, "unexpected exception in the CUDA plugin: %s", e.what());
  } catch (...) {
    return reply.Fail(SATTN_ERR_INTERNAL, "unexpected exception in the CUDA plugin");
  }
}

int32_t Attention(const sattn_cuda_attention_args* args, char* message, size_t size) {
  return Guarded(message, size, [&] { return RunAttention(args, message, size); });
}

int32_t MergeStates(const sattn_cuda_merge_args* args, char* message, size_t size) {
  return Guarded(message, size, [&] { return RunMergeStates(args, message, size); });
}

const sattn_cuda_plugin kPlugin = {
    SATTN_CUDA_PLUGIN_ABI_VERSION,
    sizeof(sattn_cuda_plugin),
    "CUDA " SATTN_STRINGIFY(__CUDACC_VER_MAJOR__) "." SATTN_STRINGIFY(
        __CUDACC_VER_MINOR__) ", sm_80 and sm_90 code + compute_90 PTX; flash forward and "
                              "split-KV decode (f16, bf16; head_dim 64, 128, 256), merge",
    DeviceCount,
    MergeStates,
    Attention,
    CopyToHost,
};

}  // namespace
}  // namespace cuda
}  // namespace streamattn

extern "C" __attribute__((visibility("default"))) const sattn_cuda_plugin* sattn_cuda_plugin_entry(
    void) {
  return &streamattn::cuda::kPlugin;
}
