// sattn_quantize_kv on the CPU: each (sequence, new row) is a task writing its own destination
// rows (the API checked that no two share one), one kv head after another. A row is loaded as
// f32 (vectors where its channels are contiguous), then, group by group: the group's max |x|,
// its scale rounded to the scales' dtype, then every value divided by that stored scale and
// rounded (core/quantized.h), so a value and the scale it is read with always agree. FP8
// divides by the head's scale and encodes each quotient (F32ToE4M3, bit arithmetic).
// Cost: per element a load, a division, a rounding and a store, in vectors of f32 on every
// target whose vector division is IEEE division (all but 32-bit Arm, whose NEON divides by a
// reciprocal estimate and so keeps the scalar loop): about 1 ns an element for i8 on a Zen 3
// core, where every element through scalar loads and libm's nearbyint (and frexp for FP8) took
// 6-14 ns.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/quantize_kv.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/quantized.h"
#include "cpu/convert-inl.h"
#include "cpu/cpu_backend.h"

#ifndef STREAMATTN_CPU_QUANTIZE_KV_SCALES_
#define STREAMATTN_CPU_QUANTIZE_KV_SCALES_
namespace streamattn {

constexpr float kF16Max = 65504.0f;

// The group scale m / max_q as stored in `dtype` (f32, or f16 rounded to nearest even and
// saturated at its largest finite value, so it is never infinite), written to p; returns the
// stored value.
inline float StoreGroupScale(float amax, int max_q, DType dtype, void* p) {
  const float scale = amax / static_cast<float>(max_q);
  if (dtype == DType::kF32) {
    std::memcpy(p, &scale, sizeof(scale));
    return scale;
  }
  const uint16_t bits = F32ToF16(std::min(scale, kF16Max));
  std::memcpy(p, &bits, sizeof(bits));
  return F16ToF32(bits);
}

}  // namespace streamattn
#endif  // STREAMATTN_CPU_QUANTIZE_KV_SCALES_

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether this target's vector division is IEEE division, rounded once, like the scalar
// QuantizeToInt's: ARMv7's NEON has none (Highway refines a reciprocal estimate).
constexpr bool kExactVectorDiv = !HWY_ARCH_ARM_V7;

// The largest |x| of n floats.
template <class D>
HWY_INLINE float AbsMax(D d, const float* HWY_RESTRICT x, size_t n) {
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  float amax = 0.0f;
  if (n >= N) {
    auto m = hn::Zero(d);
    for (; i + N <= n; i += N) m = hn::Max(m, hn::Abs(hn::LoadU(d, x + i)));
    amax = hn::GetLane(hn::MaxOfLanes(d, m));
  }
  for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// q[i] = QuantizeToInt(x[i], s, max_q) for i < n, s > 0 (a zero scale is the caller's).
template <class D>
HWY_INLINE void DivideAndRound(D d, const float* HWY_RESTRICT x, size_t n, float s, int max_q,
                               int8_t* HWY_RESTRICT q) {
  size_t i = 0;
  if constexpr (kExactVectorDiv) {
    const size_t N = hn::Lanes(d);
    const hn::RebindToSigned<D> di;
    const hn::Rebind<int8_t, D> d8;
    const auto scale = hn::Set(d, s), limit = hn::Set(d, static_cast<float>(max_q));
    for (; i + N <= n; i += N) {
      // Round is to nearest even; the quotient of finite x and s > 0 may be infinite, which
      // the clamp saturates like the scalar comparison does.
      const auto r = hn::Round(hn::Div(hn::LoadU(d, x + i), scale));
      const auto clamped = hn::Min(hn::Max(r, hn::Neg(limit)), limit);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, clamped)), d8, q + i);
    }
  }
  for (; i < n; ++i) q[i] = static_cast<int8_t>(QuantizeToInt(x[i], s, max_q));
}

