// `streamattn bench prefill`: the flash forward on prefill shapes (seq_q = seq_k), in GFLOP/s
// (4 seq_q seq_k head_dim heads, halved under causal), as a fraction of the FMA peak measured
// in the same run, and as a ratio to the unfused BLAS baseline (prefill_baseline.h) run in the
// same process; then the chunked-prefill rows and the packed-batch rows (cu_seqlens). A last
// row reports peak memory for one head at seq 65536, measured in a child process so nothing
// else this run allocated counts.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/dtype.h"
#include "host_buffer.h"
#include "machine_limits.h"
#include "prefill_baseline.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

struct PrefillShape {
  int64_t heads_q, heads_kv, head_dim, seq;
  bool causal;
  sattn_dtype kv_dtype;

  std::string Name() const {
    const char* dtype = kv_dtype == SATTN_DTYPE_F32   ? "f32"
                        : kv_dtype == SATTN_DTYPE_F16 ? "f16"
                                                      : "bf16";
    char buffer[96];
    std::snprintf(buffer, sizeof(buffer), "h%" PRId64 "/%" PRId64 " d%" PRId64 " s%" PRId64 " %s%s",
                  heads_q, heads_kv, head_dim, seq, dtype, causal ? " causal" : "");
    return buffer;
  }
};

std::vector<PrefillShape> Shapes(bool quick) {
  std::vector<PrefillShape> shapes;
  const sattn_dtype dtypes[] = {SATTN_DTYPE_F16, SATTN_DTYPE_BF16, SATTN_DTYPE_F32};
  if (quick) {
    for (bool causal : {false, true}) shapes.push_back({8, 8, 128, 512, causal, SATTN_DTYPE_F16});
    shapes.push_back({32, 8, 64, 256, true, SATTN_DTYPE_BF16});
    return shapes;
  }
  for (int64_t dim : {128, 64})
    for (int64_t seq : {4096, 2048, 512})
      for (bool causal : {false, true})
        for (sattn_dtype dtype : dtypes) shapes.push_back({8, 8, dim, seq, causal, dtype});
  for (int64_t dim : {128, 64})
    for (int64_t seq : {2048, 512})
      for (bool causal : {false, true})
        shapes.push_back({32, 8, dim, seq, causal, SATTN_DTYPE_F16});
  for (bool causal : {false, true}) shapes.push_back({8, 8, 128, 16384, causal, SATTN_DTYPE_F16});
  return shapes;
}

// A contiguous [1, seq, heads, dim] tensor of uniform values in [-1, 1).
struct Buffer {
  HostBuffer data;
  sattn_tensor view;
  Buffer(sattn_dtype dtype, int64_t seq, int64_t heads, int64_t dim, std::mt19937& rng)
      : data(dtype, {1, seq, heads, dim}) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t n = seq * heads * dim;
    for (int64_t i = 0; i < n; ++i) data.Set(i, u(rng));
    view = data.View();
  }
};

double Flops(const PrefillShape& s) {
  return 4.0 * s.seq * s.seq * s.head_dim * s.heads_q * (s.causal ? 0.5 : 1.0);
}

// The largest shapes take seconds a call: fewer repeats and no warm-up time.
bool Huge(const PrefillShape& s) { return Flops(s) > 2e11; }

double Gflops(const PrefillShape& s, double ms) { return Flops(s) / (ms * 1e6); }
int Repeats(const PrefillShape& s, const BenchOptions& options) {
  return Huge(s) ? std::min(options.repeats, 3) : options.repeats;
}

// The tile kernel a context runs for q, k and v of `dtype` (sattn_context_info).
const char* KernelFor(sattn_context* ctx, sattn_dtype dtype) {
  const sattn_context_info info = ContextInfo(ctx);
  return dtype == SATTN_DTYPE_BF16  ? info.bf16_kernel
         : dtype == SATTN_DTYPE_F16 ? info.f16_kernel
                                    : info.f32_kernel;
}

