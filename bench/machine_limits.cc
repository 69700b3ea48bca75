// FMA peak: independent accumulators per thread (kFmaChains), long enough to dwarf thread
// start-up.
// Bandwidth: SIMD sums over a 1 GiB buffer, touched once beforehand so page faults are not
// timed; the best of several passes, as a limit should be.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "machine_limits.cc"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "machine_limits.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__) && !defined(__clang__)  // as the Arm kernels (native_tiles-inl.h)
#define SATTN_BENCH_BFDOT 1
#include <arm_neon.h>

#include "cpu/arm_features.h"
#endif

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/targets.h"
#include "timing.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent accumulators: enough for 2 FMA pipes x 4-5 cycles of latency (x86) and 4 pipes x
// 4 cycles (Neoverse V1), and few enough that they and the two operands stay in registers. x86
// below AVX-512 has 16 vector registers: 16 chains there spilled to the stack and measured
// 58 GFLOP/s on a Zen 3 core whose FMA pipes do 102 (12 or 14 chains), which put prefill at
// "1.27 of the peak". Named variables, not an array: SVE vectors cannot be array elements.
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr size_t kFmaChains = 12;
#else
constexpr size_t kFmaChains = 16;
#endif

// Returns the flops done; *sink keeps the result alive.
double FmaChains(int64_t iterations, float* sink) {
  const hn::ScalableTag<float> d;
  const auto a = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-7f);
  auto c0 = hn::Set(d, 1.0f), c1 = hn::Set(d, 1.1f), c2 = hn::Set(d, 1.2f), c3 = hn::Set(d, 1.3f);
  auto c4 = hn::Set(d, 1.4f), c5 = hn::Set(d, 1.5f), c6 = hn::Set(d, 1.6f), c7 = hn::Set(d, 1.7f);
  auto c8 = hn::Set(d, 1.8f), c9 = hn::Set(d, 1.9f), c10 = hn::Set(d, 2.0f), c11 = hn::Set(d, 2.1f);
  auto c12 = hn::Set(d, 2.2f), c13 = hn::Set(d, 2.3f), c14 = hn::Set(d, 2.4f),
       c15 = hn::Set(d, 2.5f);
  for (int64_t i = 0; i < iterations; ++i) {
    c0 = hn::MulAdd(c0, a, b), c1 = hn::MulAdd(c1, a, b), c2 = hn::MulAdd(c2, a, b);
    c3 = hn::MulAdd(c3, a, b), c4 = hn::MulAdd(c4, a, b), c5 = hn::MulAdd(c5, a, b);
    c6 = hn::MulAdd(c6, a, b), c7 = hn::MulAdd(c7, a, b), c8 = hn::MulAdd(c8, a, b);
    c9 = hn::MulAdd(c9, a, b), c10 = hn::MulAdd(c10, a, b), c11 = hn::MulAdd(c11, a, b);
    if constexpr (kFmaChains == 16) {
      c12 = hn::MulAdd(c12, a, b), c13 = hn::MulAdd(c13, a, b), c14 = hn::MulAdd(c14, a, b);
      c15 = hn::MulAdd(c15, a, b);
    }
  }
  auto sum =
      hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7)));
  sum = hn::Add(sum, hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)));
  if constexpr (kFmaChains == 16) {
    sum = hn::Add(sum, hn::Add(hn::Add(c12, c13), hn::Add(c14, c15)));
  }
  *sink = hn::GetLane(hn::SumOfLanes(d, sum));
  return 2.0 * static_cast<double>(kFmaChains * hn::Lanes(d)) * static_cast<double>(iterations);
}

float SumFloats(const float* HWY_RESTRICT p, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::Add(s0, hn::LoadU(d, p + i));
    s1 = hn::Add(s1, hn::LoadU(d, p + i + lanes));
    s2 = hn::Add(s2, hn::LoadU(d, p + i + 2 * lanes));
    s3 = hn::Add(s3, hn::LoadU(d, p + i + 3 * lanes));
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += p[i];
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)))) + tail;
}

int64_t Target() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace bench
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace bench {

HWY_EXPORT(FmaChains);
HWY_EXPORT(SumFloats);
HWY_EXPORT(Target);

namespace {

// Runs fn(thread) on `threads` threads at once; returns the wall time in ms.
template <typename F>
double TimeOnThreads(int threads, F&& fn) {
  std::vector<std::thread> pool;
  const double start = NowMs();
  for (int t = 0; t < threads; ++t) pool.emplace_back([&fn, t] { fn(t); });
  for (std::thread& th : pool) th.join();
  return NowMs() - start;
}

// The same, but the threads first wait until all of them run, and the time is from the first
// one's start of fn to the last one's end: thread creation (tens of microseconds) is not
// timed, which matters when fn takes only a millisecond or two.
template <typename F>
double TimeStartedThreads(int threads, F&& fn) {
  std::atomic<int> arrived{0};
  std::vector<double> start(threads), end(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      arrived.fetch_add(1);
      while (arrived.load() < threads) std::this_thread::yield();
      start[t] = NowMs();
      fn(t);
      end[t] = NowMs();
    });
  }
  for (std::thread& th : pool) th.join();
  return *std::max_element(end.begin(), end.end()) - *std::min_element(start.begin(), start.end());
}

}  // namespace

double MeasureFmaPeakGflops(int threads) {
  const auto fma = HWY_DYNAMIC_DISPATCH(FmaChains);
  std::vector<float> sinks(threads);
  constexpr int64_t kIterations = 20000000;
  double best = 0.0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<double> flops(threads);
    const double ms =
        TimeOnThreads(threads, [&](int t) { flops[t] = fma(kIterations, &sinks[t]); });
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / (ms * 1e6));
  }
  return best;
}

