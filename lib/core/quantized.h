// The quantized KV-cache formats, element by element: FP8 E4M3 to and from float, the nibbles of
// I4, and the rounding rules sattn_quantize_kv writes by (the header documents the bytes). The
// vector readers live in the CPU kernels (cpu/quantized_element-inl.h) and are tested against
// these. Header-only on the public header alone, like core/dtype.h, so the tool and the tests
// use the same rules.
#ifndef STREAMATTN_CORE_QUANTIZED_H_
#define STREAMATTN_CORE_QUANTIZED_H_

#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace streamattn {

// E4M3 (OCP "e4m3fn"): sign, 4 exponent bits of bias 7, 3 mantissa bits, no infinities,
// S.1111.111 NaN. Exact: every E4M3 value is a float.
inline float E4M3ToF32(uint8_t b) {
  const uint32_t exponent = (b >> 3) & 0xFu, mantissa = b & 0x7u;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) {
    magnitude = NAN;
  } else if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);  // m * 2^-9
  } else {
    magnitude = BitsToFloat(((exponent + 120) << 23) | (mantissa << 20));
  }
  return (b & 0x80u) != 0 ? -magnitude : magnitude;
}

constexpr float kE4M3Max = 448.0f;

// The nearest E4M3 to a finite x, ties to even, saturated to +-448, by bit arithmetic with no
// libm call (sattn_quantize_kv runs it per element). Below 2^-6 the quantum is 2^-9: x * 2^9
// (exact) is rounded to an integer by adding and subtracting 2^23. Above, the float's 23
// mantissa bits are rounded to 3, ties to even, a carry moving into the exponent, which is then
// rebiased from 127 to 7. The same byte as the frexp/nearbyint formulation it replaced, for
// every finite float (all 2^32 bit patterns were compared).
inline uint8_t F32ToE4M3(float x) {
  const uint32_t bits = FloatBits(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (BitsToFloat(magnitude) >= kE4M3Max) return sign | 0x7E;
  if (magnitude < 0x3C800000u) {  // below 2^-6: codes 0..7 (subnormal), and 8 for 2^-6 itself
    // 2^23, where the sum's last bit is worth 1.
    constexpr float kRound = 8388608.0f;
    const float steps = (BitsToFloat(magnitude) * 512.0f + kRound) - kRound;
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(steps));
  }
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  const uint32_t code = (rounded >> 20) - (120u << 3);
  return static_cast<uint8_t>(sign | (code > 0x7Eu ? 0x7Eu : code));
}

// Element i of an I4 row (two per byte, element 2j in byte j's low half), as an integer.
inline int I4At(const uint8_t* row, int64_t i) {
  const int nibble = (row[i >> 1] >> ((i & 1) * 4)) & 0xF;
  return nibble >= 8 ? nibble - 16 : nibble;
}

inline void SetI4(uint8_t* row, int64_t i, int q) {
  const int shift = static_cast<int>(i & 1) * 4;
  uint8_t& byte = row[i >> 1];
  byte = static_cast<uint8_t>((byte & ~(0xF << shift)) | ((q & 0xF) << shift));
}

// The largest integer sattn_quantize_kv writes for an integer format: 127 (I8) or 7 (I4).
inline int QuantizedIntMax(DType t) { return t == DType::kI4 ? 7 : 127; }

// An integer format's q for x under the stored scale s: x / s rounded to nearest even, saturated
// to [-max_q, max_q]; 0 where s is 0 (a group of zeros).
inline int QuantizeToInt(float x, float s, int max_q) {
  if (s == 0.0f) return 0;
  const float q = std::nearbyint(x / s);
  const float limit = static_cast<float>(max_q);
  return static_cast<int>(q > limit ? limit : q < -limit ? -limit : q);
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_QUANTIZED_H_
