// The scalar state and its merge (core/online_state.h): the seed's worked example, and the
// algebra the whole library relies on (associative, commutative, identity), with empty pieces
// in every position.
#include "core/online_state.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "reference/reference_attention.h"

namespace streamattn {
namespace {

// A piece of a row: scores in natural units and a dim-wide value per score.
struct Piece {
  std::vector<double> scores;
  std::vector<std::vector<double>> values;
};

struct Summary {
  RowState state;
  std::vector<float> o;
};

// Summarises a piece by the one-score recurrence (scores converted to base 2).
Summary Summarize(const Piece& piece, int dim) {
  Summary s{RowState{}, std::vector<float>(dim, 0.0f)};
  std::vector<float> v(dim);
  for (size_t j = 0; j < piece.scores.size(); ++j) {
    if (piece.scores[j] == -INFINITY) continue;  // a masked key contributes nothing
    for (int d = 0; d < dim; ++d) v[d] = static_cast<float>(piece.values[j][d]);
    UpdateRowState(&s.state, s.o.data(), static_cast<float>(piece.scores[j] * kLog2e), v.data(),
                   dim);
  }
  return s;
}

Summary Merge(Summary a, const Summary& b) {
  MergeRowStates(&a.state, a.o.data(), b.state, b.o.data(), static_cast<int64_t>(a.o.size()));
  return a;
}

// Softmax-weighted average and lse of the whole row, by the double oracle.
void Oracle(const std::vector<Piece>& pieces, int dim, std::vector<double>* out, double* lse) {
  std::vector<double> scores;
  std::vector<std::vector<double>> values;
  for (const Piece& p : pieces) {
    scores.insert(scores.end(), p.scores.begin(), p.scores.end());
    values.insert(values.end(), p.values.begin(), p.values.end());
  }
  const std::vector<double> w = reference::Softmax(scores);
  out->assign(dim, 0.0);
  for (size_t j = 0; j < scores.size(); ++j) {
    for (int d = 0; d < dim; ++d) {
      if (w[j] != 0.0) (*out)[d] += w[j] * values[j][d];
    }
  }
  *lse = reference::LogSumExp(scores);
}

void ExpectMatchesOracle(const Summary& s, const std::vector<Piece>& pieces, int dim) {
  std::vector<double> want;
  double want_lse;
  Oracle(pieces, dim, &want, &want_lse);
  const float lse = NaturalLse(s.state);
  if (want_lse == -INFINITY) {
    EXPECT_EQ(lse, -INFINITY);
    EXPECT_EQ(s.state.l, 0.0f);
    for (int d = 0; d < dim; ++d) EXPECT_EQ(s.o[d], 0.0f);
    return;
  }
  EXPECT_NEAR(lse, want_lse, 1e-5 * std::max(1.0, std::fabs(want_lse)));
  for (int d = 0; d < dim; ++d) {
    EXPECT_NEAR(s.o[d] / s.state.l, want[d], 2e-6) << "d=" << d;
  }
}

TEST(OnlineStateTest, SeedWorkedExample) {
  // Scores 2, 5, 1, 7 one at a time: m = 7, l = 1.1446 (the seed's table).
  RowState s;
  float o = 0.0f;
  const float one = 1.0f;
  for (float score : {2.0f, 5.0f, 1.0f, 7.0f}) UpdateRowState(&s, &o, score * kLog2e, &one, 1);
  EXPECT_NEAR(s.m * kLn2, 7.0, 1e-6);
  EXPECT_NEAR(s.l, 1.1446, 5e-5);
  EXPECT_NEAR(s.l, std::exp(2.0 - 7) + std::exp(5.0 - 7) + std::exp(1.0 - 7) + 1.0, 1e-6);

  // {2, 5} -> (5, 1.0498) and {1, 7} -> (7, 1.0025); merged they equal the whole row.
  RowState a, b;
  float oa = 0.0f, ob = 0.0f;
  for (float score : {2.0f, 5.0f}) UpdateRowState(&a, &oa, score * kLog2e, &one, 1);
  for (float score : {1.0f, 7.0f}) UpdateRowState(&b, &ob, score * kLog2e, &one, 1);
  EXPECT_NEAR(a.m * kLn2, 5.0, 1e-6);
  EXPECT_NEAR(a.l, 1.0498, 5e-5);
  EXPECT_NEAR(b.m * kLn2, 7.0, 1e-6);
  EXPECT_NEAR(b.l, 1.0025, 5e-5);
  MergeRowStates(&a, &oa, b, &ob, 1);
  EXPECT_NEAR(a.m, s.m, 1e-6);
  EXPECT_NEAR(a.l, s.l, 1e-6);
  EXPECT_NEAR(NaturalLse(a), reference::LogSumExp({2, 5, 1, 7}), 1e-6);
}

TEST(OnlineStateTest, EmptyStatesMergeToIdentityNeverNaN) {
  RowState a, b;
  float oa[2] = {0.0f, 0.0f};
  const float ob[2] = {NAN, INFINITY};  // an empty state's o is never read
  MergeRowStates(&a, oa, b, ob, 2);
  EXPECT_EQ(a.m, kNegInf);
  EXPECT_EQ(a.l, 0.0f);
  EXPECT_EQ(oa[0], 0.0f);
  EXPECT_EQ(oa[1], 0.0f);
  EXPECT_EQ(NaturalLse(a), kNegInf);
}

TEST(OnlineStateTest, NaNScorePoisonsOnlyItsRow) {
  RowState s;
  float o = 0.0f;
  const float one = 1.0f;
  UpdateRowState(&s, &o, 1.0f, &one, 1);
  UpdateRowState(&s, &o, NAN, &one, 1);
  UpdateRowState(&s, &o, 2.0f, &one, 1);
  EXPECT_TRUE(std::isnan(NaturalLse(s)));
  EXPECT_TRUE(std::isnan(o));
}

// Regression: where Max drops NaN (NEON's vmaxnm, SCALAR), a split-KV chunk whose scores are
// all NaN ends as (m = -inf, l = NaN); merging it must poison the row, not skip it as empty.
TEST(OnlineStateTest, MergingAChunkWithNaNSumPoisons) {
  for (bool nan_first : {false, true}) {
    RowState a, poisoned{kNegInf, NAN};
    float oa = 0.0f;
    const float ob = NAN;
    if (nan_first) std::swap(a, poisoned);
    MergeRowStates(&a, &oa, poisoned, &ob, 1);
    EXPECT_TRUE(std::isnan(a.m) && std::isnan(a.l)) << nan_first;
    EXPECT_TRUE(std::isnan(NaturalLse(a))) << nan_first;
  }
}

TEST(OnlineStateTest, OverflowingScoresStayFinite) {
  // exp(s) overflows float for s > 88.7; the state never forms it.
  Piece p;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> score(90.0, 100.0), value(-1.0, 1.0);
  for (int j = 0; j < 300; ++j) {
    p.scores.push_back(score(rng));
    p.values.push_back({value(rng), value(rng)});
  }
  const Summary s = Summarize(p, 2);
  EXPECT_TRUE(std::isfinite(s.state.l));
  ExpectMatchesOracle(s, {p}, 2);
}

// Random rows cut into random pieces, some fully masked (all -inf) and some empty, in every
// position; every bracketing and order of merges must give the oracle's answer.
class MergeAlgebraTest : public ::testing::TestWithParam<int> {};

TEST_P(MergeAlgebraTest, AssociativeCommutativeWithIdentity) {
  const int seed = GetParam();
  std::mt19937_64 rng(seed);
  constexpr int kDim = 5;
  std::uniform_real_distribution<double> score(-8.0, 8.0), value(-2.0, 2.0);
  std::uniform_int_distribution<int> piece_count(1, 6), piece_len(0, 9);
  const int n = piece_count(rng);
  const int masked_position = seed % n;  // a fully masked piece in every position over seeds
  std::vector<Piece> pieces(n);
  for (int i = 0; i < n; ++i) {
    const int len = piece_len(rng);
    for (int j = 0; j < len; ++j) {
      pieces[i].scores.push_back(i == masked_position ? -INFINITY : score(rng));
      pieces[i].values.push_back(std::vector<double>(kDim));
      for (double& x : pieces[i].values.back()) x = value(rng);
    }
  }
  std::vector<Summary> summaries;
  for (const Piece& p : pieces) summaries.push_back(Summarize(p, kDim));
  const Summary identity{RowState{}, std::vector<float>(kDim, 0.0f)};

  // Left fold.
  Summary left = identity;
  for (const Summary& s : summaries) left = Merge(left, s);
  ExpectMatchesOracle(left, pieces, kDim);

  // Right fold, reversed order (commutativity and associativity together).
  Summary right = identity;
  for (int i = n - 1; i >= 0; --i) right = Merge(summaries[i], right);
  ExpectMatchesOracle(right, pieces, kDim);

  // Balanced tree over a shuffled order.
  std::vector<Summary> level = summaries;
  std::shuffle(level.begin(), level.end(), rng);
  while (level.size() > 1) {
    std::vector<Summary> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(Merge(level[i], level[i + 1]));
    if (level.size() % 2) next.push_back(level.back());
    level = next;
  }
  ExpectMatchesOracle(level[0], pieces, kDim);

  // Identity on either side changes nothing, bit for bit.
  const Summary with_left = Merge(identity, left);
  const Summary with_right = Merge(left, identity);
  EXPECT_EQ(with_left.state.m, left.state.m);
  EXPECT_EQ(with_left.state.l, left.state.l);
  EXPECT_EQ(with_right.state.l, left.state.l);
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(with_left.o[d], left.o[d]);
    EXPECT_EQ(with_right.o[d], left.o[d]);
  }
}

INSTANTIATE_TEST_SUITE_P(RandomRows, MergeAlgebraTest, ::testing::Range(0, 60));

TEST(MergeWeightsTest, WeightsAndLse) {
  const float lse[4] = {1.0f, kNegInf, 3.0f, -2.0f};
  float w[4];
  const float out = MergeWeights(lse, 4, w);
  const double want = reference::LogSumExp({1.0, -INFINITY, 3.0, -2.0});
  EXPECT_NEAR(out, want, 1e-6);
  EXPECT_EQ(w[1], 0.0f);
  for (int i : {0, 2, 3}) EXPECT_NEAR(w[i], std::exp(lse[i] - want), 1e-6);
  EXPECT_NEAR(w[0] + w[2] + w[3], 1.0, 1e-6);
}

TEST(MergeWeightsTest, AllEmptyAndNaN) {
  const float empty[3] = {kNegInf, kNegInf, kNegInf};
  float w[3] = {5, 5, 5};
  EXPECT_EQ(MergeWeights(empty, 3, w), kNegInf);
  for (float x : w) EXPECT_EQ(x, 0.0f);
  const float with_nan[3] = {0.0f, NAN, 1.0f};
  EXPECT_TRUE(std::isnan(MergeWeights(with_nan, 3, w)));
  EXPECT_EQ(MergeWeights(nullptr, 0, nullptr), kNegInf);
}

}  // namespace
}  // namespace streamattn
