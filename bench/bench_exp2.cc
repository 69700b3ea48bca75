// `streamattn bench exp2`: throughput of the library's exp2 (sattn_exp2, one thread, a buffer
// that stays in L2 so the exponential, not memory, is timed) against scalar std::exp2f and
// Highway's vectorised Exp on the same target, in the same run.
#include <cmath>
#include <random>
#include <vector>

#include "bench_common.h"
#include "exp2_baselines.h"
#include "machine_limits.h"
#include "timing.h"

namespace streamattn {
namespace bench {

std::vector<Row> BenchExp2(const BenchOptions& options) {
  const int64_t n = options.quick ? 4096 : 65536;  // 256 KiB: in L2
  std::vector<float> x(n), y(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-30.0f, 0.0f);  // softmax arguments are <= 0
  for (float& v : x) v = dist(rng);
  ContextPtr ctx = MakeContext(1);

  const double ours_ms = MedianMs(options.repeats, [&] {
    CheckOk(sattn_exp2(ctx.get(), x.data(), y.data(), n), "sattn_exp2");
  });
  const double std_ms = MedianMs(options.repeats, [&] {
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp2f(x[i]);
  });
  const double hwy_ms = MedianMs(
      options.repeats, [&] { HighwayExpArray(x.data(), y.data(), static_cast<size_t>(n)); });

  std::vector<Row> rows;
  for (const auto& baseline :
       {std::make_pair("std::exp2f", std_ms), std::make_pair("hwy::Exp", hwy_ms)}) {
    Row row;
    row.Set("op", "exp2")
        .Set("n", n)
        .Set("dtype", "f32")
        .Set("threads", 1)
        .Set("simd_target", PeakSimdTarget())
        .Set("median_ms", ours_ms)
        .Set("items_per_s", static_cast<double>(n) / (ours_ms * 1e-3))
        .Set("baseline", baseline.first)
        .Set("baseline_median_ms", baseline.second)
        .Set("ratio", baseline.second / ours_ms);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
