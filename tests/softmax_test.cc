// sattn_softmax and sattn_log_softmax through the C API on every SIMD target, judged by the
// double-precision oracle (reference::Softmax, LogSumExp) on the inputs exactly as stored: every
// dtype pair, odd lengths (1, 7, 1000003, part boundaries), strides, in place, temperatures,
// the scores that overflow a naive exp, -inf, NaN and +inf, and the same bytes for any thread
// count. Malformed calls fail with a message and write nothing.
//
// Tolerances (max-norm relative, testing_util::MaxRelativeError): f32 output 1e-6, from exp2
// (< 2 ulp), s - max and its product with log2(e) / T (1 rounding each), the 1/l product (2)
// and the sum l (at most 32 f32 adds per lane, then double); measured at most 5.3e-7 on every
// target. f16 and bf16 outputs add half an ulp of their own, 2^-11 and 2^-8 relative.
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/tests/hwy_gtest.h"
#include "per_target_api_test.h"
#include "reference/reference_attention.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace {

using reference::Array;
using testing_util::HostTensor;
using testing_util::MaxRelativeError;
using testing_util::ScopedContext;

constexpr double kInf = testing_util::kInf;

bool SmallRun() { return std::getenv("STREAMATTN_TEST_SMALL") != nullptr; }
// The long odd row of the issue; shorter (still odd, still many parts) under emulation.
int64_t LongRow() { return SmallRun() ? 100003 : 1000003; }

double Tolerance(sattn_dtype out) {
  return 1e-6 + (out == SATTN_DTYPE_F32 ? 0.0 : out == SATTN_DTYPE_F16 ? 0x1p-11 : 0x1p-8);
}

// Row r of a [rows, n] array (or the 1-D array) as a vector.
std::vector<double> Row(const Array& a, int64_t r) {
  const int64_t n = a.shape.back();
  return std::vector<double>(a.data.begin() + r * n, a.data.begin() + (r + 1) * n);
}

// The oracle, row by row, of scores / temperature.
Array Want(const Array& in, bool log, double temperature = 1.0) {
  Array out(in.shape);
  const int64_t n = in.shape.back(), rows = in.size() / n;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> s = Row(in, r);
    for (double& x : s) x /= temperature;
    const std::vector<double> p = reference::Softmax(s);
    const double lse = reference::LogSumExp(s);
    for (int64_t j = 0; j < n; ++j) {
      double v = p[j];
      if (log) v = std::isnan(lse) ? lse : lse == -kInf ? -kInf : s[j] - lse;
      out.data[r * n + j] = v;
    }
  }
  return out;
}

sattn_status RunSoftmax(sattn_context* ctx, const HostTensor& in, const HostTensor& out, bool log,
                        const sattn_softmax_options* options = nullptr) {
  const sattn_tensor in_view = in.view(), out_view = out.view();
  return log ? sattn_log_softmax(ctx, &in_view, &out_view, options)
             : sattn_softmax(ctx, &in_view, &out_view, options);
}

class SoftmaxTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(SoftmaxTest);

TEST_P(SoftmaxTest, EveryDTypePairAndOddLengths) {
  ScopedContext ctx;
  std::mt19937_64 rng(1);
  const sattn_dtype dtypes[] = {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16};
  for (bool log : {false, true}) {
    for (sattn_dtype in_dtype : dtypes) {
      for (sattn_dtype out_dtype : {SATTN_DTYPE_F32, in_dtype}) {
        // 16384 and 16385: one part exactly, and a second part of one score.
        for (int64_t n : {1, 7, 64, 1000, 2049, 16384, 16385}) {
          for (int64_t rows : {1, 3}) {
            HostTensor in(in_dtype,
                          rows == 1 ? std::vector<int64_t>{n} : std::vector<int64_t>{rows, n});
            in.FillUniform(rng, -8.0, 8.0);
            HostTensor out(out_dtype, in.shape());
            ASSERT_EQ(RunSoftmax(ctx.get(), in, out, log), SATTN_OK) << sattn_last_error();
            EXPECT_LE(MaxRelativeError(out.ToArray(), Want(in.ToArray(), log)),
                      Tolerance(out_dtype))
                << (log ? "log " : "") << testing_util::DTypeName(in_dtype) << " -> "
                << testing_util::DTypeName(out_dtype) << " n=" << n << " rows=" << rows;
          }
        }
      }
    }
  }
}

