// sattn_softmax_topk through the C API on every SIMD target, against a sort of the oracle:
// indices must equal the first k of the row sorted by descending score (equal scores by lower
// index) exactly; probabilities must match reference::Softmax at those indices and lse
// reference::LogSumExp. Every dtype, k from 1 to 1024 and k = n, odd lengths, rows with heavy
// ties, rows that make every score a candidate (ascending), the overflow ranges, -inf, NaN and
// +inf, strides, temperatures, the same bytes for any thread count, and malformed calls.
//
// Tolerances: probabilities 1e-6 max-norm relative (as sattn_softmax: exp2 < 2 ulp, the
// exponent's rounding, the 1/l product, the sum l; measured at most 5.3e-7); lse 1e-6 absolute
// (ln l from an f32 l) plus 2^-23 relative (the f32 rounding of lse itself).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
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

using testing_util::HostTensor;
using testing_util::MaxRelativeError;
using testing_util::ScopedContext;

constexpr double kInf = testing_util::kInf;

bool SmallRun() { return std::getenv("STREAMATTN_TEST_SMALL") != nullptr; }
int64_t LongRow() { return SmallRun() ? 100003 : 1000003; }

struct TopK {
  std::vector<int32_t> indices;
  std::vector<double> probs;
  double lse = 0.0;
};

// The oracle: sort the row (scores / T) by descending score, then lower index.
TopK WantTopK(std::vector<double> scores, int32_t k, double temperature = 1.0) {
  for (double& s : scores) s /= temperature;
  TopK want;
  want.lse = reference::LogSumExp(scores);
  const std::vector<double> p = reference::Softmax(scores);
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  for (int32_t j = 0; j < k; ++j) {
    want.indices.push_back(order[j]);
    want.probs.push_back(p[order[j]]);
  }
  return want;
}

// One call's tensors: in [rows, n] (or [n]), indices/probs [rows, k], lse [rows].
struct TopKCall {
  HostTensor in, indices, probs, lse;
  int32_t k;

  TopKCall(sattn_dtype dtype, int64_t rows, int64_t n, int32_t k_in, std::vector<int> in_order = {},
           int64_t out_padding = 0)
      : k(k_in) {
    const bool one_d = rows == 0;
    in = HostTensor(dtype, one_d ? std::vector<int64_t>{n} : std::vector<int64_t>{rows, n},
                    one_d ? std::vector<int>{} : in_order);
    const std::vector<int64_t> out_shape =
        one_d ? std::vector<int64_t>{k} : std::vector<int64_t>{rows, k};
    // HostTensor knows float dtypes only: an f32 buffer (same element size) viewed as i32.
    indices = HostTensor(SATTN_DTYPE_F32, out_shape, {}, out_padding);
    probs = HostTensor(SATTN_DTYPE_F32, out_shape, {}, out_padding);
    lse = HostTensor(SATTN_DTYPE_F32, {one_d ? 1 : rows});
  }
  int64_t rows() const { return in.shape().size() == 1 ? 1 : in.shape()[0]; }
  int64_t n() const { return in.shape().back(); }

  sattn_status Run(sattn_context* ctx, const sattn_softmax_options* options = nullptr) {
    const sattn_tensor in_view = in.view(), indices_view = IndicesView(), probs_view = probs.view(),
                       lse_view = lse.view();
    return sattn_softmax_topk(ctx, &in_view, k, &indices_view, &probs_view, &lse_view, options);
  }
  sattn_tensor IndicesView() const {
    sattn_tensor v = indices.view();
    v.dtype = SATTN_DTYPE_I32;
    return v;
  }

  std::vector<double> Scores(int64_t r) const {
    std::vector<double> s(n());
    for (int64_t j = 0; j < n(); ++j) s[j] = in.shape().size() == 1 ? in.Get({j}) : in.Get({r, j});
    return s;
  }
  TopK Got(int64_t r) const {
    TopK got;
    const bool one_d = in.shape().size() == 1;
    for (int32_t j = 0; j < k; ++j) {
      const sattn_tensor v = IndicesView();
      const int32_t* base = static_cast<const int32_t*>(v.data);
      got.indices.push_back(one_d ? base[j * v.strides[0]]
                                  : base[r * v.strides[0] + j * v.strides[1]]);
      got.probs.push_back(one_d ? probs.Get({j}) : probs.Get({r, j}));
    }
    got.lse = lse.Get({r});
    return got;
  }
};

