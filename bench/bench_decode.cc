// `streamattn bench decode`: one decoding step (seq_q = 1, causal) against a KV cache, in GB/s
// of K and V bytes read, as a fraction of the read bandwidth the tool measures in the same run
// (all threads summing a buffer far larger than the last-level cache). Each timed call reads a
// different copy of the cache, rotating through at least 1 GiB, so the cache is timed coming
// from memory, not from the LLC. MLA's steps and chunks of MLA chunked prefill, GEMMs, are rows
// of their own, in GFLOP/s against the arithmetic peaks (mla_decode_rows.cc).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/dtype.h"
#include "hwy/aligned_allocator.h"
#include "machine_limits.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

struct DecodeShape {
  int64_t batch, heads_q, heads_kv, head_dim, cache;
  sattn_dtype kv_dtype;       // f32, f16, bf16, or a quantized format (i8, fp8_e4m3, i4)
  int64_t page_size;          // 0: contiguous
  int64_t group = 0;          // i8, i4: channels per f16 scale (0: one scale a row)
  bool int8_queries = false;  // i4: sattn_attention_options.int8_queries (name: "q8")

  bool Quantized() const {
    return kv_dtype == SATTN_DTYPE_I8 || kv_dtype == SATTN_DTYPE_FP8_E4M3 ||
           kv_dtype == SATTN_DTYPE_I4;
  }
  int64_t Group() const { return group > 0 ? group : head_dim; }
  bool GroupScaled() const { return Quantized() && kv_dtype != SATTN_DTYPE_FP8_E4M3; }
  std::string Name() const {
    char format[32];
    std::snprintf(format, sizeof(format), "%s", DTypeName(kv_dtype));
    if (GroupScaled())
      std::snprintf(format, sizeof(format), "%s g%" PRId64, DTypeName(kv_dtype), Group());
    char buffer[128];
    std::snprintf(buffer, sizeof(buffer),
                  "b%" PRId64 " h%" PRId64 "/%" PRId64 " d%" PRId64 " c%" PRId64 " %s%s%s", batch,
                  heads_q, heads_kv, head_dim, cache, format, int8_queries ? " q8" : "",
                  page_size ? " paged16" : "");
    return buffer;
  }
  // Bits of a K or V element (values only) and bytes of one K or V tensor's values.
  int64_t ElementBits() const {
    switch (kv_dtype) {
      case SATTN_DTYPE_F32:
        return 32;
      case SATTN_DTYPE_I8:
      case SATTN_DTYPE_FP8_E4M3:
        return 8;
      case SATTN_DTYPE_I4:
        return 4;
      default:
        return 16;
    }
  }
  int64_t ValueBytes() const { return batch * cache * heads_kv * head_dim * ElementBits() / 8; }
  // Bytes of one tensor's f16 group scales (0 without).
  int64_t ScaleBytes() const {
    return GroupScaled() ? batch * cache * heads_kv * (head_dim / Group()) * 2 : 0;
  }
  // What a step reads: K and V, values and scales.
  int64_t KvBytes() const { return 2 * (ValueBytes() + ScaleBytes()); }
  int64_t PageBytes() const { return page_size * heads_kv * head_dim * ElementBits() / 8; }
  // Flops per byte of K and V: each key of a kv head (2 x head_dim elements) meets its
  // heads_q / heads_kv query rows in a dot product and in P.V, an FMA (2 flops) per element
  // and row. f16 h32/8: 4 flops per byte; f16 h8/8: 1; i8 twice, i4 four times as many.
  double FlopsPerByte() const {
    return 2.0 * static_cast<double>(heads_q / heads_kv) * 8.0 / static_cast<double>(ElementBits());
  }
  // The same shape with an f16 cache, which quantized rows are timed against.
  DecodeShape F16Twin() const {
    return DecodeShape{batch, heads_q, heads_kv, head_dim, cache, SATTN_DTYPE_F16, page_size};
  }
};

