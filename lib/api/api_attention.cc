// sattn_attention: every argument checked and the options made canonical (AttentionArgs), then
// the backend.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>

#include "api/api_checks.h"
#include "api/api_guard.h"
#include "core/attention_args.h"
#include "core/versioned_options.h"

namespace streamattn {
namespace {

// The widest rows: MLA after weight absorption (DeepSeek-V2/V3, Kimi K2) scores 576 channels
// (512 latent + 64 rotary) and takes V from the first 512. Nothing in the CPU kernels is sized
// by head_dim at compile time (tiles and scratch follow the plan), so these limits only bound
// a worker's scratch: with head_dim 576 a prefill worker's K and V tiles and packed queries
// stay under 2 MiB (attention_scratch-inl.h), whatever the sequence length.
constexpr int64_t kMaxHeadDim = 576;
constexpr int64_t kMaxHeadDimV = 512;

// A validated call: its arguments and the device they live on.
struct Call {
  explicit Call(sattn_context* c) : ctx(c), device(c), a(c->allocator), host_copy(c->allocator) {}
  sattn_context* ctx;
  CallDevice device;
  AttentionArgs a;
  Vector<unsigned char> host_copy;  // option values copied from the device to be checked
};

// Option values the checks must read (seqused_k, block_table, slopes, sinks), from the call's
// device; a device copy waits for the context's stream (see sattn_context_set_cuda_stream).
Status HostReadable(Call* call, const Tensor& t, const char* name, Tensor* host) {
  return call->device.backend(call->ctx)->CopyToHost(t, name, &call->host_copy, host);
}

// A [heads_q] float32 vector option (ALiBi slopes, sinks), copied out.
Status ReadPerHeadVector(Call* call, const sattn_tensor* view, const char* name, int64_t heads_q,
                         bool allow_minus_infinity, Vector<float>* out) {
  Tensor device_view, t;
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call->device, view, name, 1, &device_view));
  SATTN_RETURN_IF_ERROR(HostReadable(call, device_view, name, &t));
  SATTN_RETURN_IF_ERROR(CheckDType(t, name, DType::kF32));
  if (t.dim(0) != heads_q) {
    return InvalidArgument("%s.shape[0]=%" PRId64 " must equal heads_q=%" PRId64, name, t.dim(0),
                           heads_q);
  }
  out->resize(heads_q);
  for (int64_t h = 0; h < heads_q; ++h) {
    const float x = *t.At<float>(h);
    if (std::isnan(x) || (std::isinf(x) && !(allow_minus_infinity && x < 0))) {
      return InvalidArgument("%s[%" PRId64 "]=%g must be finite%s", name, h, x,
                             allow_minus_infinity ? " or -inf" : "");
    }
    (*out)[h] = x;
  }
  return Status();
}

