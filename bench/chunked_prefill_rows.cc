// `streamattn bench prefill`'s chunked-prefill rows: a chunk of new rows (seq_q 512) against a
// longer cache (4096 keys, causal bottom-right), the cache f16 or quantized (i8 and i4 with f16
// scales per 32 channels, fp8 with a scale per kv head) by sattn_quantize_kv from the same f16
// rows. A quantized row carries its GFLOP/s (the products of the query-key pairs the mask
// leaves, as `streamattn run` counts them) and its speed against the f16 cache's, timed
// alternately. Prefill converts each K/V tile to f32 once per work item whatever its format, so
// the formats should cost about the same.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/dtype.h"
#include "host_buffer.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

struct ChunkShape {
  int64_t heads_q, heads_kv, head_dim, seq_q, seq_k;
  sattn_dtype kv_dtype;  // f16, i8, fp8_e4m3 or i4
  bool GroupScaled() const { return kv_dtype == SATTN_DTYPE_I8 || kv_dtype == SATTN_DTYPE_I4; }
  std::string Name() const {
    char buffer[128];
    std::snprintf(buffer, sizeof(buffer),
                  "chunked h%" PRId64 "/%" PRId64 " d%" PRId64 " q%" PRId64 " c%" PRId64 " %s%s",
                  heads_q, heads_kv, head_dim, seq_q, seq_k, DTypeName(kv_dtype),
                  GroupScaled() ? " g32" : "");
    return buffer;
  }
  // The query-key pairs a bottom-right causal mask leaves: query i sees seq_k - seq_q + i + 1.
  double Flops() const {
    const double pairs = static_cast<double>(seq_q) * (seq_k - seq_q) + seq_q * (seq_q + 1) / 2.0;
    return 4.0 * pairs * head_dim * heads_q;
  }
};

constexpr int64_t kGroup = 32;

// A cache of one format: the f16 rows themselves, or their quantized values and scales.
struct ChunkCache {
  std::vector<uint8_t> values, scales;
  std::vector<float> head_scales;
  sattn_tensor values_view{}, scales_view{};
};

ChunkCache Quantize(sattn_context* ctx, const ChunkShape& s, const sattn_tensor& f16_rows,
                    const HostBuffer& rows) {
  ChunkCache c;
  const int64_t n = s.seq_k * s.heads_kv * s.head_dim;
  const int64_t shape[4] = {1, s.seq_k, s.heads_kv, s.head_dim};
  c.values.resize(static_cast<size_t>(n));  // a byte an element at most
  c.values_view = sattn_tensor_contiguous(c.values.data(), s.kv_dtype, 4, shape);
  if (s.GroupScaled()) {
    const int64_t scale_shape[4] = {1, s.seq_k, s.heads_kv, s.head_dim / kGroup};
    c.scales.resize(static_cast<size_t>(2 * n / kGroup));
    c.scales_view = sattn_tensor_contiguous(c.scales.data(), SATTN_DTYPE_F16, 4, scale_shape);
  } else {
    c.head_scales.assign(static_cast<size_t>(s.heads_kv), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      float& m = c.head_scales[static_cast<size_t>(i / s.head_dim % s.heads_kv)];
      m = std::max(m, static_cast<float>(std::fabs(rows.Get(i))) / 448.0f);
    }
    const int64_t heads[1] = {s.heads_kv};
    c.scales_view = sattn_tensor_contiguous(c.head_scales.data(), SATTN_DTYPE_F32, 1, heads);
  }
  CheckOk(sattn_quantize_kv(ctx, &f16_rows, &c.values_view, &c.scales_view, nullptr),
          "sattn_quantize_kv");
  return c;
}

}  // namespace

std::vector<Row> ChunkedPrefillRows(sattn_context* ctx, int threads, const BenchOptions& options) {
  std::vector<Row> rows;
  const int64_t seq_q = options.quick ? 128 : 512, seq_k = options.quick ? 1024 : 4096;
  const ChunkShape f16_shape{32, 8, 128, seq_q, seq_k, SATTN_DTYPE_F16};
  FastRandom random(5);
  HostBuffer q(SATTN_DTYPE_F16, {1, seq_q, 32, 128}), out(SATTN_DTYPE_F16, {1, seq_q, 32, 128});
  HostBuffer k(SATTN_DTYPE_F16, {1, seq_k, 8, 128}), v(SATTN_DTYPE_F16, {1, seq_k, 8, 128});
  for (HostBuffer* b : {&q, &k, &v}) {
    for (int64_t i = 0; i < (b == &q ? seq_q * 32 : seq_k * 8) * 128; ++i) {
      b->Set(i, random.Uniform(-1.0f, 1.0f));
    }
  }
  const sattn_tensor q_view = q.View(), out_view = out.View(), k_view = k.View(), v_view = v.View();
  auto call = [&](const sattn_tensor& kk, const sattn_tensor& vv, const sattn_tensor* k_scales,
                  const sattn_tensor* v_scales) {
    sattn_attention_options o{};
    o.struct_size = sizeof(o);
    o.causal = 1;
    o.k_scales = k_scales;
    o.v_scales = v_scales;
    CheckOk(sattn_attention(ctx, &q_view, &kk, &vv, &out_view, nullptr, &o), "sattn_attention");
  };
  auto f16_call = [&] { call(k_view, v_view, nullptr, nullptr); };
  for (sattn_dtype format :
       {SATTN_DTYPE_F16, SATTN_DTYPE_I8, SATTN_DTYPE_FP8_E4M3, SATTN_DTYPE_I4}) {
    ChunkShape s = f16_shape;
    s.kv_dtype = format;
    if (!Selected(options, s.Name())) continue;
    Row row;
    double ms = 0.0;
    if (format == SATTN_DTYPE_F16) {
      ms = MedianMs(options.repeats, f16_call);
    } else {
      const ChunkCache kc = Quantize(ctx, s, k_view, k), vc = Quantize(ctx, s, v_view, v);
      auto quantized_call = [&] {
        call(kc.values_view, vc.values_view, &kc.scales_view, &vc.scales_view);
      };
      ms = MedianMs(options.repeats, quantized_call);
      row.Set("speedup_vs_f16", MedianTimeRatio(options.repeats, f16_call, quantized_call));
      if (s.GroupScaled()) row.Set("kv_group", kGroup);
    }
    const double gflops = s.Flops() / (ms * 1e6);
    row.Set("op", "chunked_prefill")
        .Set("name", s.Name())
        .Set("batch", 1)
        .Set("heads_q", s.heads_q)
        .Set("heads_kv", s.heads_kv)
        .Set("head_dim", s.head_dim)
        .Set("seq_q", s.seq_q)
        .Set("seq_k", s.seq_k)
        .Set("causal", true)
        .Set("q_dtype", "f16")
        .Set("kv_dtype", DTypeName(format))
        .Set("threads", threads)
        .Set("median_ms", ms)
        .Set("gflops", gflops);
    std::fprintf(stderr, "prefill %s: %.1f GFLOP/s%s%s\n", s.Name().c_str(), gflops,
                 format == SATTN_DTYPE_F16 ? "" : ", speed vs the f16 cache ",
                 format == SATTN_DTYPE_F16 ? "" : row.Get("speedup_vs_f16").c_str());
    rows.push_back(row);
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