std::vector<DecodeShape> Shapes(bool quick) {
  std::vector<DecodeShape> shapes;
  if (quick) {
    shapes.push_back({1, 32, 8, 128, 4096, SATTN_DTYPE_F16, 0});
    shapes.push_back({1, 32, 8, 128, 4096, SATTN_DTYPE_F16, 16});
    shapes.push_back({1, 32, 8, 128, 4096, SATTN_DTYPE_I8, 0, 32});
    shapes.push_back({1, 32, 8, 128, 4096, SATTN_DTYPE_I4, 0, 32, true});
    return shapes;
  }
  // Quantized caches first (the shapes their targets name), each beside its f16 twin.
  for (int64_t cache : {32768, 131072})
    for (int64_t batch : {1, 8})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}})
        for (auto [format, group] : {std::pair<sattn_dtype, int64_t>{SATTN_DTYPE_I8, 32},
                                     {SATTN_DTYPE_I8, 0},
                                     {SATTN_DTYPE_FP8_E4M3, 0},
                                     {SATTN_DTYPE_I4, 32}})
          for (int64_t page : {0, 16}) {
            if (page > 0 && (cache != 32768 || batch != 1)) continue;
            const DecodeShape s{batch, hq, hkv, 128, cache, format, page, group};
            if (s.F16Twin().KvBytes() > (int64_t{3} << 30)) continue;
            shapes.push_back(s);
            // The integer scores beside the exact ones, contiguous caches.
            if (format == SATTN_DTYPE_I4 && page == 0) {
              DecodeShape q8 = s;
              q8.int8_queries = true;
              shapes.push_back(q8);
            }
          }
  for (int64_t cache : {32768, 4096, 131072})
    for (int64_t batch : {1, 8})
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{32, 8}, {8, 8}})
        for (int64_t dim : {128, 64})
          for (sattn_dtype dtype : {SATTN_DTYPE_F16, SATTN_DTYPE_BF16, SATTN_DTYPE_F32})
            for (int64_t page : {0, 16}) {
              const DecodeShape s{batch, hq, hkv, dim, cache, dtype, page};
              if (s.KvBytes() <= (int64_t{3} << 30)) shapes.push_back(s);  // fits 24 GiB hosts
            }
  return shapes;
}

// One copy of the cache (k and v) and its views; pages, when paged, are shuffled. A paged
// cache also has contiguous views of the same bytes (the keys in page order), so paged and
// contiguous decoding can be timed side by side on the same memory.
struct Cache {
  // f32 takes two slots per element, 8-bit formats half a slot, i4 a quarter. 64-byte aligned, as a
  // runtime's cache is (PyTorch's CPU allocator, for one); a std::vector's large block starts 16
  // bytes past a page, which until the kernel learnt to prefetch the last line of such rows cost
  // head_dim 64 decoding 25-40%.
  hwy::AlignedFreeUniquePtr<uint16_t[]> k, v;
  // Quantized: f16 group scales laid out like the cache (i8, i4), or f32 per kv head (fp8).
  hwy::AlignedFreeUniquePtr<uint16_t[]> k_scales, v_scales;
  std::vector<float> head_scales;
  sattn_tensor k_scales_view{}, v_scales_view{};
  std::vector<int32_t> block_table;
  // Paged: the identity table, pages in address order (the bytes and order of contiguous).
  std::vector<int32_t> in_order_table;
  sattn_tensor k_view, v_view, table_view, in_order_table_view;
  sattn_tensor contiguous_k_view, contiguous_v_view;
  // Paged: each page's K and V bytes, page after page, in block-table order and in address
  // order, for the read limit of either order (TimeBlockReadMs).
  std::vector<const void*> table_order_pages, address_order_pages;
  // All of K's bytes then all of V's, in kChunkBytes blocks: a plain read of the copy.
  std::vector<const void*> chunks;
};

// A multiple of 64 that divides every shape's K bytes and its scales' (cache >= 4096 keys of
// >= 16 bytes; at least 8 kv heads of f16 scales).
constexpr int64_t kChunkBytes = int64_t{64} << 10;