// The kernel's row for shape s and its median time (the peak fractions and the baseline's
// fields are added once every shape is timed). f32_ctx forces the f32 kernel: a native
// kernel's row also carries its speed-up over it, the two timed alternately.
Row MeasureShape(sattn_context* ctx, sattn_context* f32_ctx, int threads, const PrefillShape& s,
                 const BenchOptions& options, double* ms_out) {
  std::mt19937 rng(7);
  Buffer q(s.kv_dtype, s.seq, s.heads_q, s.head_dim, rng),
      k(s.kv_dtype, s.seq, s.heads_kv, s.head_dim, rng),
      v(s.kv_dtype, s.seq, s.heads_kv, s.head_dim, rng),
      out(s.kv_dtype, s.seq, s.heads_q, s.head_dim, rng);
  sattn_attention_options attention{};
  attention.struct_size = sizeof(attention);
  attention.causal = s.causal;
  auto call_on = [&](sattn_context* on) {
    CheckOk(sattn_attention(on, &q.view, &k.view, &v.view, &out.view, nullptr, &attention),
            "sattn_attention");
  };
  auto call = [&] { call_on(ctx); };
  const double ms = MedianMs(Repeats(s, options), call, Huge(s) ? 0.0 : 20.0);
  // The kernel against the FMA peak of the same minute, timed alternately: peak_fraction
  // divides the median by a peak measured minutes apart, and on a shared machine the speed
  // drifts in between; each pair here meets the same minute.
  const int calls = Huge(s) ? 1 : CallsPerTiming(call, 20.0);
  std::vector<double> fractions;
  for (int pair = 0; pair < Repeats(s, options); ++pair) {
    const double peak = FmaGflopsOnce(threads);
    fractions.push_back(Gflops(s, TimeCallsMs(calls, call)) / peak);
  }
  Row row;
  row.Set("op", "prefill")
      .Set("batch", 1)
      .Set("heads_q", s.heads_q)
      .Set("heads_kv", s.heads_kv)
      .Set("head_dim", s.head_dim)
      .Set("seq_q", s.seq)
      .Set("seq_k", s.seq)
      .Set("causal", s.causal)
      .Set("q_dtype", DTypeName(s.kv_dtype))
      .Set("kv_dtype", DTypeName(s.kv_dtype))
      .Set("threads", threads)
      .Set("median_ms", ms)
      .Set("gflops", Gflops(s, ms))
      .Set("peak_fraction_alternated", Median(fractions));
  const std::string kernel = KernelFor(ctx, s.kv_dtype);
  row.Set("kernel", kernel);
  if (kernel == KernelFor(f32_ctx, s.kv_dtype)) {
    row.Set("speedup_vs_f32_kernel", 1.0);
  } else {
    row.Set("speedup_vs_f32_kernel",
            MedianTimeRatio(
                Repeats(s, options), [&] { call_on(f32_ctx); }, call, Huge(s) ? 0.0 : 20.0));
  }
  *ms_out = ms;
  return row;
}

// The unfused baseline on the same inputs (the same seed regenerates them). It runs after every
// kernel row has been timed: OpenBLAS's threads spin for ~0.1 s of CPU after each call, which
// would otherwise take cycles from the next shape's timings.
void AddBaseline(Row& row, int threads, const PrefillShape& s, double kernel_ms,
                 const BenchOptions& options) {
  if (!PrefillBaselineAvailable()) {
    row.Set("baseline", "unavailable (built without OpenBLAS)");
    return;
  }
  std::mt19937 rng(7);
  Buffer q(s.kv_dtype, s.seq, s.heads_q, s.head_dim, rng),
      k(s.kv_dtype, s.seq, s.heads_kv, s.head_dim, rng),
      v(s.kv_dtype, s.seq, s.heads_kv, s.head_dim, rng);
  std::vector<float> baseline_out(s.seq * s.heads_q * s.head_dim);
  const PrefillBaselineProblem problem{q.view.data, k.view.data, v.view.data, baseline_out.data(),
                                       s.kv_dtype,  s.kv_dtype,  s.seq,       s.seq,
                                       s.heads_q,   s.heads_kv,  s.head_dim,  s.causal};
  const double baseline_ms = MedianMs(
      std::min(Repeats(s, options), 3), [&] { RunPrefillBaseline(problem, threads); }, 0.0);
  row.Set("baseline", "openblas sgemm + 3-pass softmax + sgemm")
      .Set("baseline_median_ms", baseline_ms)
      .Set("ratio", baseline_ms / kernel_ms);
}

}  // namespace

// The child side of the memory row: one head of f16 inputs, causal, and the peak RSS before
// and after the call.
int RunRssProbe(int64_t seq) {
  std::mt19937 rng(3);
  Buffer q(SATTN_DTYPE_F16, seq, 1, 128, rng), k(SATTN_DTYPE_F16, seq, 1, 128, rng),
      v(SATTN_DTYPE_F16, seq, 1, 128, rng), out(SATTN_DTYPE_F16, seq, 1, 128, rng);
  ContextPtr ctx = MakeContext(0);
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  sattn_attention_options attention{};
  attention.struct_size = sizeof(attention);
  attention.causal = 1;
  const double start = NowMs();
  CheckOk(sattn_attention(ctx.get(), &q.view, &k.view, &v.view, &out.view, nullptr, &attention),
          "sattn_attention");
  const double ms = NowMs() - start;
  getrusage(RUSAGE_SELF, &after);
  std::printf("%ld %ld %.3f %d\n", before.ru_maxrss, after.ru_maxrss, ms,
              ContextThreads(ctx.get()));
  return 0;
}

