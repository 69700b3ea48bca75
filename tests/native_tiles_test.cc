// The native prefill tile kernels' micro-kernels against scalar models of their instructions'
// arithmetic, on every edge size (channel pairs and keys of every tail, every register block):
// - AVX512_BF16's vdpbf16ps (Bf16ScoreBlock, Bf16PVBlock, Bf16InPlacePVBlock,
//   prefill/avx512_bf16_tiles-inl.h):
//   per f32 lane acc += a[2i+1] * b[2i+1], then acc += a[2i] * b[2i], each product exact and
//   each sum rounded to nearest even, subnormal inputs read as zero, subnormal results flushed;
// - Arm's BFDOT (NeonPairScoreBlock<BfdotPairs>, NeonBf16PVBlock, prefill/neon_bf16_tiles-inl.h),
//   as the Arm ARM defines it with FPCR.EBF 0: acc = RO(acc + RO(a[2i] b[2l] + a[2i+1] b[2l+1])),
//   rounding to odd, subnormal inputs and results flushed to zero;
// - Arm's FMLAL/FMLAL2 (NeonPairScoreBlock<FmlalPairs>, NeonFp16PVBlock,
//   prefill/neon_fp16_tiles-inl.h): acc = RN(acc + a * b), the product of two halves exact,
//   subnormals kept (FPCR.FZ and FZ16 0);
// and the rounding of P for the P.V (to bf16 in pairs, to f16 in place) against core/dtype.h's
// scalar conversions. A kernel this host or target cannot run is reported as skipped, naming
// it, never as passed.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "native_tiles_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "compiled_target-inl.h"
#include "cpu/arm_features.h"
#include "cpu/prefill/avx512_bf16_tiles-inl.h"
#include "cpu/prefill/neon_bf16_tiles-inl.h"
#include "cpu/prefill/neon_fp16_tiles-inl.h"
#include "cpu/prefill/paired_tiles-inl.h"
#include "core/dtype.h"
#include "hwy/tests/hwy_gtest.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A float with its subnormals flushed to (signed) zero.
float FlushSubnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}

float Bf16Value(uint32_t bits) { return BF16ToF32(static_cast<uint16_t>(bits)); }

// One lane of vdpbf16ps: acc plus the two products of the bf16 pairs a and b (low half: the
// even element).
float Avx512DotPairModel(float acc, uint32_t a, uint32_t b) {
  auto value = [](uint32_t bits) { return FlushSubnormal(Bf16Value(bits)); };
  volatile float product_odd = value(a >> 16) * value(b >> 16);  // exact: 8-bit significands
  float t = FlushSubnormal(acc + product_odd);
  volatile float product_even = value(a & 0xFFFF) * value(b & 0xFFFF);
  return FlushSubnormal(t + product_even);
}

// a + b rounded to odd (the truncated sum, its last bit set when inexact; an overflow is
// infinite), for finite a and b: the exact error of the nearest-even sum (TwoSum) tells which
// neighbour the truncation is.
float RoundToOddSum(float a, float b) {
  volatile float s = a + b;
  if (std::isinf(s)) return s;
  volatile float b_virtual = s - a;
  volatile float a_virtual = s - b_virtual;
  const float error = (a - a_virtual) + (b - b_virtual);
  if (error == 0.0f) return s;
  uint32_t bits = FloatBits(s);
  if (std::signbit(error) != std::signbit(s)) --bits;  // |exact| < |s|: one step toward zero
  return BitsToFloat(bits | 1u);
}

// A bf16 product as BFDOT takes it: exact unless it leaves the normal f32 range (flushed to
// zero below, infinite above).
float BfdotProduct(uint32_t a, uint32_t b) {
  const double p = static_cast<double>(FlushSubnormal(Bf16Value(a & 0xFFFF))) *
                   static_cast<double>(FlushSubnormal(Bf16Value(b & 0xFFFF)));
  return FlushSubnormal(static_cast<float>(p));
}

// One lane of BFDOT (FPCR.EBF 0): acc plus the round-to-odd sum of the two products of the
// bf16 pairs a and b, rounded to odd, subnormals flushed.
float BfdotModel(float acc, uint32_t a, uint32_t b) {
  const float pair =
      FlushSubnormal(RoundToOddSum(BfdotProduct(a, b), BfdotProduct(a >> 16, b >> 16)));
  return FlushSubnormal(RoundToOddSum(FlushSubnormal(acc), pair));
}

