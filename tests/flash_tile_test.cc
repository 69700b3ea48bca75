// The flash forward's tile kernels (cpu/flash_tile-inl.h) on every compiled target, against
// plain loops: dot-product scores for any row and key count, and O += P V for any row count;
// and the same kernels reading a cache's rows in place (kv_rows-inl.h) against the converted
// rows: the same bytes, whatever the dtype; the packed online softmax against the panel; that
// the rows' prefetches request every line of a row wherever it starts; and the tile shapes.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "flash_tile_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/flash_tile-inl.h"
#include "cpu/flash_softmax-inl.h"
#include "core/dtype.h"
#include "cpu/kv_rows-inl.h"
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
template <typename T>
struct CacheRowsFixture {
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

template <typename T>
void CheckCacheRowsMatchDenseRows() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  std::mt19937 rng(7);
  const size_t dim = RoundUp(128, lanes), keys = 12, ldst = 8 + 4;
  CacheRowsFixture<T> cache(rng, keys, dim), next(rng, keys, dim);
  const DenseRows dense{cache.dense.data(), dim};
  const CacheRows<T> in_place{cache.pointers.data(), 0, next.pointers.data(), next.pointers.data()};
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
  CheckCacheRowsMatchDenseRows<float>();
  CheckCacheRowsMatchDenseRows<hwy::float16_t>();
  CheckCacheRowsMatchDenseRows<hwy::bfloat16_t>();
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

// A contiguous [batch, seq, heads, dim] view of no data: MakeFlashConfig reads only shapes,
// strides and dtypes.
Tensor ShapeOnly(DType dtype, int64_t seq, int64_t heads, int64_t dim) {
  Tensor t;
  t.dtype = dtype, t.ndim = 4;
  t.shape[1] = seq, t.shape[2] = heads, t.shape[3] = dim;
  t.strides[3] = 1, t.strides[2] = dim, t.strides[1] = heads * dim,
  t.strides[0] = seq * heads * dim;
  return t;
}

AttentionArgs ArgsOf(int64_t seq_q, int64_t heads_q, int64_t heads_kv, int64_t dim, DType kv) {
  AttentionArgs a;
  a.batch = 1, a.seq_q = seq_q, a.seq_k = 4096, a.heads_q = heads_q, a.heads_kv = heads_kv;
  a.head_dim = a.head_dim_v = dim, a.group = heads_q / heads_kv;
  a.q = ShapeOnly(DType::kF32, seq_q, heads_q, dim);
  a.k = ShapeOnly(kv, a.seq_k, heads_kv, dim), a.v = ShapeOnly(kv, a.seq_k, heads_kv, dim);
  return a;
}

// GEMM score panels are as few vectors wide as pad a work item's rows least (decoding's 16 or
// 32 rows per kv head must not pad to the prefill's 48), and decoding tiles of several kv
// heads hold at least kDecodeHeadTileBytes of K rows per head.
void TestTileShapesFitTheWork() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  for (int64_t seq_q : {1, 2, 3, 4, 5, 8, 12, 16, 200}) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{8, 8}, {32, 8}, {32, 2}, {32, 1}}) {
      const FlashConfig c = MakeFlashConfig(d, ArgsOf(seq_q, hq, hkv, 128, DType::kF16));
      const size_t rows = static_cast<size_t>(c.positions * (hq / hkv));
      ASSERT_EQ(c.panel_rows, c.panel_vectors * lanes);
      ASSERT_EQ(c.rows_pad % c.panel_rows, 0u);
      if (c.dot_scores) continue;
      size_t least = RoundUp(rows, kNvS * lanes);
      for (size_t nv = 1; nv < kNvS; ++nv) least = std::min(least, RoundUp(rows, nv * lanes));
      EXPECT_EQ(c.rows_pad, least) << rows << " rows";
      EXPECT_GE(c.panel_vectors, 1u);
      EXPECT_LE(c.panel_vectors, kNvS);
    }
  }
  // The prefill's items of 192 rows keep the widest panels.
  EXPECT_EQ(MakeFlashConfig(d, ArgsOf(4096, 32, 8, 128, DType::kF16)).panel_vectors, kNvS);
  for (DType kv : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (int64_t dim : {64, 128, 256}) {
      const FlashConfig c = MakeFlashConfig(d, ArgsOf(1, 32, 8, dim, kv));
      ASSERT_EQ(c.heads, 8);
      const size_t row_bytes = c.dim_pad * static_cast<size_t>(DTypeSize(kv));
      EXPECT_GE(c.keys_per_tile * row_bytes, std::min(kDecodeHeadTileBytes, 16 * row_bytes));
      EXPECT_LE(c.keys_per_tile, kKeysPerTile);
      EXPECT_EQ(c.keys_per_tile % 8, 0u);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

class FlashTileTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(FlashTileTest);
HWY_EXPORT_AND_TEST_P(FlashTileTest, TestDotScores);
HWY_EXPORT_AND_TEST_P(FlashTileTest, TestAccumulatePV);
HWY_EXPORT_AND_TEST_P(FlashTileTest, TestCacheRowsMatchDenseRows);
HWY_EXPORT_AND_TEST_P(FlashTileTest, TestOnlineSoftmaxPackedMatchesPanel);
HWY_EXPORT_AND_TEST_P(FlashTileTest, TestUncoveredTailCompletesTheRowsLines);
HWY_EXPORT_AND_TEST_P(FlashTileTest, TestTileShapesFitTheWork);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
