// Measuring an exp2 implementation's error in ulp against std::exp2 in double, per input range.
// Shared by the dense test (every 8th float) and the exhaustive one (every float).
#ifndef STREAMATTN_TESTS_EXP2_ACCURACY_H_
#define STREAMATTN_TESTS_EXP2_ACCURACY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace streamattn {

struct Exp2RangeError {
  const char* name;
  float lo, hi;  // x in [lo, hi)
  double max_ulp = 0.0;
  float worst_x = 0.0f;
  uint64_t count = 0;
};

struct Exp2AccuracyTable {
  std::vector<Exp2RangeError> ranges;
  void Print(const char* label) const;
};

using Exp2ArrayFn = std::function<void(const float* x, float* y, size_t n)>;

// Evaluates fn on every `stride`-th float of [-150, 128] (by bit pattern), on all cores.
Exp2AccuracyTable MeasureExp2Accuracy(const Exp2ArrayFn& fn, uint32_t stride);

// 8, or larger when STREAMATTN_TEST_SMALL is set (emulated targets).
uint32_t DenseSweepStride();

}  // namespace streamattn

#endif  // STREAMATTN_TESTS_EXP2_ACCURACY_H_
