// Dispatch for Exp2Array (the kernel itself is exp2-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/exp2.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/exp2-inl.h"
// clang-format on
#include "cpu/exp2.h"

#include "cpu/cpu_backend.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

void Exp2ArrayImpl(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(Exp2(d, hn::LoadU(d, x + i)), d, y + i);
  const hn::CappedTag<float, 1> d1;  // the tail, one lane at a time: never reads past x + n
  for (; i < n; ++i) hn::StoreU(Exp2(d1, hn::LoadU(d1, x + i)), d1, y + i);
}

void Exp2NonPositiveArrayImpl(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(Exp2NonPositive(d, hn::LoadU(d, x + i)), d, y + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) hn::StoreU(Exp2NonPositive(d1, hn::LoadU(d1, x + i)), d1, y + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {

HWY_EXPORT(Exp2ArrayImpl);
HWY_EXPORT(Exp2NonPositiveArrayImpl);

void Exp2NonPositiveArray(const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(Exp2NonPositiveArrayImpl)(x, y, n);
}

void Exp2Array(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(Exp2ArrayImpl)(x, y, n); }

Status CpuBackend::Exp2(const float* x, float* y, int64_t n) {
  const auto exp2 = HWY_DYNAMIC_DISPATCH(Exp2ArrayImpl);
  constexpr int64_t kChunk = 1 << 16;
  return pool_->ParallelFor((n + kChunk - 1) / kChunk, [&](int64_t task, int) {
    const int64_t begin = task * kChunk;
    exp2(x + begin, y + begin, static_cast<size_t>(std::min(kChunk, n - begin)));
  });
}

}  // namespace streamattn
#endif  // HWY_ONCE
