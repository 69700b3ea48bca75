// sattn_quantize_kv: every argument checked (the destination rows' positions and pages, the
// scales, every source element finite), then the backend. Nothing is written before all of it
// has passed.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "api/api_checks.h"
#include "api/api_guard.h"
#include "core/backend.h"
#include "core/versioned_options.h"

namespace streamattn {
namespace {

constexpr size_t kFirstQuantizeKVOptionsSize =
    offsetof(sattn_quantize_kv_options, block_table) + sizeof(const sattn_tensor*);

struct Call {
  explicit Call(sattn_context* c) : ctx(c), device(c), args(c->allocator), copy(c->allocator) {}
  sattn_context* ctx;
  CallDevice device;
  QuantizeKVArgs args;
  Vector<unsigned char> copy;  // small option tensors copied to the host to be checked
};

Status HostReadable(Call* call, const Tensor& t, const char* name, Tensor* host) {
  return call->device.backend(call->ctx)->CopyToHost(t, name, &call->copy, host);
}

// The destination's layout: contiguous values [batch, cache_len, ...], or pages through
// options->block_table. Sets the cache length in *capacity.
Status ReadDestination(Call* call, const sattn_quantize_kv_options& o, int64_t* capacity) {
  QuantizeKVArgs& a = call->args;
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a.values, "values", 2, a.src, "src", 2));
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a.values, "values", 3, a.src, "src", 3));
  if (o.block_table == nullptr) {
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a.values, "values", 0, a.src, "src", 0));
    *capacity = a.values.dim(1);
    return Status();
  }
  Tensor device_view;
  SATTN_RETURN_IF_ERROR(
      ValidateOnDevice(&call->device, o.block_table, "options->block_table", 2, &device_view));
  SATTN_RETURN_IF_ERROR(HostReadable(call, device_view, "options->block_table", &a.block_table));
  SATTN_RETURN_IF_ERROR(CheckDType(a.block_table, "options->block_table", DType::kI32));
  SATTN_RETURN_IF_ERROR(CheckSameExtent(a.block_table, "options->block_table", 0, a.src, "src", 0));
  a.paged = true;
  a.page_size = a.values.dim(1);
  if (__builtin_mul_overflow(a.block_table.dim(1), a.page_size, capacity)) {
    return InvalidArgument("options->block_table.shape[1] x page_size overflows int64");
  }
  return Status();
}

// positions[b] (0 without options->positions), with every row of sequence b inside the cache;
// paged, each page those rows reach in range, and no two rows of the call on one page slot
// (their order of writing would be a race).
Status ReadPositions(Call* call, const sattn_quantize_kv_options& o, int64_t capacity) {
  QuantizeKVArgs& a = call->args;
  const int64_t batch = a.src.dim(0), n = a.src.dim(1);
  a.positions.assign(batch, 0);
  if (o.positions != nullptr) {
    Tensor device_view, t;
    SATTN_RETURN_IF_ERROR(
        ValidateOnDevice(&call->device, o.positions, "options->positions", 1, &device_view));
    SATTN_RETURN_IF_ERROR(HostReadable(call, device_view, "options->positions", &t));
    SATTN_RETURN_IF_ERROR(CheckDType(t, "options->positions", DType::kI32));
    SATTN_RETURN_IF_ERROR(CheckSameExtent(t, "options->positions", 0, a.src, "src", 0));
    for (int64_t b = 0; b < batch; ++b) a.positions[b] = *t.At<const int32_t>(b);
  }
  for (int64_t b = 0; b < batch; ++b) {
    if (a.positions[b] < 0 || a.positions[b] > capacity - n) {
      return InvalidArgument("options->positions[%" PRId64 "]=%" PRId64 ": its %" PRId64
                             " rows (src.shape[1]) must fit the cache of %" PRId64 " keys",
                             b, a.positions[b], n, capacity);
    }
  }
  if (!a.paged) return Status();
  const int64_t num_pages = a.values.dim(0);
  Vector<std::pair<int64_t, int64_t>> slots(call->ctx->allocator);  // (page slot, sequence)
  slots.reserve(static_cast<size_t>(batch * n));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t key = a.positions[b]; key < a.positions[b] + n; ++key) {
      const int64_t j = key / a.page_size;
      const int32_t page = *a.block_table.At<const int32_t>(b, j);
      if (page < 0 || page >= num_pages) {
        return InvalidArgument("options->block_table[%" PRId64 ", %" PRId64
                               "]=%d must be in [0, %" PRId64 ") (values.shape[0], the page count)",
                               b, j, page, num_pages);
      }
      slots.emplace_back(page * a.page_size + key % a.page_size, b);
    }
  }
  std::sort(slots.begin(), slots.end());
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i].first == slots[i - 1].first) {
      return InvalidArgument("options->block_table: sequences %" PRId64 " and %" PRId64
                             " both write row %" PRId64 " of page %" PRId64,
                             slots[i - 1].second, slots[i].second, slots[i].first % a.page_size,
                             slots[i].first / a.page_size);
    }
  }
  return Status();
}

