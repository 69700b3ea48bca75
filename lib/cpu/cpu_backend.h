// The CPU backend: Highway kernels, dispatched to the best SIMD target of the running CPU, and
// spread over the context's thread pool. Each operation's method is defined next to its kernel
// (merge_states.cc, exp2.cc, ...), so adding an operation touches this class and a new file.
#ifndef STREAMATTN_CPU_CPU_BACKEND_H_
#define STREAMATTN_CPU_CPU_BACKEND_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/dtype.h"
#include "core/scratch.h"
#include "core/thread_pool.h"

namespace streamattn {

// One block of a packed batch's query positions [pos0, pos0 + plan.positions) of sequence b,
// with its estimated work (attention.cc, BlockCost), for the work split's order.
struct PackedBlock {
  int64_t cost, b, pos0;
};

class CpuBackend final : public Backend {
 public:
  // pool and scratch are owned by the context and outlive the backend; alloc is the
  // context's, for the buffers a call sizes from its arguments.
  // cpu_kernel: a sattn_cpu_kernel the caller has checked (PrefillTileKernelName).
  CpuBackend(ThreadPool* pool, WorkerScratch* scratch, const Allocator& alloc, int32_t cpu_kernel)
      : pool_(pool),
        scratch_(scratch),
        alloc_(alloc),
        cpu_kernel_(cpu_kernel),
        split_partials_(alloc),
        work_order_(alloc) {}

  sattn_backend kind() const override { return SATTN_BACKEND_CPU; }
  Status Exp2(const float* x, float* y, int64_t n) override;
  Status MergeStates(const MergeStatesArgs& args) override;
  Status Softmax(const SoftmaxArgs& args) override;
  Status SoftmaxTopK(const SoftmaxTopKArgs& args) override;
  Status Attention(const AttentionArgs& args) override;
  Status QuantizeKV(const QuantizeKVArgs& args) override;
  Status CopyToHost(const Tensor& t, const char* name, Vector<unsigned char>* storage,
                    Tensor* host) const override;

 private:
  ThreadPool* pool_;
  WorkerScratch* scratch_;
  Allocator alloc_;
  int32_t cpu_kernel_;              // sattn_cpu_kernel: which prefill tile kernels may run
  Vector<float> split_partials_;    // split-KV partial states, reused across calls
  Vector<PackedBlock> work_order_;  // packed batches' position blocks, heaviest first
};

// Splits `items` independent items of `cost_per_item` work units (about a multiply-add each)
// into tasks big enough to amortise a task's overhead (~a microsecond) and numerous enough to
// keep every worker busy. Depends only on the problem and the worker count, never on timing.
inline int64_t ItemsPerTask(int64_t items, int64_t cost_per_item, int workers) {
  constexpr int64_t kMinTaskCost = 1 << 14;
  const int64_t by_cost = std::max<int64_t>(1, kMinTaskCost / std::max<int64_t>(1, cost_per_item));
  const int64_t by_balance = std::max<int64_t>(1, items / (4 * static_cast<int64_t>(workers)));
  return std::min(std::max(by_cost, by_balance), std::max<int64_t>(items, 1));
}

// The name of the tile kernel prefill-shaped attention runs on this CPU now, for q, k and v
// of one float dtype, under cpu_kernel (a sattn_cpu_kernel): "f32-fma", "avx512-bf16".
const char* PrefillTileKernelName(DType dtype, int32_t cpu_kernel);

// The SIMD target the dispatcher picks on this CPU now ("AVX2", "NEON", ...).
const char* ChosenSimdTargetName();
// Every target compiled into this build, best first, separated by spaces, into text[size]
// (no allocation: contexts keep it without touching the heap).
void CompiledSimdTargetNames(char* text, size_t size);

}  // namespace streamattn

#endif  // STREAMATTN_CPU_CPU_BACKEND_H_
