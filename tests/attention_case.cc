#include "attention_case.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "gtest/gtest.h"

namespace streamattn {
namespace testing_util {

std::string AttentionCase::Describe() const {
  std::ostringstream s;
  s << "batch=" << batch << " seq_q=" << seq_q << " seq_k=" << seq_k << " heads=" << heads_q << "/"
    << heads_kv << " d=" << head_dim << "/" << (head_dim_v ? head_dim_v : head_dim)
    << " q=" << DTypeName(q_dtype) << " kv=" << DTypeName(kv_dtype)
    << " out=" << DTypeName(out_dtype) << (causal ? " causal" : "");
  if (has_window) s << " window=(" << window_left << "," << window_right << ")";
  if (softcap > 0) s << " softcap=" << softcap;
  if (alibi) s << " alibi";
  if (sinks) s << " sinks";
  if (f32_pv) s << " f32_pv";
  if (int8_queries) s << " int8_queries";
  if (mask) s << " mask[" << mask_batch << "," << mask_heads << "]";
  if (!q_order.empty()) s << " q_order";
  if (!kv_order.empty()) s << " kv_order";
  if (page_size > 0) s << " page_size=" << page_size;
  if (v_in_k) s << " v_in_k";
  if (v_copies_k) s << " v_copies_k";
  if (k_format != 0) s << " k=" << DTypeName(k_format) << "/g" << k_group;
  if (v_format != 0) s << " v=" << DTypeName(v_format) << "/g" << v_group;
  if (Quantized()) {
    s << " scales=" << DTypeName(scale_dtype) << (scales_order.empty() ? "" : " reordered")
      << (fp8_per_tensor ? " per-tensor" : "");
  }
  if (!seqused_k.empty()) {
    s << " seqused_k=[";
    for (int64_t n : seqused_k) s << n << " ";
    s << "]";
  }
  return s.str();
}

namespace {

// Pages of a paged case: every sequence's pages plus three that no sequence uses.
int64_t PagesPerSequence(const AttentionCase& c) { return c.seq_k / c.page_size; }
int64_t NumPages(const AttentionCase& c) { return c.batch * PagesPerSequence(c) + 3; }

std::vector<int64_t> KeyShape(const AttentionCase& c, int64_t dim) {
  if (c.page_size > 0) return {NumPages(c), c.page_size, c.heads_kv, dim};
  return {c.batch, c.seq_k, c.heads_kv, dim};
}

int64_t DimV(const AttentionCase& c) { return c.head_dim_v ? c.head_dim_v : c.head_dim; }

// The scales of a quantized cache of `format` (0: none, a placeholder): group scales laid out
// like the cache (in scales_order), or FP8's one a kv head (or one for the tensor).
HostTensor ScalesFor(const AttentionCase& c, sattn_dtype format, int64_t group, int64_t dim) {
  if (format == SATTN_DTYPE_FP8_E4M3) {
    return HostTensor(SATTN_DTYPE_F32, {c.fp8_per_tensor ? 1 : c.heads_kv});
  }
  if (format == 0) return HostTensor(SATTN_DTYPE_F32, {1});
  return HostTensor(c.scale_dtype, KeyShape(c, dim / (group > 0 ? group : dim)),
                    c.scales_order.empty() ? c.kv_order : c.scales_order);
}

// Random values of a quantized cache and its scales, standing for numbers of about [-1, 1]:
// I8 any integer with scales near 1/127, I4 near 1/7, FP8 values of [-2, 2] (subnormals among
// them) with scales near 1/2.
void FillQuantized(std::mt19937_64& rng, sattn_dtype format, HostTensor* values,
                   HostTensor* scales) {
  switch (format) {
    case SATTN_DTYPE_I8:
      values->FillUniform(rng, -128.49, 127.49);
      scales->FillUniform(rng, 0.5 / 127, 1.5 / 127);
      return;
    case SATTN_DTYPE_I4:
      values->FillUniform(rng, -8.49, 7.49);
      scales->FillUniform(rng, 0.5 / 7, 1.5 / 7);
      return;
    default:
      values->FillUniform(rng, -2.0, 2.0);
      scales->FillUniform(rng, 0.25, 0.75);
  }
}

// Poisons element `index` of a cache that no call may read: NaN where the format holds one,
// else in the element's group scale.
void Poison(sattn_dtype format, HostTensor* values, HostTensor* scales,
            const std::vector<int64_t>& index) {
  if (format == SATTN_DTYPE_I8 || format == SATTN_DTYPE_I4) {
    std::vector<int64_t> s = index;
    s[3] = index[3] * scales->shape()[3] / values->shape()[3];
    scales->Set(s, NAN);
    return;
  }
  values->Set(index, NAN);
}

}  // namespace

AttentionCall::AttentionCall(const AttentionCase& c)
    : q(c.q_dtype, {c.batch, c.seq_q, c.heads_q, c.head_dim}, c.q_order),
      k(c.k_format != 0 ? c.k_format : c.kv_dtype, KeyShape(c, c.head_dim), c.kv_order),
      v(c.v_format != 0 ? c.v_format : c.kv_dtype, KeyShape(c, DimV(c)), c.kv_order),
      out(c.out_dtype, {c.batch, c.seq_q, c.heads_q, c.head_dim_v ? c.head_dim_v : c.head_dim},
          c.out_order),
      lse(SATTN_DTYPE_F32, {c.batch, c.heads_q, c.seq_q}),
      alibi(SATTN_DTYPE_F32, {c.heads_q}),
      sinks(SATTN_DTYPE_F32, {c.heads_q}),
      mask(SATTN_DTYPE_F32, {c.mask_batch, c.mask_heads, c.seq_q, c.seq_k}),
      seqused_k(SATTN_DTYPE_I32, {c.batch}),
      block_table(SATTN_DTYPE_I32, {c.batch, c.page_size > 0 ? PagesPerSequence(c) : 1}),
      k_scales(ScalesFor(c, c.k_format, c.k_group, c.head_dim)),
      v_scales(ScalesFor(c, c.v_format, c.v_group, DimV(c))) {
  std::mt19937_64 rng(c.seed);
  q.FillUniform(rng, c.value_lo, c.value_hi);
  if (c.k_format != 0) {
    FillQuantized(rng, c.k_format, &k, &k_scales);
  } else {
    k.FillUniform(rng, c.value_lo, c.value_hi);
  }
  if (c.v_format != 0) {
    FillQuantized(rng, c.v_format, &v, &v_scales);
  } else {
    v.FillUniform(rng, -1.0, 1.0);
  }
  auto poison = [&](HostTensor* t, const std::vector<int64_t>& index) {
    if (t == &k) return Poison(c.k_format, &k, &k_scales, index);
    Poison(c.v_format, &v, &v_scales, index);
  };
  out.FillBytes(0xEE);
  lse.FillBytes(0xEE);
  alibi.FillUniform(rng, 0.01, 0.5);
  sinks.FillUniform(rng, -2.0, 2.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Array mask_values(mask.shape());
  for (double& m : mask_values.data)
    m = u(rng) < c.mask_hide_fraction ? -INFINITY : 4.0 * u(rng) - 2.0;
  mask.FromArray(mask_values);
  for (int64_t b = 0; b < c.batch; ++b) {
    seqused_k.Set({b}, c.seqused_k.empty() ? c.seq_k : c.seqused_k[b]);
  }
  if (c.page_size > 0) {
    // Sequences own shuffled pages; the unused ones (and unused table entries) are poison.
    std::vector<int64_t> pages(NumPages(c));
    for (size_t i = 0; i < pages.size(); ++i) pages[i] = static_cast<int64_t>(i);
    std::shuffle(pages.begin(), pages.end(), rng);
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t used = c.seqused_k.empty() ? c.seq_k : c.seqused_k[b];
      for (int64_t j = 0; j < PagesPerSequence(c); ++j) {
        const bool needed = j * c.page_size < used;
        block_table.Set({b, j}, needed ? pages[b * PagesPerSequence(c) + j] : -7);
      }
    }
    for (size_t i = pages.size() - 3; i < pages.size(); ++i) {
      for (HostTensor* t : {&k, &v}) {
        ForEachIndex(t->shape(), [&](const std::vector<int64_t>& index) {
          if (index[0] == pages[i]) poison(t, index);
        });
      }
    }
  }
  // Keys past a sequence's seqused_k are never read: make them poison too.
  for (int64_t b = 0; b < c.batch && !c.seqused_k.empty(); ++b) {
    for (int64_t j = c.seqused_k[b]; j < c.seq_k; ++j) {
      if (c.page_size > 0 && j / c.page_size * c.page_size >= c.seqused_k[b]) break;
      const int64_t page =
          c.page_size > 0 ? static_cast<int64_t>(block_table.Get({b, j / c.page_size})) : b;
      const int64_t row = c.page_size > 0 ? j % c.page_size : j;
      for (HostTensor* t : {&k, &v}) {
        for (int64_t h = 0; h < c.heads_kv; ++h)
          for (int64_t d = 0; d < t->shape()[3]; ++d) poison(t, {page, row, h, d});
      }
    }
  }
  if (c.v_in_k || c.v_copies_k) {
    // v holds what the view of k shows (the oracle reads it); with v_in_k the call reads k's.
    ForEachIndex(v.shape(), [&](const std::vector<int64_t>& i) { v.Set(i, k.Get(i)); });
    if (c.v_format != 0) {
      ForEachIndex(v_scales.shape(),
                   [&](const std::vector<int64_t>& i) { v_scales.Set(i, k_scales.Get(i)); });
    }
  }
  options.struct_size = sizeof(options);
  options.scale = c.scale;
  options.causal = c.causal;
  options.has_window = c.has_window;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.softcap = c.softcap;
  options.f32_pv = c.f32_pv;
  options.int8_queries = c.int8_queries;
  q_view = q.view(), k_view = k.view(), v_view = v.view(), out_view = out.view();
  lse_view = lse.view(), alibi_view = alibi.view(), sinks_view = sinks.view();
  mask_view = mask.view();
  seqused_k_view = seqused_k.view(), block_table_view = block_table.view();
  options.seqused_k = c.seqused_k.empty() ? nullptr : &seqused_k_view;
  options.block_table = c.page_size > 0 ? &block_table_view : nullptr;
  options.alibi_slopes = c.alibi ? &alibi_view : nullptr;
  options.sinks = c.sinks ? &sinks_view : nullptr;
  options.mask = c.mask ? &mask_view : nullptr;
  k_scales_view = k_scales.view(), v_scales_view = v_scales.view();
  if (c.v_in_k) {
    v_view = k.view(), v_view.shape[3] = DimV(c);
    if (c.v_format != 0 && c.v_format != SATTN_DTYPE_FP8_E4M3) {  // FP8's are per kv head
      v_scales_view = k_scales.view(), v_scales_view.shape[3] = v_scales.shape()[3];
    }
  }
  options.k_scales = c.k_format != 0 ? &k_scales_view : nullptr;
  options.v_scales = c.v_format != 0 ? &v_scales_view : nullptr;
  with_lse_ = c.with_lse;
}

sattn_status AttentionCall::Run(sattn_context* ctx) const {
  return sattn_attention(ctx, &q_view, &k_view, &v_view, &out_view, with_lse_ ? &lse_view : nullptr,
                         &options);
}

reference::AttentionSpec AttentionCall::Spec(const AttentionCase& c) const {
  reference::AttentionSpec spec;
  spec.scale = c.scale;
  spec.causal = c.causal;
  if (c.has_window) {
    spec.window_left = c.window_left;
    spec.window_right = c.window_right;
  }
  spec.softcap = c.softcap;
  spec.seqused_k = c.seqused_k;
  if (c.alibi) spec.alibi_slopes = alibi.ToArray().data;
  if (c.sinks) spec.sinks = sinks.ToArray().data;
  if (c.mask) {
    const Array m = mask.ToArray();
    spec.mask = [m, c](int64_t b, int64_t h, int64_t i, int64_t j) {
      return m({c.mask_batch == 1 ? 0 : b, c.mask_heads == 1 ? 0 : h, i, j});
    };
  }
  return spec;
}

Array AttentionCall::LogicalKeys(const AttentionCase& c, const HostTensor& t) const {
  if (c.page_size == 0) return t.ToArray();
  // The pages' rows of [heads_kv, dim] elements, copied whole from the pool in table order.
  const Array pool = t.ToArray();
  const int64_t row = c.heads_kv * t.shape()[3];
  Array a({c.batch, c.seq_k, c.heads_kv, t.shape()[3]});
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t used = c.seqused_k.empty() ? c.seq_k : c.seqused_k[b];
    for (int64_t j = 0; j < used; ++j) {
      const int64_t page = static_cast<int64_t>(block_table.Get({b, j / c.page_size}));
      const double* from = pool.data.data() + (page * c.page_size + j % c.page_size) * row;
      std::copy(from, from + row, a.data.data() + (b * c.seq_k + j) * row);
    }
  }
  return a;
}

Array AttentionCall::KeyValues(const AttentionCase& c, const HostTensor& t) const {
  const sattn_dtype format = &t == &k ? c.k_format : c.v_format;
  Array a = LogicalKeys(c, t);
  if (format == 0) return a;
  const HostTensor& scales = &t == &k ? k_scales : v_scales;
  // Rows in row-major order cycle through the kv heads.
  const int64_t dim = a.shape[3], rows = dim > 0 ? a.size() / dim : 0;
  double* row = a.data.data();
  if (format == SATTN_DTYPE_FP8_E4M3) {
    const Array s = scales.ToArray();
    for (int64_t r = 0; r < rows; ++r, row += dim) {
      const double scale = s.data[s.size() == 1 ? 0 : r % c.heads_kv];
      for (int64_t d = 0; d < dim; ++d) row[d] *= scale;
    }
    return a;
  }
  const Array s = LogicalKeys(c, scales);
  const int64_t groups = s.shape[3], group = dim / groups;
  const double* scale = s.data.data();
  for (int64_t r = 0; r < rows; ++r, row += dim, scale += groups) {
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t d = g * group; d < (g + 1) * group; ++d) row[d] *= scale[g];
    }
  }
  return a;
}