std::vector<Row> BenchPrefill(const BenchOptions& options) {
  ContextPtr ctx = MakeContext(options.threads);
  ContextPtr f32_ctx = MakeContext(options.threads, SATTN_CPU_KERNEL_F32_FMA);
  const int threads = ContextThreads(ctx.get());
  // The FMA peak is measured before the first row and after the last, and the rows are
  // compared with the larger: on a shared machine a dip while measuring it once would flatter
  // every row (fractions above 1 were seen). A native kernel's rows also give the fraction of
  // its own instruction's peak.
  const double peak_before = MeasureFmaPeakGflops(threads);
  const double bf16_peak_before = MeasureBf16DotPeakGflops(threads);
  std::vector<Measured<PrefillShape>> measured;  // figure: ms
  std::vector<Row> rows = MeasureSelected(
      Shapes(options.quick), options,
      [&](const PrefillShape& s, double* ms) {
        Row row =
            MeasureShape(ctx.get(), f32_ctx.get(), threads, s, options, ms).Set("name", s.Name());
        std::fprintf(stderr,
                     "prefill %s: %.1f GFLOP/s, %s of the FMA peak timed alternately, kernel %s "
                     "(%sx the f32 kernel)\n",
                     s.Name().c_str(), Gflops(s, *ms), row.Get("peak_fraction_alternated").c_str(),
                     KernelFor(ctx.get(), s.kv_dtype), row.Get("speedup_vs_f32_kernel").c_str());
        return row;
      },
      &measured);
  // Timed before the BLAS baselines, whose threads spin after each call.
  std::vector<Row> chunked = ChunkedPrefillRows(ctx.get(), threads, options);
  std::vector<Row> packed = PackedPrefillRows(ctx.get(), threads, options);
  const double peak = std::max(peak_before, MeasureFmaPeakGflops(threads));
  const double bf16_peak = std::max(bf16_peak_before, MeasureBf16DotPeakGflops(threads));
  for (size_t i = 0; i < measured.size(); ++i) {
    const double gflops = Gflops(measured[i].shape, measured[i].figure);
    rows[i].Set("peak_fraction", gflops / peak).Set("fma_peak_gflops", peak);
    const std::string kernel = KernelFor(ctx.get(), measured[i].shape.kv_dtype);
    if (kernel == "avx512-bf16" || kernel == "neon-bf16") {  // the bf16 dot-product kernels
      rows[i].Set("bf16_dot_peak_gflops", bf16_peak).Set("bf16_peak_fraction", gflops / bf16_peak);
    }
    AddBaseline(rows[i], threads, measured[i].shape, measured[i].figure, options);
  }
  for (Row& row : chunked) {
    row.Set("peak_fraction", std::stod(row.Get("gflops")) / peak).Set("fma_peak_gflops", peak);
    rows.push_back(row);
  }
  rows.insert(rows.end(), packed.begin(), packed.end());
  // Peak memory for one head at seq 65536 (8192 with --quick), in a fresh process.
  const int64_t seq = options.quick ? 8192 : 65536;
  if (Selected(options, "rss")) {
    char self[4096] = {0};  // the shell popen starts would see itself as /proc/self/exe
    const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
    const std::string command =
        std::string(length > 0 ? self : "streamattn") + " rss-probe " + std::to_string(seq);
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    long before = 0, after = 0;
    double ms = 0;
    int probe_threads = 0;
    if (pipe &&
        std::fscanf(pipe.get(), "%ld %ld %lf %d", &before, &after, &ms, &probe_threads) == 4) {
      const double inputs_mib = 4.0 * seq * 128 * 2 / (1 << 20);
      Row row;
      row.Set("op", "prefill_memory")
          .Set("batch", 1)
          .Set("heads_q", 1)
          .Set("heads_kv", 1)
          .Set("head_dim", 128)
          .Set("seq_q", seq)
          .Set("seq_k", seq)
          .Set("causal", true)
          .Set("q_dtype", "f16")
          .Set("kv_dtype", "f16")
          .Set("threads", probe_threads)
          .Set("median_ms", ms)
          .Set("inputs_mib", inputs_mib)
          .Set("rss_before_call_mib", before / 1024.0)
          .Set("peak_rss_mib", after / 1024.0)
          .Set("call_peak_growth_mib", (after - before) / 1024.0)
          .Set("limit_mib", 16.0);
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
