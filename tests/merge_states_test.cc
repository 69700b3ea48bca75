// sattn_merge_states through the C API on every SIMD target: merging the (o, lse) of attention
// over pieces of the keys equals attention over all of them (the oracle), for every dtype and
// layout, in place, with empty pieces anywhere, and identically for any thread count.
#include <cmath>
#include <random>
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
using reference::AttentionSpec;
using testing_util::HostTensor;
using testing_util::MaxRelativeError;
using testing_util::ScopedContext;

constexpr int64_t kBatch = 2, kSeq = 3, kHeads = 4;

// Keys [begin, end) of k and v.
Array SliceKeys(const Array& a, int64_t begin, int64_t end) {
  Array s({a.shape[0], end - begin, a.shape[2], a.shape[3]});
  for (int64_t b = 0; b < a.shape[0]; ++b)
    for (int64_t j = begin; j < end; ++j)
      for (int64_t h = 0; h < a.shape[2]; ++h)
        for (int64_t d = 0; d < a.shape[3]; ++d) s({b, j - begin, h, d}) = a({b, j, h, d});
  return s;
}

struct Problem {
  Array q, k, v;
  std::vector<int64_t> cuts;  // piece i is keys [cuts[i], cuts[i + 1])
  std::vector<bool> masked;   // piece i's keys are all hidden
};

Problem MakeProblem(std::mt19937_64& rng, int64_t head_dim, int num_pieces, int masked_piece) {
  Problem p;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> len(1, 12);
  p.cuts.push_back(0);
  for (int i = 0; i < num_pieces; ++i) p.cuts.push_back(p.cuts.back() + len(rng));
  p.masked.assign(num_pieces, false);
  if (masked_piece >= 0) p.masked[masked_piece] = true;
  const int64_t seq_k = p.cuts.back();
  p.q = Array({kBatch, kSeq, kHeads, head_dim});
  p.k = Array({kBatch, seq_k, kHeads, head_dim});
  p.v = Array({kBatch, seq_k, kHeads, head_dim});
  for (Array* a : {&p.q, &p.k, &p.v})
    for (double& x : a->data) x = 2.0 * u(rng);
  return p;
}

// Hides the keys of masked pieces (an additive -inf mask on their positions).
AttentionSpec SpecHiding(const Problem& p, int64_t offset) {
  AttentionSpec spec;
  spec.mask = [&p, offset](int64_t, int64_t, int64_t, int64_t j) {
    const int64_t key = j + offset;
    for (size_t i = 0; i + 1 < p.cuts.size(); ++i) {
      if (key >= p.cuts[i] && key < p.cuts[i + 1]) return p.masked[i] ? -INFINITY : 0.0;
    }
    return 0.0;
  };
  return spec;
}

struct Parts {
  std::vector<HostTensor> o, lse;
  std::vector<sattn_tensor> o_views, lse_views;
};

// Each piece's (o, lse) by the oracle, stored in o_dtype with the given storage order. A
// masked piece's o is filled with NaN: merging must never read it.
Parts MakeParts(const Problem& p, sattn_dtype o_dtype, std::vector<int> order) {
  Parts parts;
  for (size_t i = 0; i + 1 < p.cuts.size(); ++i) {
    const auto r =
        reference::Attention(p.q, SliceKeys(p.k, p.cuts[i], p.cuts[i + 1]),
                             SliceKeys(p.v, p.cuts[i], p.cuts[i + 1]), SpecHiding(p, p.cuts[i]));
    parts.o.emplace_back(o_dtype, r.out.shape, order, i % 2);
    parts.lse.emplace_back(SATTN_DTYPE_F32, r.lse.shape);
    Array o = r.out;
    if (p.masked[i])
      for (double& x : o.data) x = NAN;
    parts.o.back().FromArray(o);
    parts.lse.back().FromArray(r.lse);
  }
  for (size_t i = 0; i < parts.o.size(); ++i) {
    parts.o_views.push_back(parts.o[i].view());
    parts.lse_views.push_back(parts.lse[i].view());
  }
  return parts;
}

// The merge in double of the parts exactly as stored (isolates the merge from input rounding).
Array MergeInDouble(const Parts& parts, Array* lse_out) {
  const std::vector<int64_t>& shape = parts.o[0].shape();
  Array out(shape);
  *lse_out = Array({shape[0], shape[2], shape[1]});
  const std::vector<Array> o = [&] {
    std::vector<Array> v;
    for (const HostTensor& t : parts.o) v.push_back(t.ToArray());
    return v;
  }();
  for (int64_t b = 0; b < shape[0]; ++b)
    for (int64_t s = 0; s < shape[1]; ++s)
      for (int64_t h = 0; h < shape[2]; ++h) {
        std::vector<double> lses;
        for (const HostTensor& l : parts.lse) lses.push_back(l.Get({b, h, s}));
        const double lse = reference::LogSumExp(lses);
        (*lse_out)({b, h, s}) = lse;
        for (int64_t d = 0; d < shape[3]; ++d) {
          double acc = 0.0;
          for (size_t i = 0; i < o.size(); ++i) {
            if (lses[i] != -INFINITY) acc += std::exp(lses[i] - lse) * o[i]({b, s, h, d});
          }
          out({b, s, h, d}) = lse == -INFINITY ? 0.0 : acc;
        }
      }
  return out;
}

