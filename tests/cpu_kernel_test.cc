// The CPU's prefill tile kernels through the API, on every SIMD target: the native bf16 kernel
// (where this CPU and target run it) against the oracle with every option, at its documented
// tolerance, and at the f32 kernel's with f32_pv; contexts that force a kernel (cpu_kernel),
// what they report, and a clear refusal of a kernel the CPU or target cannot run.
#include <cstdlib>
#include <string>
#include <vector>

#include "attention_case.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "per_target_api_test.h"
#include "streamattn/streamattn.h"

namespace streamattn {
namespace {

using testing_util::AttentionCall;
using testing_util::AttentionCase;
using testing_util::ExpectMatchesOracle;
using testing_util::NativeBf16Prefill;

class CpuKernelTest : public testing_util::PerTargetApiTest {};
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

// A context forcing `kernel`, or the status of trying.
sattn_status CreateWithKernel(int32_t kernel, sattn_context** ctx) {
  sattn_context_options options{};
  options.struct_size = sizeof(options);
  options.backend = SATTN_BACKEND_CPU;
  options.cpu_kernel = kernel;
  return sattn_context_create(&options, ctx);
}

AttentionCase Bf16Prefill() {
  AttentionCase c;
  c.batch = 2, c.seq_q = 150, c.seq_k = 230, c.heads_q = 4, c.heads_kv = 2, c.head_dim = 64;
  c.q_dtype = c.kv_dtype = SATTN_DTYPE_BF16;
  return c;
}

TEST_P(CpuKernelTest, Bf16PrefillMatchesTheOracleWithEveryOption) {
  if (std::getenv("STREAMATTN_CPU_KERNEL") == nullptr) {
    EXPECT_EQ(NativeBf16Prefill(), Avx512Bf16Runs(GetParam())) << "auto picks the native kernel";
  }
  testing_util::ScopedContext ctx;
  for (bool f32_pv : {false, true}) {
    AttentionCase c = Bf16Prefill();
    c.f32_pv = f32_pv;
    ExpectMatchesOracle(ctx.get(), c);
    c.causal = true, c.head_dim = 40, c.head_dim_v = 72;  // head dims of no whole vector
    ExpectMatchesOracle(ctx.get(), c);
    c.has_window = true, c.window_left = 33, c.softcap = 20.0f, c.sinks = true;
    ExpectMatchesOracle(ctx.get(), c);
    c = Bf16Prefill();
    c.f32_pv = f32_pv, c.alibi = true, c.mask = true, c.mask_heads = 4, c.mask_hide_fraction = 0.3;
    ExpectMatchesOracle(ctx.get(), c);
    c = Bf16Prefill();
    c.f32_pv = f32_pv, c.seq_q = 24, c.heads_q = 32, c.heads_kv = 2, c.page_size = 16;
    c.seq_k = 240, c.seqused_k = {240, 97}, c.out_dtype = SATTN_DTYPE_BF16;
    ExpectMatchesOracle(ctx.get(), c);  // decoding 16 rows per kv head: the GEMM tiles
  }
}

TEST_P(CpuKernelTest, ForcedKernelsRunAndReportThemselves) {
  if (std::getenv("STREAMATTN_CPU_KERNEL") != nullptr) GTEST_SKIP() << "STREAMATTN_CPU_KERNEL set";
  sattn_context* f32 = nullptr;
  ASSERT_EQ(CreateWithKernel(SATTN_CPU_KERNEL_F32_FMA, &f32), SATTN_OK) << sattn_last_error();
  sattn_context_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(sattn_context_get_info(f32, &info), SATTN_OK);
  EXPECT_STREQ(info.bf16_kernel, "f32-fma");
  const AttentionCase c = Bf16Prefill();
  AttentionCall forced(c), automatic(c);
  ASSERT_EQ(forced.Run(f32), SATTN_OK) << sattn_last_error();
  ExpectMatchesOracle(f32, c);
  EXPECT_EQ(sattn_context_destroy(f32), SATTN_OK);

  sattn_context* native = nullptr;
  const sattn_status status = CreateWithKernel(SATTN_CPU_KERNEL_AVX512_BF16, &native);
  if (!Avx512Bf16Runs(GetParam())) {
    EXPECT_EQ(status, SATTN_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(sattn_last_error()).find("avx512-bf16"), std::string::npos)
        << sattn_last_error();
    EXPECT_EQ(native, nullptr);
    return;
  }
  ASSERT_EQ(status, SATTN_OK) << sattn_last_error();
  ASSERT_EQ(sattn_context_get_info(native, &info), SATTN_OK);
  EXPECT_STREQ(info.bf16_kernel, "avx512-bf16");
  EXPECT_STREQ(info.f16_kernel, "f32-fma");
  ASSERT_EQ(automatic.Run(native), SATTN_OK) << sattn_last_error();
  EXPECT_NE(automatic.out.bytes(), forced.out.bytes()) << "the two kernels round differently";
  EXPECT_EQ(sattn_context_destroy(native), SATTN_OK);
}

}  // namespace
}  // namespace streamattn
