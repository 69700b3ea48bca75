// Host buffers for the tool's workloads: a dense tensor of f32, f16 or bf16 values with
// element access in float (the oracle reads back exactly what is stored), and a fast generator
// to fill it (tens of millions of values must not dominate a run).
#ifndef STREAMATTN_BENCH_HOST_BUFFER_H_
#define STREAMATTN_BENCH_HOST_BUFFER_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "streamattn/streamattn.h"

namespace streamattn {
namespace bench {

inline uint16_t ToBF16(float f) {  // round to nearest even; inputs are finite
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7FFF + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

inline float FromBF16(uint16_t h) {
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline uint16_t ToF16(float f) {  // round to nearest even; |f| < 65504, tiny values flush to 0
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const int e = static_cast<int>((b >> 23) & 0xFF) - 127 + 15;
  if (e <= 0) return sign;
  const uint32_t mantissa = b & 0x7FFFFF, rest = mantissa & 0x1FFF;
  uint32_t h = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float FromF16(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const float magnitude = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                                 : std::ldexp(static_cast<float>(1024 + m), e - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

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
      slots_[i] = dtype_ == SATTN_DTYPE_BF16 ? ToBF16(x) : ToF16(x);
    }
  }
  double Get(int64_t i) const {
    if (dtype_ == SATTN_DTYPE_F32) {
      float x;
      std::memcpy(&x, &slots_[2 * i], 4);
      return x;
    }
    return dtype_ == SATTN_DTYPE_BF16 ? FromBF16(slots_[i]) : FromF16(slots_[i]);
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
