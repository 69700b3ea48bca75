// The prefill tile kernel of native bf16 dot products (AVX512_BF16's vdpbf16ps: AMD Zen 4 and
// later, Intel Cooper Lake, Sapphire Rapids and later), for calls whose q, k and v are all
// bf16, on the AVX3 targets of CPUs that have the instruction (Avx512Bf16Supported).
//
// vdpbf16ps adds to each f32 lane the two products of a pair of bf16 lanes:
//   acc[i] += a[2i + 1] * b[2i + 1], then acc[i] += a[2i] * b[2i]
// each product exact in f32, each sum rounded to nearest even; bf16 inputs that are subnormal
// count as zero and subnormal results flush to zero. So the scores need their operands in
// pairs along head_dim (K rows are, as stored; the queries are packed as pairs of channels per
// row, panel by panel), and the P.V needs them in pairs of keys (P rounded to bf16, two keys
// per 32-bit lane; V repacked so each 32-bit lane holds one column of two keys). Q is packed
// unscaled (exactly, as bf16) and the scale is applied to the f32 sums.
// Cost per key and head: head_dim / 2 instructions per vector of rows for each product, half
// the f32 FMA kernel's, on f32 accumulators in the same register blocks (8 keys x 3 vectors
// of rows for the scores, 6 rows x 4 vectors of head_dim for the P.V); plus, per tile, one
// pass over V to repack it and one over P to round and pair it.
// Error: Q.K^T as exact as the f32 kernel's (bf16 products are exact in f32; only the order
// of the sums differs); P rounded to bf16 (relative error at most 2^-9 per weight) adds about
// 1e-3 of the output's scale (docs/performance.md). kF32PV keeps P in f32 for the P.V (V
// converted to f32 as the f32 kernel does), for callers who want the f32 kernel's accuracy.
#if defined(STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
#undef STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
#else
#define STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/attention_args.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/cache_element-inl.h"
#include "cpu/convert-inl.h"
#include "cpu/kv_rows-inl.h"
#include "cpu/pv_block-inl.h"
#include "cpu/tile_update-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/highway.h"

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#undef SATTN_AVX512_BF16_TILES  // defined once per target
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define SATTN_AVX512_BF16_TILES 1
// This target's instructions and AVX512_BF16, for the functions that use vdpbf16ps.
#define SATTN_ATTR_AVX512_BF16 __attribute__((target(HWY_TARGET_STR ",avx512bf16")))

// The scores of 8 keys (rows of K along head_dim, `ldk` bf16 apart, 2 * pairs long) against
// NV vectors of 16 query rows (the panel's pairs: pair j of row r at q[j * ldq + r], ldq
// 32-bit words apart), scaled: C[m][r] = scale * sum_j K[m] pair j . Q[r] pair j, at
// c + m * ldc + r. 8 x NV accumulators, as the f32 kernel's block (kMrS x kNvS).
template <size_t NV>
SATTN_ATTR_AVX512_BF16 HWY_NOINLINE void Bf16ScoreBlock(const uint16_t* HWY_RESTRICT k, size_t ldk,
                                                        const uint32_t* HWY_RESTRICT q, size_t ldq,
                                                        size_t pairs, float scale,
                                                        float* HWY_RESTRICT c, size_t ldc) {
  constexpr size_t kKeys = 8;
  __m512 acc[kKeys][NV];
#pragma GCC unroll 8
  for (size_t m = 0; m < kKeys; ++m) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) acc[m][v] = _mm512_setzero_ps();
  }
  for (size_t j = 0; j < pairs; ++j) {
    __m512bh qv[NV];
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) {
      qv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + j * ldq + 16 * v));
    }
#pragma GCC unroll 8
    for (size_t m = 0; m < kKeys; ++m) {
      const __m512bh kp =
          reinterpret_cast<__m512bh>(_mm512_broadcastd_epi32(_mm_loadu_si32(k + m * ldk + 2 * j)));
#pragma GCC unroll 4
      for (size_t v = 0; v < NV; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], qv[v], kp);
    }
  }
  const __m512 s = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (size_t m = 0; m < kKeys; ++m) {
#pragma GCC unroll 4
    for (size_t v = 0; v < NV; ++v) {
      _mm512_storeu_ps(c + m * ldc + 16 * v, _mm512_mul_ps(acc[m][v], s));
    }
  }
}

