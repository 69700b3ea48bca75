// Numerical adversaries on every SIMD target, judged by the double oracle, NaN positions
// included: NaN and ±Inf planted in q, k and v both where rows see them and where every
// masking mechanism hides them (causal, window, seqused_k, the mask, unused pages); scores of
// ±1e30; f16 extremes (65504, subnormals); whole batch entries that see nothing. The rule being
// checked is the one sattn_attention documents: a NaN (or +inf) score a row sees makes that
// row NaN, and what a row does not see never reaches it.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "attention_case.h"
#include "gtest/gtest.h"
#include "hwy/tests/hwy_gtest.h"
#include "per_target_api_test.h"

namespace streamattn {
namespace {

using testing_util::AttentionCall;
using testing_util::AttentionCase;
using testing_util::AttentionErrors;
using testing_util::CompareWithOracle;
using testing_util::HostTensor;
using testing_util::OutTolerance;
using testing_util::ScopedContext;

class NumericalAdversaryTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(NumericalAdversaryTest);

// Cases where some rows or keys are hidden by each mechanism in turn, prefill and decode.
std::vector<AttentionCase> HidingCases() {
  std::vector<AttentionCase> cases;
  AttentionCase c;
  c.batch = 2, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 24;
  c.seq_q = 40, c.seq_k = 30, c.causal = true;  // rows 0..9 see nothing
  cases.push_back(c);
  c.causal = false, c.seq_q = 33, c.seq_k = 70;
  c.has_window = true, c.window_left = 5, c.window_right = 2;
  cases.push_back(c);
  c.has_window = false, c.mask = true, c.mask_batch = 2, c.mask_heads = 4;
  c.mask_hide_fraction = 0.5, c.kv_dtype = SATTN_DTYPE_F16;
  cases.push_back(c);
  c = AttentionCase();  // ragged paged decode: keys past seqused_k and unused pages are poison
  c.batch = 3, c.seq_q = 2, c.seq_k = 96, c.heads_q = 8, c.heads_kv = 2, c.head_dim = 32;
  c.page_size = 16, c.seqused_k = {96, 17, 0}, c.causal = true;
  cases.push_back(c);
  c.seq_q = 1, c.seq_k = 1536, c.seqused_k = {1536, 700, 1};  // split-KV chunks
  c.page_size = 64, c.sinks = true;
  cases.push_back(c);
  return cases;
}

// Plants NaN, +Inf and -Inf at random elements of q, k and v (of keys that exist: paged caches
// keep their poison pages as they are). Never a non-finite k and v at the same key, whose sum
// would be 0 x Inf under a -inf score, a case the documentation leaves open.
void PlantNonFinite(const AttentionCase& c, AttentionCall& call, std::mt19937_64& rng) {
  const double values[] = {NAN, INFINITY, -INFINITY};
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  for (int i = 0; i < 3; ++i) {
    call.q.Set({pick(c.batch), pick(c.seq_q), pick(c.heads_q), pick(c.head_dim)}, values[i]);
  }
  const std::vector<int64_t>& k_shape = call.k.shape();
  for (int i = 0; i < 3; ++i) {
    const int64_t page = pick(k_shape[0]), key = pick(k_shape[1]), head = pick(k_shape[2]);
    call.k.Set({page, key, head, pick(k_shape[3])}, values[i]);
    // v at a different key of the same page (or sequence).
    const int64_t other = k_shape[1] > 1 ? (key + 1 + pick(k_shape[1] - 1)) % k_shape[1] : key;
    if (other != key) call.v.Set({page, other, head, pick(call.v.shape()[3])}, values[(i + 1) % 3]);
  }
}

TEST_P(NumericalAdversaryTest, NonFiniteInputsSeenAndHidden) {
  ScopedContext ctx;
  std::mt19937_64 rng(2024);
  for (const AttentionCase& base : HidingCases()) {
    for (int trial = 0; trial < 4; ++trial) {
      AttentionCase c = base;
      c.seed = 100 + trial;
      AttentionCall call(c);
      PlantNonFinite(c, call, rng);
      ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
      const AttentionErrors e = CompareWithOracle(c, call);
      // NaN and Inf positions must match the oracle's exactly; the finite rest, its values.
      EXPECT_LE(e.out, OutTolerance(c)) << c.Describe() << " trial " << trial;
      EXPECT_LE(e.lse, 2e-5) << c.Describe() << " trial " << trial;
    }
  }
}

// A NaN in a visible key poisons exactly the rows that see it (out and lse); a NaN value makes
// out NaN but leaves lse finite; rows that see neither stay exact.
TEST_P(NumericalAdversaryTest, NaNPoisonsExactlyTheRowsThatSeeIt) {
  ScopedContext ctx;
  AttentionCase c;
  c.seq_q = 50, c.seq_k = 50, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 16, c.causal = true;
  AttentionCall call(c);
  call.k.Set({0, 20, 0, 3}, NAN);  // seen by rows 20..49
  call.v.Set({0, 35, 0, 0}, NAN);  // seen by rows 35..49: already NaN through key 20
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK);
  for (int64_t i = 0; i < c.seq_q; ++i) {
    for (int64_t h = 0; h < c.heads_q; ++h) {
      EXPECT_EQ(std::isnan(call.out.Get({0, i, h, 5})), i >= 20) << i;
      EXPECT_EQ(std::isnan(call.lse.Get({0, h, i})), i >= 20) << i;
    }
  }
  AttentionCall values_only(c);
  values_only.v.Set({0, 35, 0, 7}, NAN);
  ASSERT_EQ(values_only.Run(ctx.get()), SATTN_OK);
  for (int64_t i = 0; i < c.seq_q; ++i) {
    EXPECT_EQ(std::isnan(values_only.out.Get({0, i, 1, 7})), i >= 35) << i;
    EXPECT_FALSE(std::isnan(values_only.out.Get({0, i, 1, 6}))) << i;
    EXPECT_TRUE(std::isfinite(values_only.lse.Get({0, 1, i}))) << i;
  }
  EXPECT_LE(CompareWithOracle(c, values_only).out, OutTolerance(c));
}

// Regression: a NaN query decoded against a cache long enough to be split into chunks poisons
// its row on every target. Where Max returns the number (SCALAR here, NEON's vmaxnm on Arm), a
// chunk of only NaN scores used to look empty to the merge, and the row came out finite.
TEST_P(NumericalAdversaryTest, NaNQueryPoisonsItsRowAcrossSplitKvChunks) {
  ScopedContext ctx;
  for (bool sinks : {false, true}) {
    AttentionCase c;
    c.batch = 2, c.seq_q = 1, c.seq_k = 2048, c.heads_q = 4, c.heads_kv = 1, c.head_dim = 32;
    c.seqused_k = {2048, 700}, c.sinks = sinks;
    AttentionCall call(c);
    call.q.Set({1, 0, 2, 5}, NAN);
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK);
    for (int64_t h = 0; h < c.heads_q; ++h) {
      EXPECT_EQ(std::isnan(call.out.Get({1, 0, h, 0})), h == 2) << h;
      EXPECT_EQ(std::isnan(call.lse.Get({1, h, 0})), h == 2) << h;
    }
    EXPECT_LE(CompareWithOracle(c, call).out, OutTolerance(c));
  }
}

