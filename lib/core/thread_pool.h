// ThreadPool: the parallel-for every kernel uses. Kernels split their work into independent
// tasks whose results do not depend on which worker runs them, so output bytes never depend on
// the thread count. The one implementation (thread_pool_tbb.cc) is the only file that names
// oneTBB.
#ifndef STREAMATTN_CORE_THREAD_POOL_H_
#define STREAMATTN_CORE_THREAD_POOL_H_

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

#include "core/allocator.h"

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
  // num_threads >= 1 counts the calling thread. The pool object comes from `alloc` (throws
  // AllocationFailure); oneTBB allocates its own arena and threads, on the first ParallelFor.
  static UniquePtr<ThreadPool> Create(int num_threads, const Allocator& alloc);
  // The number of hardware threads this process may use (its CPU affinity), >= 1.
  static int DefaultNumThreads();

  virtual ~ThreadPool() = default;
  virtual int NumWorkers() const = 0;

  // Runs body(task, worker) once for every task in [0, num_tasks); worker is in
  // [0, NumWorkers()) and no two concurrent calls share one, so it can index per-worker
  // scratch. Returns when all tasks are done. body must not throw.
  virtual void ParallelFor(int64_t num_tasks, FunctionRef<void(int64_t task, int worker)> body) = 0;
};

}  // namespace streamattn

#endif  // STREAMATTN_CORE_THREAD_POOL_H_
