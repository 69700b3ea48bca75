// The vector row conversions (cpu/convert-inl.h) on every compiled target: every binary16 and
// bfloat16 bit pattern, Inf and NaN included, widens exactly as the scalar definition does.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "convert_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "compiled_target-inl.h"
#include "cpu/convert-inl.h"
#include "hwy/tests/hwy_gtest.h"
// clang-format on
#include "core/dtype.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

void TestEveryHalfWidensExactly() {
  const hn::ScalableTag<float> d;
  std::vector<uint16_t> bits(65536);
  for (uint32_t i = 0; i < 65536; ++i) bits[i] = static_cast<uint16_t>(i);
  std::vector<float> out(65536);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    // Odd offsets and lengths exercise the scalar tail next to the vector body.
    for (size_t offset : {size_t{0}, size_t{3}}) {
      LoadRowAsF32(d, dtype, bits.data() + offset, 1, 65536 - offset - 5, out.data());
      for (size_t i = 0; i + offset + 5 < 65536; ++i) {
        const float want = LoadAsFloat(dtype, &bits[i + offset]);
        const bool same =
            std::isnan(want) ? std::isnan(out[i]) : FloatBits(want) == FloatBits(out[i]);
        ASSERT_TRUE(same) << DTypeName(dtype) << " bits " << std::hex << bits[i + offset];
      }
    }
  }
}

void TestStridedRowsAndStores() {
  const hn::ScalableTag<float> d;
  std::vector<float> src(300), dst(100);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0.5f * static_cast<float>(i) - 7.0f;
  LoadRowAsF32(d, DType::kF32, src.data(), 3, 100, dst.data());
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(dst[i], src[3 * i]);
  std::vector<uint16_t> halves(200, 0xFFFF);
  StoreRowFromF32(d, dst.data(), 100, DType::kF16, halves.data(), 2);
  for (size_t i = 0; i < 100; ++i) {
    ASSERT_EQ(halves[2 * i], F32ToF16(dst[i]));
    ASSERT_EQ(halves[2 * i + 1], 0xFFFF) << "wrote between strided elements";
  }
}

void TestNarrowingRowsRoundToNearestEven() {
  const hn::ScalableTag<float> d;
  std::mt19937 rng(17);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> src(4099);
  for (float& x : src) x = BitsToFloat(bits(rng));
  // Halfway cases and the edges of each format's range.
  const float edges[] = {65504.0f,    65519.99f,   65520.0f, 6.1035156e-05f, 2.9802322e-08f,
                         1.00390625f, 1.01171875f, -0.0f,    3.3895314e38f,  1e-40f};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); ++i) src[i] = edges[i];
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> out(2 * src.size() + 1, 0xABCD);  // room for f32, to keep GCC quiet
    StoreRowFromF32(d, src.data(), src.size(), dtype, out.data(), 1);
    for (size_t i = 0; i < src.size(); ++i) {
      const uint16_t want = dtype == DType::kF16 ? F32ToF16(src[i]) : F32ToBF16(src[i]);
      if (std::isnan(src[i])) {
        ASSERT_TRUE(std::isnan(LoadAsFloat(dtype, &out[i]))) << DTypeName(dtype);
      } else {
        ASSERT_EQ(out[i], want) << DTypeName(dtype) << " " << src[i];
      }
    }
    ASSERT_EQ(out[src.size()], 0xABCD) << "wrote past the row";
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

class ConvertTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(ConvertTest);
SATTN_TEST_RUNS_ON_ITS_TARGET(ConvertTest)
HWY_EXPORT_AND_TEST_P(ConvertTest, TestEveryHalfWidensExactly);
HWY_EXPORT_AND_TEST_P(ConvertTest, TestStridedRowsAndStores);
HWY_EXPORT_AND_TEST_P(ConvertTest, TestNarrowingRowsRoundToNearestEven);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
