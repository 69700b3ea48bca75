// The one file that names oneTBB: a task_arena per context, sized to its thread count. Left out
// of a build with STREAMATTN_TBB=OFF, where thread_pool_serial.cc stands in.
#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"

// oneTBB hands tasks to its threads, and learns they are done, inside libtbb, which Debian ships
// without ThreadSanitizer instrumentation: TSan cannot see those two edges and reports every
// input a task reads and every result the caller reads after ParallelFor as a race. Under TSan
// the pool states the two edges oneTBB guarantees (caller before each task, each task before
// the caller's return), on two separate sync addresses so that tasks never appear ordered with
// one another: a race between two tasks is still reported.
#if defined(__SANITIZE_THREAD__)
#define STREAMATTN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STREAMATTN_TSAN 1
#endif
#endif
#ifdef STREAMATTN_TSAN
#include <sanitizer/tsan_interface.h>
#define STREAMATTN_TSAN_RELEASE(address) __tsan_release(address)
#define STREAMATTN_TSAN_ACQUIRE(address) __tsan_acquire(address)
#else
#define STREAMATTN_TSAN_RELEASE(address) static_cast<void>(address)
#define STREAMATTN_TSAN_ACQUIRE(address) static_cast<void>(address)
#endif

namespace streamattn {
namespace {

class TbbPool final : public ThreadPool {
 public:
  explicit TbbPool(int num_threads) : num_threads_(num_threads), arena_(num_threads) {}

  int NumWorkers() const override { return num_threads_; }

  Status ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t, int)> body) override {
    if (num_tasks <= 1) {
      if (num_tasks == 1) body(0, 0);
      return Status();
    }
    char started, finished;  // sync addresses for ThreadSanitizer only (see the top)
    // Tasks are coarse (a query block, a row chunk) and callers list the heaviest first (a long
    // prompt's last blocks before thirty short prompts'): each worker takes the next task in
    // index order from one counter, so they run greedily in that order and the last to start
    // are the lightest. Splitting the range instead (a simple_partitioner's halves) sent the
    // second thread to the middle of the list. On a 2-core Zen 4 host one 8192-token prompt
    // beside thirty of 64 ran 1.4-2.2% slower than the long one alone that way (3 runs) and
    // 0.7-2.5% this way (5 runs, median 0.8%), where the short ones' own call takes 0.5%.
    // Set before the release below, so that TSan sees the workers' first use after it.
    std::atomic<int64_t> next{0};
    STREAMATTN_TSAN_RELEASE(&started);
    arena_.execute([&] {
      tbb::parallel_for(
          tbb::blocked_range<int>(0, num_threads_, 1),
          [&](const tbb::blocked_range<int>& /* one worker's share: whatever it takes */) {
            STREAMATTN_TSAN_ACQUIRE(&started);
            const int worker = tbb::this_task_arena::current_thread_index();
            for (int64_t task = next.fetch_add(1, std::memory_order_relaxed); task < num_tasks;
                 task = next.fetch_add(1, std::memory_order_relaxed)) {
              body(task, worker);
            }
            STREAMATTN_TSAN_RELEASE(&finished);
          },
          tbb::simple_partitioner());
    });
    STREAMATTN_TSAN_ACQUIRE(&finished);
    return Status();
  }

 private:
  int num_threads_;
  tbb::task_arena arena_;
};

}  // namespace

UniquePtr<ThreadPool> ThreadPool::Create(int num_threads, const Allocator& alloc) {
  if (num_threads <= 1) return MakeUnique<InlinePool>(alloc);
  return MakeUnique<TbbPool>(alloc, num_threads);
}

int ThreadPool::DefaultNumThreads() {
  const int n = tbb::info::default_concurrency();
  return n >= 1 ? n : 1;
}

}  // namespace streamattn
