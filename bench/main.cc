// The streamattn command-line tool: `info`, `run` (the default workload) and `bench <op>`.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "bench_common.h"
#include "machine_limits.h"

namespace streamattn {
namespace bench {

int RunInfo(int threads);
int RunDefaultWorkload(int threads, bool quick);

namespace {

using BenchFn = std::vector<Row> (*)(const BenchOptions&);

const std::map<std::string, BenchFn>& Benches() {
  static const std::map<std::string, BenchFn> benches = {
      {"decode", BenchDecode},   {"exp2", BenchExp2}, {"prefill", BenchPrefill},
      {"softmax", BenchSoftmax}, {"topk", BenchTopK},
  };
  return benches;
}

int Usage(FILE* out, int code) {
  std::fprintf(out,
               "usage: streamattn [info | run | bench <op>] [options]\n"
               "  info               version, SIMD target, threads, backends\n"
               "  run                the default workload, checked against the oracle (default)\n"
               "  bench <op>         benchmark one operation against its baselines\n"
               "ops:");
  for (const auto& entry : Benches()) std::fprintf(out, " %s", entry.first.c_str());
  std::fprintf(
      out,
      "\noptions:\n"
      "  --json             print benchmark rows as a JSON array\n"
      "  --threads N        worker threads (default: all cores)\n"
      "  --repeats N        timed runs per case; the median is reported (default 7)\n"
      "  --quick            small shapes and few repeats (a smoke test)\n"
      "  --filter TEXT      only the cases whose name contains TEXT (e.g. 'd128 s4096')\n");
  return code;
}

}  // namespace

int Main(int argc, char** argv) {
  std::string command = "run", op;
  BenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next_int = [&](const char* name) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "streamattn: %s needs a value\n", name);
        std::exit(2);
      }
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 0 || value > 100000) {
        std::fprintf(stderr, "streamattn: %s: '%s' is not a count\n", name, argv[i]);
        std::exit(2);
      }
      return static_cast<int>(value);
    };
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--filter") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "streamattn: --filter needs a value\n");
        return 2;
      }
      options.filter = argv[++i];
    } else if (i == 1 && arg == "rss-probe" && argc == 3) {
      return RunRssProbe(std::atoll(argv[2]));  // internal: bench prefill's memory row
    } else if (arg == "--quick") {
      options.quick = true;
    } else if (arg == "--threads") {
      options.threads = next_int("--threads");
    } else if (arg == "--repeats") {
      options.repeats = std::max(1, next_int("--repeats"));
    } else if (arg == "-h" || arg == "--help" || arg == "help") {
      return Usage(stdout, 0);
    } else if (i == 1 && (arg == "info" || arg == "run" || arg == "bench")) {
      command = arg;
    } else if (command == "bench" && op.empty() && arg[0] != '-') {
      op = arg;
    } else {
      std::fprintf(stderr, "streamattn: unknown argument '%s'\n", arg.c_str());
      return Usage(stderr, 2);
    }
  }
  if (options.quick && options.repeats == BenchOptions().repeats) options.repeats = 3;
  if (command == "info") return RunInfo(options.threads);
  if (command == "run") return RunDefaultWorkload(options.threads, options.quick);

  const auto it = Benches().find(op);
  if (it == Benches().end()) {
    std::fprintf(stderr, "streamattn: bench needs an op%s%s\n", op.empty() ? "" : ", not ",
                 op.c_str());
    return Usage(stderr, 2);
  }
  const std::vector<Row> rows = it->second(options);
  if (options.json) {
    PrintJson(rows);
  } else {
    PrintText(rows);
  }
  return 0;
}

}  // namespace bench
}  // namespace streamattn

int main(int argc, char** argv) { return streamattn::bench::Main(argc, argv); }
