#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "exp2_baselines.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on
#include "exp2_baselines.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void HighwayExpArrayImpl(const float* x, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Exp(d, hn::LoadU(d, x + i)), d, y + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) hn::StoreU(hn::Exp(d1, hn::LoadU(d1, x + i)), d1, y + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace bench
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace bench {

HWY_EXPORT(HighwayExpArrayImpl);

void HighwayExpArray(const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(HighwayExpArrayImpl)(x, y, n);
}

}  // namespace bench
}  // namespace streamattn
#endif  // HWY_ONCE