// The scales of cache `cache` (a->k or a->v, `dim` channels a row) from `view`
// (options->k_scales or v_scales): none for a float cache; group scales for I8 and I4; one
// float32 per kv head, or one for the tensor, for FP8.
Status ReadCacheScales(Call* call, const sattn_tensor* view, const char* name, const Tensor& cache,
                       const char* cache_name, GroupScales* group, Vector<float>* head_scales) {
  const AttentionArgs& a = call->a;
  if (!IsQuantizedDType(cache.dtype)) {
    if (view == nullptr) return Status();
    return InvalidArgument("%s must be NULL: %s.dtype=%s is not a quantized format", name,
                           cache_name, DTypeName(cache.dtype));
  }
  if (view == nullptr) {
    return InvalidArgument("%s must not be NULL: %s.dtype=%s needs its scales", name, cache_name,
                           DTypeName(cache.dtype));
  }
  if (cache.dtype == DType::kFP8E4M3) {
    Tensor device_view, t;
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call->device, view, name, 1, &device_view));
    SATTN_RETURN_IF_ERROR(HostReadable(call, device_view, name, &t));
    SATTN_RETURN_IF_ERROR(CheckDType(t, name, DType::kF32));
    if (t.dim(0) != a.heads_kv && t.dim(0) != 1) {
      return InvalidArgument("%s.shape[0]=%" PRId64 " must be heads_kv=%" PRId64
                             " (a scale per kv head) or 1 (one for %s)",
                             name, t.dim(0), a.heads_kv, cache_name);
    }
    head_scales->resize(a.heads_kv);
    for (int64_t h = 0; h < t.dim(0); ++h) {
      const float x = *t.At<float>(h);
      if (!(x >= 0.0f) || std::isinf(x)) {
        return InvalidArgument("%s[%" PRId64 "]=%g must be finite and >= 0", name, h, x);
      }
    }
    for (int64_t h = 0; h < a.heads_kv; ++h)
      (*head_scales)[h] = *t.At<float>(t.dim(0) == 1 ? 0 : h);
    return Status();
  }
  Tensor& scales = group->scales;
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call->device, view, name, 4, &scales));
  if (scales.dtype != DType::kF32 && scales.dtype != DType::kF16) {
    return InvalidArgument("%s.dtype=%s must be f16 or f32 (the scales of %s.dtype=%s)", name,
                           DTypeName(scales.dtype), cache_name, DTypeName(cache.dtype));
  }
  for (int dim = 0; dim < 3; ++dim) {
    SATTN_RETURN_IF_ERROR(CheckSameExtent(scales, name, dim, cache, cache_name, dim));
  }
  const int64_t channels = cache.dim(3), groups = scales.dim(3);
  if (channels % groups != 0) {
    return InvalidArgument("%s.shape[3]=%" PRId64 " must divide %s.shape[3]=%" PRId64
                           " (head_dim / group size)",
                           name, groups, cache_name, channels);
  }
  group->group = channels / groups;
  if (cache.dtype == DType::kI4 && group->group % 2 != 0) {
    return InvalidArgument("%s: the group size %s.shape[3] / %s.shape[3]=%" PRId64
                           " must be even for i4 (two elements a byte)",
                           name, cache_name, name, group->group);
  }
  const int64_t g = group->group;
  bool addressable =
      (g & (g - 1)) == 0 && cache.stride(3) == 1 && (groups == 1 || scales.stride(3) == 1);
  for (int dim = 0; dim < 3; ++dim) addressable &= scales.stride(dim) * g == cache.stride(dim);
  group->addressable = addressable;
  while ((int64_t{1} << group->log2_group) < g) ++group->log2_group;
  return Status();
}

Status CheckMask(const AttentionArgs& a, const Tensor& mask) {
  SATTN_RETURN_IF_ERROR(CheckFloatDType(mask, "mask"));
  if (mask.dim(0) != 1 && mask.dim(0) != a.batch) {
    return InvalidArgument("mask.shape[0]=%" PRId64 " must be 1 or batch=%" PRId64
                           " (the mask broadcasts over batch and heads only)",
                           mask.dim(0), a.batch);
  }
  if (mask.dim(1) != 1 && mask.dim(1) != a.heads_q) {
    return InvalidArgument("mask.shape[1]=%" PRId64 " must be 1 or heads_q=%" PRId64, mask.dim(1),
                           a.heads_q);
  }
  SATTN_RETURN_IF_ERROR(CheckSameExtent(mask, "mask", 2, a.q, "q", 1));
  if (mask.dim(3) != a.seq_k) {
    return InvalidArgument("mask.shape[3]=%" PRId64 " must equal the cache length seq_k=%" PRId64,
                           mask.dim(3), a.seq_k);
  }
  return Status();
}