// Scores of +1e30 take all the weight; -1e30 none; a row whose scores are all -1e30 is an
// average, not 0/0. k in f32 and bf16 (which holds 1e15 too).
TEST_P(NumericalAdversaryTest, ScoresOfPlusMinus1e30) {
  ScopedContext ctx;
  for (sattn_dtype kv : {SATTN_DTYPE_F32, SATTN_DTYPE_BF16}) {
    AttentionCase c;
    c.seq_q = 3, c.seq_k = 40, c.head_dim = 16, c.scale = 1.0f, c.kv_dtype = kv;
    AttentionCall call(c);
    // q·k = q[0] k[0] with q[0] = 1e15: the k[0] of each key sets its score.
    for (int64_t i = 0; i < c.seq_q; ++i) {
      for (int64_t d = 0; d < c.head_dim; ++d) call.q.Set({0, i, 0, d}, d == 0 ? 1e15 : 0.0);
    }
    for (int64_t j = 0; j < c.seq_k; ++j) call.k.Set({0, j, 0, 0}, 1e-15 * (j % 7 - 3));
    call.k.Set({0, 13, 0, 0}, 1e15);   // score +1e30 for every row
    call.k.Set({0, 27, 0, 0}, -1e15);  // score -1e30
    call.q.Set({0, 2, 0, 0}, -1e15);   // row 2: key 13 at -1e30, key 27 at +1e30
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    const AttentionErrors e = CompareWithOracle(c, call);
    EXPECT_LE(e.out, OutTolerance(c)) << c.Describe();
    for (int64_t d = 0; d < c.head_dim; ++d) {
      EXPECT_EQ(call.out.Get({0, 0, 0, d}), call.v.Get({0, 13, 0, d}));
      EXPECT_EQ(call.out.Get({0, 2, 0, d}), call.v.Get({0, 27, 0, d}));
    }
    const double k13 = call.k.Get({0, 13, 0, 0});
    EXPECT_NEAR(call.lse.Get({0, 0, 0}), 1e15 * k13, 1e-6 * 1e30);

    // Every score -1e30 (identical keys): the plain average of v, lse = -1e30 + ln(seq_k).
    AttentionCall low(c);
    for (int64_t j = 0; j < c.seq_k; ++j) {
      for (int64_t d = 0; d < c.head_dim; ++d) low.k.Set({0, j, 0, d}, d == 0 ? -1e15 : 0.0);
    }
    for (int64_t i = 0; i < c.seq_q; ++i) {
      for (int64_t d = 0; d < c.head_dim; ++d) low.q.Set({0, i, 0, d}, d == 0 ? 1e15 : 0.0);
    }
    ASSERT_EQ(low.Run(ctx.get()), SATTN_OK);
    EXPECT_LE(CompareWithOracle(c, low).out, 1e-5);
    for (int64_t d = 0; d < c.head_dim; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < c.seq_k; ++j) mean += low.v.Get({0, j, 0, d}) / c.seq_k;
      EXPECT_NEAR(low.out.Get({0, 1, 0, d}), mean, 1e-5);
    }
    EXPECT_NEAR(low.lse.Get({0, 0, 1}), 1e15 * low.k.Get({0, 0, 0, 0}), 1e-6 * 1e30);
  }
}

