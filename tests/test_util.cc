#include "test_util.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "core/dtype.h"

namespace streamattn {
namespace testing_util {
namespace {

constexpr uint8_t kCanary = 0xA5;
constexpr int64_t kCanaryBytes = 64;

// The definition, evaluated once per value into FromF16's table.
float FromF16ByDefinition(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else if (e == 31) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(1024.0 + m, e - 25);
  }
  return static_cast<float>((h & 0x8000) ? -v : v);
}

// Round to the nearest integer, ties to even, as std::nearbyint in the default rounding mode
// but without its library call (a fifth of some conversions' time, more under emulation):
// adding and subtracting 2^52 leaves the nearest integer of any |x| < 2^52; larger ones are
// integers already.
double NearestEven(double x) {
  const double a = std::fabs(x);
  if (!(a < 0x1p52)) return x;
  return std::copysign((a + 0x1p52) - 0x1p52, x);
}

// I8's and I4's value of x: rounded to nearest even, saturated.
double RoundToI8(double x) { return std::clamp(NearestEven(x), -128.0, 127.0); }
double RoundToI4(double x) { return std::clamp(NearestEven(x), -8.0, 7.0); }

float FromE4M3ByDefinition(uint8_t b) {
  const int e = (b >> 3) & 0xF, m = b & 0x7;
  double v;
  if (e == 0xF && m == 0x7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -9);
  } else {
    v = std::ldexp(8.0 + m, e - 10);
  }
  return static_cast<float>((b & 0x80) ? -v : v);
}

}  // namespace

// Written from the IEEE definitions by repeated scaling, unlike the library's bit tricks.
uint16_t ToF16(float f) {
  if (std::isnan(f)) return 0x7E00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;
  if (a < 0x1p-14) {  // subnormal: multiples of 2^-24
    const double q = NearestEven(a * 0x1p24);
    return sign | static_cast<uint16_t>(q);
  }
  int e;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  double q = NearestEven(m * 2048.0);  // 11 significant bits
  if (q == 2048.0) {
    q = 1024.0;
    ++e;
  }
  if (e - 1 + 15 >= 31) return sign | 0x7C00;
  return sign | static_cast<uint16_t>(((e - 1 + 15) << 10) | (static_cast<int>(q) - 1024));
}

float FromF16(uint16_t h) {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < t.size(); ++i) t[i] = FromF16ByDefinition(static_cast<uint16_t>(i));
    return t;
  }();
  return table[h];
}

uint16_t ToBF16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = FloatBits(f);
  const uint32_t lower = u & 0xFFFF;
  uint32_t upper = u >> 16;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) ++upper;
  return static_cast<uint16_t>(upper);
}

float FromBF16(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

float FromE4M3(uint8_t b) {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int i = 0; i < 256; ++i) t[i] = FromE4M3ByDefinition(static_cast<uint8_t>(i));
    return t;
  }();
  return table[b];
}

uint8_t ToE4M3(float f) {
  if (std::isnan(f)) return 0x7F;
  // The non-negative finite codes 0x00..0x7E in ascending order of value.
  static const std::array<float, 0x7F> values = [] {
    std::array<float, 0x7F> t;
    for (int c = 0; c < 0x7F; ++c) t[c] = FromE4M3(static_cast<uint8_t>(c));
    return t;
  }();
  // Where the search for each float of the form 2^e * 1.xxx (its top three mantissa bits, the
  // rest zero) ends: the first value not below it. Every value has this form (the subnormals
  // too), so the floats that share a start's eleven top bits lie between one value and the
  // next, and one comparison finishes the search for any of them (random inputs made the
  // branches of a whole binary search a tenth of the suite's time).
  static const std::array<uint8_t, 2048> first_not_below = [] {
    std::array<uint8_t, 2048> t;
    for (uint32_t top = 0; top < t.size(); ++top) {
      float start;
      const uint32_t bits = top << 20;
      std::memcpy(&start, &bits, sizeof(start));
      t[top] = static_cast<uint8_t>(std::lower_bound(values.begin(), values.end(), start) -
                                    values.begin());
    }
    return t;
  }();
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  // The two codes around a: `above` is the first value >= a, as std::lower_bound would give.
  uint32_t bits;
  std::memcpy(&bits, &a, sizeof(bits));
  int above = first_not_below[bits >> 20];
  if (above < 0x7F && values[above] < a) ++above;
  if (above == 0) return sign;
  if (above == 0x7F) return sign | 0x7E;  // beyond 448: saturated
  const int below = above - 1;
  const double d_below = a - static_cast<double>(values[below]);
  const double d_above = static_cast<double>(values[above]) - a;
  // The nearer, and of two as near the even code (as a sum: no branch to mispredict).
  const int best = below + int{d_above < d_below || (d_above == d_below && below % 2 != 0)};
  return sign | static_cast<uint8_t>(best);
}