namespace {

// `chains` (iterations, sink) -> flops, run once on `threads` threads for about `ms`
// milliseconds at the rate of a short calibration run on one thread: GFLOP/s.
double ChainsGflopsOnce(double (*chains)(int64_t, float*), int threads, double ms) {
  std::vector<float> sinks(threads);
  constexpr int64_t kProbe = 200000;
  const double probe_start = NowMs();
  chains(kProbe, &sinks[0]);
  const double probe_ms = NowMs() - probe_start;
  const int64_t iterations =
      std::max<int64_t>(kProbe, static_cast<int64_t>(kProbe * ms / std::max(probe_ms, 1e-3)));
  std::vector<double> flops(threads);
  const double run_ms =
      TimeStartedThreads(threads, [&](int t) { flops[t] = chains(iterations, &sinks[t]); });
  double total = 0.0;
  for (double f : flops) total += f;
  return total / (run_ms * 1e6);
}

}  // namespace

double FmaGflopsOnce(int threads, double ms) {
  return ChainsGflopsOnce(HWY_DYNAMIC_DISPATCH(FmaChains), threads, ms);
}

#if defined(__x86_64__)
// 16 chains of vdpbf16ps on zmm registers; returns the flops done (64 per instruction).
__attribute__((target("avx512f,avx512bf16"))) double Bf16DotChains(int64_t iterations,
                                                                   float* sink) {
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  __m512 c[16];
  for (int j = 0; j < 16; ++j) c[j] = _mm512_set1_ps(1.0f + 0.1f * static_cast<float>(j));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) c[j] = _mm512_dpbf16_ps(c[j], a, a);
  }
  __m512 sum = c[0];
  for (int j = 1; j < 16; ++j) sum = _mm512_add_ps(sum, c[j]);
  *sink = _mm512_reduce_add_ps(sum);
  return 64.0 * 16.0 * static_cast<double>(iterations);
}
#elif defined(SATTN_BENCH_BFDOT)
// 16 chains of BFDOT on 128-bit registers; returns the flops done (16 per instruction).
__attribute__((target("arch=armv8.2-a+bf16"))) double Bf16DotChains(int64_t iterations,
                                                                    float* sink) {
  const bfloat16x8_t a = vreinterpretq_bf16_u16(vdupq_n_u16(0x3A83));  // about 1e-3
  float32x4_t c[16];
  for (int j = 0; j < 16; ++j) c[j] = vdupq_n_f32(1.0f + 0.1f * static_cast<float>(j));
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) c[j] = vbfdotq_f32(c[j], a, a);
  }
  float32x4_t sum = c[0];
  for (int j = 1; j < 16; ++j) sum = vaddq_f32(sum, c[j]);
  *sink = vaddvq_f32(sum);
  return 16.0 * 16.0 * static_cast<double>(iterations);
}
#endif

#if defined(__x86_64__) || defined(SATTN_BENCH_BFDOT)
// Whether this CPU runs Bf16DotChains.
static bool HostHasBf16Dot() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return ArmHasBf16();
#endif
}
#endif

double MeasureBf16DotPeakGflops(int threads) {
#if defined(__x86_64__) || defined(SATTN_BENCH_BFDOT)
  if (!HostHasBf16Dot()) return 0.0;
  std::vector<float> sinks(threads);
  constexpr int64_t kIterations = 10000000;
  double best = 0.0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<double> flops(threads);
    const double ms =
        TimeOnThreads(threads, [&](int t) { flops[t] = Bf16DotChains(kIterations, &sinks[t]); });
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / (ms * 1e6));
  }
  return best;
#else
  (void)threads;
  return 0.0;
#endif
}

double Bf16DotGflopsOnce(int threads, double ms) {
#if defined(__x86_64__) || defined(SATTN_BENCH_BFDOT)
  if (!HostHasBf16Dot()) return 0.0;
  return ChainsGflopsOnce(Bf16DotChains, threads, ms);
#else
  (void)threads, (void)ms;
  return 0.0;
#endif
}

double MeasureReadBandwidthGbps(int threads, size_t bytes) {
  const size_t n = bytes / sizeof(float);
  auto buffer = hwy::AllocateAligned<float>(n);
  if (!buffer) return 0.0;
  const size_t per_thread = n / threads;
  // Touch every page from the thread that will read it (first-touch placement).
  TimeOnThreads(threads, [&](int t) {
    std::fill(buffer.get() + t * per_thread, buffer.get() + (t + 1) * per_thread, 1.0f);
  });
  const auto sum = HWY_DYNAMIC_DISPATCH(SumFloats);
  std::vector<float> sinks(threads);
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    const double ms = TimeOnThreads(
        threads, [&](int t) { sinks[t] = sum(buffer.get() + t * per_thread, per_thread); });
    best = std::max(best, static_cast<double>(per_thread * threads * sizeof(float)) / (ms * 1e6));
  }
  return best;
}

double TimeBlockReadMs(int threads, const void* const* blocks, size_t count, size_t block_bytes) {
  const auto sum = HWY_DYNAMIC_DISPATCH(SumFloats);
  std::vector<float> sinks(threads);
  return TimeStartedThreads(threads, [&](int t) {
    float total = 0.0f;
    const size_t begin = count * t / threads, end = count * (t + 1) / threads;
    for (size_t i = begin; i < end; ++i) {
      total += sum(static_cast<const float*>(blocks[i]), block_bytes / sizeof(float));
    }
    sinks[t] = total;
  });
}

const char* PeakSimdTarget() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(Target)()); }

}  // namespace bench
}  // namespace streamattn
#endif  // HWY_ONCE