Cache MakeCache(const DecodeShape& s, std::mt19937& rng) {
  Cache c;
  const int64_t n = s.ValueBytes() / 2;
  c.k = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(n));
  c.v = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(n));
  if (!c.k || !c.v) {
    std::fprintf(stderr, "streamattn: no memory for a %s cache\n", s.Name().c_str());
    std::exit(1);
  }
  for (int64_t i = 0; i < n; ++i) {
    // Small finite values in every dtype: a random mantissa under a fixed exponent (for the
    // 8-bit formats two bytes of it, finite E4M3 codes and any integers alike).
    const uint16_t bits = static_cast<uint16_t>(0x3000 | (rng() & 0x3FF));
    c.k[i] = bits;
    c.v[i] = static_cast<uint16_t>(bits ^ 0x8000);
  }
  if (s.GroupScaled()) {
    const int64_t scales = s.ScaleBytes() / 2;
    c.k_scales = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(scales));
    c.v_scales = hwy::AllocateAligned<uint16_t>(static_cast<size_t>(scales));
    for (int64_t i = 0; i < scales; ++i) c.k_scales[i] = c.v_scales[i] = 0x1C00 | (rng() & 0xFF);
    const int64_t groups = s.head_dim / s.Group();
    const int64_t shape[4] = {s.page_size ? s.batch * s.cache / s.page_size : s.batch,
                              s.page_size ? s.page_size : s.cache, s.heads_kv, groups};
    c.k_scales_view = sattn_tensor_contiguous(c.k_scales.get(), SATTN_DTYPE_F16, 4, shape);
    c.v_scales_view = sattn_tensor_contiguous(c.v_scales.get(), SATTN_DTYPE_F16, 4, shape);
  } else if (s.Quantized()) {
    c.head_scales.assign(static_cast<size_t>(s.heads_kv), 0.01f);
    const int64_t shape[1] = {s.heads_kv};
    c.k_scales_view = sattn_tensor_contiguous(c.head_scales.data(), SATTN_DTYPE_F32, 1, shape);
    c.v_scales_view = c.k_scales_view;
  }
  if (s.page_size > 0) {
    const int64_t pages = s.batch * s.cache / s.page_size;
    const int64_t shape[4] = {pages, s.page_size, s.heads_kv, s.head_dim};
    c.k_view = sattn_tensor_contiguous(c.k.get(), s.kv_dtype, 4, shape);
    c.v_view = sattn_tensor_contiguous(c.v.get(), s.kv_dtype, 4, shape);
    c.block_table.resize(pages);
    for (int64_t i = 0; i < pages; ++i) c.block_table[i] = static_cast<int32_t>(i);
    c.in_order_table = c.block_table;
    std::shuffle(c.block_table.begin(), c.block_table.end(), rng);
    const int64_t table_shape[2] = {s.batch, s.cache / s.page_size};
    c.table_view = sattn_tensor_contiguous(c.block_table.data(), SATTN_DTYPE_I32, 2, table_shape);
    c.in_order_table_view =
        sattn_tensor_contiguous(c.in_order_table.data(), SATTN_DTYPE_I32, 2, table_shape);
    const int64_t page_bytes = s.PageBytes();
    auto add_page = [&](std::vector<const void*>& list, int64_t page) {
      list.push_back(reinterpret_cast<const char*>(c.k.get()) + page * page_bytes);
      list.push_back(reinterpret_cast<const char*>(c.v.get()) + page * page_bytes);
    };
    for (int64_t i = 0; i < pages; ++i) {
      add_page(c.table_order_pages, c.block_table[i]);
      add_page(c.address_order_pages, i);
    }
  }
  for (const uint16_t* tensor : {c.k.get(), c.v.get(), c.k_scales.get(), c.v_scales.get()}) {
    const char* bytes = reinterpret_cast<const char*>(tensor);
    const int64_t size =
        tensor == c.k.get() || tensor == c.v.get() ? s.ValueBytes() : s.ScaleBytes();
    for (int64_t at = 0; at < size; at += kChunkBytes) c.chunks.push_back(bytes + at);
  }
  const int64_t shape[4] = {s.batch, s.cache, s.heads_kv, s.head_dim};
  c.contiguous_k_view = sattn_tensor_contiguous(c.k.get(), s.kv_dtype, 4, shape);
  c.contiguous_v_view = sattn_tensor_contiguous(c.v.get(), s.kv_dtype, 4, shape);
  if (s.page_size == 0) c.k_view = c.contiguous_k_view, c.v_view = c.contiguous_v_view;
  return c;
}

