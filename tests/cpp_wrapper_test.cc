// The C++ wrapper (streamattn.hpp) as an application uses it: ownership, typed and permuted
// views, every option setter, and exceptions that carry the C status and message. Results are
// judged by the double oracle; the wrapper only forwards, so one shape per call is enough.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "reference/reference_attention.h"
#include "streamattn/streamattn.hpp"

namespace streamattn {
namespace {

using reference::Array;

std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

Array ToArray(const std::vector<float>& x, std::vector<int64_t> shape) {
  Array a(std::move(shape));
  for (size_t i = 0; i < x.size(); ++i) a.data[i] = x[i];
  return a;
}

double MaxAbsDiff(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst;
}

TEST(CppWrapperTest, ContextReportsItsBackendAndThreads) {
  Context ctx(2, SATTN_BACKEND_CPU);
  const ContextInfo info = ctx.Info();
  EXPECT_EQ(info.backend, SATTN_BACKEND_CPU);
  EXPECT_GE(info.num_threads, 1);
  EXPECT_LE(info.num_threads, 2);
  EXPECT_FALSE(info.simd_target.empty());
  EXPECT_NE(info.compiled_targets.find(info.simd_target), std::string::npos);
  EXPECT_FALSE(Version().empty());

  Context moved = std::move(ctx);  // ownership moves; the source is left empty
  EXPECT_EQ(ctx.get(), nullptr);
  EXPECT_NE(moved.get(), nullptr);
}

TEST(CppWrapperTest, AttentionWithEveryOptionMatchesTheOracle) {
  const int64_t b = 2, sq = 5, sk = 37, hq = 4, hkv = 2, d = 16;
  const auto q = RandomFloats(b * sq * hq * d, 1), k = RandomFloats(b * sk * hkv * d, 2),
             v = RandomFloats(b * sk * hkv * d, 3);
  const std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f}, sinks = {0.3f, -1.f, 2.f, 0.f};
  const std::vector<int32_t> seqused = {37, 20};
  std::vector<float> out(b * sq * hq * d), lse(b * hq * sq);

  Context ctx(2);
  ctx.Attention(Tensor(q.data(), {b, sq, hq, d}), Tensor(k.data(), {b, sk, hkv, d}),
                Tensor(v.data(), {b, sk, hkv, d}), Tensor(out.data(), {b, sq, hq, d}),
                Tensor(lse.data(), {b, hq, sq}),
                AttentionOptions()
                    .set_scale(0.3f)
                    .set_causal()
                    .set_window(9, -1)
                    .set_softcap(20.0f)
                    .set_alibi_slopes(Tensor(slopes.data(), {hq}))
                    .set_sinks(Tensor(sinks.data(), {hq}))
                    .set_seqused_k(Tensor(seqused.data(), {b})));

