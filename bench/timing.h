// Timing for the benchmark tool: the median of several timed runs after a warm-up, because the
// machines are noisy and a median is what the targets are stated in.
#ifndef STREAMATTN_BENCH_TIMING_H_
#define STREAMATTN_BENCH_TIMING_H_

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace streamattn {
namespace bench {

inline double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How many calls of fn one timed run needs to last at least min_ms (fn is called while
// finding out), so short kernels are not timer noise.
template <typename F>
int CallsPerTiming(F&& fn, double min_ms) {
  int inner = 1;
  for (;;) {
    const double start = NowMs();
    for (int i = 0; i < inner; ++i) fn();
    const double elapsed = NowMs() - start;
    if (elapsed >= min_ms || inner >= (1 << 20)) return inner;
    inner *= elapsed > 0.0 ? std::max(2, static_cast<int>(min_ms / elapsed) + 1) : 16;
  }
}

// Milliseconds per call of fn, over `calls` calls.
template <typename F>
double TimeCallsMs(int calls, F&& fn) {
  const double start = NowMs();
  for (int i = 0; i < calls; ++i) fn();
  return (NowMs() - start) / calls;
}

inline double Median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Runs fn once to warm up, then `repeats` times; returns each run's milliseconds per call.
// Each timed run repeats fn until it lasts at least min_ms.
template <typename F>
std::vector<double> TimesMs(int repeats, F&& fn, double min_ms = 20.0) {
  fn();
  const int inner = CallsPerTiming(fn, min_ms);
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) times.push_back(TimeCallsMs(inner, fn));
  return times;
}

// The median of TimesMs.
template <typename F>
double MedianMs(int repeats, F&& fn, double min_ms = 20.0) {
  return Median(TimesMs(repeats, fn, min_ms));
}

// Times a and b alternately, `pairs` times each, after a warm-up call of each; returns each
// run's milliseconds per call, a's then b's. On a shared machine the speed drifts from minute to
// minute; the drift hits both of a pair alike.
template <typename A, typename B>
std::pair<std::vector<double>, std::vector<double>> AlternatedTimesMs(int pairs, A&& a, B&& b,
                                                                      double min_ms = 20.0) {
  a();
  b();
  const int inner_a = CallsPerTiming(a, min_ms), inner_b = CallsPerTiming(b, min_ms);
  std::vector<double> times_a, times_b;
  for (int r = 0; r < pairs; ++r) {
    times_a.push_back(TimeCallsMs(inner_a, a));
    times_b.push_back(TimeCallsMs(inner_b, b));
  }
  return {times_a, times_b};
}

// The median of the pairs' ratios time(a) / time(b): far steadier than the ratio of two medians
// measured one after the other, since a drift of the machine's speed cancels within a pair.
template <typename A, typename B>
double MedianTimeRatio(int pairs, A&& a, B&& b, double min_ms = 20.0) {
  const auto [times_a, times_b] = AlternatedTimesMs(pairs, a, b, min_ms);
  std::vector<double> ratios;
  for (size_t r = 0; r < times_a.size(); ++r) ratios.push_back(times_a[r] / times_b[r]);
  return Median(ratios);
}

// The median milliseconds per call of a and of b, timed in alternation, so that a change of load
// falls on both.
template <typename A, typename B>
std::pair<double, double> MedianPairMs(int pairs, A&& a, B&& b, double min_ms = 20.0) {
  const auto [times_a, times_b] = AlternatedTimesMs(pairs, a, b, min_ms);
  return {Median(times_a), Median(times_b)};
}

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_TIMING_H_