double RoundTo(sattn_dtype dtype, double x) {
  const float f = static_cast<float>(x);
  switch (dtype) {
    case SATTN_DTYPE_F32:
      return f;
    case SATTN_DTYPE_F16:
      return FromF16(ToF16(f));
    case SATTN_DTYPE_BF16:
      return FromBF16(ToBF16(f));
    case SATTN_DTYPE_I32:
      return static_cast<int32_t>(x);
    case SATTN_DTYPE_I8:
      return RoundToI8(x);
    case SATTN_DTYPE_I4:
      return RoundToI4(x);
    case SATTN_DTYPE_FP8_E4M3:
      return FromE4M3(ToE4M3(f));
  }
  throw std::invalid_argument("dtype");
}

const char* DTypeName(sattn_dtype dtype) { return streamattn::DTypeName(dtype); }

HostTensor::HostTensor(sattn_dtype dtype, std::vector<int64_t> shape, std::vector<int> order,
                       int64_t inner_padding)
    : dtype_(dtype), shape_(std::move(shape)) {
  switch (dtype) {
    case SATTN_DTYPE_F32:
    case SATTN_DTYPE_I32:
      element_bits_ = 32;
      break;
    case SATTN_DTYPE_I8:
    case SATTN_DTYPE_FP8_E4M3:
      element_bits_ = 8;
      break;
    case SATTN_DTYPE_I4:
      element_bits_ = 4;
      break;
    default:
      element_bits_ = 16;
  }
  const int rank = static_cast<int>(shape_.size());
  if (order.empty()) {
    for (int i = 0; i < rank; ++i) order.push_back(i);
  }
  strides_.assign(rank, 0);
  int64_t stride = 1;
  for (int k = rank - 1; k >= 0; --k) {
    strides_[order[k]] = stride;
    stride *= shape_[order[k]] + (k == rank - 1 ? inner_padding : 0);
  }
  base_offset_ = kCanaryBytes;
  storage_.assign(static_cast<size_t>((stride * element_bits_ + 7) / 8 + 2 * kCanaryBytes),
                  kCanary);
}

sattn_tensor HostTensor::view() const {
  sattn_tensor t{};
  t.data = const_cast<uint8_t*>(storage_.data()) + base_offset_;
  t.dtype = dtype_;
  t.device = SATTN_DEVICE_CPU;
  t.ndim = static_cast<int32_t>(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) {
    t.shape[i] = shape_[i];
    t.strides[i] = strides_[i];
  }
  return t;
}

int64_t HostTensor::NumElements() const {
  int64_t n = 1;
  for (int64_t e : shape_) n *= e;
  return n;
}

int64_t HostTensor::ElementOffset(const int64_t* index, size_t rank) const {
  if (rank != shape_.size()) throw std::out_of_range("HostTensor index rank");
  int64_t offset = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (index[i] < 0 || index[i] >= shape_[i]) throw std::out_of_range("HostTensor index");
    offset += index[i] * strides_[i];
  }
  return 8 * base_offset_ + offset * element_bits_;
}

