// `streamattn bench softmax` and `streamattn bench topk`: the online softmax (sattn_softmax) and
// the fused softmax + top-k (sattn_softmax_topk) on LLM vocabularies (32000, 128256, 262144
// logits per row; 1 row and 64), f32, against baselines in the same run on the same threads
// (softmax_baselines.h): the three-pass safe softmax with the same exp2, and softmax followed by
// std::partial_sort. Throughput is counted in the bytes each call must move (softmax: two reads
// and one write per score; top-k: one read) and stated as a fraction of the read bandwidth
// measured in the same run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "machine_limits.h"
#include "softmax_baselines.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

struct Shape {
  int64_t rows, n;
};

// with_large: softmax also runs 64 rows of 2^22 (1 GiB in, 1 GiB out), beyond any last-level
// cache. The 64 x 262144 (64 MiB) was meant to be, but this machine's LLC is 300 MiB,
// so there the online form's saved read is a cache hit and the ratio stays near 1.
std::vector<Shape> Shapes(const BenchOptions& options, bool with_large) {
  if (options.quick) return {{1, 32000}, {4, 32000}};
  std::vector<Shape> shapes;
  for (int64_t rows : {1, 64}) {
    for (int64_t n : {32000, 128256, 262144}) shapes.push_back({rows, n});
  }
  if (with_large) shapes.push_back({64, int64_t{1} << 22});
  return shapes;
}

// Logits as a language model's last layer gives them: a spread of about +-10.
std::vector<float> RandomLogits(int64_t count, uint64_t seed) {
  std::vector<float> x(count);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  for (float& v : x) v = dist(rng);
  return x;
}

sattn_tensor View(void* data, sattn_dtype dtype, int64_t rows, int64_t cols) {
  const int64_t shape[2] = {rows, cols};
  return sattn_tensor_contiguous(data, dtype, 2, shape);
}

// Median times of `ours` and `baseline`, timed in alternation (ours, baseline, ours, ...) so that
// a change of load on a shared machine falls on both. Each timed run repeats a call until it
// lasts min_ms, as MedianMs does.
template <typename A, typename B>
std::pair<double, double> MedianPairMs(int repeats, A&& ours, B&& baseline, double min_ms = 20.0) {
  auto calibrate = [min_ms](auto& fn) {
    fn();
    int inner = 1;
    for (;;) {
      const double start = NowMs();
      for (int i = 0; i < inner; ++i) fn();
      const double elapsed = NowMs() - start;
      if (elapsed >= min_ms || inner >= (1 << 20)) return inner;
      inner *= elapsed > 0.0 ? std::max(2, static_cast<int>(min_ms / elapsed) + 1) : 16;
    }
  };
  const int inner_a = calibrate(ours), inner_b = calibrate(baseline);
  std::vector<double> a, b;
  for (int r = 0; r < repeats; ++r) {
    double start = NowMs();
    for (int i = 0; i < inner_a; ++i) ours();
    a.push_back((NowMs() - start) / inner_a);
    start = NowMs();
    for (int i = 0; i < inner_b; ++i) baseline();
    b.push_back((NowMs() - start) / inner_b);
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return {a[a.size() / 2], b[b.size() / 2]};
}

double MeasuredReadBandwidth(const BenchOptions& options, int threads) {
  return MeasureReadBandwidthGbps(threads, options.quick ? size_t{1} << 28 : size_t{1} << 30);
}

// Exits when two results that must agree do not: a benchmark of a wrong answer is noise. A
// sanity check, not the accuracy test (tests/ has those): the three-pass baseline sums each row
// in f32 lanes, ~1e-4 off for rows of millions.
void CheckClose(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  if (!(worst <= 1e-3 * scale)) {
    std::fprintf(stderr, "streamattn: %s: results differ from the baseline (%g of %g)\n", what,
                 worst, scale);
    std::exit(1);
  }
}

}  // namespace

