// sattn_merge_states: argument checks, then the backend.
#include <cstdio>

#include "api/api_checks.h"
#include "api/api_guard.h"
#include "core/allocator.h"

namespace streamattn {
namespace {

constexpr int32_t kMaxParts = 1 << 20;

// "o_parts[12]", without allocating.
struct PartName {
  PartName(const char* array, int32_t i) { std::snprintf(text, sizeof(text), "%s[%d]", array, i); }
  const char* c_str() const { return text; }
  char text[32];
};

// lse must be float32 [batch, heads, seq] matching out [batch, seq, heads, head_dim].
Status CheckLseShape(const Tensor& lse, const char* name, const Tensor& out) {
  SATTN_RETURN_IF_ERROR(CheckDType(lse, name, DType::kF32));
  SATTN_RETURN_IF_ERROR(CheckSameExtent(lse, name, 0, out, "out", 0));
  SATTN_RETURN_IF_ERROR(CheckSameExtent(lse, name, 1, out, "out", 2));
  return CheckSameExtent(lse, name, 2, out, "out", 1);
}

Status MergeStates(sattn_context* ctx, int32_t num_parts, const sattn_tensor* o_parts,
                   const sattn_tensor* lse_parts, const sattn_tensor* out_view,
                   const sattn_tensor* lse_out_view) {
  SATTN_RETURN_IF_ERROR(CheckContext(ctx));
  const ContextLock hold(ctx->call_mutex);
  if (num_parts < 0 || num_parts > kMaxParts) {
    return InvalidArgument("num_parts=%d must be in [0, %d]", num_parts, kMaxParts);
  }
  if (num_parts > 0 && o_parts == nullptr) return InvalidArgument("o_parts must not be NULL");
  if (num_parts > 0 && lse_parts == nullptr) return InvalidArgument("lse_parts must not be NULL");

  CallDevice call(ctx);
  MergeStatesArgs args;
  args.num_parts = num_parts;
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, out_view, "out", 4, &args.out));
  SATTN_RETURN_IF_ERROR(CheckFloatDType(args.out, "out"));
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(args.out, "out"));
  Tensor lse_out;
  if (lse_out_view != nullptr) {
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, lse_out_view, "lse_out", 3, &lse_out));
    SATTN_RETURN_IF_ERROR(CheckLseShape(lse_out, "lse_out", args.out));
    SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(lse_out, "lse_out"));
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(lse_out, "lse_out", args.out, "out", false));
    args.lse_out = &lse_out;
  }

  Vector<Tensor> o(num_parts, ctx->allocator), lse(num_parts, ctx->allocator);
  for (int32_t i = 0; i < num_parts; ++i) {
    const PartName o_name("o_parts", i);
    const PartName lse_name("lse_parts", i);
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, &o_parts[i], o_name.c_str(), 4, &o[i]));
    SATTN_RETURN_IF_ERROR(CheckFloatDType(o[i], o_name.c_str()));
    for (int dim = 0; dim < 4; ++dim) {
      SATTN_RETURN_IF_ERROR(CheckSameExtent(o[i], o_name.c_str(), dim, args.out, "out", dim));
    }
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, &lse_parts[i], lse_name.c_str(), 3, &lse[i]));
    SATTN_RETURN_IF_ERROR(CheckLseShape(lse[i], lse_name.c_str(), args.out));
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(args.out, "out", o[i], o_name.c_str(), true));
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(args.out, "out", lse[i], lse_name.c_str(), false));
    if (args.lse_out != nullptr) {
      SATTN_RETURN_IF_ERROR(
          CheckNoPartialOverlap(lse_out, "lse_out", lse[i], lse_name.c_str(), true));
      SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(lse_out, "lse_out", o[i], o_name.c_str(), false));
    }
  }
  args.o_parts = o.data();
  args.lse_parts = lse.data();
  return call.backend(ctx)->MergeStates(args);
}

}  // namespace
}  // namespace streamattn

extern "C" {

SATTN_API sattn_status sattn_merge_states(sattn_context* ctx, int32_t num_parts,
                                          const sattn_tensor* o_parts,
                                          const sattn_tensor* lse_parts, const sattn_tensor* out,
                                          const sattn_tensor* lse_out) {
  return streamattn::RunGuarded(
      [&] { return streamattn::MergeStates(ctx, num_parts, o_parts, lse_parts, out, lse_out); });
}

}  // extern "C"
