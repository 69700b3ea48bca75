// Every attention option alone and combined, against the oracle on every SIMD target, plus the
// adversarial inputs real models hit: rows that see nothing, NaN and Inf behind masks, scores
// that overflow a naive exp.
#include <cmath>
#include <utility>
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
using testing_util::ExpectMatchesOracle;
using testing_util::OutTolerance;
using testing_util::RunAgainstOracle;
using testing_util::ScopedContext;

AttentionCase Base(int64_t seq_q, int64_t seq_k) {
  AttentionCase c;
  c.batch = 2, c.seq_q = seq_q, c.seq_k = seq_k, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 40;
  return c;
}

class AttentionOptionsTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(AttentionOptionsTest);

TEST_P(AttentionOptionsTest, EachOptionAlone) {
  ScopedContext ctx;
  for (auto [seq_q, seq_k] :
       {std::pair<int64_t, int64_t>{1, 300}, {64, 64}, {150, 90}, {90, 300}}) {
    AttentionCase c = Base(seq_q, seq_k);
    ExpectMatchesOracle(ctx.get(), c);
    c.scale = 0.37f;
    ExpectMatchesOracle(ctx.get(), c);
    c = Base(seq_q, seq_k), c.causal = true;
    ExpectMatchesOracle(ctx.get(), c);
    for (auto [left, right] :
         {std::pair<int64_t, int64_t>{16, -1}, {-1, 5}, {20, 20}, {0, 0}, {130, 0}}) {
      c = Base(seq_q, seq_k), c.has_window = true, c.window_left = left, c.window_right = right;
      ExpectMatchesOracle(ctx.get(), c);
    }
    c = Base(seq_q, seq_k), c.softcap = 5.0f, c.value_lo = -3, c.value_hi = 3;
    ExpectMatchesOracle(ctx.get(), c);
    c = Base(seq_q, seq_k), c.alibi = true;
    ExpectMatchesOracle(ctx.get(), c);
    c = Base(seq_q, seq_k), c.sinks = true;
    ExpectMatchesOracle(ctx.get(), c);
    for (auto [mb, mh] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {1, 4}, {2, 4}}) {
      c = Base(seq_q, seq_k), c.mask = true, c.mask_batch = mb, c.mask_heads = mh;
      c.mask_hide_fraction = 0.3;
      ExpectMatchesOracle(ctx.get(), c);
    }
  }
}

TEST_P(AttentionOptionsTest, AllOptionsCombined) {
  ScopedContext ctx;
  for (sattn_dtype kv : {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
    AttentionCase c = Base(130, 260);
    c.kv_dtype = kv, c.q_dtype = SATTN_DTYPE_BF16, c.out_dtype = SATTN_DTYPE_F32;
    c.causal = true, c.has_window = true, c.window_left = 77, c.window_right = 3;
    c.softcap = 8.0f, c.alibi = true, c.sinks = true, c.mask = true, c.mask_heads = 4;
    c.mask_hide_fraction = 0.1, c.scale = 0.2f, c.value_lo = -2, c.value_hi = 2;
    ExpectMatchesOracle(ctx.get(), c);
  }
}

// Rows that see no key: o = 0 and lse = -inf exactly (or the sink's logit), never NaN.
TEST_P(AttentionOptionsTest, RowsThatSeeNothing) {
  ScopedContext ctx;
  // seq_q > seq_k with a causal mask: the first seq_q - seq_k rows see nothing.
  AttentionCase c = Base(200, 70);
  c.causal = true;
  ExpectMatchesOracle(ctx.get(), c);
  AttentionCall call(c);
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK);
  EXPECT_EQ(call.out.Get({1, 0, 3, 5}), 0.0);
  EXPECT_EQ(call.lse.Get({1, 3, 0}), -INFINITY);
  EXPECT_EQ(call.lse.Get({1, 3, 129}), -INFINITY);
  EXPECT_NE(call.lse.Get({1, 3, 130}), -INFINITY);
  // With sinks, such rows put all their weight on the sink: o = 0, lse = the sink's logit.
  c.sinks = true;
  ExpectMatchesOracle(ctx.get(), c);
  // A window that misses every key for some rows, and a mask that hides whole rows.
  c = Base(64, 64), c.has_window = true, c.window_left = -1, c.window_right = -70;
  c.window_right = 0, c.window_left = 0;
  ExpectMatchesOracle(ctx.get(), c);
  c = Base(64, 300), c.mask = true, c.mask_hide_fraction = 0.995;
  ExpectMatchesOracle(ctx.get(), c);
  c.mask_hide_fraction = 1.0;  // everything hidden
  ExpectMatchesOracle(ctx.get(), c);
}

