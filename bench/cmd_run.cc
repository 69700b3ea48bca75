// `streamattn run`: the default workload, checked against the double-precision oracle and
// timed. It exercises what the library offers: exp2 over a large array, and the merge of
// split-KV partial results (o, lse) into attention over all keys.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "bench_common.h"
#include "reference/reference_attention.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

using reference::Array;

// Max error in ulp of float results against exact exp2 (infinity counted as 2^128).
double MaxUlpError(const std::vector<float>& x, const std::vector<float>& y) {
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp2(static_cast<double>(x[i]));
    const double got = std::isinf(y[i]) ? std::ldexp(1.0, 128) : y[i];
    int e;
    std::frexp(exact, &e);
    const double ulp =
        exact < std::ldexp(1.0, -126) ? std::ldexp(1.0, -149) : std::ldexp(1.0, e - 24);
    worst = std::max(worst, std::fabs(got - exact) / ulp);
  }
  return worst;
}

bool RunExp2Workload(sattn_context* ctx, bool quick) {
  const int64_t n = quick ? (1 << 16) : (1 << 24);
  std::vector<float> x(n), y(n);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-150.0f, 128.0f);
  for (float& v : x) v = dist(rng);
  const double ms = MedianMs(
      quick ? 3 : 7, [&] { CheckOk(sattn_exp2(ctx, x.data(), y.data(), n), "sattn_exp2"); });
  const double ulp = MaxUlpError(x, y);
  std::printf("exp2: %lld floats in [-150, 128]: %.3f ms median, %.2f G/s; max error %.3f ulp %s\n",
              static_cast<long long>(n), ms, n / (ms * 1e6), ulp,
              ulp <= 2.0 ? "(ok)" : "(FAIL > 2)");
  return ulp <= 2.0;
}

// Split-KV: attention over seq_k keys computed as `parts` pieces by the oracle, merged by
// streamattn, compared with the oracle over all keys.
bool RunMergeWorkload(sattn_context* ctx, bool quick) {
  const int64_t batch = 1, seq_q = quick ? 4 : 16, heads = 8, dim = 128;
  const int64_t seq_k = quick ? 256 : 2048, parts = 8, piece = seq_k / parts;
  std::mt19937_64 rng(4);
  std::normal_distribution<double> normal(0.0, 1.0);
  Array q({batch, seq_q, heads, dim}), k({batch, seq_k, heads, dim}), v({batch, seq_k, heads, dim});
  for (Array* a : {&q, &k, &v})
    for (double& x : a->data) x = normal(rng);

  std::vector<std::vector<float>> o_data(parts), lse_data(parts);
  std::vector<sattn_tensor> o_views(parts), lse_views(parts);
  const int64_t o_shape[4] = {batch, seq_q, heads, dim}, lse_shape[3] = {batch, heads, seq_q};
  for (int64_t p = 0; p < parts; ++p) {
    Array kp({batch, piece, heads, dim}), vp({batch, piece, heads, dim});
    const int64_t stride = piece * heads * dim;
    std::copy(k.data.begin() + p * stride, k.data.begin() + (p + 1) * stride, kp.data.begin());
    std::copy(v.data.begin() + p * stride, v.data.begin() + (p + 1) * stride, vp.data.begin());
    const auto r = reference::Attention(q, kp, vp, {});
    o_data[p].assign(r.out.data.begin(), r.out.data.end());
    lse_data[p].assign(r.lse.data.begin(), r.lse.data.end());
    o_views[p] = sattn_tensor_contiguous(o_data[p].data(), SATTN_DTYPE_F32, 4, o_shape);
    lse_views[p] = sattn_tensor_contiguous(lse_data[p].data(), SATTN_DTYPE_F32, 3, lse_shape);
  }
  std::vector<float> out(batch * seq_q * heads * dim), lse(batch * heads * seq_q);
  const sattn_tensor out_view = sattn_tensor_contiguous(out.data(), SATTN_DTYPE_F32, 4, o_shape);
  const sattn_tensor lse_view = sattn_tensor_contiguous(lse.data(), SATTN_DTYPE_F32, 3, lse_shape);
  const double ms = MedianMs(quick ? 3 : 7, [&] {
    CheckOk(sattn_merge_states(ctx, static_cast<int32_t>(parts), o_views.data(), lse_views.data(),
                               &out_view, &lse_view),
            "sattn_merge_states");
  });
  const auto want = reference::Attention(q, k, v, {});
  double err = 0.0, scale = 0.0, lse_err = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    err = std::max(err, std::fabs(out[i] - want.out.data[i]));
    scale = std::max(scale, std::fabs(want.out.data[i]));
  }
  for (size_t i = 0; i < lse.size(); ++i)
    lse_err = std::max(lse_err, std::fabs(lse[i] - want.lse.data[i]));
  const double rel = err / scale;
  const bool ok = rel <= 1e-5 && lse_err <= 1e-5;
  std::printf(
      "merge: %lld split-KV parts of %lld keys (batch %lld, seq_q %lld, heads %lld, head_dim "
      "%lld): "
      "%.4f ms median; vs attention over all %lld keys: max rel error %.2e, lse error %.2e %s\n",
      static_cast<long long>(parts), static_cast<long long>(piece), static_cast<long long>(batch),
      static_cast<long long>(seq_q), static_cast<long long>(heads), static_cast<long long>(dim), ms,
      static_cast<long long>(seq_k), rel, lse_err, ok ? "(ok)" : "(FAIL)");
  return ok;
}

}  // namespace

int RunDefaultWorkload(int threads, bool quick) {
  ContextPtr ctx = MakeContext(threads);
  std::printf("streamattn %s, %d threads\n", sattn_version(), ContextThreads(ctx.get()));
  bool ok = RunExp2Workload(ctx.get(), quick);
  ok = RunMergeWorkload(ctx.get(), quick) && ok;
  std::printf(ok ? "all results match the oracle\n" : "SOME RESULTS DO NOT MATCH THE ORACLE\n");
  return ok ? 0 : 1;
}

}  // namespace bench
}  // namespace streamattn
