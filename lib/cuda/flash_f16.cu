// The flash kernel for f16 inputs, head_dim 64, 128 and 256 (one file per dtype, so that a
// two-core build compiles them in parallel).
#include "cuda/flash_attention_kernel.cuh"

namespace streamattn {
namespace cuda {

template cudaError_t LaunchFlash<__half, 64>(const FlashParams& p, cudaStream_t stream);
template cudaError_t LaunchFlash<__half, 128>(const FlashParams& p, cudaStream_t stream);
template cudaError_t LaunchFlash<__half, 256>(const FlashParams& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace streamattn
