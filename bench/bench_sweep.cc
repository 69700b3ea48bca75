// `streamattn bench sweep`: prefill over prompt lengths and decode over cache lengths, kv head
// groupings and dtypes, each point placed by its arithmetic intensity (flops per byte of q, k,
// v and out) under the roofline of this machine (FMA peak and read bandwidth, measured in the
// same run). Prefill lands right of the ridge (compute-bound), decode left of it
// (bandwidth-bound), and each point's distance below the roof is what a kernel leaves.
// Writes sweep.csv, sweep.json, roofline.gp and the chart (gnuplot) into --out.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench_common.h"
#include "cli_args.h"
#include "host_buffer.h"
#include "machine_limits.h"
#include "roofline_plot.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

struct SweepOptions {
  std::string out_dir = "streamattn-sweep";
  std::string format = "png";
  int threads = 0;
  int repeats = 5;
  bool quick = false;
  bool plot = true;
};

struct Case {
  bool decode;
  int64_t batch, heads_q, heads_kv, head_dim, seq;  // seq: prompt, or cache length
  bool causal;
  sattn_dtype dtype;

  std::string Name() const {
    const char* t = dtype == SATTN_DTYPE_F32 ? "f32" : dtype == SATTN_DTYPE_F16 ? "f16" : "bf16";
    char b[128];
    std::snprintf(b, sizeof(b),
                  "%s b%" PRId64 " h%" PRId64 "/%" PRId64 " d%" PRId64 " %s%" PRId64 " %s%s",
                  decode ? "decode" : "prefill", batch, heads_q, heads_kv, head_dim,
                  decode ? "c" : "s", seq, t, causal ? " causal" : "");
    return b;
  }
  // The chart's series: one per kind of work; a decode series spans its cache lengths.
  std::string Series() const {
    char b[96];
    std::snprintf(b, sizeof(b), "%s %s %" PRId64 "/%" PRId64 " %s%s%s",
                  decode ? "decode" : "prefill", heads_q == heads_kv ? "MHA" : "GQA", heads_q,
                  heads_kv, dtype == SATTN_DTYPE_F32 ? "f32" : "bf16", batch > 1 ? ", batch " : "",
                  batch > 1 ? std::to_string(batch).c_str() : "");
    return b;
  }
  int64_t Element() const { return dtype == SATTN_DTYPE_F32 ? 4 : 2; }
  int64_t SeqQ() const { return decode ? 1 : seq; }
  double Flops() const {  // 2 flops per multiply-add, for S = QK^T and for PV
    const double pairs = decode || !causal ? static_cast<double>(SeqQ()) * seq
                                           : static_cast<double>(seq) * (seq + 1) / 2;
    return 4.0 * batch * heads_q * head_dim * pairs;
  }
  double Bytes() const {
    return static_cast<double>(Element()) * batch * head_dim *
           (2.0 * SeqQ() * heads_q + 2.0 * seq * heads_kv);
  }
};

std::vector<Case> Cases(bool quick) {
  std::vector<Case> cases;
  const sattn_dtype bf16 = SATTN_DTYPE_BF16, f32 = SATTN_DTYPE_F32;
  if (quick) {
    for (int64_t s : {128, 512}) cases.push_back({false, 1, 8, 2, 64, s, true, bf16});
    for (int64_t c : {1024, 8192}) cases.push_back({true, 1, 8, 2, 64, c, true, bf16});
    return cases;
  }
  // Prefill: intensity grows with the prompt (0.4 x seq flop/byte for Llama-3-8B's shape).
  for (int64_t s : {256, 512, 1024, 2048, 4096})
    cases.push_back({false, 1, 32, 8, 128, s, true, bf16});
  for (int64_t s : {512, 2048}) cases.push_back({false, 1, 32, 32, 128, s, false, f32});
  // Decode: intensity is 2 x (heads_q / heads_kv) / element size, whatever the cache length.
  // Largest case: 1 GiB of cache (32768 keys, 32 kv heads, bf16).
  for (int64_t c : {2048, 8192, 32768}) {
    cases.push_back({true, 1, 32, 8, 128, c, true, bf16});
    cases.push_back({true, 1, 32, 32, 128, c, true, bf16});
    cases.push_back({true, 1, 32, 8, 128, c, true, f32});
  }
  for (int64_t c : {2048, 4096}) cases.push_back({true, 4, 32, 32, 128, c, true, f32});
  return cases;
}

