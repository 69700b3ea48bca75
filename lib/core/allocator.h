// Allocator: where a context's memory comes from, the caller's functions (the allocator fields
// of sattn_context_options) or the C library's aligned_alloc. Everything streamattn keeps in a
// context or sizes from a call's arguments goes through one: per-thread scratch, split-KV
// partial states, per-row and per-part bookkeeping, copies of per-head and per-sequence options,
// the context itself. A failure is SATTN_ERR_OUT_OF_MEMORY, never an abort: code that returns
// Status checks Allocate's nullptr, containers (Vector) throw AllocationFailure, a
// std::bad_alloc that RunGuarded turns into the status. Every call allocates all it needs
// before it writes its first output byte, so an out-of-memory call leaves outputs untouched.
#ifndef STREAMATTN_CORE_ALLOCATOR_H_
#define STREAMATTN_CORE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace streamattn {

class Allocator {
 public:
  using AllocFn = void* (*)(void* user, size_t bytes, size_t alignment);
  using FreeFn = void (*)(void* user, void* p);

  Allocator() = default;  // the C library's
  Allocator(AllocFn alloc_fn, FreeFn free_fn, void* user)
      : alloc_fn_(alloc_fn), free_fn_(free_fn), user_(user) {}

  // `bytes` (> 0) aligned to `alignment` (a power of two, at most 64), or nullptr when the
  // allocator fails. Memory a caller's function returns misaligned is handed back to it and
  // counts as a failure: the kernels' aligned loads would fault on it.
  void* Allocate(size_t bytes, size_t alignment) const noexcept {
    if (alloc_fn_ == nullptr) {
      alignment = alignment < alignof(std::max_align_t) ? alignof(std::max_align_t) : alignment;
      if (bytes > std::numeric_limits<size_t>::max() - alignment) return nullptr;
      return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    }
    void* p = alloc_fn_(user_, bytes, alignment);
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % alignment != 0) {
      free_fn_(user_, p);
      return nullptr;
    }
    return p;
  }

  void Free(void* p) const noexcept {
    if (p == nullptr) return;
    if (free_fn_ == nullptr) {
      std::free(p);
    } else {
      free_fn_(user_, p);
    }
  }

  // "options->alloc_fn returned NULL for 4096 bytes (alignment 64)", for error messages.
  void DescribeFailure(size_t bytes, size_t alignment, char* text, size_t size) const {
    std::snprintf(text, size,
                  "%s returned NULL (or misaligned memory) for %zu bytes (alignment %zu)",
                  alloc_fn_ != nullptr ? "options->alloc_fn" : "aligned_alloc", bytes, alignment);
  }

  friend bool operator==(const Allocator& a, const Allocator& b) {
    return a.alloc_fn_ == b.alloc_fn_ && a.free_fn_ == b.free_fn_ && a.user_ == b.user_;
  }
  friend bool operator!=(const Allocator& a, const Allocator& b) { return !(a == b); }

 private:
  AllocFn alloc_fn_ = nullptr;
  FreeFn free_fn_ = nullptr;
  void* user_ = nullptr;
};

// What containers throw when the allocator fails; RunGuarded reports what() with the status.
class AllocationFailure : public std::bad_alloc {
 public:
  AllocationFailure(const Allocator& alloc, size_t bytes, size_t alignment) {
    alloc.DescribeFailure(bytes, alignment, text_, sizeof(text_));
  }
  const char* what() const noexcept override { return text_; }

 private:
  char text_[128];
};

// A standard-library allocator over an Allocator, so containers draw from the context's.
template <typename T>
class StlAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  StlAllocator() = default;
  StlAllocator(const Allocator& alloc) : alloc_(alloc) {}  // NOLINT: implicit, to pass contexts'
  template <typename U>
  StlAllocator(const StlAllocator<U>& other) : alloc_(other.allocator()) {}  // NOLINT

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) {
      throw AllocationFailure(alloc_, std::numeric_limits<size_t>::max(), alignof(T));
    }
    void* p = alloc_.Allocate(n * sizeof(T), alignof(T));
    if (p == nullptr) throw AllocationFailure(alloc_, n * sizeof(T), alignof(T));
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { alloc_.Free(p); }

  const Allocator& allocator() const { return alloc_; }
  template <typename U>
  bool operator==(const StlAllocator<U>& other) const {
    return alloc_ == other.allocator();
  }
  template <typename U>
  bool operator!=(const StlAllocator<U>& other) const {
    return !(*this == other);
  }

 private:
  Allocator alloc_;
};

template <typename T>
using Vector = std::vector<T, StlAllocator<T>>;

// Objects owned through an Allocator: MakeUnique constructs (throwing AllocationFailure when the
// allocator fails), the deleter destroys and frees. Deleting through a base pointer needs a
// virtual destructor and single inheritance (the base's address is the object's).
template <typename T>
class AllocatorDelete {
 public:
  AllocatorDelete() = default;
  explicit AllocatorDelete(const Allocator& alloc) : alloc_(alloc) {}
  template <typename U, typename = std::enable_if_t<std::is_convertible<U*, T*>::value>>
  AllocatorDelete(const AllocatorDelete<U>& other) : alloc_(other.allocator()) {}  // NOLINT

  void operator()(T* p) const noexcept {
    p->~T();
    alloc_.Free(p);
  }
  const Allocator& allocator() const { return alloc_; }

 private:
  Allocator alloc_;
};

template <typename T>
using UniquePtr = std::unique_ptr<T, AllocatorDelete<T>>;

template <typename T, typename... Args>
UniquePtr<T> MakeUnique(const Allocator& alloc, Args&&... args) {
  void* memory = alloc.Allocate(sizeof(T), alignof(T));
  if (memory == nullptr) throw AllocationFailure(alloc, sizeof(T), alignof(T));
  T* object;
  try {
    object = new (memory) T(std::forward<Args>(args)...);
  } catch (...) {
    alloc.Free(memory);
    throw;
  }
  return UniquePtr<T>(object, AllocatorDelete<T>(alloc));
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_ALLOCATOR_H_
