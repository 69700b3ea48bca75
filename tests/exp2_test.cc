// Exp2 against std::exp2 in double, on every compiled SIMD target: every 8th float of
// [-150, 128] (every float under the `exhaustive` label, exp2_exhaustive_test), the special
// values, and the scalar twin in core.
#include "cpu/exp2.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/exp2_scalar.h"
#include "exp2_accuracy.h"
#include "gtest/gtest.h"
#include "hwy/tests/hwy_gtest.h"
#include "library_target_test.h"

namespace streamattn {
namespace {

class Exp2Test : public LibraryTargetTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Exp2Test);

TEST_P(Exp2Test, DenseSweepWithinTwoUlp) {
  const Exp2AccuracyTable table = MeasureExp2Accuracy(Exp2Array, DenseSweepStride());
  table.Print(hwy::TargetName(GetParam()));
  for (const Exp2RangeError& range : table.ranges) {
    EXPECT_LE(range.max_ulp, 2.0) << range.name << " at x=" << range.worst_x;
    EXPECT_GT(range.count, 0u) << range.name;
  }
}

TEST_P(Exp2Test, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-kInf,
                                -1e30f,
                                -1000.0f,
                                -151.0f,
                                -150.5f,
                                -150.0f,
                                0.0f,
                                -0.0f,
                                1.0f,
                                128.0f,
                                128.5f,
                                1000.0f,
                                1e30f,
                                kInf,
                                std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> y(x.size());
  Exp2Array(x.data(), y.data(), x.size());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(y[i], 0.0f) << "x=" << x[i];
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_EQ(y[7], 1.0f);
  EXPECT_EQ(y[8], 2.0f);
  for (size_t i = 9; i < 14; ++i) EXPECT_EQ(y[i], kInf) << "x=" << x[i];
  EXPECT_TRUE(std::isnan(y[14]));
  EXPECT_TRUE(std::isnan(y[15]));
}

TEST_P(Exp2Test, ExactPowersOfTwoAndAnyLength) {
  // Integers give exact powers of two, including subnormals; every length exercises the tail.
  for (size_t n = 0; n < 70; ++n) {
    std::vector<float> x(n), y(n + 1, -1.0f);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(-149 + static_cast<int>(i) * 4);
    Exp2Array(x.data(), y.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const double want = std::exp2(static_cast<double>(x[i]));
      EXPECT_EQ(y[i],
                want < 3.5e38 ? static_cast<float>(want) : std::numeric_limits<float>::infinity())
          << "x=" << x[i];
    }
    EXPECT_EQ(y[n], -1.0f) << "wrote past the end, n=" << n;
  }
}

// The softmax's exp2 (x <= 0): within 2 ulp down to -126.5 (subnormal results included), 0
// below, NaN for NaN.
TEST_P(Exp2Test, NonPositiveVariant) {
  std::vector<float> x, y;
  const uint32_t negative_zero = 0x80000000u, end = FloatBits(-130.0f);
  for (uint32_t bits = negative_zero; bits <= end; bits += 8 * DenseSweepStride()) {
    x.push_back(BitsToFloat(bits));
  }
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  y.resize(x.size());
  Exp2NonPositiveArray(x.data(), y.data(), x.size());
  double worst = 0.0;
  float worst_x = 0.0f;
  for (size_t i = 0; i + 2 < x.size(); ++i) {
    if (x[i] < -126.5f) {
      ASSERT_EQ(y[i], 0.0f) << "x=" << x[i];
      continue;
    }
    const double exact = std::exp2(static_cast<double>(x[i]));
    const double ulp = exact < std::ldexp(1.0, -126) ? std::ldexp(1.0, -149)
                                                     : std::ldexp(1.0, std::ilogb(exact) - 23);
    const double err = std::fabs(y[i] - exact) / ulp;
    if (!(err <= worst)) worst = err, worst_x = x[i];
  }
  EXPECT_LE(worst, 2.0) << "at x=" << worst_x;
  EXPECT_EQ(y[x.size() - 2], 0.0f);
  EXPECT_TRUE(std::isnan(y.back()));
  std::printf("exp2 non-positive variant, %s: max %.3f ulp over [-126.5, 0]\n",
              hwy::TargetName(GetParam()), worst);
}

TEST(Exp2ScalarTest, DenseSweepWithinTwoUlp) {
  auto scalar = [](const float* x, float* y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = Exp2Scalar(x[i]);
  };
  const Exp2AccuracyTable table = MeasureExp2Accuracy(scalar, 4 * DenseSweepStride());
  table.Print("core Exp2Scalar");
  for (const Exp2RangeError& range : table.ranges) {
    EXPECT_LE(range.max_ulp, 2.0) << range.name << " at x=" << range.worst_x;
  }
  EXPECT_EQ(Exp2Scalar(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(Exp2Scalar(128.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Exp2Scalar(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace streamattn
