// Host buffers for the tool's workloads: a dense tensor of f32, f16 or bf16 values with
// element access in float (the oracle reads back exactly what is stored), and a fast generator
// to fill it (tens of millions of values must not dominate a run).
#ifndef STREAMATTN_BENCH_HOST_BUFFER_H_
#define STREAMATTN_BENCH_HOST_BUFFER_H_

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "streamattn/streamattn.h"

namespace streamattn {
namespace bench {

// A dense row-major tensor of f32, f16 or bf16 values (f32 takes two 16-bit slots).
class HostBuffer {
 public:
  HostBuffer(sattn_dtype dtype, std::vector<int64_t> shape)
      : dtype_(dtype), shape_(std::move(shape)) {
    int64_t n = 1;
    for (int64_t e : shape_) n *= e;
    slots_.resize(dtype == SATTN_DTYPE_F32 ? 2 * n : n);
  }
  void Set(int64_t i, float x) {
    if (dtype_ == SATTN_DTYPE_F32) {
      std::memcpy(&slots_[2 * i], &x, 4);
    } else {
      slots_[i] = dtype_ == SATTN_DTYPE_BF16 ? F32ToBF16(x) : F32ToF16(x);
    }
  }
  double Get(int64_t i) const {
    if (dtype_ == SATTN_DTYPE_F32) {
      float x;
      std::memcpy(&x, &slots_[2 * i], 4);
      return x;
    }
    return dtype_ == SATTN_DTYPE_BF16 ? BF16ToF32(slots_[i]) : F16ToF32(slots_[i]);
  }
  // The whole tensor, or (rows > 0) its first `rows` entries of dim 1 with the full strides.
  sattn_tensor View(int64_t rows = 0) {
    sattn_tensor t = sattn_tensor_contiguous(slots_.data(), dtype_,
                                             static_cast<int32_t>(shape_.size()), shape_.data());
    if (rows > 0) t.shape[1] = rows;
    return t;
  }

 private:
  sattn_dtype dtype_;
  std::vector<int64_t> shape_;
  std::vector<uint16_t> slots_;
};

// Uniform floats in [lo, hi) from xorshift64*: filling 25M values must not dominate the run.
class FastRandom {
 public:
  explicit FastRandom(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float Uniform(float lo, float hi) {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t r = state_ * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
  }

 private:
  uint64_t state_;
};

}  // namespace bench
}  // namespace streamattn

#endif  // STREAMATTN_BENCH_HOST_BUFFER_H_