// One measurement: prefill from fresh buffers; decode rotating through copies of the cache
// that add up to 256 MiB or more, so each timed call finds its cache in memory, not the LLC.
double MeasureMs(sattn_context* ctx, const Case& c, int repeats) {
  FastRandom rng(99);
  auto fill = [&](HostBuffer& b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) b.Set(i, rng.Uniform(-2.0f, 2.0f));
  };
  const int64_t sq = c.SeqQ(), hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  HostBuffer q(c.dtype, {c.batch, sq, hq, d}), out(c.dtype, {c.batch, sq, hq, d});
  fill(q, c.batch * sq * hq * d);
  const double kv_bytes = 2.0 * c.batch * c.seq * hkv * d * c.Element();
  const double rotation = 256.0 * (1 << 20);  // bytes: several times any last-level cache
  const int64_t copies =
      c.decode && kv_bytes < rotation ? static_cast<int64_t>(rotation / kv_bytes) + 1 : 1;
  std::vector<HostBuffer> ks, vs;
  for (int64_t i = 0; i < copies; ++i) {
    ks.emplace_back(c.dtype, std::vector<int64_t>{c.batch, c.seq, hkv, d});
    vs.emplace_back(c.dtype, std::vector<int64_t>{c.batch, c.seq, hkv, d});
    fill(ks.back(), c.batch * c.seq * hkv * d);
    fill(vs.back(), c.batch * c.seq * hkv * d);
  }
  sattn_attention_options options{};
  options.struct_size = sizeof(options);
  options.causal = c.causal;
  const sattn_tensor qv = q.View(), ov = out.View();
  int64_t next = 0;
  const bool long_call = c.Flops() > 2e10;
  return MedianMs(
      long_call ? std::min(repeats, 3) : repeats,
      [&] {
        const int64_t i = next++ % copies;
        const sattn_tensor kv = ks[i].View(), vv = vs[i].View();
        CheckOk(sattn_attention(ctx, &qv, &kv, &vv, &ov, nullptr, &options), "sattn_attention");
      },
      long_call ? 0.0 : 20.0);
}

// Progress on a terminal: one bar redrawn in place; otherwise one plain line per case.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), tty_(isatty(fileno(stderr))) {}
  void Start(size_t i, const std::string& name) {
    if (!tty_) return;
    const int width = 30, done = static_cast<int>(width * i / total_);
    std::fprintf(stderr, "\r\033[K[%s%s] %zu/%zu %s", std::string(done, '#').c_str(),
                 std::string(width - done, '.').c_str(), i, total_, name.c_str());
    std::fflush(stderr);
  }
  void Done(size_t i, const std::string& name, const std::string& result) {
    if (tty_) {
      if (i + 1 == total_) std::fprintf(stderr, "\r\033[K");
      return;
    }
    std::fprintf(stderr, "sweep %zu/%zu: %s: %s\n", i + 1, total_, name.c_str(), result.c_str());
  }

 private:
  size_t total_;
  bool tty_;
};

void PrintHelp() {
  std::printf(
      "usage: streamattn bench sweep [options]\n"
      "\n"
      "Prefill over prompt lengths and decode over cache lengths, kv groupings and dtypes,\n"
      "placed on this machine's roofline (FMA peak and read bandwidth, measured in the same\n"
      "run). Shows a progress bar on a terminal (plain lines otherwise), then writes into the\n"
      "output directory: sweep.csv, sweep.json, roofline.gp, and the chart drawn by gnuplot\n"
      "(without gnuplot the data and script are still written, and the run says so).\n"
      "\n"
      "options:\n"
      "  --out DIR          output directory (default streamattn-sweep; created)\n"
      "  --format F         chart format: png (default) or svg\n"
      "  --no-plot          write the data and the gnuplot script only\n"
      "  --threads N        worker threads (default: all cores)\n"
      "  --repeats N        timed runs per point; the median is reported (default 5)\n"
      "  --quick            four small points (a smoke test)\n"
      "  -h, --help         this text\n");
}

