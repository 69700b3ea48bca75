// Validation of views (core/tensor.h): overlap detection and byte-span arithmetic.
#include "core/tensor.h"

#include <vector>

#include "gtest/gtest.h"

namespace streamattn {
namespace {

sattn_tensor View(void* data, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  sattn_tensor t{};
  t.data = data;
  t.dtype = SATTN_DTYPE_F32;
  t.ndim = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    t.shape[i] = shape[i];
    t.strides[i] = strides[i];
  }
  return t;
}

TEST(TensorTest, SelfOverlap) {
  std::vector<float> buffer(1000);
  Tensor t;
  // Dense, permuted, padded and broadcast-free layouts are injective.
  for (const auto& strides : std::vector<std::vector<int64_t>>{
           {60, 20, 5, 1}, {60, 5, 15, 1}, {1, 2, 6, 24}, {200, 50, 10, 1}}) {
    const sattn_tensor v = View(buffer.data(), {2, 3, 4, 5}, strides);
    ASSERT_TRUE(ValidateTensor(&v, "t", 4, &t).ok());
    EXPECT_TRUE(CheckNoSelfOverlap(t, "t").ok()) << strides[0] << "," << strides[1];
  }
  // Stride 0 over an extent > 1, and rows that step on each other, are not.
  for (const auto& strides :
       std::vector<std::vector<int64_t>>{{60, 0, 5, 1}, {60, 20, 4, 1}, {60, 20, 5, 2}}) {
    const sattn_tensor v = View(buffer.data(), {2, 3, 4, 5}, strides);
    ASSERT_TRUE(ValidateTensor(&v, "t", 4, &t).ok());
    EXPECT_FALSE(CheckNoSelfOverlap(t, "t").ok()) << strides[1] << "," << strides[2];
  }
  // Stride 0 on an extent of 1 is harmless.
  const sattn_tensor v = View(buffer.data(), {1, 3, 4, 5}, {0, 20, 5, 1});
  ASSERT_TRUE(ValidateTensor(&v, "t", 4, &t).ok());
  EXPECT_TRUE(CheckNoSelfOverlap(t, "t").ok());
}

TEST(TensorTest, ByteRangeWithNegativeStrides) {
  std::vector<float> buffer(100);
  const sattn_tensor v = View(buffer.data() + 50, {3, 4}, {-10, 1});
  Tensor t;
  ASSERT_TRUE(ValidateTensor(&v, "t", 2, &t).ok());
  EXPECT_EQ(t.LowestByte(), reinterpret_cast<uintptr_t>(buffer.data() + 30));
  EXPECT_EQ(t.EndByte(), reinterpret_cast<uintptr_t>(buffer.data() + 54));
}

TEST(TensorTest, PartialOverlap) {
  std::vector<float> buffer(100);
  Tensor a, b, c;
  const sattn_tensor va = View(buffer.data(), {10}, {1});
  const sattn_tensor vb = View(buffer.data() + 9, {10}, {1});
  const sattn_tensor vc = View(buffer.data() + 10, {10}, {1});
  ASSERT_TRUE(ValidateTensor(&va, "a", 1, &a).ok());
  ASSERT_TRUE(ValidateTensor(&vb, "b", 1, &b).ok());
  ASSERT_TRUE(ValidateTensor(&vc, "c", 1, &c).ok());
  EXPECT_FALSE(CheckNoPartialOverlap(a, "a", b, "b", true).ok());
  EXPECT_TRUE(CheckNoPartialOverlap(a, "a", c, "c", false).ok());
  EXPECT_TRUE(CheckNoPartialOverlap(a, "a", a, "a", true).ok());
  EXPECT_FALSE(CheckNoPartialOverlap(a, "a", a, "a", false).ok());
}

}  // namespace
}  // namespace streamattn