TEST_P(SoftmaxTest, LongOddRow) {
  ScopedContext ctx;
  std::mt19937_64 rng(2);
  for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_BF16}) {
    for (bool log : {false, true}) {
      HostTensor in(dtype, {LongRow()});
      in.FillUniform(rng, -20.0, 20.0);
      HostTensor out(SATTN_DTYPE_F32, in.shape());
      ASSERT_EQ(RunSoftmax(ctx.get(), in, out, log), SATTN_OK) << sattn_last_error();
      const Array got = out.ToArray(), want = Want(in.ToArray(), log);
      EXPECT_LE(MaxRelativeError(got, want), 1e-6) << testing_util::DTypeName(dtype);
      if (!log) {
        // The max norm is set by the large entries; check each one relatively too. Rounding
        // the exponent (s - max) c shifts p by |ln p| 2^-24 per rounding (4 allowed).
        for (size_t j = 0; j < got.data.size(); ++j) {
          if (want.data[j] < 1e-30) continue;
          const double bound = 1e-6 + std::fabs(std::log(want.data[j])) * 0x1p-22;
          ASSERT_LE(std::fabs(got.data[j] - want.data[j]), bound * want.data[j]) << j;
        }
      }
    }
  }
}

TEST_P(SoftmaxTest, StridedAndTransposedViews) {
  ScopedContext ctx;
  std::mt19937_64 rng(3);
  for (bool log : {false, true}) {
    for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_F16}) {
      // Rows padded in memory; then stored column-major (the softmax axis has stride rows).
      HostTensor padded_in(dtype, {5, 3001}, {}, 13);
      HostTensor transposed_out(dtype, {5, 3001}, {1, 0});
      padded_in.FillUniform(rng, -5.0, 5.0);
      ASSERT_EQ(RunSoftmax(ctx.get(), padded_in, transposed_out, log), SATTN_OK)
          << sattn_last_error();
      const Array want = Want(padded_in.ToArray(), log);
      EXPECT_LE(MaxRelativeError(transposed_out.ToArray(), want), Tolerance(dtype));

      HostTensor transposed_in(dtype, {4, 20000}, {1, 0});
      HostTensor padded_out(SATTN_DTYPE_F32, {4, 20000}, {}, 3);
      transposed_in.FillUniform(rng, -5.0, 5.0);
      ASSERT_EQ(RunSoftmax(ctx.get(), transposed_in, padded_out, log), SATTN_OK)
          << sattn_last_error();
      EXPECT_LE(MaxRelativeError(padded_out.ToArray(), Want(transposed_in.ToArray(), log)), 1e-6);
    }
  }
}

TEST_P(SoftmaxTest, InPlace) {
  ScopedContext ctx;
  std::mt19937_64 rng(4);
  for (bool log : {false, true}) {
    for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
      for (const std::vector<int>& order : {std::vector<int>{}, std::vector<int>{1, 0}}) {
        HostTensor t(dtype, {3, 20001}, order, order.empty() ? 5 : 0);
        t.FillUniform(rng, -6.0, 6.0);
        const Array want = Want(t.ToArray(), log);
        ASSERT_EQ(RunSoftmax(ctx.get(), t, t, log), SATTN_OK) << sattn_last_error();
        EXPECT_LE(MaxRelativeError(t.ToArray(), want), Tolerance(dtype))
            << testing_util::DTypeName(dtype) << (order.empty() ? " padded" : " transposed");
      }
    }
  }
}

TEST_P(SoftmaxTest, ScoresThatOverflowANaiveExp) {
  ScopedContext ctx;
  std::mt19937_64 rng(5);
  // f32 scores in [90, 100]: exp overflows float above 88.7. f16 scores in [12, 16]: exp
  // overflows binary16 above 11.1 (the output here is f16 too).
  struct Case {
    sattn_dtype dtype;
    double lo, hi;
  };
  for (const Case& c : {Case{SATTN_DTYPE_F32, 90.0, 100.0}, Case{SATTN_DTYPE_F16, 12.0, 16.0},
                        Case{SATTN_DTYPE_F32, -1e30, 1e30}}) {
    for (bool log : {false, true}) {
      for (int64_t n : {7, 1000, 40000}) {
        HostTensor in(c.dtype, {2, n});
        in.FillUniform(rng, c.lo, c.hi);
        HostTensor out(c.dtype, in.shape());
        ASSERT_EQ(RunSoftmax(ctx.get(), in, out, log), SATTN_OK) << sattn_last_error();
        const Array got = out.ToArray();
        for (double x : got.data) ASSERT_TRUE(std::isfinite(x) || (log && x == -kInf));
        EXPECT_LE(MaxRelativeError(got, Want(in.ToArray(), log)), Tolerance(c.dtype))
            << testing_util::DTypeName(c.dtype) << " [" << c.lo << ", " << c.hi << "] n=" << n;
      }
    }
  }
}

