// The candidate lists of softmax + top-k, scalar side. A candidate is (score, index) packed
// into one 64-bit key whose unsigned order is the documented order of the result: higher score
// first, equal scores by lower index. That order is total, so the k best of a row are unique
// and lists from different parts merge exactly, in any order: keep the k best of the union.
//
// CandidateStore is a part's (or a whole row's) collection: SIMD code appends scores that pass
// `threshold` to values/indices; Prune moves them into `keys`, keeps the k best (nth_element,
// linear) and raises the threshold to just above the k-th best, which later scores must reach.
// Scanning in index order, a score equal to the k-th best loses to it, so it is not needed.
// With capacity >= k + some vectors, a prune costs O(capacity) per (capacity - k) accepted
// scores: linear in n even for ascending rows, and ~k ln(n / k) accepts on random ones.
//
// Stores of one row on different threads may share a bound (Share): any store's k-th best is a
// lower bound on the row's k-th best, so every store may drop scores below it. Equal scores are
// kept (a lower index elsewhere may still win the tie); the result is unique either way.
#ifndef STREAMATTN_CPU_TOPK_CANDIDATES_H_
#define STREAMATTN_CPU_TOPK_CANDIDATES_H_

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>

#include "core/dtype.h"

namespace streamattn {

// The key of score `value` (not NaN) at `index` (< 2^31); -0 counts as +0.
inline uint64_t TopKKey(float value, uint32_t index) {
  uint32_t bits = FloatBits(value);
  if (bits == 0x80000000u) bits = 0;
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - index);
}

inline float TopKKeyValue(uint64_t key) {
  const uint32_t ordered = static_cast<uint32_t>(key >> 32);
  return BitsToFloat((ordered & 0x80000000u) ? (ordered & 0x7FFFFFFFu) : ~ordered);
}

inline int32_t TopKKeyIndex(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

// Moves the best min(k, count) of keys[0, count) to the front (unordered); returns how many.
inline size_t KeepBestKeys(uint64_t* keys, size_t count, size_t k) {
  if (count <= k) return count;
  std::nth_element(keys, keys + (k - 1), keys + count, std::greater<uint64_t>());
  return k;
}

class CandidateStore {
 public:
  // Bytes of the buffer Init needs: keys (k + capacity), then values and indices (capacity).
  static size_t Capacity(size_t k, size_t lanes) { return 2 * k + 4 * lanes; }
  static size_t Bytes(size_t k, size_t lanes) {
    return (k + Capacity(k, lanes)) * sizeof(uint64_t) +
           Capacity(k, lanes) * (sizeof(float) + sizeof(int32_t));
  }

  // buffer: Bytes(k, lanes) bytes, 8-byte aligned. Starts empty.
  void Init(void* buffer, size_t k, size_t lanes) {
    k_ = k;
    capacity_ = Capacity(k, lanes);
    keys_ = static_cast<uint64_t*>(buffer);
    values_ = reinterpret_cast<float*>(keys_ + k + capacity_);
    indices_ = reinterpret_cast<int32_t*>(values_ + capacity_);
    Reset();
  }
  void Reset() {
    kept_ = count_ = 0;
    threshold_ = -std::numeric_limits<float>::infinity();
    shared_ = nullptr;
  }

  // Joins the bound shared by the stores of one row (until the next Reset).
  void Share(std::atomic<float>* row_bound) {
    shared_ = row_bound;
    Sync();
  }

  // A score must be >= threshold() to matter (-inf until k scores are kept here or elsewhere).
  float threshold() {
    Sync();
    return threshold_;
  }
  // Room for `n` more appended candidates at values() + count() (pruning first if needed).
  void MakeRoom(size_t n) {
    if (count_ + n > capacity_) Prune();
  }
  float* values() { return values_ + count_; }
  int32_t* indices() { return indices_ + count_; }
  void Appended(size_t n) { count_ += n; }

  void Prune() {
    for (size_t i = 0; i < count_; ++i) {
      keys_[kept_ + i] = TopKKey(values_[i], static_cast<uint32_t>(indices_[i]));
    }
    kept_ = KeepBestKeys(keys_, kept_ + count_, k_);
    count_ = 0;
    if (kept_ == k_) {
      const float kth = TopKKeyValue(*std::min_element(keys_, keys_ + kept_));
      threshold_ =
          std::max(threshold_, std::nextafter(kth, std::numeric_limits<float>::infinity()));
      if (shared_ != nullptr) {
        float bound = shared_->load(std::memory_order_relaxed);
        while (kth > bound &&
               !shared_->compare_exchange_weak(bound, kth, std::memory_order_relaxed)) {
        }
      }
    }
  }

  // Prunes, then the kept keys (at most k, unordered).
  uint64_t* Kept(size_t* count) {
    Prune();
    *count = kept_;
    return keys_;
  }

 private:
  size_t k_ = 0, capacity_ = 0;
  uint64_t* keys_ = nullptr;  // [0, kept_): the best so far
  float* values_ = nullptr;   // [0, count_): appended since the last prune
  int32_t* indices_ = nullptr;
  size_t kept_ = 0, count_ = 0;
  float threshold_ = -std::numeric_limits<float>::infinity();
  std::atomic<float>* shared_ = nullptr;  // relaxed: a stale bound is only a lower one

  void Sync() {
    if (shared_ != nullptr) {
      threshold_ = std::max(threshold_, shared_->load(std::memory_order_relaxed));
    }
  }
};

}  // namespace streamattn

#endif  // STREAMATTN_CPU_TOPK_CANDIDATES_H_
