// Google Benchmark microbenchmarks of the public kernels, for quick A/B work on one machine.
// The claims (ratios against baselines) come from `streamattn bench`, not from here.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "streamattn/streamattn.h"

namespace {

void BM_Exp2(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -30.0f * static_cast<float>(i) / static_cast<float>(n);
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = 1;
  sattn_context* ctx = nullptr;
  if (sattn_context_create(&options, &ctx) != SATTN_OK) {
    state.SkipWithError(sattn_last_error());
    return;
  }
  for (auto _ : state) {
    sattn_exp2(ctx, x.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
  sattn_context_destroy(ctx);
}
BENCHMARK(BM_Exp2)->Arg(1024)->Arg(65536);

void BM_StdExp2f(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -30.0f * static_cast<float>(i) / static_cast<float>(n);
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp2f(x[i]);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_StdExp2f)->Arg(1024)->Arg(65536);

}  // namespace
