// Attention over quantized KV caches (I8 and I4 with group scales, FP8 E4M3 with a scale per
// kv head or tensor) against the oracle on the values they stand for, on every SIMD target:
// decoding (streamed, in place, converted edge tiles), chunked prefill, paged and ragged caches,
// every option, K and V in different formats, scales in layouts the in-place kernels cannot
// address, NaN scales, and the same bytes for any thread count.
#include <cmath>
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
using testing_util::OutputBytes;
using testing_util::ScopedContext;

bool Small() { return std::getenv("STREAMATTN_TEST_SMALL") != nullptr; }

constexpr sattn_dtype kFormats[] = {SATTN_DTYPE_I8, SATTN_DTYPE_FP8_E4M3, SATTN_DTYPE_I4};

// A decoding step of `heads_q` query heads over `heads_kv` against a cache of `format` with
// groups of `group` channels (0: one scale a row).
AttentionCase Quantized(sattn_dtype format, int64_t group, int64_t seq_q, int64_t seq_k,
                        int64_t heads_q, int64_t heads_kv) {
  AttentionCase c;
  c.batch = 2, c.seq_q = seq_q, c.seq_k = seq_k, c.heads_q = heads_q, c.heads_kv = heads_kv;
  c.head_dim = 128, c.causal = true;
  c.k_format = c.v_format = format;
  c.k_group = c.v_group = group;
  c.seed = static_cast<uint64_t>(seq_q * 131 + seq_k * 7 + heads_q + group * 3 + format);
  return c;
}

class QuantizedCacheTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(QuantizedCacheTest);

TEST_P(QuantizedCacheTest, DecodeEveryFormatGroupAndGroupSize) {
  ScopedContext ctx;
  const int64_t seq_k = Small() ? 700 : 1300;
  for (sattn_dtype format : kFormats) {
    for (int64_t group : {32, 0, 16}) {
      if (format == SATTN_DTYPE_FP8_E4M3 && group != 0) continue;  // per head, not per group
      // 1, 2 and 4 query rows per kv head stream; 8 go tile by tile.
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{8, 8}, {16, 8}, {32, 8}, {8, 1}}) {
        AttentionCase c = Quantized(format, group, 1, seq_k, hq, hkv);
        ExpectMatchesOracle(ctx.get(), c);
        // Binary16 scales of the common shape (head_dim 128 in groups of 32: four a row, which
        // the one-row steps convert in registers).
        if (group == 32) {
          c.scale_dtype = SATTN_DTYPE_F16;
          ExpectMatchesOracle(ctx.get(), c);
        }
      }
    }
  }
}

// One query row per kv head over I4 reads 32 channels at a time on AVX-512
// (decode/i4_row_step-inl.h): head dims of 2, 8 and 4 such chunks, groups of 1 and 2 of them,
// and of a whole row.
TEST_P(QuantizedCacheTest, I4OneRowPerKvHeadAtEveryHeadDimAndGroup) {
  ScopedContext ctx;
  for (int64_t dim : {64, 256, 96}) {
    for (int64_t group : {32, 64, 0}) {
      if (group > dim || dim % (group == 0 ? dim : group) != 0) continue;
      AttentionCase c = Quantized(SATTN_DTYPE_I4, group, 1, Small() ? 300 : 777, 4, 4);
      c.head_dim = dim;
      c.scale_dtype = group == 64 ? SATTN_DTYPE_F32 : SATTN_DTYPE_F16;
      ExpectMatchesOracle(ctx.get(), c);
    }
  }
}

// One query row per kv head over I8 and I4 streams with its own score and P.V loops, and four
// rows convert each step's rows first (decode/scaled_row_step-inl.h): groups of 1, 2, 4 and 8
// or more vectors, which the loops unroll apiece, and head dims of one and of one and a half
// blocks of 8 vectors (AVX2), head_dim 128 unrolled whole.
TEST_P(QuantizedCacheTest, OneAndFourRowsPerKvHeadAtEveryGroupAndHeadDim) {
  ScopedContext ctx;
  for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4}) {
    for (int64_t dim : {64, 96, 128}) {
      for (int64_t group : {8, 16, 32, 64, 0}) {
        if (group > dim || dim % (group == 0 ? dim : group) != 0) continue;
        for (int64_t rows : {1, 4}) {
          AttentionCase c = Quantized(format, group, 1, Small() ? 300 : 650, 4 * rows, 4);
          c.head_dim = dim;
          c.scale_dtype = group == 16 || group == 64 ? SATTN_DTYPE_F32 : SATTN_DTYPE_F16;
          ExpectMatchesOracle(ctx.get(), c);
        }
      }
    }
  }
}