  reference::AttentionSpec spec;
  spec.scale = 0.3;
  spec.causal = true;
  spec.window_left = 9;
  spec.softcap = 20.0;
  spec.alibi_slopes.assign(slopes.begin(), slopes.end());
  spec.sinks.assign(sinks.begin(), sinks.end());
  spec.seqused_k.assign(seqused.begin(), seqused.end());
  const auto want = reference::Attention(ToArray(q, {b, sq, hq, d}), ToArray(k, {b, sk, hkv, d}),
                                         ToArray(v, {b, sk, hkv, d}), spec);
  EXPECT_LT(MaxAbsDiff(out, want.out.data), 1e-5);
  EXPECT_LT(MaxAbsDiff(lse, want.lse.data), 1e-5);
}

TEST(CppWrapperTest, PackedBatchOptions) {
  // Two sequences end to end (3 and 5 queries, 4 and 6 keys), causal per sequence.
  const int64_t h = 2, d = 8;
  const std::vector<int32_t> cu_q = {0, 3, 8}, cu_k = {0, 4, 10};
  const auto q = RandomFloats(8 * h * d, 11), k = RandomFloats(10 * h * d, 12),
             v = RandomFloats(10 * h * d, 13);
  std::vector<float> out(8 * h * d), lse(h * 8);
  Context ctx(2);
  ctx.Attention(Tensor(q.data(), {1, 8, h, d}), Tensor(k.data(), {1, 10, h, d}),
                Tensor(v.data(), {1, 10, h, d}), Tensor(out.data(), {1, 8, h, d}),
                Tensor(lse.data(), {1, h, 8}),
                AttentionOptions()
                    .set_causal()
                    .set_cu_seqlens_q(Tensor(cu_q.data(), {3}))
                    .set_cu_seqlens_k(Tensor(cu_k.data(), {3})));
  reference::AttentionSpec spec;
  spec.causal = true;
  for (int b = 0; b < 2; ++b) {
    const int64_t sq = cu_q[b + 1] - cu_q[b], sk = cu_k[b + 1] - cu_k[b];
    const std::vector<float> qb(q.begin() + cu_q[b] * h * d, q.begin() + cu_q[b + 1] * h * d);
    const std::vector<float> kb(k.begin() + cu_k[b] * h * d, k.begin() + cu_k[b + 1] * h * d);
    const std::vector<float> vb(v.begin() + cu_k[b] * h * d, v.begin() + cu_k[b + 1] * h * d);
    const auto want = reference::Attention(ToArray(qb, {1, sq, h, d}), ToArray(kb, {1, sk, h, d}),
                                           ToArray(vb, {1, sk, h, d}), spec);
    const std::vector<float> got(out.begin() + cu_q[b] * h * d, out.begin() + cu_q[b + 1] * h * d);
    EXPECT_LT(MaxAbsDiff(got, want.out.data), 1e-5);
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < sq; ++i)
        EXPECT_NEAR(lse[hh * 8 + cu_q[b] + i], want.lse({0, hh, i}), 1e-5);
  }
}

TEST(CppWrapperTest, PermutedViewsReadHeadMajorBuffersWithoutCopies) {
  // q, k, v and out stored [batch, heads, seq, dim], as many frameworks keep them.
  const int64_t sq = 7, sk = 9, h = 3, d = 8;
  const auto q = RandomFloats(h * sq * d, 4), k = RandomFloats(h * sk * d, 5),
             v = RandomFloats(h * sk * d, 6);
  std::vector<float> out(h * sq * d);
  Context ctx(1);
  ctx.Attention(Tensor(q.data(), {1, h, sq, d}).Permute({0, 2, 1, 3}),
                Tensor(k.data(), {1, h, sk, d}).Permute({0, 2, 1, 3}),
                Tensor(v.data(), {1, h, sk, d}).Permute({0, 2, 1, 3}),
                Tensor(out.data(), {1, h, sq, d}).Permute({0, 2, 1, 3}));

  Array qa({1, sq, h, d}), ka({1, sk, h, d}), va({1, sk, h, d});
  for (int64_t i = 0; i < h; ++i)
    for (int64_t s = 0; s < sk; ++s)
      for (int64_t e = 0; e < d; ++e) {
        if (s < sq) qa({0, s, i, e}) = q[(i * sq + s) * d + e];
        ka({0, s, i, e}) = k[(i * sk + s) * d + e];
        va({0, s, i, e}) = v[(i * sk + s) * d + e];
      }
  const auto want = reference::Attention(qa, ka, va, {});
  double worst = 0.0;
  for (int64_t i = 0; i < h; ++i)
    for (int64_t s = 0; s < sq; ++s)
      for (int64_t e = 0; e < d; ++e)
        worst = std::max(worst, std::fabs(out[(i * sq + s) * d + e] - want.out({0, s, i, e})));
  EXPECT_LT(worst, 1e-5);
}

