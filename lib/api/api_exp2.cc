// sattn_exp2: the library's exp2 over a caller's array.
#include <cstdint>

#include "api/api_checks.h"
#include "api/api_guard.h"

namespace streamattn {
namespace {

Status Exp2(sattn_context* ctx, const float* x, float* y, int64_t n) {
  SATTN_RETURN_IF_ERROR(CheckContext(ctx));
  const ContextLock hold(ctx->call_mutex);
  if (n < 0) return InvalidArgument("n=%lld must be >= 0", static_cast<long long>(n));
  if (n == 0) return Status();
  if (x == nullptr) return InvalidArgument("x must not be NULL");
  if (y == nullptr) return InvalidArgument("y must not be NULL");
  if (static_cast<uint64_t>(n) > UINTPTR_MAX / sizeof(float)) {
    return InvalidArgument("n=%lld floats do not fit in the address space",
                           static_cast<long long>(n));
  }
  const uintptr_t xb = reinterpret_cast<uintptr_t>(x), yb = reinterpret_cast<uintptr_t>(y);
  const uintptr_t bytes = static_cast<uintptr_t>(n) * sizeof(float);
  if (xb != yb && xb < yb + bytes && yb < xb + bytes) {
    return InvalidArgument("y overlaps x without being equal to it (in-place needs y == x)");
  }
  return ctx->cpu->Exp2(x, y, n);  // host arrays, whatever the context
}

}  // namespace
}  // namespace streamattn

extern "C" {

SATTN_API sattn_status sattn_exp2(sattn_context* ctx, const float* x, float* y, int64_t n) {
  return streamattn::RunGuarded([&] { return streamattn::Exp2(ctx, x, y, n); });
}

}  // extern "C"
