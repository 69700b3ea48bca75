#include "exp2_accuracy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>

#include "core/dtype.h"

namespace streamattn {
namespace {

// Error of `got` against the exact 2^x, in units of the float spacing at the exact value
// (2^-149 in the subnormal range). An infinite result counts as 2^128, the next power of two
// past FLT_MAX, so a correctly rounded overflow near x = 128 is not an infinite error.
double UlpError(float got, double exact) {
  const double g = std::isinf(got) ? std::ldexp(1.0, 128) : static_cast<double>(got);
  double ulp;
  if (exact < std::ldexp(1.0, -126)) {
    ulp = std::ldexp(1.0, -149);
  } else {
    int e;
    std::frexp(exact, &e);  // exact in [2^(e-1), 2^e)
    ulp = std::ldexp(1.0, e - 1 - 23);
  }
  return std::fabs(g - exact) / ulp;
}

std::vector<Exp2RangeError> MakeRanges() {
  return {{"[-150, -126) subnormal results", -150.0f, -126.0f},
          {"[-126, -1)", -126.0f, -1.0f},
          {"[-1, 1)", -1.0f, 1.0f},
          {"[1, 64)", 1.0f, 64.0f},
          {"[64, 128)", 64.0f, 128.0f}};
}

void Accumulate(std::vector<Exp2RangeError>& ranges, float x, float y) {
  for (Exp2RangeError& r : ranges) {
    if (x >= r.lo && x < r.hi) {
      const double err = UlpError(y, std::exp2(static_cast<double>(x)));
      if (!(err <= r.max_ulp)) {  // NaN counts as worse than anything
        r.max_ulp = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
        r.worst_x = x;
      }
      ++r.count;
      return;
    }
  }
}

}  // namespace

void Exp2AccuracyTable::Print(const char* label) const {
  std::printf("exp2 accuracy, %s:\n", label);
  for (const Exp2RangeError& r : ranges) {
    std::printf("  %-32s max %.3f ulp at x=%.9g over %llu inputs\n", r.name, r.max_ulp, r.worst_x,
                static_cast<unsigned long long>(r.count));
  }
}

Exp2AccuracyTable MeasureExp2Accuracy(const Exp2ArrayFn& fn, uint32_t stride) {
  // Two bit-pattern intervals: +0 .. 128 and -0 .. -150 (floats are monotone in their bits on
  // each side of zero).
  const uint32_t pos_end = FloatBits(128.0f), neg_begin = FloatBits(-0.0f),
                 neg_end = FloatBits(-150.0f);
  const uint64_t pos_count = pos_end / stride + 1;
  const uint64_t neg_count = (neg_end - neg_begin) / stride + 1;
  const uint64_t total = pos_count + neg_count;
  auto input = [&](uint64_t i) {
    return i < pos_count ? BitsToFloat(static_cast<uint32_t>(i * stride))
                         : BitsToFloat(neg_begin + static_cast<uint32_t>((i - pos_count) * stride));
  };

  Exp2AccuracyTable table;
  table.ranges = MakeRanges();
  std::mutex mutex;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<Exp2RangeError> local = MakeRanges();
      constexpr uint64_t kChunk = 4096;
      std::vector<float> x(kChunk), y(kChunk);
      for (uint64_t begin = t * kChunk; begin < total; begin += threads * kChunk) {
        const uint64_t n = std::min(kChunk, total - begin);
        for (uint64_t i = 0; i < n; ++i) x[i] = input(begin + i);
        fn(x.data(), y.data(), n);
        for (uint64_t i = 0; i < n; ++i) Accumulate(local, x[i], y[i]);
      }
      std::lock_guard<std::mutex> lock(mutex);
      for (size_t r = 0; r < local.size(); ++r) {
        table.ranges[r].count += local[r].count;
        if (local[r].max_ulp > table.ranges[r].max_ulp) {
          table.ranges[r].max_ulp = local[r].max_ulp;
          table.ranges[r].worst_x = local[r].worst_x;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  return table;
}

uint32_t DenseSweepStride() { return std::getenv("STREAMATTN_TEST_SMALL") ? 509 : 8; }

}  // namespace streamattn
