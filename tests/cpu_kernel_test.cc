// The CPU's prefill tile kernels through the API, on every SIMD target: each native kernel
// (where this CPU and target run it: avx512-bf16, neon-bf16, neon-fp16) against the oracle with
// every option, at its documented tolerance, and at the f32 kernel's with f32_pv; contexts that
// force a kernel (cpu_kernel), what they report, and a clear refusal of a kernel the CPU or
// target cannot run; and that the ARM CI's emulated cores run the Arm kernels they have.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attention_case.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "per_target_api_test.h"
#include "streamattn/streamattn.h"

// The Arm kernels are built where the library is: aarch64 Linux with GCC 12 or later
// (lib/cpu/prefill/native_tiles-inl.h says why).
#if defined(__aarch64__) && defined(__linux__) && !defined(__clang__) && __GNUC__ >= 12
#define SATTN_TEST_ARM_KERNELS 1
#include <sys/auxv.h>
#else
#define SATTN_TEST_ARM_KERNELS 0
#endif

namespace streamattn {
namespace testing_util {
namespace {

class CpuKernelTest : public PerTargetApiTest {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(CpuKernelTest);

// Whether the CPU has AVX512_BF16 and the target under test is AVX-512.
bool Avx512Bf16Runs(int64_t target) {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16") && (target == HWY_AVX3 || target == HWY_AVX3_DL);
#else
  (void)target;
  return false;
#endif
}

// Whether Linux reports the Arm feature (HWCAP2_BF16: bit 14 of AT_HWCAP2; HWCAP_ASIMDFHM:
// bit 23 of AT_HWCAP) and the target under test has whole vectors (every aarch64 target).
bool ArmRuns(int64_t target, unsigned long type, unsigned long bit) {
#if SATTN_TEST_ARM_KERNELS
  return (getauxval(type) & bit) != 0 && target != HWY_SCALAR && target != HWY_EMU128;
#else
  (void)target, (void)type, (void)bit;
  return false;
#endif
}

#if SATTN_TEST_ARM_KERNELS
bool NeonBf16Runs(int64_t target) { return ArmRuns(target, AT_HWCAP2, 1UL << 14); }
bool NeonFp16Runs(int64_t target) { return ArmRuns(target, AT_HWCAP, 1UL << 23); }
#else
bool NeonBf16Runs(int64_t target) { return ArmRuns(target, 0, 0); }
bool NeonFp16Runs(int64_t target) { return ArmRuns(target, 0, 0); }
#endif

struct NativeKernel {
  int32_t kernel;
  const char* name;
  sattn_dtype dtype;
  bool (*runs)(int64_t target);
};
const NativeKernel kNativeKernels[] = {
    {SATTN_CPU_KERNEL_AVX512_BF16, "avx512-bf16", SATTN_DTYPE_BF16, Avx512Bf16Runs},
    {SATTN_CPU_KERNEL_NEON_BF16, "neon-bf16", SATTN_DTYPE_BF16, NeonBf16Runs},
    {SATTN_CPU_KERNEL_NEON_FP16, "neon-fp16", SATTN_DTYPE_F16, NeonFp16Runs},
};

// Whether some native kernel for `dtype` runs at `target` on this CPU.
bool NativeKernelRuns(sattn_dtype dtype, int64_t target) {
  for (const NativeKernel& k : kNativeKernels) {
    if (k.dtype == dtype && k.runs(target)) return true;
  }
  return false;
}

// A context forcing `kernel`, or the status of trying.
sattn_status CreateWithKernel(int32_t kernel, sattn_context** ctx) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.backend = SATTN_BACKEND_CPU;
  options.cpu_kernel = kernel;
  return sattn_context_create(&options, ctx);
}

const char* KernelOf(const sattn_context_info& info, sattn_dtype dtype) {
  return dtype == SATTN_DTYPE_BF16  ? info.bf16_kernel
         : dtype == SATTN_DTYPE_F16 ? info.f16_kernel
                                    : info.f32_kernel;
}

// Two work items per head (384 rows, then a tail), an odd last tile of keys; emulated targets
// (STREAMATTN_TEST_SMALL) keep both with one sequence and fewer keys.
AttentionCase Prefill(sattn_dtype dtype) {
  const bool small = std::getenv("STREAMATTN_TEST_SMALL") != nullptr;
  AttentionCase c;
  c.batch = small ? 1 : 2, c.seq_q = small ? 200 : 250, c.seq_k = small ? 251 : 331;
  c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64;
  c.q_dtype = c.kv_dtype = dtype;
  return c;
}

// Prefill of q, k and v of `dtype` with and without f32_pv: head dims of no whole vector,
// windows, softcap, sinks, ALiBi, masks, paged caches, and decoding 16 rows per kv head.
void ExpectEveryOptionMatchesTheOracle(sattn_dtype dtype, int64_t target) {
  if (std::getenv("STREAMATTN_CPU_KERNEL") == nullptr) {
    EXPECT_EQ(NativePrefill(dtype), NativeKernelRuns(dtype, target))
        << "auto picks the native kernel";
  }
  ScopedContext ctx;
  for (bool f32_pv : {false, true}) {
    AttentionCase c = Prefill(dtype);
    c.f32_pv = f32_pv;
    ExpectMatchesOracle(ctx.get(), c);
    c.causal = true, c.head_dim = 40, c.head_dim_v = 72;  // head dims of no whole vector
    ExpectMatchesOracle(ctx.get(), c);
    c.has_window = true, c.window_left = 33, c.softcap = 20.0f, c.sinks = true;
    ExpectMatchesOracle(ctx.get(), c);
    c = Prefill(dtype);
    c.f32_pv = f32_pv, c.head_dim = 36,
    c.head_dim_v = 20;  // 18 pairs on 128-bit targets: a tail of 2
    c.alibi = true, c.mask = true, c.mask_heads = 4, c.mask_hide_fraction = 0.3;
    ExpectMatchesOracle(ctx.get(), c);
    c = Prefill(dtype);
    c.f32_pv = f32_pv, c.batch = 2, c.seq_q = 24, c.heads_q = 32, c.heads_kv = 2;
    c.page_size = 16, c.seq_k = 240, c.seqused_k = {240, 97}, c.out_dtype = dtype;
    ExpectMatchesOracle(ctx.get(), c);  // decoding 16 rows per kv head: the GEMM tiles
  }
}

TEST_P(CpuKernelTest, Bf16PrefillMatchesTheOracleWithEveryOption) {
  ExpectEveryOptionMatchesTheOracle(SATTN_DTYPE_BF16, GetParam());
}

TEST_P(CpuKernelTest, F16PrefillMatchesTheOracleWithEveryOption) {
  ExpectEveryOptionMatchesTheOracle(SATTN_DTYPE_F16, GetParam());
}

TEST_P(CpuKernelTest, ForcedKernelsRunAndReportThemselves) {
  if (std::getenv("STREAMATTN_CPU_KERNEL") != nullptr) GTEST_SKIP() << "STREAMATTN_CPU_KERNEL set";
  sattn_context* f32 = nullptr;
  ASSERT_EQ(CreateWithKernel(SATTN_CPU_KERNEL_F32_FMA, &f32), SATTN_OK) << sattn_last_error();
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(sattn_context_get_info(f32, &info), SATTN_OK);
  EXPECT_STREQ(info.bf16_kernel, "f32-fma");
  EXPECT_STREQ(info.f16_kernel, "f32-fma");

  std::vector<std::string> not_run;
  for (const NativeKernel& k : kNativeKernels) {
    SCOPED_TRACE(k.name);
    sattn_context* native = nullptr;
    const sattn_status status = CreateWithKernel(k.kernel, &native);
    if (!k.runs(GetParam())) {
      EXPECT_EQ(status, SATTN_ERR_UNSUPPORTED);
      EXPECT_NE(std::string(sattn_last_error()).find(k.name), std::string::npos)
          << sattn_last_error();
      EXPECT_EQ(native, nullptr);
      not_run.push_back(k.name);
      continue;
    }
    ASSERT_EQ(status, SATTN_OK) << sattn_last_error();
    ASSERT_EQ(sattn_context_get_info(native, &info), SATTN_OK);
    for (sattn_dtype dtype : {SATTN_DTYPE_F32, SATTN_DTYPE_F16, SATTN_DTYPE_BF16}) {
      EXPECT_STREQ(KernelOf(info, dtype), dtype == k.dtype ? k.name : "f32-fma");
    }
    const AttentionCase c = Prefill(k.dtype);
    AttentionCall forced(c), native_call(c);
    ASSERT_EQ(forced.Run(f32), SATTN_OK) << sattn_last_error();
    ExpectMatchesOracle(f32, c);
    ASSERT_EQ(native_call.Run(native), SATTN_OK) << sattn_last_error();
    EXPECT_NE(native_call.out.bytes(), forced.out.bytes()) << "the two kernels round differently";
    ExpectMatchesOracle(native, c);
    EXPECT_EQ(sattn_context_destroy(native), SATTN_OK);
  }
  EXPECT_EQ(sattn_context_destroy(f32), SATTN_OK);
  if (!not_run.empty()) {
    std::string names;
    for (const std::string& n : not_run) names += " " + n;
    std::printf("native CPU kernels this CPU cannot run at %s (refused, as they must be):%s\n",
                hwy::TargetName(GetParam()), names.c_str());
  }
}

// STREAMATTN_CPU_KERNEL names each kernel as sattn_cpu_kernel does, overriding the option, and
// a name it does not know is refused, naming it.
TEST_P(CpuKernelTest, TheEnvironmentForcesKernelsByName) {
  if (std::getenv("STREAMATTN_CPU_KERNEL") != nullptr) GTEST_SKIP() << "STREAMATTN_CPU_KERNEL set";
  sattn_context* ctx = nullptr;
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(setenv("STREAMATTN_CPU_KERNEL", "f32-fma", 1), 0);
  ASSERT_EQ(CreateWithKernel(SATTN_CPU_KERNEL_AUTO, &ctx), SATTN_OK) << sattn_last_error();
  ASSERT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK);
  EXPECT_STREQ(info.bf16_kernel, "f32-fma");
  EXPECT_STREQ(info.f16_kernel, "f32-fma");
  EXPECT_EQ(sattn_context_destroy(ctx), SATTN_OK);
  for (const NativeKernel& k : kNativeKernels) {
    ASSERT_EQ(setenv("STREAMATTN_CPU_KERNEL", k.name, 1), 0);
    ctx = nullptr;
    const sattn_status status = CreateWithKernel(SATTN_CPU_KERNEL_F32_FMA, &ctx);
    if (!k.runs(GetParam())) {
      EXPECT_EQ(status, SATTN_ERR_UNSUPPORTED) << k.name;
      EXPECT_NE(
          std::string(sattn_last_error()).find(std::string("STREAMATTN_CPU_KERNEL=") + k.name),
          std::string::npos)
          << sattn_last_error();
      continue;
    }
    ASSERT_EQ(status, SATTN_OK) << sattn_last_error();
    ASSERT_EQ(sattn_context_get_info(ctx, &info), SATTN_OK);
    EXPECT_STREQ(KernelOf(info, k.dtype), k.name);
    EXPECT_EQ(sattn_context_destroy(ctx), SATTN_OK);
  }
  ASSERT_EQ(setenv("STREAMATTN_CPU_KERNEL", "amx-fp8", 1), 0);
  ctx = nullptr;
  EXPECT_EQ(CreateWithKernel(SATTN_CPU_KERNEL_AUTO, &ctx), SATTN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sattn_last_error()).find("STREAMATTN_CPU_KERNEL=amx-fp8"),
            std::string::npos)
      << sattn_last_error();
  EXPECT_EQ(ctx, nullptr);
  ASSERT_EQ(unsetenv("STREAMATTN_CPU_KERNEL"), 0);
}

// scripts/test-arm.sh runs the suite under qemu with STREAMATTN_QEMU_CPU naming the emulated
// core: cortex-a72 (ARMv8.0: neither BF16 nor FHM) must fall back to f32-fma, max (BF16, FHM,
// SVE2) must run the Arm kernels on every target, or the ARM stage would test only the
// fallback.
TEST_P(CpuKernelTest, ArmCiCoresRunTheKernelsTheyHave) {
  const char* core = std::getenv("STREAMATTN_QEMU_CPU");
  if (core == nullptr) GTEST_SKIP() << "not under the ARM CI's qemu (STREAMATTN_QEMU_CPU unset)";
  if (std::getenv("STREAMATTN_CPU_KERNEL") != nullptr) GTEST_SKIP() << "STREAMATTN_CPU_KERNEL set";
  ScopedContext ctx;
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(sattn_context_get_info(ctx.get(), &info), SATTN_OK) << sattn_last_error();
  if (std::strncmp(core, "max", 3) == 0) {
    EXPECT_STREQ(info.bf16_kernel, "neon-bf16") << "-cpu " << core;
    EXPECT_STREQ(info.f16_kernel, "neon-fp16") << "-cpu " << core;
  } else if (std::strcmp(core, "cortex-a72") == 0) {
    EXPECT_STREQ(info.bf16_kernel, "f32-fma") << "-cpu " << core;
    EXPECT_STREQ(info.f16_kernel, "f32-fma") << "-cpu " << core;
  } else {
    GTEST_SKIP() << "no expectation for -cpu " << core;
  }
  EXPECT_STREQ(info.f32_kernel, "f32-fma");
}

}  // namespace
}  // namespace testing_util
}  // namespace streamattn