// FMLAL then FMLAL2 on one lane: the pair's two f16 products added in order, each rounded once.
float FmlalPairModel(float acc, uint32_t a, uint32_t b) {
  auto value = [](uint32_t bits) { return F16ToF32(static_cast<uint16_t>(bits)); };
  volatile float t = acc + value(a & 0xFFFF) * value(b & 0xFFFF);  // the product is exact
  return t + value(a >> 16) * value(b >> 16);
}

// 16-bit values of a dtype, mostly normal numbers of either sign up to 2, some zeros and
// subnormals (which BFDOT and vdpbf16ps read as zero, FMLAL as they are).
uint16_t Random16(std::mt19937& rng, DType dtype) {
  const uint32_t r = rng();
  const uint32_t exponent_zero = dtype == DType::kBF16 ? 0x807F : 0x83FF;
  if (r % 64 == 0) return static_cast<uint16_t>((r >> 8) & exponent_zero);  // zero or subnormal
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  return dtype == DType::kBF16 ? F32ToBF16(u(rng)) : F32ToF16(u(rng));
}

uint32_t RandomPair(std::mt19937& rng, DType dtype) {
  return static_cast<uint32_t>(Random16(rng, dtype)) | static_cast<uint32_t>(Random16(rng, dtype))
                                                           << 16;
}

// Calls f(std::integral_constant<size_t, n>()) for n = 1..kMax.
template <size_t kMax, class F, size_t... kI>
void ForEachCount(const F& f, std::index_sequence<kI...>) {
  (f(std::integral_constant<size_t, kI + 1>()), ...);
}
template <size_t kMax, class F>
void ForEachCount(const F& f) {
  ForEachCount<kMax>(f, std::make_index_sequence<kMax>());
}

// Blocks::ScoreBlock<NV> (8 keys x NV vectors of Blocks::kRows rows) against `model`, one call
// per pair in ascending order; q holds pair j of row r where Blocks::QueryHalf puts it.
template <class Blocks, size_t NV, class Model>
void CheckScoreBlock(std::mt19937& rng, size_t pairs, const Model& model) {
  constexpr size_t kRows = Blocks::kRows * NV;
  const size_t ldk = 2 * pairs + 6, ldq = kRows + 4, ldc = kRows + 8;
  std::vector<uint16_t> k(8 * ldk);
  for (uint16_t& x : k) x = Random16(rng, Blocks::kDType);
  std::vector<uint32_t> q(pairs * ldq);
  for (uint32_t& x : q) x = RandomPair(rng, Blocks::kDType);
  std::vector<float> c(8 * ldc, NAN);
  const float scale = 0.37f;
  Blocks::template ScoreBlock<NV>(k.data(), ldk, q.data(), ldq, pairs, scale, c.data(), ldc);
  uint16_t halves[2];
  auto query_pair = [&](size_t j, size_t r) {
    for (size_t parity : {0, 1}) {
      std::memcpy(
          &halves[parity],
          reinterpret_cast<const uint16_t*>(q.data()) + 2 * j * ldq + Blocks::QueryHalf(r, parity),
          2);
    }
    return halves[0] | static_cast<uint32_t>(halves[1]) << 16;
  };
  for (size_t m = 0; m < 8; ++m) {
    for (size_t r = 0; r < kRows; ++r) {
      float acc = 0.0f;
      for (size_t j = 0; j < pairs; ++j) {
        const uint32_t key_pair = k[m * ldk + 2 * j] | uint32_t{k[m * ldk + 2 * j + 1]} << 16;
        acc = model(acc, query_pair(j, r), key_pair);
      }
      ASSERT_EQ(c[m * ldc + r], acc * scale) << Blocks::kName << " scores NV " << NV << " pairs "
                                             << pairs << " key " << m << " row " << r;
    }
    for (size_t r = kRows; r < ldc; ++r) ASSERT_TRUE(std::isnan(c[m * ldc + r])) << "past C";
  }
}

// O rows of `columns` columns, with padding columns that a P.V block must leave as they are;
// Check compares the block's result with expected(start, r, x), start being alpha O (or O)
// before the products.
struct OBlock {
  std::vector<float> o, o_in, alpha;
  size_t ldo;
  OBlock(std::mt19937& rng, size_t rows, size_t columns) : o(rows * (columns + 16)), alpha(rows) {
    ldo = columns + 16;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : o) x = u(rng);
    for (float& x : alpha) x = u(rng);
    o_in = o;
  }
  template <class Expected>
  void Check(size_t rows, size_t columns, bool with_alpha, const Expected& expected,
             const std::string& block) const {
    for (size_t r = 0; r < rows; ++r) {
      for (size_t x = 0; x < ldo; ++x) {
        if (x >= columns) {
          ASSERT_EQ(o[r * ldo + x], o_in[r * ldo + x]) << block << " wrote past the block";
          continue;
        }
        const float start = with_alpha ? o_in[r * ldo + x] * alpha[r] : o_in[r * ldo + x];
        ASSERT_EQ(o[r * ldo + x], expected(start, r, x))
            << block << " row " << r << " column " << x;
      }
    }
  }
};

