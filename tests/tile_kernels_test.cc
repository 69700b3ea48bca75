// The attention drivers' micro-kernels on every compiled target, against scalar models: the
// GEMM tile of both prefill products (gemm_tile-inl.h) for every register block the drivers
// use, at edge sizes; decoding's dot-product scores (decode/dot_scores-inl.h) for any row and
// key count; O += P V (pv_block-inl.h) for any row count; the same kernels reading a cache's
// rows in place (kv_rows-inl.h) against the converted rows: the same bytes, whatever the
// element type; the packed online softmax against the panel (tile_softmax-inl.h); and that the
// rows' prefetches request every line of a row wherever it starts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tile_kernels_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "compiled_target-inl.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/decode/dot_scores-inl.h"
#include "cpu/gemm_tile-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/pv_block-inl.h"
#include "cpu/tile_softmax-inl.h"
#include "core/dtype.h"
#include "hwy/tests/hwy_gtest.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

std::vector<float> RandomVector(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// GemmTile<MR, NV, kLayout, KS> against a scalar model, in the manner of XNNPACK's GEMM
// testers: the sizes and modes are set, then Test() runs the micro-kernel on random A, B and C
// with padded strides and checks C and the canaries around it.
template <size_t MR, size_t NV, ALayout kLayout, size_t KS>
class GemmTileTester {
 public:
  GemmTileTester& k(size_t k) { return k_ = k, *this; }
  GemmTileTester& scale_rows(bool on) { return scale_rows_ = on, *this; }
  GemmTileTester& add_to_c(bool on) { return add_to_c_ = on, *this; }

  template <class D>
  void Test(D d, std::mt19937& rng) const {
    const size_t N = hn::Lanes(d), width = NV * N;
    // A is MR x k: rows along k (lda >= k) or rows adjacent (lda >= MR), padding NaN so that a
    // read outside the block poisons the result.
    const size_t lda = kLayout == ALayout::kRowsAlongK ? k_ + 3 : MR + 2;
    std::vector<float> a = RandomVector(rng, (kLayout == ALayout::kRowsAlongK ? MR : k_) * lda);
    auto at = [&](size_t r, size_t kk) -> float& {
      return kLayout == ALayout::kRowsAlongK ? a[r * lda + kk] : a[kk * lda + r];
    };
    const size_t a_rows = kLayout == ALayout::kRowsAlongK ? MR : k_;
    const size_t a_used = kLayout == ALayout::kRowsAlongK ? k_ : MR;
    for (size_t i = 0; i < a_rows; ++i) std::fill(&a[i * lda + a_used], &a[i * lda] + lda, NAN);
    const size_t ldb = width + N, ldc = width + N;
    std::vector<float> b = RandomVector(rng, k_ * ldb);
    for (size_t kk = 0; kk < k_; ++kk) std::fill(&b[kk * ldb + width], &b[kk * ldb] + ldb, NAN);
    std::vector<float> c = RandomVector(rng, MR * ldc);
    for (size_t r = 0; r < MR; ++r)
      std::fill(c.begin() + r * ldc + width, c.begin() + (r + 1) * ldc, NAN);
    const std::vector<float> scale = RandomVector(rng, MR);
    std::vector<double> want(MR * width), magnitude(MR * width);
    for (size_t r = 0; r < MR; ++r) {
      for (size_t j = 0; j < width; ++j) {
        double acc = 0.0, size = 0.0;
        if (scale_rows_) {
          acc = double{c[r * ldc + j]} * scale[r];
        } else if (add_to_c_) {
          acc = c[r * ldc + j];
        }
        size = std::abs(acc);
        for (size_t kk = 0; kk < k_; ++kk) {
          const double term = double{at(r, kk)} * b[kk * ldb + j];
          acc += term, size += std::abs(term);
        }
        want[r * width + j] = acc, magnitude[r * width + j] = size;
      }
    }
    GemmTile<MR, NV, kLayout, KS>(d, a.data(), lda, DenseRows{b.data(), ldb}, k_, c.data(), ldc,
                                  scale_rows_ ? scale.data() : nullptr, add_to_c_);
    for (size_t r = 0; r < MR; ++r) {
      for (size_t j = 0; j < width; ++j) {
        ASSERT_NEAR(c[r * ldc + j], want[r * width + j], 1e-6 * (1.0 + magnitude[r * width + j]))
            << "MR " << MR << " NV " << NV << " KS " << KS << " k " << k_ << " row " << r
            << " column " << j
            << (scale_rows_ ? " scaled"
                : add_to_c_ ? " added"
                            : "");
      }
      for (size_t j = width; j < ldc; ++j) {
        ASSERT_TRUE(std::isnan(c[r * ldc + j])) << "wrote past the block, row " << r;
      }
    }
  }

 private:
  size_t k_ = 1;
  bool scale_rows_ = false, add_to_c_ = false;
};

// Every k from 1 (KS = 2's odd tail included) to past a few vectors, and head dims.
const size_t kGemmDepths[] = {1, 2, 3, 4, 7, 16, 33, 128};

// The prefill scores' blocks: kMrS keys (rows of K along head_dim) x 1..kNvS vectors of query
// rows, C written (no scale, no add).
template <size_t NV, class D>
void CheckScoreBlock(D d, std::mt19937& rng) {
  for (size_t k : kGemmDepths) {
    GemmTileTester<kMrS, NV, ALayout::kRowsAlongK, 1>().k(k).Test(d, rng);
  }
}

// The P.V blocks: MR rows of P^T (a key's rows adjacent) x NV vectors of head_dim, O scaled by
// the rows' alpha or added to, with the second accumulator set where the drivers use it.
template <size_t MR, size_t NV, class D>
void CheckPVBlock(D d, std::mt19937& rng) {
  constexpr size_t kKeySets = MR * NV < 8 ? 2 : 1;
  for (size_t k : kGemmDepths) {
    GemmTileTester<MR, NV, ALayout::kRowsAdjacent, kKeySets>().k(k).scale_rows(true).Test(d, rng);
    GemmTileTester<MR, NV, ALayout::kRowsAdjacent, kKeySets>().k(k).add_to_c(true).Test(d, rng);
    GemmTileTester<MR, NV, ALayout::kRowsAdjacent, kKeySets>().k(k).Test(d, rng);
  }
}

template <size_t MR, class D>
void CheckPVBlocksOfRows(D d, std::mt19937& rng) {
  CheckPVBlock<MR, 1>(d, rng);
  CheckPVBlock<MR, 2>(d, rng);
  if constexpr (PVVectors<MR>() >= 3) CheckPVBlock<MR, 3>(d, rng);
  if constexpr (PVVectors<MR>() >= 4) CheckPVBlock<MR, 4>(d, rng);
}

void TestGemmTileBlocks() {
  const hn::ScalableTag<float> d;
  std::mt19937 rng(4);
  CheckScoreBlock<1>(d, rng);
  CheckScoreBlock<2>(d, rng);
  CheckScoreBlock<kNvS>(d, rng);
  CheckPVBlocksOfRows<1>(d, rng);
  CheckPVBlocksOfRows<2>(d, rng);
  CheckPVBlocksOfRows<3>(d, rng);
  if constexpr (kMrP >= 4) CheckPVBlocksOfRows<4>(d, rng);
  if constexpr (kMrP >= 5) CheckPVBlocksOfRows<5>(d, rng);
  if constexpr (kMrP >= 6) CheckPVBlocksOfRows<6>(d, rng);
}

void TestDotScores() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  std::mt19937 rng(5);
  for (size_t dim_pad : {lanes, 4 * lanes, RoundUp(128, lanes)}) {
    for (size_t rows = 1; rows <= 9; ++rows) {
      for (size_t keys : {size_t{4}, size_t{12}}) {
        const size_t ldq = dim_pad, ldk = 3 * dim_pad, ldst = RoundUp(rows, 4) + 4;
        const std::vector<float> q = RandomVector(rng, rows * ldq),
                                 k = RandomVector(rng, keys * ldk);
        std::vector<float> st(keys * ldst, NAN);
        DotScores(d, q.data(), ldq, rows, DenseRows{k.data(), ldk}, keys, dim_pad, st.data(), ldst);
        for (size_t c = 0; c < keys; ++c) {
          for (size_t r = 0; r < rows; ++r) {
            double want = 0.0;
            for (size_t i = 0; i < dim_pad; ++i) want += double{q[r * ldq + i]} * k[c * ldk + i];
            ASSERT_NEAR(st[c * ldst + r], want, 1e-4)
                << "rows " << rows << " key " << c << " row " << r << " dim " << dim_pad;
          }
          for (size_t r = RoundUp(rows, 4); r < ldst; ++r) {
            ASSERT_TRUE(std::isnan(st[c * ldst + r])) << "wrote past the 4-row blocks";
          }
        }
      }
    }
  }
}

