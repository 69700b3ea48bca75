// sattn_attention (the flash forward) against the oracle on every SIMD target: shapes around
// the tile edges, every head_dim class, every dtype combination, strided layouts, GQA/MQA,
// in-place output and bitwise equality across thread counts.
#include <cstdio>
#include <cstdlib>
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
using testing_util::ExpectMatchesOracle;
using testing_util::OutTolerance;
using testing_util::RunAgainstOracle;
using testing_util::ScopedContext;

// Emulated targets (STREAMATTN_TEST_SMALL) keep every case but cap the long sequences.
int64_t Long(int64_t n) {
  return std::getenv("STREAMATTN_TEST_SMALL") ? std::min<int64_t>(n, 130) : n;
}

class FlashForwardTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(FlashForwardTest);

TEST_P(FlashForwardTest, SequenceLengthsAroundTileEdges) {
  ScopedContext ctx;
  const int64_t lengths[] = {1, 2, 63, 64, 65, Long(1000)};
  for (int64_t seq_q : lengths) {
    for (int64_t seq_k : lengths) {
      for (bool causal : {false, true}) {
        AttentionCase c;
        c.seq_q = seq_q, c.seq_k = seq_k, c.heads_q = 2, c.heads_kv = 2, c.head_dim = 64;
        c.causal = causal;
        c.seed = static_cast<uint64_t>(seq_q * 7919 + seq_k);
        ExpectMatchesOracle(ctx.get(), c);
      }
    }
  }
}

TEST_P(FlashForwardTest, EveryHeadDimClass) {
  ScopedContext ctx;
  for (int64_t dim : {1, 7, 64, 80, 96, 128, 256}) {
    for (auto [seq_q, seq_k] : {std::pair<int64_t, int64_t>{1, 1}, {65, 63}, {64, Long(1000)}}) {
      AttentionCase c;
      c.seq_q = seq_q, c.seq_k = seq_k, c.heads_q = 2, c.heads_kv = 1, c.head_dim = dim;
      ExpectMatchesOracle(ctx.get(), c);
      c.causal = true;
      c.head_dim_v = dim == 1 ? 3 : dim / 2 + 1;  // V's head_dim may differ from Q/K's
      ExpectMatchesOracle(ctx.get(), c);
    }
  }
}

TEST_P(FlashForwardTest, EveryDTypeCombination) {
  ScopedContext ctx;
  const sattn_dtype dtypes[] = {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16};
  for (sattn_dtype q : dtypes) {
    for (sattn_dtype kv : dtypes) {
      for (sattn_dtype out : dtypes) {
        AttentionCase c;
        c.batch = 2, c.seq_q = 70, c.seq_k = 130, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64;
        c.q_dtype = q, c.kv_dtype = kv, c.out_dtype = out, c.causal = true;
        const AttentionErrors e = RunAgainstOracle(ctx.get(), c);
        EXPECT_LE(e.out, OutTolerance(c)) << c.Describe();
        EXPECT_LE(e.lse, 2e-5) << c.Describe();
        if (q == kv && kv == out) {
          std::printf("  %s: max relative error of out %.2e, of lse %.2e (abs)\n",
                      testing_util::DTypeName(q), e.out, e.lse);
        }
      }
    }
  }
}

TEST_P(FlashForwardTest, StridedLayouts) {
  ScopedContext ctx;
  const std::vector<std::vector<int>> orders = {{}, {0, 2, 1, 3}, {2, 0, 1, 3}, {1, 0, 2, 3}};
  for (const auto& q_order : orders) {
    for (const auto& kv_order : orders) {
      AttentionCase c;
      c.batch = 2, c.seq_q = 33, c.seq_k = 150, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 32;
      c.q_order = q_order, c.kv_order = kv_order, c.out_order = kv_order;
      c.kv_dtype = SATTN_DTYPE_F32;  // f32 rows are copied as they are, f16 ones converted
      ExpectMatchesOracle(ctx.get(), c);
      c.kv_dtype = SATTN_DTYPE_F16;
      c.out_dtype = SATTN_DTYPE_BF16;
      ExpectMatchesOracle(ctx.get(), c);
    }
  }
}

TEST_P(FlashForwardTest, GroupedQueryAndMultiQuery) {
  ScopedContext ctx;
  for (auto [heads_q, heads_kv] : {std::pair<int64_t, int64_t>{8, 8},
                                   {8, 4},
                                   {8, 2},
                                   {8, 1},
                                   {32, 8},
                                   {32, 1},
                                   {6, 3},
                                   {130, 1}}) {
    AttentionCase c;
    c.batch = 2, c.seq_q = 37, c.seq_k = 200, c.heads_q = heads_q, c.heads_kv = heads_kv;
    c.head_dim = 32, c.causal = true, c.kv_dtype = SATTN_DTYPE_BF16;
    ExpectMatchesOracle(ctx.get(), c);
  }
}

TEST_P(FlashForwardTest, OutputInPlaceOverQuery) {
  ScopedContext ctx;
  AttentionCase c;
  c.batch = 2, c.seq_q = 100, c.seq_k = 100, c.heads_q = 4, c.heads_kv = 1, c.head_dim = 48;
  c.causal = true;
  AttentionCall call(c);
  const auto want =
      reference::Attention(call.q.ToArray(), call.k.ToArray(), call.v.ToArray(), call.Spec(c));
  AttentionCall in_place(c);
  in_place.out_view = in_place.q_view;
  ASSERT_EQ(in_place.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  EXPECT_LE(testing_util::MaxRelativeError(in_place.q.ToArray(), want.out), 1e-5);
}

TEST_P(FlashForwardTest, SameBytesForAnyThreadCount) {
  AttentionCase c;
  c.batch = 2, c.seq_q = 300, c.seq_k = 333, c.heads_q = 8, c.heads_kv = 2, c.head_dim = 64;
  c.causal = true, c.mask = true, c.mask_heads = 8, c.kv_dtype = SATTN_DTYPE_F16;
  c.alibi = true;
  const std::vector<uint8_t> one = testing_util::OutputBytes(c, 1);
  for (int threads : {2, 3, 7}) EXPECT_EQ(testing_util::OutputBytes(c, threads), one) << threads;
}

}  // namespace
}  // namespace streamattn
