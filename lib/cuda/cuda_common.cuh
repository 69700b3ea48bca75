// Shared by the plugin's kernels and entry points: status reporting, the device guard, and
// loads and stores of the library's dtypes.
#ifndef STREAMATTN_CUDA_CUDA_COMMON_CUH_
#define STREAMATTN_CUDA_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "streamattn/streamattn.h"

namespace streamattn {
namespace cuda {

// A status and its message, written into the caller's buffer (the plugin ABI's convention).
struct Reply {
  char* message;
  size_t size;

  int32_t Fail(sattn_status code, const char* format, ...) const
      __attribute__((format(printf, 3, 4))) {
    va_list args;
    va_start(args, format);
    if (message != nullptr && size > 0) std::vsnprintf(message, size, format, args);
    va_end(args);
    return code;
  }
  // A CUDA error: out of memory is the caller's to handle, anything else is reported as is.
  int32_t FailCuda(cudaError_t error, const char* what) const {
    return Fail(error == cudaErrorMemoryAllocation ? SATTN_ERR_OUT_OF_MEMORY : SATTN_ERR_INTERNAL,
                "%s: %s (cudaError %d)", what, cudaGetErrorString(error), static_cast<int>(error));
  }
  // Frees the stream-ordered `scratch` of a launch whatever became of it, and reports the
  // launch's failure (`error`, while `what`) before the free's (while `freeing`): the first
  // failure is the one that explains the call's result.
  int32_t FreeAfterLaunch(void* scratch, cudaStream_t stream, cudaError_t error, const char* what,
                          const char* freeing) const {
    const cudaError_t freed = cudaFreeAsync(scratch, stream);
    if (error != cudaSuccess) return FailCuda(error, what);
    return freed == cudaSuccess ? SATTN_OK : FailCuda(freed, freeing);
  }
};

// Makes `index` the current device for the scope of a call, restoring the caller's after.
class DeviceGuard {
 public:
  cudaError_t Enter(int index) {
    cudaError_t error = cudaGetDevice(&previous_);
    if (error != cudaSuccess || previous_ == index) return error;
    error = cudaSetDevice(index);
    if (error == cudaSuccess) changed_ = true;
    return error;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

__device__ __forceinline__ float LoadAsFloat(const void* base, int32_t dtype, int64_t offset) {
  switch (dtype) {
    case SATTN_DTYPE_F16:
      return __half2float(static_cast<const __half*>(base)[offset]);
    case SATTN_DTYPE_BF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[offset]);
    default:
      return static_cast<const float*>(base)[offset];
  }
}

__device__ __forceinline__ void StoreFromFloat(void* base, int32_t dtype, int64_t offset, float x) {
  switch (dtype) {
    case SATTN_DTYPE_F16:
      static_cast<__half*>(base)[offset] = __float2half_rn(x);
      break;
    case SATTN_DTYPE_BF16:
      static_cast<__nv_bfloat16*>(base)[offset] = __float2bfloat16_rn(x);
      break;
    default:
      static_cast<float*>(base)[offset] = x;
  }
}

}  // namespace cuda
}  // namespace streamattn

#endif  // STREAMATTN_CUDA_CUDA_COMMON_CUH_
