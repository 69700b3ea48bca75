// `streamattn bench prefill`'s packed-batch rows (sattn_attention_options.cu_seqlens_q and
// cu_seqlens_k): prompts of different lengths end to end in one call, against
//  - the sum of each prompt's own call (the target: the packed call within 5% of it, since it
//    does the same work with each sequence's own tiles; packed_vs_sum), and
//  - the same batch padded to its longest prompt (seq_q = seq_k = the longest for every
//    sequence, seqused_k giving each its keys): what a caller without cu_seqlens pays
//    (padded_vs_packed).
// A second row puts one long prompt beside thirty short ones and compares the packed call with
// the long prompt alone: the short ones should add their share of the work and no more
// (packed_vs_long, beside work_ratio, the ratio of the query-key pairs computed, and
// separate_calls_vs_long, the time of the long prompt's call and the short ones' call over the
// long one's: what a packed call that balances its threads perfectly pays). Every pair of
// timings is alternated within the run (timing.h), ratios are medians of the pairs'.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "host_buffer.h"
#include "timing.h"

namespace streamattn {
namespace bench {
namespace {

constexpr int64_t kHeads = 8, kDim = 128;

// Packed f16 q, k, v, out [1, total, 8, 128] of the prompts `lengths` (keys = queries, causal).
struct PackedPrompts {
  std::vector<int64_t> lengths;
  std::vector<int32_t> cu;  // prefix sums
  HostBuffer q, k, v, out;

  static int64_t Total(const std::vector<int64_t>& lengths) {
    int64_t total = 0;
    for (int64_t n : lengths) total += n;
    return total;
  }
  explicit PackedPrompts(std::vector<int64_t> lens)
      : lengths(std::move(lens)),
        q(SATTN_DTYPE_F16, {1, Total(lengths), kHeads, kDim}),
        k(SATTN_DTYPE_F16, {1, Total(lengths), kHeads, kDim}),
        v(SATTN_DTYPE_F16, {1, Total(lengths), kHeads, kDim}),
        out(SATTN_DTYPE_F16, {1, Total(lengths), kHeads, kDim}) {
    FastRandom random(34);
    for (HostBuffer* b : {&q, &k, &v}) {
      for (int64_t i = 0; i < Total(lengths) * kHeads * kDim; ++i) {
        b->Set(i, random.Uniform(-1.0f, 1.0f));
      }
    }
    cu.push_back(0);
    for (int64_t n : lengths) cu.push_back(cu.back() + static_cast<int32_t>(n));
  }

  // Rows [start, start + count) of a packed buffer, as a [1, count, 8, 128] view.
  static sattn_tensor Rows(HostBuffer& b, int64_t start, int64_t count) {
    sattn_tensor t = b.View();
    t.data = static_cast<uint16_t*>(t.data) + start * kHeads * kDim;  // f16: one slot each
    t.shape[1] = count;
    return t;
  }

  void Packed(sattn_context* ctx) {
    const sattn_tensor qv = q.View(), kv = k.View(), vv = v.View(), ov = out.View();
    const int64_t n[1] = {static_cast<int64_t>(cu.size())};
    const sattn_tensor cu_view = sattn_tensor_contiguous(cu.data(), SATTN_DTYPE_I32, 1, n);
    sattn_attention_options o{};
    o.struct_size = sizeof(o);
    o.causal = 1;
    o.cu_seqlens_q = &cu_view;
    o.cu_seqlens_k = &cu_view;
    CheckOk(sattn_attention(ctx, &qv, &kv, &vv, &ov, nullptr, &o), "sattn_attention (packed)");
  }

  // Prompt b's own call, on its rows of the packed buffers.
  void Own(sattn_context* ctx, size_t b) {
    const int64_t start = cu[b], count = lengths[b];
    const sattn_tensor qv = Rows(q, start, count), kv = Rows(k, start, count),
                       vv = Rows(v, start, count), ov = Rows(out, start, count);
    sattn_attention_options o{};
    o.struct_size = sizeof(o);
    o.causal = 1;
    CheckOk(sattn_attention(ctx, &qv, &kv, &vv, &ov, nullptr, &o), "sattn_attention (own)");
  }

