// libFuzzer target: sattn_attention over quantized caches (I8 and I4 with group scales, FP8
// E4M3 with a per-head or per-tensor scale; K and V each in any format, or a float one beside
// it), decode and chunked prefill, contiguous and paged, with causal, window, softcap and
// seqused_k, the scales in any layout and dtype, malformed details now and then (a scales
// view missing, of a wrong dtype or shape, a group that does not divide head_dim, an odd I4
// stride, an FP8 scale that is negative, NaN or infinite).
// Every call must be memory-safe and follow the contract (fuzz_util.h). Calls on plain data
// must match the double oracle on the dequantized values; keys no row may see hold NaN scales
// (and NaN codes in FP8), so a leak shows up, and a NaN scale a row does see makes exactly the
// oracle's entries NaN.
#include <cmath>
#include <cstdint>
#include <vector>

#include "fuzz_util.h"
#include "reference/reference_attention.h"

namespace streamattn {
namespace fuzz {
namespace {

using reference::Array;

int32_t PickCacheDType(FuzzedDataProvider& in) {
  static const int32_t kFormats[] = {SATTN_DTYPE_I8, SATTN_DTYPE_I4, SATTN_DTYPE_FP8_E4M3};
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return PickFloatDType(in);
  return kFormats[in.ConsumeIntegralInRange<int>(0, 2)];
}

int64_t PickHeadDim(FuzzedDataProvider& in) {
  static const int64_t kCommon[] = {2, 8, 16, 32, 40, 64, 96, 128, 256, 576};
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0) {
    return kCommon[in.ConsumeIntegralInRange<size_t>(0, 9)];
  }
  return in.ConsumeIntegralInRange<int64_t>(1, 160);
}

// The number of scale groups per row: mostly one that divides head_dim into groups of a power
// of two (the fast paths), one group per row, or any count (a group that may not divide).
int64_t PickGroups(FuzzedDataProvider& in, int64_t head_dim) {
  const int r = in.ConsumeIntegralInRange<int>(0, 9);
  if (r == 0) return in.ConsumeIntegralInRange<int64_t>(1, head_dim + 1);
  if (r <= 2) return 1;
  static const int64_t kGroup[] = {32, 16, 64, 2, 8, 128};
  const int64_t g = kGroup[in.ConsumeIntegralInRange<int>(0, 5)];
  return head_dim % g == 0 ? head_dim / g : 1;
}

// A cache (values) and, for a quantized format, its scales. scale_bound keeps every
// dequantized value within [-1, 1] when the codes are uniform: the oracle's score bound.
struct Cache {
  FuzzTensor values, scales;
  int64_t groups = 0;  // per row, for I8 and I4
  bool fp8_per_head = false;
  bool with_scales = false;
  bool infinite_scale = false;  // dot * inf and sum(q * inf) differ in sign and NaN: not judged

  void Make(FuzzedDataProvider& in, int32_t dtype, int64_t pages, int64_t rows, int64_t heads,
            int64_t dim) {
    values.Make(in, dtype, {pages, rows, heads, dim}, false);
    with_scales = IsQuantized(dtype) ? in.ConsumeIntegralInRange<int>(0, 31) != 0
                                     : in.ConsumeIntegralInRange<int>(0, 31) == 0;
    if (!with_scales) return;
    if (dtype == SATTN_DTYPE_FP8_E4M3) {
      fp8_per_head = in.ConsumeBool();
      scales.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_F32 : PickFloatDType(in),
                  {fp8_per_head ? heads : 1}, false);
    } else {
      groups = PickGroups(in, dim);
      const int32_t scale_dtype = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? PickFloatDType(in)
                                  : in.ConsumeBool()                         ? SATTN_DTYPE_F16
                                                                             : SATTN_DTYPE_F32;
      scales.Make(in, scale_dtype, {pages, rows, heads, groups}, false);
    }
  }

