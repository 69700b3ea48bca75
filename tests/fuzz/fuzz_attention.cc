// libFuzzer target: sattn_attention with fuzzer-chosen dtypes, shapes (decode and prefill,
// split-KV lengths), layouts, every option (mask, ALiBi, sinks, softcap, windows, causal,
// ragged seqused_k, paged block tables, packed variable-length batches), data and malformed
// details, on a chosen SIMD target.
// Every call must be memory-safe and follow the contract (fuzz_util.h); calls on plain data
// must also match the double oracle, and keys no row may see hold NaN, so a leak shows up.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "fuzz_util.h"
#include "reference/reference_attention.h"

namespace streamattn {
namespace fuzz {
namespace {

using reference::Array;

int64_t PickHeadDim(FuzzedDataProvider& in) {
  static const int64_t kCommon[] = {1, 3, 8, 16, 32, 40, 64, 80, 96, 128, 256, 257};
  // MLA's widths (576 scored, 512 of V) and the first ones past the limits, now and then: the
  // work bound below shortens their caches.
  static const int64_t kWide[] = {512, 513, 576, 577};
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    return kWide[in.ConsumeIntegralInRange<size_t>(0, 3)];
  }
  if (in.ConsumeBool()) return kCommon[in.ConsumeIntegralInRange<size_t>(0, 11)];
  return in.ConsumeIntegralInRange<int64_t>(1, 160);
}

int64_t PickWindow(FuzzedDataProvider& in) {
  static const int64_t kCommon[] = {-2, -1, -1, 0, 1, 3, 17, 100};
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) return in.ConsumeIntegral<int64_t>();
  return kCommon[in.ConsumeIntegralInRange<size_t>(0, 7)];
}

float PickFloat(FuzzedDataProvider& in, const std::vector<float>& common) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) return in.ConsumeFloatingPoint<float>();
  return common[in.ConsumeIntegralInRange<size_t>(0, common.size() - 1)];
}

Fill PickFill(FuzzedDataProvider& in) {
  const int r = in.ConsumeIntegralInRange<int>(0, 9);
  return r < 7 ? Fill::kUniform : r < 9 ? Fill::kSpecial : Fill::kBytes;
}