SweepOptions ParseArgs(int argc, char** argv, bool* help) {
  SweepOptions o;
  ArgReader args("streamattn bench sweep", argc, argv);
  while (!args.Done()) {
    const std::string arg = args.Next();
    if (arg == "-h" || arg == "--help") {
      *help = true;
    } else if (arg == "--out") {
      o.out_dir = args.Value();
      if (o.out_dir.empty()) args.Fail("--out needs a directory");
    } else if (arg == "--format") {
      o.format = args.Value();
      if (o.format != "png" && o.format != "svg")
        args.Fail("--format: '" + o.format + "' is not png or svg");
    } else if (arg == "--no-plot") {
      args.NoValue();
      o.plot = false;
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(args.Int(0, 4096));
    } else if (arg == "--repeats") {
      o.repeats = static_cast<int>(args.Int(1, 1000));
    } else if (arg == "--quick") {
      args.NoValue();
      o.quick = true;
    } else {
      args.Unknown();
    }
  }
  return o;
}

bool WriteCsv(const std::vector<Row>& rows, const std::string& path) {
  std::ofstream csv(path);
  if (rows.empty()) return static_cast<bool>(csv);
  for (size_t f = 0; f < rows[0].fields().size(); ++f) {
    csv << (f ? "," : "") << rows[0].fields()[f].first;
  }
  csv << "\n";
  for (const Row& row : rows) {
    for (size_t f = 0; f < row.fields().size(); ++f) {
      std::string value = row.fields()[f].second;  // JSON text: strings are quoted, as CSV wants
      csv << (f ? "," : "") << (value == "null" ? "" : value);
    }
    csv << "\n";
  }
  return static_cast<bool>(csv);
}

bool WriteJson(const std::vector<Row>& rows, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  PrintJson(rows, f);
  return std::fclose(f) == 0;
}

}  // namespace

