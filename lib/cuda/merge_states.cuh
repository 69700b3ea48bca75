// The merge ⊕ of (o, lse) states on the device: sattn_merge_states on device tensors, and the
// combine step of split-KV decode (attention.cu), which is the same merge over its splits.
#ifndef STREAMATTN_CUDA_MERGE_STATES_CUH_
#define STREAMATTN_CUDA_MERGE_STATES_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace streamattn {
namespace cuda {

struct StateView {  // o: [batch, seq, heads, dim] of `dtype`
  const void* data;
  int32_t dtype;
  int64_t strides[4];
};
struct LseView {  // lse: [batch, heads, seq] float32
  const float* data;
  int64_t strides[3];
};

struct MergeJob {
  int64_t batch, seq, heads, dim;
  int32_t num_parts;
  // Parts: arrays in device memory, or (`uniform`) part p is part 0 moved by p steps.
  const StateView* o_parts;
  const LseView* lse_parts;
  bool uniform;
  StateView o0;
  LseView lse0;
  int64_t o_step, lse_step;  // in elements
  // The result; lse_out.data may be nullptr.
  void* out;
  int32_t out_dtype;
  int64_t out_strides[4];
  LseView lse_out;
};

// Queues the merge of every row of `job` on `stream`.
cudaError_t LaunchMerge(const MergeJob& job, cudaStream_t stream);

}  // namespace cuda
}  // namespace streamattn

#endif  // STREAMATTN_CUDA_MERGE_STATES_CUH_
