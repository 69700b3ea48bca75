// The quantized cache elements on every compiled target (cpu/quantized_element-inl.h) against
// the scalar rules of core/quantized.h, and those rules against the formats' definitions
// (test_util): every E4M3 code through Load and LoadOne, with the loads' factor of 2^-8; I8 and
// I4 values times the scale each value's address finds in place (f32 and f16 scales, groups of
// 2 to a whole row), and converted rows with explicit scales in any layout and group size.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quantized_element_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "compiled_target-inl.h"
#include "core/quantized.h"
#include "cpu/quantized_element-inl.h"
#include "hwy/tests/hwy_gtest.h"
#include "test_util.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

void TestE4M3LoadsEveryCode() {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  std::vector<uint8_t> codes(256 + N);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i);
  std::vector<float> got(N);
  const E4M3Element element;
  for (size_t i = 0; i < 256; i += N) {
    hn::StoreU(element.Load(d, codes.data(), i), d, got.data());
    for (size_t j = 0; j < N; ++j) {
      const uint8_t code = static_cast<uint8_t>(i + j);
      const float want = E4M3ToF32(code);
      const float one = element.LoadOne(codes.data(), static_cast<int64_t>(i + j));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[j]) && std::isnan(one)) << int{code};
      } else {
        ASSERT_EQ(got[j] * kE4M3LoadFactor, want) << int{code};
        ASSERT_EQ(one * kE4M3LoadFactor, want) << int{code};
      }
    }
  }
}

// A cache of `rows` rows of `dim` values of element E, with scales of type S laid out as the
// in-place lookup addresses them (row r's group g at r * dim / group + g).
template <class E, typename S>
void CheckGroupScaledLoads(size_t dim, int log2_group, std::mt19937& rng) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d), group = size_t{1} << log2_group, rows = 3;
  const size_t bytes = rows * dim * E::kBits / 8;
  std::vector<uint8_t> values(bytes);
  for (uint8_t& b : values) b = static_cast<uint8_t>(rng());
  std::vector<S> scales(rows * dim / group);
  std::vector<float> scale_values(scales.size());
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (size_t i = 0; i < scales.size(); ++i) {
    const float s = u(rng);
    if constexpr (std::is_same_v<S, float>) {
      scales[i] = s;
      scale_values[i] = s;
    } else {
      const uint16_t bits = F32ToF16(s);
      std::memcpy(&scales[i], &bits, 2);
      scale_values[i] = F16ToF32(bits);
    }
  }
  const E element{GroupScaleLookup<S>{values.data(), scales.data(), log2_group}};
  auto value_at = [&](size_t r, size_t i) {
    const uint8_t* row = values.data() + r * dim * E::kBits / 8;
    const float q = E::kBits == 4 ? static_cast<float>(I4At(row, static_cast<int64_t>(i)))
                                  : static_cast<float>(static_cast<int8_t>(row[i]));
    return q * scale_values[(r * dim + i) / group];
  };
  std::vector<float> got(N), converted(dim);
  for (size_t r = 0; r < rows; ++r) {
    const auto* row =
        reinterpret_cast<const typename E::Stored*>(values.data() + r * dim * E::kBits / 8);
    // In place, a vector's values share one scale: groups of at least a vector.
    for (size_t i = 0; i + N <= dim && group >= N; i += N) {
      hn::StoreU(element.Load(d, row, i), d, got.data());
      for (size_t j = 0; j < N; ++j) ASSERT_EQ(got[j], value_at(r, i + j)) << r << " " << i + j;
    }
    for (size_t i = 0; i < dim; ++i) {
      ASSERT_EQ(element.LoadOne(row, static_cast<int64_t>(i)), value_at(r, i)) << r << " " << i;
    }
    ConvertScaledRow<E>(d, row, scales.data() + r * dim / group, 1, static_cast<int64_t>(group),
                        dim, converted.data());
    for (size_t i = 0; i < dim; ++i) ASSERT_EQ(converted[i], value_at(r, i)) << r << " " << i;
  }
}

