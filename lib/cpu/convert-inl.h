// Row conversions between the caller's dtypes and the f32 the kernels compute in. Loading is
// the hot direction (K/V tiles, partial outputs): vectorised when the row is contiguous, with a
// scalar tail so no load ever touches memory past the row. Storing happens once per output
// element and stays scalar for f16/bf16 (round to nearest even, as core/dtype.h).
#if defined(STREAMATTN_CPU_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_CONVERT_INL_H_
#undef STREAMATTN_CPU_CONVERT_INL_H_
#else
#define STREAMATTN_CPU_CONVERT_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// dst[i] = row[i * stride] as float, for i < n.
template <class D>
HWY_INLINE void LoadRowAsF32(D d, DType dtype, const void* row, int64_t stride, size_t n,
                             float* HWY_RESTRICT dst) {
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  if (stride == 1) {
    switch (dtype) {
      case DType::kF32: {
        std::memcpy(dst, row, n * sizeof(float));
        return;
      }
      case DType::kF16: {
        const hn::Rebind<hwy::float16_t, D> dh;
        const auto* src = static_cast<const hwy::float16_t*>(row);
        for (; i + lanes <= n; i += lanes) {
          hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, src + i)), d, dst + i);
        }
        break;
      }
      case DType::kBF16: {
        const hn::Rebind<hwy::bfloat16_t, D> db;
        const auto* src = static_cast<const hwy::bfloat16_t*>(row);
        for (; i + lanes <= n; i += lanes) {
          hn::StoreU(hn::PromoteTo(d, hn::LoadU(db, src + i)), d, dst + i);
        }
        break;
      }
      case DType::kI32:
        return;  // not a float row: callers check IsFloatDType first
    }
  }
  const char* bytes = static_cast<const char*>(row);
  const int64_t step = stride * DTypeSize(dtype);
  for (; i < n; ++i) dst[i] = LoadAsFloat(dtype, bytes + static_cast<int64_t>(i) * step);
}

// row[i * stride] = src[i] converted to dtype, for i < n.
HWY_INLINE void StoreRowFromF32(const float* HWY_RESTRICT src, size_t n, DType dtype, void* row,
                                int64_t stride) {
  if (stride == 1 && dtype == DType::kF32) {
    std::memcpy(row, src, n * sizeof(float));
    return;
  }
  char* bytes = static_cast<char*>(row);
  const int64_t step = stride * DTypeSize(dtype);
  for (size_t i = 0; i < n; ++i) {
    StoreFromFloat(dtype, src[i], bytes + static_cast<int64_t>(i) * step);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_CONVERT_INL_H_