// Checks row r of a call against the oracle.
void ExpectRowMatches(const TopKCall& call, int64_t r, double temperature,
                      const std::string& what) {
  const TopK want = WantTopK(call.Scores(r), call.k, temperature);
  const TopK got = call.Got(r);
  EXPECT_EQ(got.indices, want.indices) << what << " row " << r;
  EXPECT_LE(MaxRelativeError(got.probs, want.probs), 1e-6) << what << " row " << r;
  if (std::isfinite(want.lse)) {
    EXPECT_NEAR(got.lse, want.lse, 1e-6 + std::fabs(want.lse) * 0x1p-23) << what << " row " << r;
  } else {
    EXPECT_EQ(got.lse, want.lse) << what << " row " << r;
  }
}

class SoftmaxTopKTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(SoftmaxTopKTest);

TEST_P(SoftmaxTopKTest, MatchesSortedOracle) {
  ScopedContext ctx;
  std::mt19937_64 rng(1);
  for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
    for (int64_t n : {1, 7, 1000, 16385, 40000}) {
      for (int32_t k : {1, 5, 50, 1024}) {
        if (k > n) continue;
        for (int64_t rows : {0, 3}) {  // 0: a 1-D call
          TopKCall call(dtype, rows, n, k);
          call.in.FillUniform(rng, -8.0, 8.0);  // f16/bf16: many equal scores
          ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
          for (int64_t r = 0; r < call.rows(); ++r) {
            ExpectRowMatches(call, r, 1.0,
                             std::string(testing_util::DTypeName(dtype)) +
                                 " n=" + std::to_string(n) + " k=" + std::to_string(k));
          }
        }
      }
    }
  }
}

TEST_P(SoftmaxTopKTest, LongOddRowAndKEqualsN) {
  ScopedContext ctx;
  std::mt19937_64 rng(2);
  for (int32_t k : {50, 1024}) {
    TopKCall call(SATTN_DTYPE_F32, 1, LongRow(), k);
    call.in.FillUniform(rng, -20.0, 20.0);
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    ExpectRowMatches(call, 0, 1.0, "long row k=" + std::to_string(k));
  }
  for (int64_t n : {1, 9, 1024}) {
    TopKCall call(SATTN_DTYPE_BF16, 2, n, static_cast<int32_t>(n));
    call.in.FillUniform(rng, -3.0, 3.0);
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    for (int64_t r = 0; r < 2; ++r) ExpectRowMatches(call, r, 1.0, "k=n=" + std::to_string(n));
  }
}

TEST_P(SoftmaxTopKTest, TiesAndAdversarialOrders) {
  ScopedContext ctx;
  std::mt19937_64 rng(3);
  const int64_t n = 50001;
  std::uniform_int_distribution<int> small(-2, 2);
  for (int32_t k : {1, 64, 1024}) {
    TopKCall call(SATTN_DTYPE_F32, 5, n, k);
    for (int64_t j = 0; j < n; ++j) {
      call.in.Set({0, j}, small(rng) == 0 ? (j % 2 ? -0.0 : 0.0) : small(rng));  // ties, +-0
      call.in.Set({1, j}, static_cast<double>(j) * 1e-3);   // ascending: all candidates
      call.in.Set({2, j}, -static_cast<double>(j) * 1e-3);  // descending
      call.in.Set({3, j}, 1.5);                             // constant
      call.in.Set({4, j}, static_cast<double>(j % 1000));   // a sawtooth of repeated peaks
    }
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    for (int64_t r = 0; r < 5; ++r) ExpectRowMatches(call, r, 1.0, "k=" + std::to_string(k));
  }
}

TEST_P(SoftmaxTopKTest, ScoresThatOverflowANaiveExp) {
  ScopedContext ctx;
  std::mt19937_64 rng(4);
  for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_F16}) {
    const double lo = dtype == SATTN_DTYPE_F32 ? 90.0 : 12.0;
    const double hi = dtype == SATTN_DTYPE_F32 ? 100.0 : 16.0;
    TopKCall call(dtype, 2, 30001, 50);
    call.in.FillUniform(rng, lo, hi);
    ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
    for (int64_t r = 0; r < 2; ++r) {
      ExpectRowMatches(call, r, 1.0, testing_util::DTypeName(dtype));
      for (double p : call.Got(r).probs) EXPECT_TRUE(std::isfinite(p) && p > 0.0);
    }
  }
}

