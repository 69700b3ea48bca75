// `streamattn bench decode`'s MLA rows: multi-head latent attention after weight absorption
// (DeepSeek-V2/V3/R1, Kimi K2): heads_q query heads (128, or 16 of them on one device of eight
// under tensor parallelism) of 576 channels (512 latent + 64 rotary) against one latent kv
// head, V the first 512 channels of the same cache rows (a view of K: the cache is one buffer,
// read once). bf16 q, cache and out. Two kinds of row: one decoding step (seq_q 1, op
// decode_mla) and a chunk of new rows of a chunked prefill against the same caches (seq_q
// kChunk, causal bottom-right, op chunked_prefill_mla, "q128" in the name).
//
// Unlike the other decode rows this is a GEMM, not a stream: each cache row meets all heads_q
// query rows, in the scores (576 channels) and in P.V (512), so a step costs
// 2 * heads_q * (576 + 512) flops per key, 242 flops per byte of bf16 cache at 128 heads and 30
// at 16 (a chunk of n rows: n times as many): bound by the arithmetic, not by memory, on any
// CPU. The rows report GFLOP/s as a fraction of the FMA peak measured in the same run
// (peak_fraction, and alternated with the call, peak_fraction_alternated) and of the bf16
// dot-product peak, the native bf16 tiles' ceiling (bf16_peak_fraction, and alternated,
// bf16_peak_fraction_alternated). The cache is not rotated through copies: at these flops per
// byte the copy's residence in the LLC changes little (it is still read once a step).
#include <algorithm>
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

// The chunk of new rows a chunked-prefill row sends per sequence. Absorbed MLA pays
// 2 * (576 + 512) flops per head and query-key pair, the decompressed form (K 192 and V 128
// channels a head) 2 * (192 + 128), plus the decompression of each cache row (2 * 512 * 256 a
// head); absorbing also costs 2 * 2 * 128 * 512 a head per query row (q in, out back). Per
// head: absorbed n c 2176 + n 262144 against n c 640 + c 262144, even at n = 262144 c /
// (1536 c + 262144): 164 rows at c 4096, 170 at c 32768. Serving runtimes (vLLM's and SGLang's
// MLA backends) therefore run chunks of a sequence's prompt longer than that decompressed and
// shorter ones (speculative verification, small chunks of many sequences within a step's token
// budget: 8 x 128 = 1024 of a 2048-token budget) absorbed, here: 128 is the longest power-of-two
// chunk that still runs in this form.
constexpr int64_t kChunk = 128;

struct MlaShape {
  int64_t batch, heads_q, cache;
  int64_t new_rows = 1;  // 1: a decoding step; kChunk: a chunk of a chunked prefill
  std::string Name() const {
    char chunk[32] = "";
    if (new_rows > 1) std::snprintf(chunk, sizeof(chunk), "q%" PRId64 " ", new_rows);
    char buffer[96];
    std::snprintf(buffer, sizeof(buffer),
                  "mla b%" PRId64 " h%" PRId64 "/1 d576/512 %sc%" PRId64 " bf16", batch, heads_q,
                  chunk, cache);
    return buffer;
  }
  // The query-key pairs of a sequence that the bottom-right causal mask leaves: new row i of n
  // sees cache - n + i + 1 keys (a decoding step: all of them).
  double Pairs() const {
    const double n = static_cast<double>(new_rows);
    return n * static_cast<double>(cache - new_rows) + n * (n + 1) / 2.0;
  }
  double Flops() const {
    return 2.0 * static_cast<double>(batch * heads_q) * Pairs() * static_cast<double>(kDim + kDimV);
  }
  // Calls of seconds (b8 h128/1 q128 c32768: 9.3e12 flops, about 45 s at 200 GFLOP/s): timed
  // fewer times, each timing beside its own FMA peak (see MlaRows).
  bool Long() const { return Flops() > 2e11; }
};

std::vector<MlaShape> Shapes(bool quick) {
  if (quick) return {{1, 16, 1024}, {1, 16, 1024, kChunk}};
  std::vector<MlaShape> shapes;
  for (int64_t new_rows : {int64_t{1}, kChunk})
    for (int64_t cache : {4096, 32768})
      for (int64_t batch : {1, 8})
        for (int64_t heads : {128, 16}) shapes.push_back({batch, heads, cache, new_rows});
  return shapes;
}

// The FMA and bf16 dot-product peaks of one minute (bf16 0: no such instruction), measured
// beside each timing: on a shared machine a peak measured minutes apart flatters or wrongs a
// row (the FMA peak alone was seen to swing 2x within a run).
struct Peaks {
  double fma, bf16;
};
Peaks PeaksOnce(int threads) { return {FmaGflopsOnce(threads), Bf16DotGflopsOnce(threads)}; }

