// sattn_quantize_kv against the rules the header states, written here independently: group
// scales max |x| / 127 (or / 7) rounded to the scales' dtype, values x / scale rounded to
// nearest even and saturated, FP8 the nearest E4M3; into a cache slice, at positions, through a
// block table; NaN and Inf refused with their index and nothing written; the same bytes for any
// thread count. On every SIMD target the CPU runs (the quantizer divides and rounds in vectors).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/tests/hwy_gtest.h"
#include "per_target_api_test.h"
#include "test_util.h"

namespace streamattn {
namespace {

using testing_util::Array;
using testing_util::FromE4M3;
using testing_util::HostTensor;
using testing_util::RoundTo;
using testing_util::ScopedContext;
using testing_util::ToE4M3;

struct QuantizeCase {
  sattn_dtype format = SATTN_DTYPE_I8;
  sattn_dtype src_dtype = SATTN_DTYPE_F32;
  sattn_dtype scale_dtype = SATTN_DTYPE_F32;
  int64_t batch = 2, n = 5, heads = 3, dim = 64, group = 32;
  int64_t cache_len = 40;
  std::vector<int32_t> positions;  // empty: none
  int64_t page_size = 0;           // > 0: paged, pages handed out in reverse
  double lo = -3.0, hi = 3.0;
};

struct QuantizeCall {
  HostTensor src, values, scales, positions, block_table;
  sattn_tensor src_view, values_view, scales_view, positions_view, table_view;
  sattn_quantize_kv_options options{};
  int64_t pages_per_sequence = 0;

  explicit QuantizeCall(const QuantizeCase& c)
      : src(c.src_dtype, {c.batch, c.n, c.heads, c.dim}),
        values(c.format, Shape(c, c.dim)),
        scales(c.format == SATTN_DTYPE_FP8_E4M3
                   ? HostTensor(SATTN_DTYPE_F32, {c.heads})
                   : HostTensor(c.scale_dtype, Shape(c, c.dim / c.group))),
        positions(SATTN_DTYPE_I32, {c.batch}),
        block_table(SATTN_DTYPE_I32, {c.batch, c.page_size > 0 ? c.cache_len / c.page_size : 1}) {
    std::mt19937_64 rng(static_cast<uint64_t>(c.format * 100 + c.dim + c.n));
    src.FillUniform(rng, c.lo, c.hi);
    values.FillBytes(0x5A);
    if (c.format == SATTN_DTYPE_FP8_E4M3) {
      scales.FillUniform(rng, 0.005, 0.02);
    } else {
      scales.FillBytes(0x5A);
    }
    options.struct_size = sizeof(options);
    for (int64_t b = 0; b < c.batch; ++b) {
      positions.Set({b}, c.positions.empty() ? 0 : c.positions[b]);
    }
    if (c.page_size > 0) {
      pages_per_sequence = c.cache_len / c.page_size;
      const int64_t pages = c.batch * pages_per_sequence;
      for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t j = 0; j < pages_per_sequence; ++j) {
          block_table.Set({b, j}, pages - 1 - (b * pages_per_sequence + j));
        }
      }
    }
    src_view = src.view(), values_view = values.view(), scales_view = scales.view();
    positions_view = positions.view(), table_view = block_table.view();
    options.positions = c.positions.empty() ? nullptr : &positions_view;
    options.block_table = c.page_size > 0 ? &table_view : nullptr;
  }

  static std::vector<int64_t> Shape(const QuantizeCase& c, int64_t last) {
    if (c.page_size > 0) return {c.batch * (c.cache_len / c.page_size), c.page_size, c.heads, last};
    return {c.batch, c.cache_len, c.heads, last};
  }

  sattn_status Run(sattn_context* ctx) const {
    return sattn_quantize_kv(ctx, &src_view, &values_view, &scales_view, &options);
  }

  // Where key `key` of sequence b lives in values and scales: (first index, second index).
  std::pair<int64_t, int64_t> Slot(const QuantizeCase& c, int64_t b, int64_t key) const {
    if (c.page_size == 0) return {b, key};
    return {static_cast<int64_t>(block_table.Get({b, key / c.page_size})), key % c.page_size};
  }
};