void TestAccumulatePV() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  std::mt19937 rng(6);
  for (size_t dim_v_pad : {lanes, 5 * lanes, RoundUp(96, lanes)}) {
    for (size_t rows = 1; rows <= kMrP; ++rows) {
      const size_t nb = 7, ldpt = RoundUp(kMrP, lanes) + 3, ldv = dim_v_pad + lanes;
      const std::vector<float> pt = RandomVector(rng, nb * ldpt), v = RandomVector(rng, nb * ldv);
      const std::vector<float> alpha = RandomVector(rng, kMrP);
      std::vector<float> o = RandomVector(rng, kMrP * dim_v_pad), want = o;
      for (size_t r = 0; r < rows; ++r) {
        for (size_t i = 0; i < dim_v_pad; ++i) {
          double acc = double{want[r * dim_v_pad + i]} * alpha[r];
          for (size_t c = 0; c < nb; ++c) acc += double{pt[c * ldpt + r]} * v[c * ldv + i];
          want[r * dim_v_pad + i] = static_cast<float>(acc);
        }
      }
      AccumulatePV(d, rows, dim_v_pad, pt.data(), ldpt, DenseRows{v.data(), ldv}, nb, o.data(),
                   alpha.data());
      for (size_t i = 0; i < o.size(); ++i) {
        ASSERT_NEAR(o[i], want[i], 1e-5) << "rows " << rows << " element " << i;
      }
    }
  }
}