// Blocks::PVBlock<MR, NV> of a bf16 dot product over `pairs` key pairs against `model`.
template <class Blocks, size_t MR, size_t NV, class Model>
void CheckPairedPVBlock(std::mt19937& rng, size_t pairs, bool with_alpha, const Model& model) {
  constexpr size_t kColumns = Blocks::kColumns * NV;
  const size_t ldp = MR + 3, ldv = kColumns + 16;  // P rows read in whole vectors: MR + 3
  std::vector<uint32_t> p(pairs * ldp), v(pairs * ldv);
  for (uint32_t& x : p) x = RandomPair(rng, DType::kBF16);
  for (uint32_t& x : v) x = RandomPair(rng, DType::kBF16);
  OBlock o(rng, MR, kColumns);
  Blocks::template PVBlock<MR, NV>(p.data(), ldp, v.data(), ldv, pairs, o.o.data(), o.ldo,
                                   with_alpha ? o.alpha.data() : nullptr);
  std::ostringstream block;
  block << Blocks::kName << " P.V MR " << MR << " NV " << NV << " pairs " << pairs;
  o.Check(
      MR, kColumns, with_alpha,
      [&](float acc, size_t r, size_t x) {
        for (size_t j = 0; j < pairs; ++j) acc = model(acc, v[j * ldv + x], p[j * ldp + r]);
        return acc;
      },
      block.str());
}

// Every score and P.V block of a bf16 dot product, on pair counts with every tail.
template <class Blocks, class Model>
void CheckPairedBf16Blocks(const Model& model) {
  std::mt19937 rng(12);
  for (size_t pairs : {1, 2, 3, 4, 5, 6, 7, 8, 64}) {
    ForEachCount<Blocks::kScoreVectors>(
        [&](auto nv) { CheckScoreBlock<Blocks, decltype(nv)::value>(rng, pairs, model); });
    for (bool with_alpha : {false, true}) {
      ForEachCount<Blocks::kPVRows>([&](auto mr) {
        ForEachCount<Blocks::kPVVectors>([&](auto nv) {
          CheckPairedPVBlock<Blocks, decltype(mr)::value, decltype(nv)::value>(rng, pairs,
                                                                               with_alpha, model);
        });
      });
    }
  }
}

// Blocks::InPlacePVBlock<MR, NV> over `keys` V rows read where they lie (ldv apart, with
// columns past the block that it must not read into its sums) against `model` on the pairs the
// repacking would write: key 2j in the low half, a missing odd key zero.
template <class Blocks, size_t MR, size_t NV, class Model>
void CheckInPlacePVBlock(std::mt19937& rng, size_t keys, bool with_alpha, const Model& model) {
  constexpr size_t kColumns = Blocks::kColumns * NV;
  const size_t pairs = (keys + 1) / 2, ldp = MR + 3, ldv = kColumns + 64;
  std::vector<uint32_t> p(pairs * ldp);
  for (uint32_t& x : p) x = RandomPair(rng, DType::kBF16);
  std::vector<uint16_t> v(keys * ldv);
  for (uint16_t& x : v) x = Random16(rng, DType::kBF16);
  OBlock o(rng, MR, kColumns);
  Blocks::template InPlacePVBlock<MR, NV>(p.data(), ldp, v.data(), ldv, keys, o.o.data(), o.ldo,
                                          with_alpha ? o.alpha.data() : nullptr);
  std::ostringstream block;
  block << Blocks::kName << " in-place P.V MR " << MR << " NV " << NV << " keys " << keys;
  o.Check(
      MR, kColumns, with_alpha,
      [&](float acc, size_t r, size_t x) {
        for (size_t j = 0; j < pairs; ++j) {
          const uint32_t high = 2 * j + 1 < keys ? v[(2 * j + 1) * ldv + x] : 0u;
          acc = model(acc, v[2 * j * ldv + x] | high << 16, p[j * ldp + r]);
        }
        return acc;
      },
      block.str());
}