// One cu_seqlens view: int32 [batch + 1], starting at 0, non-decreasing, ending at `total`
// (the packed extent of `packed_name`), copied into *offsets.
// `length`, when not 0, is the batch + 1 another argument fixed (cu_seqlens_q's length).
Status ReadSeqLens(Call* call, const sattn_tensor* view, const char* name, int64_t total,
                   const char* packed_name, int64_t length, Vector<int64_t>* offsets) {
  Tensor device_view, t;
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call->device, view, name, 1, &device_view));
  SATTN_RETURN_IF_ERROR(HostReadable(call, device_view, name, &t));
  SATTN_RETURN_IF_ERROR(CheckDType(t, name, DType::kI32));
  const int64_t n = t.dim(0);
  if (length != 0 && n != length) {
    return InvalidArgument("%s.shape[0]=%" PRId64
                           " must equal options->cu_seqlens_q.shape[0]=%" PRId64
                           " (batch + 1 each)",
                           name, n, length);
  }
  if (n < 2) {
    return InvalidArgument("%s.shape[0]=%" PRId64 " must be batch + 1 >= 2 (prefix sums)", name, n);
  }
  offsets->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t x = *t.At<const int32_t>(i);
    if (i == 0 && x != 0) return InvalidArgument("%s[0]=%" PRId64 " must be 0", name, x);
    if (i > 0 && x < (*offsets)[i - 1]) {
      return InvalidArgument("%s[%" PRId64 "]=%" PRId64 " must be >= %s[%" PRId64 "]=%" PRId64
                             " (non-decreasing prefix sums)",
                             name, i, x, name, i - 1, (*offsets)[i - 1]);
    }
    (*offsets)[i] = x;
  }
  if ((*offsets)[n - 1] != total) {
    return InvalidArgument("%s[%" PRId64 "]=%" PRId64 " must equal %s=%" PRId64
                           " (the packed length)",
                           name, n - 1, (*offsets)[n - 1], packed_name, total);
  }
  return Status();
}

// Packed batches: q (and with cu_seqlens_k, k and v) hold the sequences end to end in a batch
// dimension of 1; the batch is cu_seqlens_q's length - 1.
Status ReadPackedLayout(Call* call, const sattn_attention_options& o) {
  AttentionArgs* a = &call->a;
  if (o.cu_seqlens_q == nullptr) {
    if (o.cu_seqlens_k == nullptr) return Status();
    return InvalidArgument(
        "options->cu_seqlens_k requires options->cu_seqlens_q (packed keys with padded "
        "queries are not supported)");
  }
  if (o.cu_seqlens_k != nullptr && o.block_table != nullptr) {
    return InvalidArgument(
        "options->cu_seqlens_k and options->block_table exclude each other (packed or paged "
        "keys, not both)");
  }
  if (o.mask != nullptr) {
    return InvalidArgument(
        "options->mask must be NULL with options->cu_seqlens_q (a [batch, heads, seq_q, seq_k] "
        "mask has no meaning for packed sequences)");
  }
  if (a->q.dim(0) != 1) {
    return InvalidArgument("q.shape[0]=%" PRId64
                           " must be 1 with options->cu_seqlens_q (the sequences are packed "
                           "along q.shape[1])",
                           a->q.dim(0));
  }
  SATTN_RETURN_IF_ERROR(ReadSeqLens(call, o.cu_seqlens_q, "options->cu_seqlens_q", a->q.dim(1),
                                    "q.shape[1]", 0, &a->q_offsets));
  const int64_t batch = static_cast<int64_t>(a->q_offsets.size()) - 1;
  if (o.cu_seqlens_k == nullptr) return Status();
  if (a->k.dim(0) != 1) {
    return InvalidArgument("k.shape[0]=%" PRId64
                           " must be 1 with options->cu_seqlens_k (the sequences are packed "
                           "along k.shape[1])",
                           a->k.dim(0));
  }
  return ReadSeqLens(call, o.cu_seqlens_k, "options->cu_seqlens_k", a->k.dim(1), "k.shape[1]",
                     batch + 1, &a->k_offsets);
}

// The batch: cu_seqlens_q's when packed, else q's batch extent.
int64_t CallBatch(const AttentionArgs& a) {
  return a.q_offsets.empty() ? a.q.dim(0) : static_cast<int64_t>(a.q_offsets.size()) - 1;
}

// The paged layout: block_table [batch, max_pages] int32 and k, v [num_pages, page_size, ...].
Status ReadBlockTable(Call* call, const sattn_tensor* view) {
  AttentionArgs* a = &call->a;
  SATTN_RETURN_IF_ERROR(
      ValidateOnDevice(&call->device, view, "options->block_table", 2, &a->block_table));
  SATTN_RETURN_IF_ERROR(CheckDType(a->block_table, "options->block_table", DType::kI32));
  if (!a->q_offsets.empty()) {
    if (a->block_table.dim(0) != CallBatch(*a)) {
      return InvalidArgument("options->block_table.shape[0]=%" PRId64
                             " must equal the batch, options->cu_seqlens_q.shape[0] - 1=%" PRId64,
                             a->block_table.dim(0), CallBatch(*a));
    }
  } else {
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->block_table, "options->block_table", 0, a->q, "q", 0));
  }
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a->v, "v", 0, a->k, "k", 0));
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a->v, "v", 1, a->k, "k", 1));
  a->paged = true;
  a->page_size = a->k.dim(1);
  if (__builtin_mul_overflow(a->block_table.dim(1), a->page_size, &a->seq_k)) {
    return InvalidArgument("options->block_table.shape[1] x page_size overflows int64");
  }
  return Status();
}

