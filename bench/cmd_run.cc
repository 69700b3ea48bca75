// `streamattn run`: the main job. One attention layer of a well-known model (default Llama-3-8B:
// 32 query heads over 8 kv heads, head_dim 128, bf16) serving a request: the prefill of a
// 4096-token prompt (causal), then 32 decoding steps, each appending its key and value to the
// cache and attending to all of it. Prefill is timed against the FMA peak and decode against the
// read bandwidth, both measured in the same run (machine_limits.h); sampled prefill rows and
// decode steps are checked against the double-precision oracle (tests/reference/).
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"
#include "cli_args.h"
#include "core/dtype.h"
#include "machine_limits.h"
#include "reference/reference_attention.h"
#include "run_layer.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

struct Preset {
  const char* name;
  const char* description;
  int64_t heads_q, heads_kv, head_dim;
  int64_t window;  // -1: none
  double softcap;  // 0: none
};

// From the models' published configurations (attention shape only).
constexpr Preset kPresets[] = {
    {"llama3-8b", "Llama-3-8B", 32, 8, 128, -1, 0.0},
    {"llama3-70b", "Llama-3-70B", 64, 8, 128, -1, 0.0},
    {"llama2-7b", "Llama-2-7B (multi-head)", 32, 32, 128, -1, 0.0},
    {"mistral-7b", "Mistral-7B-v0.1 (4096-token sliding window)", 32, 8, 128, 4096, 0.0},
    {"qwen2.5-7b", "Qwen2.5-7B", 28, 4, 128, -1, 0.0},
    {"gemma2-9b", "Gemma-2-9B (head_dim 256, logit softcap 50)", 16, 8, 256, -1, 50.0},
    {"phi3-mini", "Phi-3-mini (head_dim 96)", 32, 32, 96, -1, 0.0},
};

