// WorkerScratch: one aligned buffer per worker thread, grown before a parallel region and
// reused across calls. Kernels size it from their tile shapes only (never from the sequence
// length), which is what keeps streamattn's memory independent of seq_q x seq_k.
#ifndef STREAMATTN_CORE_SCRATCH_H_
#define STREAMATTN_CORE_SCRATCH_H_

#include <cstddef>
#include <cstdlib>
#include <vector>

#include "core/status.h"

namespace streamattn {

class WorkerScratch {
 public:
  static constexpr size_t kAlignment = 64;  // a cache line; also the widest vector (AVX-512)

  WorkerScratch() = default;
  WorkerScratch(const WorkerScratch&) = delete;
  WorkerScratch& operator=(const WorkerScratch&) = delete;
  ~WorkerScratch() {
    for (void* p : buffers_) std::free(p);
  }

  // Makes every one of num_workers buffers at least `bytes` long. Fails without throwing.
  Status Reserve(int num_workers, size_t bytes) {
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (bytes == 0) bytes = kAlignment;
    if (static_cast<int>(buffers_.size()) < num_workers) {
      buffers_.resize(num_workers, nullptr);
      capacity_ = 0;  // the new workers have nothing yet
    }
    if (bytes <= capacity_) return Status();
    for (void*& p : buffers_) {
      std::free(p);
      p = std::aligned_alloc(kAlignment, bytes);
      if (p == nullptr) {
        capacity_ = 0;
        return OutOfMemory("could not allocate %zu bytes of per-thread scratch", bytes);
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
  std::vector<void*> buffers_;
  size_t capacity_ = 0;  // bytes every buffer holds
};

}  // namespace streamattn

#endif  // STREAMATTN_CORE_SCRATCH_H_