TEST(CppWrapperTest, MaskAndPagedCacheOptionsReachTheCall) {
  // Two pages of 4 keys stored in reverse order; the mask hides key 2.
  const int64_t sk = 8, page = 4, d = 4;
  const auto q = RandomFloats(d, 7), k = RandomFloats(sk * d, 8), v = RandomFloats(sk * d, 9);
  std::vector<float> k_pages(sk * d), v_pages(sk * d), mask(sk, 0.0f), out(d);
  for (int64_t j = 0; j < sk; ++j)
    for (int64_t e = 0; e < d; ++e) {
      const int64_t stored = ((1 - j / page) * page + j % page) * d + e;
      k_pages[stored] = k[j * d + e];
      v_pages[stored] = v[j * d + e];
    }
  mask[2] = -INFINITY;
  const std::vector<int32_t> table = {1, 0};
  Context ctx(1);
  ctx.Attention(Tensor(q.data(), {1, 1, 1, d}), Tensor(k_pages.data(), {2, page, 1, d}),
                Tensor(v_pages.data(), {2, page, 1, d}), Tensor(out.data(), {1, 1, 1, d}),
                AttentionOptions()
                    .set_block_table(Tensor(table.data(), {1, 2}))
                    .set_mask(Tensor(mask.data(), {1, 1, 1, sk})));

  reference::AttentionSpec spec;
  spec.mask = [](int64_t, int64_t, int64_t, int64_t j) { return j == 2 ? -INFINITY : 0.0; };
  const auto want = reference::Attention(ToArray(q, {1, 1, 1, d}), ToArray(k, {1, sk, 1, d}),
                                         ToArray(v, {1, sk, 1, d}), spec);
  EXPECT_LT(MaxAbsDiff(out, want.out.data), 1e-5);
}

TEST(CppWrapperTest, HalfPrecisionViewsAreTyped) {
  // 1.0 and 2.0 in binary16 and bfloat16; the softmax of [1, 2] is [0.269, 0.731].
  const Float16 h[2] = {{0x3C00}, {0x4000}};
  const BFloat16 bf[2] = {{0x3F80}, {0x4000}};
  float p16[2], pbf[2];
  Context ctx(1);
  ctx.Softmax(Tensor(h, {2}), Tensor(p16, {2}));
  ctx.Softmax(Tensor(bf, {2}), Tensor(pbf, {2}));
  const double want = 1.0 / (1.0 + std::exp(1.0));
  EXPECT_NEAR(p16[0], want, 1e-6);
  EXPECT_NEAR(pbf[0], want, 1e-6);
  EXPECT_EQ(Tensor(h, {2}).dtype(), SATTN_DTYPE_F16);
  EXPECT_EQ(Tensor(bf, {2}).dtype(), SATTN_DTYPE_BF16);
}

TEST(CppWrapperTest, SoftmaxLogSoftmaxAndTopK) {
  const int64_t rows = 3, n = 50;
  const auto x = RandomFloats(rows * n, 10, -4.0f, 4.0f);
  std::vector<float> p(rows * n), logp(rows * n), probs(rows * 5), lse(rows);
  std::vector<int32_t> idx(rows * 5);
  Context ctx(2);
  ctx.Softmax(Tensor(x.data(), {rows, n}), Tensor(p.data(), {rows, n}), 0.5f);
  ctx.LogSoftmax(Tensor(x.data(), {rows, n}), Tensor(logp.data(), {rows, n}), 0.5f);
  ctx.SoftmaxTopK(Tensor(x.data(), {rows, n}), 5, Tensor(idx.data(), {rows, 5}),
                  Tensor(probs.data(), {rows, 5}), Tensor(lse.data(), {rows}), 0.5f);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> scores(x.begin() + r * n, x.begin() + (r + 1) * n);
    for (double& s : scores) s /= 0.5;
    const auto want = reference::Softmax(scores);
    const double want_lse = reference::LogSumExp(scores);
    EXPECT_NEAR(lse[r], want_lse, 1e-5);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_NEAR(p[r * n + j], want[j], 1e-6);
      EXPECT_NEAR(logp[r * n + j], scores[j] - want_lse, 1e-5);
    }
    for (int64_t t = 0; t < 5; ++t) {
      EXPECT_NEAR(probs[r * 5 + t], want[idx[r * 5 + t]], 1e-6);
      if (t > 0) {
        EXPECT_GE(probs[r * 5 + t - 1], probs[r * 5 + t]);
      }
    }
  }
}