Row MeasureShape(sattn_context* ctx, int threads, const DecodeShape& s, const BenchOptions& options,
                 double* gbps_out) {
  std::mt19937 rng(11);
  auto copies_of = [](const DecodeShape& shape) {
    return std::max<int64_t>(2, std::min<int64_t>(64, (int64_t{1} << 30) / shape.KvBytes() + 1));
  };
  const int64_t copies = copies_of(s);
  std::vector<Cache> caches;
  for (int64_t i = 0; i < copies; ++i) caches.push_back(MakeCache(s, rng));
  // A quantized row is timed against the same shape's f16 cache, in alternation.
  const DecodeShape twin = s.F16Twin();
  std::vector<Cache> twin_caches;
  for (int64_t i = 0; i < (s.Quantized() ? copies_of(twin) : 0); ++i) {
    twin_caches.push_back(MakeCache(twin, rng));
  }
  std::vector<float> q(s.batch * s.heads_q * s.head_dim, 0.1f), out(q.size());
  const int64_t q_shape[4] = {s.batch, 1, s.heads_q, s.head_dim};
  const sattn_tensor q_view = sattn_tensor_contiguous(q.data(), SATTN_DTYPE_F32, 4, q_shape);
  const sattn_tensor out_view = sattn_tensor_contiguous(out.data(), SATTN_DTYPE_F32, 4, q_shape);
  int64_t next = 0;
  // One decoding step on the next copy of the cache, paged (as the shape says; through the
  // identity table when in_order) or through the copy's contiguous views.
  auto step = [&](bool paged, bool in_order = false, bool f16_twin = false) {
    Cache& c = f16_twin ? twin_caches[next++ % twin_caches.size()] : caches[next++ % copies];
    sattn_attention_options attention{};
    attention.struct_size = sizeof(attention);
    attention.causal = 1;
    attention.block_table = !paged ? nullptr : in_order ? &c.in_order_table_view : &c.table_view;
    if (s.Quantized() && !f16_twin) {
      attention.k_scales = &c.k_scales_view;
      attention.v_scales = &c.v_scales_view;
      attention.int8_queries = s.int8_queries;
    }
    const sattn_tensor* k = paged ? &c.k_view : &c.contiguous_k_view;
    const sattn_tensor* v = paged ? &c.v_view : &c.contiguous_v_view;
    CheckOk(sattn_attention(ctx, &q_view, k, v, &out_view, nullptr, &attention), "sattn_attention");
  };
  const bool paged = s.page_size > 0;
  // The row's step timings: these back to back, then one beside each plain read below. The
  // first alone span a fifth of a second, and a dip of the shared machine that long set a
  // row's median (0.77 of the read bandwidth, its alternated pairs 1.32, and the same shape
  // 0.86-0.88 in runs of its own); with the later ones the median spans the whole row.
  std::vector<double> step_ms = TimesMs(options.repeats, [&] { step(paged); });
  Row row;
  row.Set("op", "decode")
      .Set("name", s.Name())
      .Set("batch", s.batch)
      .Set("heads_q", s.heads_q)
      .Set("heads_kv", s.heads_kv)
      .Set("head_dim", s.head_dim)
      .Set("seq_q", 1)
      .Set("seq_k", s.cache)
      .Set("causal", true)
      .Set("q_dtype", "f32")
      .Set("kv_dtype", DTypeName(s.kv_dtype))
      .Set("paged", s.page_size > 0)
      .Set("page_size", s.page_size)
      .Set("threads", threads);
  if (s.GroupScaled()) row.Set("kv_group", s.Group()).Set("int8_queries", s.int8_queries);
  if (s.Quantized()) {
    // Quantized caches are for reading fewer bytes: how much faster than the f16 cache of the
    // same shape, timed call for call (above 1: faster).
    const double speedup = MedianTimeRatio(
        2 * options.repeats + 1, [&] { step(paged, false, true); }, [&] { step(paged); });
    row.Set("speedup_vs_f16", speedup).Set("scale_bytes", 2 * s.ScaleBytes());
    std::fprintf(stderr, "decode %s: %.3fx the f16 cache's speed, timed alternately\n",
                 s.Name().c_str(), speedup);
  }
  if (paged && s.Quantized()) {
    // Paged quantized rows: the speed-up over f16 is their claim; the paged fields below are
    // the f16 rows'.
  } else if (paged) {
    // The target compares paged with contiguous decoding. Timed apart, minutes apart, the two
    // rows differ by the machine's drift as much as by the paging; timed in alternation on the
    // same memory, they differ by the paging alone. Above 1: paged is faster.
    const double speed = MedianTimeRatio(
        2 * options.repeats + 1, [&] { step(false); }, [&] { step(true); });
    // What the memory system allows for the same reordering: a plain read of the cache's
    // pages in block-table order against address order (shuffled pages read slower even
    // without any attention, e.g. 0.94 for 32 KiB pages on the machine this was written on).
    auto read_pages = [&](bool table_order) {
      const Cache& c = caches[next++ % copies];
      const auto& list = table_order ? c.table_order_pages : c.address_order_pages;
      TimeBlockReadMs(threads, list.data(), list.size(), static_cast<size_t>(s.PageBytes()));
    };
    const double read_speed = MedianTimeRatio(
        2 * options.repeats + 1, [&] { read_pages(false); }, [&] { read_pages(true); });
    // The kernel's own cost of paging, apart from the memory order: the same bytes read in
    // the same order as contiguous, through a block table (the identity).
    const double in_order_speed = MedianTimeRatio(
        2 * options.repeats + 1, [&] { step(false); }, [&] { step(true, /*in_order=*/true); });
    row.Set("paged_speed_vs_contiguous", speed)
        .Set("paged_read_speed_vs_contiguous", read_speed)
        .Set("paged_in_order_speed_vs_contiguous", in_order_speed);
    std::fprintf(stderr,
                 "decode %s: paged / contiguous speed, timed alternately: %.3f (a plain read of "
                 "the pages in table order / in address order: %.3f; paged with the pages in "
                 "address order / contiguous: %.3f)\n",
                 s.Name().c_str(), speed, read_speed, in_order_speed);
  }
  // The step against a plain read of as many bytes of another copy, timed in alternation:
  // bandwidth_fraction compares the step's median with a bandwidth measured minutes apart, and
  // on a shared machine the speed drifts in between (a fraction of 0.37 next to 0.99 for the
  // same shape was seen); each pair here meets the same minute. A timing covers >= 64 MiB.
  const int64_t per_timing = std::max<int64_t>(1, (int64_t{64} << 20) / s.KvBytes());
  std::vector<double> ratios;
  for (int pair = 0; pair < 2 * options.repeats + 1; ++pair) {
    double read_ms = 0.0;
    for (int64_t i = 0; i < per_timing; ++i) {
      const Cache& c = caches[next++ % copies];
      read_ms += TimeBlockReadMs(threads, c.chunks.data(), c.chunks.size(), kChunkBytes);
    }
    step_ms.push_back(TimeCallsMs(static_cast<int>(per_timing), [&] { step(paged); }));
    ratios.push_back(read_ms / (per_timing * step_ms.back()));
  }
  const double fraction_alternated = Median(ratios);
  const double ms = Median(step_ms);
  const double gbps = static_cast<double>(s.KvBytes()) / (ms * 1e6);
  row.Set("median_ms", ms)
      .Set("gbps", gbps)
      .Set("bandwidth_fraction_alternated", fraction_alternated);
  std::fprintf(stderr, "decode %s: %.3f of a plain read of the same bytes, timed alternately\n",
               s.Name().c_str(), fraction_alternated);
  *gbps_out = gbps;
  return row;
}