// A row's GFLOP/s of each timing over the peaks measured just before it.
struct AlternatedFractions {
  std::vector<double> fma, bf16;
  void Add(double gflops, const Peaks& peaks) {
    fma.push_back(gflops / peaks.fma);
    if (peaks.bf16 > 0) bf16.push_back(gflops / peaks.bf16);
  }
};

}  // namespace

std::vector<Row> MlaRows(sattn_context* ctx, int threads, const BenchOptions& options,
                         std::vector<double>* gflops_out) {
  std::vector<Row> rows;
  const std::string kernel = ContextInfo(ctx).bf16_kernel;
  for (const MlaShape& s : Shapes(options.quick)) {
    if (!Selected(options, s.Name())) continue;
    FastRandom random(9);
    const int64_t n = s.new_rows;
    HostBuffer q(SATTN_DTYPE_BF16, {s.batch, n, s.heads_q, kDim});
    HostBuffer out(SATTN_DTYPE_BF16, {s.batch, n, s.heads_q, kDimV});
    HostBuffer cache(SATTN_DTYPE_BF16, {s.batch, s.cache, 1, kDim});
    for (int64_t i = 0; i < s.batch * n * s.heads_q * kDim; ++i) q.Set(i, random.Uniform(-1, 1));
    for (int64_t i = 0; i < s.batch * s.cache * kDim; ++i) cache.Set(i, random.Uniform(-1, 1));
    const sattn_tensor q_view = q.View(), out_view = out.View(), k_view = cache.View();
    sattn_tensor v_view = k_view;  // V: the leading 512 channels of the same rows
    v_view.shape[3] = kDimV;
    sattn_attention_options o{};
    o.struct_size = sizeof(o);
    o.causal = 1;  // bottom-right: the chunk's rows are the cache's last n
    auto call = [&] {
      CheckOk(sattn_attention(ctx, &q_view, &k_view, &v_view, &out_view, nullptr, &o),
              "sattn_attention");
    };
    std::vector<double> times;
    AlternatedFractions fractions;
    if (s.Long()) {
      // At most 3 timings, each after the peaks of its own minute: the row's median and its
      // alternated fraction come from the same calls (timed twice over, the largest row alone
      // would take 10 minutes). No warm-up call: the first call's setup (the pool's threads,
      // the scratch) is milliseconds of a call of seconds, and the median drops it anyway.
      for (int pair = 0; pair < std::min(options.repeats, 3); ++pair) {
        const Peaks peaks = PeaksOnce(threads);
        times.push_back(TimeCallsMs(1, call));
        fractions.Add(s.Flops() / (times.back() * 1e6), peaks);
      }
    } else {
      times = TimesMs(options.repeats, call);
      // The call against the peaks of the same minute, timed alternately (PeaksOnce).
      const int calls = CallsPerTiming(call, 20.0);
      for (int pair = 0; pair < options.repeats; ++pair) {
        const Peaks peaks = PeaksOnce(threads);
        fractions.Add(s.Flops() / (TimeCallsMs(calls, call) * 1e6), peaks);
      }
    }
    const double ms = Median(times), gflops = s.Flops() / (ms * 1e6);
    const char* op = n == 1 ? "decode_mla" : "chunked_prefill_mla";
    Row row;
    row.Set("op", op)
        .Set("name", s.Name())
        .Set("batch", s.batch)
        .Set("heads_q", s.heads_q)
        .Set("heads_kv", 1)
        .Set("head_dim", kDim)
        .Set("head_dim_v", kDimV)
        .Set("seq_q", n)
        .Set("seq_k", s.cache)
        .Set("causal", true)
        .Set("q_dtype", "bf16")
        .Set("kv_dtype", "bf16")
        .Set("v_inside_k", true)
        .Set("kernel", kernel)
        .Set("threads", threads)
        .Set("median_ms", ms)
        .Set("flops", s.Flops())
        .Set("gflops", gflops)
        .Set("peak_fraction_alternated", Median(fractions.fma));
    if (!fractions.bf16.empty()) {
      row.Set("bf16_peak_fraction_alternated", Median(fractions.bf16));
    }
    std::fprintf(stderr,
                 "%s %s: %.1f GFLOP/s; timed alternately, %.3f of the FMA peak and %.3f of the "
                 "bf16 dot-product peak (0: none) (%s)\n",
                 op, s.Name().c_str(), gflops, Median(fractions.fma),
                 fractions.bf16.empty() ? 0.0 : Median(fractions.bf16), kernel.c_str());
    rows.push_back(row);
    gflops_out->push_back(gflops);
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
