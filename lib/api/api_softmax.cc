// sattn_softmax, sattn_log_softmax and sattn_softmax_topk: argument checks, then the backend.
#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "api/api_checks.h"
#include "api/api_guard.h"

namespace streamattn {
namespace {

constexpr size_t kSoftmaxOptionsV1Size =
    offsetof(sattn_softmax_options, temperature) + sizeof(float);
constexpr int32_t kMaxTopK = 1024;

// 0 means 1. Below FLT_MIN, log2(e) / T would overflow float.
Status ReadTemperature(const sattn_softmax_options* user, float* temperature) {
  sattn_softmax_options options{};
  SATTN_RETURN_IF_ERROR(ReadOptions(user, "options", kSoftmaxOptionsV1Size, &options));
  const float t = options.temperature;
  if (t == 0.0f) {
    *temperature = 1.0f;
    return Status();
  }
  if (!(t >= FLT_MIN) || !std::isfinite(t)) {
    return InvalidArgument(
        "options->temperature=%g must be finite and at least %g (or 0 for the default, 1)",
        static_cast<double>(t), static_cast<double>(FLT_MIN));
  }
  *temperature = t;
  return Status();
}

// in: [n] or [rows, n], a float dtype.
Status ValidateScores(CallDevice* call, const sattn_tensor* view, Tensor* in) {
  if (view == nullptr) return InvalidArgument("in must not be NULL");
  if (view->ndim != 1 && view->ndim != 2) {
    return InvalidArgument("in.ndim=%d must be 1 ([n]) or 2 ([rows, n])", view->ndim);
  }
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(call, view, "in", view->ndim, in));
  return CheckFloatDType(*in, "in");
}

// `t` has in's rank and extents, except the last which is `last` (n for out, k for top-k).
Status CheckRowsShape(const Tensor& t, const char* name, const Tensor& in, int64_t last,
                      const char* last_name) {
  if (in.ndim == 2) SATTN_RETURN_IF_ERROR(CheckSameExtent(t, name, 0, in, "in", 0));
  const int d = in.ndim - 1;
  if (t.shape[d] == last) return Status();
  return InvalidArgument("%s.shape[%d]=%" PRId64 " must equal %s=%" PRId64, name, d, t.shape[d],
                         last_name, last);
}

// A rank-1 view [n] as the single row of [1, n].
Tensor AsRows(const Tensor& t) {
  if (t.ndim == 2) return t;
  Tensor rows = t;
  rows.ndim = 2;
  rows.shape[0] = 1;
  rows.strides[0] = 0;
  rows.shape[1] = t.shape[0];
  rows.strides[1] = t.strides[0];
  return rows;
}

Status Softmax(sattn_context* ctx, const sattn_tensor* in_view, const sattn_tensor* out_view,
               const sattn_softmax_options* options, bool log) {
  SATTN_RETURN_IF_ERROR(CheckContext(ctx));
  const ContextLock hold(ctx->call_mutex);
  CallDevice call(ctx);
  Tensor in, out;
  SATTN_RETURN_IF_ERROR(ValidateScores(&call, in_view, &in));
  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, out_view, "out", in.ndim, &out));
  SATTN_RETURN_IF_ERROR(CheckFloatDType(out, "out"));
  if (out.dtype != DType::kF32 && out.dtype != in.dtype) {
    return InvalidArgument("out.dtype=%s must be f32 or in.dtype=%s", DTypeName(out.dtype),
                           DTypeName(in.dtype));
  }
  const int64_t n = in.shape[in.ndim - 1];
  SATTN_RETURN_IF_ERROR(CheckRowsShape(out, "out", in, n, "in's row length"));
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(out, "out"));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(out, "out", in, "in", true));
  SoftmaxArgs args;
  SATTN_RETURN_IF_ERROR(ReadTemperature(options, &args.temperature));
  args.in = AsRows(in);
  args.out = AsRows(out);
  args.log = log;
  return call.backend(ctx)->Softmax(args);
}

