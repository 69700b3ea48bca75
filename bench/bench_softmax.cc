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
// cache. 64 x 262144 (64 MiB) is not: on a machine with a 300 MiB LLC the online form's saved
// read is a cache hit there and the ratio stays near 1.
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

// What both subcommands measure against: one context, the baselines on as many threads, and
// the read bandwidth measured in the same run.
struct Setting {
  explicit Setting(const BenchOptions& options)
      : ctx(MakeContext(options.threads)),
        threads(ContextThreads(ctx.get())),
        pool(threads),
        bandwidth(
            MeasureReadBandwidthGbps(threads, options.quick ? size_t{1} << 28 : size_t{1} << 30)) {}

  // `lead` (the op and its shape), then the time, the throughput of the `bytes` a call must
  // move, and the baseline's time.
  Row Report(Row lead, double bytes, double ours_ms, const char* baseline,
             double baseline_ms) const {
    const double gbps = bytes / (ours_ms * 1e6);
    return lead.Set("dtype", "f32")
        .Set("threads", threads)
        .Set("simd_target", PeakSimdTarget())
        .Set("median_ms", ours_ms)
        .Set("gbps", gbps)
        .Set("bandwidth_fraction", gbps / bandwidth)
        .Set("read_bandwidth_gbps", bandwidth)
        .Set("bytes_moved", static_cast<int64_t>(bytes))
        .Set("baseline", baseline)
        .Set("baseline_median_ms", baseline_ms)
        .Set("ratio", baseline_ms / ours_ms);
  }

  ContextPtr ctx;
  int threads;
  BaselinePool pool;
  double bandwidth;
};

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
  Setting setting(options);
  std::vector<Row> rows;
  for (const Shape& shape : Shapes(options, true)) {
    const int64_t count = shape.rows * shape.n;
    const std::vector<float> in = RandomLogits(count, 1);
    std::vector<float> out(count), baseline_out(count);
    const sattn_tensor in_view =
        View(const_cast<float*>(in.data()), SATTN_DTYPE_F32, shape.rows, shape.n);
    const sattn_tensor out_view = View(out.data(), SATTN_DTYPE_F32, shape.rows, shape.n);
    auto ours = [&] {
      CheckOk(sattn_softmax(setting.ctx.get(), &in_view, &out_view, nullptr), "sattn_softmax");
    };
    auto baseline = [&] {
      ThreePassSoftmax(setting.pool, in.data(), baseline_out.data(), shape.rows, shape.n);
    };
    const auto [ours_ms, baseline_ms] = MedianPairMs(options.repeats, ours, baseline);
    CheckClose(out, baseline_out, "softmax");
    Row lead;
    lead.Set("op", "softmax").Set("rows", shape.rows).Set("n", shape.n);
    rows.push_back(setting.Report(lead, 12.0 * static_cast<double>(count),  // read, read, write
                                  ours_ms, "three-pass safe softmax (max, sum, write), same exp2",
                                  baseline_ms));
  }
  return rows;
}

std::vector<Row> BenchTopK(const BenchOptions& options) {
  constexpr int32_t kTopK = 50;
  Setting setting(options);
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
      CheckOk(sattn_softmax_topk(setting.ctx.get(), &in_view, kTopK, &indices_view, &probs_view,
                                 nullptr, nullptr),
              "sattn_softmax_topk");
    };
    auto baseline = [&] {
      CheckOk(sattn_softmax(setting.ctx.get(), &in_view, &full_view, nullptr), "sattn_softmax");
      PartialSortTopK(setting.pool, full.data(), order.data(), shape.rows, shape.n, kTopK,
                      baseline_indices.data(), baseline_probs.data());
    };
    const auto [ours_ms, baseline_ms] = MedianPairMs(options.repeats, ours, baseline);
    CheckClose(probs, baseline_probs, "topk");
    Row lead;
    lead.Set("op", "softmax_topk").Set("rows", shape.rows).Set("n", shape.n).Set("k", kTopK);
    rows.push_back(setting
                       .Report(lead, 4.0 * static_cast<double>(count),  // one read
                               ours_ms, "sattn_softmax + std::partial_sort", baseline_ms)
                       // The baseline ranks by probability, we by score: equal only while no
                       // two probabilities of the top k round to the same float.
                       .Set("same_indices_as_baseline", indices == baseline_indices));
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
