// The application's own threads (sattn_context_options.runner, libjxl's JxlParallelRunner
// pattern): every ParallelFor becomes one runner(runner_data, task, task_data, count) call, and
// the runner hands each task call a thread slot that the kernels use as their worker index.
// What the runner gets wrong must not become a data race on per-worker scratch or an
// out-of-bounds index, so each task call claims its slot (one atomic exchange per task; tasks
// are coarse, a query block or a row chunk) and checks its index before running.
#include <atomic>
#include <cinttypes>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

#include "core/thread_pool.h"

namespace streamattn {
namespace {

class RunnerPool final : public ThreadPool {
 public:
  RunnerPool(int num_threads, sattn_parallel_runner runner, void* runner_data,
             const Allocator& alloc)
      : runner_(runner), runner_data_(runner_data), busy_(num_threads, alloc) {
    for (std::atomic<uint8_t>& slot : busy_) slot.store(0, std::memory_order_relaxed);
  }

  int NumWorkers() const override { return static_cast<int>(busy_.size()); }

  Status ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t, int)> body) override {
    if (num_tasks <= 0) return Status();
    Job job{this, body, num_tasks};
    const int32_t code = runner_(runner_data_, &RunTask, &job, num_tasks);
    if (code != 0) {
      return RunnerFailed("options->runner returned %" PRId32 " for a loop of %" PRId64
                          " indices (the call's outputs are unspecified)",
                          code, num_tasks);
    }
    const int64_t index = job.problem_index.load(std::memory_order_relaxed);
    const int32_t thread = job.problem_thread.load(std::memory_order_relaxed);
    switch (job.problem.load(std::memory_order_relaxed)) {
      case kBadIndex:
        return RunnerFailed("options->runner passed index %" PRId64 ", outside [0, count=%" PRId64
                            ") (not run; the call's outputs are unspecified)",
                            index, num_tasks);
      case kBadThread:
        return RunnerFailed("options->runner passed thread %" PRId32
                            ", outside [0, num_threads=%d) (index %" PRId64
                            " not run; the call's outputs are unspecified)",
                            thread, NumWorkers(), index);
      case kSlotInUse:
        return RunnerFailed("options->runner ran two indices at once on thread slot %" PRId32
                            " (index %" PRId64 " not run; the call's outputs are unspecified)",
                            thread, index);
      default:
        break;
    }
    const int64_t ran = job.ran.load(std::memory_order_relaxed);
    if (ran != num_tasks) {
      return RunnerFailed("options->runner returned 0 after %" PRId64
                          " task calls for a loop of %" PRId64
                          " indices (each must run exactly once; the call's outputs are "
                          "unspecified)",
                          ran, num_tasks);
    }
    return Status();
  }

 private:
  enum Problem : int { kNone, kBadIndex, kBadThread, kSlotInUse };

  struct Job {
    RunnerPool* pool;
    FunctionRef<void(int64_t, int)> body;
    int64_t count;
    std::atomic<int64_t> ran{0};
    std::atomic<int> problem{kNone};  // the first one found
    std::atomic<int64_t> problem_index{0};
    std::atomic<int32_t> problem_thread{0};

    void Report(Problem kind, int64_t index, int32_t thread) {
      int none = kNone;
      if (problem.compare_exchange_strong(none, kind, std::memory_order_relaxed)) {
        problem_index.store(index, std::memory_order_relaxed);
        problem_thread.store(thread, std::memory_order_relaxed);
      }
    }
  };

  static void RunTask(void* data, int64_t index, int32_t thread) {
    Job& job = *static_cast<Job*>(data);
    if (index < 0 || index >= job.count) return job.Report(kBadIndex, index, thread);
    if (thread < 0 || thread >= job.pool->NumWorkers()) {
      return job.Report(kBadThread, index, thread);
    }
    std::atomic<uint8_t>& slot = job.pool->busy_[static_cast<size_t>(thread)];
    // acquire/release: the previous holder's writes to this slot's scratch happen before ours.
    if (slot.exchange(1, std::memory_order_acquire) != 0) {
      return job.Report(kSlotInUse, index, thread);
    }
    job.body(index, thread);
    slot.store(0, std::memory_order_release);
    job.ran.fetch_add(1, std::memory_order_relaxed);
  }

  sattn_parallel_runner runner_;
  void* runner_data_;
  Vector<std::atomic<uint8_t>> busy_;  // per thread slot: a task is running on it
};

}  // namespace

UniquePtr<ThreadPool> ThreadPool::CreateWithRunner(int num_threads, sattn_parallel_runner runner,
                                                   void* runner_data, const Allocator& alloc) {
  return MakeUnique<RunnerPool>(alloc, num_threads, runner, runner_data, alloc);
}

int ThreadPool::AvailableCpus() {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) >= 1) return CPU_COUNT(&set);
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n >= 1 ? static_cast<int>(n) : 1;
}

}  // namespace streamattn
