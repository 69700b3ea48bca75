// The baselines `streamattn bench softmax` and `bench topk` are measured against, in the same
// run and on the same threads: the textbook three-pass safe softmax (max, sum, write) built from
// the library's own exp2 on the same SIMD target, and top-k as that softmax followed by
// std::partial_sort.
#ifndef STREAMATTN_BENCH_SOFTMAX_BASELINES_H_
#define STREAMATTN_BENCH_SOFTMAX_BASELINES_H_

#include <cstdint>

namespace streamattn {
namespace bench {

// Threads for the baselines (a oneTBB arena of `threads`, like the library's context).
class BaselinePool {
 public:
  explicit BaselinePool(int threads);
  ~BaselinePool();
  BaselinePool(const BaselinePool&) = delete;
  BaselinePool& operator=(const BaselinePool&) = delete;

  int threads() const { return threads_; }
  // Runs body(i) for i in [0, count), spread over the pool's threads.
  template <typename Body>
  void For(int64_t count, const Body& body) {
    RunFor(
        count, [](const void* b, int64_t i) { (*static_cast<const Body*>(b))(i); }, &body);
  }

 private:
  void RunFor(int64_t count, void (*call)(const void*, int64_t), const void* body);
  int threads_;
  void* arena_;
};

// out = softmax(in) over rows of n contiguous f32 scores, in three passes per row (max, sum of
// exp2((s - max) log2 e), write). Rows are spread over the pool; fewer rows than threads are
// split in `pool.threads()` pieces per pass.
void ThreePassSoftmax(BaselinePool& pool, const float* in, float* out, int64_t rows, int64_t n);

// For each row: the k most probable of probs (already a softmax), by std::partial_sort of an
// index array (`scratch`: rows * n int32), ties by lower index.
void PartialSortTopK(BaselinePool& pool, const float* probs, int32_t* scratch, int64_t rows,
                     int64_t n, int32_t k, int32_t* indices, float* top_probs);

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_SOFTMAX_BASELINES_H_
