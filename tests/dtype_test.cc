// The library's scalar dtype conversions (core/dtype.h) against the tests' independent ones:
// every binary16 and bfloat16 value, and rounding of floats near every boundary.
#include "core/dtype.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "test_util.h"

namespace streamattn {
namespace {

using namespace testing_util;

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || FloatBits(a) == FloatBits(b);
}

TEST(DTypeTest, EveryHalfWidensExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_TRUE(SameFloat(F16ToF32(static_cast<uint16_t>(h)), FromF16(static_cast<uint16_t>(h))))
        << std::hex << h;
    ASSERT_TRUE(SameFloat(BF16ToF32(static_cast<uint16_t>(h)), FromBF16(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
}

TEST(DTypeTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    if (std::isnan(F16ToF32(bits))) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(F16ToF32(bits)))));
    } else {
      ASSERT_EQ(F32ToF16(F16ToF32(bits)), bits) << std::hex << h;
    }
    if (!std::isnan(BF16ToF32(bits))) ASSERT_EQ(F32ToBF16(BF16ToF32(bits)), bits) << std::hex << h;
  }
}

TEST(DTypeTest, NarrowingRoundsToNearestEven) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns cover subnormals, halfway cases, overflow and NaN.
    const float f = BitsToFloat(bits(rng));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f))));
      EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(f))));
      continue;
    }
    ASSERT_EQ(F32ToF16(f), ToF16(f)) << f;
    ASSERT_EQ(F32ToBF16(f), ToBF16(f)) << f;
  }
  // Exact halfway points between consecutive halves, around the subnormal boundary and 65504.
  for (float f : {65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 6.0975552e-05f, 2.9802322e-08f,
                  5.9604645e-08f, 8.940697e-08f, -2.9802322e-08f, 1.0009765625f, 1.00146484375f}) {
    EXPECT_EQ(F32ToF16(f), ToF16(f)) << f;
  }
}

}  // namespace
}  // namespace streamattn