Status SoftmaxTopK(sattn_context* ctx, const sattn_tensor* in_view, int32_t k,
                   const sattn_tensor* indices_view, const sattn_tensor* probs_view,
                   const sattn_tensor* lse_view, const sattn_softmax_options* options) {
  SATTN_RETURN_IF_ERROR(CheckContext(ctx));
  const ContextLock hold(ctx->call_mutex);
  CallDevice call(ctx);
  SoftmaxTopKArgs args;
  SATTN_RETURN_IF_ERROR(ValidateScores(&call, in_view, &args.in));
  const Tensor& in = args.in;
  const int last = in.ndim - 1;
  const int64_t n = in.shape[last];
  if (n > INT32_MAX) {
    return InvalidArgument("in.shape[%d]=%" PRId64 " must be < 2^31 (indices are int32)", last, n);
  }
  if (k < 1 || k > n) {
    return InvalidArgument("k=%d must be in [1, n] where n=in.shape[%d]=%" PRId64, k, last, n);
  }
  if (k > kMaxTopK) return Unsupported("k=%d: softmax_topk supports k <= %d", k, kMaxTopK);
  args.k = k;

  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, indices_view, "indices", in.ndim, &args.indices));
  SATTN_RETURN_IF_ERROR(CheckDType(args.indices, "indices", DType::kI32));
  SATTN_RETURN_IF_ERROR(CheckRowsShape(args.indices, "indices", in, k, "k"));
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(args.indices, "indices"));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(args.indices, "indices", in, "in", false));

  SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, probs_view, "probs", in.ndim, &args.probs));
  SATTN_RETURN_IF_ERROR(CheckDType(args.probs, "probs", DType::kF32));
  SATTN_RETURN_IF_ERROR(CheckRowsShape(args.probs, "probs", in, k, "k"));
  SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(args.probs, "probs"));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(args.probs, "probs", in, "in", false));
  SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(args.probs, "probs", args.indices, "indices", false));

  Tensor lse;
  if (lse_view != nullptr) {
    SATTN_RETURN_IF_ERROR(ValidateOnDevice(&call, lse_view, "lse", 1, &lse));
    SATTN_RETURN_IF_ERROR(CheckDType(lse, "lse", DType::kF32));
    const int64_t rows = in.ndim == 2 ? in.shape[0] : 1;
    if (lse.shape[0] != rows) {
      return InvalidArgument("lse.shape[0]=%" PRId64 " must equal the number of rows, %" PRId64,
                             lse.shape[0], rows);
    }
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(lse, "lse", in, "in", false));
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(lse, "lse", args.indices, "indices", false));
    SATTN_RETURN_IF_ERROR(CheckNoPartialOverlap(lse, "lse", args.probs, "probs", false));
    SATTN_RETURN_IF_ERROR(CheckNoSelfOverlap(lse, "lse"));
    args.lse = &lse;
  }
  SATTN_RETURN_IF_ERROR(ReadTemperature(options, &args.temperature));
  args.in = AsRows(in);
  args.indices = AsRows(args.indices);
  args.probs = AsRows(args.probs);
  return call.backend(ctx)->SoftmaxTopK(args);
}

}  // namespace
}  // namespace streamattn

extern "C" {

SATTN_API sattn_status sattn_softmax(sattn_context* ctx, const sattn_tensor* in,
                                     const sattn_tensor* out,
                                     const sattn_softmax_options* options) {
  return streamattn::RunGuarded(
      [&] { return streamattn::Softmax(ctx, in, out, options, /*log=*/false); });
}

SATTN_API sattn_status sattn_log_softmax(sattn_context* ctx, const sattn_tensor* in,
                                         const sattn_tensor* out,
                                         const sattn_softmax_options* options) {
  return streamattn::RunGuarded(
      [&] { return streamattn::Softmax(ctx, in, out, options, /*log=*/true); });
}

SATTN_API sattn_status sattn_softmax_topk(sattn_context* ctx, const sattn_tensor* in, int32_t k,
                                          const sattn_tensor* indices, const sattn_tensor* probs,
                                          const sattn_tensor* lse,
                                          const sattn_softmax_options* options) {
  return streamattn::RunGuarded(
      [&] { return streamattn::SoftmaxTopK(ctx, in, k, indices, probs, lse, options); });
}

}  // extern "C"