  // Positive scales that keep |value| <= 1, and now and then NaN, 0, a negative or an infinite
  // one (kSpecial) or any bits (kBytes).
  void FillScales(FuzzedDataProvider& in, int32_t dtype, Fill fill, uint64_t seed) {
    if (!with_scales || !scales.real()) return;
    if (scales.mutated()) {  // its view may not be walkable (rank, extents): bytes will do
      scales.FillValues(Fill::kBytes, seed);
      return;
    }
    const double largest = dtype == SATTN_DTYPE_I8 ? 128.0 : dtype == SATTN_DTYPE_I4 ? 8.0 : 448.0;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uniform(0.05, 1.0);
    if (fill == Fill::kBytes) {
      scales.FillValues(fill, seed);
      return;
    }
    const float specials[] = {NAN, 0.0f, -0.01f, INFINITY, -INFINITY, 1e-40f, 6e-8f};
    const bool special = fill == Fill::kSpecial || in.ConsumeIntegralInRange<int>(0, 15) == 0;
    scales.FillValues(Fill::kUniform, seed);  // the padding
    scales.ForEach([&](const int64_t* i) {
      float s = static_cast<float>(uniform(rng) / largest);
      if (special && rng() % 16 == 0) s = specials[rng() % 7];
      infinite_scale = infinite_scale || std::isinf(s);
      scales.Set(i, s);
    });
  }

  // The dequantized value of element [page, row, h, d], as the library must see it (the scale
  // as stored).
  double Value(int32_t dtype, const int64_t* at) const {
    const double code = values.Get(at);
    if (!IsQuantized(dtype)) return code;
    if (dtype == SATTN_DTYPE_FP8_E4M3) {
      const int64_t h = fp8_per_head ? at[2] : 0;
      return code * scales.Get(&h);
    }
    const int64_t g[4] = {at[0], at[1], at[2], at[3] / (values.view().shape[3] / groups)};
    return code * scales.Get(g);
  }

