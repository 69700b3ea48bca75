// The one place that chooses prefill's tile kernel, once per call: the micro-kernels that pack
// the queries and a tile of K/V and compute its two products (prefill/f32_fma_tiles-inl.h is
// the model). The online softmax, the state, masks, paging and split-KV are the driver's and do
// not change with the kernel. A new kernel (a native bf16 dot product, say) is a file
// defining its struct and one line here that picks it where the CPU and the call allow it.
#if defined(STREAMATTN_CPU_PREFILL_TILE_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_TILE_KERNELS_INL_H_
#undef STREAMATTN_CPU_PREFILL_TILE_KERNELS_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_TILE_KERNELS_INL_H_
#endif

#include <utility>

#include "core/attention_args.h"
#include "cpu/prefill/f32_fma_tiles-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// Calls f with a value of the tile kernel this call's prefill runs: today f32 FMAs on every
// target and dtype.
template <class F>
HWY_INLINE void WithPrefillTiles(const AttentionArgs& /* a */, F&& f) {
  std::forward<F>(f)(F32FmaTiles{});
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_TILE_KERNELS_INL_H_