TEST_P(QuantizedCacheTest, ScalesOfEitherDTypeAndAnyGroupSize) {
  ScopedContext ctx;
  for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4}) {
    // Groups that are no power of two, or smaller than a vector, and a head dim of 80.
    for (int64_t group : {8, 24, 40, 2}) {
      AttentionCase c = Quantized(format, group, 1, 600, 8, 2);
      c.head_dim = group == 40 ? 80 : 96;
      if (c.head_dim % group != 0) continue;
      c.scale_dtype = SATTN_DTYPE_F16;
      ExpectMatchesOracle(ctx.get(), c);
      c.scale_dtype = SATTN_DTYPE_F32, c.seq_q = 3;
      ExpectMatchesOracle(ctx.get(), c);
    }
  }
}

TEST_P(QuantizedCacheTest, FP8PerTensorScale) {
  ScopedContext ctx;
  AttentionCase c = Quantized(SATTN_DTYPE_FP8_E4M3, 0, 1, 1500, 32, 8);
  c.fp8_per_tensor = true;
  ExpectMatchesOracle(ctx.get(), c);
}

TEST_P(QuantizedCacheTest, ChunkedPrefillAgainstPagedCache) {
  ScopedContext ctx;
  for (sattn_dtype format : kFormats) {
    AttentionCase c = Quantized(format, format == SATTN_DTYPE_FP8_E4M3 ? 0 : 32, Small() ? 24 : 64,
                                Small() ? 512 : 1024, 8, 2);
    c.page_size = 16, c.q_dtype = SATTN_DTYPE_BF16;
    ExpectMatchesOracle(ctx.get(), c);
    c.seqused_k = {c.seq_k - 100, c.seq_k / 2};
    c.page_size = 64;
    ExpectMatchesOracle(ctx.get(), c);
  }
}

TEST_P(QuantizedCacheTest, EveryOption) {
  ScopedContext ctx;
  for (sattn_dtype format : kFormats) {
    for (int64_t seq_q : {1, 4, 20}) {
      AttentionCase c =
          Quantized(format, format == SATTN_DTYPE_FP8_E4M3 ? 0 : 32, seq_q, 900, 8, 2);
      c.softcap = 30.0f, c.alibi = true, c.sinks = true, c.mask = true, c.mask_heads = 8;
      c.mask_hide_fraction = 0.2, c.has_window = true, c.window_left = 600, c.window_right = 0;
      ExpectMatchesOracle(ctx.get(), c);
      AttentionCase ragged = Quantized(format, 0, seq_q, 900, 16, 4);
      ragged.seqused_k = {0, 333};
      ragged.page_size = 32, ragged.out_dtype = SATTN_DTYPE_F16;
      ExpectMatchesOracle(ctx.get(), ragged);
    }
  }
}

TEST_P(QuantizedCacheTest, KAndVInDifferentFormatsAndBesideFloatCaches) {
  ScopedContext ctx;
  for (sattn_dtype k : kFormats) {
    for (sattn_dtype v : kFormats) {
      if (k == v) continue;
      AttentionCase c = Quantized(k, 0, 1, 700, 16, 4);
      c.v_format = v, c.v_group = v == SATTN_DTYPE_FP8_E4M3 ? 0 : 32;
      ExpectMatchesOracle(ctx.get(), c);
    }
    AttentionCase float_v = Quantized(k, 0, 2, 700, 8, 8);
    float_v.v_format = static_cast<sattn_dtype>(0), float_v.kv_dtype = SATTN_DTYPE_F16;
    ExpectMatchesOracle(ctx.get(), float_v);
    AttentionCase float_k = Quantized(k, 0, 2, 700, 8, 8);
    float_k.k_format = static_cast<sattn_dtype>(0), float_k.kv_dtype = SATTN_DTYPE_BF16;
    ExpectMatchesOracle(ctx.get(), float_k);
  }
}

TEST_P(QuantizedCacheTest, LayoutsTheInPlaceKernelsCannotAddress) {
  ScopedContext ctx;
  for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4}) {
    // Scales stored [b, h, s, g] beside a [b, s, h, d] cache; and the cache itself [b, h, s, d].
    AttentionCase c = Quantized(format, 32, 1, 800, 16, 4);
    c.scales_order = {0, 2, 1, 3};
    ExpectMatchesOracle(ctx.get(), c);
    c.kv_order = {0, 2, 1, 3}, c.scales_order = {};
    ExpectMatchesOracle(ctx.get(), c);
    c.head_dim = 64, c.seq_q = 17;
    ExpectMatchesOracle(ctx.get(), c);
  }
}