AttentionErrors CompareWithOracle(const AttentionCase& c, const AttentionCall& call) {
  const auto want = reference::Attention(call.q.ToArray(), call.KeyValues(c, call.k),
                                         call.KeyValues(c, call.v), call.Spec(c));
  AttentionErrors e;
  e.out = MaxRelativeError(call.out.ToArray(), want.out);
  if (c.with_lse) {
    const Array got = call.lse.ToArray();
    for (size_t i = 0; i < got.data.size(); ++i) {
      const double w = want.lse.data[i], g = got.data[i];
      if (std::isinf(w) || std::isnan(w)) {
        if (!(g == w || (std::isnan(g) && std::isnan(w)))) e.lse = INFINITY;
      } else {
        e.lse = std::max(e.lse, std::isnan(g) ? INFINITY : std::fabs(g - w));
      }
    }
  }
  return e;
}

AttentionErrors RunAgainstOracle(sattn_context* ctx, const AttentionCase& c) {
  AttentionCall call(c);
  const sattn_status status = call.Run(ctx);
  if (status != SATTN_OK) {
    ADD_FAILURE() << c.Describe() << ": " << sattn_status_string(status) << ": "
                  << sattn_last_error();
    return {INFINITY, INFINITY};
  }
  return CompareWithOracle(c, call);
}

