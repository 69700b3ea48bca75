// sattn_softmax_topk on the CPU: Milakov and Gimelshein's fused softmax + top-k. One read of
// the scores gives both the row's state (m, l), exactly as pass 1 of the softmax
// (softmax-inl.h), and its k best scores: a block of four vectors whose maximum is below the
// current k-th best costs the same single compare that gates the state's rescale, and only
// blocks that beat it go to the candidate store (topk_candidates.h). Probabilities of the k
// winners come from the final state: exp2((s − max) c) / l. Long rows are split into parts (fixed
// by n alone); parts' states fold with ⊕ in part order and their lists merge exactly, so the
// bytes do not depend on the thread count. Scratch per worker: one chunk and O(k) candidates.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/softmax_topk.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/softmax-inl.h"
// clang-format on
#include <algorithm>
#include <atomic>
#include <functional>
#include <limits>
#include <mutex>
#include <vector>

#include "core/exp2_scalar.h"
#include "cpu/cpu_backend.h"
#include "cpu/softmax_rows.h"
#include "cpu/topk_candidates.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// The SIMD side of a CandidateStore: a vector's scores at or above the threshold are
// compressed into the store with their indices.
template <class D>
class SimdCandidates {
 public:
  using V = hn::Vec<D>;

  explicit SimdCandidates(CandidateStore* store) : store_(store) {}

  float threshold() { return store_->threshold(); }

  // `threshold` may be stale (lower) after a prune within the block: extra candidates are
  // harmless, the next prune drops them.
  HWY_INLINE void Offer(D d, V x, V threshold, size_t first_index, size_t valid) {
    const size_t lanes = hn::Lanes(d);
    auto take = hn::Ge(x, threshold);  // false for NaN: a NaN is never a candidate
    if (valid < lanes) take = hn::And(take, hn::FirstN(d, valid));
    if (hn::AllFalse(d, take)) return;
    store_->MakeRoom(lanes);
    const hn::RebindToSigned<D> di;
    // Indices wrap past 2^31 only in lanes beyond the row's end, which `take` excludes.
    const auto index = hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(first_index)));
    hn::CompressStore(x, take, d, store_->values());
    store_->Appended(hn::CompressStore(index, hn::RebindMask(di, take), di, store_->indices()));
  }

 private:
  CandidateStore* store_;
};

size_t TopKLanesImpl() { return hn::Lanes(hn::ScalableTag<float>()); }

// Adds scores [begin, end) of one row to `store` and returns their state.
ScoreState TopKPartImpl(const Tensor& in, int64_t row, int64_t begin, int64_t end, float c,
                        CandidateStore* store, float* HWY_RESTRICT buffer) {
  const hn::ScalableTag<float> d;
  SimdCandidates<decltype(d)> candidates(store);
  return AccumulatePart(d, in, row, begin, end, c, buffer, candidates);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

// Sorts a row's k best keys (best first) and writes indices, probabilities and lse. A row whose
// state is NaN gets index -1 and NaN everywhere; a row of only -inf gets probability 0 (and
// the lowest indices, by the tie rule).
void WriteTopKRow(const SoftmaxTopKArgs& args, int64_t row, uint64_t* keys, size_t count,
                  const ScoreState& state, float c) {
  const RowFinish finish = FinishRow(state, args.temperature);
  std::sort(keys, keys + count, std::greater<uint64_t>());
  for (int32_t j = 0; j < args.k; ++j) {
    int32_t index = -1;
    float prob = std::numeric_limits<float>::quiet_NaN();
    if (finish.kind != RowFinish::kNaN && static_cast<size_t>(j) < count) {
      index = TopKKeyIndex(keys[j]);
      prob = 0.0f;
      if (finish.kind == RowFinish::kNormal) {
        // As the SIMD term, with s - max exact in double.
        const double exponent =
            (static_cast<double>(TopKKeyValue(keys[j])) - finish.max) * static_cast<double>(c);
        prob = Exp2Scalar(static_cast<float>(exponent)) * finish.inv_l;
      }
    }
    *args.indices.At<int32_t>(row, j) = index;
    *args.probs.At<float>(row, j) = prob;
  }
  if (args.lse != nullptr) *args.lse->At<float>(row) = static_cast<float>(finish.lse);
}

}  // namespace

HWY_EXPORT(TopKLanesImpl);
HWY_EXPORT(TopKPartImpl);