#if SATTN_AVX512_BF16_TILES
void TestAvx512Bf16BlocksMatchTheInstruction() {
  if (!Avx512Bf16Supported()) {
    GTEST_SKIP() << "not run: avx512-bf16 (this CPU has no AVX512_BF16)";
  }
  CheckPairedBf16Blocks<Avx512Bf16Blocks>(Avx512DotPairModel);
  std::mt19937 rng(13);
  for (size_t keys : {1, 2, 3, 4, 5, 7, 8, 15, 64, 65}) {
    for (bool with_alpha : {false, true}) {
      ForEachCount<Avx512Bf16Blocks::kInPlacePVRows>([&](auto mr) {
        ForEachCount<Avx512Bf16Blocks::kInPlacePVVectors>([&](auto nv) {
          CheckInPlacePVBlock<Avx512Bf16Blocks, decltype(mr)::value, decltype(nv)::value>(
              rng, keys, with_alpha, Avx512DotPairModel);
        });
      });
    }
  }
}
#else
void TestAvx512Bf16BlocksMatchTheInstruction() {
  GTEST_SKIP() << "not run: avx512-bf16 (compiled for the AVX3 targets only)";
}
#endif  // SATTN_AVX512_BF16_TILES

#if SATTN_ARM_NATIVE_TARGET
// The FPCR bits that change the Arm models: FZ (24), FZ16 (19), EBF (13). Linux starts every
// process with them clear.
uint64_t Fpcr() {
  uint64_t fpcr;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
#endif

#if SATTN_NEON_BF16_TILES
void TestNeonBf16BlocksMatchTheInstruction() {
  if (!ArmHasBf16()) GTEST_SKIP() << "not run: neon-bf16 (this CPU has no BF16)";
  if ((Fpcr() >> 13) & 1) GTEST_SKIP() << "not run: neon-bf16 (FPCR.EBF set: a fused BFDOT)";
  CheckPairedBf16Blocks<NeonBf16Blocks>(BfdotModel);
}
#else
void TestNeonBf16BlocksMatchTheInstruction() {
  GTEST_SKIP() << "not run: neon-bf16 (compiled for the aarch64 targets only)";
}
#endif  // SATTN_NEON_BF16_TILES

#if SATTN_NEON_FP16_TILES
// NeonFp16PVBlock<MR, NV> over `keys` keys: O += P V in key order, one rounding per product.
template <size_t MR, size_t NV>
void CheckFp16PVBlock(std::mt19937& rng, size_t keys, bool with_alpha) {
  constexpr size_t kColumns = 4 * NV;
  const size_t ldp = MR + 9, ldv = kColumns + 6;  // P rows read 8 at a time: ldp >= 8
  std::vector<uint16_t> p(keys * ldp), v(keys * ldv);
  for (uint16_t& x : p) x = Random16(rng, DType::kF16);
  for (uint16_t& x : v) x = Random16(rng, DType::kF16);
  OBlock o(rng, MR, kColumns);
  NeonFp16PVBlock<MR, NV>(p.data(), ldp, v.data(), ldv, keys, o.o.data(), o.ldo,
                          with_alpha ? o.alpha.data() : nullptr);
  std::ostringstream block;
  block << "neon-fp16 P.V MR " << MR << " NV " << NV << " keys " << keys;
  o.Check(
      MR, kColumns, with_alpha,
      [&](float acc, size_t r, size_t x) {
        for (size_t c = 0; c < keys; ++c) {
          acc = acc + F16ToF32(v[c * ldv + x]) * F16ToF32(p[c * ldp + r]);  // the product is exact
        }
        return acc;
      },
      block.str());
}

void TestNeonFp16BlocksMatchTheInstruction() {
  if (!ArmHasFhm()) GTEST_SKIP() << "not run: neon-fp16 (this CPU has no FHM)";
  if ((Fpcr() >> 24) & 1 || (Fpcr() >> 19) & 1) {
    GTEST_SKIP() << "not run: neon-fp16 (FPCR.FZ or FZ16 set: subnormals flushed)";
  }
  std::mt19937 rng(13);
  for (size_t pairs : {1, 2, 3, 4, 5, 6, 7, 8, 64}) {
    ForEachCount<NeonFp16Blocks::kScoreVectors>([&](auto nv) {
      CheckScoreBlock<NeonFp16Blocks, decltype(nv)::value>(rng, pairs, FmlalPairModel);
    });
  }
  for (size_t keys : {1, 2, 3, 7, 8, 9, 128}) {
    for (bool with_alpha : {false, true}) {
      ForEachCount<NeonFp16Blocks::kPVRows>([&](auto mr) {
        ForEachCount<NeonFp16Blocks::kPVVectors>([&](auto nv) {
          CheckFp16PVBlock<decltype(mr)::value, decltype(nv)::value>(rng, keys, with_alpha);
        });
      });
    }
  }
}
#else
void TestNeonFp16BlocksMatchTheInstruction() {
  GTEST_SKIP() << "not run: neon-fp16 (compiled for the aarch64 targets only)";
}
#endif  // SATTN_NEON_FP16_TILES

// Probabilities as the softmax leaves them in P^T (keys x rows_pad): mostly in (0, 1], some
// exact ties between two neighbours of `dtype`, some below its normal range, zeros and ones.
std::vector<float> RandomProbabilities(std::mt19937& rng, size_t n, DType dtype) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(n);
  for (float& x : p) {
    const uint32_t r = rng() % 16;
    x = u(rng);
    if (r == 0) x = 0.0f;
    if (r == 1) x = 1.0f;
    if (r == 2) x *= dtype == DType::kF16 ? 1e-5f : 1e-39f;  // subnormal in the dtype
    if (r == 3) {  // halfway between two neighbours of the dtype
      const uint32_t low_bits = dtype == DType::kF16 ? 13 : 16;
      x = BitsToFloat((FloatBits(x) & ~((1u << low_bits) - 1)) | 1u << (low_bits - 1));
    }
  }
  return p;
}

