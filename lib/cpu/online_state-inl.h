// The vectorised half of the state merge (core/online_state.h has the scalar definition):
// rescaling and adding o~ rows along head_dim. The per-row scalars (m, l, weights) stay
// scalar; only the head_dim-long vectors are worth SIMD.
#if defined(STREAMATTN_CPU_ONLINE_STATE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_ONLINE_STATE_INL_H_
#undef STREAMATTN_CPU_ONLINE_STATE_INL_H_
#else
#define STREAMATTN_CPU_ONLINE_STATE_INL_H_
#endif

#include <cstddef>

#include "core/online_state.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// acc = acc * a + in * b over n floats. A side whose factor is 0 is not read at all (it may be
// an empty state's garbage), exactly as core ScaleAndAdd.
template <class D>
HWY_INLINE void ScaleAndAddRow(D d, float* HWY_RESTRICT acc, float a, const float* HWY_RESTRICT in,
                               float b, size_t n) {
  if (b == 0.0f) {
    if (a == 0.0f) {
      for (size_t i = 0; i < n; ++i) acc[i] = 0.0f;
      return;
    }
    if (a == 1.0f) return;
  }
  const size_t lanes = hn::Lanes(d);
  const auto va = hn::Set(d, a);
  const auto vb = hn::Set(d, b);
  size_t i = 0;
  if (a == 0.0f) {
    for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, in + i), vb), d, acc + i);
  } else if (b == 0.0f) {
    for (; i + lanes <= n; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, acc + i), va), d, acc + i);
  } else {
    for (; i + lanes <= n; i += lanes) {
      const auto kept = hn::Mul(hn::LoadU(d, acc + i), va);
      hn::StoreU(hn::MulAdd(hn::LoadU(d, in + i), vb, kept), d, acc + i);
    }
  }
  ScaleAndAdd(acc + i, a, in + i, b, static_cast<int64_t>(n - i));
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_ONLINE_STATE_INL_H_