double RoundingOf(int32_t dtype) {  // relative half-ulp and then some
  return dtype == SATTN_DTYPE_F16 ? 0x1p-10 : dtype == SATTN_DTYPE_BF16 ? 0x1p-7 : 0.0;
}

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
  const int64_t batch = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t heads_kv = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t group = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t heads_q = heads_kv * group;
  const int64_t head_dim = PickHeadDim(in);
  // Now and then v is a view of k's own leading channels (MLA's latent cache: the same memory,
  // dtype and strides), which the kernels may read once for both.
  const bool v_in_k = in.ConsumeIntegralInRange<int>(0, 7) == 0;
  int64_t head_dim_v = in.ConsumeBool() ? head_dim : PickHeadDim(in);
  if (v_in_k) head_dim_v = std::min(head_dim_v, head_dim);
  const bool decode = in.ConsumeBool();
  const int64_t seq_q = in.ConsumeIntegralInRange<int64_t>(1, decode ? 16 : 150);
  int64_t seq_k = in.ConsumeIntegralInRange<int>(0, 5) == 0
                      ? in.ConsumeIntegralInRange<int64_t>(500, 2200)  // split-KV chunks
                      : in.ConsumeIntegralInRange<int64_t>(1, 150);
  // Bound the work (the oracle costs as much as the call): shorter caches first.
  const int64_t per_key = batch * heads_q * seq_q * (head_dim + head_dim_v);
  if (per_key * seq_k > 3'000'000) seq_k = std::max<int64_t>(1, 3'000'000 / per_key);
  const bool paged = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  const int64_t page_size = paged ? in.ConsumeIntegralInRange<int64_t>(1, 48) : 0;
  const int64_t max_pages = paged ? (seq_k + page_size - 1) / page_size : 0;
  if (paged) seq_k = max_pages * page_size;
  const int64_t num_pages =
      paged ? batch * max_pages + in.ConsumeIntegralInRange<int64_t>(0, 2) : 0;
  // Packed batches (cu_seqlens_q; cu_seqlens_k when not paged): each sequence its own lengths,
  // 0 allowed, q [1, total_q, ..] and k, v [1, total_k, ..].
  const bool packed = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  const bool packed_k = packed && !paged;
  std::vector<int64_t> q_lens(batch, seq_q), k_lens(batch, seq_k);
  std::vector<int64_t> q_starts(batch + 1, 0), k_starts(batch + 1, 0);
  for (int64_t b = 0; b < batch && packed; ++b) {
    q_lens[b] = in.ConsumeIntegralInRange<int64_t>(0, seq_q);
    if (packed_k) k_lens[b] = in.ConsumeIntegralInRange<int64_t>(0, seq_k);
  }
  for (int64_t b = 0; b < batch; ++b) {
    q_starts[b + 1] = q_starts[b] + q_lens[b];
    k_starts[b + 1] = k_starts[b] + k_lens[b];
  }
  if (q_starts[batch] == 0) q_lens[batch - 1] = q_starts[batch] = 1;  // extents are >= 1
  if (k_starts[batch] == 0) k_lens[batch - 1] = k_starts[batch] = 1;
  const int64_t total_q = q_starts[batch], total_k = k_starts[batch];
  // q's (out's, lse's) batch and sequence extents; k's and v's when contiguous.
  const int64_t q_batch = packed ? 1 : batch, q_rows = packed ? total_q : seq_q;
  const int64_t k_batch = packed_k ? 1 : batch, k_rows = packed_k ? total_k : seq_k;

  // ---- tensors
  FuzzTensor q, k, v, out, lse, alibi, sinks, mask, seqused, table, cu_q, cu_k;
  const int32_t q_dtype = PickFloatDType(in), kv_dtype = PickFloatDType(in);
  const int32_t v_dtype = in.ConsumeBool() || v_in_k ? kv_dtype : PickFloatDType(in);
  const int32_t out_dtype = in.ConsumeBool() ? q_dtype : PickFloatDType(in);
  q.Make(in, q_dtype, {q_batch, q_rows, heads_q, head_dim}, false);
  k.Make(in, kv_dtype,
         {paged ? num_pages : k_batch, paged ? page_size : k_rows, heads_kv, head_dim}, false);
  if (!v_in_k) {
    v.Make(in, v_dtype,
           {paged ? num_pages : k_batch, paged ? page_size : k_rows, heads_kv, head_dim_v}, false);
  }
  sattn_tensor v_view = v.view();
  if (v_in_k) v_view = k.view(), v_view.shape[3] = head_dim_v;
  const bool in_place = in.ConsumeIntegralInRange<int>(0, 7) == 0;
  if (!in_place) out.Make(in, out_dtype, {q_batch, q_rows, heads_q, head_dim_v}, true);
  const bool with_lse = in.ConsumeBool();
  if (with_lse) {
    lse.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_F32 : PickFloatDType(in),
             {q_batch, heads_q, q_rows}, true);
  }
  const Fill fill = PickFill(in);
  q.FillValues(fill, seed);
  k.FillValues(fill, seed + 1);
  if (!v_in_k) v.FillValues(fill, seed + 2);
  out.FillBytes(0xEE);
  lse.FillBytes(0xEE);

  // ---- options
  struct {
    sattn_attention_options o;
    uint8_t newer[16];  // a newer caller's fields: zero, or set (must be refused)
  } options{};
  const bool pass_options = in.ConsumeIntegralInRange<int>(0, 9) != 0;
  sattn_attention_options& o = options.o;
  o.struct_size = sizeof(o);
  if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
    o.struct_size = in.ConsumeIntegralInRange<uint32_t>(0, sizeof(options));
    if (in.ConsumeBool()) options.newer[in.ConsumeIntegralInRange<int>(0, 15)] = 1;
  }
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    o.scale = PickFloat(in, {1.0f, 0.05f, -0.3f, 2.0f, NAN, INFINITY, 1e30f, 1e-30f});
  }
  o.causal = in.ConsumeBool();
  o.has_window = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  if (o.has_window) o.window_left = PickWindow(in), o.window_right = PickWindow(in);
  if (in.ConsumeIntegralInRange<int>(0, 4) == 0) {
    o.softcap = PickFloat(in, {30.0f, 1.0f, 0.5f, -1.0f, NAN, INFINITY, 1e-30f});
  }
  const bool with_alibi = in.ConsumeIntegralInRange<int>(0, 4) == 0;
  if (with_alibi) {
    alibi.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_F32 : PickFloatDType(in),
               {heads_q}, false);
    alibi.FillValues(fill, seed + 3);
    o.alibi_slopes = &alibi.view();
  }
  const bool with_sinks = in.ConsumeIntegralInRange<int>(0, 4) == 0;
  if (with_sinks) {
    sinks.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_F32 : PickFloatDType(in),
               {heads_q}, false);
    sinks.FillValues(fill, seed + 4);
    if (in.ConsumeBool() && sinks.real() && !sinks.mutated()) {
      const int64_t h = in.ConsumeIntegralInRange<int64_t>(0, heads_q - 1);
      sinks.Set(&h, -INFINITY);
    }
    o.sinks = &sinks.view();
  }
  const bool with_mask = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  if (with_mask) {
    const int64_t mb = in.ConsumeBool() ? batch : 1, mh = in.ConsumeBool() ? heads_q : 1;
    mask.Make(in, PickFloatDType(in), {mb, mh, seq_q, seq_k}, false);
    mask.FillValues(fill, seed + 5);
    const int hide = in.ConsumeIntegralInRange<int>(0, 4);  // in quarters; 4 hides everything
    if (mask.real() && !mask.mutated() && hide > 0) {
      std::mt19937_64 rng(seed + 6);
      mask.ForEach([&](const int64_t* i) {
        if (static_cast<int>(rng() % 4) < hide) mask.Set(i, -INFINITY);
      });
    }
    o.mask = &mask.view();
  }
  std::vector<int64_t> used = k_lens;
  const bool with_seqused = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  if (with_seqused) {
    seqused.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_I32 : PickFloatDType(in),
                 {batch}, false);
    for (int64_t b = 0; b < batch && seqused.real(); ++b) {
      used[b] = in.ConsumeIntegralInRange<int>(0, 15) == 0
                    ? in.ConsumeIntegralInRange<int64_t>(-2, k_lens[b] + 2)  // maybe out of range
                    : in.ConsumeIntegralInRange<int64_t>(0, k_lens[b]);
      if (!seqused.mutated() && seqused.view().dtype == SATTN_DTYPE_I32) {
        seqused.SetInt(&b, static_cast<int32_t>(used[b]));
      }
    }
    o.seqused_k = &seqused.view();
  }
  if (paged) {
    table.Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_I32 : PickFloatDType(in),
               {batch, max_pages}, false);
    // Sequences own shuffled distinct pages; entries past their keys are garbage that must
    // never be read; now and then a used entry points outside the cache.
    std::vector<int32_t> pages(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) pages[i] = static_cast<int32_t>(i);
    std::mt19937_64 rng(seed + 7);
    std::shuffle(pages.begin(), pages.end(), rng);
    const bool fill_table =
        table.real() && !table.mutated() && table.view().dtype == SATTN_DTYPE_I32;
    for (int64_t b = 0; b < batch && fill_table; ++b) {
      for (int64_t j = 0; j < max_pages; ++j) {
        const int64_t index[2] = {b, j};
        const bool needed = j * page_size < std::max<int64_t>(used[b], 0);
        int32_t entry = needed ? pages[b * max_pages + j] : static_cast<int32_t>(rng());
        if (needed && in.ConsumeIntegralInRange<int>(0, 63) == 0) {
          entry = in.ConsumeBool() ? static_cast<int32_t>(num_pages) : -1;
        }
        table.SetInt(index, entry);
      }
    }
    o.block_table = &table.view();
  }
  if (packed) {
    // Now and then an end off by one: not starting at 0 or not ending at the packed length,
    // each refused.
    for (auto [t, starts, field] :
         {std::tuple<FuzzTensor*, const std::vector<int64_t>*, const sattn_tensor**>{
              &cu_q, &q_starts, &o.cu_seqlens_q},
          {&cu_k, &k_starts, &o.cu_seqlens_k}}) {
      if (t == &cu_k && !packed_k) break;
      t->Make(in, in.ConsumeIntegralInRange<int>(0, 15) ? SATTN_DTYPE_I32 : PickFloatDType(in),
              {batch + 1}, false);
      for (int64_t b = 0;
           b <= batch && t->real() && !t->mutated() && t->view().dtype == SATTN_DTYPE_I32; ++b) {
        // Only the ends: an inner entry off by one may still be a valid (other) batch.
        const bool end = b == 0 || b == batch;
        const int32_t off = end && in.ConsumeIntegralInRange<int>(0, 31) == 0 ? 1 : 0;
        t->SetInt(&b, static_cast<int32_t>((*starts)[b]) + off);
      }
      *field = &t->view();
    }
  }
  // Plain calls are judged by the oracle; then keys no sequence has (past seqused_k, pages no
  // used entry names) hold NaN, which must never reach a result.
  bool judge = fill == Fill::kUniform && pass_options && o.struct_size == sizeof(o);
  for (const FuzzTensor* t :
       {&q, &k, &v, &out, &lse, &alibi, &sinks, &mask, &seqused, &table, &cu_q, &cu_k}) {
    judge = judge && !t->mutated();
  }
  judge = judge && (!paged || table.view().dtype == SATTN_DTYPE_I32);
  if (judge) {
    std::vector<bool> page_used(paged ? num_pages : 0, false);
    for (int64_t b = 0; b < batch && paged; ++b) {
      for (int64_t j = 0; j * page_size < used[b]; ++j) {
        const int64_t index[2] = {b, j};
        const int32_t p = table.GetInt(index);
        if (p >= 0 && p < num_pages) page_used[p] = true;
      }
    }
    for (FuzzTensor* t : {&k, &v}) {
      if (t == &v && v_in_k) continue;  // k's NaN are v's
      t->ForEach([&](const int64_t* i) {
        // A packed key's sequence: the one whose rows [k_starts[b], k_starts[b + 1]) hold it.
        int64_t b = i[0], j = i[1];
        while (packed_k && j >= k_starts[b + 1]) ++b;
        if (packed_k) j -= k_starts[b];
        const bool hidden = paged ? !page_used[i[0]] : j >= std::max<int64_t>(used[b], 0);
        if (hidden) t->Set(i, NAN);
      });
    }
  }

  // ---- the oracle's view of the inputs, taken before the call (out may be q)
  Array q_ref, k_ref, v_ref;
  if (judge) {
    q_ref = Array({q_batch, q_rows, heads_q, head_dim});
    q.ForEach([&](const int64_t* i) { q_ref({i[0], i[1], i[2], i[3]}) = q.Get(i); });
  }
  const sattn_tensor* out_view = in_place ? &q.view() : &out.view();

  std::vector<const FuzzTensor*> inputs = {&k,       &v,     &alibi, &sinks, &mask,
                                           &seqused, &table, &cu_q,  &cu_k};
  if (!in_place) inputs.push_back(&q);
  std::vector<std::vector<uint8_t>> inputs_before;
  for (const FuzzTensor* t : inputs) inputs_before.push_back(t->Snapshot());
  std::vector<const FuzzTensor*> outputs = {in_place ? &q : &out, &lse};
  std::vector<std::vector<uint8_t>> outputs_before;
  for (const FuzzTensor* t : outputs) outputs_before.push_back(t->Snapshot());

  const sattn_status status =
      sattn_attention(ctx, &q.view(), &k.view(), &v_view, out_view,
                      with_lse ? &lse.view() : nullptr, pass_options ? &options.o : nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    FUZZ_CHECK(inputs[i]->Unchanged(inputs_before[i]), "input %zu was written", i);
  }
  if (status != SATTN_OK) {
    CheckFailure(status, outputs, outputs_before);
    return 0;
  }
  FUZZ_CHECK(in_place || out.OnlyViewWritten(outputs_before[0]), "wrote out's padding");
  FUZZ_CHECK(lse.OnlyViewWritten(outputs_before[1]), "wrote lse's padding");
  if (!judge) return 0;

  // ---- judge against the oracle
  streamattn::reference::AttentionSpec spec;
  spec.scale = o.scale;
  spec.causal = o.causal != 0;
  if (o.has_window) spec.window_left = o.window_left, spec.window_right = o.window_right;
  spec.softcap = o.softcap;
  double max_slope = 0.0, max_sink = 0.0;
  for (int64_t h = 0; h < heads_q; ++h) {
    if (with_alibi) spec.alibi_slopes.push_back(alibi.Get(&h));
    if (with_sinks) spec.sinks.push_back(sinks.Get(&h));
    if (with_alibi) max_slope = std::max(max_slope, std::fabs(spec.alibi_slopes.back()));
    if (with_sinks && std::isfinite(spec.sinks.back())) {
      max_sink = std::max(max_sink, std::fabs(spec.sinks.back()));
    }
  }
  if (with_mask) {
    const int64_t mb = mask.view().shape[0], mh = mask.view().shape[1];
    spec.mask = [&mask, mb, mh](int64_t b, int64_t h, int64_t i, int64_t j) {
      const int64_t index[4] = {mb == 1 ? 0 : b, mh == 1 ? 0 : h, i, j};
      return mask.Get(index);
    };
  }
  if (with_seqused) spec.seqused_k = used;
  // Scores must stay where float32 differences are still accurate to ~1e-5: |q|, |k| <= 1,
  // the mask in [-1, 1] or -inf, slopes and sinks in [-1, 1].
  const double scale = o.scale != 0.0f ? std::fabs(o.scale) : 1.0 / std::sqrt(double(head_dim));
  double bound = o.softcap > 0.0f ? o.softcap : scale * static_cast<double>(head_dim);
  bound += max_slope * static_cast<double>(seq_k) + (with_mask ? 1.0 : 0.0) + max_sink;
  if (!(bound <= 50.0)) return 0;

  k_ref = Array({batch, seq_k, heads_kv, head_dim});
  v_ref = Array({batch, seq_k, heads_kv, head_dim_v});
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < used[b]; ++j) {
      const int64_t entry[2] = {b, paged ? j / page_size : 0};
      const int64_t page = paged ? table.GetInt(entry) : packed_k ? 0 : b;
      const int64_t row = paged ? j % page_size : packed_k ? k_starts[b] + j : j;
      FUZZ_CHECK(page >= 0 && page < (paged ? num_pages : k_batch), "accepted page %lld",
                 static_cast<long long>(page));
      for (int64_t h = 0; h < heads_kv; ++h) {
        for (int64_t d = 0; d < std::max(head_dim, head_dim_v); ++d) {
          const int64_t at[4] = {page, row, h, d};
          if (d < head_dim) k_ref({b, j, h, d}) = k.Get(at);
          if (d < head_dim_v) v_ref({b, j, h, d}) = (v_in_k ? k : v).Get(at);
        }
      }
    }
  }
  streamattn::reference::AttentionResult want;
  if (!packed) {
    want = streamattn::reference::Attention(q_ref, k_ref, v_ref, spec);
  } else {
    // The oracle per sequence, on its own queries and keys, laid out packed.
    want.out = Array({1, total_q, heads_q, head_dim_v});
    want.lse = Array({1, heads_q, total_q});
    for (int64_t b = 0; b < batch; ++b) {
      if (q_lens[b] == 0) continue;
      Array qb({1, q_lens[b], heads_q, head_dim});
      Array kb({1, seq_k, heads_kv, head_dim}), vb({1, seq_k, heads_kv, head_dim_v});
      const int64_t q_at = q_starts[b] * heads_q * head_dim;
      for (int64_t i = 0; i < qb.size(); ++i) qb.data[i] = q_ref.data[q_at + i];
      for (int64_t i = 0; i < kb.size(); ++i) kb.data[i] = k_ref.data[b * kb.size() + i];
      for (int64_t i = 0; i < vb.size(); ++i) vb.data[i] = v_ref.data[b * vb.size() + i];
      streamattn::reference::AttentionSpec own = spec;
      own.seqused_k = {used[b]};
      const auto w = streamattn::reference::Attention(qb, kb, vb, own);
      for (int64_t i = 0; i < w.out.size(); ++i) {
        want.out.data[q_starts[b] * heads_q * head_dim_v + i] = w.out.data[i];
      }
      for (int64_t h = 0; h < heads_q; ++h) {
        for (int64_t i = 0; i < q_lens[b]; ++i) {
          want.lse({0, h, q_starts[b] + i}) = w.lse({0, h, i});
        }
      }
    }
  }
  // float32 scores carry an error that grows with their size (a dot product of head_dim terms
  // rounds to ~2^-22 of its largest partial sums): a weight's relative error, an out's absolute
  // one (|v| <= 1), and lse's.
  const double score_error = 1e-4 + 2e-5 * bound;
  const FuzzTensor& result = in_place ? q : out;
  const double rounding = RoundingOf(result.view().dtype);
  result.ForEach([&](const int64_t* i) {
    const double w = want.out({i[0], i[1], i[2], i[3]}), g = result.Get(i);
    FUZZ_CHECK(std::fabs(g - w) <= score_error + rounding * std::fabs(w),
               "out[%lld, %lld, %lld, %lld] = %.9g, oracle %.9g", static_cast<long long>(i[0]),
               static_cast<long long>(i[1]), static_cast<long long>(i[2]),
               static_cast<long long>(i[3]), g, w);
  });
  if (with_lse && lse.view().dtype == SATTN_DTYPE_F32) {
    lse.ForEach([&](const int64_t* i) {
      const double w = want.lse({i[0], i[1], i[2]}), g = lse.Get(i);
      const bool ok =
          std::isinf(w) ? g == w : std::fabs(g - w) <= score_error + 1e-6 * std::fabs(w);
      FUZZ_CHECK(ok, "lse[%lld, %lld, %lld] = %.9g, oracle %.9g", static_cast<long long>(i[0]),
                 static_cast<long long>(i[1]), static_cast<long long>(i[2]), g, w);
    });
  }
  return 0;
}
