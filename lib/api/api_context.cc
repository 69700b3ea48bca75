// Context lifetime, backend choice and introspection.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "api/api_guard.h"
#include "api/context.h"
#include "core/versioned_options.h"
#include "cpu/cpu_backend.h"
#include "cuda_host/cuda_backend.h"
#include "cuda_host/cuda_plugin.h"

namespace streamattn {
namespace {

// Each version's size ends at its last field, so that appending a field never turns away a
// caller built against an older header.
constexpr size_t kContextOptionsV1Size = offsetof(sattn_context_options, backend) + sizeof(int32_t);
// Version 2 appended the allocator, version 3 the CPU kernel.
constexpr size_t kContextOptionsV2Size =
    offsetof(sattn_context_options, alloc_user) + sizeof(void*);
constexpr size_t kContextOptionsV3Size =
    offsetof(sattn_context_options, cpu_kernel) + sizeof(int32_t);
// Version 4 appended the parallel runner.
constexpr size_t kContextOptionsV4Size =
    offsetof(sattn_context_options, runner_data) + sizeof(void*);
constexpr size_t kContextInfoV1Size =
    offsetof(sattn_context_info, cuda_availability) + sizeof(const char*);
constexpr int kMaxThreads = 4096;

// The backend asked for: STREAMATTN_BACKEND when set, else options->backend. `source` names
// where the choice came from, for messages.
Status RequestedBackend(int32_t option, int32_t* backend, const char** source) {
  *backend = option;
  *source = "options->backend";
  const char* env = std::getenv("STREAMATTN_BACKEND");
  if (env == nullptr || env[0] == '\0') return Status();
  if (std::strcmp(env, "auto") == 0) {
    *backend = SATTN_BACKEND_AUTO;
  } else if (std::strcmp(env, "cpu") == 0) {
    *backend = SATTN_BACKEND_CPU;
  } else if (std::strcmp(env, "cuda") == 0) {
    *backend = SATTN_BACKEND_CUDA;
  } else {
    return InvalidArgument("environment: STREAMATTN_BACKEND=%.64s must be cpu, cuda or auto", env);
  }
  *source = "STREAMATTN_BACKEND";
  return Status();
}

// The sattn_cpu_kernel values by the names STREAMATTN_CPU_KERNEL and the messages use; for each
// native kernel, the dtype it takes and what a CPU needs to run it.
struct CpuKernelName {
  int32_t kernel;
  const char* name;
  DType dtype;        // native kernels: q, k and v of this dtype take it
  const char* needs;  // native kernels: why a CPU may not run it
};
constexpr CpuKernelName kCpuKernels[] = {
    {SATTN_CPU_KERNEL_AUTO, "auto", DType::kF32, nullptr},
    {SATTN_CPU_KERNEL_F32_FMA, "f32-fma", DType::kF32, nullptr},
    {SATTN_CPU_KERNEL_AVX512_BF16, "avx512-bf16", DType::kBF16, "AVX512_BF16 and the AVX3 target"},
    {SATTN_CPU_KERNEL_NEON_BF16, "neon-bf16", DType::kBF16,
     "64-bit Arm Linux with FEAT_BF16 (HWCAP2_BF16), a NEON or SVE target and a GCC 12 build"},
    {SATTN_CPU_KERNEL_NEON_FP16, "neon-fp16", DType::kF16,
     "64-bit Arm Linux with FEAT_FHM (HWCAP_ASIMDFHM), a NEON or SVE target and a GCC 12 build"},
};

// The CPU kernel asked for: STREAMATTN_CPU_KERNEL when set, else options->cpu_kernel; then
// refused, naming it, when this CPU (at the SIMD target chosen now) cannot run it.
Status RequestedCpuKernel(int32_t option, int32_t* kernel) {
  *kernel = option;
  const char* source = "options->cpu_kernel";
  const char* env = std::getenv("STREAMATTN_CPU_KERNEL");
  if (env != nullptr && env[0] != '\0') {
    source = "STREAMATTN_CPU_KERNEL";
    const CpuKernelName* named = nullptr;
    for (const CpuKernelName& k : kCpuKernels) {
      if (std::strcmp(env, k.name) == 0) named = &k;
    }
    if (named == nullptr) {
      return InvalidArgument(
          "environment: STREAMATTN_CPU_KERNEL=%.64s must be auto, f32-fma, avx512-bf16, "
          "neon-bf16 or neon-fp16",
          env);
    }
    *kernel = named->kernel;
  }
  const CpuKernelName* chosen = nullptr;
  for (const CpuKernelName& k : kCpuKernels) {
    if (k.kernel == *kernel) chosen = &k;
  }
  if (chosen == nullptr) {
    return InvalidArgument(
        "options->cpu_kernel=%d is not a sattn_cpu_kernel (auto=0, f32-fma=1, avx512-bf16=2, "
        "neon-bf16=3, neon-fp16=4)",
        *kernel);
  }
  if (chosen->needs != nullptr &&
      std::strcmp(PrefillTileKernelName(chosen->dtype, *kernel), chosen->name) != 0) {
    return Unsupported("%s=%s: this CPU cannot run it at its SIMD target %s (it needs %s)", source,
                       chosen->name, ChosenSimdTargetName(), chosen->needs);
  }
  return Status();
}

const char* BackendName(int32_t backend) {
  return backend == SATTN_BACKEND_CPU ? "cpu" : backend == SATTN_BACKEND_CUDA ? "cuda" : "auto";
}

// Contexts live in memory from their own allocator: destroyed in place, then freed through a
// copy of it.
void DestroyContext(sattn_context* ctx) {
  const Allocator alloc = ctx->allocator;
  ctx->~sattn_context();
  alloc.Free(ctx);
}

struct ContextDeleter {
  void operator()(sattn_context* ctx) const { DestroyContext(ctx); }
};

Status CreateContext(const sattn_context_options* user, sattn_context** out) {
  if (out == nullptr) return InvalidArgument("ctx (the output pointer) must not be NULL");
  *out = nullptr;
  sattn_context_options options{};
  SATTN_RETURN_IF_ERROR(ReadOptions(user, "options", kContextOptionsV1Size, &options));
  if (user != nullptr &&
      ((user->struct_size > kContextOptionsV1Size && user->struct_size < kContextOptionsV2Size) ||
       (user->struct_size > kContextOptionsV2Size && user->struct_size < kContextOptionsV3Size) ||
       CutsField(user->struct_size, offsetof(sattn_context_options, runner), sizeof(void*)) ||
       CutsField(user->struct_size, offsetof(sattn_context_options, runner_data), sizeof(void*)))) {
    // Not the size of any version: it would copy part of a field.
    return InvalidArgument(
        "options->struct_size=%u is not the size of a version (%zu, %zu, %zu, or at least %zu: "
        "set it to sizeof(sattn_context_options))",
        user->struct_size, kContextOptionsV1Size, kContextOptionsV2Size, kContextOptionsV3Size,
        kContextOptionsV4Size);
  }
  if (options.num_threads < 0 || options.num_threads > kMaxThreads) {
    return InvalidArgument("options->num_threads=%d must be in [0, %d] (0 = all cores)",
                           options.num_threads, kMaxThreads);
  }
  if (options.backend != SATTN_BACKEND_AUTO && options.backend != SATTN_BACKEND_CPU &&
      options.backend != SATTN_BACKEND_CUDA) {
    return InvalidArgument("options->backend=%d is not a sattn_backend (auto=0, cpu=1, cuda=2)",
                           options.backend);
  }
  if ((options.alloc_fn == nullptr) != (options.free_fn == nullptr)) {
    return InvalidArgument(
        "options->alloc_fn (%s) and options->free_fn (%s) must both be set or "
        "both be NULL",
        options.alloc_fn != nullptr ? "set" : "NULL", options.free_fn != nullptr ? "set" : "NULL");
  }
  if (options.runner == nullptr && options.runner_data != nullptr) {
    return InvalidArgument(
        "options->runner is NULL but options->runner_data is set: runner_data is only passed to "
        "a runner (set both, or leave runner_data NULL)");
  }
  int32_t requested = SATTN_BACKEND_AUTO;
  const char* source = "";
  SATTN_RETURN_IF_ERROR(RequestedBackend(options.backend, &requested, &source));
  SATTN_RETURN_IF_ERROR(RequestedCpuKernel(options.cpu_kernel, &options.cpu_kernel));
  // An explicit cpu never loads the plugin (a way to keep CUDA out of the process entirely).
  const CudaPluginStatus* cuda = requested == SATTN_BACKEND_CPU ? nullptr : &FindCudaPlugin();
  if (requested == SATTN_BACKEND_CUDA && cuda->plugin == nullptr) {
    return BackendUnavailable("%s=cuda: the CUDA backend is unavailable: %s", source,
                              cuda->reason.c_str());
  }
  if (options.runner != nullptr) {
    // The runner's threads are the application's: as many slots as it asks for, even beyond
    // the cores (its pool may be larger).
    if (options.num_threads == 0) {
      options.num_threads = std::min(ThreadPool::AvailableCpus(), kMaxThreads);
    }
  } else {
    // oneTBB will not run more threads than the process may use (and a build without it runs
    // one), so a larger request is capped (and reported as such by sattn_context_get_info)
    // rather than silently not honoured.
    const int available = ThreadPool::DefaultNumThreads();
    if (options.num_threads == 0 || options.num_threads > available) {
      options.num_threads = available;
    }
  }

  const Allocator alloc(options.alloc_fn, options.free_fn, options.alloc_user);
  void* memory = alloc.Allocate(sizeof(sattn_context), alignof(sattn_context));
  if (memory == nullptr) {
    char why[128];
    alloc.DescribeFailure(sizeof(sattn_context), alignof(sattn_context), why, sizeof(why));
    return OutOfMemory("creating the context: %s", why);
  }
  // From here an AllocationFailure unwinds through ctx's deleter: nothing leaks.
  std::unique_ptr<sattn_context, ContextDeleter> ctx(new (memory) sattn_context(alloc));
  ctx->options = options;
  ctx->pool = options.runner != nullptr
                  ? ThreadPool::CreateWithRunner(options.num_threads, options.runner,
                                                 options.runner_data, alloc)
                  : ThreadPool::Create(options.num_threads, alloc);
  ctx->cpu =
      MakeUnique<CpuBackend>(alloc, ctx->pool.get(), &ctx->scratch, alloc, options.cpu_kernel);
  ctx->f32_kernel = PrefillTileKernelName(DType::kF32, options.cpu_kernel);
  ctx->f16_kernel = PrefillTileKernelName(DType::kF16, options.cpu_kernel);
  ctx->bf16_kernel = PrefillTileKernelName(DType::kBF16, options.cpu_kernel);
  ctx->active = ctx->cpu.get();
  if (cuda == nullptr) {
    std::snprintf(ctx->backend_reason, sizeof(ctx->backend_reason), "cpu: requested by %s", source);
    std::snprintf(ctx->cuda_availability, sizeof(ctx->cuda_availability),
                  "not checked: the cpu backend was requested by %s", source);
  } else if (cuda->plugin == nullptr) {
    std::snprintf(ctx->backend_reason, sizeof(ctx->backend_reason),
                  "cpu: %s=auto, and CUDA is unavailable: %s", source, cuda->reason.c_str());
    std::snprintf(ctx->cuda_availability, sizeof(ctx->cuda_availability), "unavailable: %s",
                  cuda->reason.c_str());
  } else {
    ctx->cuda = MakeUnique<CudaBackend>(alloc, cuda->plugin, &ctx->cuda_stream, alloc);
    ctx->active = ctx->cuda.get();
    std::snprintf(ctx->backend_reason, sizeof(ctx->backend_reason),
                  "cuda: %s=%s, %s; host tensors run on the cpu", source, BackendName(requested),
                  cuda->reason.c_str());
    std::snprintf(ctx->cuda_availability, sizeof(ctx->cuda_availability), "available: %s",
                  cuda->reason.c_str());
  }
  ctx->simd_target = ChosenSimdTargetName();
  CompiledSimdTargetNames(ctx->compiled_targets, sizeof(ctx->compiled_targets));
  *out = ctx.release();
  return Status();
}

Status GetInfo(const sattn_context* ctx, sattn_context_info* info) {
  if (ctx == nullptr) return InvalidArgument("ctx must not be NULL");
  if (info == nullptr) return InvalidArgument("info must not be NULL");
  if (info->struct_size < kContextInfoV1Size) {
    return InvalidArgument(
        "info->struct_size=%u is smaller than the smallest known size %zu "
        "(set it to sizeof(sattn_context_info))",
        info->struct_size, kContextInfoV1Size);
  }
  sattn_context_info filled{};
  filled.struct_size = info->struct_size;
  filled.backend = ctx->active->kind();
  filled.num_threads = ctx->pool->NumWorkers();
  filled.backend_reason = ctx->backend_reason;
  filled.simd_target = ctx->simd_target;
  filled.compiled_targets = ctx->compiled_targets;
  filled.cuda_availability = ctx->cuda_availability;
  filled.f32_kernel = ctx->f32_kernel;
  filled.f16_kernel = ctx->f16_kernel;
  filled.bf16_kernel = ctx->bf16_kernel;
  // Fields a newer caller knows and we do not stay as the caller set them; an older caller's
  // struct ends at its struct_size.
  std::memcpy(static_cast<void*>(info), &filled,
              std::min<size_t>(info->struct_size, sizeof(filled)));
  return Status();
}

}  // namespace
}  // namespace streamattn