// seqused_k [batch] int32, each in [0, seq_k]; then every block-table entry of a used page.
Status ReadKeyCounts(Call* call, const sattn_tensor* view) {
  AttentionArgs* a = &call->a;
  if (view != nullptr) {
    Tensor t;
    SATTN_RETURN_IF_ERROR(
        ValidateOnDevice(&call->device, view, "options->seqused_k", 1, &a->seqused_k_view));
    SATTN_RETURN_IF_ERROR(HostReadable(call, a->seqused_k_view, "options->seqused_k", &t));
    SATTN_RETURN_IF_ERROR(CheckDType(t, "options->seqused_k", DType::kI32));
    if (a->q_offsets.empty()) {
      SATTN_RETURN_IF_ERROR(CheckSameExtent(t, "options->seqused_k", 0, a->q, "q", 0));
    } else if (t.dim(0) != a->batch) {
      return InvalidArgument("options->seqused_k.shape[0]=%" PRId64
                             " must equal the batch, options->cu_seqlens_q.shape[0] - 1=%" PRId64,
                             t.dim(0), a->batch);
    }
    Vector<int64_t> used_k(call->ctx->allocator);
    used_k.resize(a->batch);
    for (int64_t b = 0; b < a->batch; ++b) {
      const int64_t used = *t.At<const int32_t>(b);
      const int64_t most = a->SeqK(b);  // the cache length, or sequence b's packed keys
      if (used < 0 || used > most) {
        return InvalidArgument(
            "options->seqused_k[%" PRId64 "]=%" PRId64 " must be in [0, %" PRId64 "] (%s)", b, used,
            most,
            a->k_offsets.empty() ? "the cache length" : "the sequence's keys in cu_seqlens_k");
      }
      used_k[b] = used;
    }
    a->seqused_k = std::move(used_k);
  }
  if (!a->paged) return Status();
  Tensor table;
  SATTN_RETURN_IF_ERROR(HostReadable(call, a->block_table, "options->block_table", &table));
  const int64_t num_pages = a->k.dim(0);
  for (int64_t b = 0; b < a->batch; ++b) {
    const int64_t pages_used = (a->SeqK(b) + a->page_size - 1) / a->page_size;
    for (int64_t j = 0; j < pages_used; ++j) {
      const int32_t page = *table.At<const int32_t>(b, j);
      if (page < 0 || page >= num_pages) {
        return InvalidArgument("options->block_table[%" PRId64 ", %" PRId64
                               "]=%d must be in [0, %" PRId64 ") (k.shape[0], the page count)",
                               b, j, page, num_pages);
      }
    }
  }
  return Status();
}