std::vector<Row> BenchSoftmax(const BenchOptions& options) {
  ContextPtr ctx = MakeContext(options.threads);
  const int threads = ContextThreads(ctx.get());
  BaselinePool pool(threads);
  const double bandwidth = MeasuredReadBandwidth(options, threads);
  std::vector<Row> rows;
  for (const Shape& shape : Shapes(options, true)) {
    const int64_t count = shape.rows * shape.n;
    const std::vector<float> in = RandomLogits(count, 1);
    std::vector<float> out(count), baseline_out(count);
    const sattn_tensor in_view =
        View(const_cast<float*>(in.data()), SATTN_DTYPE_F32, shape.rows, shape.n);
    const sattn_tensor out_view = View(out.data(), SATTN_DTYPE_F32, shape.rows, shape.n);
    auto ours = [&] {
      CheckOk(sattn_softmax(ctx.get(), &in_view, &out_view, nullptr), "sattn_softmax");
    };
    auto baseline = [&] {
      ThreePassSoftmax(pool, in.data(), baseline_out.data(), shape.rows, shape.n);
    };
    const auto [ours_ms, baseline_ms] = MedianPairMs(options.repeats, ours, baseline);
    CheckClose(out, baseline_out, "softmax");
    const double bytes = 12.0 * static_cast<double>(count);  // read, read, write
    const double gbps = bytes / (ours_ms * 1e6);
    Row row;
    row.Set("op", "softmax")
        .Set("rows", shape.rows)
        .Set("n", shape.n)
        .Set("dtype", "f32")
        .Set("threads", threads)
        .Set("simd_target", PeakSimdTarget())
        .Set("median_ms", ours_ms)
        .Set("gbps", gbps)
        .Set("bandwidth_fraction", gbps / bandwidth)
        .Set("read_bandwidth_gbps", bandwidth)
        .Set("bytes_moved", static_cast<int64_t>(bytes))
        .Set("baseline", "three-pass safe softmax (max, sum, write), same exp2")
        .Set("baseline_median_ms", baseline_ms)
        .Set("ratio", baseline_ms / ours_ms);
    rows.push_back(row);
  }
  return rows;
}

std::vector<Row> BenchTopK(const BenchOptions& options) {
  constexpr int32_t kTopK = 50;
  ContextPtr ctx = MakeContext(options.threads);
  const int threads = ContextThreads(ctx.get());
  BaselinePool pool(threads);
  const double bandwidth = MeasuredReadBandwidth(options, threads);
  std::vector<Row> rows;
  for (const Shape& shape : Shapes(options, false)) {
    const int64_t count = shape.rows * shape.n;
    const std::vector<float> in = RandomLogits(count, 2);
    std::vector<int32_t> indices(shape.rows * kTopK), baseline_indices(shape.rows * kTopK);
    std::vector<float> probs(shape.rows * kTopK), baseline_probs(shape.rows * kTopK);
    std::vector<float> full(count);
    std::vector<int32_t> order(count);
    const sattn_tensor in_view =
        View(const_cast<float*>(in.data()), SATTN_DTYPE_F32, shape.rows, shape.n);
    const sattn_tensor indices_view = View(indices.data(), SATTN_DTYPE_I32, shape.rows, kTopK);
    const sattn_tensor probs_view = View(probs.data(), SATTN_DTYPE_F32, shape.rows, kTopK);
    const sattn_tensor full_view = View(full.data(), SATTN_DTYPE_F32, shape.rows, shape.n);
    auto ours = [&] {
      CheckOk(sattn_softmax_topk(ctx.get(), &in_view, kTopK, &indices_view, &probs_view, nullptr,
                                 nullptr),
              "sattn_softmax_topk");
    };
    auto baseline = [&] {
      CheckOk(sattn_softmax(ctx.get(), &in_view, &full_view, nullptr), "sattn_softmax");
      PartialSortTopK(pool, full.data(), order.data(), shape.rows, shape.n, kTopK,
                      baseline_indices.data(), baseline_probs.data());
    };
    const auto [ours_ms, baseline_ms] = MedianPairMs(options.repeats, ours, baseline);
    CheckClose(probs, baseline_probs, "topk");
    const double bytes = 4.0 * static_cast<double>(count);  // one read
    const double gbps = bytes / (ours_ms * 1e6);
    Row row;
    row.Set("op", "softmax_topk")
        .Set("rows", shape.rows)
        .Set("n", shape.n)
        .Set("k", kTopK)
        .Set("dtype", "f32")
        .Set("threads", threads)
        .Set("simd_target", PeakSimdTarget())
        .Set("median_ms", ours_ms)
        .Set("gbps", gbps)
        .Set("bandwidth_fraction", gbps / bandwidth)
        .Set("read_bandwidth_gbps", bandwidth)
        .Set("bytes_moved", static_cast<int64_t>(bytes))
        .Set("baseline", "sattn_softmax + std::partial_sort")
        .Set("baseline_median_ms", baseline_ms)
        .Set("ratio", baseline_ms / ours_ms)
        // The baseline ranks by probability, we by score: equal only while no two
        // probabilities of the top k round to the same float.
        .Set("same_indices_as_baseline", indices == baseline_indices);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