// A NaN group scale acts as a NaN in its keys: the rows that see that key become NaN (checked
// against the oracle, which sees the NaN), the others are unaffected.
TEST_P(QuantizedCacheTest, NaNScalesPoisonOnlyTheRowsThatSeeThem) {
  ScopedContext ctx;
  for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4}) {
    AttentionCase c = Quantized(format, 32, 4, 600, 8, 2);
    c.causal = false, c.has_window = true, c.window_left = 100, c.window_right = 0;
    AttentionCall call(c);
    call.k_scales.Set({0, 10, 1, 2}, NAN);   // seen by no row of sequence 0 (window)
    call.v_scales.Set({1, 599, 0, 0}, NAN);  // the last key of sequence 1
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    const testing_util::AttentionErrors e = testing_util::CompareWithOracle(c, call);
    EXPECT_LE(e.out, 2e-6) << c.Describe();
    EXPECT_LE(e.lse, 2e-5) << c.Describe();
    EXPECT_TRUE(std::isnan(call.out.Get({1, 3, 0, 0})));  // sees key 599 of sequence 1
    EXPECT_FALSE(std::isnan(call.out.Get({0, 3, 2, 0})));
  }
}

// int8_queries: where it applies (an AVX3 target on a CPU with AVX512-VNNI, or AVX2; 1 or 4 query
// rows per kv head, I4 keys of head_dim a multiple of 128) the scores come from int8 queries, so
// the output differs from the exact path's but stays within the queries' rounding of the oracle
// (about 1e-3 here, bounded at 5e-3); anywhere else (I8 and FP8 keys included) the option
// changes no byte.
// Group sizes 16, 32 and a whole row, f32 and f16 scales, head dims 64, 128 and 256; a NaN
// query makes its row NaN on either path.
TEST_P(QuantizedCacheTest, Int8QueriesWithinTheirRoundingAndOnlyWhereTheyApply) {
  ScopedContext ctx;
#if HWY_ARCH_X86
  const bool vnni = __builtin_cpu_supports("avx512vnni");
#else
  const bool vnni = false;
#endif
  const bool avx3 = GetParam() == HWY_AVX3 || GetParam() == HWY_AVX3_DL;
  struct Variant {
    sattn_dtype format;
    int64_t group, dim;
    sattn_dtype scale_dtype;
  };
  const Variant variants[] = {
      {SATTN_DTYPE_I4, 32, 128, SATTN_DTYPE_F16}, {SATTN_DTYPE_I4, 0, 128, SATTN_DTYPE_F32},
      {SATTN_DTYPE_I4, 16, 256, SATTN_DTYPE_F32}, {SATTN_DTYPE_I4, 16, 64, SATTN_DTYPE_F32},
      {SATTN_DTYPE_I8, 32, 128, SATTN_DTYPE_F16}, {SATTN_DTYPE_FP8_E4M3, 0, 128, SATTN_DTYPE_F32}};
  for (const Variant& variant : variants) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}, {16, 8}, {8, 1}}) {
      if (Small() && hq != 32) continue;  // the sanitizer runs: one shape that applies
      AttentionCase c = Quantized(variant.format, variant.group, 1, Small() ? 700 : 1300, hq, hkv);
      c.head_dim = variant.dim, c.scale_dtype = variant.scale_dtype;
      const std::vector<uint8_t> exact = OutputBytes(c, 2);
      c.int8_queries = true;
      const int64_t rows = hq / hkv;
      const bool applies = ((vnni && avx3) || GetParam() == HWY_AVX2) && (rows == 1 || rows == 4) &&
                           variant.format == SATTN_DTYPE_I4 && variant.dim % 128 == 0;
      if (!applies) {
        EXPECT_EQ(OutputBytes(c, 2), exact) << c.Describe();
        continue;
      }
      EXPECT_NE(OutputBytes(c, 2), exact) << c.Describe() << ": the integer scores did not run";
      const testing_util::AttentionErrors e = testing_util::RunAgainstOracle(ctx.get(), c);
      EXPECT_LE(e.out, 5e-3) << c.Describe();
      EXPECT_LE(e.lse, 5e-3) << c.Describe();
      if (hq == 32) {  // a NaN query element: its row (query head 5 of sequence 1) is NaN
        AttentionCall call(c);
        call.q.Set({1, 0, 5, 3}, NAN);
        ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
        EXPECT_TRUE(std::isnan(call.out.Get({1, 0, 5, 0}))) << c.Describe();
        EXPECT_FALSE(std::isnan(call.out.Get({1, 0, 4, 0}))) << c.Describe();
      }
    }
  }
}

TEST_P(QuantizedCacheTest, SameBytesForAnyThreadCount) {
  for (sattn_dtype format : kFormats) {
    const AttentionCase c =
        Quantized(format, format == SATTN_DTYPE_FP8_E4M3 ? 0 : 32, 1, Small() ? 2000 : 5000, 32, 8);
    EXPECT_EQ(OutputBytes(c, 1), OutputBytes(c, 3)) << c.Describe();
  }
}

}  // namespace
}  // namespace streamattn
