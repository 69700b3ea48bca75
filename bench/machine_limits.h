// What this machine allows, measured in the same run as the benchmarks so every figure can be
// stated as a fraction of it: the FMA peak of the SIMD target the library dispatches to, and
// the read bandwidth of memory (a buffer far larger than the last-level cache).
#ifndef STREAMATTN_BENCH_MACHINE_LIMITS_H_
#define STREAMATTN_BENCH_MACHINE_LIMITS_H_

#include <cstddef>

namespace streamattn {
namespace bench {

// Float32 GFLOP/s (an FMA counts 2) of `threads` threads each running independent FMA chains.
double MeasureFmaPeakGflops(int threads);

// The same FMA chains run once, for about `ms` milliseconds (thread creation untimed): the
// peak of this minute, to alternate with a kernel's timings.
double FmaGflopsOnce(int threads, double ms = 15.0);

// GFLOP/s of bf16 dot products (vdpbf16ps, Arm's BFDOT: 2 products and 2 sums per f32 lane)
// of `threads` threads each running independent chains, as FMA peak does for f32; 0 on a CPU
// without AVX512_BF16 or FEAT_BF16. The ceiling of the native bf16 prefill kernels.
double MeasureBf16DotPeakGflops(int threads);

// The same dot products run once, for about `ms` milliseconds, as FmaGflopsOnce: the bf16 peak
// of this minute, to alternate with a kernel's timings (0 without the instruction).
double Bf16DotGflopsOnce(int threads, double ms = 15.0);

// GB/s of `threads` threads summing disjoint slices of a `bytes`-long buffer.
double MeasureReadBandwidthGbps(int threads, size_t bytes = size_t{1} << 30);

// Milliseconds for `threads` threads to sum `count` blocks of `block_bytes` bytes each (a
// multiple of 64; block i at blocks[i]), each thread a contiguous run of the
// list: the read limit of an access pattern, e.g. a paged KV cache in block-table order.
// Thread creation is not timed (from the first thread's start of reading to the last one's end).
double TimeBlockReadMs(int threads, const void* const* blocks, size_t count, size_t block_bytes);

// The SIMD target the peak was measured with (the same dispatch the library uses).
const char* PeakSimdTarget();

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_MACHINE_LIMITS_H_