// Checks every written value and scale against the header's rules.
void ExpectQuantizedByTheRules(const QuantizeCase& c, const QuantizeCall& call) {
  const int max_q = c.format == SATTN_DTYPE_I4 ? 7 : 127;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.n; ++t) {
      const int64_t key = (c.positions.empty() ? 0 : c.positions[b]) + t;
      const auto [p, r] = call.Slot(c, b, key);
      for (int64_t h = 0; h < c.heads; ++h) {
        if (c.format == SATTN_DTYPE_FP8_E4M3) {
          const float s = static_cast<float>(call.scales.Get({h}));
          for (int64_t i = 0; i < c.dim; ++i) {
            const float x = static_cast<float>(call.src.Get({b, t, h, i}));
            ASSERT_EQ(call.values.Get({p, r, h, i}), FromE4M3(ToE4M3(x / s))) << b << t << h << i;
          }
          continue;
        }
        for (int64_t g = 0; g < c.dim / c.group; ++g) {
          double amax = 0.0;
          for (int64_t i = g * c.group; i < (g + 1) * c.group; ++i) {
            amax = std::max(amax, std::fabs(call.src.Get({b, t, h, i})));
          }
          const float scale = static_cast<float>(
              RoundTo(c.scale_dtype, static_cast<float>(amax) / static_cast<float>(max_q)));
          ASSERT_EQ(call.scales.Get({p, r, h, g}), scale) << b << " " << t << " " << h << " " << g;
          for (int64_t i = g * c.group; i < (g + 1) * c.group; ++i) {
            const float x = static_cast<float>(call.src.Get({b, t, h, i}));
            const double q =
                scale == 0.0f ? 0.0 : std::clamp<double>(std::nearbyint(x / scale), -max_q, max_q);
            ASSERT_EQ(call.values.Get({p, r, h, i}), q) << b << " " << t << " " << h << " " << i;
          }
        }
      }
    }
  }
}

class QuantizeKVTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(QuantizeKVTest);

TEST_P(QuantizeKVTest, EveryFormatSourceDTypeAndScaleDType) {
  ScopedContext ctx;
  for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4, SATTN_DTYPE_FP8_E4M3}) {
    for (sattn_dtype src : {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
      for (sattn_dtype scale : {SATTN_DTYPE_F32, SATTN_DTYPE_F16}) {
        for (int64_t group : {32, 64, 8}) {
          QuantizeCase c;
          c.format = format, c.src_dtype = src, c.scale_dtype = scale, c.group = group;
          QuantizeCall call(c);
          ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
          ExpectQuantizedByTheRules(c, call);
          if (format == SATTN_DTYPE_FP8_E4M3) break;  // no group scales
        }
      }
    }
  }
}

