// The per-row kernel of sattn_merge_states, dispatched to the SIMD target.
#ifndef STREAMATTN_CPU_MERGE_STATES_H_
#define STREAMATTN_CPU_MERGE_STATES_H_

#include <cstddef>
#include <cstdint>

#include "core/backend.h"

namespace streamattn {

// Floats of scratch MergeStatesRows needs per worker.
size_t MergeStatesScratchFloats(const MergeStatesArgs& args);

// Merges rows [row_begin, row_end) of the flattened (batch, seq, heads) index space, with
// MergeStatesScratchFloats of scratch.
using MergeStatesRowsFn = void (*)(const MergeStatesArgs& args, int64_t row_begin, int64_t row_end,
                                   float* scratch);

// The kernel for the SIMD target chosen now; resolve once per call, not per task.
MergeStatesRowsFn ResolveMergeStatesRows();

}  // namespace streamattn

#endif  // STREAMATTN_CPU_MERGE_STATES_H_