int SweepCommand(int argc, char** argv) {
  bool help = false;
  const SweepOptions o = ParseArgs(argc, argv, &help);
  if (help) {
    PrintHelp();
    return 0;
  }
  if (mkdir(o.out_dir.c_str(), 0777) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "streamattn bench sweep: cannot create %s: %s\n", o.out_dir.c_str(),
                 std::strerror(errno));
    return 1;
  }
  ContextPtr ctx = MakeContext(o.threads);
  const sattn_context_info info = ContextInfo(ctx.get());
  const int threads = info.num_threads;
  std::fprintf(stderr, "sweep: measuring this machine's limits (%d threads)...\n", threads);
  const double peak = MeasureFmaPeakGflops(threads);
  const double bandwidth =
      MeasureReadBandwidthGbps(threads, o.quick ? size_t{256} << 20 : size_t{1} << 30);

  const std::vector<Case> cases = Cases(o.quick);
  std::vector<Row> rows;
  RooflineChart chart{std::string("streamattn ") + sattn_version() + " roofline: " +
                          info.simd_target + ", " + std::to_string(threads) + " threads",
                      peak,
                      bandwidth,
                      {}};
  // A decode series spans cache lengths (its points share an x): say which, in its name.
  std::map<std::string, std::pair<int64_t, int64_t>> cache_range;
  for (const Case& c : cases) {
    if (!c.decode) continue;
    auto it = cache_range.emplace(c.Series(), std::make_pair(c.seq, c.seq)).first;
    it->second = {std::min(it->second.first, c.seq), std::max(it->second.second, c.seq)};
  }
  auto series_name = [&](const Case& c) {
    if (!c.decode) return c.Series();
    const auto range = cache_range[c.Series()];
    return c.Series() + ", " + std::to_string(range.first) + "-" + std::to_string(range.second) +
           " keys";
  };
  Progress progress(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    progress.Start(i, c.Name());
    const double ms = MeasureMs(ctx.get(), c, o.quick ? 1 : o.repeats);
    const double gflops = c.Flops() / (ms * 1e6), gbps = c.Bytes() / (ms * 1e6);
    const double intensity = c.Flops() / c.Bytes(), roof = std::min(peak, bandwidth * intensity);
    Row row;
    row.Set("op", c.decode ? "decode" : "prefill")
        .Set("name", c.Name())
        .Set("batch", c.batch)
        .Set("heads_q", c.heads_q)
        .Set("heads_kv", c.heads_kv)
        .Set("head_dim", c.head_dim)
        .Set("seq_q", c.SeqQ())
        .Set("seq_k", c.seq)
        .Set("causal", c.causal)
        .Set("dtype", c.dtype == SATTN_DTYPE_F32 ? "f32" : "bf16")
        .Set("threads", threads)
        .Set("median_ms", ms)
        .Set("gflops", gflops)
        .Set("gbps", gbps)
        .Set("intensity_flop_per_byte", intensity)
        .Set("roof_gflops", roof)
        .Set("roof_fraction", gflops / roof)
        .Set("peak_fraction", gflops / peak)
        .Set("bandwidth_fraction", gbps / bandwidth)
        .Set("fma_peak_gflops", peak)
        .Set("read_bandwidth_gbps", bandwidth);
    rows.push_back(row);
    chart.points.push_back(
        {series_name(c), c.decode ? "" : "s" + std::to_string(c.seq), intensity, gflops});
    char result[128];
    std::snprintf(result, sizeof(result), "%.1f GFLOP/s, %.1f GB/s, %.0f%% of the roof", gflops,
                  gbps, 100 * gflops / roof);
    progress.Done(i, c.Name(), result);
  }

  std::printf(
      "machine limits (%d threads): FMA peak %.1f GFLOP/s (%s), read bandwidth %.1f GB/s,"
      " ridge at %.1f flop/byte\n",
      threads, peak, PeakSimdTarget(), bandwidth, peak / bandwidth);
  std::printf("%-40s %10s %9s %8s %8s %8s\n", "case", "ms", "GFLOP/s", "GB/s", "flop/B", "of roof");
  auto number = [](const Row& row, const char* key) { return std::stod(row.Get(key)); };
  for (const Row& row : rows) {
    const std::string quoted = row.Get("name");
    std::printf("%-40s %10.3f %9.1f %8.2f %8.1f %7.0f%%\n",
                quoted.substr(1, quoted.size() - 2).c_str(), number(row, "median_ms"),
                number(row, "gflops"), number(row, "gbps"), number(row, "intensity_flop_per_byte"),
                100 * number(row, "roof_fraction"));
  }
  const std::string csv = o.out_dir + "/sweep.csv", json = o.out_dir + "/sweep.json",
                    script = o.out_dir + "/roofline.gp",
                    image = o.out_dir + "/roofline." + o.format;
  if (!WriteCsv(rows, csv) || !WriteJson(rows, json)) {
    std::fprintf(stderr, "streamattn bench sweep: cannot write %s\n", o.out_dir.c_str());
    return 1;
  }
  std::printf("data: %s, %s\n", csv.c_str(), json.c_str());
  std::string error;
  // The script names its chart by absolute path, so it redraws from any directory.
  std::string image_absolute = image;
  if (char* dir = realpath(o.out_dir.c_str(), nullptr)) {
    image_absolute = std::string(dir) + "/roofline." + o.format;
    std::free(dir);
  }
  if (!WriteRooflineScript(chart, script, image_absolute, &error)) {
    std::fprintf(stderr, "streamattn bench sweep: %s\n", error.c_str());
    return 1;
  }
  if (!o.plot) {
    std::printf("chart: not drawn (--no-plot); `gnuplot %s` draws %s\n", script.c_str(),
                image.c_str());
  } else if (RunGnuplot(script, &error)) {
    std::printf("chart: %s (gnuplot script %s)\n", image.c_str(), script.c_str());
  } else {
    // The numbers are the result; a missing plotter only costs the picture.
    std::printf("chart: not drawn: %s; the script %s draws it later\n", error.c_str(),
                script.c_str());
  }
  return 0;
}

}  // namespace bench
}  // namespace streamattn
