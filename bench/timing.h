// Timing for the benchmark tool: the median of several timed runs after a warm-up, because the
// machines are noisy and a median is what the targets are stated in.
#ifndef STREAMATTN_BENCH_TIMING_H_
#define STREAMATTN_BENCH_TIMING_H_

#include <algorithm>
#include <chrono>
#include <vector>

namespace streamattn {
namespace bench {

inline double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs fn once to warm up, then `repeats` times; returns the median in milliseconds. Each
// timed run repeats fn until it lasts at least min_ms, so short kernels are not timer noise.
template <typename F>
double MedianMs(int repeats, F&& fn, double min_ms = 20.0) {
  fn();
  int inner = 1;
  for (;;) {
    const double start = NowMs();
    for (int i = 0; i < inner; ++i) fn();
    const double elapsed = NowMs() - start;
    if (elapsed >= min_ms || inner >= (1 << 20)) break;
    inner *= elapsed > 0.0 ? std::max(2, static_cast<int>(min_ms / elapsed) + 1) : 16;
  }
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const double start = NowMs();
    for (int i = 0; i < inner; ++i) fn();
    times.push_back((NowMs() - start) / inner);
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_TIMING_H_
