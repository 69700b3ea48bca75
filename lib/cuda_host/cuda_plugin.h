// Finding and checking the optional CUDA plugin (lib/cuda/plugin_abi.h). The core library never
// links CUDA; a missing, broken or mismatched plugin is a reason to run on the CPU, never an
// error at load time.
#ifndef STREAMATTN_CUDA_HOST_CUDA_PLUGIN_H_
#define STREAMATTN_CUDA_HOST_CUDA_PLUGIN_H_

#include <string>

#include "cuda/plugin_abi.h"

namespace streamattn {

struct CudaPluginStatus {
  const sattn_cuda_plugin* plugin = nullptr;  // nullptr: unusable, see reason
  int32_t devices = 0;                        // usable devices (0 when plugin is nullptr)
  std::string path;                           // where it was looked for
  std::string reason;                         // why it cannot be used, or what it is
};

// The plugin at $STREAMATTN_CUDA_PLUGIN, else libstreamattn_cuda.so beside libstreamattn. Each
// path is loaded once per process and never unloaded (a CUDA runtime must not be unloaded
// while its threads may live); the result is cached per path. Thread-safe.
const CudaPluginStatus& FindCudaPlugin();

}  // namespace streamattn

#endif  // STREAMATTN_CUDA_HOST_CUDA_PLUGIN_H_
