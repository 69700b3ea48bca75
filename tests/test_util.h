// Helpers shared by the tests: host tensors of any dtype and layout with canary bytes around
// them, conversion to and from the oracle's double arrays, and error measures.
#ifndef STREAMATTN_TESTS_TEST_UTIL_H_
#define STREAMATTN_TESTS_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/reference_attention.h"
#include "streamattn/streamattn.h"

namespace streamattn {
namespace testing_util {

using reference::Array;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Float32 <-> binary16/bfloat16 by bit manipulation, independent of the library's own (so the
// tests can check it). Rounding to nearest even; f16 subnormals handled.
uint16_t ToF16(float f);
float FromF16(uint16_t h);
uint16_t ToBF16(float f);
float FromBF16(uint16_t b);

// FP8 E4M3 (OCP "e4m3fn") from its definition: decoding by the formula, encoding by a search of
// the 254 finite values for the nearest (ties to the even code), saturating at +-448, NaN to
// 0x7F.
float FromE4M3(uint8_t b);
uint8_t ToE4M3(float f);

// The value x becomes when stored as dtype (I8 and I4: rounded to nearest even, saturated).

double RoundTo(sattn_dtype dtype, double x);

// core/dtype.h's name, for tests that see only the public header.
const char* DTypeName(sattn_dtype dtype);

// A tensor in host memory (f32, f16, bf16, i32, or a quantized format's raw elements: i8 and i4
// as integers, fp8_e4m3 as its values) with a logical shape, a storage order (a
// permutation of the logical dims, outermost first) and optional padding after the innermost stored
// dim. The buffer has canary bytes before and after and between padded rows, so a stray write shows
// up.
class HostTensor {
 public:
  HostTensor() = default;
  // order: storage order of logical dims, e.g. {0, 2, 1, 3} stores [b, s, h, d] as [b, h, s, d].
  HostTensor(sattn_dtype dtype, std::vector<int64_t> shape, std::vector<int> order = {},
             int64_t inner_padding = 0);

  sattn_tensor view() const;
  sattn_dtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t NumElements() const;

  double Get(const std::vector<int64_t>& index) const;
  void Set(const std::vector<int64_t>& index, double value);  // rounded to the dtype
  // The same for a braced index ({b, s, h, d}) without building a vector on the heap: the
  // suite's element-by-element copies make millions of these calls.
  double Get(std::initializer_list<int64_t> index) const;
  void Set(std::initializer_list<int64_t> index, double value);

  // All of the logical tensor as doubles, and back (rounding to the dtype).
  Array ToArray() const;
  void FromArray(const Array& a);

  // Fills the view's elements with uniform values in [lo, hi) (rounded to the dtype).
  void FillUniform(std::mt19937_64& rng, double lo, double hi);
  // Sets every byte of the buffer, view and padding alike.
  void FillBytes(uint8_t byte);
  // The raw buffer, canaries included, to compare before and after a call.
  const std::vector<uint8_t>& bytes() const { return storage_; }
  // The same, writable: a test fills it with a device copy of the buffer.
  std::vector<uint8_t>& mutable_bytes() { return storage_; }

 private:
  // Offsets count bits from the buffer's start (i4 elements are half bytes).
  int64_t ElementOffset(const int64_t* index, size_t rank) const;
  // f(bit offset) for every element, in row-major logical order (offsets kept by an odometer,
  // not recomputed per element: the whole-tensor loops of the suite's larger cases).
  template <typename F>
  void ForEachElementOffset(F&& f) const;
  double GetAt(int64_t bit_offset) const;
  void SetAt(int64_t bit_offset, double value);

  sattn_dtype dtype_ = SATTN_DTYPE_F32;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  int64_t element_bits_ = 32;
  int64_t base_offset_ = 0;  // bytes of canary before element 0
  std::vector<uint8_t> storage_;
};

// ||got - want||_inf / ||want||_inf over elements where want is finite; NaN positions must
// match (NaN in both, or in neither), else the result is +inf.
double MaxRelativeError(const Array& got, const Array& want);
// Same over plain vectors.
double MaxRelativeError(const std::vector<double>& got, const std::vector<double>& want);

// Every index of a shape, row-major, calling f(index).
template <typename F>
void ForEachIndex(const std::vector<int64_t>& shape, F&& f) {
  std::vector<int64_t> index(shape.size(), 0);
  int64_t total = 1;
  for (int64_t e : shape) total *= e;
  for (int64_t n = 0; n < total; ++n) {
    f(index);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// The most threads a context without a runner runs: the process's CPUs with oneTBB, 1 in a
// build without it (STREAMATTN_TBB=OFF).
int BuiltInThreads();

// A context with a given thread count (0 = all cores), destroyed at scope exit.
class ScopedContext {
 public:
  explicit ScopedContext(int32_t num_threads = 0);
  ~ScopedContext();
  sattn_context* get() const { return ctx_; }

 private:
  sattn_context* ctx_ = nullptr;
};

}  // namespace testing_util
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_TEST_UTIL_H_
