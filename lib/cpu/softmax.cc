// sattn_softmax and sattn_log_softmax on the CPU: the two-pass online softmax. Pass 1
// keeps (max, l) on SIMD lanes (softmax-inl.h) per part of a row; the parts' states fold with ⊕
// (FoldParts) in part order. Pass 2 writes the output:
// - log-softmax: (s − max) / T − ln l, from the scores, with no exponential;
// - softmax into contiguous f32 rows: pass 1 also stores each term exp2((s − offset) c) against
//   its chunk's offset (the running maximum when the chunk was read, the state's rescale at chunk
//   granularity) and pass 2 multiplies each chunk by exp2((offset − max) c) / l. One exp2 per
//   score. Large outputs stage the row's terms in scratch and stream the output past the caches
//   (no read of the output's lines before they are written);
// - softmax into f16, bf16 or strided rows: exp2((s − max) c) / l recomputed from the scores.
// Cost per score: one read from memory, one write, one exp2 (three-pass safe softmax: three
// reads, of which two hit the cache for a row per task, the write, and two exp2). A row's result
// depends only on the row, never on how rows and parts were spread over threads: many rows go
// whole to a task, a few long ones are split by part.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/softmax.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/cache_control.h"
#include "cpu/convert-inl.h"
#include "cpu/exp2-inl.h"
#include "cpu/softmax-inl.h"
// clang-format on
#include <algorithm>
#include <limits>
#include <vector>

#include "core/exp2_scalar.h"
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

// Pass 1 of the stored-term softmax over scores [begin, end) of one row: the part's state, with
// every term exp2((s - offset) c) stored to terms[0, end - begin) (the row of `out` itself, or
// a staging row) and each chunk's offset to chunk_offsets[0, chunks of the part).
ScoreState SoftmaxStoreTermsPartImpl(const SoftmaxArgs& args, int64_t row, int64_t begin,
                                     int64_t end, float c, float* HWY_RESTRICT buffer,
                                     float* HWY_RESTRICT chunk_offsets, float* terms) {
  using D = hn::ScalableTag<float>;
  using V = hn::Vec<D>;
  const D d;
  return AccumulateChunks(d, args.in, row, begin, end, c, buffer,
                          [&](const float* x, size_t n, int64_t chunk, PartLanes<D>& part,
                              V& offset, V& l0, V& l1, V& gate) {
                            const V vc = hn::Set(d, c);
                            *chunk_offsets++ = AccumulateAndStoreTerms(
                                d, x, n, vc, part, offset, l0, l1, gate, terms + (chunk - begin));
                          });
}

// out[i] = t[i] * factor for i < n with non-temporal stores (the output bypasses the caches,
// so writing it costs no read of its lines first); the unaligned head and the tail are scalar
// (the same product, so the bytes do not depend on the alignment).
template <class D>
HWY_INLINE void StreamScaled(D d, const float* HWY_RESTRICT t, size_t n, float factor,
                             float* HWY_RESTRICT out) {
  const size_t lanes = hn::Lanes(d);
  const size_t align = lanes * sizeof(float);
  size_t i = 0;
  while (i < n && reinterpret_cast<uintptr_t>(out + i) % align != 0) {
    out[i] = t[i] * factor;
    ++i;
  }
  const auto vfactor = hn::Set(d, factor);
  for (; i + lanes <= n; i += lanes) hn::Stream(hn::Mul(hn::LoadU(d, t + i), vfactor), d, out + i);
  for (; i < n; ++i) out[i] = t[i] * factor;
}

