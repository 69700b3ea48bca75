// `streamattn info`: what the library is and what it would run on, on this machine.
#include <cstdio>

#include "bench_common.h"

namespace streamattn {
namespace bench {

int RunInfo(int threads) {
  ContextPtr ctx = MakeContext(threads);
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  CheckOk(sattn_context_get_info(ctx.get(), &info), "sattn_context_get_info");
  std::printf("streamattn %s\n", sattn_version());
  std::printf("simd target (chosen at run time): %s\n", info.simd_target);
  std::printf("simd targets compiled in: %s\n", info.compiled_targets);
  std::printf("threads: %d\n", info.num_threads);
  std::printf("backend: %s (%s)\n", info.backend == SATTN_BACKEND_CUDA ? "cuda" : "cpu",
              info.backend_reason);
  std::printf("backends:\n  cpu: available\n  cuda: %s\n", info.cuda_availability);
  return 0;
}

}  // namespace bench
}  // namespace streamattn
