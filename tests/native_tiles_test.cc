// The native prefill tile kernels' micro-kernels against a scalar model of their instruction's
// arithmetic, on every edge size: AVX512_BF16's vdpbf16ps in the scores (Bf16ScoreBlock) and the
// P.V (Bf16PVBlock) of prefill/avx512_bf16_tiles-inl.h. The model follows the instruction as
// documented: per f32 lane, acc += a[2i+1] * b[2i+1], then acc += a[2i] * b[2i], each product
// exact and each sum rounded to nearest even, subnormal bf16 inputs counted as zero and
// subnormal results flushed to zero. A kernel this host or target cannot run is reported as
// skipped, naming it, never as passed.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "native_tiles_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "compiled_target-inl.h"
#include "cpu/prefill/avx512_bf16_tiles-inl.h"
#include "core/dtype.h"
#include "hwy/tests/hwy_gtest.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// A float with its subnormals flushed to (signed) zero.
float FlushSubnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

// One lane of vdpbf16ps: acc plus the two products of the bf16 pairs a and b (low half: the
// even element).
float DotPairModel(float acc, uint32_t a, uint32_t b) {
  auto value = [](uint32_t bits) { return FlushSubnormal(BF16ToF32(static_cast<uint16_t>(bits))); };
  volatile float product_odd = value(a >> 16) * value(b >> 16);  // exact: 8-bit significands
  float t = FlushSubnormal(acc + product_odd);
  volatile float product_even = value(a & 0xFFFF) * value(b & 0xFFFF);
  return FlushSubnormal(t + product_even);
}

// bf16 bits of a random value: mostly normal numbers of either sign around 1, some zeros and
// subnormals (which the instruction reads as zero).
uint16_t RandomBf16(std::mt19937& rng) {
  const uint32_t r = rng();
  if (r % 64 == 0) return static_cast<uint16_t>((r >> 8) & 0x807F);  // zero or subnormal
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  return F32ToBF16(u(rng));
}

uint32_t RandomPair(std::mt19937& rng) {
  return static_cast<uint32_t>(RandomBf16(rng)) | static_cast<uint32_t>(RandomBf16(rng)) << 16;
}

#if SATTN_AVX512_BF16_TILES

template <size_t NV>
void CheckScoreBlock(std::mt19937& rng, size_t pairs) {
  const size_t ldk = 2 * pairs + 6, ldq = 16 * NV + 16, ldc = 16 * NV + 8;
  std::vector<uint16_t> k(8 * ldk);
  for (uint16_t& x : k) x = RandomBf16(rng);
  std::vector<uint32_t> q(pairs * ldq);
  for (uint32_t& x : q) x = RandomPair(rng);
  std::vector<float> c(8 * ldc, NAN);
  const float scale = 0.37f;
  Bf16ScoreBlock<NV>(k.data(), ldk, q.data(), ldq, pairs, scale, c.data(), ldc);
  for (size_t m = 0; m < 8; ++m) {
    for (size_t r = 0; r < 16 * NV; ++r) {
      float acc = 0.0f;
      for (size_t j = 0; j < pairs; ++j) {
        const uint32_t key_pair = k[m * ldk + 2 * j] | uint32_t{k[m * ldk + 2 * j + 1]} << 16;
        acc = DotPairModel(acc, q[j * ldq + r], key_pair);
      }
      ASSERT_EQ(c[m * ldc + r], acc * scale)
          << "scores NV " << NV << " pairs " << pairs << " key " << m << " row " << r;
    }
    for (size_t r = 16 * NV; r < ldc; ++r) ASSERT_TRUE(std::isnan(c[m * ldc + r])) << "past C";
  }
}

template <size_t MR, size_t NV>
void CheckPVBlock(std::mt19937& rng, size_t pairs, bool with_alpha) {
  const size_t ldp = MR + 3, ldv = 16 * NV + 16, ldo = 16 * NV + 16;
  std::vector<uint32_t> p(pairs * ldp), v(pairs * ldv);
  for (uint32_t& x : p) x = RandomPair(rng);
  for (uint32_t& x : v) x = RandomPair(rng);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> o(MR * ldo), alpha(MR);
  for (float& x : o) x = u(rng);
  for (float& x : alpha) x = u(rng);
  const std::vector<float> o_in = o;
  Bf16PVBlock<MR, NV>(p.data(), ldp, v.data(), ldv, pairs, o.data(), ldo,
                      with_alpha ? alpha.data() : nullptr);
  for (size_t r = 0; r < MR; ++r) {
    for (size_t x = 0; x < ldo; ++x) {
      if (x >= 16 * NV) {
        ASSERT_EQ(o[r * ldo + x], o_in[r * ldo + x]) << "wrote past the block";
        continue;
      }
      float acc = with_alpha ? o_in[r * ldo + x] * alpha[r] : o_in[r * ldo + x];
      for (size_t j = 0; j < pairs; ++j) acc = DotPairModel(acc, v[j * ldv + x], p[j * ldp + r]);
      ASSERT_EQ(o[r * ldo + x], acc) << "P.V MR " << MR << " NV " << NV << " pairs " << pairs
                                     << " row " << r << " column " << x;
    }
  }
}

template <size_t MR>
void CheckPVRows(std::mt19937& rng, size_t pairs) {
  for (bool with_alpha : {false, true}) {
    CheckPVBlock<MR, 1>(rng, pairs, with_alpha);
    CheckPVBlock<MR, 2>(rng, pairs, with_alpha);
    CheckPVBlock<MR, 3>(rng, pairs, with_alpha);
    CheckPVBlock<MR, 4>(rng, pairs, with_alpha);
  }
}

void TestAvx512Bf16BlocksMatchTheInstruction() {
  if (!Avx512Bf16Supported()) {
    GTEST_SKIP() << "not run: avx512-bf16 (this CPU has no AVX512_BF16)";
  }
  std::mt19937 rng(12);
  for (size_t pairs : {1, 2, 3, 8, 64}) {
    CheckScoreBlock<1>(rng, pairs);
    CheckScoreBlock<2>(rng, pairs);
    CheckScoreBlock<3>(rng, pairs);
    CheckPVRows<1>(rng, pairs);
    CheckPVRows<2>(rng, pairs);
    CheckPVRows<3>(rng, pairs);
    CheckPVRows<4>(rng, pairs);
    CheckPVRows<5>(rng, pairs);
    CheckPVRows<6>(rng, pairs);
  }
}

#else

void TestAvx512Bf16BlocksMatchTheInstruction() {
  GTEST_SKIP() << "not run: avx512-bf16 (compiled for the AVX3 targets only)";
}

#endif  // SATTN_AVX512_BF16_TILES

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

class NativeTilesTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(NativeTilesTest);
SATTN_TEST_RUNS_ON_ITS_TARGET(NativeTilesTest)
HWY_EXPORT_AND_TEST_P(NativeTilesTest, TestAvx512Bf16BlocksMatchTheInstruction);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
