// GemmTile: the register-blocked micro-kernel behind both products of the flash forward,
//   C[MR][NV * lanes] (=, or scaled +=) A[MR][K] * B[K][NV * lanes],
// with MR rows of A broadcast and NV vectors of B loaded per k step. Accumulators are named
// variables, not arrays: GCC 12 sometimes spills Vec arrays in the hot loop, and SVE vectors are
// sizeless and cannot live in arrays at all.
// Cost: MR * NV FMAs per k for NV loads and MR broadcasts (folded into the FMA on AVX-512);
// MR x NV = 6 x 4 or 8 x 3 keeps 24 of 32 registers busy (6 x 2 of 16 on AVX2), enough
// independent chains to cover two FMA ports x 4 cycles of latency. Blocks of few rows (the P.V
// of decoding: 1 to 4 rows per kv head) have too few chains for that, MR x NV < 8, and run at
// the FMA latency instead (1 x 2 on AVX2: 4 cycles per 2 FMAs); KS = 2 gives them a second set
// of accumulators for odd k, added in at the end.
#if defined(STREAMATTN_CPU_GEMM_TILE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_GEMM_TILE_INL_H_
#undef STREAMATTN_CPU_GEMM_TILE_INL_H_
#else
#define STREAMATTN_CPU_GEMM_TILE_INL_H_
#endif

#include <cstddef>

#include "cpu/kv_rows-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// How A is laid out: element (r, k) at a[r * lda + k] (kRowsAlongK: each row is contiguous
// along k, like K rows) or at a[k * lda + r] (kRowsAdjacent: the MR rows of one k are
// adjacent, like P^T).
enum class ALayout { kRowsAlongK, kRowsAdjacent };

// Vector registers the target has: it decides the register block.
constexpr size_t kVectorRegisters =
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    32;
#elif HWY_ARCH_ARM_A64 || HWY_ARCH_RVV
    32;
#else
    16;
#endif

#define SATTN_GEMM_DECLARE_ROW(r)                                                               \
  V c##r##0 = hn::Zero(d), c##r##1 = hn::Zero(d), c##r##2 = hn::Zero(d), c##r##3 = hn::Zero(d); \
  V e##r##0 = hn::Zero(d), e##r##1 = hn::Zero(d), e##r##2 = hn::Zero(d), e##r##3 = hn::Zero(d);

#define SATTN_GEMM_LOAD_ROW(r)                                                     \
  if constexpr (MR > r) {                                                          \
    const V s = hn::Set(d, row_scale[r]);                                          \
    c##r##0 = hn::Mul(hn::LoadU(d, c + r * ldc), s);                               \
    if constexpr (NV > 1) c##r##1 = hn::Mul(hn::LoadU(d, c + r * ldc + N), s);     \
    if constexpr (NV > 2) c##r##2 = hn::Mul(hn::LoadU(d, c + r * ldc + 2 * N), s); \
    if constexpr (NV > 3) c##r##3 = hn::Mul(hn::LoadU(d, c + r * ldc + 3 * N), s); \
  }

#define SATTN_GEMM_LOAD_ROW_UNSCALED(r)                                \
  if constexpr (MR > r) {                                              \
    c##r##0 = hn::LoadU(d, c + r * ldc);                               \
    if constexpr (NV > 1) c##r##1 = hn::LoadU(d, c + r * ldc + N);     \
    if constexpr (NV > 2) c##r##2 = hn::LoadU(d, c + r * ldc + 2 * N); \
    if constexpr (NV > 3) c##r##3 = hn::LoadU(d, c + r * ldc + 3 * N); \
  }

// Vectors 0.. NV - 1 of B row `row` (b.Row(k)) into b0.. b3 (the unused ones repeat b0), in
// pairs where the row type reads pairs cheaper (BRows::kPairLoads).
template <size_t NV, class D, class BRows, class V = hn::Vec<D>>
HWY_INLINE void LoadBRow(D d, const BRows& b, const decltype(b.Row(0)) row, V& b0, V& b1, V& b2,
                         V& b3) {
  const size_t N = hn::Lanes(d);
  if constexpr (BRows::kPairLoads && NV % 2 == 0) {
    b.LoadPair(d, row, 0, b0, b1);
    if constexpr (NV == 4) {
      b.LoadPair(d, row, 2 * N, b2, b3);
    } else {
      b2 = b3 = b0;
    }
  } else {
    b0 = b.Load(d, row, 0);
    b1 = NV > 1 ? b.Load(d, row, N) : b0;
    b2 = NV > 2 ? b.Load(d, row, 2 * N) : b0;
    b3 = NV > 3 ? b.Load(d, row, 3 * N) : b0;
  }
}

