// GemmTile: the register-blocked micro-kernel behind both products of the flash forward,
//   C[MR][NV * lanes] (=, or scaled +=) A[MR][K] * B[K][NV * lanes],
// with MR rows of A broadcast and NV vectors of B loaded per k step. Accumulators are named
// variables, not arrays: GCC 12 sometimes spills Vec arrays in the hot loop, and SVE vectors are
// sizeless and cannot live in arrays at all.
// Cost: MR * NV FMAs per k for NV loads and MR broadcasts (folded into the FMA on AVX-512);
// MR x NV = 6 x 4 or 8 x 3 keeps 24 of 32 registers busy (6 x 2 of 16 on AVX2), enough
// independent chains to cover two FMA ports x 4 cycles of latency.
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

// How A is laid out: element (r, k) at a[r * lda + k] (kRowsContiguousK: each row is contiguous
// along k, like K rows) or at a[k * lda + r] (kColumnsContiguous: the MR rows of one k are
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

#define SATTN_GEMM_DECLARE_ROW(r) \
  V c##r##0 = hn::Zero(d), c##r##1 = hn::Zero(d), c##r##2 = hn::Zero(d), c##r##3 = hn::Zero(d);

#define SATTN_GEMM_LOAD_ROW(r)                                                     \
  if constexpr (MR > r) {                                                          \
    const V s = hn::Set(d, row_scale[r]);                                          \
    c##r##0 = hn::Mul(hn::LoadU(d, c + r * ldc), s);                               \
    if constexpr (NV > 1) c##r##1 = hn::Mul(hn::LoadU(d, c + r * ldc + N), s);     \
    if constexpr (NV > 2) c##r##2 = hn::Mul(hn::LoadU(d, c + r * ldc + 2 * N), s); \
    if constexpr (NV > 3) c##r##3 = hn::Mul(hn::LoadU(d, c + r * ldc + 3 * N), s); \
  }

#define SATTN_GEMM_FMA_ROW(r)                                                   \
  if constexpr (MR > r) {                                                       \
    const V ar = hn::Set(d, kLayout == ALayout::kRowsAlongK ? a##r[k] : ak[r]); \
    c##r##0 = hn::MulAdd(ar, b0, c##r##0);                                      \
    if constexpr (NV > 1) c##r##1 = hn::MulAdd(ar, b1, c##r##1);                \
    if constexpr (NV > 2) c##r##2 = hn::MulAdd(ar, b2, c##r##2);                \
    if constexpr (NV > 3) c##r##3 = hn::MulAdd(ar, b3, c##r##3);                \
  }

#define SATTN_GEMM_STORE_ROW(r)                                        \
  if constexpr (MR > r) {                                              \
    hn::StoreU(c##r##0, d, c + r * ldc);                               \
    if constexpr (NV > 1) hn::StoreU(c##r##1, d, c + r * ldc + N);     \
    if constexpr (NV > 2) hn::StoreU(c##r##2, d, c + r * ldc + 2 * N); \
    if constexpr (NV > 3) hn::StoreU(c##r##3, d, c + r * ldc + 3 * N); \
  }

// row_scale == nullptr: C = A * B (C is only written). Otherwise C = C * row_scale[r] + A * B,
// which is how the PV product folds in the online-softmax rescale of O for free.
// B row k is b.Row(k), NV * Lanes(d) elements read through b.Load (kv_rows-inl.h: dense f32 or a
// cache's rows converted in registers); C rows are c + r * ldc. A cache's V rows may also
// carry the next head's rows (kv_rows-inl.h): the lines of those this call's columns cover are
// requested into L2 as k walks, a row per k.
template <size_t MR, size_t NV, ALayout kLayout, class D, class BRows>
HWY_NOINLINE void GemmTile(D d, const float* HWY_RESTRICT a, size_t lda, BRows b, size_t k_count,
                           float* HWY_RESTRICT c, size_t ldc, const float* HWY_RESTRICT row_scale) {
  static_assert(MR >= 1 && MR <= 8 && NV >= 1 && NV <= 4, "register block out of range");
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  // clang-format off
  SATTN_GEMM_DECLARE_ROW(0) SATTN_GEMM_DECLARE_ROW(1) SATTN_GEMM_DECLARE_ROW(2)
  SATTN_GEMM_DECLARE_ROW(3) SATTN_GEMM_DECLARE_ROW(4) SATTN_GEMM_DECLARE_ROW(5)
  SATTN_GEMM_DECLARE_ROW(6) SATTN_GEMM_DECLARE_ROW(7)
  if (row_scale != nullptr) {
    SATTN_GEMM_LOAD_ROW(0) SATTN_GEMM_LOAD_ROW(1) SATTN_GEMM_LOAD_ROW(2) SATTN_GEMM_LOAD_ROW(3)
    SATTN_GEMM_LOAD_ROW(4) SATTN_GEMM_LOAD_ROW(5) SATTN_GEMM_LOAD_ROW(6) SATTN_GEMM_LOAD_ROW(7)
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
  for (size_t k = 0; k < k_count; ++k) {
    const auto* HWY_RESTRICT bk = b.Row(k);
    const float* HWY_RESTRICT ak = a + k * lda;  // kRowsAdjacent only
    (void)ak;
    if constexpr (BRows::kPrefetches) {
      // The V rows of the head whose P.V comes next (kv_rows-inl.h), when b carries them.
      if (b.next_values != nullptr) {
        const char* next = b.NextValue(k);
        for (size_t byte = 0; byte < NV * N * BRows::kElementBytes; byte += 64) {
          RequestIntoL2(next + byte);
        }
        if (const char* tail = UncoveredTail(next, NV * N * BRows::kElementBytes)) {
          RequestIntoL2(tail);
        }
      }
    }
    const V b0 = b.Load(d, bk, 0);
    const V b1 = NV > 1 ? b.Load(d, bk, N) : b0;
    const V b2 = NV > 2 ? b.Load(d, bk, 2 * N) : b0;
    const V b3 = NV > 3 ? b.Load(d, bk, 3 * N) : b0;
    // clang-format off
    SATTN_GEMM_FMA_ROW(0) SATTN_GEMM_FMA_ROW(1) SATTN_GEMM_FMA_ROW(2) SATTN_GEMM_FMA_ROW(3)
    SATTN_GEMM_FMA_ROW(4) SATTN_GEMM_FMA_ROW(5) SATTN_GEMM_FMA_ROW(6) SATTN_GEMM_FMA_ROW(7)
    // clang-format on
  }
  // clang-format off
  SATTN_GEMM_STORE_ROW(0) SATTN_GEMM_STORE_ROW(1) SATTN_GEMM_STORE_ROW(2) SATTN_GEMM_STORE_ROW(3)
  SATTN_GEMM_STORE_ROW(4) SATTN_GEMM_STORE_ROW(5) SATTN_GEMM_STORE_ROW(6) SATTN_GEMM_STORE_ROW(7)
  (void)a0, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7;
  // clang-format on
}

#undef SATTN_GEMM_DECLARE_ROW
#undef SATTN_GEMM_LOAD_ROW
#undef SATTN_GEMM_FMA_ROW
#undef SATTN_GEMM_STORE_ROW

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_GEMM_TILE_INL_H_