// Quantizes key `key`'s row of kv head h of sequence b (source row t): x and q are scratch of
// the row's length.
void QuantizeRow(const QuantizeKVArgs& a, int64_t b, int64_t t, int64_t key, int64_t h,
                 float* HWY_RESTRICT x, int8_t* HWY_RESTRICT q) {
  const hn::ScalableTag<float> d;
  const size_t dim = static_cast<size_t>(a.src.dim(3));
  LoadRowAsF32(d, a.src.dtype, a.src.At(b, t, h, 0), a.src.stride(3), dim, x);
  void* out = a.KeyRow(a.values, b, key, h);
  const int64_t out_stride = a.values.stride(3);
  if (a.values.dtype == DType::kFP8E4M3) {
    const float s = a.head_scales[h];
    size_t i = 0;
    if constexpr (kExactVectorDiv) {
      const size_t N = hn::Lanes(d);
      for (; i + N <= dim; i += N)
        hn::StoreU(hn::Div(hn::LoadU(d, x + i), hn::Set(d, s)), d, x + i);
    }
    for (; i < dim; ++i) x[i] /= s;
    auto* bytes = static_cast<uint8_t*>(out);
    for (size_t j = 0; j < dim; ++j) bytes[static_cast<int64_t>(j) * out_stride] = F32ToE4M3(x[j]);
    return;
  }
  const DType format = a.values.dtype, scale_dtype = a.scales.dtype;
  const int max_q = QuantizedIntMax(format);
  const size_t group = static_cast<size_t>(a.group);
  char* scales = static_cast<char*>(a.KeyRow(a.scales, b, key, h));
  const int64_t scale_step = ElementBytes(scale_dtype, a.scales.stride(3));
  for (size_t g = 0; g * group < dim; ++g) {
    const float* xs = x + g * group;
    // Signed offsets: a stride may be negative.
    const float s = StoreGroupScale(AbsMax(d, xs, group), max_q, scale_dtype,
                                    scales + static_cast<int64_t>(g) * scale_step);
    if (s == 0.0f) {
      std::fill(q + g * group, q + (g + 1) * group, int8_t{0});
    } else {
      DivideAndRound(d, xs, group, s, max_q, q + g * group);
    }
  }
  if (format == DType::kI8) {
    auto* values = static_cast<int8_t*>(out);
    if (out_stride == 1) {
      std::memcpy(values, q, dim);
    } else {
      for (size_t i = 0; i < dim; ++i) values[static_cast<int64_t>(i) * out_stride] = q[i];
    }
    return;
  }
  // I4: the row starts at an even element (a byte); pairs fill whole bytes.
  auto* bytes = static_cast<uint8_t*>(out);
  size_t i = 0;
  for (; i + 2 <= dim; i += 2) {
    bytes[i / 2] = static_cast<uint8_t>((q[i] & 0xF) | ((q[i + 1] & 0xF) << 4));
  }
  if (i < dim) SetI4(bytes, static_cast<int64_t>(i), q[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {

HWY_EXPORT(QuantizeRow);

Status CpuBackend::QuantizeKV(const QuantizeKVArgs& a) {
  const int64_t batch = a.src.dim(0), n = a.src.dim(1), heads = a.src.dim(2);
  const size_t dim = static_cast<size_t>(a.src.dim(3));
  // Per worker: the row as f32 (in whole 64-float blocks), then its integers.
  const size_t float_slots = (dim + 63) / 64 * 64;
  SATTN_RETURN_IF_ERROR(
      scratch_->Reserve(pool_->NumWorkers(), float_slots * sizeof(float) + dim * sizeof(int8_t)));
  const int64_t rows = batch * n;
  const int64_t per_task =
      ItemsPerTask(rows, heads * static_cast<int64_t>(dim) * 8, pool_->NumWorkers());
  const int64_t tasks = (rows + per_task - 1) / per_task;
  const auto quantize_row = HWY_DYNAMIC_DISPATCH(QuantizeRow);
  return pool_->ParallelFor(tasks, [&](int64_t task, int worker) {
    float* x = scratch_->Get<float>(worker);
    auto* q = reinterpret_cast<int8_t*>(x + float_slots);
    for (int64_t r = task * per_task; r < std::min(rows, (task + 1) * per_task); ++r) {
      const int64_t b = r / n, t = r % n, key = a.positions[b] + t;
      for (int64_t h = 0; h < heads; ++h) quantize_row(a, b, t, key, h, x, q);
    }
  });
}

}  // namespace streamattn
#endif  // HWY_ONCE