// O = alpha O + P V for MR rows x NV vectors of 16 columns of head_dim_v, over `pairs` pairs of
// keys: P's pair j of row r at p[j * ldp + r] (two bf16 in a 32-bit word), V's pair j of
// column x at v[j * ldv + x]; O row r at o + r * ldo. alpha == nullptr: O += P V.
template <size_t MR, size_t NV>
SATTN_ATTR_AVX512_BF16 HWY_NOINLINE void Bf16PVBlock(const uint32_t* HWY_RESTRICT p, size_t ldp,
                                                     const uint32_t* HWY_RESTRICT v, size_t ldv,
                                                     size_t pairs, float* HWY_RESTRICT o,
                                                     size_t ldo, const float* HWY_RESTRICT alpha) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
    const __m512 a = _mm512_set1_ps(alpha == nullptr ? 1.0f : alpha[r]);
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) {
      acc[r][x] = _mm512_mul_ps(_mm512_loadu_ps(o + r * ldo + 16 * x), a);
    }
  }
  for (size_t j = 0; j < pairs; ++j) {
    __m512bh vv[NV];
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) {
      vv[x] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(v + j * ldv + 16 * x));
    }
#pragma GCC unroll 8
    for (size_t r = 0; r < MR; ++r) {
      const __m512bh pr =
          reinterpret_cast<__m512bh>(_mm512_broadcastd_epi32(_mm_loadu_si32(p + j * ldp + r)));
#pragma GCC unroll 4
      for (size_t x = 0; x < NV; ++x) acc[r][x] = _mm512_dpbf16_ps(acc[r][x], vv[x], pr);
    }
  }
#pragma GCC unroll 8
  for (size_t r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (size_t x = 0; x < NV; ++x) _mm512_storeu_ps(o + r * ldo + 16 * x, acc[r][x]);
  }
}

#undef SATTN_ATTR_AVX512_BF16

// Whether this CPU has vdpbf16ps (the AVX3 target already has the OS's AVX-512 state).
inline bool Avx512Bf16Supported() { return __builtin_cpu_supports("avx512bf16"); }

// The bits of a bf16 tensor's element i of row `row` (stride in elements).
inline uint16_t Bf16Bits(const void* row, int64_t stride, size_t i) {
  uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(row) + static_cast<int64_t>(i) * stride * 2, 2);
  return bits;
}

// Key rows of a tensor of bf16 (K), copied as they are into rows of `dim_pad` bf16, zeroed
// past `dim`.
inline void CopyBf16Row(const void* row, int64_t stride, size_t dim, size_t dim_pad,
                        uint16_t* HWY_RESTRICT out) {
  if (stride == 1) {
    std::memcpy(out, row, dim * sizeof(uint16_t));
  } else {
    for (size_t i = 0; i < dim; ++i) out[i] = Bf16Bits(row, stride, i);
  }
  std::fill(out + dim, out + dim_pad, uint16_t{0});
}

// Two V rows of bf16 (row1 nullptr: a zero row) into one row of pairs: column x's two values
// in the 32-bit word out[x], row0's in the low half; zero from dim to dim_pad.
template <class D>
HWY_INLINE void PairBf16Rows(D d, const void* row0, const void* row1, int64_t stride, size_t dim,
                             size_t dim_pad, uint32_t* HWY_RESTRICT out) {
  size_t x = 0;
  if (stride == 1) {
    const hn::RebindToUnsigned<D> du;
    const hn::Rebind<uint16_t, D> d16;
    const auto* r0 = static_cast<const uint16_t*>(row0);
    const auto* r1 = static_cast<const uint16_t*>(row1);
    for (; x + hn::Lanes(du) <= dim; x += hn::Lanes(du)) {
      const auto low = hn::PromoteTo(du, hn::LoadU(d16, r0 + x));
      const auto high = r1 == nullptr ? hn::Zero(du) : hn::PromoteTo(du, hn::LoadU(d16, r1 + x));
      hn::StoreU(hn::Or(low, hn::ShiftLeft<16>(high)), du, out + x);
    }
  }
  for (; x < dim; ++x) {
    const uint32_t high = row1 == nullptr ? 0u : Bf16Bits(row1, stride, x);
    out[x] = Bf16Bits(row0, stride, x) | high << 16;
  }
  std::fill(out + dim, out + dim_pad, 0u);
}

