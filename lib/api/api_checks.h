// Argument checks shared by the entry points: the context, the device of a call, dtypes.
#ifndef STREAMATTN_API_API_CHECKS_H_
#define STREAMATTN_API_API_CHECKS_H_

#include <mutex>

#include "api/context.h"
#include "core/status.h"
#include "core/tensor.h"

namespace streamattn {

inline Status CheckContext(const sattn_context* ctx) {
  if (ctx == nullptr) return InvalidArgument("ctx must not be NULL");
  return Status();
}

// Taken by every call on a context, for the whole call (see sattn_context::call_mutex).
using ContextLock = std::lock_guard<std::mutex>;

// The device of a call: that of its first tensor, which every other tensor must share (one call
// never mixes host and device memory). Device tensors need a context with a CUDA backend; host
// tensors run on the CPU backend whatever the context (a CUDA context owns one too).
class CallDevice {
 public:
  explicit CallDevice(const sattn_context* ctx) : ctx_(ctx) {}

  Status Check(const Tensor& t, const char* name) {
    if (t.device == SATTN_DEVICE_CUDA && ctx_->cuda == nullptr) {
      return InvalidArgument("%s.device=cuda but this context runs on the cpu backend (%s)", name,
                             ctx_->cuda_availability);
    }
    if (first_ == nullptr) {
      first_ = name;
      device_ = t.device;
      index_ = t.device_index;
      return Status();
    }
    if (t.device != device_) {
      return InvalidArgument(
          "%s.device=%s but %s.device=%s: one call cannot mix host and device "
          "tensors",
          name, DeviceName(t.device), first_, DeviceName(device_));
    }
    if (t.device_index != index_) {
      return InvalidArgument(
          "%s.device_index=%d but %s.device_index=%d: one call runs on one "
          "device",
          name, t.device_index, first_, index_);
    }
    return Status();
  }

  bool on_cuda() const { return device_ == SATTN_DEVICE_CUDA; }
  int32_t device_index() const { return index_; }

  // The backend that computes this call.
  Backend* backend(sattn_context* ctx) const {
    return on_cuda() ? ctx->cuda.get() : ctx->cpu.get();
  }

 private:
  static const char* DeviceName(int32_t device) {
    return device == SATTN_DEVICE_CUDA ? "cuda" : "cpu";
  }

  const sattn_context* ctx_;
  const char* first_ = nullptr;
  int32_t device_ = SATTN_DEVICE_CPU;
  int32_t index_ = 0;
};

inline Status CheckDType(const Tensor& t, const char* name, DType expected) {
  if (t.dtype == expected) return Status();
  return InvalidArgument("%s.dtype=%s must be %s", name, DTypeName(t.dtype), DTypeName(expected));
}

// Attention inputs and outputs hold numbers to compute with: f32, f16 or bf16.
inline Status CheckFloatDType(const Tensor& t, const char* name) {
  if (IsFloatDType(t.dtype)) return Status();
  return InvalidArgument("%s.dtype=%s must be f32, f16 or bf16", name, DTypeName(t.dtype));
}

// A KV cache holds a float dtype or a quantized format (read with its scales).
inline Status CheckCacheDType(const Tensor& t, const char* name) {
  if (IsFloatDType(t.dtype) || IsQuantizedDType(t.dtype)) return Status();
  return InvalidArgument("%s.dtype=%s must be f32, f16, bf16, i8, fp8_e4m3 or i4", name,
                         DTypeName(t.dtype));
}

// Validates a view of the given rank on the call's device.
inline Status ValidateOnDevice(CallDevice* call, const sattn_tensor* view, const char* name,
                               int rank, Tensor* out) {
  SATTN_RETURN_IF_ERROR(ValidateTensor(view, name, rank, out));
  return call->Check(*out, name);
}

}  // namespace streamattn

#endif  // STREAMATTN_API_API_CHECKS_H_