double OutputTolerance(sattn_dtype dtype) {
  return dtype == SATTN_DTYPE_F32 ? 2e-6 : dtype == SATTN_DTYPE_F16 ? 1e-3 : 8e-3;
}

class MergeStatesTest : public testing_util::PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(MergeStatesTest);

TEST_P(MergeStatesTest, EqualsAttentionOverAllKeys) {
  ScopedContext ctx;
  std::mt19937_64 rng(1);
  for (int64_t head_dim : {1, 16, 37, 128}) {
    for (int num_pieces : {1, 2, 5}) {
      for (int masked = -1; masked < num_pieces; ++masked) {
        const Problem p = MakeProblem(rng, head_dim, num_pieces, masked);
        Parts parts = MakeParts(p, SATTN_DTYPE_F32, {});
        HostTensor out(SATTN_DTYPE_F32, parts.o[0].shape());
        HostTensor lse(SATTN_DTYPE_F32, parts.lse[0].shape());
        const sattn_tensor out_view = out.view(), lse_view = lse.view();
        ASSERT_EQ(sattn_merge_states(ctx.get(), num_pieces, parts.o_views.data(),
                                     parts.lse_views.data(), &out_view, &lse_view),
                  SATTN_OK)
            << sattn_last_error();
        const auto want = reference::Attention(p.q, p.k, p.v, SpecHiding(p, 0));
        EXPECT_LE(MaxRelativeError(out.ToArray(), want.out), 2e-6)
            << "head_dim=" << head_dim << " pieces=" << num_pieces << " masked=" << masked;
        EXPECT_LE(MaxRelativeError(lse.ToArray(), want.lse), 1e-6);
      }
    }
  }
}

TEST_P(MergeStatesTest, EveryDTypeAndLayout) {
  ScopedContext ctx;
  std::mt19937_64 rng(2);
  const sattn_dtype dtypes[] = {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16};
  const std::vector<std::vector<int>> orders = {{}, {0, 2, 1, 3}, {2, 1, 0, 3}};
  for (sattn_dtype in_dtype : dtypes) {
    for (sattn_dtype out_dtype : dtypes) {
      for (const auto& order : orders) {
        const Problem p = MakeProblem(rng, 24, 3, 1);
        Parts parts = MakeParts(p, in_dtype, order);
        HostTensor out(out_dtype, parts.o[0].shape(), order, 3);
        HostTensor lse(SATTN_DTYPE_F32, parts.lse[0].shape(), {0, 2, 1});
        const sattn_tensor out_view = out.view(), lse_view = lse.view();
        ASSERT_EQ(sattn_merge_states(ctx.get(), 3, parts.o_views.data(), parts.lse_views.data(),
                                     &out_view, &lse_view),
                  SATTN_OK)
            << sattn_last_error();
        Array want_lse;
        const Array want = MergeInDouble(parts, &want_lse);
        EXPECT_LE(MaxRelativeError(out.ToArray(), want), OutputTolerance(out_dtype))
            << testing_util::DTypeName(in_dtype) << " -> " << testing_util::DTypeName(out_dtype);
        EXPECT_LE(MaxRelativeError(lse.ToArray(), want_lse), 1e-6);
      }
    }
  }
}

TEST_P(MergeStatesTest, InPlaceIntoAnyPart) {
  ScopedContext ctx;
  std::mt19937_64 rng(3);
  for (int target_part = 0; target_part < 3; ++target_part) {
    const Problem p = MakeProblem(rng, 40, 3, -1);
    Parts parts = MakeParts(p, SATTN_DTYPE_F32, {0, 2, 1, 3});
    Array want_lse;
    const Array want = MergeInDouble(parts, &want_lse);
    const sattn_tensor out_view = parts.o_views[target_part];
    const sattn_tensor lse_view = parts.lse_views[target_part];
    ASSERT_EQ(sattn_merge_states(ctx.get(), 3, parts.o_views.data(), parts.lse_views.data(),
                                 &out_view, &lse_view),
              SATTN_OK)
        << sattn_last_error();
    EXPECT_LE(MaxRelativeError(parts.o[target_part].ToArray(), want), 2e-6);
    EXPECT_LE(MaxRelativeError(parts.lse[target_part].ToArray(), want_lse), 1e-6);
  }
}

