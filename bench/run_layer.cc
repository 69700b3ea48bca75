// One attention layer serving a request, as `streamattn run` times it. The KV cache is one
// buffer per tensor sized for the prompt and every generated token; each call sees a view of
// its first L keys (strides of the full buffer, no copy), as an inference engine's cache is.
// Before each decoding step a 64 MiB buffer is read, untimed: in a real model the other layers'
// caches and weights pass through the last-level cache between two steps of this one, so the
// cache is timed coming from memory.
#include "run_layer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "bench_common.h"
#include "host_buffer.h"
#include "reference/reference_attention.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

using reference::Array;

// Fills elements [begin, end) of b; q and k in [-2, 2) give scores of standard deviation about
// 1.3 at head_dim 128, so rows are peaked rather than flat, as in a trained model.
void Fill(HostBuffer& b, int64_t begin, int64_t end, FastRandom& rng) {
  for (int64_t i = begin; i < end; ++i) b.Set(i, rng.Uniform(-2.0f, 2.0f));
}

// Query-key pairs a causal (optionally windowed) mask leaves visible, for seq_q queries over
// seq_k keys aligned bottom-right.
double VisiblePairs(int64_t seq_q, int64_t seq_k, int64_t window) {
  double pairs = 0;
  for (int64_t i = 0; i < seq_q; ++i) {
    const int64_t diagonal = i + seq_k - seq_q;
    const int64_t first = window >= 0 ? std::max<int64_t>(0, diagonal - window) : 0;
    pairs += static_cast<double>(std::min(diagonal, seq_k - 1) - first + 1);
  }
  return pairs;
}

struct Check {
  double max_error = 0;
};

// Compares query row `row` of `out` (rows of [batch, *, heads_q, head_dim]) with the oracle
// over keys [0, keys) of the cache, for every sequence and head.
void CheckRow(const LayerConfig& c, const HostBuffer& q, int64_t q_rows, int64_t q_row,
              const HostBuffer& out, const HostBuffer& k, const HostBuffer& v, int64_t capacity,
              int64_t keys, Check* check) {
  const int64_t hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  // Only the window's keys can be seen; the oracle needs no others (no ALiBi here).
  const int64_t first = c.window >= 0 ? std::max<int64_t>(0, keys - 1 - c.window) : 0;
  const int64_t n = keys - first;
  reference::AttentionSpec spec;
  spec.causal = true;
  spec.window_left = c.window;
  spec.softcap = c.softcap;
  for (int64_t b = 0; b < c.batch; ++b) {
    Array qa({1, 1, hq, d}), ka({1, n, hkv, d}), va({1, n, hkv, d});
    const int64_t q_base = (b * q_rows + q_row) * hq * d;
    for (int64_t i = 0; i < hq * d; ++i) qa.data[i] = q.Get(q_base + i);
    const int64_t kv_base = (b * capacity + first) * hkv * d;
    for (int64_t i = 0; i < n * hkv * d; ++i) {
      ka.data[i] = k.Get(kv_base + i);
      va.data[i] = v.Get(kv_base + i);
    }
    const auto want = reference::Attention(qa, ka, va, spec);
    double err = 0, scale = 0;
    for (int64_t i = 0; i < hq * d; ++i) {
      err = std::max(err, std::fabs(out.Get(q_base + i) - want.out.data[i]));
      scale = std::max(scale, std::fabs(want.out.data[i]));
    }
    check->max_error = std::max(check->max_error, scale > 0 ? err / scale : err);
  }
}

// Reads `bytes` of memory so that what the last-level cache held is gone.
void EvictCaches(std::vector<uint64_t>& junk) {
  uint64_t sum = 0;
  for (size_t i = 0; i < junk.size(); i += 8) sum += junk[i];  // one read per 64-byte line
  junk[0] = sum;                                               // keeps the loop
}

}  // namespace

