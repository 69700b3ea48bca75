// `streamattn info`: what the library is and what it would run on, on this machine.
#include <cstdio>

#include "bench_common.h"

namespace streamattn {
namespace bench {

int RunInfo(int threads) {
  // The backend a default context gets here (STREAMATTN_BACKEND applies), and why.
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = threads;
  sattn_context* created = nullptr;
  if (sattn_context_create(&options, &created) != SATTN_OK) {
    std::printf("backend: none (%s)\n", sattn_last_error());
    return 1;
  }
  ContextPtr ctx(created);
  const sattn_context_info info = ContextInfo(ctx.get());
  std::printf("streamattn %s\n", sattn_version());
  std::printf("simd target (chosen at run time): %s\n", info.simd_target);
  std::printf("simd targets compiled in: %s\n", info.compiled_targets);
  std::printf("threads: %d\n", info.num_threads);
  // STREAMATTN_CPU_KERNEL applies.
  std::printf("cpu prefill tile kernel: f32 %s, f16 %s, bf16 %s\n", info.f32_kernel,
              info.f16_kernel, info.bf16_kernel);
  std::printf("backend: %s (%s)\n", info.backend == SATTN_BACKEND_CUDA ? "cuda" : "cpu",
              info.backend_reason);
  std::printf("backends:\n  cpu: available\n  cuda: %s\n", info.cuda_availability);
  return 0;
}

}  // namespace bench
}  // namespace streamattn