TEST_P(MergeStatesTest, AllEmptyGivesZeroAndMinusInfinity) {
  ScopedContext ctx;
  std::mt19937_64 rng(4);
  const Problem p = MakeProblem(rng, 8, 1, 0);
  Parts parts = MakeParts(p, SATTN_DTYPE_F16, {});
  parts.o.push_back(parts.o[0]);
  parts.lse.push_back(parts.lse[0]);
  parts.o_views = {parts.o[0].view(), parts.o[1].view()};
  parts.lse_views = {parts.lse[0].view(), parts.lse[1].view()};
  HostTensor out(SATTN_DTYPE_F32, parts.o[0].shape());
  HostTensor lse(SATTN_DTYPE_F32, parts.lse[0].shape());
  out.FillBytes(0x7F);  // NaN patterns: every element must be overwritten
  const sattn_tensor out_view = out.view(), lse_view = lse.view();
  ASSERT_EQ(sattn_merge_states(ctx.get(), 2, parts.o_views.data(), parts.lse_views.data(),
                               &out_view, &lse_view),
            SATTN_OK);
  for (double x : out.ToArray().data) EXPECT_EQ(x, 0.0);
  for (double x : lse.ToArray().data) EXPECT_EQ(x, -INFINITY);

  // No parts at all is the identity too.
  out.FillBytes(0x7F);
  ASSERT_EQ(sattn_merge_states(ctx.get(), 0, nullptr, nullptr, &out_view, &lse_view), SATTN_OK);
  for (double x : out.ToArray().data) EXPECT_EQ(x, 0.0);
  for (double x : lse.ToArray().data) EXPECT_EQ(x, -INFINITY);
}

TEST_P(MergeStatesTest, NaNLsePoisonsOnlyItsRow) {
  ScopedContext ctx;
  std::mt19937_64 rng(5);
  const Problem p = MakeProblem(rng, 8, 2, -1);
  Parts parts = MakeParts(p, SATTN_DTYPE_F32, {});
  parts.lse[1].Set({1, 2, 0}, NAN);  // batch 1, head 2, seq 0
  HostTensor out(SATTN_DTYPE_F32, parts.o[0].shape());
  HostTensor lse(SATTN_DTYPE_F32, parts.lse[0].shape());
  const sattn_tensor out_view = out.view(), lse_view = lse.view();
  ASSERT_EQ(sattn_merge_states(ctx.get(), 2, parts.o_views.data(), parts.lse_views.data(),
                               &out_view, &lse_view),
            SATTN_OK);
  testing_util::ForEachIndex(out.shape(), [&](const std::vector<int64_t>& i) {
    const bool poisoned = i[0] == 1 && i[1] == 0 && i[2] == 2;
    EXPECT_EQ(std::isnan(out.Get(i)), poisoned);
  });
  EXPECT_TRUE(std::isnan(lse.Get({1, 2, 0})));
  EXPECT_FALSE(std::isnan(lse.Get({1, 2, 1})));
}

TEST_P(MergeStatesTest, SameBytesForAnyThreadCount) {
  // Enough rows for many tasks: random parts, some rows empty in some parts.
  std::mt19937_64 rng(6);
  const std::vector<int64_t> o_shape = {4, 64, 8, 64}, lse_shape = {4, 8, 64};
  Parts parts;
  for (int i = 0; i < 4; ++i) {
    parts.o.emplace_back(SATTN_DTYPE_BF16, o_shape);
    parts.o.back().FillUniform(rng, -3.0, 3.0);
    parts.lse.emplace_back(SATTN_DTYPE_F32, lse_shape);
    parts.lse.back().FillUniform(rng, -20.0, 20.0);
    parts.lse.back().Set({1, 2, 3}, -INFINITY);
  }
  for (int i = 0; i < 4; ++i) {
    parts.o_views.push_back(parts.o[i].view());
    parts.lse_views.push_back(parts.lse[i].view());
  }
  std::vector<std::vector<uint8_t>> results;
  for (int threads : {1, 2, 3, 8}) {
    ScopedContext ctx(threads);
    HostTensor out(SATTN_DTYPE_F32, o_shape);
    HostTensor lse(SATTN_DTYPE_F32, lse_shape);
    const sattn_tensor out_view = out.view(), lse_view = lse.view();
    ASSERT_EQ(sattn_merge_states(ctx.get(), 4, parts.o_views.data(), parts.lse_views.data(),
                                 &out_view, &lse_view),
              SATTN_OK);
    std::vector<uint8_t> bytes = out.bytes();
    bytes.insert(bytes.end(), lse.bytes().begin(), lse.bytes().end());
    results.push_back(bytes);
  }
  for (size_t i = 1; i < results.size(); ++i) EXPECT_EQ(results[i], results[0]);
  Array want_lse;
  ScopedContext ctx(1);
  HostTensor out(SATTN_DTYPE_F32, o_shape);
  const sattn_tensor out_view = out.view();
  ASSERT_EQ(sattn_merge_states(ctx.get(), 4, parts.o_views.data(), parts.lse_views.data(),
                               &out_view, nullptr),
            SATTN_OK);
  EXPECT_LE(MaxRelativeError(out.ToArray(), MergeInDouble(parts, &want_lse)), 2e-6);
}

}  // namespace
}  // namespace streamattn
