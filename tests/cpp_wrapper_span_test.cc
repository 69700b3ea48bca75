// The wrapper under C++20: views and exp2 from std::span, with the span's size checked against
// what the shape and strides reach. (The rest of the wrapper is C++17; cpp_wrapper_test.cc.)
#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "streamattn/streamattn.hpp"

namespace streamattn {
namespace {

TEST(CppWrapperSpanTest, SpanViewsAndExp2) {
  std::vector<float> scores = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, probs(6);
  Context ctx(1);
  ctx.Softmax(Tensor(std::span<const float>(scores), {2, 3}), Tensor(std::span(probs), {2, 3}));
  EXPECT_NEAR(probs[0] + probs[1] + probs[2], 1.0f, 1e-6f);
  EXPECT_NEAR(probs[2], probs[5], 1e-7f);  // softmax ignores a row's offset

  std::vector<float> x = {3.0f, -2.0f}, y(2);
  ctx.Exp2(std::span<const float>(x), std::span(y));
  EXPECT_EQ(y[0], 8.0f);
  EXPECT_EQ(y[1], 0.25f);
}

TEST(CppWrapperSpanTest, ASpanTooShortForTheViewThrows) {
  std::vector<float> data(11);
  EXPECT_NO_THROW(Tensor(std::span(data), {2, 3}, {5, 2}));  // reaches element 5 + 2 * 2 = 9
  EXPECT_THROW(Tensor(std::span(data), {3, 4}), Error);      // 12 elements from 11
  EXPECT_THROW(Tensor(std::span(data), {2, 3}, {6, 3}), Error);
  Context ctx(1);
  std::vector<float> x(2), y(1);
  EXPECT_THROW(ctx.Exp2(std::span<const float>(x), std::span(y)), Error);
}

}  // namespace
}  // namespace streamattn
