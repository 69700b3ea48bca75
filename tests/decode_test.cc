// The decode path of sattn_attention (few query rows per sequence against a long cache)
// against the oracle on every SIMD target: GQA packing, split-KV chunks and their merge, ragged
// batches, paged caches, and bitwise equality across thread counts and cache layouts.
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
using testing_util::ExpectMatchesOracle;
using testing_util::ScopedContext;

bool Small() { return std::getenv("STREAMATTN_TEST_SMALL") != nullptr; }

AttentionCase Decode(int64_t seq_q, int64_t seq_k, int64_t heads_q, int64_t heads_kv) {
  AttentionCase c;
  c.batch = 2, c.seq_q = seq_q, c.seq_k = seq_k, c.heads_q = heads_q, c.heads_kv = heads_kv;
  c.head_dim = 64, c.kv_dtype = SATTN_DTYPE_F16, c.causal = true;
  c.seed = static_cast<uint64_t>(seq_q * 131 + seq_k * 7 + heads_q);
  return c;
}

class DecodeTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(DecodeTest);

TEST_P(DecodeTest, CacheLengthsAndGroupSizes) {
  ScopedContext ctx;
  const std::vector<int64_t> caches = Small() ? std::vector<int64_t>{1, 5, 511, 513, 1100}
                                              : std::vector<int64_t>{1, 5, 511, 512, 513, 4097};
  for (int64_t seq_k : caches) {
    // One, two, four and eight query rows per kv head: each has its own reduction of the
    // scores into packed form (DotBlock). Three kv heads: packed scores go key block by key
    // block across the heads, whatever their number.
    for (auto [hq, hkv] :
         {std::pair<int64_t, int64_t>{8, 8}, {4, 2}, {8, 2}, {16, 2}, {8, 1}, {12, 3}}) {
      for (int64_t seq_q : {1, 3}) {
        if (seq_q > seq_k) continue;
        ExpectMatchesOracle(ctx.get(), Decode(seq_q, seq_k, hq, hkv));
      }
    }
  }
}

TEST_P(DecodeTest, UpToSixteenQueryRowsPerSequence) {
  ScopedContext ctx;
  for (int64_t seq_q = 1; seq_q <= 16; ++seq_q) {
    AttentionCase c = Decode(seq_q, Small() ? 700 : 2100, 8, 2);
    c.q_dtype = SATTN_DTYPE_BF16, c.out_dtype = seq_q % 2 ? SATTN_DTYPE_F32 : SATTN_DTYPE_F16;
    ExpectMatchesOracle(ctx.get(), c);
  }
}

TEST_P(DecodeTest, EveryDTypeAndOption) {
  ScopedContext ctx;
  for (sattn_dtype kv : {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
    AttentionCase c = Decode(2, 1500, 8, 2);
    c.kv_dtype = kv, c.head_dim = 128;
    ExpectMatchesOracle(ctx.get(), c);
    c.softcap = 30.0f, c.alibi = true, c.sinks = true, c.mask = true, c.mask_heads = 8;
    c.mask_hide_fraction = 0.2, c.has_window = true, c.window_left = 600, c.window_right = 0;
    ExpectMatchesOracle(ctx.get(), c);
  }
}

// Runs of whole tiles stream with the next tile's scores beside this tile's P.V, step by step
// of 4 keys across the heads (decode/stream_tiles-inl.h): the register blocks of 1, 2 and 4 rows
// per kv head and the general path (head dims that are no whole number of 4-vector blocks;
// targets with 16 registers), kv head counts that do not divide a step's rows, runs of one tile
// and of many with an edge tile after them, the options that reach the streamed path (softcap,
// sinks), and 8 rows per kv head beside them (tile by tile).
TEST_P(DecodeTest, StreamedTileRuns) {
  ScopedContext ctx;
  for (int64_t dim : {64, 96, 128}) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{3, 3}, {6, 3}, {12, 3}, {8, 1}, {40, 5}}) {
      for (int64_t seq_k : {Small() ? int64_t{300} : int64_t{1000}, int64_t{130}}) {
        AttentionCase c = Decode(1, seq_k, hq, hkv);
        c.head_dim = dim, c.batch = 1;
        c.kv_dtype = dim == 96 ? SATTN_DTYPE_BF16 : dim == 64 ? SATTN_DTYPE_F32 : SATTN_DTYPE_F16;
        ExpectMatchesOracle(ctx.get(), c);
        c.softcap = 20.0f, c.sinks = true, c.head_dim_v = dim == 128 ? 64 : dim;
        ExpectMatchesOracle(ctx.get(), c);
      }
    }
  }
}

// A window leaves most split-KV chunks with nothing to see; they must merge as the identity.
TEST_P(DecodeTest, WindowsThatLeaveChunksEmpty) {
  ScopedContext ctx;
  for (int64_t left : {0, 5, 300, 700}) {
    AttentionCase c = Decode(1, Small() ? 1500 : 4097, 8, 8);
    c.has_window = true, c.window_left = left;
    ExpectMatchesOracle(ctx.get(), c);
    c.seq_q = 4, c.causal = false, c.window_right = 2;
    ExpectMatchesOracle(ctx.get(), c);
  }
}

TEST_P(DecodeTest, RaggedBatches) {
  ScopedContext ctx;
  AttentionCase c = Decode(1, Small() ? 900 : 3000, 8, 2);
  c.batch = 5, c.seqused_k = {0, 1, 513, c.seq_k, 77};
  ExpectMatchesOracle(ctx.get(), c);
  AttentionCall call(c);
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  EXPECT_EQ(call.out.Get({0, 0, 3, 1}), 0.0);  // no keys: o = 0, lse = -inf
  EXPECT_EQ(call.lse.Get({0, 3, 0}), -INFINITY);
  c.seq_q = 3;  // causal rows past the used keys: aligned to seqused_k, not the cache length
  ExpectMatchesOracle(ctx.get(), c);
}

TEST_P(DecodeTest, PagedCachesMatchContiguousOnes) {
  ScopedContext ctx;
  for (int64_t page : {1, 16, 256}) {
    AttentionCase c = Decode(2, Small() ? 512 : 2048, 8, 2);
    c.seqused_k = {c.seq_k - 3, page == 1 ? 1 : 300};
    c.page_size = page;
    ExpectMatchesOracle(ctx.get(), c);
    // The same logical cache, contiguous: identical bytes.
    AttentionCall paged(c);
    ASSERT_EQ(paged.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    AttentionCase flat_case = c;
    flat_case.page_size = 0;
    AttentionCall flat(flat_case);
    const auto k = paged.LogicalKeys(c, paged.k), v = paged.LogicalKeys(c, paged.v);
    flat.k.FromArray(k);
    flat.v.FromArray(v);
    flat.q.FromArray(paged.q.ToArray());
    ASSERT_EQ(flat.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    EXPECT_EQ(flat.out.ToArray().data, paged.out.ToArray().data) << "page_size " << page;
    EXPECT_EQ(flat.lse.ToArray().data, paged.lse.ToArray().data) << "page_size " << page;
  }
}

TEST_P(DecodeTest, SameBytesForAnyThreadCount) {
  AttentionCase c = Decode(1, Small() ? 1500 : 5000, 32, 8);
  c.batch = 1, c.seqused_k = {c.seq_k - 100};
  const std::vector<uint8_t> one = testing_util::OutputBytes(c, 1);
  for (int threads : {2, 3, 7}) EXPECT_EQ(testing_util::OutputBytes(c, threads), one) << threads;
}

}  // namespace
}  // namespace streamattn