// Rows of `dim` elements of T, `stride` apart, holding values that T represents exactly, and
// the same values as dense f32 rows; pointers[r] points at row r, out of order in memory so
// the kernels cannot assume a stride (a paged cache's rows).
template <class E>
struct CacheRowsFixture {
  using T = typename E::Stored;
  std::vector<T> storage;
  std::vector<const T*> pointers;
  std::vector<float> dense;

  CacheRowsFixture(std::mt19937& rng, size_t count, size_t dim) {
    const size_t stride = dim + 8;
    storage.resize(count * stride);
    dense.resize(count * dim);
    std::uniform_int_distribution<int> mantissa(-255, 255);
    for (size_t r = 0; r < count; ++r) {
      const size_t slot = (r * 7 + 3) % count;  // count is not a multiple of 7
      pointers.push_back(storage.data() + slot * stride);
      for (size_t i = 0; i < dim; ++i) {
        const float value = static_cast<float>(mantissa(rng)) / 256.0f;  // exact in bf16, f16
        dense[r * dim + i] = value;
        storage[slot * stride + i] = FromFloat(value);
      }
    }
  }
  static T FromFloat(float value) {
    T out;
    const DType dtype = std::is_same_v<T, float>            ? DType::kF32
                        : std::is_same_v<T, hwy::float16_t> ? DType::kF16
                                                            : DType::kBF16;
    StoreFromFloat(dtype, value, &out);
    return out;
  }
};

template <class E>
void CheckCacheRowsMatchDenseRows() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  std::mt19937 rng(7);
  const size_t dim = RoundUp(128, lanes), keys = 12, ldst = 8 + 4;
  CacheRowsFixture<E> cache(rng, keys, dim), next(rng, keys, dim);
  const DenseRows dense{cache.dense.data(), dim};
  const CacheRows<E> in_place{E{}, cache.pointers.data(), 0, next.pointers.data(),
                              next.pointers.data()};
  for (size_t rows = 1; rows <= 7; rows += 3) {
    const std::vector<float> q = RandomVector(rng, rows * dim);
    std::vector<float> want(keys * ldst, 0.0f), got(keys * ldst, 0.0f);
    DotScores(d, q.data(), dim, rows, dense, keys, dim, want.data(), ldst);
    DotScores(d, q.data(), dim, rows, in_place, keys, dim, got.data(), ldst);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << "scores, rows " << rows;
  }
  for (size_t rows = 1; rows <= kMrP; ++rows) {
    const size_t ldpt = RoundUp(kMrP, lanes);
    const std::vector<float> pt = RandomVector(rng, keys * ldpt), alpha = RandomVector(rng, kMrP);
    const std::vector<float> o = RandomVector(rng, kMrP * dim);
    std::vector<float> want = o, got = o;
    AccumulatePV(d, rows, dim, pt.data(), ldpt, dense, keys, want.data(), alpha.data());
    AccumulatePV(d, rows, dim, pt.data(), ldpt, in_place, keys, got.data(), alpha.data());
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << "P.V, rows " << rows;
  }
}

void TestCacheRowsMatchDenseRows() {
  CheckCacheRowsMatchDenseRows<F32Element>();
  CheckCacheRowsMatchDenseRows<F16Element>();
  CheckCacheRowsMatchDenseRows<BF16Element>();
}

