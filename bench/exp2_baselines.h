// Exponentials the library's exp2 is compared with: Highway's own Exp (natural base, from
// hwy/contrib/math), dispatched to the same SIMD target.
#ifndef STREAMATTN_BENCH_EXP2_BASELINES_H_
#define STREAMATTN_BENCH_EXP2_BASELINES_H_

#include <cstddef>

namespace streamattn {
namespace bench {

void HighwayExpArray(const float* x, float* y, size_t n);

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_EXP2_BASELINES_H_
