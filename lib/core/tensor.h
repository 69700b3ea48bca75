// Tensor: a validated view (the C sattn_tensor after every check has passed), and the checks
// that produce one. Messages name the argument and dimension: "k.shape[3]=96 must equal
// q.shape[3]=128".
#ifndef STREAMATTN_CORE_TENSOR_H_
#define STREAMATTN_CORE_TENSOR_H_

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "streamattn/streamattn.h"

namespace streamattn {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int32_t device = SATTN_DEVICE_CPU;
  int32_t device_index = 0;
  int32_t ndim = 0;
  int64_t shape[SATTN_MAX_NDIM] = {1, 1, 1, 1};
  int64_t strides[SATTN_MAX_NDIM] = {0, 0, 0, 0};

  int64_t dim(int i) const { return shape[i]; }
  int64_t stride(int i) const { return strides[i]; }
  int64_t NumElements() const;

  // Element pointer at an index of up to four coordinates (missing ones are 0). For I4, whose
  // elements pack two to a byte, the byte holding the element (the low half for an even index
  // of the last dimension).
  template <typename T = void>
  T* At(int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    const int64_t offset = i0 * strides[0] + i1 * strides[1] + i2 * strides[2] + i3 * strides[3];
    return reinterpret_cast<T*>(static_cast<char*>(data) + ElementBytes(dtype, offset));
  }

  // The byte range [lo, hi) the view touches (hi - lo is at least one element).
  uintptr_t LowestByte() const;
  uintptr_t EndByte() const;
};

// Checks a caller's view: non-null, known dtype and device, the expected rank, extents >= 1,
// and a byte span that fits in int64 and in the address space. `name` is how the message
// refers to it ("k", "o_parts[2]").
Status ValidateTensor(const sattn_tensor* view, const char* name, int rank, Tensor* out);

// "a.shape[ai]=x must equal b.shape[bi]=y".
Status CheckSameExtent(const Tensor& a, const char* a_name, int a_dim, const Tensor& b,
                       const char* b_name, int b_dim);

// An output written by one call must not write any element twice.
Status CheckNoSelfOverlap(const Tensor& t, const char* name);

// `out` may be exactly `in` (same data, dtype and strides: an in-place update) when
// `allow_identical`, and otherwise must not share any byte with it.
Status CheckNoPartialOverlap(const Tensor& out, const char* out_name, const Tensor& in,
                             const char* in_name, bool allow_identical);

bool IsIdenticalView(const Tensor& a, const Tensor& b);

// True when the last dimension has stride 1 (rows can be loaded as vectors).
inline bool HasUnitInnerStride(const Tensor& t) {
  return t.shape[t.ndim - 1] == 1 || t.strides[t.ndim - 1] == 1;
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_TENSOR_H_