// FP8: float32 [heads_kv] or [1], read; I8 and I4: group scales like values, written.
Status ReadScales(Call* call, const sattn_tensor* view) {
  QuantizeKVArgs& a = call->args;
  if (view == nullptr) return InvalidArgument("scales must not be NULL");
  const int64_t heads = a.values.dim(2);
  if (a.values.dtype == DType::kFP8E4M3) {
    Tensor device_view, t;
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call->device, view, "scales", 1, &device_view));
    SATTN_RETURN_IF_ERROR(HostReadable(call, device_view, "scales", &t));
    SATTN_RETURN_IF_ERROR(CheckDType(t, "scales", DType::kF32));
    if (t.dim(0) != heads && t.dim(0) != 1) {
      return InvalidArgument("scales.shape[0]=%" PRId64 " must be heads_kv=%" PRId64 " or 1",
                             t.dim(0), heads);
    }
    a.head_scales.resize(heads);
    for (int64_t h = 0; h < heads; ++h) {
      const float x = *t.At<float>(t.dim(0) == 1 ? 0 : h);
      if (!(x > 0.0f) || std::isinf(x)) {
        return InvalidArgument("scales[%" PRId64
                               "]=%g must be finite and > 0 (fp8 values are x / scale)",
                               t.dim(0) == 1 ? 0 : h, x);
      }
      a.head_scales[h] = x;
    }
    return Status();
  }
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call->device, view, "scales", 4, &a.scales));
  if (a.scales.dtype != DType::kF32 && a.scales.dtype != DType::kF16) {
    return InvalidArgument("scales.dtype=%s must be f16 or f32", DTypeName(a.scales.dtype));
  }
  for (int dim = 0; dim < 3; ++dim) {
    SATTN_RETURN_IF_ERROR(CheckSameExtent(a.scales, "scales", dim, a.values, "values", dim));
  }
  const int64_t channels = a.values.dim(3), groups = a.scales.dim(3);
  if (channels % groups != 0) {
    return InvalidArgument("scales.shape[3]=%" PRId64 " must divide values.shape[3]=%" PRId64
                           " (head_dim / group size)",
                           groups, channels);
  }
  a.group = channels / groups;
  if (a.values.dtype == DType::kI4 && a.group % 2 != 0) {
    return InvalidArgument("the group size values.shape[3] / scales.shape[3]=%" PRId64
                           " must be even for i4 (two elements a byte)",
                           a.group);
  }
  return Status();
}

// The outputs write no byte twice and share none with an input or each other.
Status CheckAliasing(const QuantizeKVArgs& a) {
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(a.values, "values"));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.values, "values", a.src, "src", false));
  if (a.paged) {
    SATTN_RETURN_IF_ERROR(
        CheckNoPartialOverlap(a.values, "values", a.block_table, "options->block_table", false));
  }
  if (a.group == 0) return Status();
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(a.scales, "scales"));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.scales, "scales", a.src, "src", false));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(a.scales, "scales", a.values, "values", false));
  if (a.paged) {
    SATTN_RETURN_IF_ERROR(
        CheckNoPartialOverlap(a.scales, "scales", a.block_table, "options->block_table", false));
  }
  return Status();
}