TEST_P(SoftmaxTest, Temperature) {
  ScopedContext ctx;
  std::mt19937_64 rng(6);
  for (double temperature : {0.25, 0.7, 3.0}) {
    for (bool log : {false, true}) {
      HostTensor in(SATTN_DTYPE_F32, {2, 5003});
      in.FillUniform(rng, -10.0, 10.0);
      HostTensor out(SATTN_DTYPE_F32, in.shape());
      sattn_softmax_options options{};
      options.struct_size = sizeof(options);
      options.temperature = static_cast<float>(temperature);
      ASSERT_EQ(RunSoftmax(ctx.get(), in, out, log, &options), SATTN_OK) << sattn_last_error();
      EXPECT_LE(MaxRelativeError(out.ToArray(), Want(in.ToArray(), log, temperature)), 1e-6)
          << "T=" << temperature;
    }
  }
  // 0 means 1.
  HostTensor in(SATTN_DTYPE_F32, {100});
  in.FillUniform(rng, -3.0, 3.0);
  HostTensor a(SATTN_DTYPE_F32, {100}), b(SATTN_DTYPE_F32, {100});
  sattn_softmax_options zero{};
  zero.struct_size = sizeof(zero);
  ASSERT_EQ(RunSoftmax(ctx.get(), in, a, false, &zero), SATTN_OK);
  ASSERT_EQ(RunSoftmax(ctx.get(), in, b, false, nullptr), SATTN_OK);
  EXPECT_EQ(a.bytes(), b.bytes());
}

TEST_P(SoftmaxTest, MinusInfinityNaNAndPlusInfinity) {
  ScopedContext ctx;
  std::mt19937_64 rng(7);
  // Row 0: some -inf. Row 1: only -inf. Row 2: a NaN. Row 3: a +inf. Row 4: normal. Long
  // enough for several parts, with the special values in different parts.
  const int64_t n = 40000;
  for (bool log : {false, true}) {
    for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_BF16}) {
      HostTensor in(dtype, {5, n});
      in.FillUniform(rng, -4.0, 4.0);
      for (int64_t j = 0; j < n; j += 3) in.Set({0, j}, -kInf);
      for (int64_t j = 0; j < n; ++j) in.Set({1, j}, -kInf);
      in.Set({2, 39999}, NAN);
      in.Set({3, 17000}, kInf);
      HostTensor out(dtype, in.shape());
      ASSERT_EQ(RunSoftmax(ctx.get(), in, out, log), SATTN_OK) << sattn_last_error();
      const Array got = out.ToArray(), want = Want(in.ToArray(), log);
      for (int64_t j = 0; j < n; ++j) {
        if (j % 3 == 0) ASSERT_EQ(got({0, j}), log ? -kInf : 0.0) << j;
        ASSERT_EQ(got({1, j}), log ? -kInf : 0.0) << j;
        ASSERT_TRUE(std::isnan(got({2, j}))) << j;
        ASSERT_TRUE(std::isnan(got({3, j}))) << j;
      }
      EXPECT_LE(MaxRelativeError(Row(got, 0), Row(want, 0)), Tolerance(dtype));
      EXPECT_LE(MaxRelativeError(Row(got, 4), Row(want, 4)), Tolerance(dtype));
    }
  }
}

TEST_P(SoftmaxTest, SameBytesForAnyThreadCount) {
  std::mt19937_64 rng(8);
  // One long row (split across threads by part), and a few (split too), and many (whole rows).
  const int64_t long_row = SmallRun() ? 3 * 16384 + 5 : 262144 + 7;
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{long_row}, std::vector<int64_t>{3, 40001},
        std::vector<int64_t>{37, 2000}}) {
    for (bool log : {false, true}) {
      HostTensor in(SATTN_DTYPE_F16, shape);
      in.FillUniform(rng, -9.0, 9.0);
      std::vector<std::vector<uint8_t>> results;
      for (int threads : {1, 2, 3, 8}) {
        ScopedContext ctx(threads);
        HostTensor out(SATTN_DTYPE_F32, shape);
        ASSERT_EQ(RunSoftmax(ctx.get(), in, out, log), SATTN_OK) << sattn_last_error();
        results.push_back(out.bytes());
        if (threads == 1) EXPECT_LE(MaxRelativeError(out.ToArray(), Want(in.ToArray(), log)), 1e-6);
      }
      for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]);
    }
  }
}

