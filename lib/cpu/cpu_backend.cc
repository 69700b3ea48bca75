#include "cpu/cpu_backend.h"

#include <algorithm>

#include "cpu/exp2.h"
#include "cpu/merge_states.h"
#include "hwy/targets.h"

namespace streamattn {
namespace {

// Splits `rows` rows of `cost_per_row` work units into tasks big enough to amortise a task's
// overhead (~a microsecond) and numerous enough to keep every worker busy.
int64_t RowsPerTask(int64_t rows, int64_t cost_per_row, int workers) {
  constexpr int64_t kMinTaskCost = 1 << 14;
  const int64_t by_cost = std::max<int64_t>(1, kMinTaskCost / std::max<int64_t>(1, cost_per_row));
  const int64_t by_balance = std::max<int64_t>(1, rows / (4 * static_cast<int64_t>(workers)));
  return std::min(by_cost > by_balance ? by_cost : by_balance, rows);
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(ThreadPool* pool, WorkerScratch* scratch) : pool_(pool), scratch_(scratch) {}

  sattn_backend kind() const override { return SATTN_BACKEND_CPU; }

  Status Exp2(const float* x, float* y, int64_t n) override {
    constexpr int64_t kChunk = 1 << 16;
    const int64_t tasks = (n + kChunk - 1) / kChunk;
    pool_->ParallelFor(tasks, [&](int64_t task, int) {
      const int64_t begin = task * kChunk;
      Exp2Array(x + begin, y + begin, static_cast<size_t>(std::min(kChunk, n - begin)));
    });
    return Status();
  }

  Status MergeStates(const MergeStatesArgs& args) override {
    const int64_t rows = args.out.dim(0) * args.out.dim(1) * args.out.dim(2);
    const int workers = pool_->NumWorkers();
    SATTN_RETURN_IF_ERROR(
        scratch_->Reserve(workers, MergeStatesScratchFloats(args) * sizeof(float)));
    const MergeStatesRowsFn merge_rows = ResolveMergeStatesRows();
    const int64_t rows_per_task =
        RowsPerTask(rows, (args.num_parts + 1) * args.out.dim(3), workers);
    const int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
    pool_->ParallelFor(tasks, [&](int64_t task, int worker) {
      const int64_t begin = task * rows_per_task;
      merge_rows(args, begin, std::min(rows, begin + rows_per_task), scratch_->Get<float>(worker));
    });
    return Status();
  }

 private:
  ThreadPool* pool_;
  WorkerScratch* scratch_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(ThreadPool* pool, WorkerScratch* scratch) {
  return std::make_unique<CpuBackend>(pool, scratch);
}

std::string CompiledSimdTargetNames() {
  std::string names;
  for (int64_t bit = 1; bit != 0 && bit <= HWY_SCALAR; bit <<= 1) {
    if ((HWY_TARGETS & bit) == 0) continue;
    if (!names.empty()) names += ' ';
    names += hwy::TargetName(bit);
  }
  return names;
}

}  // namespace streamattn
