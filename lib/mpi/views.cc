#include "mpi/views.h"

#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "core/view_overlap.h"

namespace streamattn {
namespace mpi {

Error Fail(sattn_status code, const char* format, ...) {
  Error e;
  e.code = code;
  va_list args;
  va_start(args, format);
  std::vsnprintf(e.message, sizeof(e.message), format, args);
  va_end(args);
  return e;
}

int64_t ElementSize(int32_t dtype) {
  return IsKnownDType(dtype) ? DTypeBits(static_cast<DType>(dtype)) / 8 : 0;
}

int64_t NumElements(const sattn_tensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

Error CheckView(const sattn_tensor* t, const char* name, int32_t ndim, bool float_only,
                int32_t dtype) {
  if (t == nullptr) return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s must not be NULL", name);
  if (t->ndim != ndim) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s.ndim=%d must be %d", name, t->ndim, ndim);
  }
  for (int i = 0; i < ndim; ++i) {
    if (t->shape[i] < 1) {
      return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s.shape[%d]=%" PRId64 " must be >= 1", name, i,
                  t->shape[i]);
    }
  }
  if (t->device != SATTN_DEVICE_CPU) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s.device=%d must be the CPU for MPI", name,
                t->device);
  }
  if (t->data == nullptr) return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s.data must not be NULL", name);
  const bool is_float = IsKnownDType(t->dtype) && IsFloatDType(static_cast<DType>(t->dtype));
  if (float_only ? !is_float : t->dtype != dtype) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s.dtype=%s (%d) must be %s", name,
                DTypeName(t->dtype), t->dtype, float_only ? "f32, f16 or bf16" : DTypeName(dtype));
  }
  return Error();
}

Error CheckExtent(const sattn_tensor& t, const char* name, int dim, int64_t want,
                  const char* what) {
  if (t.shape[dim] == want) return Error();
  return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s.shape[%d]=%" PRId64 " must equal %" PRId64 " (%s)",
              name, dim, t.shape[dim], want, what);
}

Error CheckNoSelfOverlap(const sattn_tensor& t, const char* name) {
  const int i = SelfOverlappingDim(t.ndim, t.shape, t.strides);
  if (i < 0) return Error();
  return Fail(SATTN_ERR_INVALID_ARGUMENT,
              "%s.strides[%d]=%" PRId64 " makes the output overlap itself", name, i, t.strides[i]);
}

Error CheckNoOverlap(const sattn_tensor& out, const char* out_name, const sattn_tensor& in,
                     const char* in_name, bool allow_identical) {
  if (allow_identical && IsSameView(out, in)) return Error();
  if (Disjoint(ViewBytes(out, 8 * ElementSize(out.dtype)),
               ViewBytes(in, 8 * ElementSize(in.dtype)))) {
    return Error();
  }
  return Fail(SATTN_ERR_INVALID_ARGUMENT, "%s overlaps %s in memory%s", out_name, in_name,
              allow_identical ? " without being the identical view" : "");
}

sattn_tensor Slice(const sattn_tensor& t, int dim, int64_t begin, int64_t count) {
  sattn_tensor s = t;
  s.data = static_cast<char*>(t.data) + begin * t.strides[dim] * ElementSize(t.dtype);
  s.shape[dim] = count;
  return s;
}

void* ElementAt(const sattn_tensor& t, const int64_t* index) {
  int64_t offset = 0;
  for (int i = 0; i < t.ndim; ++i) offset += index[i] * t.strides[i];
  return static_cast<char*>(t.data) + offset * ElementSize(t.dtype);
}

bool IsContiguous(const sattn_tensor& t) {
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] > 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void PackContiguous(const sattn_tensor& t, void* dst) {
  const int64_t size = ElementSize(t.dtype);
  const int64_t total = NumElements(t);
  int64_t index[SATTN_MAX_NDIM] = {0, 0, 0, 0};
  char* out = static_cast<char*>(dst);
  for (int64_t n = 0; n < total; ++n) {
    std::memcpy(out + n * size, ElementAt(t, index), size);
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace mpi
}  // namespace streamattn
