// The built-in pool of a build without oneTBB (STREAMATTN_TBB=OFF): the calling thread alone,
// so such a library never starts a thread; an application that wants more passes its own
// runner (thread_pool_runner.cc). Stands in for thread_pool_tbb.cc.
#include "core/thread_pool.h"

namespace streamattn {

UniquePtr<ThreadPool> ThreadPool::Create(int, const Allocator& alloc) {
  return MakeUnique<InlinePool>(alloc);
}

int ThreadPool::DefaultNumThreads() { return 1; }

}  // namespace streamattn
