// Element types and their scalar conversions. The vector conversions live in the CPU kernels;
// these are for tails, tests of odd strides and writing results (once per output element).
// Header-only on the public header alone, so that the MPI layer (which links only the C API),
// the CUDA plugin (nvcc), the tool and the tests name and convert dtypes by these same rules.
#ifndef STREAMATTN_CORE_DTYPE_H_
#define STREAMATTN_CORE_DTYPE_H_

#include <cstdint>
#include <cstring>

#include "streamattn/streamattn.h"

namespace streamattn {

enum class DType : int32_t {
  kF32 = SATTN_DTYPE_F32,
  kF16 = SATTN_DTYPE_F16,
  kBF16 = SATTN_DTYPE_BF16,
  kI32 = SATTN_DTYPE_I32,  // indices and lengths, never computed with
  // Quantized KV-cache elements (the header documents their bytes): read by attention's
  // kernels with their scales, written by sattn_quantize_kv.
  kI8 = SATTN_DTYPE_I8,
  kFP8E4M3 = SATTN_DTYPE_FP8_E4M3,
  kI4 = SATTN_DTYPE_I4,
};

inline bool IsKnownDType(int32_t code) { return code >= SATTN_DTYPE_F32 && code <= SATTN_DTYPE_I4; }

// The dtypes computed with directly, as inputs and outputs: f32, f16, bf16.
inline bool IsFloatDType(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// The KV-cache formats that need scales to mean anything.
inline bool IsQuantizedDType(DType t) {
  return t == DType::kI8 || t == DType::kFP8E4M3 || t == DType::kI4;
}

// Bits per element: 4 for I4, whose elements pack two to a byte along the last dimension.
inline int64_t DTypeBits(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 32;
    case DType::kF16:
    case DType::kBF16:
      return 16;
    case DType::kI8:
    case DType::kFP8E4M3:
      return 8;
    case DType::kI4:
      return 4;
  }
  return 8;
}

// Bytes spanned by `elements` elements: exact wherever a view can point (an I4 view's strides
// other than the last are even, and rows start on a byte).
inline int64_t ElementBytes(DType t, int64_t elements) { return elements * DTypeBits(t) / 8; }

// Takes the raw code, so that a caller's unchecked sattn_tensor::dtype can be named in the message
// that rejects it.
inline const char* DTypeName(int32_t code) {
  switch (code) {
    case SATTN_DTYPE_F32:
      return "f32";
    case SATTN_DTYPE_F16:
      return "f16";
    case SATTN_DTYPE_BF16:
      return "bf16";
    case SATTN_DTYPE_I32:
      return "i32";
    case SATTN_DTYPE_I8:
      return "i8";
    case SATTN_DTYPE_FP8_E4M3:
      return "fp8_e4m3";
    case SATTN_DTYPE_I4:
      return "i4";
    default:
      return "unknown";
  }
}

inline const char* DTypeName(DType t) { return DTypeName(static_cast<int32_t>(t)); }

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Exact: every binary16 value is a float.
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest even; overflow gives +-inf, NaN stays NaN (quiet).
inline uint16_t F32ToF16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x1FFu));
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {
    // Result is subnormal or zero in f16: let the float adder round (magnitude * 2^24 rounded
    // to an integer with ties to even, by adding and subtracting 0.5 * 2^24 ... in float).
    const float magnitude = BitsToFloat(abs);
    const float shifted = magnitude + 0.5f;  // ulp(0.5) = 2^-24: rounds to a multiple of 2^-24
    return static_cast<uint16_t>(sign | (FloatBits(shifted) - FloatBits(0.5f)));
  }
  const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);  // ties to even
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

inline float BF16ToF32(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t F32ToBF16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float LoadAsFloat(DType t, const void* p) {
  switch (t) {
    case DType::kF32:
      return *static_cast<const float*>(p);
    case DType::kF16:
      return F16ToF32(*static_cast<const uint16_t*>(p));
    case DType::kBF16:
      return BF16ToF32(*static_cast<const uint16_t*>(p));
    case DType::kI32:
    case DType::kI8:
    case DType::kFP8E4M3:
    case DType::kI4:
      break;  // callers check IsFloatDType first
  }
  return 0.0f;
}

inline void StoreFromFloat(DType t, float value, void* p) {
  switch (t) {
    case DType::kF32:
      *static_cast<float*>(p) = value;
      return;
    case DType::kF16:
      *static_cast<uint16_t*>(p) = F32ToF16(value);
      return;
    case DType::kBF16:
      *static_cast<uint16_t*>(p) = F32ToBF16(value);
      return;
    case DType::kI32:
    case DType::kI8:
    case DType::kFP8E4M3:
    case DType::kI4:
      return;  // callers check IsFloatDType first
  }
}

}  // namespace streamattn

#endif  // STREAMATTN_CORE_DTYPE_H_
