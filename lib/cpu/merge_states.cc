// sattn_merge_states on the CPU. Per output row: the parts' lse give their weights
// exp(lse_i - lse) (scalar, core MergeWeights), then out = sum_i w_i o_i accumulated in f32
// along head_dim with SIMD, skipping empty parts without reading them. Cost: one read of every
// non-empty part's row and one write: bandwidth-bound, (S + 1) * head_dim elements per row.
// Every part of a row is read before the row is written, so an in-place merge is safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/merge_states.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/convert-inl.h"
#include "cpu/online_state-inl.h"
// clang-format on
#include <algorithm>

#include "cpu/cpu_backend.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

void MergeStatesRowsImpl(const MergeStatesArgs& args, int64_t row_begin, int64_t row_end,
                         float* HWY_RESTRICT scratch) {
  const hn::ScalableTag<float> d;
  const int64_t seq = args.out.dim(1);
  const int64_t heads = args.out.dim(2);
  const size_t head_dim = static_cast<size_t>(args.out.dim(3));
  const int32_t num_parts = args.num_parts;
  const size_t padded_dim = hwy::RoundUpTo(head_dim, 16);
  float* acc = scratch;
  float* row = acc + padded_dim;
  float* lse = row + padded_dim;
  float* weights = lse + num_parts;

  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / (seq * heads);
    const int64_t s = (r / heads) % seq;
    const int64_t h = r % heads;
    for (int32_t i = 0; i < num_parts; ++i) lse[i] = *args.lse_parts[i].At<float>(b, h, s);
    const float lse_out = MergeWeights(lse, num_parts, weights);
    std::fill(acc, acc + head_dim, 0.0f);
    if (std::isnan(lse_out)) {
      for (size_t j = 0; j < head_dim; ++j) acc[j] = lse_out;
    } else {
      for (int32_t i = 0; i < num_parts; ++i) {
        if (weights[i] == 0.0f) continue;
        const Tensor& o = args.o_parts[i];
        LoadRowAsF32(d, o.dtype, o.At(b, s, h), o.stride(3), head_dim, row);
        ScaleAndAddRow(d, acc, 1.0f, row, weights[i], head_dim);
      }
    }
    StoreRowFromF32(d, acc, head_dim, args.out.dtype, args.out.At(b, s, h), args.out.stride(3));
    if (args.lse_out != nullptr) *args.lse_out->At<float>(b, h, s) = lse_out;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {

HWY_EXPORT(MergeStatesRowsImpl);

Status CpuBackend::MergeStates(const MergeStatesArgs& args) {
  const int64_t rows = args.out.dim(0) * args.out.dim(1) * args.out.dim(2);
  const int workers = pool_->NumWorkers();
  const size_t scratch_floats =
      2 * hwy::RoundUpTo(static_cast<size_t>(args.out.dim(3)), 16) + 2 * args.num_parts;
  SATTN_RETURN_IF_ERROR(scratch_->Reserve(workers, scratch_floats * sizeof(float)));
  const auto merge_rows = HWY_DYNAMIC_DISPATCH(MergeStatesRowsImpl);
  const int64_t rows_per_task = ItemsPerTask(rows, (args.num_parts + 1) * args.out.dim(3), workers);
  return pool_->ParallelFor((rows + rows_per_task - 1) / rows_per_task, [&](int64_t task,
                                                                            int worker) {
    const int64_t begin = task * rows_per_task;
    merge_rows(args, begin, std::min(rows, begin + rows_per_task), scratch_->Get<float>(worker));
  });
}

}  // namespace streamattn
#endif  // HWY_ONCE