// f16 at its limits: ±65504 (products of 4e9, scaled down so the softmax is not one-hot and the
// oracle's ties stay ties) and subnormals (down to 2^-24) in q, k and v, with f16 and f32
// outputs.
TEST_P(NumericalAdversaryTest, F16Extremes) {
  ScopedContext ctx;
  const double extremes[] = {65504.0, -65504.0, 0x1p-24, -0x1p-24, 0x1p-14, 3e-6, 1.0, -0.5};
  for (sattn_dtype out : {SATTN_DTYPE_F16, SATTN_DTYPE_F32}) {
    for (bool subnormal_only : {false, true}) {
      AttentionCase c;
      c.seq_q = 20, c.seq_k = 75, c.heads_q = 2, c.heads_kv = 1, c.head_dim = 16;
      c.q_dtype = c.kv_dtype = SATTN_DTYPE_F16, c.out_dtype = out;
      c.scale = subnormal_only ? 0.0f : 1e-9f;
      AttentionCall call(c);
      std::mt19937_64 rng(out * 2 + subnormal_only);
      for (HostTensor* t : {&call.q, &call.k, &call.v}) {
        testing_util::ForEachIndex(t->shape(), [&](const std::vector<int64_t>& i) {
          const double x = subnormal_only ? static_cast<double>(rng() % 64) * 0x1p-24 -
                                                0x1p-19  // subnormals of both signs
                                          : extremes[rng() % 8];
          t->Set(i, x);
        });
      }
      ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
      const AttentionErrors e = CompareWithOracle(c, call);
      // f16 out near 65504 rounds at 32; a subnormal out at 2^-24 (absolute, at most half).
      const double tolerance = subnormal_only && out == SATTN_DTYPE_F16 ? 0.5 : OutTolerance(c);
      EXPECT_LE(e.out, tolerance) << c.Describe() << (subnormal_only ? " subnormals" : "");
      EXPECT_LE(e.lse, 2e-5) << c.Describe();
      for (double x : call.out.ToArray().data) ASSERT_TRUE(std::isfinite(x));
    }
  }
}

// Batch entries that see nothing (all masked, or no keys at all) next to ones that see
// everything: out = 0 and lse = -inf (the sink's logit with sinks) exactly, and the others
// unaffected; prefill and (paged) decode.
TEST_P(NumericalAdversaryTest, AllMaskedBatchEntries) {
  ScopedContext ctx;
  for (bool sinks : {false, true}) {
    for (int64_t seq_q : {1, 37}) {
      AttentionCase c;
      c.batch = 3, c.seq_q = seq_q, c.seq_k = 64, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 16;
      c.mask = true, c.mask_batch = 3, c.mask_heads = 1, c.sinks = sinks;
      c.seqused_k = {64, 64, 0};
      c.page_size = seq_q == 1 ? 16 : 0;
      AttentionCall call(c);
      testing_util::ForEachIndex(call.mask.shape(), [&](const std::vector<int64_t>& i) {
        if (i[0] == 1) call.mask.Set(i, -INFINITY);
      });
      ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
      const AttentionErrors e = CompareWithOracle(c, call);
      EXPECT_LE(e.out, OutTolerance(c)) << c.Describe();
      EXPECT_LE(e.lse, 2e-5) << c.Describe();
      for (int64_t b = 1; b < 3; ++b) {
        for (int64_t i = 0; i < seq_q; ++i) {
          for (int64_t h = 0; h < c.heads_q; ++h) {
            for (int64_t d = 0; d < c.head_dim; ++d) ASSERT_EQ(call.out.Get({b, i, h, d}), 0.0);
            // The sink's logit goes through base 2 and back: equal to a few ulp.
            const double got = call.lse.Get({b, h, i});
            if (sinks) {
              ASSERT_NEAR(got, call.sinks.Get({h}), 1e-6) << b << " " << i;
            } else {
              ASSERT_EQ(got, -INFINITY) << b << " " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace streamattn