// NaN and Inf in keys and values that no row may see never reach a result; a NaN in a key
// that some row sees makes exactly those rows NaN.
TEST_P(AttentionOptionsTest, NonFiniteValuesBehindMasks) {
  ScopedContext ctx;
  // bf16 (or f16) q, k and v take a native kernel where the CPU has one (its own NaN-safe P.V).
  for (auto [q, kv] : {std::pair<sattn_dtype, sattn_dtype>{SATTN_DTYPE_F32, SATTN_DTYPE_F32},
                       {SATTN_DTYPE_F32, SATTN_DTYPE_F16},
                       {SATTN_DTYPE_BF16, SATTN_DTYPE_BF16},
                       {SATTN_DTYPE_F16, SATTN_DTYPE_F16}}) {
    AttentionCase c = Base(64, 64);
    c.causal = true, c.q_dtype = q, c.kv_dtype = kv, c.heads_q = 2, c.heads_kv = 1;
    AttentionCall call(c);
    // Key 40 is visible to rows >= 40 only: its NaN V must poison exactly those rows. Key 63's
    // K is +Inf: visible to the last row only. Rows < 40 stay finite and match the oracle.
    for (int64_t d = 0; d < c.head_dim; ++d) {
      call.v.Set({0, 40, 0, d}, NAN);
      call.k.Set({1, 63, 0, d}, INFINITY);
    }
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK);
    const AttentionErrors e = CompareWithOracle(c, call);
    EXPECT_LE(e.out, OutTolerance(c)) << c.Describe();
    EXPECT_TRUE(std::isnan(call.out.Get({0, 40, 1, 0})));
    EXPECT_FALSE(std::isnan(call.out.Get({0, 39, 1, 0})));
    EXPECT_FALSE(std::isnan(call.out.Get({1, 62, 0, 0})));
  }
  // A key hidden from every row by the mask may hold anything.
  AttentionCase c = Base(50, 80);
  c.mask = true, c.mask_heads = 4;
  AttentionCall call(c);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 50; ++i) call.mask.Set({0, h, i, 17}, -INFINITY);
  for (int64_t d = 0; d < c.head_dim; ++d) {
    call.k.Set({0, 17, 1, d}, NAN);
    call.v.Set({0, 17, 0, d}, -INFINITY);
  }
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK);
  const AttentionErrors e = CompareWithOracle(c, call);
  EXPECT_LE(e.out, OutTolerance(c));
  for (double x : call.out.ToArray().data) ASSERT_TRUE(std::isfinite(x));
}

// Scores in [90, 100]: exp(s) overflows float32 but exp(s - max) does not.
TEST_P(AttentionOptionsTest, ScoresThatOverflowANaiveExp) {
  ScopedContext ctx;
  for (sattn_dtype kv : {SATTN_DTYPE_F32, SATTN_DTYPE_BF16}) {
    AttentionCase c = Base(40, 300);
    c.head_dim = 16, c.scale = 1.0f, c.kv_dtype = kv, c.value_lo = 2.37, c.value_hi = 2.5;
    const AttentionErrors e = RunAgainstOracle(ctx.get(), c);
    EXPECT_LE(e.out, 1e-5) << c.Describe();
    EXPECT_LE(e.lse, 2e-5) << c.Describe();
  }
}

}  // namespace
}  // namespace streamattn