Status ReadOptionsInto(Call* call, const sattn_attention_options& o) {
  AttentionArgs* a = &call->a;
  if (!std::isfinite(o.scale)) return InvalidArgument("options->scale=%g must be finite", o.scale);
  a->scale = o.scale != 0.0f ? o.scale : 1.0f / std::sqrt(static_cast<float>(a->head_dim));
  if (!(o.softcap >= 0.0f) || std::isinf(o.softcap)) {
    return InvalidArgument("options->softcap=%g must be finite and >= 0 (0 = none)", o.softcap);
  }
  a->softcap = o.softcap;
  a->f32_pv = o.f32_pv != 0;
  a->int8_queries = o.int8_queries != 0;
  if (o.has_window) {
    if (o.window_left < -1) {
      return InvalidArgument("options->window_left=%" PRId64 " must be >= -1 (-1 = unbounded)",
                             o.window_left);
    }
    if (o.window_right < -1) {
      return InvalidArgument("options->window_right=%" PRId64 " must be >= -1 (-1 = unbounded)",
                             o.window_right);
    }
    a->window_left = o.window_left;
    a->window_right = o.window_right;
  }
  if (o.causal) a->window_right = a->window_right < 0 ? 0 : std::min<int64_t>(a->window_right, 0);
  if (o.alibi_slopes != nullptr) {
    SATTN_RETURN_IF_ERROR(ReadPerHeadVector(call, o.alibi_slopes, "options->alibi_slopes",
                                            a->heads_q, false, &a->alibi_slopes));
  }
  if (o.sinks != nullptr) {
    SATTN_RETURN_IF_ERROR(
        ReadPerHeadVector(call, o.sinks, "options->sinks", a->heads_q, true, &a->sinks));
  }
  SATTN_RETURN_IF_ERROR(ReadCacheScales(call, o.k_scales, "options->k_scales", a->k, "k",
                                        &a->k_group_scales, &a->k_head_scales));
  SATTN_RETURN_IF_ERROR(ReadCacheScales(call, o.v_scales, "options->v_scales", a->v, "v",
                                        &a->v_group_scales, &a->v_head_scales));
  SATTN_RETURN_IF_ERROR(ReadKeyCounts(call, o.seqused_k));
  if (o.mask != nullptr) {
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call->device, o.mask, "options->mask", 4, &a->mask));
    SATTN_RETURN_IF_ERROR(CheckMask(*a, a->mask));
    a->has_mask = true;
  }
  return Status();
}

Status CheckShapes(AttentionArgs* a) {
  SATTN_RETURN_IF_ERROR(CheckFloatDType(a->q, "q"));
  SATTN_RETURN_IF_ERROR(CheckCacheDType(a->k, "k"));
  SATTN_RETURN_IF_ERROR(CheckCacheDType(a->v, "v"));
  SATTN_RETURN_IF_ERROR(CheckFloatDType(a->out, "out"));
  if (!a->paged && a->q_offsets.empty()) {  // paged caches have pages in k's first two dims
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->k, "k", 0, a->q, "q", 0));
  }
  if (!a->paged && !a->q_offsets.empty() && a->k_offsets.empty() && a->k.dim(0) != CallBatch(*a)) {
    return InvalidArgument("k.shape[0]=%" PRId64
                           " must equal the batch, options->cu_seqlens_q.shape[0] - 1=%" PRId64
                           " (or pack k with options->cu_seqlens_k, or page it)",
                           a->k.dim(0), CallBatch(*a));
  }
  if (!a->paged) {
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->v, "v", 0, a->k, "k", 0));
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->v, "v", 1, a->k, "k", 1));
  }
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a->v, "v", 2, a->k, "k", 2));
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a->k, "k", 3, a->q, "q", 3));
  if (a->q.dim(2) % a->k.dim(2) != 0) {
    return InvalidArgument("q.shape[2]=%" PRId64
                           " (heads_q) must be a multiple of k.shape[2]=%" PRId64 " (heads_kv)",
                           a->q.dim(2), a->k.dim(2));
  }
  if (a->q.dim(3) > kMaxHeadDim) {
    return InvalidArgument("q.shape[3]=%" PRId64 " (head_dim) must be <= %" PRId64, a->q.dim(3),
                           kMaxHeadDim);
  }
  if (a->v.dim(3) > kMaxHeadDimV) {
    return InvalidArgument("v.shape[3]=%" PRId64 " (head_dim_v) must be <= %" PRId64, a->v.dim(3),
                           kMaxHeadDimV);
  }
  for (int dim = 0; dim < 3; ++dim) {
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->out, "out", dim, a->q, "q", dim));
  }
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a->out, "out", 3, a->v, "v", 3));
  a->batch = CallBatch(*a);
  a->seq_q = a->q.dim(1);
  a->heads_q = a->q.dim(2);
  a->head_dim = a->q.dim(3);
  if (!a->paged) a->seq_k = a->k.dim(1);
  // Packed: seq_q and seq_k become the longest sequence's (the plan's shapes, the split-KV
  // chunks); each sequence's own lengths are SeqQ(b) and SeqK(b).
  if (!a->q_offsets.empty()) {
    a->seq_q = 0;
    for (int64_t b = 0; b < a->batch; ++b) a->seq_q = std::max(a->seq_q, a->SeqQ(b));
  }
  if (!a->k_offsets.empty()) {
    a->seq_k = 0;
    for (int64_t b = 0; b < a->batch; ++b) a->seq_k = std::max(a->seq_k, a->SeqK(b));
  }
  a->heads_kv = a->k.dim(2);
  a->head_dim_v = a->v.dim(3);
  a->group = a->heads_q / a->heads_kv;
  if (a->has_lse) {
    SATTN_RETURN_IF_ERROR(CheckDType(a->lse, "lse", DType::kF32));
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->lse, "lse", 0, a->q, "q", 0));
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->lse, "lse", 1, a->q, "q", 2));
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a->lse, "lse", 2, a->q, "q", 1));
  }
  return Status();
}

