// The CPU backend: Highway kernels, dispatched to the best SIMD target of the running CPU, and
// spread over the context's thread pool.
#ifndef STREAMATTN_CPU_CPU_BACKEND_H_
#define STREAMATTN_CPU_CPU_BACKEND_H_

#include <memory>
#include <string>

#include "core/backend.h"
#include "core/scratch.h"
#include "core/thread_pool.h"

namespace streamattn {

// pool and scratch are owned by the context and outlive the backend.
std::unique_ptr<Backend> CreateCpuBackend(ThreadPool* pool, WorkerScratch* scratch);

// The SIMD target the dispatcher picks on this CPU now ("AVX2", "NEON", ...).
const char* ChosenSimdTargetName();
// Every target compiled into this build, best first, separated by spaces.
std::string CompiledSimdTargetNames();

}  // namespace streamattn

#endif  // STREAMATTN_CPU_CPU_BACKEND_H_