TEST_P(SoftmaxTopKTest, MinusInfinityNaNAndPlusInfinity) {
  ScopedContext ctx;
  std::mt19937_64 rng(5);
  const int64_t n = 40000;
  const int32_t k = 10;
  // Row 0: some -inf. Row 1: only -inf. Row 2: 3 finite scores, k = 10. Row 3: a NaN.
  // Row 4: a +inf. Row 5: normal.
  TopKCall call(SATTN_DTYPE_F32, 6, n, k);
  call.in.FillUniform(rng, -4.0, 4.0);
  for (int64_t j = 0; j < n; j += 2) call.in.Set({0, j}, -kInf);
  for (int64_t j = 0; j < n; ++j) call.in.Set({1, j}, -kInf);
  for (int64_t j = 0; j < n; ++j)
    call.in.Set({2, j}, j == 5 || j == 20000 || j == 39999 ? 1.0 : -kInf);
  call.in.Set({3, 33333}, NAN);
  call.in.Set({4, 17}, kInf);
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  ExpectRowMatches(call, 0, 1.0, "some -inf");
  const TopK empty = call.Got(1);
  for (int32_t j = 0; j < k; ++j) {
    EXPECT_EQ(empty.indices[j], j);  // all tie at -inf: lowest indices first
    EXPECT_EQ(empty.probs[j], 0.0);
  }
  EXPECT_EQ(empty.lse, -kInf);
  ExpectRowMatches(call, 2, 1.0, "three finite");
  const TopK three = call.Got(2);
  EXPECT_EQ(three.indices, (std::vector<int32_t>{5, 20000, 39999, 0, 1, 2, 3, 4, 6, 7}));
  for (int64_t r : {3, 4}) {
    const TopK bad = call.Got(r);
    for (int32_t j = 0; j < k; ++j) {
      EXPECT_EQ(bad.indices[j], -1) << "row " << r;
      EXPECT_TRUE(std::isnan(bad.probs[j])) << "row " << r;
    }
    EXPECT_TRUE(std::isnan(bad.lse)) << "row " << r;
  }
  ExpectRowMatches(call, 5, 1.0, "after the NaN rows");
}

TEST_P(SoftmaxTopKTest, StridesTemperatureAndOneDimension) {
  ScopedContext ctx;
  std::mt19937_64 rng(6);
  for (double temperature : {1.0, 0.3, 4.0}) {
    sattn_softmax_options options{};
    options.struct_size = sizeof(options);
    options.temperature = static_cast<float>(temperature);
    // The softmax axis has stride rows (column-major input), outputs padded.
    TopKCall call(SATTN_DTYPE_F16, 4, 20001, 33, {1, 0}, 7);
    call.in.FillUniform(rng, -10.0, 10.0);
    ASSERT_EQ(call.Run(ctx.get(), &options), SATTN_OK) << sattn_last_error();
    for (int64_t r = 0; r < 4; ++r) ExpectRowMatches(call, r, temperature, "strided");
    TopKCall one(SATTN_DTYPE_BF16, 0, 777, 20);
    one.in.FillUniform(rng, -10.0, 10.0);
    ASSERT_EQ(one.Run(ctx.get(), &options), SATTN_OK) << sattn_last_error();
    ExpectRowMatches(one, 0, temperature, "1-D");
  }
  // lse is optional.
  TopKCall call(SATTN_DTYPE_F32, 2, 100, 3);
  call.in.FillUniform(rng, -1.0, 1.0);
  const sattn_tensor in = call.in.view(), indices = call.IndicesView(), probs = call.probs.view();
  ASSERT_EQ(sattn_softmax_topk(ctx.get(), &in, 3, &indices, &probs, nullptr, nullptr), SATTN_OK);
  EXPECT_EQ(call.Got(1).indices, WantTopK(call.Scores(1), 3).indices);
}

TEST_P(SoftmaxTopKTest, AgreesWithSoftmax) {
  ScopedContext ctx;
  std::mt19937_64 rng(7);
  TopKCall call(SATTN_DTYPE_F32, 3, 32000, 50);
  call.in.FillUniform(rng, -15.0, 15.0);
  ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  HostTensor soft(SATTN_DTYPE_F32, call.in.shape());
  const sattn_tensor in_view = call.in.view(), soft_view = soft.view();
  ASSERT_EQ(sattn_softmax(ctx.get(), &in_view, &soft_view, nullptr), SATTN_OK);
  for (int64_t r = 0; r < 3; ++r) {
    const TopK got = call.Got(r);
    std::vector<double> from_softmax;
    for (int32_t index : got.indices) from_softmax.push_back(soft.Get({r, index}));
    EXPECT_LE(MaxRelativeError(got.probs, from_softmax), 1e-6);
  }
}

