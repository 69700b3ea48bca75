// The workload behind `streamattn run`: one attention layer's prefill and decoding steps over a
// growing KV cache, timed, with sampled rows checked against the double-precision oracle.
#ifndef STREAMATTN_BENCH_RUN_LAYER_H_
#define STREAMATTN_BENCH_RUN_LAYER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "streamattn/streamattn.h"

namespace streamattn {
namespace bench {

struct LayerConfig {
  std::string model = "Llama-3-8B";
  int64_t heads_q = 32, heads_kv = 8, head_dim = 128;
  int64_t window = -1;  // keys before the query each query sees; -1: all (causal)
  double softcap = 0.0;
  sattn_dtype dtype = SATTN_DTYPE_BF16;
  int64_t batch = 1, prompt = 4096, decode = 32;
  int threads = 0;
  int repeats = 3;
  int64_t check_rows = 16;
  size_t bandwidth_bytes = size_t{1} << 30;  // the read-bandwidth probe's buffer
};

struct LayerResult {
  double prefill_ms = 0, prefill_gflops = 0;
  double decode_step_ms = 0, decode_total_ms = 0, decode_gbps = 0;
  int64_t rows_checked = 0, steps_checked = 0;
  double max_error = 0;  // max |out - oracle| / max |oracle| over the checked rows
  double tolerance = 0;
};

LayerResult RunLayer(sattn_context* ctx, const LayerConfig& config);

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_RUN_LAYER_H_