// Row r's FMAs for step kk into the accumulator set `acc` (c, or e for odd k under KS == 2).
#define SATTN_GEMM_FMA_ROW(acc, r)                                               \
  if constexpr (MR > r) {                                                        \
    const V ar = hn::Set(d, kLayout == ALayout::kRowsAlongK ? a##r[kk] : ak[r]); \
    acc##r##0 = hn::MulAdd(ar, b0, acc##r##0);                                   \
    if constexpr (NV > 1) acc##r##1 = hn::MulAdd(ar, b1, acc##r##1);             \
    if constexpr (NV > 2) acc##r##2 = hn::MulAdd(ar, b2, acc##r##2);             \
    if constexpr (NV > 3) acc##r##3 = hn::MulAdd(ar, b3, acc##r##3);             \
  }

// One step k = k_expr: request the next head's V row (when b carries it), load B row k, and
// its FMAs into the accumulator set `acc`.
#define SATTN_GEMM_STEP(acc, k_expr)                                      \
  {                                                                       \
    const size_t kk = (k_expr);                                           \
    const auto* HWY_RESTRICT bk = b.Row(kk);                              \
    const float* HWY_RESTRICT ak = a + kk * lda; /* kRowsAdjacent only */ \
    (void)ak;                                                             \
    if constexpr (BRows::kPrefetches) {                                   \
      if (b.next_values != nullptr) {                                     \
        RequestRowIntoL2(b.NextValue(kk), BRows::Bytes(NV* N));           \
      }                                                                   \
    }                                                                     \
    V b0, b1, b2, b3;                                                     \
    LoadBRow<NV>(d, b, bk, b0, b1, b2, b3);                               \
    SATTN_GEMM_FMA_ROW(acc, 0);                                           \
    SATTN_GEMM_FMA_ROW(acc, 1);                                           \
    SATTN_GEMM_FMA_ROW(acc, 2);                                           \
    SATTN_GEMM_FMA_ROW(acc, 3);                                           \
    SATTN_GEMM_FMA_ROW(acc, 4);                                           \
    SATTN_GEMM_FMA_ROW(acc, 5);                                           \
    SATTN_GEMM_FMA_ROW(acc, 6);                                           \
    SATTN_GEMM_FMA_ROW(acc, 7);                                           \
  }

#define SATTN_GEMM_JOIN_ROW(r)                                 \
  if constexpr (MR > r) {                                      \
    c##r##0 = hn::Add(c##r##0, e##r##0);                       \
    if constexpr (NV > 1) c##r##1 = hn::Add(c##r##1, e##r##1); \
    if constexpr (NV > 2) c##r##2 = hn::Add(c##r##2, e##r##2); \
    if constexpr (NV > 3) c##r##3 = hn::Add(c##r##3, e##r##3); \
  }

#define SATTN_GEMM_STORE_ROW(r)                                        \
  if constexpr (MR > r) {                                              \
    hn::StoreU(c##r##0, d, c + r * ldc);                               \
    if constexpr (NV > 1) hn::StoreU(c##r##1, d, c + r * ldc + N);     \
    if constexpr (NV > 2) hn::StoreU(c##r##2, d, c + r * ldc + 2 * N); \
    if constexpr (NV > 3) hn::StoreU(c##r##3, d, c + r * ldc + 3 * N); \
  }

// row_scale == nullptr: C = A * B (C is only written), or C += A * B when add_to_c. Otherwise
// C = C * row_scale[r] + A * B, which is how the PV product folds in the online-softmax
// rescale of O for free. The sum runs over k in order; with KS == 2, the odd k's products are
// summed apart and added last.
// B row k is b.Row(k), NV * Lanes(d) elements read through b.Load (kv_rows-inl.h: dense f32 or a
// cache's rows converted in registers); C rows are c + r * ldc. A cache's V rows may also
// carry the next head's rows (kv_rows-inl.h): the lines of those this call's columns cover are
// requested into L2 as k walks, a row per k.
// GemmTileInline is the same, inlined into a caller that calls it for few k (decoding's
// streamed steps of 4 keys, decode/stream_tiles-inl.h, where a call's own costs would be a third of
// its work).
template <size_t MR, size_t NV, ALayout kLayout, size_t KS = 1, class D, class BRows>
HWY_INLINE void GemmTileInline(D d, const float* HWY_RESTRICT a, size_t lda, const BRows& b,
                               size_t k_count, float* HWY_RESTRICT c, size_t ldc,
                               const float* HWY_RESTRICT row_scale, bool add_to_c) {
  static_assert(MR >= 1 && MR <= 8 && NV >= 1 && NV <= 4, "register block out of range");
  static_assert(KS == 1 || KS == 2, "one or two accumulator sets");
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  // clang-format off
  SATTN_GEMM_DECLARE_ROW(0) SATTN_GEMM_DECLARE_ROW(1) SATTN_GEMM_DECLARE_ROW(2)
  SATTN_GEMM_DECLARE_ROW(3) SATTN_GEMM_DECLARE_ROW(4) SATTN_GEMM_DECLARE_ROW(5)
  SATTN_GEMM_DECLARE_ROW(6) SATTN_GEMM_DECLARE_ROW(7)
  if (row_scale != nullptr) {
    SATTN_GEMM_LOAD_ROW(0) SATTN_GEMM_LOAD_ROW(1) SATTN_GEMM_LOAD_ROW(2) SATTN_GEMM_LOAD_ROW(3)
    SATTN_GEMM_LOAD_ROW(4) SATTN_GEMM_LOAD_ROW(5) SATTN_GEMM_LOAD_ROW(6) SATTN_GEMM_LOAD_ROW(7)
  } else if (add_to_c) {
    SATTN_GEMM_LOAD_ROW_UNSCALED(0) SATTN_GEMM_LOAD_ROW_UNSCALED(1) SATTN_GEMM_LOAD_ROW_UNSCALED(2)
    SATTN_GEMM_LOAD_ROW_UNSCALED(3) SATTN_GEMM_LOAD_ROW_UNSCALED(4) SATTN_GEMM_LOAD_ROW_UNSCALED(5)
    SATTN_GEMM_LOAD_ROW_UNSCALED(6) SATTN_GEMM_LOAD_ROW_UNSCALED(7)
  }
  // clang-format on
  // Row pointers of A for the row-major layout (unused rows point at row 0: never read).
  const float* a0 = a;
  const float* a1 = a + (MR > 1 ? lda : 0);
  const float* a2 = a + (MR > 2 ? 2 * lda : 0);
  const float* a3 = a + (MR > 3 ? 3 * lda : 0);
  const float* a4 = a + (MR > 4 ? 4 * lda : 0);
  const float* a5 = a + (MR > 5 ? 5 * lda : 0);
  const float* a6 = a + (MR > 6 ? 6 * lda : 0);
  const float* a7 = a + (MR > 7 ? 7 * lda : 0);
  size_t k = 0;
  for (; k + KS <= k_count; k += KS) {
    SATTN_GEMM_STEP(c, k)
    if constexpr (KS == 2) SATTN_GEMM_STEP(e, k + 1)
  }
  if constexpr (KS == 2) {
    if (k < k_count) SATTN_GEMM_STEP(c, k)
    // clang-format off
    SATTN_GEMM_JOIN_ROW(0) SATTN_GEMM_JOIN_ROW(1) SATTN_GEMM_JOIN_ROW(2) SATTN_GEMM_JOIN_ROW(3)
    SATTN_GEMM_JOIN_ROW(4) SATTN_GEMM_JOIN_ROW(5) SATTN_GEMM_JOIN_ROW(6) SATTN_GEMM_JOIN_ROW(7)
    // clang-format on
  }
  // clang-format off
  SATTN_GEMM_STORE_ROW(0) SATTN_GEMM_STORE_ROW(1) SATTN_GEMM_STORE_ROW(2) SATTN_GEMM_STORE_ROW(3)
  SATTN_GEMM_STORE_ROW(4) SATTN_GEMM_STORE_ROW(5) SATTN_GEMM_STORE_ROW(6) SATTN_GEMM_STORE_ROW(7)
  (void)a0, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7;
  // clang-format on
}

template <size_t MR, size_t NV, ALayout kLayout, size_t KS = 1, class D, class BRows>
HWY_NOINLINE void GemmTile(D d, const float* HWY_RESTRICT a, size_t lda, BRows b, size_t k_count,
                           float* HWY_RESTRICT c, size_t ldc, const float* HWY_RESTRICT row_scale,
                           bool add_to_c = false) {
  GemmTileInline<MR, NV, kLayout, KS>(d, a, lda, b, k_count, c, ldc, row_scale, add_to_c);
}

#undef SATTN_GEMM_DECLARE_ROW
#undef SATTN_GEMM_LOAD_ROW
#undef SATTN_GEMM_LOAD_ROW_UNSCALED
#undef SATTN_GEMM_FMA_ROW
#undef SATTN_GEMM_STEP
#undef SATTN_GEMM_JOIN_ROW
#undef SATTN_GEMM_STORE_ROW

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_GEMM_TILE_INL_H_