// Outputs must not overlap themselves, each other, or any input (out may be exactly q).
Status CheckAliasing(const AttentionArgs& a) {
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(a.out, "out"));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.out, "out", a.q, "q", true));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.out, "out", a.k, "k", false));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.out, "out", a.v, "v", false));
  if (a.has_mask) {
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.out, "out", a.mask, "options->mask", false));
  }
  if (a.paged) {
    SATTN_RETURN_IF_ERROR(
        CheckNoPartialOverlap(a.out, "out", a.block_table, "options->block_table", false));
  }
  for (const auto& [g, name] :
       {std::pair<const GroupScales*, const char*>{&a.k_group_scales, "options->k_scales"},
        {&a.v_group_scales, "options->v_scales"}}) {
    if (g->group == 0) continue;
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.out, "out", g->scales, name, false));
    if (a.has_lse)
      SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.lse, "lse", g->scales, name, false));
  }
  if (!a.has_lse) return Status();
  if (a.paged) {
    SATTN_RETURN_IF_ERROR(
        CheckNoPartialOverlap(a.lse, "lse", a.block_table, "options->block_table", false));
  }
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(a.lse, "lse"));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.lse, "lse", a.out, "out", false));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.lse, "lse", a.q, "q", false));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.lse, "lse", a.k, "k", false));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.lse, "lse", a.v, "v", false));
  if (a.has_mask) {
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.lse, "lse", a.mask, "options->mask", false));
  }
  return Status();
}

Status Attention(sattn_context* ctx, const sattn_tensor* q, const sattn_tensor* k,
                 const sattn_tensor* v, const sattn_tensor* out, const sattn_tensor* lse,
                 const sattn_attention_options* options) {
  SATTN_RETURN_IF_ERROR(CheckContext(ctx));
  const ContextLock hold(ctx->call_mutex);
  Call call(ctx);
  AttentionArgs& a = call.a;
  CallDevice* device = &call.device;
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(device, q, "q", 4, &a.q));
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(device, k, "k", 4, &a.k));
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(device, v, "v", 4, &a.v));
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(device, out, "out", 4, &a.out));
  if (lse != nullptr) {
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(device, lse, "lse", 3, &a.lse));
    a.has_lse = true;
  }
  sattn_attention_options o{};
  SATTN_RETURN_IF_ERROR(ReadOptions(options, "options", kFirstAttentionOptionsSize, &o));
  if (options != nullptr && CutsAttentionOptionsField(options->struct_size)) {
    return InvalidArgument(
        "options->struct_size=%u ends inside a field: it is not the size of a version (set it "
        "to sizeof(sattn_attention_options))",
        options->struct_size);
  }
  SATTN_RETURN_IF_ERROR(ReadPackedLayout(&call, o));
  if (o.block_table != nullptr) SATTN_RETURN_IF_ERROR(ReadBlockTable(&call, o.block_table));
  SATTN_RETURN_IF_ERROR(CheckShapes(&a));
  SATTN_RETURN_IF_ERROR(ReadOptionsInto(&call, o));
  SATTN_RETURN_IF_ERROR(CheckAliasing(a));
  return device->backend(ctx)->Attention(a);
}

}  // namespace
}  // namespace streamattn

extern "C" {

SATTN_API sattn_status sattn_attention(sattn_context* ctx, const sattn_tensor* q,
                                       const sattn_tensor* k, const sattn_tensor* v,
                                       const sattn_tensor* out, const sattn_tensor* lse,
                                       const sattn_attention_options* options) {
  return streamattn::RunGuarded(
      [&] { return streamattn::Attention(ctx, q, k, v, out, lse, options); });
}

}  // extern "C"
