// sattn_context: what a context owns (thread pool, per-worker scratch, the backends) and the
// choice of backend. Entry points reach a backend by the device of their tensors
// (CallDevice::backend), sattn_exp2's host arrays always the cpu one; `active` is only what
// sattn_context_get_info reports.
#ifndef STREAMATTN_API_CONTEXT_H_
#define STREAMATTN_API_CONTEXT_H_

#include <mutex>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/scratch.h"
#include "core/thread_pool.h"
#include "streamattn/streamattn.h"

// The context and all it owns live in memory from its allocator (sattn_context_create places
// it there), so nothing here may allocate through operator new.
struct sattn_context {
  explicit sattn_context(const streamattn::Allocator& alloc) : allocator(alloc), scratch(alloc) {}

  streamattn::Allocator allocator;  // first: everything below is freed through it
  sattn_context_options options{};
  // Held for the whole of every call on this context: calls from several threads run one at a
  // time (they share scratch), and the allocator is never entered concurrently for a context.
  std::mutex call_mutex;
  streamattn::UniquePtr<streamattn::ThreadPool> pool;
  streamattn::WorkerScratch scratch;
  streamattn::UniquePtr<streamattn::Backend> cpu;
  // Set when the context runs on CUDA: device tensors go there, host tensors to `cpu`.
  streamattn::UniquePtr<streamattn::Backend> cuda;
  streamattn::Backend* active = nullptr;  // cuda when set, else cpu
  void* cuda_stream = nullptr;            // a cudaStream_t; nullptr: the default stream

  // Strings handed out by sattn_context_get_info: held here.
  char backend_reason[640] = {};
  const char* simd_target = "";
  const char* f32_kernel = "";  // the prefill tile kernel per input dtype (static strings)
  const char* f16_kernel = "";
  const char* bf16_kernel = "";
  char compiled_targets[256] = {};
  char cuda_availability[640] = {};
};

#endif  // STREAMATTN_API_CONTEXT_H_