template <bool kF32PV>
struct Avx512Bf16Tiles {
  static constexpr const char* kName = "avx512-bf16";
  // Whether the call can take this kernel on this CPU: q, k and v all bf16.
  static bool Supports(const AttentionArgs& a) {
    return a.q.dtype == DType::kBF16 && a.k.dtype == DType::kBF16 && a.v.dtype == DType::kBF16 &&
           Avx512Bf16Supported();
  }

  // Kv head hkv's query rows as they are (bf16, unscaled), in panels of pairs: pair j of row
  // r of panel p in the 32-bit word (p * pairs + j) * panel_rows + r, pairs = dim_pad / 2
  // (channel 2j in the low half). Padding rows and channels are zero.
  template <class D>
  static void PackQueries(D /* d */, const AttentionArgs& a, const AttentionPlan& plan,
                          const WorkItem& item, int64_t hkv, float* HWY_RESTRICT q,
                          float* HWY_RESTRICT /* row */) {
    uint16_t* out = SlotAs<uint16_t>(q);
    const size_t R = plan.panel_rows, pairs = plan.dim_pad / 2, rows = item.Rows(a);
    for (size_t r = 0; r < plan.rows_pad; ++r) {
      uint16_t* base = out + 2 * ((r / R) * pairs * R + r % R);  // pair j at base + 2 j R
      const void* src =
          r < rows ? a.q.At(item.b, item.Position(a, r), item.QueryHead(a, hkv, r), 0) : nullptr;
      for (size_t i = 0; i < plan.dim_pad; ++i) {
        base[2 * (i / 2) * R + i % 2] =
            src != nullptr && i < plan.dim ? Bf16Bits(src, a.q.stride(3), i) : uint16_t{0};
      }
    }
  }

  // The tile's K rows copied as bf16 rows (c * heads + h, dim_pad apart), rows past nb zero;
  // V as rows of key pairs (pair kp of head h: words (kp * heads + h) * dim_v_pad), or, for
  // kF32PV, converted to f32 as the f32 kernel has it.
  template <class D>
  static void LoadTile(D d, const AttentionArgs& a, const AttentionPlan& plan, const WorkItem& item,
                       const TileKeys& tile, const AttentionScratch& s) {
    const size_t heads = static_cast<size_t>(plan.heads), dim_v = static_cast<size_t>(a.head_dim_v);
    uint16_t* k = SlotAs<uint16_t>(s.k_tile);
    for (size_t c = 0; c < tile.nb; ++c) {
      for (size_t h = 0; h < heads; ++h) {
        const int64_t key = tile.k0 + static_cast<int64_t>(c);
        CopyBf16Row(a.KeyRow(a.k, item.b, key, item.hkv_begin + static_cast<int64_t>(h)),
                    a.k.stride(3), plan.dim, plan.dim_pad, k + (c * heads + h) * plan.dim_pad);
      }
    }
    std::fill(k + tile.nb * heads * plan.dim_pad, k + tile.nb_pad * heads * plan.dim_pad,
              uint16_t{0});
    if constexpr (kF32PV) {
      ConvertKeyTile(d, a, plan, item.b, item.hkv_begin, tile.k0, tile.nb, tile.nb_pad, nullptr,
                     s.v_tile);
    } else {
      uint32_t* v = SlotAs<uint32_t>(s.v_tile);
      for (size_t c = 0; c < tile.nb; c += 2) {
        for (size_t h = 0; h < heads; ++h) {
          const int64_t key = tile.k0 + static_cast<int64_t>(c);
          const int64_t head = item.hkv_begin + static_cast<int64_t>(h);
          PairBf16Rows(d, a.KeyRow(a.v, item.b, key, head),
                       c + 1 < tile.nb ? a.KeyRow(a.v, item.b, key + 1, head) : nullptr,
                       a.v.stride(3), dim_v, plan.dim_v_pad,
                       v + (c / 2 * heads + h) * plan.dim_v_pad);
        }
      }
    }
  }