// The row against the machine's read bandwidth, and against the roofline: the lower of that
// bandwidth and the rate the FMA peak allows at this shape's flops per byte. On a 2-vCPU VM
// the FMA chains on 2 threads were seen to run twice as fast as on 1 in one hour and no faster
// in another (the vCPUs then shared one core's vector unit): at such times grouped-query f16
// decoding is bound by the FMAs before memory, and only a limit measured in the run shows it.
// Sets the row's fields and prints the roofline line.
void SetLimitFields(Row& row, const DecodeShape& s, double gbps, double bandwidth,
                    double fma_gflops) {
  const double compute_gbps = fma_gflops / s.FlopsPerByte();
  const double roofline_fraction = gbps / std::min(bandwidth, compute_gbps);
  std::fprintf(stderr,
               "decode %s: %.1f GB/s; read bandwidth %.1f, FMA peak %.0f GFLOP/s (%.1f GB/s at "
               "%.0f flops per byte): %.3f of the roofline\n",
               s.Name().c_str(), gbps, bandwidth, fma_gflops, compute_gbps, s.FlopsPerByte(),
               roofline_fraction);
  row.Set("bandwidth_fraction", gbps / bandwidth)
      .Set("read_bandwidth_gbps", bandwidth)
      .Set("baseline", "measured read bandwidth (multi-threaded sum over 1 GiB)")
      .Set("baseline_median_ms", static_cast<double>(s.KvBytes()) / (bandwidth * 1e6))
      .Set("ratio", gbps / bandwidth)
      .Set("fma_peak_gflops", fma_gflops)
      .Set("compute_limit_gbps", compute_gbps)
      .Set("roofline_fraction", roofline_fraction);
}

}  // namespace