// Calls check(plan, rows, tile, p, st) for tiles of every key tail and rows of every vector
// tail: p the probabilities of `dtype`, st the P^T buffer after round(d, plan, rows, tile, st).
template <class Round, class Check>
void ForEachRoundedTile(DType dtype, uint32_t seed, const Round& round, const Check& check) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  std::mt19937 rng(seed);
  for (size_t nb : {1, 2, 7, 8, 128}) {
    for (size_t rows : {size_t{1}, N, 3 * N - 1}) {
      AttentionPlan plan{};
      plan.rows_pad = RoundUp(rows, N) + N;
      const TileKeys tile{0, nb, RoundUp(nb, 8)};
      const std::vector<float> p = RandomProbabilities(rng, nb * plan.rows_pad, dtype);
      std::vector<float> st = p;
      round(d, plan, rows, tile, st.data());
      check(plan, rows, tile, p, st);
    }
  }
}

void TestBf16ProbabilitiesRoundToNearestEvenInPairs() {
  auto round = [](auto d, const AttentionPlan& plan, size_t rows, const TileKeys& tile, float* st) {
    PairBf16Probabilities(d, plan, rows, tile, st);
  };
  ForEachRoundedTile(DType::kBF16, 14, round,
                     [](const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                        const std::vector<float>& p, const std::vector<float>& st) {
                       const size_t R = plan.rows_pad;
                       for (size_t kp = 0; kp < (tile.nb + 1) / 2; ++kp) {
                         for (size_t r = 0; r < rows; ++r) {
                           const uint32_t word = FloatBits(st[kp * R + r]);
                           const size_t key = 2 * kp;
                           ASSERT_EQ(word & 0xFFFF, F32ToBF16(p[key * R + r])) << key << " " << r;
                           const uint32_t odd =
                               key + 1 < tile.nb ? F32ToBF16(p[(key + 1) * R + r]) : 0;
                           ASSERT_EQ(word >> 16, odd) << "key " << key + 1 << " row " << r;
                         }
                       }
                     });
}

void TestF16ProbabilitiesRoundToNearestEvenInPlace() {
#if SATTN_NEON_FP16_TILES
  auto round = [](auto d, const AttentionPlan& plan, size_t rows, const TileKeys& tile, float* st) {
    RoundF16Probabilities(d, plan, rows, tile, st);
  };
  ForEachRoundedTile(DType::kF16, 15, round,
                     [](const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                        const std::vector<float>& p, const std::vector<float>& st) {
                       const size_t R = plan.rows_pad;
                       const uint16_t* halves = reinterpret_cast<const uint16_t*>(st.data());
                       for (size_t c = 0; c < tile.nb; ++c) {
                         for (size_t r = 0; r < rows; ++r) {
                           ASSERT_EQ(halves[c * R + r], F32ToF16(p[c * R + r]))
                               << "key " << c << " row " << r << " p " << p[c * R + r];
                         }
                       }
                     });
#else
  GTEST_SKIP() << "not run: neon-fp16's rounding of P (compiled for the aarch64 targets only)";
#endif
}

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
HWY_EXPORT_AND_TEST_P(NativeTilesTest, TestNeonBf16BlocksMatchTheInstruction);
HWY_EXPORT_AND_TEST_P(NativeTilesTest, TestNeonFp16BlocksMatchTheInstruction);
HWY_EXPORT_AND_TEST_P(NativeTilesTest, TestBf16ProbabilitiesRoundToNearestEvenInPairs);
HWY_EXPORT_AND_TEST_P(NativeTilesTest, TestF16ProbabilitiesRoundToNearestEvenInPlace);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