  // The query-key pairs a causal mask leaves.
  double Pairs(size_t first, size_t end) const {
    double pairs = 0;
    for (size_t b = first; b < end; ++b) pairs += lengths[b] * (lengths[b] + 1) / 2.0;
    return pairs;
  }
};

// The batch padded to its longest prompt: [batch, longest, 8, 128], each sequence's keys
// limited by seqused_k (its queries are all `longest` rows: padding is paid for).
struct PaddedPrompts {
  int64_t batch, longest;
  std::vector<int32_t> used;
  HostBuffer q, k, v, out;
  explicit PaddedPrompts(const std::vector<int64_t>& lengths)
      : batch(static_cast<int64_t>(lengths.size())),
        longest(*std::max_element(lengths.begin(), lengths.end())),
        q(SATTN_DTYPE_F16, {batch, longest, kHeads, kDim}),
        k(SATTN_DTYPE_F16, {batch, longest, kHeads, kDim}),
        v(SATTN_DTYPE_F16, {batch, longest, kHeads, kDim}),
        out(SATTN_DTYPE_F16, {batch, longest, kHeads, kDim}) {
    FastRandom random(35);
    for (HostBuffer* b : {&q, &k, &v}) {
      for (int64_t i = 0; i < batch * longest * kHeads * kDim; ++i) {
        b->Set(i, random.Uniform(-1.0f, 1.0f));
      }
    }
    for (int64_t n : lengths) used.push_back(static_cast<int32_t>(n));
  }
  void Call(sattn_context* ctx) {
    const sattn_tensor qv = q.View(), kv = k.View(), vv = v.View(), ov = out.View();
    const int64_t n[1] = {batch};
    const sattn_tensor used_view = sattn_tensor_contiguous(used.data(), SATTN_DTYPE_I32, 1, n);
    sattn_attention_options o{};
    o.struct_size = sizeof(o);
    o.causal = 1;
    o.seqused_k = &used_view;
    CheckOk(sattn_attention(ctx, &qv, &kv, &vv, &ov, nullptr, &o), "sattn_attention (padded)");
  }
};

// Medians of a's and b's times and of their pairs' ratios a / b, alternated.
struct Alternated {
  double a_ms, b_ms, ratio;
};
template <typename A, typename B>
Alternated Alternate(int pairs, A&& a, B&& b) {
  const auto [times_a, times_b] = AlternatedTimesMs(pairs, a, b, 0.0);
  std::vector<double> ratios;
  for (size_t r = 0; r < times_a.size(); ++r) ratios.push_back(times_a[r] / times_b[r]);
  return {Median(times_a), Median(times_b), Median(ratios)};
}

Row BaseRow(const std::string& name, int64_t batch, int64_t total, int threads) {
  Row row;
  row.Set("op", "packed_prefill")
      .Set("name", name)
      .Set("batch", batch)
      .Set("heads_q", kHeads)
      .Set("heads_kv", kHeads)
      .Set("head_dim", kDim)
      .Set("total_q", total)
      .Set("causal", true)
      .Set("q_dtype", "f16")
      .Set("kv_dtype", "f16")
      .Set("threads", threads);
  return row;
}

}  // namespace

std::vector<Row> PackedPrefillRows(sattn_context* ctx, int threads, const BenchOptions& options) {
  std::vector<Row> rows;
  const int repeats = std::max(3, options.repeats);
  // 16 prompts of 1 to 4096 tokens (1 to 1024 with --quick), a fixed seed.
  const int64_t most = options.quick ? 1024 : 4096;
  const std::string mixed_name = "packed 16x1-" + std::to_string(most) + " h8/8 d128 f16 causal";
  if (Selected(options, mixed_name)) {
    std::mt19937 rng(34);
    std::uniform_int_distribution<int64_t> length(1, most);
    std::vector<int64_t> lengths(16);
    for (int64_t& n : lengths) n = length(rng);
    PackedPrompts packed(lengths);
    auto packed_call = [&] { packed.Packed(ctx); };
    auto own_calls = [&] {
      for (size_t b = 0; b < lengths.size(); ++b) packed.Own(ctx, b);
    };
    const Alternated vs_sum = Alternate(repeats, packed_call, own_calls);
    Alternated vs_padded{};
    {
      PaddedPrompts padded(lengths);
      vs_padded = Alternate(
          repeats, [&] { padded.Call(ctx); }, packed_call);
    }
    std::string list;
    for (int64_t n : lengths) list += (list.empty() ? "" : " ") + std::to_string(n);
    Row row = BaseRow(mixed_name, 16, PackedPrompts::Total(lengths), threads);
    row.Set("lengths", list)
        .Set("median_ms", vs_sum.a_ms)
        .Set("sum_of_own_calls_median_ms", vs_sum.b_ms)
        .Set("packed_vs_sum", vs_sum.ratio)
        .Set("padded_median_ms", vs_padded.a_ms)
        .Set("padded_vs_packed", vs_padded.ratio);
    std::fprintf(stderr,
                 "prefill %s: %.1f ms packed, %.1f ms as 16 own calls (packed/sum %.3f), padded "
                 "to %" PRId64 ": %.1f ms (padded/packed %.2f)\n",
                 mixed_name.c_str(), vs_sum.a_ms, vs_sum.b_ms, vs_sum.ratio,
                 *std::max_element(lengths.begin(), lengths.end()), vs_padded.a_ms,
                 vs_padded.ratio);
    rows.push_back(row);
  }
  // One long prompt beside thirty of 64 tokens, against the long one alone.
  const int64_t long_prompt = options.quick ? 2048 : 8192;
  const std::string skew_name =
      "packed 1x" + std::to_string(long_prompt) + "+30x64 h8/8 d128 f16 causal";
  if (Selected(options, skew_name)) {
    std::vector<int64_t> lengths(31, 64);
    lengths[0] = long_prompt;
    PackedPrompts packed(lengths);
    const Alternated vs_long = Alternate(
        repeats, [&] { packed.Packed(ctx); }, [&] { packed.Own(ctx, 0); });
    const double work_ratio = packed.Pairs(0, lengths.size()) / packed.Pairs(0, 1);
    // The thirty short prompts in a call of their own, against the long one alone: the time
    // ratio the packed call would have if it only added their own cost (a 64-token prompt costs
    // more per query-key pair than the long one: a causal 64-key tile computes all its scores,
    // and each block packs its queries and finishes its rows from memory).
    PackedPrompts shorts(std::vector<int64_t>(30, 64));
    const Alternated shorts_vs_long = Alternate(
        repeats, [&] { shorts.Packed(ctx); }, [&] { packed.Own(ctx, 0); });
    const double separate_ratio = 1.0 + shorts_vs_long.ratio;
    Row row = BaseRow(skew_name, 31, PackedPrompts::Total(lengths), threads);
    row.Set("median_ms", vs_long.a_ms)
        .Set("long_alone_median_ms", vs_long.b_ms)
        .Set("packed_vs_long", vs_long.ratio)
        .Set("work_ratio", work_ratio)
        .Set("shorts_alone_median_ms", shorts_vs_long.a_ms)
        .Set("separate_calls_vs_long", separate_ratio);
    std::fprintf(stderr,
                 "prefill %s: %.1f ms packed, %.1f ms the long prompt alone (packed/long %.3f; "
                 "work ratio %.3f; the short ones alone %.1f ms, so two calls %.3f)\n",
                 skew_name.c_str(), vs_long.a_ms, vs_long.b_ms, vs_long.ratio, work_ratio,
                 shorts_vs_long.a_ms, separate_ratio);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace bench
}  // namespace streamattn
