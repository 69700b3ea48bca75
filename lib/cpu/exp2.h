// Exp2Array: y[i] = exp2(x[i]) by the dispatched SIMD kernel (see exp2-inl.h for the error
// bounds). y may equal x.
#ifndef STREAMATTN_CPU_EXP2_H_
#define STREAMATTN_CPU_EXP2_H_

#include <cstddef>

namespace streamattn {

void Exp2Array(const float* x, float* y, size_t n);

// y[i] = Exp2NonPositive(x[i]) (x <= 0; results below 2^-126 flushed to 0), for tests.
void Exp2NonPositiveArray(const float* x, float* y, size_t n);

}  // namespace streamattn

#endif  // STREAMATTN_CPU_EXP2_H_
