// The one file that names oneTBB: a task_arena per context, sized to its thread count.
#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include "core/thread_pool.h"

namespace streamattn {
namespace {

// One thread: run inline, without entering an arena (no task overhead, no TBB threads).
class InlinePool final : public ThreadPool {
 public:
  int NumWorkers() const override { return 1; }
  void ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t, int)> body) override {
    for (int64_t task = 0; task < num_tasks; ++task) body(task, 0);
  }
};

class TbbPool final : public ThreadPool {
 public:
  explicit TbbPool(int num_threads) : num_threads_(num_threads), arena_(num_threads) {}

  int NumWorkers() const override { return num_threads_; }

  void ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t, int)> body) override {
    if (num_tasks <= 1) {
      if (num_tasks == 1) body(0, 0);
      return;
    }
    arena_.execute([&] {
      // Tasks are coarse (a query block, a row chunk): one per range, so a slow task never
      // holds others hostage; the simple partitioner does not merge ranges.
      tbb::parallel_for(
          tbb::blocked_range<int64_t>(0, num_tasks, 1),
          [&](const tbb::blocked_range<int64_t>& range) {
            const int worker = tbb::this_task_arena::current_thread_index();
            for (int64_t task = range.begin(); task != range.end(); ++task) body(task, worker);
          },
          tbb::simple_partitioner());
    });
  }

 private:
  int num_threads_;
  tbb::task_arena arena_;
};

}  // namespace

std::unique_ptr<ThreadPool> ThreadPool::Create(int num_threads) {
  if (num_threads <= 1) return std::make_unique<InlinePool>();
  return std::make_unique<TbbPool>(num_threads);
}

int ThreadPool::DefaultNumThreads() {
  const int n = tbb::info::default_concurrency();
  return n >= 1 ? n : 1;
}

}  // namespace streamattn
