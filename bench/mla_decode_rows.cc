// `streamattn bench decode`'s MLA rows: one decoding step of multi-head latent attention after
// weight absorption (DeepSeek-V2/V3/R1, Kimi K2): heads_q query heads (128, or 16 of them on one
// device of eight under tensor parallelism) of 576 channels (512 latent + 64 rotary) against
// one latent kv head, V the first 512 channels of the same cache rows (a view of K: the cache
// is one buffer, read once). bf16 q, cache and out.
//
// Unlike the other decode rows this is a GEMM, not a stream: each cache row meets all heads_q
// query rows, in the scores (576 channels) and in P.V (512), so a step costs
// 2 * heads_q * (576 + 512) flops per key, 242 flops per byte of bf16 cache at 128 heads and 30
// at 16: bound by the arithmetic, not by memory, on any CPU. The rows report GFLOP/s as a
// fraction of the FMA peak measured in the same run (peak_fraction, and alternated with the
// step, peak_fraction_alternated) and, where the native bf16 tiles run, of the bf16 dot-product
// peak (bf16_peak_fraction). The cache is not rotated through copies: at these flops per byte
// the copy's residence in the LLC changes little (it is still read once a step).
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "host_buffer.h"
#include "machine_limits.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

constexpr int64_t kDim = 576, kDimV = 512;

struct MlaShape {
  int64_t batch, heads_q, cache;
  std::string Name() const {
    char buffer[96];
    std::snprintf(buffer, sizeof(buffer),
                  "mla b%" PRId64 " h%" PRId64 "/1 d576/512 c%" PRId64 " bf16", batch, heads_q,
                  cache);
    return buffer;
  }
  double Flops() const {
    return 2.0 * static_cast<double>(batch * heads_q * cache) * static_cast<double>(kDim + kDimV);
  }
};

std::vector<MlaShape> Shapes(bool quick) {
  if (quick) return {{1, 16, 1024}};
  std::vector<MlaShape> shapes;
  for (int64_t cache : {4096, 32768})
    for (int64_t batch : {1, 8})
      for (int64_t heads : {128, 16}) shapes.push_back({batch, heads, cache});
  return shapes;
}

}  // namespace

std::vector<Row> MlaDecodeRows(sattn_context* ctx, int threads, const BenchOptions& options,
                               std::vector<double>* gflops_out) {
  std::vector<Row> rows;
  const std::string kernel = ContextInfo(ctx).bf16_kernel;
  for (const MlaShape& s : Shapes(options.quick)) {
    if (!Selected(options, s.Name())) continue;
    FastRandom random(9);
    HostBuffer q(SATTN_DTYPE_BF16, {s.batch, 1, s.heads_q, kDim});
    HostBuffer out(SATTN_DTYPE_BF16, {s.batch, 1, s.heads_q, kDimV});
    HostBuffer cache(SATTN_DTYPE_BF16, {s.batch, s.cache, 1, kDim});
    for (int64_t i = 0; i < s.batch * s.heads_q * kDim; ++i) q.Set(i, random.Uniform(-1, 1));
    for (int64_t i = 0; i < s.batch * s.cache * kDim; ++i) cache.Set(i, random.Uniform(-1, 1));
    const sattn_tensor q_view = q.View(), out_view = out.View(), k_view = cache.View();
    sattn_tensor v_view = k_view;  // V: the leading 512 channels of the same rows
    v_view.shape[3] = kDimV;
    sattn_attention_options o{};
    o.struct_size = sizeof(o);
    o.causal = 1;
    auto call = [&] {
      CheckOk(sattn_attention(ctx, &q_view, &k_view, &v_view, &out_view, nullptr, &o),
              "sattn_attention");
    };
    const double ms = MedianMs(options.repeats, call);
    // The step against the FMA peak of the same minute, timed alternately (the machine is
    // shared: a peak measured minutes apart flatters or wrongs a row).
    const int calls = CallsPerTiming(call, 20.0);
    std::vector<double> fractions;
    for (int pair = 0; pair < options.repeats; ++pair) {
      const double peak = FmaGflopsOnce(threads);
      fractions.push_back(s.Flops() / (TimeCallsMs(calls, call) * 1e6) / peak);
    }
    const double gflops = s.Flops() / (ms * 1e6);
    Row row;
    row.Set("op", "decode_mla")
        .Set("name", s.Name())
        .Set("batch", s.batch)
        .Set("heads_q", s.heads_q)
        .Set("heads_kv", 1)
        .Set("head_dim", kDim)
        .Set("head_dim_v", kDimV)
        .Set("seq_q", 1)
        .Set("seq_k", s.cache)
        .Set("causal", true)
        .Set("q_dtype", "bf16")
        .Set("kv_dtype", "bf16")
        .Set("v_inside_k", true)
        .Set("kernel", kernel)
        .Set("threads", threads)
        .Set("median_ms", ms)
        .Set("gflops", gflops)
        .Set("peak_fraction_alternated", Median(fractions));
    std::fprintf(stderr, "decode %s: %.1f GFLOP/s, %.3f of the FMA peak timed alternately (%s)\n",
                 s.Name().c_str(), gflops, Median(fractions), kernel.c_str());
    rows.push_back(row);
    gflops_out->push_back(gflops);
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
