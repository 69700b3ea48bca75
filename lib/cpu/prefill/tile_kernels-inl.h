// The one place that chooses prefill's tile kernel, once per call: the micro-kernels that pack
// the queries and a tile of K/V and compute its two products (prefill/f32_fma_tiles-inl.h is
// the model). The online softmax, the state, masks, paging and split-KV are the driver's and do
// not change with the kernel. A new kernel is a file defining its struct (most of it from
// prefill/native_tiles-inl.h) and one line here that picks it where the CPU and the call allow
// it.
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
#include "cpu/prefill/neon_bf16_tiles-inl.h"
#include "cpu/prefill/neon_fp16_tiles-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// Calls f with Tiles<f32_pv> and returns true where the context allows the native kernel
// `kernel` (auto, or forced to it) and the call and this CPU can take it.
template <template <bool> class Tiles, class F>
HWY_INLINE bool WithNativeTiles(const AttentionArgs& a, int32_t cpu_kernel, int32_t kernel, F& f) {
  if (cpu_kernel != SATTN_CPU_KERNEL_AUTO && cpu_kernel != kernel) return false;
  if (!Tiles<false>::Supports(a)) return false;
  a.f32_pv ? f(Tiles<true>{}) : f(Tiles<false>{});
  return true;
}

// Calls f with a value of the tile kernel this call's prefill runs, given the context's
// cpu_kernel (a sattn_cpu_kernel): native bf16 or f16 products where q, k and v are of that
// dtype, the CPU has them and the context allows them (P.V in f32 when the call asks); else
// f32 FMAs.
template <class F>
HWY_INLINE void WithPrefillTiles(const AttentionArgs& a, int32_t cpu_kernel, F&& f) {
#if SATTN_AVX512_BF16_TILES
  if (WithNativeTiles<Avx512Bf16Tiles>(a, cpu_kernel, SATTN_CPU_KERNEL_AVX512_BF16, f)) return;
#endif
#if SATTN_NEON_BF16_TILES
  if (WithNativeTiles<NeonBf16Tiles>(a, cpu_kernel, SATTN_CPU_KERNEL_NEON_BF16, f)) return;
#endif
#if SATTN_NEON_FP16_TILES
  if (WithNativeTiles<NeonFp16Tiles>(a, cpu_kernel, SATTN_CPU_KERNEL_NEON_FP16, f)) return;
#endif
  (void)a, (void)cpu_kernel;  // no native kernel on this target, or none the call can take
  std::forward<F>(f)(F32FmaTiles{});
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_TILE_KERNELS_INL_H_