  // Raw products of panel p of the item's h-th kv head against the tile, scaled to base-2
  // scores: S^T[key][row] in s.scores (rows_pad apart), keys to tile.nb_pad.
  template <class D>
  static void ScorePanel(D /* d */, const AttentionArgs& a, const AttentionPlan& plan, size_t p,
                         int64_t h, const TileKeys& tile, const AttentionScratch& s,
                         const HeadScratch& head) {
    static_assert(kMrS == 8, "Bf16ScoreBlock scores 8 keys");
    const size_t R = plan.rows_pad, pairs = plan.dim_pad / 2;
    const size_t ldk = static_cast<size_t>(plan.heads) * plan.dim_pad;
    const uint16_t* k = SlotAs<uint16_t>(s.k_tile) + static_cast<size_t>(h) * plan.dim_pad;
    const uint32_t* q = SlotAs<uint32_t>(head.q) + p * pairs * plan.panel_rows;
    const float scale = QueryScale(a);
    for (size_t c = 0; c < tile.nb_pad; c += kMrS) {
      float* out = s.scores + c * R + p * plan.panel_rows;
      switch (plan.panel_vectors) {
        case 1:
          Bf16ScoreBlock<1>(k + c * ldk, ldk, q, plan.panel_rows, pairs, scale, out, R);
          break;
        case 2:
          Bf16ScoreBlock<2>(k + c * ldk, ldk, q, plan.panel_rows, pairs, scale, out, R);
          break;
        default:
          Bf16ScoreBlock<kNvS>(k + c * ldk, ldk, q, plan.panel_rows, pairs, scale, out, R);
          break;
      }
    }
  }

  // O = alpha O + P V for the item's h-th kv head, P^T in s.scores.
  template <class D>
  static void AccumulatePV(D d, const AttentionArgs& a, const AttentionPlan& plan, int64_t h,
                           const WorkItem& item, const TileKeys& tile, const AttentionScratch& s,
                           const HeadScratch& head) {
    const size_t dvp = plan.dim_v_pad, ldv = static_cast<size_t>(plan.heads) * dvp;
    if constexpr (kF32PV) {
      AccumulateTilePV(d, a, plan, item.Rows(a), tile,
                       DenseRows{s.v_tile + static_cast<size_t>(h) * dvp, ldv}, s, head);
    } else {
      const uint32_t* v = SlotAs<uint32_t>(s.v_tile) + static_cast<size_t>(h) * dvp;
      if (HidesNonFiniteValues(a, plan, item, tile, v, ldv, s)) {
        AccumulateSkippingZeros(a, plan, item, tile, v, ldv, s, head);
        return;
      }
      PairProbabilities(d, plan, item.Rows(a), tile, s.scores);
      AccumulatePairedPV(plan, item.Rows(a), (tile.nb + 1) / 2, v, ldv, s, head);
    }
  }

 private:
  // Whether a panel that sees the tile hides some of its keys while a V value of the tile is
  // not finite: a hidden key's zero probability must then never meet its NaN or Inf.
  static bool HidesNonFiniteValues(const AttentionArgs& a, const AttentionPlan& plan,
                                   const WorkItem& item, const TileKeys& tile, const uint32_t* v,
                                   size_t ldv, const AttentionScratch& s) {
    const size_t panels = (item.Rows(a) + plan.panel_rows - 1) / plan.panel_rows;
    bool any_partial = false;
    for (size_t p = 0; p < panels; ++p) any_partial |= s.panel_active[p] && s.panel_partial[p];
    if (!any_partial) return false;
    const size_t dim_v = static_cast<size_t>(a.head_dim_v);
    for (size_t kp = 0; kp < (tile.nb + 1) / 2; ++kp) {
      for (size_t x = 0; x < dim_v; ++x) {
        const uint32_t w = v[kp * ldv + x];
        if ((w & 0x7F80u) == 0x7F80u || (w & 0x7F800000u) == 0x7F800000u) return true;
      }
    }
    return false;
  }

  // The NaN-safe P.V, one row and key at a time (only for tiles with non-finite hidden values).
  static void AccumulateSkippingZeros(const AttentionArgs& a, const AttentionPlan& plan,
                                      const WorkItem& item, const TileKeys& tile, const uint32_t* v,
                                      size_t ldv, const AttentionScratch& s,
                                      const HeadScratch& head) {
    const size_t R = plan.rows_pad, dvp = plan.dim_v_pad, rows = item.Rows(a);
    for (size_t r = 0; r < rows; ++r) {
      if (!s.panel_active[r / plan.panel_rows]) continue;
      float* o = head.o + r * dvp;
      for (size_t x = 0; x < dvp; ++x) o[x] *= s.alpha[r];
      for (size_t c = 0; c < tile.nb; ++c) {
        const float p = s.scores[c * R + r];
        if (p == 0.0f) continue;
        for (size_t x = 0; x < dvp; ++x) {
          const uint32_t w = v[c / 2 * ldv + x];
          o[x] += p * BF16ToF32(static_cast<uint16_t>(c % 2 == 0 ? w : w >> 16));
        }
      }
    }
  }

