// Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi K2) after weight absorption, through
// the API against the oracle on every SIMD target: query heads of 576 channels (512 latent + 64
// rotary) over one shared kv head, V the first 512 channels, either a view of K's own rows (the
// MLA cache, read once) or a separate tensor. Decoding of one position (16 and 128 query heads:
// a GEMM, the prefill driver; 4: the decode driver in place), paged caches, chunked prefill,
// quantized caches (I8 with group and whole-row scales, I4, FP8), and the same bytes for any
// thread count and for V inside K or beside it.
#include <cmath>
#include <cstdlib>
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
using testing_util::CompareWithOracle;
using testing_util::ExpectMatchesOracle;
using testing_util::OutputBytes;
using testing_util::OutTolerance;
using testing_util::ScopedContext;

bool Small() { return std::getenv("STREAMATTN_TEST_SMALL") != nullptr; }

// One absorbed MLA step: `heads_q` query heads of 576 channels over one kv head, V of 512.
AttentionCase Mla(int64_t seq_q, int64_t seq_k, int64_t heads_q, sattn_dtype dtype, bool v_in_k) {
  AttentionCase c;
  c.batch = 1, c.seq_q = seq_q, c.seq_k = seq_k, c.heads_q = heads_q, c.heads_kv = 1;
  c.head_dim = 576, c.head_dim_v = 512, c.causal = true, c.v_in_k = v_in_k;
  c.q_dtype = c.kv_dtype = c.out_dtype = dtype;
  c.seed = static_cast<uint64_t>(seq_q * 131 + seq_k * 7 + heads_q + dtype * 3 + v_in_k);
  return c;
}

constexpr sattn_dtype kDTypes[] = {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16};

class MlaTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(MlaTest);

// 16 and 128 query heads decode as a GEMM (the prefill driver, split-KV over the cache);
// 4 as dot products over the cache in place (streamed runs of tiles and converted edges).
TEST_P(MlaTest, DecodeOnePositionEveryDType) {
  ScopedContext ctx;
  for (sattn_dtype dtype : kDTypes) {
    for (bool v_in_k : {true, false}) {
      ExpectMatchesOracle(ctx.get(), Mla(1, Small() ? 300 : 1100, 16, dtype, v_in_k));
      ExpectMatchesOracle(ctx.get(), Mla(1, Small() ? 200 : 700, 128, dtype, v_in_k));
      AttentionCase c = Mla(1, Small() ? 300 : 1100, 4, dtype, v_in_k);
      c.batch = 2, c.seqused_k = {c.seq_k - 5, 130};
      ExpectMatchesOracle(ctx.get(), c);
    }
  }
}

// 16 to 64 query rows of the one kv head (heads, or a few speculative positions of fewer
// heads) on AVX512_BF16 take the P.V that reads V's rows in place (PairedBf16Values::
// ReadsValuesInPlace), pairing keys in registers, 16 rows a pass: odd key counts leave a key
// paired with zero, causal rows of several positions leave the last tile's panel partial, and
// a tail item of a long prefill has fewer than 16 rows (390 positions of one head: 384 and 6).
TEST_P(MlaTest, SixtyFourRowsOrFewerReadValuesInPlace) {
  ScopedContext ctx;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 16}, {2, 8},  {4, 4},  {8, 2},
                                                {16, 1}, {1, 32}, {3, 16}, {1, 64}};
  for (bool v_in_k : {true, false}) {
    for (auto [positions, heads_q] : shapes) {
      AttentionCase c = Mla(positions, Small() ? 301 : 1101, heads_q, SATTN_DTYPE_BF16, v_in_k);
      c.batch = 2, c.seqused_k = {c.seq_k - 2, 77};
      ExpectMatchesOracle(ctx.get(), c);
    }
    ExpectMatchesOracle(ctx.get(), Mla(390, 395, 1, SATTN_DTYPE_BF16, v_in_k));
  }
}

