// The rule that an output view writes no element twice, over plain shape and stride arrays:
// header-only so that the core (on its validated Tensor) and the MPI layer (on a caller's
// sattn_tensor, without the core's internals) apply the same rule and word their own errors.
#ifndef STREAMATTN_CORE_SELF_OVERLAP_H_
#define STREAMATTN_CORE_SELF_OVERLAP_H_

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

}  // namespace streamattn

#endif  // STREAMATTN_CORE_SELF_OVERLAP_H_
