// The streamattn command-line tool: `info`, `run` (the default workload) and `bench <op>`
// (`bench sweep` included). Every subcommand has --help; a mistake on the command line is one
// line on stderr and exit status 2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "bench_common.h"
#include "cli_args.h"
#include "machine_limits.h"

namespace streamattn {
namespace bench {

int RunInfo(int threads);
int RunCommand(int argc, char** argv);    // cmd_run.cc: parses its own options
int SweepCommand(int argc, char** argv);  // bench_sweep.cc: likewise

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
               "  run                the main job: a Llama-3-8B attention layer, prefill and\n"
               "                     decode, timed and checked against the oracle (default;\n"
               "                     `streamattn run --help` for models and shape options)\n"
               "  bench sweep        prefill and decode sweeps on a roofline chart (CSV, JSON,\n"
               "                     PNG/SVG; `streamattn bench sweep --help`)\n"
               "  bench <op>         benchmark one operation against its baselines\n"
               "ops: sweep");
  for (const auto& entry : Benches()) std::fprintf(out, " %s", entry.first.c_str());
  std::fprintf(
      out,
      "\noptions:\n"
      "  --json             print benchmark rows as a JSON array\n"
      "  --threads N        worker threads (default: all cores)\n"
      "  --repeats N        timed runs per case; the median is reported (default 7)\n"
      "  --quick            small shapes and few repeats (a smoke test)\n"
      "  --filter TEXT      only the cases whose name contains TEXT (e.g. 'd128 s4096';\n"
      "                     bench decode --filter mla: MLA decoding steps and, named 'q128',\n"
      "                     MLA chunked prefill)\n");
  return code;
}

int InfoUsage() {
  std::printf(
      "usage: streamattn info [--threads N]\n"
      "  the library's version, the SIMD target chosen at run time and those compiled in, the\n"
      "  threads a context gets (--threads N asks for N), and the backends available\n");
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  // `run` (also what no subcommand means) and `bench sweep` parse their own options.
  const bool help_first =
      argc >= 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0 ||
                    std::strcmp(argv[1], "help") == 0);
  if (argc < 2 || (argv[1][0] == '-' && !help_first)) return RunCommand(argc - 1, argv + 1);
  if (std::strcmp(argv[1], "run") == 0) return RunCommand(argc - 2, argv + 2);
  if (argc >= 3 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "sweep") == 0) {
    return SweepCommand(argc - 3, argv + 3);
  }
  std::string command, op;
  BenchOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next_int = [&](const char* name) {
      if (i + 1 >= argc) throw UsageError{std::string("streamattn: ") + name + " needs a value"};
      char* end = nullptr;
      const long value = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || value < 0 || value > 100000) {
        throw UsageError{std::string("streamattn: ") + name + ": '" + argv[i] + "' is not a count"};
      }
      return static_cast<int>(value);
    };
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--filter") {
      if (i + 1 >= argc) throw UsageError{"streamattn: --filter needs a value"};
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
      return command == "info" ? InfoUsage() : Usage(stdout, 0);
    } else if (i == 1 && (arg == "info" || arg == "bench")) {
      command = arg;
    } else if (command == "bench" && op.empty() && arg[0] != '-') {
      op = arg;
    } else {
      throw UsageError{"streamattn: unknown argument '" + arg + "' (see streamattn --help)"};
    }
  }
  if (options.quick && options.repeats == BenchOptions().repeats) options.repeats = 3;
  if (command == "info") return RunInfo(options.threads);

  const auto it = Benches().find(op);
  if (it == Benches().end()) {
    std::string ops = "sweep";
    for (const auto& entry : Benches()) ops += " " + entry.first;
    throw UsageError{
        "streamattn bench: " + (op.empty() ? std::string("needs an op") : "no op '" + op + "'") +
        " (" + ops + ")"};
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

int main(int argc, char** argv) {
  try {
    return streamattn::bench::Main(argc, argv);
  } catch (const streamattn::bench::UsageError& e) {
    std::fprintf(stderr, "%s\n", e.message.c_str());
    return 2;
  }
}