TEST_P(QuantizeKVTest, AtPositionsAndThroughABlockTable) {
  ScopedContext ctx;
  for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4, SATTN_DTYPE_FP8_E4M3}) {
    QuantizeCase c;
    c.format = format, c.positions = {3, 35};
    QuantizeCall contiguous(c);
    ASSERT_EQ(contiguous.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    ExpectQuantizedByTheRules(c, contiguous);
    // Rows before a position stay as they were.
    const QuantizeCall untouched(c);
    EXPECT_EQ(contiguous.values.Get({0, 2, 1, 5}), untouched.values.Get({0, 2, 1, 5}));
    c.page_size = 8, c.positions = {6, 30};  // across pages
    QuantizeCall paged(c);
    ASSERT_EQ(paged.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    ExpectQuantizedByTheRules(c, paged);
  }
}

TEST_P(QuantizeKVTest, GroupsOfZerosAndValuesBeyondTheScalesRange) {
  ScopedContext ctx;
  QuantizeCase c;
  c.scale_dtype = SATTN_DTYPE_F16, c.lo = 0.0, c.hi = 0.0;
  QuantizeCall zeros(c);
  ASSERT_EQ(zeros.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  ExpectQuantizedByTheRules(c, zeros);
  EXPECT_EQ(zeros.scales.Get({1, 4, 2, 1}), 0.0);
  c.lo = -3e7, c.hi = 3e7;  // max / 127 beyond f16's range: the scale saturates at 65504
  QuantizeCall large(c);
  ASSERT_EQ(large.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  bool saturated = false;
  for (int64_t g = 0; g < 2; ++g) saturated |= large.scales.Get({0, 0, 0, g}) == 65504.0;
  EXPECT_TRUE(saturated);
  for (int64_t i = 0; i < c.dim; ++i) {
    EXPECT_LE(std::fabs(large.values.Get({0, 0, 0, i})), 127.0);
    EXPECT_FALSE(std::isnan(large.values.Get({0, 0, 0, i})));
  }
}

// Quotients exactly halfway between two integers go to the even one, and the largest |x| of a
// group is max_q times its scale: rows of 0, +-0.5, +-1.5, .. and max_q (scale 1, exact in
// both scale dtypes), in every lane position of a vector and of the scalar tail.
TEST_P(QuantizeKVTest, TiesRoundToEvenInEveryLane) {
  ScopedContext ctx;
  for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4}) {
    for (sattn_dtype scale : {SATTN_DTYPE_F32, SATTN_DTYPE_F16}) {
      for (int64_t group : {8, 32, 64}) {
        QuantizeCase c;
        c.format = format, c.scale_dtype = scale, c.group = group, c.dim = 64;
        const int max_q = format == SATTN_DTYPE_I4 ? 7 : 127;
        QuantizeCall call(c);
        for (int64_t b = 0; b < c.batch; ++b) {
          for (int64_t t = 0; t < c.n; ++t) {
            for (int64_t h = 0; h < c.heads; ++h) {
              for (int64_t i = 0; i < c.dim; ++i) {
                // Ties of every parity and sign, shifted per row so each meets every lane.
                const int64_t k = (i + t + 3 * h + 5 * b) % (2 * max_q);
                const double tie = (k / 2) + 0.5;
                call.src.Set({b, t, h, i}, i % group == 0 ? max_q : (k % 2 ? -tie : tie));
              }
            }
          }
        }
        call.src_view = call.src.view();
        ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
        ExpectQuantizedByTheRules(c, call);
        // Row (0, 0, 0): channels 1..5 hold -0.5, 1.5, -1.5, 2.5, -2.5.
        EXPECT_EQ(call.scales.Get({0, 0, 0, 0}), 1.0);
        EXPECT_EQ(call.values.Get({0, 0, 0, 1}), 0.0);
        EXPECT_EQ(call.values.Get({0, 0, 0, 2}), 2.0);
        EXPECT_EQ(call.values.Get({0, 0, 0, 3}), -2.0);
        EXPECT_EQ(call.values.Get({0, 0, 0, 4}), 2.0);
        EXPECT_EQ(call.values.Get({0, 0, 0, 5}), -2.0);
      }
    }
  }
}

TEST_P(QuantizeKVTest, NonFiniteSourceIsRefusedByIndexWithNothingWritten) {
  ScopedContext ctx;
  for (double bad : {static_cast<double>(NAN), static_cast<double>(INFINITY)}) {
    for (sattn_dtype format : {SATTN_DTYPE_I8, SATTN_DTYPE_I4, SATTN_DTYPE_FP8_E4M3}) {
      QuantizeCase c;
      c.format = format;
      QuantizeCall call(c);
      call.src.Set({1, 3, 2, 17}, bad);
      const std::vector<uint8_t> values = call.values.bytes(), scales = call.scales.bytes();
      ASSERT_EQ(call.Run(ctx.get()), SATTN_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(sattn_last_error()).find("src[1, 3, 2, 17]"), std::string::npos)
          << sattn_last_error();
      EXPECT_EQ(call.values.bytes(), values);
      EXPECT_EQ(call.scales.bytes(), scales);
    }
  }
}

TEST_P(QuantizeKVTest, SameBytesForAnyThreadCount) {
  QuantizeCase c;
  c.batch = 3, c.n = 300, c.heads = 4, c.dim = 128, c.cache_len = 300;
  std::vector<uint8_t> first;
  for (int threads : {1, 2, 3}) {
    ScopedContext ctx(threads);
    QuantizeCall call(c);
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    std::vector<uint8_t> bytes = call.values.bytes();
    bytes.insert(bytes.end(), call.scales.bytes().begin(), call.scales.bytes().end());
    if (first.empty()) first = bytes;
    EXPECT_EQ(bytes, first) << threads;
  }
}

}  // namespace
}  // namespace streamattn
