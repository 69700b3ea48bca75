// sattn_softmax and sattn_log_softmax on the CPU: the seed's two-pass online softmax. Pass 1
// keeps (max, l) on SIMD lanes (softmax-inl.h) per part of a row; the parts' states fold with ⊕
// (FoldParts) in part order. Pass 2 writes exp2((s − max) c) / l, or for log-softmax
// (s − max) / T − ln l, which needs no exponential. Cost: two reads of each score and one
// write (three-pass safe softmax: three reads), and two exp2 per score for softmax, one for
// log-softmax. A row's result depends only on the row, never on how rows and parts were spread
// over threads: many rows go whole to a task, a few long ones are split by part.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/softmax.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/convert-inl.h"
#include "cpu/exp2-inl.h"
#include "cpu/softmax-inl.h"
// clang-format on
#include <algorithm>
#include <limits>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/softmax_rows.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// out[i] = f(x[i]) for i < n, a vector at a time; out may be x (each vector is loaded before
// it is stored), so neither pointer is restrict.
template <class D, class F>
HWY_INLINE void MapScores(D d, const float* x, size_t n, float* out, const F& f) {
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto y0 = f(hn::LoadU(d, x + i));
    const auto y1 = f(hn::LoadU(d, x + i + lanes));
    hn::StoreU(y0, d, out + i);
    hn::StoreU(y1, d, out + i + lanes);
  }
  for (; i + lanes <= n; i += lanes) hn::StoreU(f(hn::LoadU(d, x + i)), d, out + i);
  if (i < n) {
    // The last partial vector through a buffer, padded with a score of the row (so every lane
    // stays in f's domain); a whole-vector load or store could touch memory past the row.
    HWY_ALIGN float padded[hn::MaxLanes(D())];
    std::fill(padded, padded + lanes, x[i]);
    std::copy(x + i, x + n, padded);
    hn::Store(f(hn::Load(d, padded)), d, padded);
    std::copy(padded, padded + (n - i), out + i);
  }
}

ScoreState SoftmaxPartStateImpl(const Tensor& in, int64_t row, int64_t begin, int64_t end, float c,
                                float* HWY_RESTRICT buffer) {
  const hn::ScalableTag<float> d;
  NoCandidates none;
  return AccumulatePart(d, in, row, begin, end, c, buffer, none);
}

// Pass 2 over scores [begin, end) of one row. `buffers` holds two chunks (input, output).
void SoftmaxWritePartImpl(const SoftmaxArgs& args, int64_t row, int64_t begin, int64_t end,
                          const RowFinish& finish, float c, float* HWY_RESTRICT buffers) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const Tensor& out = args.out;
  float* in_chunk = buffers;
  float* out_chunk = buffers + kSoftmaxChunk;
  const bool write_directly = out.dtype == DType::kF32 && (out.stride(1) == 1 || end - begin == 1);

  const V vc = hn::Set(d, c);
  const V max = hn::Set(d, finish.max);
  const V inv_l = hn::Set(d, finish.inv_l);
  const V inv_t = hn::Set(d, 1.0f / args.temperature);
  const V neg_log_l = hn::Set(d, -finish.log_l);
  float fill = std::numeric_limits<float>::quiet_NaN();
  if (finish.kind == RowFinish::kEmpty) fill = args.log ? kNegInf : 0.0f;

  for (int64_t chunk = begin; chunk < end; chunk += kSoftmaxChunk) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kSoftmaxChunk, end - chunk));
    float* dst = write_directly ? out.At<float>(row, chunk) : out_chunk;
    if (finish.kind != RowFinish::kNormal) {
      std::fill(dst, dst + n, fill);
    } else {
      const float* x = ScoresAsF32(d, args.in, row, chunk, n, in_chunk);
      if (args.log) {
        MapScores(d, x, n, dst, [&](V s) { return hn::MulAdd(hn::Sub(s, max), inv_t, neg_log_l); });
      } else {
        MapScores(d, x, n, dst, [&](V s) { return hn::Mul(ScoreTerm(d, s, max, vc), inv_l); });
      }
    }
    if (!write_directly) StoreRowFromF32(d, dst, n, out.dtype, out.At(row, chunk), out.stride(1));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {

HWY_EXPORT(SoftmaxPartStateImpl);
HWY_EXPORT(SoftmaxWritePartImpl);

Status CpuBackend::Softmax(const SoftmaxArgs& args) {
  const int64_t rows = args.in.dim(0);
  const RowSplit split(args.in.dim(1));
  const int workers = pool_->NumWorkers();
  const float c = kLog2e / args.temperature;
  SATTN_RETURN_IF_ERROR(scratch_->Reserve(workers, 2 * kSoftmaxChunk * sizeof(float)));
  const auto part_state = HWY_DYNAMIC_DISPATCH(SoftmaxPartStateImpl);
  const auto write_part = HWY_DYNAMIC_DISPATCH(SoftmaxWritePartImpl);

  if (!SplitRowsAcrossTasks(rows, split, workers)) {
    // Whole rows per task: pass 2 finds the row still in this core's cache.
    const int64_t rows_per_task = ItemsPerTask(rows, 8 * split.n, workers);
    pool_->ParallelFor((rows + rows_per_task - 1) / rows_per_task, [&](int64_t task, int worker) {
      float* buffers = scratch_->Get<float>(worker);
      const int64_t row_end = std::min(rows, (task + 1) * rows_per_task);
      ScoreState parts[RowSplit::kMaxParts];
      for (int64_t row = task * rows_per_task; row < row_end; ++row) {
        for (int64_t p = 0; p < split.parts; ++p) {
          parts[p] = part_state(args.in, row, split.Begin(p), split.End(p), c, buffers);
        }
        const RowFinish finish = FinishRow(FoldParts(parts, split.parts, c), args.temperature);
        for (int64_t p = 0; p < split.parts; ++p) {
          write_part(args, row, split.Begin(p), split.End(p), finish, c, buffers);
        }
      }
    });
    return Status();
  }

  // Few long rows: tasks take runs of consecutive parts, in each pass.
  const int64_t items = rows * split.parts;
  const int64_t parts_per_task = ItemsPerTask(items, 8 * split.part_len, workers);
  const int64_t tasks = (items + parts_per_task - 1) / parts_per_task;
  Vector<ScoreState> parts(items, alloc_);
  pool_->ParallelFor(tasks, [&](int64_t task, int worker) {
    const int64_t end = std::min(items, (task + 1) * parts_per_task);
    for (int64_t item = task * parts_per_task; item < end; ++item) {
      const int64_t row = item / split.parts, p = item % split.parts;
      parts[item] =
          part_state(args.in, row, split.Begin(p), split.End(p), c, scratch_->Get<float>(worker));
    }
  });
  Vector<RowFinish> finish(rows, alloc_);
  for (int64_t row = 0; row < rows; ++row) {
    finish[row] = FinishRow(FoldParts(&parts[row * split.parts], split.parts, c), args.temperature);
  }
  pool_->ParallelFor(tasks, [&](int64_t task, int worker) {
    const int64_t end = std::min(items, (task + 1) * parts_per_task);
    for (int64_t item = task * parts_per_task; item < end; ++item) {
      const int64_t row = item / split.parts, p = item % split.parts;
      write_part(args, row, split.Begin(p), split.End(p), finish[row], c,
                 scratch_->Get<float>(worker));
    }
  });
  return Status();
}

}  // namespace streamattn
#endif  // HWY_ONCE