TEST(CppWrapperTest, MergeStatesOfTwoHalvesIsAttentionOverAll) {
  const int64_t sq = 3, sk = 40, h = 2, d = 8, half = sk / 2;
  const auto q = RandomFloats(sq * h * d, 11), k = RandomFloats(sk * h * d, 12),
             v = RandomFloats(sk * h * d, 13);
  std::vector<float> o[2], lse[2], out(sq * h * d), lse_out(h * sq), whole(sq * h * d);
  Context ctx(2);
  for (int p = 0; p < 2; ++p) {
    o[p].resize(sq * h * d);
    lse[p].resize(h * sq);
    ctx.Attention(Tensor(q.data(), {1, sq, h, d}),
                  Tensor(k.data() + p * half * h * d, {1, half, h, d}),
                  Tensor(v.data() + p * half * h * d, {1, half, h, d}),
                  Tensor(o[p].data(), {1, sq, h, d}), Tensor(lse[p].data(), {1, h, sq}));
  }
  ctx.MergeStates({Tensor(o[0].data(), {1, sq, h, d}), Tensor(o[1].data(), {1, sq, h, d})},
                  {Tensor(lse[0].data(), {1, h, sq}), Tensor(lse[1].data(), {1, h, sq})},
                  Tensor(out.data(), {1, sq, h, d}), Tensor(lse_out.data(), {1, h, sq}));
  ctx.Attention(Tensor(q.data(), {1, sq, h, d}), Tensor(k.data(), {1, sk, h, d}),
                Tensor(v.data(), {1, sk, h, d}), Tensor(whole.data(), {1, sq, h, d}));
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], whole[i], 1e-5);
}

TEST(CppWrapperTest, Exp2) {
  const float x[4] = {0.0f, 1.0f, -1.0f, 10.0f};
  float y[4];
  Context ctx(1);
  ctx.Exp2(x, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[2], 0.5f);
  EXPECT_EQ(y[3], 1024.0f);
}

TEST(CppWrapperTest, FailuresThrowTheStatusAndTheLibrarysMessage) {
  std::vector<float> q(1 * 1 * 1 * 8), k(1 * 4 * 1 * 6), out(8, 42.0f);
  Context ctx(1);
  try {
    ctx.Attention(Tensor(q.data(), {1, 1, 1, 8}), Tensor(k.data(), {1, 4, 1, 6}),
                  Tensor(k.data(), {1, 4, 1, 6}), Tensor(out.data(), {1, 1, 1, 8}));
    FAIL() << "a head_dim mismatch must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), SATTN_ERR_INVALID_ARGUMENT);
    EXPECT_NE(e.message().find("k.shape[3]=6"), std::string::npos) << e.message();
    EXPECT_EQ(std::string(e.what()).rfind("invalid argument: ", 0), 0u) << e.what();
  }
  EXPECT_EQ(out[0], 42.0f);  // nothing was written

  EXPECT_THROW(Tensor(q.data(), {1, 1, 1, 1, 8}), Error);         // rank 5
  EXPECT_THROW(Tensor(q.data(), {8}, {1, 1}), Error);             // strides for another rank
  EXPECT_THROW(Tensor(q.data(), {1, 8}).Permute({0, 0}), Error);  // not a permutation
  EXPECT_THROW(Context(-5), Error);                               // a bad thread count
}

}  // namespace
}  // namespace streamattn
