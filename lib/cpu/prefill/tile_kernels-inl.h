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

#include <cstdint>
#include <utility>

#include "core/attention_args.h"
#include "cpu/prefill/avx512_bf16_tiles-inl.h"
#include "cpu/prefill/f32_fma_tiles-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// Calls f with a value of the tile kernel this call's prefill runs, given the context's
// cpu_kernel (a sattn_cpu_kernel): native bf16 dot products where q, k and v are bf16, the CPU
// has them and the context does not force f32 FMAs (P.V in f32 when the call asks); else f32
// FMAs.
template <class F>
HWY_INLINE void WithPrefillTiles(const AttentionArgs& a, int32_t cpu_kernel, F&& f) {
#if SATTN_AVX512_BF16_TILES
  if (cpu_kernel != SATTN_CPU_KERNEL_F32_FMA && Avx512Bf16Tiles<false>::Supports(a)) {
    return a.f32_pv ? f(Avx512Bf16Tiles<true>{}) : f(Avx512Bf16Tiles<false>{});
  }
#else
  (void)a, (void)cpu_kernel;  // no native kernel on this target
#endif
  std::forward<F>(f)(F32FmaTiles{});
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_TILE_KERNELS_INL_H_