// The packed online softmax (decoding's few rows per head, keys side by side in a vector)
// against the one-lane-per-row form on the same scores: the same maxima, rescale factors and
// probabilities, sums to rounding; from an empty state and from one a previous tile left.
void TestOnlineSoftmaxPackedMatchesPanel() {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  if ((N & (N - 1)) != 0) return;  // packing needs a power-of-two vector
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(-6.0f, 6.0f);
  for (size_t rows = 1; rows <= N && rows <= 8; rows *= 2) {
    for (size_t nb : {size_t{1}, size_t{5}, size_t{16}}) {
      for (bool empty : {true, false}) {
        std::vector<float> scores(nb * rows);
        for (float& x : scores) x = u(rng);
        std::vector<float> m(N, kNegInf), l(N, 0.0f), m_packed, l_packed;
        if (!empty) {
          for (size_t r = 0; r < rows; ++r) m[r] = u(rng), l[r] = 1.0f + std::abs(u(rng));
        }
        m_packed = m, l_packed = l;
        // One lane per row: st[c * N + r].
        std::vector<float> st(nb * N, 0.0f), alpha(N);
        for (size_t c = 0; c < nb; ++c) {
          for (size_t r = 0; r < rows; ++r) st[c * N + r] = scores[c * rows + r];
        }
        OnlineSoftmaxPanel(d, TileScoring(), st.data(), N, nb, N, m.data(), l.data(), alpha.data());
        std::vector<float> packed = scores, alpha_packed(N);
        packed.resize((nb * rows + N - 1) / N * N, 12345.0f);  // padding lanes: overwritten
        OnlineSoftmaxPacked(d, packed.data(), nb, rows, m_packed.data(), l_packed.data(),
                            alpha_packed.data());
        for (size_t r = 0; r < rows; ++r) {
          ASSERT_EQ(m[r], m_packed[r]) << "rows " << rows << " nb " << nb;
          ASSERT_EQ(alpha[r], alpha_packed[r]) << "rows " << rows << " nb " << nb;
          ASSERT_NEAR(l[r], l_packed[r], 1e-6 * l[r]) << "rows " << rows << " nb " << nb;
          for (size_t c = 0; c < nb; ++c) {
            ASSERT_EQ(st[c * N + r], packed[c * rows + r]) << "p, key " << c << " row " << r;
          }
        }
        for (size_t i = nb * rows; i < packed.size(); ++i) ASSERT_EQ(packed[i], 0.0f);
      }
    }
  }
}

// The kernels prefetch a row at row, row + 64, ... below row + bytes, plus UncoveredTail when
// not null: that must request every line the row touches, for any offset from a line, and the
// tail only when it is a line the others miss.
void TestUncoveredTailCompletesTheRowsLines() {
  alignas(64) static char buffer[1024];
  const auto line = [](const char* p) { return reinterpret_cast<uintptr_t>(p) / 64; };
  for (size_t bytes : {size_t{32}, size_t{64}, size_t{96}, size_t{128}, size_t{256}, size_t{512}}) {
    for (size_t offset = 0; offset < 64; ++offset) {
      const char* row = buffer + 64 + offset;
      std::vector<uintptr_t> requested;
      for (size_t at = 0; at < bytes; at += 64) requested.push_back(line(row + at));
      const char* tail = UncoveredTail(row, bytes);
      if (tail != nullptr) {
        EXPECT_EQ(std::count(requested.begin(), requested.end(), line(tail)), 0)
            << "a tail the other requests cover, bytes " << bytes << " offset " << offset;
        requested.push_back(line(tail));
      }
      for (const char* p = row; p < row + bytes; ++p) {
        ASSERT_EQ(std::count(requested.begin(), requested.end(), line(p)), 1)
            << "byte " << (p - row) << " of a row of " << bytes << " at offset " << offset;
      }
      if (offset == 0) EXPECT_EQ(tail, nullptr) << "a row on a line needs no tail";
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

class TileKernelsTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(TileKernelsTest);
SATTN_TEST_RUNS_ON_ITS_TARGET(TileKernelsTest)
HWY_EXPORT_AND_TEST_P(TileKernelsTest, TestGemmTileBlocks);
HWY_EXPORT_AND_TEST_P(TileKernelsTest, TestDotScores);
HWY_EXPORT_AND_TEST_P(TileKernelsTest, TestAccumulatePV);
HWY_EXPORT_AND_TEST_P(TileKernelsTest, TestCacheRowsMatchDenseRows);
HWY_EXPORT_AND_TEST_P(TileKernelsTest, TestOnlineSoftmaxPackedMatchesPanel);
HWY_EXPORT_AND_TEST_P(TileKernelsTest, TestUncoveredTailCompletesTheRowsLines);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
