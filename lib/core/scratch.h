// WorkerScratch: one aligned buffer per worker thread, grown before a parallel region and
// reused across calls. Kernels size it from their tile shapes only (never from the sequence
// length), which is what keeps streamattn's memory independent of seq_q x seq_k.
#ifndef STREAMATTN_CORE_SCRATCH_H_
#define STREAMATTN_CORE_SCRATCH_H_

#include <cstddef>
#include <new>

#include "core/allocator.h"
#include "core/status.h"

namespace streamattn {

class WorkerScratch {
 public:
  static constexpr size_t kAlignment = 64;  // a cache line; also the widest vector (AVX-512)

  explicit WorkerScratch(const Allocator& alloc = Allocator()) : alloc_(alloc), buffers_(alloc) {}
  WorkerScratch(const WorkerScratch&) = delete;
  WorkerScratch& operator=(const WorkerScratch&) = delete;
  ~WorkerScratch() {
    for (void* p : buffers_) alloc_.Free(p);
  }

  // Makes every one of num_workers buffers at least `bytes` long. Fails without throwing; after
  // a failure the scratch holds no usable buffer (capacity 0) but stays valid, so the next call
  // simply tries again.
  Status Reserve(int num_workers, size_t bytes) {
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (bytes == 0) bytes = kAlignment;
    if (static_cast<int>(buffers_.size()) < num_workers) {
      try {
        buffers_.resize(num_workers, nullptr);
      } catch (const std::bad_alloc& e) {
        return OutOfMemory("per-thread scratch: %s", e.what());
      }
      capacity_ = 0;  // the new workers have nothing yet
    }
    if (bytes <= capacity_) return Status();
    capacity_ = 0;
    for (void*& p : buffers_) {
      alloc_.Free(p);
      p = alloc_.Allocate(bytes, kAlignment);
      if (p == nullptr) {
        char why[128];
        alloc_.DescribeFailure(bytes, kAlignment, why, sizeof(why));
        return OutOfMemory("per-thread scratch: %s", why);
      }
    }
    capacity_ = bytes;
    return Status();
  }

  // The worker's buffer as T*; valid until the next Reserve.
  template <typename T>
  T* Get(int worker) const {
    return static_cast<T*>(buffers_[worker]);
  }

 private:
  Allocator alloc_;
  Vector<void*> buffers_;
  size_t capacity_ = 0;  // bytes every buffer holds
};

}  // namespace streamattn

#endif  // STREAMATTN_CORE_SCRATCH_H_