namespace {

// One dtype's element at a bit offset of a buffer, read as a double or written rounded to the
// dtype. Whole-tensor loops choose the dtype once (WithDType), not once an element: the
// suite's larger cases convert millions of elements, under sanitizers and emulators too.
template <sattn_dtype kDType>
double LoadElement(const uint8_t* storage, int64_t bit_offset) {
  const uint8_t* p = storage + bit_offset / 8;
  if constexpr (kDType == SATTN_DTYPE_I8) {
    return static_cast<int8_t>(*p);
  } else if constexpr (kDType == SATTN_DTYPE_FP8_E4M3) {
    return FromE4M3(*p);
  } else if constexpr (kDType == SATTN_DTYPE_I4) {
    const int nibble = (*p >> (bit_offset % 8)) & 0xF;
    return nibble >= 8 ? nibble - 16 : nibble;
  } else if constexpr (kDType == SATTN_DTYPE_I32) {
    int32_t i;
    std::memcpy(&i, p, 4);
    return i;
  } else if constexpr (kDType == SATTN_DTYPE_F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return kDType == SATTN_DTYPE_F16 ? FromF16(h) : FromBF16(h);
  }
}

template <sattn_dtype kDType>
void StoreElement(uint8_t* storage, int64_t bit_offset, double value) {
  uint8_t* p = storage + bit_offset / 8;
  if constexpr (kDType == SATTN_DTYPE_I8) {
    *p = static_cast<uint8_t>(static_cast<int8_t>(RoundToI8(value)));
  } else if constexpr (kDType == SATTN_DTYPE_FP8_E4M3) {
    *p = ToE4M3(static_cast<float>(value));
  } else if constexpr (kDType == SATTN_DTYPE_I4) {
    const int shift = static_cast<int>(bit_offset % 8);
    const int q = static_cast<int>(RoundToI4(value)) & 0xF;
    *p = static_cast<uint8_t>((*p & ~(0xF << shift)) | (q << shift));
  } else if constexpr (kDType == SATTN_DTYPE_I32) {
    const int32_t i = static_cast<int32_t>(value);
    std::memcpy(p, &i, 4);
  } else if constexpr (kDType == SATTN_DTYPE_F32) {
    const float f = static_cast<float>(value);
    std::memcpy(p, &f, 4);
  } else {
    const float f = static_cast<float>(value);
    const uint16_t h = kDType == SATTN_DTYPE_F16 ? ToF16(f) : ToBF16(f);
    std::memcpy(p, &h, 2);
  }
}

template <sattn_dtype D>
using DTypeTag = std::integral_constant<sattn_dtype, D>;

// f(DTypeTag<D>{}) for the D that `dtype` names; any other value is stored as bfloat16 (the
// constructor gives it 16 bits), so that a test may build a tensor of a bad dtype for a call to
// reject.
template <typename F>
decltype(auto) WithDType(sattn_dtype dtype, F&& f) {
  switch (dtype) {
    case SATTN_DTYPE_F32:
      return f(DTypeTag<SATTN_DTYPE_F32>{});
    case SATTN_DTYPE_F16:
      return f(DTypeTag<SATTN_DTYPE_F16>{});
    case SATTN_DTYPE_I32:
      return f(DTypeTag<SATTN_DTYPE_I32>{});
    case SATTN_DTYPE_I8:
      return f(DTypeTag<SATTN_DTYPE_I8>{});
    case SATTN_DTYPE_FP8_E4M3:
      return f(DTypeTag<SATTN_DTYPE_FP8_E4M3>{});
    case SATTN_DTYPE_I4:
      return f(DTypeTag<SATTN_DTYPE_I4>{});
    default:
      return f(DTypeTag<SATTN_DTYPE_BF16>{});
  }
}

}  // namespace