// Whether the n contiguous elements at p, of a float dtype, are all finite: the exponent field
// of none is all ones. On the bits, in a loop GCC vectorizes: element by element through
// LoadAsFloat, this check took four times as long as the quantization it guards.
template <typename Bits, Bits kExponent>
bool AllFiniteBits(const char* p, int64_t n) {
  Bits non_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, p + i * static_cast<int64_t>(sizeof(Bits)), sizeof(Bits));
    non_finite |= static_cast<Bits>((bits & kExponent) == kExponent);
  }
  return non_finite == 0;
}

bool AllFinite(DType dtype, const char* p, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      return AllFiniteBits<uint32_t, 0x7F800000u>(p, n);
    case DType::kF16:
      return AllFiniteBits<uint16_t, 0x7C00u>(p, n);
    default:  // bf16 (CheckFloatDType)
      return AllFiniteBits<uint16_t, 0x7F80u>(p, n);
  }
}

// A NaN or infinity has no quantized value: the first one's index, before anything is written.
// Rows of contiguous channels are checked whole, and only a row that fails element by element.
Status CheckFinite(const Tensor& src) {
  if (src.device != SATTN_DEVICE_CPU) return Status();  // the device backend refuses the call
  const int64_t dim = src.dim(3);
  for (int64_t b = 0; b < src.dim(0); ++b) {
    for (int64_t t = 0; t < src.dim(1); ++t) {
      for (int64_t h = 0; h < src.dim(2); ++h) {
        if (dim > 0 && src.stride(3) == 1 &&
            AllFinite(src.dtype, static_cast<const char*>(src.At(b, t, h, 0)), dim)) {
          continue;
        }
        for (int64_t i = 0; i < dim; ++i) {
          const float x = LoadAsFloat(src.dtype, src.At(b, t, h, i));
          if (!std::isfinite(x)) {
            return InvalidArgument("src[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                                   "]=%g cannot be quantized (must be finite)",
                                   b, t, h, i, x);
          }
        }
      }
    }
  }
  return Status();
}

Status QuantizeKV(sattn_context* ctx, const sattn_tensor* src, const sattn_tensor* values,
                  const sattn_tensor* scales, const sattn_quantize_kv_options* options) {
  SATTN_RETURN_IF_ERROR(CheckContext(ctx));
  const ContextLock hold(ctx->call_mutex);
  Call call(ctx);
  QuantizeKVArgs& a = call.args;
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call.device, src, "src", 4, &a.src));
  SATTN_RETURN_IF_ERROR(CheckFloatDType(a.src, "src"));
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call.device, values, "values", 4, &a.values));
  if (!IsQuantizedDType(a.values.dtype)) {
    return InvalidArgument("values.dtype=%s must be i8, fp8_e4m3 or i4", DTypeName(a.values.dtype));
  }
  sattn_quantize_kv_options o{};
  SATTN_RETURN_IF_ERROR(ReadOptions(options, "options", kFirstQuantizeKVOptionsSize, &o));
  int64_t capacity = 0;
  SATTN_RETURN_IF_ERROR(ReadDestination(&call, o, &capacity));
  SATTN_RETURN_IF_ERROR(ReadScales(&call, scales));
  SATTN_RETURN_IF_ERROR(ReadPositions(&call, o, capacity));
  SATTN_RETURN_IF_ERROR(CheckAliasing(a));
  SATTN_RETURN_IF_ERROR(CheckFinite(a.src));
  return call.device.backend(ctx)->QuantizeKV(a);
}

}  // namespace
}  // namespace streamattn

extern "C" {

SATTN_API sattn_status sattn_quantize_kv(sattn_context* ctx, const sattn_tensor* src,
                                         const sattn_tensor* values, const sattn_tensor* scales,
                                         const sattn_quantize_kv_options* options) {
  return streamattn::RunGuarded(
      [&] { return streamattn::QuantizeKV(ctx, src, values, scales, options); });
}

}  // extern "C"