  // A key no row may see: NaN in its group scales (I8, I4) or in its values (FP8 codes, float
  // caches).
  void Poison(int32_t dtype, int64_t page, int64_t row) {
    const bool grouped = dtype == SATTN_DTYPE_I8 || dtype == SATTN_DTYPE_I4;
    if (!values.real() || (grouped && !scales.real())) return;
    const int64_t heads = values.view().shape[2], dim = values.view().shape[3];
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < (grouped ? groups : dim); ++d) {
        const int64_t at[4] = {page, row, h, d};
        grouped ? scales.Set(at, NAN) : values.Set(at, NAN);
      }
    }
  }

  bool Mutated() const { return values.mutated() || (with_scales && scales.mutated()); }
};

}  // namespace
}  // namespace fuzz
}  // namespace streamattn

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace streamattn::fuzz;  // NOLINT
  using streamattn::reference::Array;
  FuzzedDataProvider in(data, size);
  sattn_context* ctx = PickContextAndTarget(in);
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();

  // ---- the problem
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(1, 2);
  const int64_t heads_kv = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t group = in.ConsumeIntegralInRange<int64_t>(1, 5);
  const int64_t heads_q = heads_kv * group;
  const int64_t head_dim = PickHeadDim(in);
  const int64_t head_dim_v = in.ConsumeIntegralInRange<int>(0, 3) ? head_dim : PickHeadDim(in);
  const bool decode = in.ConsumeBool();
  const int64_t seq_q = in.ConsumeIntegralInRange<int64_t>(1, decode ? 16 : 80);
  int64_t seq_k = in.ConsumeIntegralInRange<int>(0, 5) == 0
                      ? in.ConsumeIntegralInRange<int64_t>(500, 2200)  // split-KV chunks
                      : in.ConsumeIntegralInRange<int64_t>(1, 150);
  const int64_t per_key = batch * heads_q * seq_q * (head_dim + head_dim_v);
  if (per_key * seq_k > 2'000'000) seq_k = std::max<int64_t>(1, 2'000'000 / per_key);
  const bool paged = in.ConsumeIntegralInRange<int>(0, 2) == 0;
  const int64_t page_size = paged ? in.ConsumeIntegralInRange<int64_t>(1, 40) : 0;
  const int64_t max_pages = paged ? (seq_k + page_size - 1) / page_size : 0;
  if (paged) seq_k = max_pages * page_size;
  const int64_t num_pages =
      paged ? batch * max_pages + in.ConsumeIntegralInRange<int64_t>(0, 2) : 0;
  const int64_t pages = paged ? num_pages : batch, rows = paged ? page_size : seq_k;

  // ---- tensors
  const int32_t k_dtype = PickCacheDType(in);
  const int32_t v_dtype = in.ConsumeBool() ? k_dtype : PickCacheDType(in);
  const int32_t q_dtype = SATTN_DTYPE_F32 + in.ConsumeIntegralInRange<int>(0, 2);
  const int32_t out_dtype = in.ConsumeBool() ? q_dtype : SATTN_DTYPE_F32;
  FuzzTensor q, out, seqused, table;
  Cache k, v;
  q.Make(in, q_dtype, {batch, seq_q, heads_q, head_dim}, false);
  k.Make(in, k_dtype, pages, rows, heads_kv, head_dim);
  v.Make(in, v_dtype, pages, rows, heads_kv, head_dim_v);
  out.Make(in, out_dtype, {batch, seq_q, heads_q, head_dim_v}, true);
  const int r = in.ConsumeIntegralInRange<int>(0, 9);
  const Fill fill = r < 8 ? Fill::kUniform : r < 9 ? Fill::kSpecial : Fill::kBytes;
  // Float caches and q stay uniform unless kBytes: their specials (inf, 1e30) are
  // fuzz_attention's; here the quantized codes and scales get them.
  const auto fill_of = [fill](int32_t dtype) {
    return fill == Fill::kBytes || IsQuantized(dtype) ? fill : Fill::kUniform;
  };
  q.FillValues(fill_of(q_dtype), seed);
  k.values.FillValues(fill_of(k_dtype), seed + 1);
  v.values.FillValues(fill_of(v_dtype), seed + 2);
  k.FillScales(in, k_dtype, fill, seed + 3);
  v.FillScales(in, v_dtype, fill, seed + 4);
  out.FillBytes(0xEE);

  // ---- options
  sattn_attention_options o{};
  o.struct_size = sizeof(o);
  o.causal = in.ConsumeBool();
  o.has_window = in.ConsumeIntegralInRange<int>(0, 4) == 0;
  if (o.has_window) {
    o.window_left = in.ConsumeIntegralInRange<int64_t>(-1, 40);
    o.window_right = in.ConsumeIntegralInRange<int64_t>(-1, 40);
  }
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) o.softcap = in.ConsumeBool() ? 30.0f : 0.5f;
  if (k.with_scales) o.k_scales = &k.scales.view();
  if (v.with_scales) o.v_scales = &v.scales.view();
  std::vector<int64_t> used(batch, seq_k);
  if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
    seqused.Make(in, SATTN_DTYPE_I32, {batch}, false);
    for (int64_t b = 0; b < batch && seqused.real(); ++b) {
      used[b] = in.ConsumeIntegralInRange<int64_t>(0, seq_k);
      if (!seqused.mutated()) seqused.SetInt(&b, static_cast<int32_t>(used[b]));
    }
    // What the call will read: a broadcast view (stride 0) holds one count for all.
    for (int64_t b = 0; b < batch && seqused.real() && !seqused.mutated(); ++b) {
      used[b] = seqused.GetInt(&b);
    }
    o.seqused_k = &seqused.view();
  }
  if (paged) {
    table.Make(in, SATTN_DTYPE_I32, {batch, max_pages}, false);
    std::vector<int32_t> shuffled(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) shuffled[i] = static_cast<int32_t>(i);
    std::mt19937_64 rng(seed + 5);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (int64_t b = 0; b < batch && table.real() && !table.mutated(); ++b) {
      for (int64_t j = 0; j < max_pages; ++j) {
        const int64_t index[2] = {b, j};
        const bool needed = j * page_size < used[b];
        table.SetInt(index, needed ? shuffled[b * max_pages + j] : static_cast<int32_t>(rng()));
      }
    }
    o.block_table = &table.view();
  }

  // Plain calls are judged by the oracle; keys no sequence has then hold NaN.
  bool judge = fill != Fill::kBytes && !q.mutated() && !out.mutated() && !k.Mutated() &&
               !v.Mutated() && !seqused.mutated() && !table.mutated() && !k.infinite_scale &&
               !v.infinite_scale;
  if (judge) {
    std::vector<bool> page_used(paged ? num_pages : 0, false);
    for (int64_t b = 0; b < batch && paged; ++b) {
      for (int64_t j = 0; j * page_size < used[b]; ++j) {
        const int64_t index[2] = {b, j};
        page_used[table.GetInt(index)] = true;
      }
    }
    for (int64_t p = 0; p < pages; ++p) {
      for (int64_t row = 0; row < rows; ++row) {
        if (paged ? page_used[p] : row < used[p]) continue;
        k.Poison(k_dtype, p, row);
        v.Poison(v_dtype, p, row);
      }
    }
  }
  Array q_ref;
  if (judge) {
    q_ref = Array({batch, seq_q, heads_q, head_dim});
    q.ForEach([&](const int64_t* i) { q_ref({i[0], i[1], i[2], i[3]}) = q.Get(i); });
  }

  std::vector<const FuzzTensor*> inputs = {&q,        &k.values, &k.scales, &v.values,
                                           &v.scales, &seqused,  &table};
  std::vector<std::vector<uint8_t>> inputs_before;
  for (const FuzzTensor* t : inputs) inputs_before.push_back(t->Snapshot());
  const std::vector<uint8_t> out_before = out.Snapshot();

  const sattn_status status =
      sattn_attention(ctx, &q.view(), &k.values.view(), &v.values.view(), &out.view(), nullptr, &o);
  for (size_t i = 0; i < inputs.size(); ++i) {
    FUZZ_CHECK(inputs[i]->Unchanged(inputs_before[i]), "input %zu was written", i);
  }
  if (status != SATTN_OK) {
    CheckFailure(status, {&out}, {out_before});
    return 0;
  }
  FUZZ_CHECK(IsQuantized(k_dtype) == k.with_scales && IsQuantized(v_dtype) == v.with_scales,
             "accepted scales for k %d (%d) / v %d (%d)", k_dtype, k.with_scales, v_dtype,
             v.with_scales);
  FUZZ_CHECK(out.OnlyViewWritten(out_before), "wrote out's padding");
  if (!judge) return 0;

  // ---- judge against the oracle on the dequantized values
  streamattn::reference::AttentionSpec spec;
  spec.causal = o.causal != 0;
  if (o.has_window) spec.window_left = o.window_left, spec.window_right = o.window_right;
  spec.softcap = o.softcap;
  spec.seqused_k = used;
  Array k_ref({batch, seq_k, heads_kv, head_dim}), v_ref({batch, seq_k, heads_kv, head_dim_v});
  double max_k = 0.0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < used[b]; ++j) {
      const int64_t entry[2] = {b, paged ? j / page_size : 0};
      const int64_t page = paged ? table.GetInt(entry) : b;
      const int64_t row = paged ? j % page_size : j;
      for (int64_t h = 0; h < heads_kv; ++h) {
        for (int64_t d = 0; d < std::max(head_dim, head_dim_v); ++d) {
          const int64_t at[4] = {page, row, h, d};
          if (d < head_dim) k_ref({b, j, h, d}) = k.Value(k_dtype, at);
          if (d < head_dim_v) v_ref({b, j, h, d}) = v.Value(v_dtype, at);
          if (d < head_dim && std::isfinite(k_ref({b, j, h, d}))) {
            max_k = std::max(max_k, std::fabs(k_ref({b, j, h, d})));
          }
        }
      }
    }
  }
  // Scores must stay where float32 differences are accurate to ~1e-5 (|q| <= 1; the FP8 and
  // float caches' specials can be large); values are within [-1, 1] unless special.
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const double bound = o.softcap > 0.0f ? o.softcap : scale * static_cast<double>(head_dim) * max_k;
  if (!(bound <= 50.0)) return 0;
  double max_v = 0.0;
  for (double x : v_ref.data) {
    if (std::isfinite(x)) max_v = std::max(max_v, std::fabs(x));
  }
  const auto want = streamattn::reference::Attention(q_ref, k_ref, v_ref, spec);
  const double score_error = (1e-4 + 2e-5 * bound) * std::max(1.0, max_v);
  const double rounding = out_dtype == SATTN_DTYPE_F16    ? 0x1p-10
                          : out_dtype == SATTN_DTYPE_BF16 ? 0x1p-7
                                                          : 0.0;
  out.ForEach([&](const int64_t* i) {
    const double w = want.out({i[0], i[1], i[2], i[3]}), g = out.Get(i);
    const bool ok =
        std::isnan(w) ? std::isnan(g) : std::fabs(g - w) <= score_error + rounding * std::fabs(w);
    FUZZ_CHECK(ok, "out[%lld, %lld, %lld, %lld] = %.9g, oracle %.9g (k %d, v %d)",
               static_cast<long long>(i[0]), static_cast<long long>(i[1]),
               static_cast<long long>(i[2]), static_cast<long long>(i[3]), g, w, k_dtype, v_dtype);
  });
  return 0;
}
