// sattn_quantize_kv on the CPU: each (sequence, new row) is a task writing its own destination
// rows (the API checked that no two share one), one kv head after another, group by group:
// the group's max |x|, its scale rounded to the scales' dtype, then every value divided by that
// stored scale and rounded (core/quantized.h), so a value and the scale it is read with always
// agree. Cost: a few operations per element, a division among them; memory-bound on the write
// side for long rows.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quantized.h"
#include "cpu/cpu_backend.h"

namespace streamattn {
namespace {

constexpr float kF16Max = 65504.0f;

// The group scale m / max_q as stored in `dtype` (f32, or f16 rounded to nearest even and
// saturated at its largest finite value, so it is never infinite), written to p; returns the
// stored value.
float StoreGroupScale(float amax, int max_q, DType dtype, void* p) {
  const float scale = amax / static_cast<float>(max_q);
  if (dtype == DType::kF32) {
    std::memcpy(p, &scale, sizeof(scale));
    return scale;
  }
  const uint16_t bits = F32ToF16(std::min(scale, kF16Max));
  std::memcpy(p, &bits, sizeof(bits));
  return F16ToF32(bits);
}

// One row of `dim` floats into the group-quantized values at `out` (I8 or I4, the row's
// element 0) and their scales at `scales` (the row's first).
void QuantizeGroupedRow(const QuantizeKVArgs& a, const float* x, size_t dim, void* out,
                        char* scales) {
  const DType format = a.values.dtype, scale_dtype = a.scales.dtype;
  const int max_q = QuantizedIntMax(format);
  const size_t group = static_cast<size_t>(a.group);
  const int64_t scale_step = ElementBytes(scale_dtype, a.scales.stride(3));
  for (size_t g = 0; g * group < dim; ++g) {
    const float* xs = x + g * group;
    float amax = 0.0f;
    for (size_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(xs[i]));
    // Signed offsets: a stride may be negative.
    const float s =
        StoreGroupScale(amax, max_q, scale_dtype, scales + static_cast<int64_t>(g) * scale_step);
    for (size_t i = 0; i < group; ++i) {
      const int q = QuantizeToInt(xs[i], s, max_q);
      const size_t at = g * group + i;
      if (format == DType::kI8) {
        static_cast<int8_t*>(out)[static_cast<int64_t>(at) * a.values.stride(3)] =
            static_cast<int8_t>(q);
      } else {
        SetI4(static_cast<uint8_t*>(out), static_cast<int64_t>(at), q);
      }
    }
  }
}

}  // namespace

Status CpuBackend::QuantizeKV(const QuantizeKVArgs& a) {
  const int64_t batch = a.src.dim(0), n = a.src.dim(1), heads = a.src.dim(2);
  const size_t dim = static_cast<size_t>(a.src.dim(3));
  SATTN_RETURN_IF_ERROR(scratch_->Reserve(pool_->NumWorkers(), dim * sizeof(float)));
  const int64_t rows = batch * n;
  const int64_t per_task =
      ItemsPerTask(rows, heads * static_cast<int64_t>(dim) * 8, pool_->NumWorkers());
  const int64_t tasks = (rows + per_task - 1) / per_task;
  return pool_->ParallelFor(tasks, [&](int64_t task, int worker) {
    float* x = scratch_->Get<float>(worker);
    for (int64_t r = task * per_task; r < std::min(rows, (task + 1) * per_task); ++r) {
      const int64_t b = r / n, t = r % n, key = a.positions[b] + t;
      for (int64_t h = 0; h < heads; ++h) {
        for (size_t i = 0; i < dim; ++i) {
          x[i] = LoadAsFloat(a.src.dtype, a.src.At(b, t, h, static_cast<int64_t>(i)));
        }
        void* out = a.KeyRow(a.values, b, key, h);
        if (a.values.dtype == DType::kFP8E4M3) {
          const float s = a.head_scales[h];
          for (size_t i = 0; i < dim; ++i) {
            static_cast<uint8_t*>(out)[static_cast<int64_t>(i) * a.values.stride(3)] =
                F32ToE4M3(x[i] / s);
          }
        } else {
          QuantizeGroupedRow(a, x, dim, out, static_cast<char*>(a.KeyRow(a.scales, b, key, h)));
        }
      }
    }
  });
}

}  // namespace streamattn
