// The overlap rules for views: an output writes no element twice, and where two views lie in
// memory (their byte ranges, and whether they are the identical view). Header-only, over any
// view with data, ndim, shape and strides (the core's validated Tensor, a caller's sattn_tensor),
// so that the core and the MPI layer (which sees only the C API) apply the same rules and word
// their own errors.
#ifndef STREAMATTN_CORE_VIEW_OVERLAP_H_
#define STREAMATTN_CORE_VIEW_OVERLAP_H_

#include <cstdint>
#include <utility>

#include "streamattn/streamattn.h"

namespace streamattn {

// The dim whose stride makes the view reach one element by two indices, or -1 when none does.
// The dims of extent > 1 are sorted by |stride|; the view is injective if each stride is at
// least the extent covered by all smaller ones (sufficient, and exact for every layout a caller
// would build by slicing or permuting a dense buffer). ndim <= SATTN_MAX_NDIM.
inline int SelfOverlappingDim(int ndim, const int64_t* shape, const int64_t* strides) {
  int order[SATTN_MAX_NDIM];
  int count = 0;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] > 1) order[count++] = i;
  }
  auto abs_stride = [&](int i) { return strides[i] < 0 ? -strides[i] : strides[i]; };
  for (int k = 1; k < count; ++k) {  // insertion sort: at most four dims
    for (int j = k; j > 0 && abs_stride(order[j]) < abs_stride(order[j - 1]); --j) {
      std::swap(order[j], order[j - 1]);
    }
  }
  int64_t covered = 1;  // elements spanned by the dims already visited
  for (int k = 0; k < count; ++k) {
    const int i = order[k];
    if (abs_stride(i) < covered) return i;
    covered = abs_stride(i) * (shape[i] - 1) + covered;
  }
  return -1;
}

// The bytes [lo, hi) a view of `element_bits`-bit elements touches (a view whose span fits in
// int64, as validated views do); a byte holding any bit of an element counts.
struct ByteRange {
  uintptr_t lo, hi;
};

template <class View>
ByteRange ViewBytes(const View& v, int64_t element_bits) {
  int64_t lo = 0, hi = element_bits;  // in bits from data
  for (int i = 0; i < v.ndim; ++i) {
    const int64_t span = v.strides[i] * (v.shape[i] - 1) * element_bits;
    (span < 0 ? lo : hi) += span;
  }
  const auto floor_bytes = [](int64_t bits) { return bits >= 0 ? bits / 8 : -((7 - bits) / 8); };
  const uintptr_t base = reinterpret_cast<uintptr_t>(v.data);
  return ByteRange{base + static_cast<uintptr_t>(floor_bytes(lo)),
                   base + static_cast<uintptr_t>(floor_bytes(hi + 7))};
}

inline bool Disjoint(const ByteRange& a, const ByteRange& b) {
  return a.hi <= b.lo || b.hi <= a.lo;
}

// The same elements in the same order: same data, dtype and extents, and the same stride in every
// dim of extent > 1 (an in-place update).
template <class View>
bool IsSameView(const View& a, const View& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i) {
    if (a.shape[i] != b.shape[i] || (a.shape[i] > 1 && a.strides[i] != b.strides[i])) {
      return false;
    }
  }
  return true;
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_VIEW_OVERLAP_H_