// A NaN value behind the causal mask of 2 positions x 8 heads (16 rows, V read in place): the
// first position's rows never see it and stay finite, the second's see it and are NaN.
TEST_P(MlaTest, NonFiniteValueHiddenFromInPlaceRows) {
  ScopedContext ctx;
  AttentionCase c = Mla(2, 301, 8, SATTN_DTYPE_BF16, false);
  AttentionCall call(c);
  for (int64_t d = 0; d < c.head_dim_v; ++d) call.v.Set({0, c.seq_k - 1, 0, d}, NAN);
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK);
  EXPECT_LE(CompareWithOracle(c, call).out, OutTolerance(c)) << c.Describe();
  for (int64_t h = 0; h < c.heads_q; ++h) {
    EXPECT_FALSE(std::isnan(call.out.Get({0, 0, h, 3}))) << h;
    EXPECT_TRUE(std::isnan(call.out.Get({0, 1, h, 3}))) << h;
  }
}

TEST_P(MlaTest, PagedCaches) {
  ScopedContext ctx;
  for (int64_t heads_q : {16, 4}) {
    for (bool v_in_k : {true, false}) {
      AttentionCase c = Mla(1, Small() ? 512 : 1024, heads_q, SATTN_DTYPE_BF16, v_in_k);
      c.batch = 2, c.page_size = 16, c.seqused_k = {c.seq_k - 3, 300};
      ExpectMatchesOracle(ctx.get(), c);
    }
  }
}

// A chunk of 64 new positions against a cache of 1024, causal.
TEST_P(MlaTest, ChunkedPrefillCausal) {
  ScopedContext ctx;
  for (sattn_dtype dtype : kDTypes) {
    for (bool v_in_k : {true, false}) {
      ExpectMatchesOracle(ctx.get(), Mla(64, Small() ? 256 : 1024, 2, dtype, v_in_k));
    }
  }
}

// A quantized latent cache: I8 in groups of 32 channels (V's scales the first 16 of K's 18 when
// V is inside K) and with one scale a row (576 channels, not a power of two: read through
// converted tiles); I4 in groups of 32 and FP8 with one scale, beside them.
TEST_P(MlaTest, QuantizedCaches) {
  ScopedContext ctx;
  const std::pair<sattn_dtype, int64_t> formats[] = {
      {SATTN_DTYPE_I8, 32}, {SATTN_DTYPE_I8, 0}, {SATTN_DTYPE_I4, 32}, {SATTN_DTYPE_FP8_E4M3, 0}};
  for (auto [format, group] : formats) {
    for (bool v_in_k : {true, false}) {
      for (int64_t heads_q : {16, 4}) {
        AttentionCase c = Mla(1, Small() ? 300 : 700, heads_q, SATTN_DTYPE_F32, v_in_k);
        c.k_format = c.v_format = format;
        c.k_group = c.v_group = group;
        c.scale_dtype = SATTN_DTYPE_F16;
        ExpectMatchesOracle(ctx.get(), c);
      }
    }
  }
}

// Split-KV chunks merge in a fixed order: 1 and 2 threads write the same bytes. V read from
// the K tile gives the bytes V converted on its own gives (the same values, the same sums).
TEST_P(MlaTest, SameBytesForAnyThreadCountAndVInsideKOrBeside) {
  for (sattn_dtype dtype : {SATTN_DTYPE_BF16, SATTN_DTYPE_F32}) {
    for (int64_t heads_q : {128, 16, 4}) {
      AttentionCase c = Mla(1, Small() ? 1100 : 2100, heads_q, dtype, true);
      // Two sequences at 16 heads: the bf16 scores read K in place (ReadsKeysInPlace) from the
      // second sequence's rows too; V beside K takes the copied tiles, which must agree.
      if (heads_q == 16) c.batch = 2;
      const std::vector<uint8_t> one = OutputBytes(c, 1);
      EXPECT_EQ(OutputBytes(c, 2), one) << c.Describe();
      c.v_in_k = false, c.v_copies_k = true;
      EXPECT_EQ(OutputBytes(c, 2), one) << c.Describe();
    }
  }
}

}  // namespace
}  // namespace streamattn
