// The oracle checked on cases small enough to know by hand, so the judge is itself judged.
#include <cmath>

#include "gtest/gtest.h"
#include "reference/reference_attention.h"

namespace streamattn {
namespace reference {
namespace {

TEST(ReferenceTest, SoftmaxOfTheSeedRow) {
  const std::vector<double> p = Softmax({2, 5, 1, 7});
  const double l = std::exp(-5.0) + std::exp(-2.0) + std::exp(-6.0) + 1.0;  // 1.1446
  EXPECT_NEAR(l, 1.1446, 1e-4);
  EXPECT_NEAR(p[3], 1.0 / l, 1e-15);
  EXPECT_NEAR(LogSumExp({2, 5, 1, 7}), 7.0 + std::log(l), 1e-15);
  // Scores that overflow a naive exp in any precision.
  const std::vector<double> big = Softmax({1000.0, 1000.0});
  EXPECT_EQ(big[0], 0.5);
  const std::vector<double> none = Softmax({-INFINITY, -INFINITY});
  EXPECT_EQ(none[0], 0.0);
  EXPECT_EQ(LogSumExp({-INFINITY}), -INFINITY);
}

TEST(ReferenceTest, OneKeyReturnsItsValue) {
  Array q({1, 1, 1, 2}), k({1, 1, 1, 2}), v({1, 1, 1, 2});
  q.data = {0.3, -0.7};
  k.data = {1.5, 2.0};
  v.data = {4.0, -5.0};
  const AttentionResult r = Attention(q, k, v, {});
  EXPECT_EQ(r.out.data, v.data);
  EXPECT_NEAR(r.lse.data[0], (0.3 * 1.5 - 0.7 * 2.0) / std::sqrt(2.0), 1e-15);
}

TEST(ReferenceTest, CausalIsBottomRightAligned) {
  AttentionSpec spec;
  spec.causal = true;
  // seq_q = 2, seq_k = 5: query 0 sees keys 0..3, query 1 sees 0..4.
  EXPECT_TRUE(KeyVisible(0, 3, 2, 5, spec));
  EXPECT_FALSE(KeyVisible(0, 4, 2, 5, spec));
  EXPECT_TRUE(KeyVisible(1, 4, 2, 5, spec));
  // seq_q > seq_k: the first rows see nothing.
  EXPECT_FALSE(KeyVisible(0, 0, 5, 2, spec));
  EXPECT_TRUE(KeyVisible(3, 0, 5, 2, spec));
  spec.window_left = 1;
  EXPECT_FALSE(KeyVisible(1, 2, 2, 5, spec));
  EXPECT_TRUE(KeyVisible(1, 3, 2, 5, spec));
}

TEST(ReferenceTest, UniformScoresAverageValuesAndHiddenRowsAreZero) {
  Array q({1, 2, 1, 1}, 0.0), k({1, 3, 1, 1}, 1.0), v({1, 3, 1, 1});
  v.data = {1.0, 2.0, 6.0};
  AttentionSpec spec;
  spec.mask = [](int64_t, int64_t, int64_t i, int64_t) { return i == 0 ? -INFINITY : 0.0; };
  const AttentionResult r = Attention(q, k, v, spec);
  EXPECT_EQ(r.out({0, 0, 0, 0}), 0.0);
  EXPECT_EQ(r.lse({0, 0, 0}), -INFINITY);
  EXPECT_NEAR(r.out({0, 1, 0, 0}), 3.0, 1e-15);
  EXPECT_NEAR(r.lse({0, 0, 1}), std::log(3.0), 1e-15);
}

TEST(ReferenceTest, SinkJoinsTheDenominatorOnly) {
  Array q({1, 1, 1, 1}, 0.0), k({1, 1, 1, 1}, 0.0), v({1, 1, 1, 1}, 5.0);
  AttentionSpec spec;
  spec.sinks = {0.0};  // as heavy as the one key
  const AttentionResult r = Attention(q, k, v, spec);
  EXPECT_NEAR(r.out.data[0], 2.5, 1e-15);
  EXPECT_NEAR(r.lse.data[0], std::log(2.0), 1e-15);
}

}  // namespace
}  // namespace reference
}  // namespace streamattn