LayerResult RunLayer(sattn_context* ctx, const LayerConfig& c) {
  const int64_t hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const int64_t capacity = c.prompt + c.decode;
  FastRandom rng(2024);
  HostBuffer q(c.dtype, {c.batch, c.prompt, hq, d}), out(c.dtype, {c.batch, c.prompt, hq, d});
  HostBuffer k(c.dtype, {c.batch, capacity, hkv, d}), v(c.dtype, {c.batch, capacity, hkv, d});
  Fill(q, 0, c.batch * c.prompt * hq * d, rng);
  for (int64_t b = 0; b < c.batch; ++b) {  // the prompt's keys and values; decoding appends
    Fill(k, b * capacity * hkv * d, (b * capacity + c.prompt) * hkv * d, rng);
    Fill(v, b * capacity * hkv * d, (b * capacity + c.prompt) * hkv * d, rng);
  }

  sattn_attention_options options{};
  options.struct_size = sizeof(options);
  options.causal = 1;
  if (c.window >= 0) {
    options.has_window = 1;
    options.window_left = c.window;
    options.window_right = -1;
  }
  options.softcap = static_cast<float>(c.softcap);

  LayerResult r;
  // Prefill: the prompt attends to itself.
  {
    const sattn_tensor qv = q.View(), ov = out.View(), kv = k.View(c.prompt), vv = v.View(c.prompt);
    r.prefill_ms = MedianMs(
        c.repeats,
        [&] { CheckOk(sattn_attention(ctx, &qv, &kv, &vv, &ov, nullptr, &options), "prefill"); },
        0.0);
    const double flops = 4.0 * d * hq * c.batch * VisiblePairs(c.prompt, c.prompt, c.window);
    r.prefill_gflops = flops / (r.prefill_ms * 1e6);
  }
  Check check;
  for (int64_t j = 0; j < c.check_rows; ++j) {  // spread over the prompt, first and last included
    const int64_t row = c.check_rows == 1 ? c.prompt - 1 : j * (c.prompt - 1) / (c.check_rows - 1);
    CheckRow(c, q, c.prompt, row, out, k, v, capacity, row + 1, &check);
    ++r.rows_checked;
  }

  // Decode: each step appends its key and value, then its query attends to the whole cache.
  HostBuffer q_step(c.dtype, {c.batch, 1, hq, d}), out_step(c.dtype, {c.batch, 1, hq, d});
  std::vector<uint64_t> junk((size_t{64} << 20) / sizeof(uint64_t), 1);
  std::vector<double> step_ms;
  double bytes = 0;
  const int64_t element = c.dtype == SATTN_DTYPE_F32 ? 4 : 2;
  for (int64_t t = 0; t < c.decode; ++t) {
    const int64_t keys = c.prompt + t + 1;
    for (int64_t b = 0; b < c.batch; ++b) {
      Fill(k, (b * capacity + keys - 1) * hkv * d, (b * capacity + keys) * hkv * d, rng);
      Fill(v, (b * capacity + keys - 1) * hkv * d, (b * capacity + keys) * hkv * d, rng);
    }
    Fill(q_step, 0, c.batch * hq * d, rng);
    EvictCaches(junk);
    const sattn_tensor qv = q_step.View(), ov = out_step.View(), kv = k.View(keys),
                       vv = v.View(keys);
    const double start = NowMs();
    CheckOk(sattn_attention(ctx, &qv, &kv, &vv, &ov, nullptr, &options), "decode");
    step_ms.push_back(NowMs() - start);
    const int64_t visible = c.window >= 0 ? std::min(keys, c.window + 1) : keys;
    bytes += 2.0 * c.batch * visible * hkv * d * element;
    // Check 8 steps spread over the run (all of them when there are at most 8).
    const int64_t every = std::max<int64_t>(1, (c.decode + 7) / 8);
    if (t % every == 0 || t == c.decode - 1) {
      CheckRow(c, q_step, 1, 0, out_step, k, v, capacity, keys, &check);
      ++r.steps_checked;
    }
  }
  if (!step_ms.empty()) {
    for (double ms : step_ms) r.decode_total_ms += ms;
    r.decode_gbps = bytes / (r.decode_total_ms * 1e6);
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
    r.decode_step_ms = step_ms[step_ms.size() / 2];
  }
  r.max_error = check.max_error;
  // f32 accumulation over thousands of keys, plus the rounding of out to its dtype.
  r.tolerance = c.dtype == SATTN_DTYPE_F32 ? 5e-5 : c.dtype == SATTN_DTYPE_F16 ? 1e-3 : 8e-3;
  return r;
}

}  // namespace bench
}  // namespace streamattn