std::vector<Row> BenchDecode(const BenchOptions& options) {
  ContextPtr ctx = MakeContext(options.threads);
  const int threads = ContextThreads(ctx.get());
  // The bandwidth is measured before the first row and after the last, and the rows are
  // compared with the larger: on a shared machine a dip while measuring it once would
  // flatter every row (fractions above 1 were seen).
  const double bandwidth_before = MeasureReadBandwidthGbps(threads);
  const double fma_before = MeasureFmaPeakGflops(threads);
  std::vector<Measured<DecodeShape>> measured;  // figure: GB/s
  std::vector<Row> rows = MeasureSelected(
      Shapes(options.quick), options,
      [&](const DecodeShape& s, double* gbps) {
        Row row = MeasureShape(ctx.get(), threads, s, options, gbps);
        std::fprintf(stderr, "decode %s: %.1f GB/s (read bandwidth before: %.1f)\n",
                     s.Name().c_str(), *gbps, bandwidth_before);
        return row;
      },
      &measured);
  // MLA decoding and chunked prefill are GEMMs (mla_decode_rows.cc): their rows are set against
  // the arithmetic peaks, not the bandwidth.
  const double bf16_before = MeasureBf16DotPeakGflops(threads);
  std::vector<double> mla_gflops;
  std::vector<Row> mla = MlaRows(ctx.get(), threads, options, &mla_gflops);
  const double bandwidth = std::max(bandwidth_before, MeasureReadBandwidthGbps(threads));
  const double fma_gflops = std::max(fma_before, MeasureFmaPeakGflops(threads));
  for (size_t i = 0; i < measured.size(); ++i) {
    SetLimitFields(rows[i], measured[i].shape, measured[i].figure, bandwidth, fma_gflops);
  }
  const double bf16_peak = std::max(bf16_before, MeasureBf16DotPeakGflops(threads));
  for (size_t i = 0; i < mla.size(); ++i) {
    mla[i].Set("peak_fraction", mla_gflops[i] / fma_gflops).Set("fma_peak_gflops", fma_gflops);
    if (bf16_peak > 0) {
      mla[i]
          .Set("bf16_dot_peak_gflops", bf16_peak)
          .Set("bf16_peak_fraction", mla_gflops[i] / bf16_peak);
    }
    std::fprintf(stderr,
                 "%s %s: %.3f of the FMA peak (%.0f GFLOP/s), %.3f of the bf16 dot-product "
                 "peak (%.0f GFLOP/s; 0: none)\n",
                 mla[i].Get("op").c_str(), mla[i].Get("name").c_str(), mla_gflops[i] / fma_gflops,
                 fma_gflops, bf16_peak > 0 ? mla_gflops[i] / bf16_peak : 0.0, bf16_peak);
    rows.push_back(mla[i]);
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
