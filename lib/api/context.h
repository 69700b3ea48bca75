// sattn_context: what a context owns (thread pool, per-worker scratch, the backends) and the
// choice of backend. Entry points reach the backend through ActiveBackend.
#ifndef STREAMATTN_API_CONTEXT_H_
#define STREAMATTN_API_CONTEXT_H_

#include <memory>
#include <string>

#include "core/backend.h"
#include "core/scratch.h"
#include "core/thread_pool.h"
#include "streamattn/streamattn.h"

struct sattn_context {
  sattn_context_options options{};
  std::unique_ptr<streamattn::ThreadPool> pool;
  streamattn::WorkerScratch scratch;
  std::unique_ptr<streamattn::Backend> cpu;
  streamattn::Backend* active = nullptr;

  // Strings handed out by sattn_context_get_info, owned here.
  std::string backend_reason;
  std::string simd_target;
  std::string compiled_targets;
  std::string cuda_availability;
};

#endif  // STREAMATTN_API_CONTEXT_H_
