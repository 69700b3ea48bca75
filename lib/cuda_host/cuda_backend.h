// The CUDA backend as the core sees it: an adapter from the Backend interface to the plugin's C
// table (lib/cuda/plugin_abi.h). It holds no CUDA state of its own; the plugin does the work on
// the context's stream.
#ifndef STREAMATTN_CUDA_HOST_CUDA_BACKEND_H_
#define STREAMATTN_CUDA_HOST_CUDA_BACKEND_H_

#include <cstdint>

#include "core/allocator.h"
#include "core/backend.h"
#include "cuda/plugin_abi.h"

namespace streamattn {

class CudaBackend final : public Backend {
 public:
  // `stream` points at the context's stream (set by sattn_context_set_cuda_stream), which is
  // read at each call; alloc is the context's, for the buffers a call sizes from its arguments.
  CudaBackend(const sattn_cuda_plugin* plugin, void* const* stream, const Allocator& alloc)
      : plugin_(plugin), stream_(stream), alloc_(alloc) {}

  sattn_backend kind() const override { return SATTN_BACKEND_CUDA; }
  Status Exp2(const float* x, float* y, int64_t n) override;
  Status MergeStates(const MergeStatesArgs& args) override;
  Status Softmax(const SoftmaxArgs& args) override;
  Status SoftmaxTopK(const SoftmaxTopKArgs& args) override;
  Status Attention(const AttentionArgs& args) override;
  Status QuantizeKV(const QuantizeKVArgs& args) override;
  // Always a copy, in `storage`. It waits for the work already queued on the context's stream,
  // so a caller may fill the tensor on it.
  Status CopyToHost(const Tensor& t, const char* name, Vector<unsigned char>* storage,
                    Tensor* host) const override;

 private:
  const sattn_cuda_plugin* plugin_;
  void* const* stream_;
  Allocator alloc_;
};

}  // namespace streamattn

#endif  // STREAMATTN_CUDA_HOST_CUDA_BACKEND_H_
