// Argument checks shared by the entry points: the context, devices, and the dtype of lse views.
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

// Every tensor of a call must live where the context's backend computes.
inline Status CheckOnBackendDevice(const sattn_context* ctx, const Tensor& t, const char* name) {
  const int32_t expected =
      ctx->active->kind() == SATTN_BACKEND_CUDA ? SATTN_DEVICE_CUDA : SATTN_DEVICE_CPU;
  if (t.device == expected) return Status();
  return InvalidArgument("%s.device=%s but this context runs on the %s backend", name,
                         t.device == SATTN_DEVICE_CUDA ? "cuda" : "cpu",
                         expected == SATTN_DEVICE_CUDA ? "cuda" : "cpu");
}

inline Status CheckDType(const Tensor& t, const char* name, DType expected) {
  if (t.dtype == expected) return Status();
  return InvalidArgument("%s.dtype=%s must be %s", name, DTypeName(t.dtype), DTypeName(expected));
}

// Attention inputs and outputs hold numbers to compute with: f32, f16 or bf16.
inline Status CheckFloatDType(const Tensor& t, const char* name) {
  if (IsFloatDType(t.dtype)) return Status();
  return InvalidArgument("%s.dtype=%s must be f32, f16 or bf16", name, DTypeName(t.dtype));
}

// Validates a view of the given rank on the context's device.
inline Status ValidateOnDevice(const sattn_context* ctx, const sattn_tensor* view, const char* name,
                               int rank, Tensor* out) {
  SATTN_RETURN_IF_ERROR(ValidateTensor(view, name, rank, out));
  return CheckOnBackendDevice(ctx, *out, name);
}

}  // namespace streamattn

#endif  // STREAMATTN_API_API_CHECKS_H_