// Pass 2 of the stored-term softmax: out's row [begin, end) = each chunk of terms[0, end - begin)
// times exp2((offset - max) c) / l. terms may be the row of out itself (rescaled in place);
// else out is written with non-temporal stores.
void SoftmaxRescalePartImpl(const SoftmaxArgs& args, int64_t row, int64_t begin, int64_t end,
                            const RowFinish& finish, float c,
                            const float* HWY_RESTRICT chunk_offsets, const float* terms) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const bool in_place = terms == args.out.At<float>(row, begin);
  for (int64_t chunk = begin; chunk < end; chunk += kSoftmaxChunk) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(kSoftmaxChunk, end - chunk));
    float* dst = args.out.At<float>(row, chunk);
    const float* src = terms + (chunk - begin);
    const float chunk_offset = *chunk_offsets++;
    if (finish.kind != RowFinish::kNormal) {
      std::fill(dst, dst + n,
                finish.kind == RowFinish::kEmpty ? 0.0f : std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    // The chunk that holds the row's maximum (most of them, on most rows) skips the exp2.
    const float factor = chunk_offset == finish.max
                             ? finish.inv_l
                             : Exp2Scalar((chunk_offset - finish.max) * c) * finish.inv_l;
    if (in_place) {
      const V vfactor = hn::Set(d, factor);
      MapScores(d, dst, n, dst, [&](V t) { return hn::Mul(t, vfactor); });
    } else {
      StreamScaled(d, src, n, factor, dst);
    }
  }
  // Orders the non-temporal stores before whatever this thread does next (the task's end).
  if (!in_place) hwy::FlushStream();
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {

HWY_EXPORT(SoftmaxPartStateImpl);
HWY_EXPORT(SoftmaxWritePartImpl);
HWY_EXPORT(SoftmaxStoreTermsPartImpl);
HWY_EXPORT(SoftmaxRescalePartImpl);

namespace {

// A part's chunk offsets are kept between the passes in at most this many floats.
constexpr int64_t kMaxStoredChunksPerPart = 256;

int64_t ChunksPerPart(const RowSplit& split) {
  return (split.part_len + kSoftmaxChunk - 1) / kSoftmaxChunk;
}

// Whether pass 1 stores the terms into `out` for pass 2 to rescale: softmax (log-softmax has no
// exp2 in pass 2 to save) into contiguous f32 rows (a term rounded to f16 or bf16 and rescaled
// would round twice), for rows up to 64 × 256 chunks (33.5M scores).
bool StoresTerms(const SoftmaxArgs& args, const RowSplit& split) {
  return !args.log && args.out.dtype == DType::kF32 &&
         (args.out.stride(1) == 1 || args.out.dim(1) == 1) &&
         ChunksPerPart(split) <= kMaxStoredChunksPerPart;
}

// Rows up to this many scores are staged whole (a worker's terms between the passes) when the
// output is large enough to stream: 1 MiB, which stays in a core's L2 between the passes.
constexpr int64_t kMaxStagedRow = int64_t{1} << 18;
// Outputs from this size on are streamed past the caches (they would not stay there anyway);
// smaller ones are written through the cache, where the caller will read them.
constexpr int64_t kStreamOutputBytes = int64_t{16} << 20;

// Whether pass 1 stages each row's terms in the worker's scratch, so that pass 2 reads them
// there and streams the output: the output's lines are then written without being read first.
bool StagesTerms(const SoftmaxArgs& args) {
  const int64_t rows = args.out.dim(0), n = args.out.dim(1);
  return n <= kMaxStagedRow && rows * n * static_cast<int64_t>(sizeof(float)) >= kStreamOutputBytes;
}

}  // namespace

// Two ways to run the two passes, chosen per call, both with the same parts and chunks:
// - recompute: pass 2 evaluates exp2((s - max) c) / l again from the scores;
// - stored terms: pass 1 also stores each term against its chunk's offset (the part's running
//   maximum when the chunk was read) into `out`, and pass 2 multiplies each chunk by
//   exp2((offset - max) c) / l. One exp2 per score instead of two; pass 2 reads `out` (still in
//   cache for a whole row per task) instead of the scores. Works in place too.
Status CpuBackend::Softmax(const SoftmaxArgs& args) {
  const int64_t rows = args.in.dim(0);
  const RowSplit split(args.in.dim(1));
  const int workers = pool_->NumWorkers();
  const float c = kLog2e / args.temperature;
  const bool store_terms = StoresTerms(args, split);
  const int64_t chunks_per_part = store_terms ? ChunksPerPart(split) : 0;
  const auto part_state = HWY_DYNAMIC_DISPATCH(SoftmaxPartStateImpl);
  const auto write_part = HWY_DYNAMIC_DISPATCH(SoftmaxWritePartImpl);
  const auto store_terms_part = HWY_DYNAMIC_DISPATCH(SoftmaxStoreTermsPartImpl);
  const auto rescale_part = HWY_DYNAMIC_DISPATCH(SoftmaxRescalePartImpl);
  // Pass 1 and pass 2 of part p of a row; `offsets` holds the part's chunk offsets.
  // Pass 1 and pass 2 of part p of a row; `offsets` holds the part's chunk offsets, `staged`
  // the row's terms (nullptr: they go to the row of out).
  auto pass1 = [&](int64_t row, int64_t p, float* buffers, float* offsets, float* staged) {
    const int64_t begin = split.Begin(p), end = split.End(p);
    if (!store_terms) return part_state(args.in, row, begin, end, c, buffers);
    float* terms = staged != nullptr ? staged + begin : args.out.At<float>(row, begin);
    return store_terms_part(args, row, begin, end, c, buffers, offsets, terms);
  };
  auto pass2 = [&](int64_t row, int64_t p, const RowFinish& finish, float* buffers,
                   const float* offsets, const float* staged) {
    const int64_t begin = split.Begin(p), end = split.End(p);
    if (!store_terms) return write_part(args, row, begin, end, finish, c, buffers);
    const float* terms = staged != nullptr ? staged + begin : args.out.At<float>(row, begin);
    rescale_part(args, row, begin, end, finish, c, offsets, terms);
  };

  if (!SplitRowsAcrossTasks(rows, split, workers)) {
    // Whole rows per task: pass 2 finds the row still in this core's cache.
    const bool stage = store_terms && StagesTerms(args);
    const int64_t offsets_end = 2 * kSoftmaxChunk + split.parts * chunks_per_part;
    // The staged row starts on a cache line, so that its loads split no line.
    const int64_t staged_begin = (offsets_end + 15) / 16 * 16;
    const int64_t floats = stage ? staged_begin + split.n : offsets_end;
    SATTN_RETURN_IF_ERROR(scratch_->Reserve(workers, floats * sizeof(float)));
    const int64_t rows_per_task = ItemsPerTask(rows, 8 * split.n, workers);
    return pool_->ParallelFor(
        (rows + rows_per_task - 1) / rows_per_task, [&](int64_t task, int worker) {
          float* buffers = scratch_->Get<float>(worker);
          float* offsets = buffers + 2 * kSoftmaxChunk;
          float* staged = stage ? buffers + staged_begin : nullptr;
          const int64_t row_end = std::min(rows, (task + 1) * rows_per_task);
          ScoreState parts[RowSplit::kMaxParts];
          for (int64_t row = task * rows_per_task; row < row_end; ++row) {
            for (int64_t p = 0; p < split.parts; ++p) {
              parts[p] = pass1(row, p, buffers, offsets + p * chunks_per_part, staged);
            }
            const RowFinish finish = FinishRow(FoldParts(parts, split.parts, c), args.temperature);
            for (int64_t p = 0; p < split.parts; ++p) {
              pass2(row, p, finish, buffers, offsets + p * chunks_per_part, staged);
            }
          }
        });
  }

  // Few long rows: tasks take runs of consecutive parts, in each pass.
  SATTN_RETURN_IF_ERROR(scratch_->Reserve(workers, 2 * kSoftmaxChunk * sizeof(float)));
  const int64_t items = rows * split.parts;
  const int64_t parts_per_task = ItemsPerTask(items, 8 * split.part_len, workers);
  const int64_t tasks = (items + parts_per_task - 1) / parts_per_task;
  // Everything is allocated before pass 1, which may already write to out.
  Vector<ScoreState> parts(items, alloc_);
  Vector<float> offsets(items * chunks_per_part, alloc_);
  Vector<RowFinish> finish(rows, alloc_);
  SATTN_RETURN_IF_ERROR(pool_->ParallelFor(tasks, [&](int64_t task, int worker) {
    const int64_t end = std::min(items, (task + 1) * parts_per_task);
    for (int64_t item = task * parts_per_task; item < end; ++item) {
      parts[item] = pass1(item / split.parts, item % split.parts, scratch_->Get<float>(worker),
                          offsets.data() + item * chunks_per_part, nullptr);
    }
  }));
  for (int64_t row = 0; row < rows; ++row) {
    finish[row] = FinishRow(FoldParts(&parts[row * split.parts], split.parts, c), args.temperature);
  }
  return pool_->ParallelFor(tasks, [&](int64_t task, int worker) {
    const int64_t end = std::min(items, (task + 1) * parts_per_task);
    for (int64_t item = task * parts_per_task; item < end; ++item) {
      const int64_t row = item / split.parts;
      pass2(row, item % split.parts, finish[row], scratch_->Get<float>(worker),
            offsets.data() + item * chunks_per_part, nullptr);
    }
  });
}

}  // namespace streamattn
#endif  // HWY_ONCE