void TestGroupScaledLoads() {
  std::mt19937 rng(11);
  for (int log2_group = 1; log2_group <= 7; ++log2_group) {
    for (size_t dim : {size_t{128}, size_t{256}}) {
      CheckGroupScaledLoads<I8Element<float>, float>(dim, log2_group, rng);
      CheckGroupScaledLoads<I8Element<hwy::float16_t>, hwy::float16_t>(dim, log2_group, rng);
      CheckGroupScaledLoads<I4Element<float>, float>(dim, log2_group, rng);
      CheckGroupScaledLoads<I4Element<hwy::float16_t>, hwy::float16_t>(dim, log2_group, rng);
    }
  }
}

// Converted rows take any group size (24, 40: no power of two; 2: less than a vector) and a
// scale stride other than 1.
void TestConvertScaledRowAnyGroup() {
  const hn::ScalableTag<float> d;
  std::mt19937 rng(5);
  for (size_t group : {size_t{2}, size_t{8}, size_t{24}, size_t{40}, size_t{120}}) {
    const size_t dim = 120;
    std::vector<uint8_t> i4(dim / 2);
    std::vector<int8_t> i8(dim);
    for (uint8_t& b : i4) b = static_cast<uint8_t>(rng());
    for (int8_t& b : i8) b = static_cast<int8_t>(rng());
    std::vector<float> scales(3 * dim / group);
    for (float& s : scales) s = static_cast<float>(rng() % 1000) / 97.0f;
    std::vector<float> got(dim);
    ConvertScaledRow<I4Element<float>>(d, i4.data(), scales.data(), 3, static_cast<int64_t>(group),
                                       dim, got.data());
    for (size_t i = 0; i < dim; ++i) {
      ASSERT_EQ(got[i], I4At(i4.data(), static_cast<int64_t>(i)) * scales[3 * (i / group)]) << i;
    }
    ConvertScaledRow<I8Element<float>>(d, i8.data(), scales.data(), 3, static_cast<int64_t>(group),
                                       dim, got.data());
    for (size_t i = 0; i < dim; ++i) ASSERT_EQ(got[i], i8[i] * scales[3 * (i / group)]) << i;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

using testing_util::FromE4M3;
using testing_util::ToE4M3;

class QuantizedElementTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(QuantizedElementTest);
SATTN_TEST_RUNS_ON_ITS_TARGET(QuantizedElementTest)
HWY_EXPORT_AND_TEST_P(QuantizedElementTest, TestE4M3LoadsEveryCode);
HWY_EXPORT_AND_TEST_P(QuantizedElementTest, TestGroupScaledLoads);
HWY_EXPORT_AND_TEST_P(QuantizedElementTest, TestConvertScaledRowAnyGroup);

// The library's scalar E4M3 rules (core/quantized.h) against the definition (test_util).
TEST(QuantizedFormats, E4M3DecodesEveryCodeAndRoundsToNearestEven) {
  for (int code = 0; code < 256; ++code) {
    const float want = FromE4M3(static_cast<uint8_t>(code));
    const float got = E4M3ToF32(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
    } else {
      EXPECT_EQ(got, want) << code;
      EXPECT_EQ(F32ToE4M3(want), code == 0x80 ? 0x80 : code) << code;  // exact values round-trip
    }
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-500.0f, 500.0f);
  std::uniform_int_distribution<int> exponent(-14, 9);
  for (int i = 0; i < 200000; ++i) {
    const float x = i % 2 ? u(rng) : std::ldexp(u(rng) / 500.0f, exponent(rng));
    ASSERT_EQ(F32ToE4M3(x), ToE4M3(x)) << x;
  }
  // Ties: halfway between 1 and 1.125 goes to 1 (even), between 1.125 and 1.25 to 1.25.
  EXPECT_EQ(F32ToE4M3(1.0625f), 0x38);
  EXPECT_EQ(F32ToE4M3(1.1875f), 0x3A);
  EXPECT_EQ(F32ToE4M3(1e9f), 0x7E);
  EXPECT_EQ(F32ToE4M3(-1e9f), 0xFE);
}

TEST(QuantizedFormats, I4NibblesAreElementsInOrder) {
  uint8_t row[3] = {0, 0, 0};
  const int values[6] = {-8, 7, -1, 0, 3, -5};
  for (int i = 0; i < 6; ++i) SetI4(row, i, values[i]);
  EXPECT_EQ(row[0], 0x78);  // element 0 (-8 = 0x8) low, element 1 (7) high
  EXPECT_EQ(row[1], 0x0F);
  EXPECT_EQ(row[2], 0xB3);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(I4At(row, i), values[i]);
}

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