Status CpuBackend::SoftmaxTopK(const SoftmaxTopKArgs& args) {
  const int64_t rows = args.in.dim(0);
  const RowSplit split(args.in.dim(1));
  const int workers = pool_->NumWorkers();
  const float c = kLog2e / args.temperature;
  const size_t k = static_cast<size_t>(args.k);
  const size_t lanes = HWY_DYNAMIC_DISPATCH(TopKLanesImpl)();
  // Per worker: the chunk of converted scores, then the candidate store.
  const size_t chunk_bytes = kSoftmaxChunk * sizeof(float);
  SATTN_RETURN_IF_ERROR(scratch_->Reserve(workers, chunk_bytes + CandidateStore::Bytes(k, lanes)));
  const auto part_topk = HWY_DYNAMIC_DISPATCH(TopKPartImpl);
  auto worker_store = [&](int worker, float** chunk) {
    char* base = scratch_->Get<char>(worker);
    *chunk = reinterpret_cast<float*>(base);
    CandidateStore store;
    store.Init(base + chunk_bytes, k, lanes);
    return store;
  };

  if (!SplitRowsAcrossTasks(rows, split, workers)) {
    // Whole rows per task: one store per row, across its parts (the threshold carries over).
    const int64_t rows_per_task = ItemsPerTask(rows, 4 * split.n, workers);
    return pool_->ParallelFor(
        (rows + rows_per_task - 1) / rows_per_task, [&](int64_t task, int worker) {
          float* chunk;
          CandidateStore store = worker_store(worker, &chunk);
          const int64_t row_end = std::min(rows, (task + 1) * rows_per_task);
          ScoreState parts[RowSplit::kMaxParts];
          for (int64_t row = task * rows_per_task; row < row_end; ++row) {
            store.Reset();
            for (int64_t p = 0; p < split.parts; ++p) {
              parts[p] = part_topk(args.in, row, split.Begin(p), split.End(p), c, &store, chunk);
            }
            size_t count;
            uint64_t* keys = store.Kept(&count);
            WriteTopKRow(args, row, keys, count, FoldParts(parts, split.parts, c), c);
          }
        });
  }

  // Few long rows: tasks take runs of consecutive parts (of one row or two). Each part's state
  // is kept for the ordered fold; a run shares one store whose list merges into the row's under
  // a lock (exact in any order; one merge per run and row). The stores of a row share their
  // k-th best as a bound, so a part rarely starts from an empty threshold.
  const int64_t items = rows * split.parts;
  const int64_t parts_per_task = ItemsPerTask(items, 4 * split.part_len, workers);
  Vector<ScoreState> parts(items, alloc_);
  Vector<uint64_t> row_keys(rows * 2 * k, alloc_);
  Vector<size_t> row_counts(rows, 0, alloc_);
  Vector<std::atomic<float>> row_bounds(rows, alloc_);
  for (auto& bound : row_bounds) bound.store(kNegInf, std::memory_order_relaxed);
  std::mutex merge_lock;
  auto merge_into_row = [&](int64_t row, CandidateStore& store) {
    size_t count;
    const uint64_t* keys = store.Kept(&count);
    std::lock_guard<std::mutex> hold(merge_lock);
    uint64_t* merged = row_keys.data() + row * 2 * k;
    std::copy(keys, keys + count, merged + row_counts[row]);
    row_counts[row] = KeepBestKeys(merged, row_counts[row] + count, k);
  };
  SATTN_RETURN_IF_ERROR(pool_->ParallelFor(
      (items + parts_per_task - 1) / parts_per_task, [&](int64_t task, int worker) {
        float* chunk;
        CandidateStore store = worker_store(worker, &chunk);
        const int64_t end = std::min(items, (task + 1) * parts_per_task);
        for (int64_t item = task * parts_per_task; item < end; ++item) {
          const int64_t row = item / split.parts, p = item % split.parts;
          store.Share(&row_bounds[row]);
          parts[item] = part_topk(args.in, row, split.Begin(p), split.End(p), c, &store, chunk);
          if (p + 1 == split.parts || item + 1 == end) {
            merge_into_row(row, store);
            store.Reset();
          }
        }
      }));
  for (int64_t row = 0; row < rows; ++row) {
    WriteTopKRow(args, row, row_keys.data() + row * 2 * k, row_counts[row],
                 FoldParts(&parts[row * split.parts], split.parts, c), c);
  }
  return Status();
}

}  // namespace streamattn
#endif  // HWY_ONCE