bool NativePrefill(sattn_dtype dtype) {
  ScopedContext ctx;
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  EXPECT_EQ(sattn_context_get_info(ctx.get(), &info), SATTN_OK) << sattn_last_error();
  const char* kernel = dtype == SATTN_DTYPE_BF16  ? info.bf16_kernel
                       : dtype == SATTN_DTYPE_F16 ? info.f16_kernel
                                                  : info.f32_kernel;
  return std::string(kernel) != "f32-fma";
}

double OutTolerance(const AttentionCase& c) {
  // P rounded to the inputs' type: bf16 at most 2^-8 of each weight, 1e-3 to 2e-3 of the
  // largest |out| measured on these uniform inputs; f16 at most 2^-11, 1e-4 to 2.2e-4
  // (docs/performance.md).
  constexpr double kBf16P = 4e-3, kF16P = 5e-4;
  const bool native_dtype =
      c.q_dtype == c.kv_dtype && (c.q_dtype == SATTN_DTYPE_BF16 || c.q_dtype == SATTN_DTYPE_F16);
  const double rounded_p = !native_dtype || c.f32_pv || !NativePrefill(c.q_dtype) ? 0.0
                           : c.q_dtype == SATTN_DTYPE_BF16                        ? kBf16P
                                                                                  : kF16P;
  // A quantized cache is computed on in f32, as an f32 cache of the values it stands for.
  if (c.Quantized() && c.out_dtype == SATTN_DTYPE_F32) return 2e-6;
  switch (c.out_dtype) {
    case SATTN_DTYPE_F16:
      return std::max(1e-3, rounded_p);
    case SATTN_DTYPE_BF16:
      return 8e-3;
    default:
      return std::max(1e-5, rounded_p);
  }
}

void ExpectMatchesOracle(sattn_context* ctx, const AttentionCase& c) {
  const AttentionErrors e = RunAgainstOracle(ctx, c);
  EXPECT_LE(e.out, OutTolerance(c)) << c.Describe();
  EXPECT_LE(e.lse, 2e-5) << c.Describe();
}

std::vector<uint8_t> OutputBytes(const AttentionCase& c, int threads) {
  ScopedContext ctx(threads);
  AttentionCall call(c);
  EXPECT_EQ(call.Run(ctx.get()), SATTN_OK) << sattn_last_error();
  std::vector<uint8_t> bytes = call.out.bytes();
  bytes.insert(bytes.end(), call.lse.bytes().begin(), call.lse.bytes().end());
  return bytes;
}

}  // namespace testing_util
}  // namespace streamattn