const Preset* FindPreset(const std::string& name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

void PrintHelp() {
  std::printf(
      "usage: streamattn run [--model NAME] [shape and run options]\n"
      "\n"
      "One attention layer serving a request: prefill of a prompt (causal), then decoding\n"
      "steps that each append a key and value to the cache and attend to all of it. Prints\n"
      "the backend, SIMD target and threads, then time, GFLOP/s and GB/s as fractions of the\n"
      "FMA peak and read bandwidth measured in the same run, and checks sampled rows against\n"
      "the double-precision oracle (exit status 1 if any is off).\n"
      "\n"
      "models (--model; default llama3-8b):\n");
  for (const Preset& p : kPresets) {
    std::printf("  %-12s %-46s %3" PRId64 " q heads, %2" PRId64 " kv heads, head_dim %" PRId64 "\n",
                p.name, p.description, p.heads_q, p.heads_kv, p.head_dim);
  }
  std::printf(
      "\nshape (each overrides the model's):\n"
      "  --heads-q N        query heads\n"
      "  --heads-kv N       key/value heads (divides --heads-q)\n"
      "  --head-dim N       1..512 (v as wide)\n"
      "  --window N         sliding window: each query sees itself and the N keys before\n"
      "  --softcap X        logit softcap (0: none)\n"
      "  --dtype T          bf16 (default), f16 or f32, for q, k, v and out\n"
      "  --batch N          sequences served together (default 1)\n"
      "  --prompt N         prompt tokens (default 4096)\n"
      "  --decode N         decoding steps (default 32)\n"
      "run:\n"
      "  --threads N        worker threads (default: all cores)\n"
      "  --repeats N        timed prefills; the median is reported (default 3)\n"
      "  --check-rows N     prefill rows checked against the oracle (default 16)\n"
      "  --quick            prompt 512, 8 decoding steps, one timed prefill (a smoke test)\n"
      "  -h, --help         this text\n");
}

LayerConfig ParseArgs(int argc, char** argv, bool* help) {
  LayerConfig c;
  const Preset* preset = FindPreset("llama3-8b");
  // Explicit shape options win over the preset, whatever their order on the line.
  int64_t heads_q = 0, heads_kv = 0, head_dim = 0, window = -2;
  double softcap = -1.0;
  bool quick = false, prompt_set = false, decode_set = false, repeats_set = false;
  ArgReader args("streamattn run", argc, argv);
  while (!args.Done()) {
    const std::string arg = args.Next();
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return c;
    } else if (arg == "--model") {
      const std::string name = args.Value();
      preset = FindPreset(name);
      if (!preset) {
        std::string names;
        for (const Preset& p : kPresets) names += std::string(names.empty() ? "" : ", ") + p.name;
        args.Fail("--model: no model '" + name + "' (known: " + names + ")");
      }
    } else if (arg == "--heads-q") {
      heads_q = args.Int(1, 1024);
    } else if (arg == "--heads-kv") {
      heads_kv = args.Int(1, 1024);
    } else if (arg == "--head-dim") {
      head_dim = args.Int(1, 512);
    } else if (arg == "--window") {
      window = args.Int(0, int64_t{1} << 40);
    } else if (arg == "--softcap") {
      softcap = args.Real(0.0, 1e6);
    } else if (arg == "--dtype") {
      const std::string t = args.Value();
      if (t == "bf16") {
        c.dtype = SATTN_DTYPE_BF16;
      } else if (t == "f16") {
        c.dtype = SATTN_DTYPE_F16;
      } else if (t == "f32") {
        c.dtype = SATTN_DTYPE_F32;
      } else {
        args.Fail("--dtype: '" + t + "' is not bf16, f16 or f32");
      }
    } else if (arg == "--batch") {
      c.batch = args.Int(1, 256);
    } else if (arg == "--prompt") {
      c.prompt = args.Int(1, int64_t{1} << 22);
      prompt_set = true;
    } else if (arg == "--decode") {
      c.decode = args.Int(0, 100000);
      decode_set = true;
    } else if (arg == "--threads") {
      c.threads = static_cast<int>(args.Int(0, 4096));
    } else if (arg == "--repeats") {
      c.repeats = static_cast<int>(args.Int(1, 1000));
      repeats_set = true;
    } else if (arg == "--check-rows") {
      c.check_rows = args.Int(0, 1 << 20);
    } else if (arg == "--quick") {
      args.NoValue();
      quick = true;
    } else {
      args.Unknown();
    }
  }
  c.model = preset->description;
  c.heads_q = heads_q ? heads_q : preset->heads_q;
  c.heads_kv = heads_kv ? heads_kv : preset->heads_kv;
  c.head_dim = head_dim ? head_dim : preset->head_dim;
  c.window = window != -2 ? window : preset->window;
  c.softcap = softcap >= 0.0 ? softcap : preset->softcap;
  if (quick) {
    if (!prompt_set) c.prompt = 512;
    if (!decode_set) c.decode = 8;
    if (!repeats_set) c.repeats = 1;
    c.check_rows = std::min<int64_t>(c.check_rows, 4);
    c.bandwidth_bytes = size_t{256} << 20;
  }
  if (c.heads_q % c.heads_kv != 0) {
    args.Fail("--heads-q " + std::to_string(c.heads_q) + " is not a multiple of --heads-kv " +
              std::to_string(c.heads_kv));
  }
  c.check_rows = std::min(c.check_rows, c.prompt);
  return c;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  bool help = false;
  const LayerConfig c = ParseArgs(argc, argv, &help);
  if (help) {
    PrintHelp();
    return 0;
  }
  ContextPtr ctx = MakeContext(c.threads);
  const sattn_context_info info = ContextInfo(ctx.get());

  char softcap_text[48] = "";
  if (c.softcap > 0) std::snprintf(softcap_text, sizeof(softcap_text), ", softcap %g", c.softcap);
  std::printf("streamattn %s: one attention layer of %s\n", sattn_version(), c.model.c_str());
  std::printf("  %" PRId64 " query heads, %" PRId64 " kv heads, head_dim %" PRId64
              ", %s, causal%s%s, batch %" PRId64 ": prefill %" PRId64 " tokens, then %" PRId64
              " decoding steps\n",
              c.heads_q, c.heads_kv, c.head_dim, DTypeName(c.dtype),
              c.window >= 0 ? (", window " + std::to_string(c.window)).c_str() : "", softcap_text,
              c.batch, c.prompt, c.decode);
  std::printf("backend: %s (%s)\n", info.backend == SATTN_BACKEND_CUDA ? "cuda" : "cpu",
              info.backend_reason);
  std::printf("simd target: %s (compiled in: %s)\n", info.simd_target, info.compiled_targets);
  std::printf("threads: %d\n", info.num_threads);
  std::fflush(stdout);

  // The limits are measured before the request and again after it, and the rows are judged
  // against the larger of each: a limit measured in a dip (other guests loading this machine's
  // host) would otherwise flatter the rows, as the benches do too.
  const double peak_before = MeasureFmaPeakGflops(info.num_threads);
  const double bandwidth_before = MeasureReadBandwidthGbps(info.num_threads, c.bandwidth_bytes);
  std::printf(
      "machine limits before (%d threads): FMA peak %.1f GFLOP/s (%s), read bandwidth %.1f "
      "GB/s\n",
      info.num_threads, peak_before, PeakSimdTarget(), bandwidth_before);
  std::fflush(stdout);

  const LayerResult r = RunLayer(ctx.get(), c);

  const double peak_after = MeasureFmaPeakGflops(info.num_threads);
  const double bandwidth_after = MeasureReadBandwidthGbps(info.num_threads, c.bandwidth_bytes);
  const double peak = std::max(peak_before, peak_after);
  const double bandwidth = std::max(bandwidth_before, bandwidth_after);
  std::printf(
      "machine limits after:           FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s (the "
      "rows use the larger of each)\n\n",
      peak_after, bandwidth_after);

  // One row per phase: what was done, its time, its rate, and that rate against the limit.
  char work[96], rate[32];
  std::snprintf(work, sizeof(work), "%" PRId64 " prompt tokens", c.prompt);
  std::snprintf(rate, sizeof(rate), "%.1f GFLOP/s", r.prefill_gflops);
  std::printf("%-8s %-28s %10.1f ms %14s  %5.1f%% of FMA peak (median of %d)\n", "prefill", work,
              r.prefill_ms, rate, 100.0 * r.prefill_gflops / peak, c.repeats);
  if (c.decode > 0) {
    std::snprintf(work, sizeof(work), "%" PRId64 " steps, %" PRId64 "..%" PRId64 " keys", c.decode,
                  c.prompt + 1, c.prompt + c.decode);
    std::snprintf(rate, sizeof(rate), "%.1f GB/s", r.decode_gbps);
    std::printf(
        "%-8s %-28s %10.3f ms %14s  %5.1f%% of read bandwidth (median step; %.1f ms in "
        "all)\n",
        "decode", work, r.decode_step_ms, rate, 100.0 * r.decode_gbps / bandwidth,
        r.decode_total_ms);
  }
  std::printf("%-8s %-28s %10.1f ms\n", "total", "attention of the request",
              r.prefill_ms + r.decode_total_ms);
  std::printf("check    %" PRId64 " prefill rows and %" PRId64 " decode steps x %" PRId64
              " heads against the double oracle: max error %.2e of max |out| (tolerance %.0e "
              "for %s out): %s\n",
              r.rows_checked, r.steps_checked, c.heads_q * c.batch, r.max_error, r.tolerance,
              DTypeName(c.dtype), r.max_error <= r.tolerance ? "ok" : "FAIL");
  return r.max_error <= r.tolerance ? 0 : 1;
}

}  // namespace bench
}  // namespace streamattn
