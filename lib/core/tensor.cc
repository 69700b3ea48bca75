#include "core/tensor.h"

#include <cinttypes>
#include <limits>

#include "core/view_overlap.h"

namespace streamattn {
namespace {

// Sum over dims of (extent - 1) * |stride|, in elements, or -1 when it overflows int64.
int64_t ElementSpan(const Tensor& t) {
  int64_t span = 0;
  for (int i = 0; i < t.ndim; ++i) {
    const int64_t abs_stride = t.strides[i] < 0 ? -t.strides[i] : t.strides[i];
    int64_t term;
    if (__builtin_mul_overflow(t.shape[i] - 1, abs_stride, &term) ||
        __builtin_add_overflow(span, term, &span)) {
      return -1;
    }
  }
  return span;
}

// Offset in elements from data to the lowest element the view touches (<= 0).
int64_t LowestOffset(const Tensor& t) {
  int64_t offset = 0;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.strides[i] < 0) offset += (t.shape[i] - 1) * t.strides[i];
  }
  return offset;
}

// I4 packs two elements to a byte along the last dimension: every row must start on a byte
// (even strides elsewhere) and hold whole bytes (unit stride, even extent).
Status CheckPackedNibbles(const Tensor& t, const char* name) {
  const int last = t.ndim - 1;
  if (t.shape[last] % 2 != 0) {
    return InvalidArgument("%s.shape[%d]=%" PRId64 " must be even: i4 packs two elements a byte",
                           name, last, t.shape[last]);
  }
  if (t.strides[last] != 1) {
    return InvalidArgument("%s.strides[%d]=%" PRId64
                           " must be 1: i4 elements pack two a byte along the last dimension",
                           name, last, t.strides[last]);
  }
  for (int i = 0; i < last; ++i) {
    if (t.strides[i] % 2 != 0) {
      return InvalidArgument("%s.strides[%d]=%" PRId64
                             " splits a byte: i4 strides other than the last must be even",
                             name, i, t.strides[i]);
    }
  }
  return Status();
}

}  // namespace

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

uintptr_t Tensor::LowestByte() const { return ViewBytes(*this, DTypeBits(dtype)).lo; }

uintptr_t Tensor::EndByte() const { return ViewBytes(*this, DTypeBits(dtype)).hi; }

