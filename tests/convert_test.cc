// The vector row conversions (cpu/convert-inl.h) on every compiled target: every binary16 and
// bfloat16 bit pattern, Inf and NaN included, widens exactly as the scalar definition does.
#include <cmath>
#include <cstring>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "convert_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
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
  StoreRowFromF32(dst.data(), 100, DType::kF16, halves.data(), 2);
  for (size_t i = 0; i < 100; ++i) {
    ASSERT_EQ(halves[2 * i], F32ToF16(dst[i]));
    ASSERT_EQ(halves[2 * i + 1], 0xFFFF) << "wrote between strided elements";
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
HWY_EXPORT_AND_TEST_P(ConvertTest, TestEveryHalfWidensExactly);
HWY_EXPORT_AND_TEST_P(ConvertTest, TestStridedRowsAndStores);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