  // P^T (f32, key c of row r at st[c * R + r]) rounded to bf16 (nearest even) and paired by
  // keys in place: pair kp of row r in the 32-bit word at st[kp * R + r], key 2 kp in the low
  // half, a missing key (past nb) zero. Pair kp overwrites key kp's row, which pair kp / 2 (at
  // most kp) has already read: ascending kp never overwrites a key still to be read.
  template <class D>
  static void PairProbabilities(D d, const AttentionPlan& plan, size_t rows, const TileKeys& tile,
                                float* HWY_RESTRICT st) {
    const hn::RebindToUnsigned<D> du;
    const size_t R = plan.rows_pad, N = hn::Lanes(d);
    for (size_t kp = 0; kp < (tile.nb + 1) / 2; ++kp) {
      const float* even = st + 2 * kp * R;
      const float* odd = 2 * kp + 1 < tile.nb ? even + R : nullptr;
      for (size_t r = 0; r < rows; r += N) {
        const auto low = F32LanesToBF16Bits(d, hn::LoadU(d, even + r));
        const auto high =
            odd == nullptr ? hn::Zero(du) : F32LanesToBF16Bits(d, hn::LoadU(d, odd + r));
        hn::StoreU(hn::BitCast(d, hn::Or(low, hn::ShiftLeft<16>(high))), d, st + kp * R + r);
      }
    }
  }

  // O = alpha O + P V over `pairs` key pairs, P paired in s.scores, for the rows of every panel
  // that sees the tile, in blocks of up to kMrP rows x 4 vectors of head_dim_v.
  static void AccumulatePairedPV(const AttentionPlan& plan, size_t rows, size_t pairs,
                                 const uint32_t* v, size_t ldv, const AttentionScratch& s,
                                 const HeadScratch& head) {
    const size_t R = plan.rows_pad, dvp = plan.dim_v_pad;
    const uint32_t* p = SlotAs<uint32_t>(s.scores);
    const size_t panels = (rows + plan.panel_rows - 1) / plan.panel_rows;
    for (size_t panel = 0; panel < panels; ++panel) {
      if (!s.panel_active[panel]) continue;
      const size_t end = std::min((panel + 1) * plan.panel_rows, rows);
      for (size_t r = panel * plan.panel_rows; r < end; r += kMrP) {
        const size_t block = std::min(kMrP, end - r);
        for (size_t x = 0; x < dvp; x += 64) {
          const size_t vectors = std::min<size_t>(4, (dvp - x) / 16);
          PVBlock(block, vectors, p + r, R, v + x, ldv, pairs, head.o + r * dvp + x, dvp,
                  s.alpha + r);
        }
      }
    }
  }

  // Bf16PVBlock for a run-time block of `mr` rows x `nv` vectors.
  static void PVBlock(size_t mr, size_t nv, const uint32_t* p, size_t ldp, const uint32_t* v,
                      size_t ldv, size_t pairs, float* o, size_t ldo, const float* alpha) {
    switch (mr * 8 + nv) {
#define SATTN_PV_CASE(MR, NV) \
  case MR * 8 + NV:           \
    return Bf16PVBlock<MR, NV>(p, ldp, v, ldv, pairs, o, ldo, alpha);
#define SATTN_PV_ROW(MR) \
  SATTN_PV_CASE(MR, 1) SATTN_PV_CASE(MR, 2) SATTN_PV_CASE(MR, 3) SATTN_PV_CASE(MR, 4)
      SATTN_PV_ROW(1)
      SATTN_PV_ROW(2)
      SATTN_PV_ROW(3) SATTN_PV_ROW(4) SATTN_PV_ROW(5) SATTN_PV_ROW(6)
#undef SATTN_PV_ROW
#undef SATTN_PV_CASE
          default : return;
    }
  }
};

#else
#define SATTN_AVX512_BF16_TILES 0
#endif  // HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_PREFILL_AVX512_BF16_TILES_INL_H_
