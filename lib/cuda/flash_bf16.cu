// The flash kernel for bf16 inputs, head_dim 64, 128 and 256 (one file per dtype, so that a
// two-core build compiles them in parallel).
#include "cuda/flash_attention_kernel.cuh"

namespace streamattn {
namespace cuda {

template cudaError_t LaunchFlash<__nv_bfloat16, 64>(const FlashParams& p, cudaStream_t stream);
template cudaError_t LaunchFlash<__nv_bfloat16, 128>(const FlashParams& p, cudaStream_t stream);
template cudaError_t LaunchFlash<__nv_bfloat16, 256>(const FlashParams& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace streamattn
