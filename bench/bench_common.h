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

// Whether --filter keeps the case called `name`.
inline bool Selected(const BenchOptions& options, const std::string& name) {
  return options.filter.empty() || name.find(options.filter) != std::string::npos;
}

// A case's shape and the figure (GB/s, ms) that its row is set against the machine's limits by.
template <typename Shape>
struct Measured {
  Shape shape;
  double figure;
};

// Runs measure(shape, &figure), which returns the case's row, on every case --filter keeps.
// *measured gets each row's shape and figure, row for row, for the fields set after the last
// case, against the machine's limits measured once more then.
template <typename Shape, typename Measure>
std::vector<Row> MeasureSelected(const std::vector<Shape>& shapes, const BenchOptions& options,
                                 Measure&& measure, std::vector<Measured<Shape>>* measured) {
  std::vector<Row> rows;
  for (const Shape& s : shapes) {
    if (!Selected(options, s.Name())) continue;
    double figure = 0.0;
    rows.push_back(measure(s, &figure));
    measured->push_back({s, figure});
  }
  return rows;
}

struct ContextDeleter {
  void operator()(sattn_context* ctx) const { sattn_context_destroy(ctx); }
};
using ContextPtr = std::unique_ptr<sattn_context, ContextDeleter>;

// Exits with the library's message when a call fails: a benchmark of a failing call is noise.
inline void CheckOk(sattn_status status, const char* what) {
  if (status == SATTN_OK) return;
  std::fprintf(stderr, "streamattn: %s failed: %s: %s\n", what, sattn_status_string(status),
               sattn_last_error());
  std::exit(1);
}

// A CPU context with `threads` threads (0: all cores) and the prefill tile kernel cpu_kernel
// (a sattn_cpu_kernel; STREAMATTN_CPU_KERNEL overrides it), or NULL with the library's message
// in sattn_last_error(); a caller under mpirun must abort the job rather than exit one rank.
inline sattn_context* NewCpuContext(int threads, int32_t cpu_kernel = SATTN_CPU_KERNEL_AUTO) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = threads;
  options.backend = SATTN_BACKEND_CPU;
  options.cpu_kernel = cpu_kernel;
  sattn_context* ctx = nullptr;
  return sattn_context_create(&options, &ctx) == SATTN_OK ? ctx : nullptr;
}

// NewCpuContext, exiting with the library's message on failure.
inline ContextPtr MakeContext(int threads, int32_t cpu_kernel = SATTN_CPU_KERNEL_AUTO) {
  ContextPtr ctx(NewCpuContext(threads, cpu_kernel));
  if (!ctx) {
    std::fprintf(stderr, "streamattn: cannot create a context: %s\n", sattn_last_error());
    std::exit(1);
  }
  return ctx;
}

// What the context runs with: threads, backend, SIMD target.
inline sattn_context_info ContextInfo(sattn_context* ctx) {
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  CheckOk(sattn_context_get_info(ctx, &info), "sattn_context_get_info");
  return info;
}

inline int ContextThreads(sattn_context* ctx) { return ContextInfo(ctx).num_threads; }

std::vector<Row> BenchDecode(const BenchOptions& options);
std::vector<Row> BenchExp2(const BenchOptions& options);
std::vector<Row> BenchPrefill(const BenchOptions& options);
// bench prefill's chunked-prefill rows (chunked_prefill_rows.cc): f16 and quantized caches.
std::vector<Row> ChunkedPrefillRows(sattn_context* ctx, int threads, const BenchOptions& options);
// bench decode's MLA rows (mla_decode_rows.cc): absorbed multi-head latent attention, a GEMM
// per decoding step and per chunk of a chunked prefill; *gflops gets each row's GFLOP/s, for
// the peak fractions set after the last row.
std::vector<Row> MlaRows(sattn_context* ctx, int threads, const BenchOptions& options,
                         std::vector<double>* gflops);
// bench prefill's packed-batch rows (packed_prefill_rows.cc): cu_seqlens against own calls
// and padding.
std::vector<Row> PackedPrefillRows(sattn_context* ctx, int threads, const BenchOptions& options);
int RunRssProbe(int64_t seq);  // the child process of the prefill memory row
std::vector<Row> BenchSoftmax(const BenchOptions& options);
std::vector<Row> BenchTopK(const BenchOptions& options);

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_BENCH_COMMON_H_
