// What every `streamattn bench <op>` subcommand shares: its options, and a context helper.
#ifndef STREAMATTN_BENCH_BENCH_COMMON_H_
#define STREAMATTN_BENCH_BENCH_COMMON_H_

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "json_writer.h"
#include "streamattn/streamattn.h"

namespace streamattn {
namespace bench {

struct BenchOptions {
  bool json = false;
  int repeats = 7;     // timed runs; the median is reported
  int threads = 0;     // 0: all cores
  bool quick = false;  // smaller shapes, fewer repeats (smoke tests, emulators)
  std::string filter;  // run only cases whose name contains it
};

struct ContextDeleter {
  void operator()(sattn_context* ctx) const { sattn_context_destroy(ctx); }
};
using ContextPtr = std::unique_ptr<sattn_context, ContextDeleter>;

// A CPU context with `threads` threads; exits with the library's message on failure.
inline ContextPtr MakeContext(int threads) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = threads;
  options.backend = SATTN_BACKEND_CPU;
  sattn_context* ctx = nullptr;
  if (sattn_context_create(&options, &ctx) != SATTN_OK) {
    std::fprintf(stderr, "streamattn: cannot create a context: %s\n", sattn_last_error());
    std::exit(1);
  }
  return ContextPtr(ctx);
}

inline int ContextThreads(sattn_context* ctx) {
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  sattn_context_get_info(ctx, &info);
  return info.num_threads;
}

// Exits with the library's message when a call fails: a benchmark of a failing call is noise.
inline void CheckOk(sattn_status status, const char* what) {
  if (status == SATTN_OK) return;
  std::fprintf(stderr, "streamattn: %s failed: %s: %s\n", what, sattn_status_string(status),
               sattn_last_error());
  std::exit(1);
}

std::vector<Row> BenchDecode(const BenchOptions& options);
std::vector<Row> BenchExp2(const BenchOptions& options);
std::vector<Row> BenchPrefill(const BenchOptions& options);
int RunRssProbe(int64_t seq);  // the child process of the prefill memory row
std::vector<Row> BenchSoftmax(const BenchOptions& options);
std::vector<Row> BenchTopK(const BenchOptions& options);

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_BENCH_COMMON_H_
