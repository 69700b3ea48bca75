// What the libFuzzer targets share: decoding choices from the input, tensors placed in heap
// buffers of exactly the bytes their views span (any layout: permuted, padded, negative and
// zero strides), so AddressSanitizer catches a read or write one byte outside a view, and the
// checks every call must pass: a failed call leaves every output byte as it was and says why;
// a successful one writes only the elements of its output views and never an input.
#ifndef STREAMATTN_TESTS_FUZZ_FUZZ_UTIL_H_
#define STREAMATTN_TESTS_FUZZ_FUZZ_UTIL_H_

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "hwy/targets.h"
#include "streamattn/streamattn.h"
#include "test_util.h"

namespace streamattn {
namespace fuzz {

// A finding: print what broke and abort, so libFuzzer saves the input.
#define FUZZ_CHECK(cond, ...)                                 \
  do {                                                        \
    if (!(cond)) {                                            \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s: ", #cond); \
      std::fprintf(stderr, __VA_ARGS__);                      \
      std::fprintf(stderr, "\n");                             \
      std::abort();                                           \
    }                                                         \
  } while (0)

// How element values are chosen.
enum class Fill : uint8_t {
  kUniform,  // uniform in [-1, 1] (rounded to the dtype): calls the oracle can judge
  kSpecial,  // mostly uniform, sprinkled with NaN, ±Inf, ±1e30, ±65504, subnormals, ±0
  kBytes,    // raw bit patterns from a generator seeded by the input
};

// Bits per element: the quantized caches' bytes (I8, FP8_E4M3) and half bytes (I4) included.
inline int ElementBits(int32_t dtype) {
  switch (dtype) {
    case SATTN_DTYPE_F16:
    case SATTN_DTYPE_BF16:
      return 16;
    case SATTN_DTYPE_I8:
    case SATTN_DTYPE_FP8_E4M3:
      return 8;
    case SATTN_DTYPE_I4:
      return 4;
    default:
      return 32;
  }
}

inline bool IsQuantized(int32_t dtype) {
  return dtype == SATTN_DTYPE_I8 || dtype == SATTN_DTYPE_FP8_E4M3 || dtype == SATTN_DTYPE_I4;
}

// A float dtype, or now and then something a float slot must reject.
inline int32_t PickFloatDType(FuzzedDataProvider& in) {
  const int r = in.ConsumeIntegralInRange<int>(0, 40);
  if (r == 0) return SATTN_DTYPE_I32;
  if (r == 1) return in.ConsumeIntegralInRange<int32_t>(-2, 9);  // mostly unknown values
  return SATTN_DTYPE_F32 + r % 3;
}

// One malformed detail, now and then, in an otherwise valid view: an unknown enum, a bad rank,
// a non-positive or shrunken extent, a stride the checks must refuse or overflow on. Extents
// only shrink and strides only change on dims of extent 1 or to overflowing values, so a view
// the library accepts never spans more than its buffer.
inline void Mutate(FuzzedDataProvider& in, sattn_tensor* t, bool* null_data) {
  const int d = in.ConsumeIntegralInRange<int>(0, SATTN_MAX_NDIM - 1);
  switch (in.ConsumeIntegralInRange<int>(0, 9)) {
    case 0:
      t->dtype = in.ConsumeIntegralInRange<int32_t>(-1, 8);
      break;
    case 1:
      t->device = in.ConsumeIntegralInRange<int32_t>(-1, 2);
      break;
    case 2:
      t->device_index = in.ConsumeIntegralInRange<int32_t>(-2, 1);
      break;
    case 3:
      t->ndim = in.ConsumeIntegralInRange<int32_t>(-1, 6);
      break;
    case 4:
      t->shape[d] = in.ConsumeIntegralInRange<int64_t>(-3, 0);
      break;
    case 5:
      if (t->shape[d] > 1) t->shape[d] = in.ConsumeIntegralInRange<int64_t>(1, t->shape[d] - 1);
      break;
    case 6:
      t->strides[d] = std::numeric_limits<int64_t>::min();
      break;
    case 7:
      if (t->shape[d] > 2) t->strides[d] = (int64_t{1} << 62) * (in.ConsumeBool() ? 1 : -1);
      break;
    case 8:
      if (t->shape[d] == 1) t->strides[d] = in.ConsumeIntegral<int64_t>();
      break;
    default:
      *null_data = true;  // the data pointer, once the buffer is placed
  }
}

// A tensor in a heap buffer of exactly the bytes its view spans.
class FuzzTensor {
 public:
  FuzzTensor() = default;

  // Chooses a layout for `shape` (storage order, padding, signs, broadcast), now and then one
  // malformed detail (Mutate), and allocates. Outputs never get stride 0 on an extent above 1
  // from the layout (Mutate covers what the checks must refuse).
  void Make(FuzzedDataProvider& in, int32_t dtype, std::vector<int64_t> shape, bool output) {
    dtype_ = dtype;
    view_ = sattn_tensor{};
    view_.dtype = dtype;
    view_.ndim = static_cast<int32_t>(shape.size());
    const int rank = static_cast<int>(shape.size());
    std::vector<int> order(rank);
    for (int i = 0; i < rank; ++i) order[i] = i;
    const int layout = in.ConsumeIntegralInRange<int>(0, 7);
    // I4 packs two elements per byte along the last dim: it stays innermost with stride 1 and
    // every other stride stays even (Mutate still breaks that now and then).
    const bool packed = dtype == SATTN_DTYPE_I4;
    if (layout >= 5 && !packed) {  // a permuted storage order
      for (int i = rank - 1; i > 0; --i) {
        std::swap(order[i], order[in.ConsumeIntegralInRange<int>(0, i)]);
      }
    }
    int64_t pad = layout == 4 || layout == 7 ? in.ConsumeIntegralInRange<int64_t>(1, 3) : 0;
    if (packed) pad *= 2;
    int64_t stride = 1;
    for (int k = rank - 1; k >= 0; --k) {
      const int d = order[k];
      view_.shape[d] = shape[d];
      view_.strides[d] = stride;
      stride *= shape[d] + (k == rank - 1 ? pad : 0);
    }
    if (layout == 3 || layout == 6) {  // reversed dims
      for (int d = 0; d < rank - (packed ? 1 : 0); ++d) {
        if (in.ConsumeBool()) view_.strides[d] = -view_.strides[d];
      }
    }
    if (!output && layout == 2 && rank > (packed ? 1 : 0)) {  // broadcast one dim
      view_.strides[in.ConsumeIntegralInRange<int>(0, rank - 1 - (packed ? 1 : 0))] = 0;
    }
    mutated_ = in.ConsumeIntegralInRange<int>(0, 40) == 0;
    null_data_ = false;
    if (mutated_) Mutate(in, &view_, &null_data_);
    Allocate();
  }

  // Places the (possibly mutated) view in a buffer of exactly its span; returns false when the
  // view's span cannot be allocated (the call is then skipped).
  bool Allocate() {
    int64_t lowest = 0, span = 0;
    for (int d = 0; d < view_.ndim && d < SATTN_MAX_NDIM; ++d) {
      const int64_t extent = view_.shape[d] < 1 ? 1 : view_.shape[d];
      const int64_t s = view_.strides[d];
      if (s == std::numeric_limits<int64_t>::min()) return Fake();
      const int64_t a = s < 0 ? -s : s;
      int64_t term;
      if (__builtin_mul_overflow(extent - 1, a, &term) ||
          __builtin_add_overflow(span, term, &span)) {
        return Fake();
      }
      if (s < 0) lowest -= term;
    }
    // The view's dtype, as mutated: a larger element than planned must still fit. An unknown
    // dtype must be refused; its buffer holds 4-byte elements.
    dtype_ = view_.dtype >= SATTN_DTYPE_F32 && view_.dtype <= SATTN_DTYPE_I4 ? view_.dtype
                                                                             : SATTN_DTYPE_F32;
    const int64_t bits = ElementBits(dtype_);
    if (span > (int64_t{1} << 22)) return Fake();  // 16 MiB at most
    // Element [0, ..] starts on the first byte that leaves room for the lowest element below it
    // (a half byte of slack only where a mutated I4 stride is odd); the buffer ends with the
    // byte holding the highest element. Exactly the view's bytes otherwise.
    data_byte_ = (-lowest * bits + 7) / 8;
    bytes_ = static_cast<size_t>((data_byte_ * 8 + (lowest + span + 1) * bits + 7) / 8);
    buffer_.reset(new uint8_t[bytes_]);
    std::memset(buffer_.get(), 0, bytes_);
    view_.data = buffer_.get() + data_byte_;
    if (null_data_) view_.data = nullptr;
    real_ = true;
    return true;
  }

  // Fills every element of the view (and the padding between them) with values. A quantized
  // format gets codes: uniform ones (FP8 without its NaN codes), with kSpecial its extremes and
  // NaN codes sprinkled in, with kBytes any bytes.
  void FillValues(Fill fill, uint64_t seed) {
    if (!real_) return;
    std::mt19937_64 rng(seed);
    if (IsQuantized(dtype_)) {
      for (size_t at = 0; at < bytes_; ++at) {
        uint8_t byte = static_cast<uint8_t>(rng());
        if (fill == Fill::kSpecial && rng() % 8 == 0) {
          const uint8_t extremes[] = {0x7F, 0xFF, 0x80, 0x7E, 0xFE, 0x88, 0x00, 0x01};
          byte = extremes[rng() % 8];
        } else if (fill != Fill::kBytes && dtype_ == SATTN_DTYPE_FP8_E4M3 &&
                   (byte & 0x7F) == 0x7F) {
          byte ^= 1;  // 0x7E: the largest finite value instead of NaN
        }
        buffer_[at] = byte;
      }
      return;
    }
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const float specials[] = {NAN,       INFINITY, -INFINITY, 1e30f,  -1e30f, 65504.0f,
                              -65504.0f, 6e-8f,    -3e-6f,    1e-40f, 0.0f,   -0.0f};
    const int size = ElementBits(dtype_) / 8;
    for (size_t at = 0; at + size <= bytes_; at += size) {
      float x = uniform(rng);
      if (fill == Fill::kSpecial && rng() % 8 == 0) x = specials[rng() % 12];
      if (fill == Fill::kBytes) {
        const uint32_t bits = static_cast<uint32_t>(rng());
        std::memcpy(buffer_.get() + at, &bits, size);
        continue;
      }
      StoreFloat(buffer_.get() + at, x);
    }
  }

  // x = f(x) once for every element of the buffer (padding included). Not per logical index:
  // a view with a zero stride visits one element many times, and scaling it at each visit
  // compounded a spread of 128 into infinities the judges did not expect.
  // Float formats only.
  template <typename F>
  void TransformElements(F&& f) {
    if (!real_ || IsQuantized(dtype_)) return;
    const int size = ElementBits(dtype_) / 8;
    for (size_t at = 0; at + size <= bytes_; at += size) {
      StoreFloat(buffer_.get() + at, f(LoadFloat(buffer_.get() + at)));
    }
  }

  void FillBytes(uint8_t byte) {
    if (real_) std::memset(buffer_.get(), byte, bytes_);
  }

  // Bit offset in the buffer of a logical index (I4 elements are half bytes).
  int64_t BitOffset(const int64_t* index) const {
    int64_t offset = 0;
    for (int d = 0; d < view_.ndim; ++d) offset += index[d] * view_.strides[d];
    return data_byte_ * 8 + offset * ElementBits(dtype_);
  }
  // Element pointer of a logical index (its byte, for I4).
  uint8_t* At(const int64_t* index) const { return buffer_.get() + BitOffset(index) / 8; }
  // Float formats: the value; I8 and I4: the integer; FP8_E4M3: the code's value (unscaled).
  double Get(const int64_t* index) const {
    if (dtype_ == SATTN_DTYPE_I4) {
      const int64_t bit = BitOffset(index);
      const int nibble = (buffer_[bit / 8] >> (bit % 8)) & 0xF;
      return nibble >= 8 ? nibble - 16 : nibble;
    }
    return LoadFloat(At(index));
  }
  // Quantized formats: x is rounded to a code (integers saturated), as the tests' HostTensor; an
  // integer format has no NaN, so a NaN (planted in a view Mutate turned integer) becomes 0.
  void Set(const int64_t* index, float x) const {
    if (dtype_ == SATTN_DTYPE_I4) {
      const int64_t bit = BitOffset(index);
      const int shift = static_cast<int>(bit % 8);
      const int q =
          std::isnan(x) ? 0 : static_cast<int>(testing_util::RoundTo(SATTN_DTYPE_I4, x)) & 0xF;
      uint8_t& byte = buffer_[bit / 8];
      byte = static_cast<uint8_t>((byte & ~(0xF << shift)) | (q << shift));
      return;
    }
    StoreFloat(At(index), x);
  }
  // The raw code of a quantized element (I4: its four bits), to compare bytes exactly.
  int GetCode(const int64_t* index) const {
    const int64_t bit = BitOffset(index);
    return dtype_ == SATTN_DTYPE_I4 ? (buffer_[bit / 8] >> (bit % 8)) & 0xF : buffer_[bit / 8];
  }
  int32_t GetInt(const int64_t* index) const {
    int32_t v;
    std::memcpy(&v, At(index), 4);
    return v;
  }
  void SetInt(const int64_t* index, int32_t v) const { std::memcpy(At(index), &v, 4); }

  double LoadFloat(const uint8_t* p) const {
    uint16_t h;
    switch (dtype_) {
      case SATTN_DTYPE_F16:
        std::memcpy(&h, p, 2);
        return testing_util::FromF16(h);
      case SATTN_DTYPE_BF16:
        std::memcpy(&h, p, 2);
        return testing_util::FromBF16(h);
      case SATTN_DTYPE_I8:
        return static_cast<int8_t>(*p);
      case SATTN_DTYPE_FP8_E4M3:
        return testing_util::FromE4M3(*p);
      default: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
    }
  }
  void StoreFloat(uint8_t* p, float x) const {
    uint16_t h;
    switch (dtype_) {
      case SATTN_DTYPE_F16:
        h = testing_util::ToF16(x);
        std::memcpy(p, &h, 2);
        return;
      case SATTN_DTYPE_BF16:
        h = testing_util::ToBF16(x);
        std::memcpy(p, &h, 2);
        return;
      case SATTN_DTYPE_I8:
        *p = std::isnan(x) ? 0
                           : static_cast<uint8_t>(
                                 static_cast<int8_t>(testing_util::RoundTo(SATTN_DTYPE_I8, x)));
        return;
      case SATTN_DTYPE_FP8_E4M3:
        *p = testing_util::ToE4M3(x);
        return;
      default:
        std::memcpy(p, &x, 4);
    }
  }

  // Every index of the view, row-major.
  template <typename F>
  void ForEach(F&& f) const {
    int64_t index[SATTN_MAX_NDIM] = {0, 0, 0, 0};
    int64_t total = 1;
    for (int d = 0; d < view_.ndim; ++d) total *= view_.shape[d];
    for (int64_t n = 0; n < total; ++n) {
      f(index);
      for (int d = view_.ndim - 1; d >= 0; --d) {
        if (++index[d] < view_.shape[d]) break;
        index[d] = 0;
      }
    }
  }

  std::vector<uint8_t> Snapshot() const {
    return real_ ? std::vector<uint8_t>(buffer_.get(), buffer_.get() + bytes_)
                 : std::vector<uint8_t>();
  }
  bool Unchanged(const std::vector<uint8_t>& before) const { return Snapshot() == before; }

  // After a successful call: bytes of the buffer that belong to no element of the view are
  // as they were.
  bool OnlyViewWritten(const std::vector<uint8_t>& before) const {
    if (!real_) return true;
    // By bytes: an I4 element marks its whole byte (a row of I4 is whole bytes).
    std::vector<uint8_t> in_view(bytes_, 0);
    const int size = std::max(1, ElementBits(dtype_) / 8);
    const uint8_t* base = buffer_.get();
    ForEach(
        [&](const int64_t* index) { std::fill_n(in_view.begin() + (At(index) - base), size, 1); });
    for (size_t i = 0; i < bytes_; ++i) {
      if (!in_view[i] && buffer_[i] != before[i]) return false;
    }
    return true;
  }

  sattn_tensor& view() { return view_; }
  const sattn_tensor& view() const { return view_; }
  bool real() const { return real_; }
  bool mutated() const { return mutated_; }
  uint8_t* buffer() const { return buffer_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  // A view too large to place (the call must reject it, or the fuzzer skips it): a one-byte
  // buffer, so a read past it is still caught.
  bool Fake() {
    bytes_ = 1;
    buffer_.reset(new uint8_t[1]);
    buffer_[0] = 0;
    view_.data = buffer_.get();
    data_byte_ = 0;
    real_ = false;
    return false;
  }

  int32_t dtype_ = SATTN_DTYPE_F32;
  sattn_tensor view_{};
  std::unique_ptr<uint8_t[]> buffer_;
  size_t bytes_ = 0;
  int64_t data_byte_ = 0;  // where element [0, ..] starts in the buffer
  bool real_ = false;
  bool mutated_ = false;
  bool null_data_ = false;
};

// Runs the call on one of the SIMD targets this CPU supports, chosen by the input, and on a
// context of 1 or 2 threads (kept across inputs, as an application keeps one, so scratch is
// reused and grown).
inline sattn_context* PickContextAndTarget(FuzzedDataProvider& in) {
  static sattn_context* contexts[2] = {nullptr, nullptr};
  const int threads = in.ConsumeBool() ? 2 : 1;
  if (contexts[threads - 1] == nullptr) {
    sattn_context_options options{};
    options.struct_size = sizeof(options);
    options.num_threads = threads;
    if (sattn_context_create(&options, &contexts[threads - 1]) != SATTN_OK) std::abort();
  }
  // Every target this CPU runs, listed once while no test mask is set.
  static const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  hwy::SetSupportedTargetsForTest(
      targets[in.ConsumeIntegralInRange<size_t>(0, targets.size() - 1)]);
  return contexts[threads - 1];
}

// A failed call: a known status, a message, and not one output byte changed.
inline void CheckFailure(sattn_status status, const std::vector<const FuzzTensor*>& outputs,
                         const std::vector<std::vector<uint8_t>>& before) {
  FUZZ_CHECK(status >= SATTN_ERR_INVALID_ARGUMENT && status <= SATTN_ERR_UNSUPPORTED,
             "status %d (%s)", status, sattn_last_error());
  FUZZ_CHECK(std::strlen(sattn_last_error()) > 0, "a failure without a message");
  for (size_t i = 0; i < outputs.size(); ++i) {
    FUZZ_CHECK(outputs[i]->Unchanged(before[i]), "failed call (%s) wrote output %zu",
               sattn_last_error(), i);
  }
}

}  // namespace fuzz
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_FUZZ_FUZZ_UTIL_H_