// An output of 16 MiB or more in rows of at most 2^18 scores is staged and streamed (pass 1
// keeps a row's terms in the worker's scratch, pass 2 writes out with non-temporal stores);
// smaller outputs keep the terms in out itself. A row's bytes depend only on the row, so each
// row of a large call must equal the same row computed alone. Rows start unaligned (one float
// of padding between rows, canaries in it), and include an all -inf row, a NaN and a rising
// row whose chunk offsets all differ.
TEST_P(SoftmaxTest, StreamedOutputMatchesRowsComputedAlone) {
  ScopedContext ctx;
  std::mt19937_64 rng(10);
  const int64_t rows = 33, n = 131075;  // 33 * 131075 * 4 bytes > 16 MiB
  HostTensor in(SATTN_DTYPE_F32, {rows, n});
  in.FillUniform(rng, -12.0, 12.0);
  for (int64_t j = 0; j < n; ++j) {
    in.Set({1, j}, -kInf);
    in.Set({2, j}, static_cast<double>(j) * 1e-4);
  }
  in.Set({3, 70000}, NAN);
  HostTensor out(SATTN_DTYPE_F32, in.shape(), {}, 1);
  ASSERT_EQ(RunSoftmax(ctx.get(), in, out, false), SATTN_OK) << sattn_last_error();
  const Array got = out.ToArray(), all_in = in.ToArray();
  for (int64_t r = 0; r < rows; ++r) {
    HostTensor row_in(SATTN_DTYPE_F32, {n}), row_out(SATTN_DTYPE_F32, {n});
    Array one({n});
    one.data = Row(all_in, r);
    row_in.FromArray(one);
    ASSERT_EQ(RunSoftmax(ctx.get(), row_in, row_out, false), SATTN_OK) << sattn_last_error();
    const std::vector<double> alone = row_out.ToArray().data, streamed = Row(got, r);
    for (int64_t j = 0; j < n; ++j) {
      if (std::isnan(alone[j]) && std::isnan(streamed[j])) continue;
      ASSERT_EQ(streamed[j], alone[j]) << "row " << r << " score " << j;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    ASSERT_EQ(got({1, j}), 0.0) << j;
    ASSERT_TRUE(std::isnan(got({3, j}))) << j;
  }
  for (int64_t r : {0, 2, 32}) {
    Array row({n});
    row.data = Row(all_in, r);
    EXPECT_LE(MaxRelativeError(Row(got, r), Want(row, false).data), 1e-6) << r;
  }
  // The padding between rows still holds its canaries: with every element zeroed, the buffer
  // equals a fresh one.
  HostTensor written = out, fresh(SATTN_DTYPE_F32, in.shape(), {}, 1);
  written.FromArray(Array(in.shape()));
  fresh.FromArray(Array(in.shape()));
  EXPECT_EQ(written.bytes(), fresh.bytes());
}

// ------------------------------------------------------------------ malformed calls

struct SoftmaxCall {
  HostTensor in{SATTN_DTYPE_F16, {3, 50}}, out{SATTN_DTYPE_F32, {3, 50}};
  sattn_tensor in_view, out_view;
  sattn_softmax_options options{};
  bool pass_options = false;

  SoftmaxCall() {
    std::mt19937_64 rng(9);
    in.FillUniform(rng, -1, 1);
    out.FillBytes(0xCD);
    in_view = in.view();
    out_view = out.view();
    options.struct_size = sizeof(options);
  }
  sattn_status Run(sattn_context* ctx, bool log) {
    return log ? sattn_log_softmax(ctx, &in_view, &out_view, pass_options ? &options : nullptr)
               : sattn_softmax(ctx, &in_view, &out_view, pass_options ? &options : nullptr);
  }
};

struct SoftmaxCase {
  const char* name;
  sattn_status status;
  const char* message_names;
  void (*corrupt)(SoftmaxCall&);
};

TEST(SoftmaxBadInputTest, ClearErrorAndNothingWritten) {
  const SoftmaxCase cases[] = {
      {"rank 3", SATTN_ERR_INVALID_ARGUMENT, "in.ndim=3",
       [](SoftmaxCall& c) { c.in_view.ndim = 3; }},
      {"out rank differs", SATTN_ERR_INVALID_ARGUMENT, "out.ndim=1",
       [](SoftmaxCall& c) { c.out_view.ndim = 1; }},
      {"shape mismatch", SATTN_ERR_INVALID_ARGUMENT, "out.shape[1]=49",
       [](SoftmaxCall& c) { c.out_view.shape[1] = 49; }},
      {"rows mismatch", SATTN_ERR_INVALID_ARGUMENT, "out.shape[0]=2 must equal in.shape[0]=3",
       [](SoftmaxCall& c) { c.out_view.shape[0] = 2; }},
      {"out bf16 from f16", SATTN_ERR_INVALID_ARGUMENT,
       "out.dtype=bf16 must be f32 or in.dtype=f16",
       [](SoftmaxCall& c) { c.out_view.dtype = SATTN_DTYPE_BF16; }},
      {"integer in", SATTN_ERR_INVALID_ARGUMENT, "in.dtype=i32",
       [](SoftmaxCall& c) { c.in_view.dtype = SATTN_DTYPE_I32; }},
      {"out overlaps itself", SATTN_ERR_INVALID_ARGUMENT, "out.strides[0]",
       [](SoftmaxCall& c) { c.out_view.strides[0] = 10; }},
      {"out partially aliases in", SATTN_ERR_INVALID_ARGUMENT, "out overlaps in",
       [](SoftmaxCall& c) {
         c.out_view = c.in_view;
         c.out_view.data = static_cast<uint16_t*>(c.out_view.data) + 1;
       }},
      {"in place with other strides", SATTN_ERR_INVALID_ARGUMENT, "out overlaps in",
       [](SoftmaxCall& c) {
         c.out_view = c.in_view;
         c.out_view.strides[0] = 1;
         c.out_view.strides[1] = 3;
       }},
      {"negative temperature", SATTN_ERR_INVALID_ARGUMENT, "options->temperature=-1",
       [](SoftmaxCall& c) {
         c.pass_options = true;
         c.options.temperature = -1.0f;
       }},
      {"NaN temperature", SATTN_ERR_INVALID_ARGUMENT, "options->temperature=nan",
       [](SoftmaxCall& c) {
         c.pass_options = true;
         c.options.temperature = NAN;
       }},
      {"infinite temperature", SATTN_ERR_INVALID_ARGUMENT, "options->temperature=inf",
       [](SoftmaxCall& c) {
         c.pass_options = true;
         c.options.temperature = INFINITY;
       }},
      {"subnormal temperature", SATTN_ERR_INVALID_ARGUMENT, "options->temperature",
       [](SoftmaxCall& c) {
         c.pass_options = true;
         c.options.temperature = FLT_MIN / 4;
       }},
      {"struct_size too small", SATTN_ERR_INVALID_ARGUMENT, "options->struct_size=4",
       [](SoftmaxCall& c) {
         c.pass_options = true;
         c.options.struct_size = 4;
       }},
  };
  ScopedContext ctx;
  for (bool log : {false, true}) {
    for (const SoftmaxCase& bad : cases) {
      SoftmaxCall call;
      bad.corrupt(call);
      const std::vector<uint8_t> out_before = call.out.bytes(), in_before = call.in.bytes();
      EXPECT_EQ(call.Run(ctx.get(), log), bad.status) << bad.name;
      EXPECT_NE(std::string(sattn_last_error()).find(bad.message_names), std::string::npos)
          << bad.name << ": " << sattn_last_error();
      EXPECT_EQ(call.out.bytes(), out_before) << bad.name << " wrote to out";
      EXPECT_EQ(call.in.bytes(), in_before) << bad.name << " wrote to in";
    }
    SoftmaxCall good;
    EXPECT_EQ(good.Run(ctx.get(), log), SATTN_OK) << sattn_last_error();
    EXPECT_EQ(sattn_softmax(nullptr, &good.in_view, &good.out_view, nullptr),
              SATTN_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(sattn_last_error()).find("ctx"), std::string::npos);
    EXPECT_EQ(sattn_log_softmax(ctx.get(), nullptr, &good.out_view, nullptr),
              SATTN_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(sattn_last_error()).find("in must not be NULL"), std::string::npos);
    EXPECT_EQ(sattn_softmax(ctx.get(), &good.in_view, nullptr, nullptr),
              SATTN_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(sattn_last_error()).find("out must not be NULL"), std::string::npos);
  }
}

}  // namespace
}  // namespace streamattn