TEST_P(SoftmaxTopKTest, SameBytesForAnyThreadCount) {
  std::mt19937_64 rng(8);
  const int64_t long_row = SmallRun() ? 3 * 16384 + 5 : 262144 + 7;
  struct Shape {
    int64_t rows, n;
  };
  for (const Shape& shape : {Shape{1, long_row}, Shape{3, 40001}, Shape{37, 2000}}) {
    for (int32_t k : {1, 50, 1024}) {
      if (k > shape.n) continue;
      TopKCall reference_call(SATTN_DTYPE_BF16, shape.rows, shape.n, k);
      reference_call.in.FillUniform(rng, -9.0, 9.0);  // bf16: ties across parts
      std::vector<std::vector<uint8_t>> results;
      for (int threads : {1, 2, 3, 8}) {
        ScopedContext ctx(threads);
        TopKCall call = reference_call;
        ASSERT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
        std::vector<uint8_t> bytes = call.indices.bytes();
        bytes.insert(bytes.end(), call.probs.bytes().begin(), call.probs.bytes().end());
        bytes.insert(bytes.end(), call.lse.bytes().begin(), call.lse.bytes().end());
        results.push_back(bytes);
        if (threads == 2) ExpectRowMatches(call, shape.rows - 1, 1.0, "threads=2");
      }
      for (size_t i = 1; i < results.size(); ++i) {
        EXPECT_EQ(results[i], results[0])
            << "rows=" << shape.rows << " n=" << shape.n << " k=" << k;
      }
    }
  }
}

// ------------------------------------------------------------------ malformed calls

struct BadTopK {
  const char* name;
  sattn_status status;
  const char* message_names;
  void (*corrupt)(sattn_tensor& in, int32_t& k, sattn_tensor& indices, sattn_tensor& probs,
                  sattn_tensor& lse);
};

