// ThreadPool: the parallel-for every kernel uses. Kernels split their work into independent
// tasks whose results do not depend on which worker runs them, so output bytes never depend on
// the thread count or on who runs the tasks. Three implementations: oneTBB's
// (thread_pool_tbb.cc, the only file that names oneTBB), the caller's thread alone
// (thread_pool_serial.cc, the build without oneTBB) and the application's runner
// (thread_pool_runner.cc, sattn_context_options.runner).
#ifndef STREAMATTN_CORE_THREAD_POOL_H_
#define STREAMATTN_CORE_THREAD_POOL_H_

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/allocator.h"
#include "core/status.h"
#include "streamattn/streamattn.h"

namespace streamattn {

// A non-owning reference to a callable, cheaper than std::function (no allocation).
template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F,
            typename = std::enable_if_t<!std::is_same<std::decay_t<F>, FunctionRef>::value>>
  FunctionRef(F&& f)  // NOLINT: implicit, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  // The built-in pool: oneTBB's, or without it the calling thread alone. num_threads >= 1
  // counts the calling thread. The pool object comes from `alloc` (throws AllocationFailure);
  // oneTBB allocates its own arena and threads, on the first ParallelFor.
  static UniquePtr<ThreadPool> Create(int num_threads, const Allocator& alloc);
  // The application's runner with num_threads >= 1 thread slots (thread_pool_runner.cc).
  static UniquePtr<ThreadPool> CreateWithRunner(int num_threads, sattn_parallel_runner runner,
                                                void* runner_data, const Allocator& alloc);
  // The most threads the built-in pool runs, >= 1: the process's CPUs (its affinity) with
  // oneTBB, 1 without it.
  static int DefaultNumThreads();
  // The number of CPUs this process may use (its affinity), >= 1, oneTBB or not.
  static int AvailableCpus();

  virtual ~ThreadPool() = default;
  virtual int NumWorkers() const = 0;

  // Runs body(task, worker) once for every task in [0, num_tasks); worker is in
  // [0, NumWorkers()) and no two concurrent calls share one, so it can index per-worker
  // scratch. Returns when all tasks are done. body must not throw. Fails only with an
  // application's runner (SATTN_ERR_RUNNER_FAILED): then some tasks may not have run, so the
  // caller must return the status rather than read what the tasks would have written.
  [[nodiscard]] virtual Status ParallelFor(int64_t num_tasks,
                                           FunctionRef<void(int64_t task, int worker)> body) = 0;
};

// One thread: runs inline (no task overhead, no threads).
class InlinePool final : public ThreadPool {
 public:
  int NumWorkers() const override { return 1; }
  Status ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t, int)> body) override {
    for (int64_t task = 0; task < num_tasks; ++task) body(task, 0);
    return Status();
  }
};

}  // namespace streamattn

#endif  // STREAMATTN_CORE_THREAD_POOL_H_