Status ValidateTensor(const sattn_tensor* view, const char* name, int rank, Tensor* out) {
  if (view == nullptr) return InvalidArgument("%s must not be NULL", name);
  if (view->data == nullptr) return InvalidArgument("%s.data must not be NULL", name);
  if (!IsKnownDType(view->dtype)) {
    return InvalidArgument(
        "%s.dtype=%d is not a sattn_dtype (f32=1, f16=2, bf16=3, i32=4, i8=5, fp8_e4m3=6, i4=7)",
        name, view->dtype);
  }
  if (view->device != SATTN_DEVICE_CPU && view->device != SATTN_DEVICE_CUDA) {
    return InvalidArgument("%s.device=%d is not a sattn_device (cpu=0, cuda=1)", name,
                           view->device);
  }
  if (view->device_index < 0) {
    return InvalidArgument("%s.device_index=%d must be >= 0", name, view->device_index);
  }
  if (view->ndim != rank) {
    return InvalidArgument("%s.ndim=%d must be %d", name, view->ndim, rank);
  }
  Tensor t;
  t.data = view->data;
  t.dtype = static_cast<DType>(view->dtype);
  t.device = view->device;
  t.device_index = view->device_index;
  t.ndim = view->ndim;
  for (int i = 0; i < rank; ++i) {
    if (view->shape[i] < 1) {
      return InvalidArgument("%s.shape[%d]=%" PRId64 " must be >= 1", name, i, view->shape[i]);
    }
    if (view->strides[i] == std::numeric_limits<int64_t>::min()) {
      return InvalidArgument("%s.strides[%d] is out of range", name, i);
    }
    t.shape[i] = view->shape[i];
    // A dim of extent 1 has only index 0: its stride is never needed, and the caller may pass
    // anything there. Zero keeps a meaningless value out of every later stride x size product
    // (fuzz_softmax: a last-dim stride of -9.2e18 over one element overflowed in the loader).
    t.strides[i] = view->shape[i] == 1 ? 0 : view->strides[i];
  }
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(elements, t.shape[i], &elements)) {
      return InvalidArgument("%s has more elements than int64 can count", name);
    }
  }
  if (t.dtype == DType::kI4) SATTN_RETURN_IF_ERROR(CheckPackedNibbles(t, name));
  const int64_t span = ElementSpan(t);
  int64_t span_bytes, lowest_bytes;
  const auto too_large = [&] {
    return InvalidArgument("%s spans more bytes than int64 can count (shape x strides overflow)",
                           name);
  };
  if (span < 0) return too_large();
  // Only now: each negative term of the lowest offset is bounded by the span (the fuzzer found
  // the overflow when this ran before the span was known to fit).
  const int64_t lowest = LowestOffset(t);
  // In bits, then bytes (I4 has half-byte elements; its validated offsets are whole bytes but
  // for the last dimension's).
  const int64_t bits = DTypeBits(t.dtype);
  if (__builtin_mul_overflow(span + 1, bits, &span_bytes) ||
      __builtin_mul_overflow(lowest, bits, &lowest_bytes)) {
    return too_large();
  }
  span_bytes = (span_bytes + 7) / 8;
  lowest_bytes /= 8;  // a whole number of bytes: lowest is a sum of even strides' multiples
  // In 64 bits whatever the pointer width: on a 32-bit target, casting the byte counts to
  // uintptr_t first dropped their high bits and let a view 2^47 bytes long through (armhf).
  const uint64_t max_address = std::numeric_limits<uintptr_t>::max();
  const uint64_t base = reinterpret_cast<uintptr_t>(view->data);
  const uint64_t below = uint64_t{0} - static_cast<uint64_t>(lowest_bytes);  // lowest_bytes <= 0
  const uint64_t extent = static_cast<uint64_t>(span_bytes);
  if (below > base || extent > max_address || base - below > max_address - extent) {
    return InvalidArgument("%s: its negative strides or extent wrap around the address space",
                           name);
  }
  *out = t;
  return Status();
}

Status CheckSameExtent(const Tensor& a, const char* a_name, int a_dim, const Tensor& b,
                       const char* b_name, int b_dim) {
  if (a.shape[a_dim] == b.shape[b_dim]) return Status();
  return InvalidArgument("%s.shape[%d]=%" PRId64 " must equal %s.shape[%d]=%" PRId64, a_name, a_dim,
                         a.shape[a_dim], b_name, b_dim, b.shape[b_dim]);
}

Status CheckNoSelfOverlap(const Tensor& t, const char* name) {
  const int i = SelfOverlappingDim(t.ndim, t.shape, t.strides);
  if (i < 0) return Status();
  return InvalidArgument("%s.strides[%d]=%" PRId64
                         " makes the output overlap itself (an output needs a "
                         "distinct element for every index)",
                         name, i, t.strides[i]);
}

bool IsIdenticalView(const Tensor& a, const Tensor& b) { return IsSameView(a, b); }

Status CheckNoPartialOverlap(const Tensor& out, const char* out_name, const Tensor& in,
                             const char* in_name, bool allow_identical) {
  if (allow_identical && IsIdenticalView(out, in)) return Status();
  if (out.device != in.device) return Status();
  if (Disjoint(ViewBytes(out, DTypeBits(out.dtype)), ViewBytes(in, DTypeBits(in.dtype)))) {
    return Status();
  }
  if (allow_identical) {
    return InvalidArgument("%s overlaps %s in memory without being the identical view", out_name,
                           in_name);
  }
  return InvalidArgument("%s overlaps %s in memory; outputs must not alias inputs", out_name,
                         in_name);
}

}  // namespace streamattn