TEST(SoftmaxTopKBadInputTest, ClearErrorAndNothingWritten) {
  const BadTopK cases[] = {
      {"k = 0", SATTN_ERR_INVALID_ARGUMENT, "k=0 must be in [1, n]",
       [](sattn_tensor&, int32_t& k, sattn_tensor&, sattn_tensor&, sattn_tensor&) { k = 0; }},
      {"k > n", SATTN_ERR_INVALID_ARGUMENT, "k=41 must be in [1, n] where n=in.shape[1]=40",
       [](sattn_tensor&, int32_t& k, sattn_tensor& i, sattn_tensor& p, sattn_tensor&) {
         k = i.shape[1] = p.shape[1] = 41;
       }},
      {"k > 1024", SATTN_ERR_UNSUPPORTED, "k=1025",
       [](sattn_tensor& in, int32_t& k, sattn_tensor& i, sattn_tensor& p, sattn_tensor&) {
         in.shape[1] = 2000;
         in.strides[0] = 0;  // a broadcast view: 2000 scores from the buffer's first one
         in.strides[1] = 0;
         k = i.shape[1] = p.shape[1] = 1025;
       }},
      {"row of 2^31 scores", SATTN_ERR_INVALID_ARGUMENT, "must be < 2^31",
       [](sattn_tensor& in, int32_t&, sattn_tensor&, sattn_tensor&, sattn_tensor&) {
         in.shape[1] = int64_t{1} << 31;
         in.strides[1] = 0;
       }},
      {"indices not int32", SATTN_ERR_INVALID_ARGUMENT, "indices.dtype=f32 must be i32",
       [](sattn_tensor&, int32_t&, sattn_tensor& i, sattn_tensor&, sattn_tensor&) {
         i.dtype = SATTN_DTYPE_F32;
       }},
      {"probs not f32", SATTN_ERR_INVALID_ARGUMENT, "probs.dtype=i32 must be f32",
       [](sattn_tensor&, int32_t&, sattn_tensor&, sattn_tensor& p, sattn_tensor&) {
         p.dtype = SATTN_DTYPE_I32;
       }},
      {"indices last extent is not k", SATTN_ERR_INVALID_ARGUMENT,
       "indices.shape[1]=5 must equal k=6",
       [](sattn_tensor&, int32_t& k, sattn_tensor&, sattn_tensor& p, sattn_tensor&) {
         k = 6;
         p.shape[1] = 6;
       }},
      {"probs rows", SATTN_ERR_INVALID_ARGUMENT, "probs.shape[0]=2 must equal in.shape[0]=3",
       [](sattn_tensor&, int32_t&, sattn_tensor&, sattn_tensor& p, sattn_tensor&) {
         p.shape[0] = 2;
       }},
      {"lse rows", SATTN_ERR_INVALID_ARGUMENT, "lse.shape[0]=4 must equal the number of rows, 3",
       [](sattn_tensor&, int32_t&, sattn_tensor&, sattn_tensor&, sattn_tensor& l) {
         l.shape[0] = 4;
       }},
      {"lse rank", SATTN_ERR_INVALID_ARGUMENT, "lse.ndim=2 must be 1",
       [](sattn_tensor&, int32_t&, sattn_tensor&, sattn_tensor&, sattn_tensor& l) { l.ndim = 2; }},
      {"in rank", SATTN_ERR_INVALID_ARGUMENT, "in.ndim=4",
       [](sattn_tensor& in, int32_t&, sattn_tensor&, sattn_tensor&, sattn_tensor&) {
         in.ndim = 4;
       }},
      {"probs overlap indices", SATTN_ERR_INVALID_ARGUMENT, "probs overlaps indices",
       [](sattn_tensor&, int32_t&, sattn_tensor& i, sattn_tensor& p, sattn_tensor&) {
         p.data = i.data;
       }},
      {"indices overlap in", SATTN_ERR_INVALID_ARGUMENT, "indices overlaps in",
       [](sattn_tensor& in, int32_t&, sattn_tensor& i, sattn_tensor&, sattn_tensor&) {
         i.data = in.data;
       }},
      {"lse inside probs", SATTN_ERR_INVALID_ARGUMENT, "lse overlaps probs",
       [](sattn_tensor&, int32_t&, sattn_tensor&, sattn_tensor& p, sattn_tensor& l) {
         l.data = static_cast<float*>(p.data) + 4;
       }},
      {"probs overlap themselves", SATTN_ERR_INVALID_ARGUMENT, "probs.strides[0]=2",
       [](sattn_tensor&, int32_t&, sattn_tensor&, sattn_tensor& p, sattn_tensor&) {
         p.strides[0] = 2;
       }},
  };
  ScopedContext ctx;
  for (const BadTopK& bad : cases) {
    TopKCall call(SATTN_DTYPE_F32, 3, 40, 5);
    std::mt19937_64 rng(9);
    call.in.FillUniform(rng, -1.0, 1.0);
    for (HostTensor* t : {&call.indices, &call.probs, &call.lse}) t->FillBytes(0xCD);
    sattn_tensor in = call.in.view(), indices = call.IndicesView(), probs = call.probs.view(),
                 lse = call.lse.view();
    int32_t k = call.k;
    bad.corrupt(in, k, indices, probs, lse);
    const std::vector<uint8_t> before[] = {call.in.bytes(), call.indices.bytes(),
                                           call.probs.bytes(), call.lse.bytes()};
    EXPECT_EQ(sattn_softmax_topk(ctx.get(), &in, k, &indices, &probs, &lse, nullptr), bad.status)
        << bad.name;
    EXPECT_NE(std::string(sattn_last_error()).find(bad.message_names), std::string::npos)
        << bad.name << ": " << sattn_last_error();
    EXPECT_EQ(call.in.bytes(), before[0]) << bad.name;
    EXPECT_EQ(call.indices.bytes(), before[1]) << bad.name << " wrote to indices";
    EXPECT_EQ(call.probs.bytes(), before[2]) << bad.name << " wrote to probs";
    EXPECT_EQ(call.lse.bytes(), before[3]) << bad.name << " wrote to lse";
  }
  TopKCall good(SATTN_DTYPE_F32, 3, 40, 5);
  EXPECT_EQ(good.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  const sattn_tensor in = good.in.view(), probs = good.probs.view();
  EXPECT_EQ(sattn_softmax_topk(ctx.get(), &in, 5, nullptr, &probs, nullptr, nullptr),
            SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("indices must not be NULL"), std::string::npos);
}

}  // namespace
}  // namespace streamattn