extern "C" {

SATTN_API sattn_tensor sattn_tensor_contiguous(void* data, sattn_dtype dtype, int32_t ndim,
                                               const int64_t* shape) {
  sattn_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.device = SATTN_DEVICE_CPU;
  t.ndim = ndim;
  if (shape == nullptr || ndim < 1 || ndim > SATTN_MAX_NDIM) return t;
  int64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    if (shape[i] > 0 && __builtin_mul_overflow(stride, shape[i], &stride)) stride = 0;
  }
  return t;
}

SATTN_API sattn_status sattn_context_create(const sattn_context_options* options,
                                            sattn_context** ctx) {
  return streamattn::RunGuarded([&] { return streamattn::CreateContext(options, ctx); });
}

SATTN_API sattn_status sattn_context_destroy(sattn_context* ctx) {
  return streamattn::RunGuarded([&] {
    if (ctx != nullptr) streamattn::DestroyContext(ctx);
    return streamattn::Status();
  });
}

SATTN_API sattn_status sattn_context_get_info(const sattn_context* ctx, sattn_context_info* info) {
  return streamattn::RunGuarded([&] { return streamattn::GetInfo(ctx, info); });
}

SATTN_API sattn_status sattn_context_set_cuda_stream(sattn_context* ctx, void* stream) {
  return streamattn::RunGuarded([&] {
    if (ctx == nullptr) return streamattn::InvalidArgument("ctx must not be NULL");
    const std::lock_guard<std::mutex> hold(ctx->call_mutex);
    if (ctx->cuda == nullptr) {
      return streamattn::BackendUnavailable(
          "sattn_context_set_cuda_stream: this context runs on the cpu backend (%s)",
          ctx->backend_reason);
    }
    ctx->cuda_stream = stream;
    return streamattn::Status();
  });
}

}  // extern "C"