template <typename F>
void HostTensor::ForEachElementOffset(F&& f) const {
  const int rank = static_cast<int>(shape_.size());
  if (NumElements() == 0) return;
  int64_t offset = 8 * base_offset_;
  if (rank == 0) return f(offset);
  // The innermost dimension in a plain loop, the outer ones by an odometer.
  const int64_t inner = shape_[rank - 1], inner_step = strides_[rank - 1] * element_bits_;
  std::vector<int64_t> index(rank, 0);
  for (;;) {
    for (int64_t i = 0, o = offset; i < inner; ++i, o += inner_step) f(o);
    int d = rank - 2;
    for (; d >= 0; --d) {
      offset += strides_[d] * element_bits_;
      if (++index[d] < shape_[d]) break;
      offset -= shape_[d] * strides_[d] * element_bits_;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

double HostTensor::GetAt(int64_t bit_offset) const {
  return WithDType(
      dtype_, [&](auto d) { return LoadElement<decltype(d)::value>(storage_.data(), bit_offset); });
}

void HostTensor::SetAt(int64_t bit_offset, double value) {
  WithDType(dtype_,
            [&](auto d) { StoreElement<decltype(d)::value>(storage_.data(), bit_offset, value); });
}

double HostTensor::Get(const std::vector<int64_t>& index) const {
  return GetAt(ElementOffset(index.data(), index.size()));
}

double HostTensor::Get(std::initializer_list<int64_t> index) const {
  return GetAt(ElementOffset(index.begin(), index.size()));
}

void HostTensor::Set(const std::vector<int64_t>& index, double value) {
  SetAt(ElementOffset(index.data(), index.size()), value);
}

void HostTensor::Set(std::initializer_list<int64_t> index, double value) {
  SetAt(ElementOffset(index.begin(), index.size()), value);
}

Array HostTensor::ToArray() const {
  Array a(shape_);
  double* out = a.data.data();
  WithDType(dtype_, [&](auto d) {
    ForEachElementOffset(
        [&](int64_t offset) { *out++ = LoadElement<decltype(d)::value>(storage_.data(), offset); });
  });
  return a;
}

void HostTensor::FromArray(const Array& a) {
  if (a.shape != shape_) throw std::invalid_argument("HostTensor::FromArray: shape mismatch");
  const double* in = a.data.data();
  WithDType(dtype_, [&](auto d) {
    ForEachElementOffset(
        [&](int64_t offset) { StoreElement<decltype(d)::value>(storage_.data(), offset, *in++); });
  });
}

void HostTensor::FillUniform(std::mt19937_64& rng, double lo, double hi) {
  // One draw of rng seeds SplitMix64, which gives 53 random bits per value: mt19937_64 and
  // std::uniform_real_distribution (long double arithmetic) were a fifth of the time of the
  // suite's larger tests, which fill millions of elements.
  uint64_t state = rng();
  WithDType(dtype_, [&](auto d) {
    ForEachElementOffset([&](int64_t offset) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      StoreElement<decltype(d)::value>(storage_.data(), offset,
                                       lo + (hi - lo) * (static_cast<double>(z >> 11) * 0x1.0p-53));
    });
  });
}

void HostTensor::FillBytes(uint8_t byte) { std::fill(storage_.begin(), storage_.end(), byte); }

double MaxRelativeError(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return kInf;
  double max_abs = 0.0, max_err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i]) != std::isnan(got[i])) return kInf;
    if (std::isnan(want[i])) continue;
    if (std::isinf(want[i])) {
      if (got[i] != want[i]) return kInf;
      continue;
    }
    max_abs = std::max(max_abs, std::fabs(want[i]));
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= max_err)) max_err = err;  // NaN err propagates as +inf below
  }
  if (std::isnan(max_err) || std::isinf(max_err)) return kInf;
  return max_abs > 0.0 ? max_err / max_abs : max_err;
}

double MaxRelativeError(const Array& got, const Array& want) {
  if (got.shape != want.shape) return kInf;
  return MaxRelativeError(got.data, want.data);
}

int BuiltInThreads() {
#if STREAMATTN_TEST_TBB
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#else
  return 1;
#endif
}

ScopedContext::ScopedContext(int32_t num_threads) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.num_threads = num_threads;
  options.backend = SATTN_BACKEND_CPU;
  if (sattn_context_create(&options, &ctx_) != SATTN_OK) {
    throw std::runtime_error(std::string("sattn_context_create: ") + sattn_last_error());
  }
}

ScopedContext::~ScopedContext() { sattn_context_destroy(ctx_); }

}  // namespace testing_util
}  // namespace streamattn
