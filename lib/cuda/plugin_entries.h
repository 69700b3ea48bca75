// The plugin's operations, one per .cu file, gathered into the table by plugin.cu.
#ifndef STREAMATTN_CUDA_PLUGIN_ENTRIES_H_
#define STREAMATTN_CUDA_PLUGIN_ENTRIES_H_

#include "cuda/plugin_abi.h"

namespace streamattn {
namespace cuda {

int32_t RunAttention(const sattn_cuda_attention_args* args, char* message, size_t message_size);
int32_t RunMergeStates(const sattn_cuda_merge_args* args, char* message, size_t message_size);

}  // namespace cuda
}  // namespace streamattn

#endif  // STREAMATTN_CUDA_PLUGIN_ENTRIES_H_
