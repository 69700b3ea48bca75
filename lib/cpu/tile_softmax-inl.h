// The online-softmax step of both attention drivers, on a transposed score tile S^T[key][row]:
// one SIMD lane per query row, so the row state (m, l) lives in lanes and a tile needs no
// horizontal reduction. Per tile and row: m_new = max(m, max_c s), alpha = exp2(m - m_new),
// p = exp2(s - m_new), l = alpha * l + sum p (the block recurrence, docs/design.md); O is
// rescaled by alpha inside the P.V product. Cost per score: two loads, a max, an exp2, an add and a
// store; hidden keys cost a compare and a select; ALiBi a few more ops, softcap a tanh (an exp2).
#if defined(STREAMATTN_CPU_TILE_SOFTMAX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef STREAMATTN_CPU_TILE_SOFTMAX_INL_H_
#undef STREAMATTN_CPU_TILE_SOFTMAX_INL_H_
#else
#define STREAMATTN_CPU_TILE_SOFTMAX_INL_H_
#endif

#include <cstddef>

#include "core/online_state.h"
#include "cpu/exp2-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// What turns a raw product q.k (already multiplied by the folded query scale) into a base-2
// score, for the rows of one panel and the keys of one tile.
struct TileScoring {
  bool full = true;           // every row sees every key of the tile: no visibility test
  const float* lo = nullptr;  // per row: first visible key, relative to the tile (may be < 0)
  const float* hi = nullptr;  // per row: last visible key, relative to the tile
  const float* alibi_slope2 = nullptr;  // per row: -slope * log2(e); nullptr: no ALiBi
  const float* diagonal = nullptr;      // per row: i + seq_k - seq_q, relative to the tile
};

// tanh by the library's exp2: an odd series for |x| < 1/8 (no cancellation near 0), else
// 1 - 2 / (e^(2|x|) + 1) with the sign restored. Max error ~2e-7 absolute.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Tanh(D d, V x) {
  const V ax = hn::Abs(x);
  const V x2 = hn::Mul(x, x);
  V series = hn::MulAdd(x2, hn::Set(d, -17.0f / 315.0f), hn::Set(d, 2.0f / 15.0f));
  series = hn::MulAdd(x2, series, hn::Set(d, -1.0f / 3.0f));
  series = hn::MulAdd(hn::Mul(x2, series), x, x);
  const V e = Exp2(d, hn::Mul(ax, hn::Set(d, 2.0f * kLog2e)));
  const V far = hn::Sub(hn::Set(d, 1.0f), hn::Div(hn::Set(d, 2.0f), hn::Add(e, hn::Set(d, 1.0f))));
  const V signed_far = hn::CopySign(far, x);
  return hn::IfThenElse(hn::Lt(ax, hn::Set(d, 0.125f)), series, signed_far);
}

// Softcap on rows [0, rows) x keys [0, bc) of S^T: s = softcap2 * tanh(s), in place. It runs
// before the caller's mask is added (the order is softcap, ALiBi, mask).
template <class D>
HWY_INLINE void ApplySoftcap(D d, float softcap2, float* HWY_RESTRICT st, size_t ldst, size_t bc,
                             size_t rows) {
  const auto cap = hn::Set(d, softcap2);
  for (size_t c = 0; c < bc; ++c) {
    for (size_t r = 0; r < rows; r += hn::Lanes(d)) {
      float* p = st + c * ldst + r;
      hn::StoreU(hn::Mul(cap, Tanh(d, hn::LoadU(d, p))), d, p);
    }
  }
}

// The maximum of init and p[i * stride], i < count: four chains, as one would wait out the
// Max latency once per vector.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V MaxOfStrided(D d, const float* HWY_RESTRICT p, size_t count, size_t stride, V init) {
  const V neg_inf = hn::Set(d, kNegInf);
  V mx = init, mx1 = neg_inf, mx2 = neg_inf, mx3 = neg_inf;
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const float* q = p + i * stride;
    mx = hn::Max(mx, hn::LoadU(d, q));
    mx1 = hn::Max(mx1, hn::LoadU(d, q + stride));
    mx2 = hn::Max(mx2, hn::LoadU(d, q + 2 * stride));
    mx3 = hn::Max(mx3, hn::LoadU(d, q + 3 * stride));
  }
  for (; i < count; ++i) mx = hn::Max(mx, hn::LoadU(d, p + i * stride));
  return hn::Max(hn::Max(mx, mx1), hn::Max(mx2, mx3));
}

// p[i * stride] = exp2(p[i * stride] - m_use) in place for i < count (scores at most m_use);
// returns their sum, kept in two chains.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp2InPlaceAndSum(D d, float* HWY_RESTRICT p, size_t count, size_t stride, V m_use) {
  V sum0 = hn::Zero(d), sum1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 <= count; i += 2) {
    float* p0 = p + i * stride;
    float* p1 = p0 + stride;
    const V e0 = Exp2NonPositive(d, hn::Sub(hn::LoadU(d, p0), m_use));
    const V e1 = Exp2NonPositive(d, hn::Sub(hn::LoadU(d, p1), m_use));
    hn::StoreU(e0, d, p0);
    hn::StoreU(e1, d, p1);
    sum0 = hn::Add(sum0, e0);
    sum1 = hn::Add(sum1, e1);
  }
  if (i < count) {
    float* p0 = p + i * stride;
    const V e0 = Exp2NonPositive(d, hn::Sub(hn::LoadU(d, p0), m_use));
    hn::StoreU(e0, d, p0);
    sum0 = hn::Add(sum0, e0);
  }
  return hn::Add(sum0, sum1);
}

// Rows [0, rows) of a panel (rows a multiple of Lanes(d)) against keys [0, bc) of a tile:
// st[c * ldst + r] holds raw products on entry and P^T on exit; m, l are the rows' states and
// alpha receives each row's rescale factor for O. When raw products are not yet final base-2
// scores (ALiBi, a visibility test: sc.full false or a slope), pass 1 stores what it computed.
template <class D>
HWY_INLINE void OnlineSoftmaxPanel(D d, const TileScoring& sc, float* HWY_RESTRICT st, size_t ldst,
                                   size_t bc, size_t rows, float* HWY_RESTRICT m,
                                   float* HWY_RESTRICT l, float* HWY_RESTRICT alpha) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const V neg_inf = hn::Set(d, kNegInf);
  const bool transform = !sc.full || sc.alibi_slope2 != nullptr;
  for (size_t r = 0; r < rows; r += N) {
    // Pass 1: finish the scores (if needed) and take the running max.
    const V m_old = hn::LoadU(d, m + r);
    V mx = m_old;
    if (!transform) {
      mx = MaxOfStrided(d, st + r, bc, ldst, mx);
    } else {
      const V lo = sc.full ? neg_inf : hn::LoadU(d, sc.lo + r);
      const V hi = sc.full ? neg_inf : hn::LoadU(d, sc.hi + r);
      const V slope = sc.alibi_slope2 ? hn::LoadU(d, sc.alibi_slope2 + r) : hn::Zero(d);
      const V diagonal = sc.alibi_slope2 ? hn::LoadU(d, sc.diagonal + r) : hn::Zero(d);
      V key = hn::Zero(d);
      for (size_t c = 0; c < bc; ++c, key = hn::Add(key, hn::Set(d, 1.0f))) {
        float* p = st + c * ldst + r;
        V s = hn::LoadU(d, p);
        if (sc.alibi_slope2) s = hn::MulAdd(slope, hn::Abs(hn::Sub(diagonal, key)), s);
        if (!sc.full) {
          // Select, never add: a hidden key's NaN or Inf must not reach the row.
          s = hn::IfThenElse(hn::And(hn::Ge(key, lo), hn::Le(key, hi)), s, neg_inf);
        }
        hn::StoreU(s, d, p);
        mx = hn::Max(mx, s);
      }
    }
    // A row that has seen nothing yet keeps m = -inf; subtracting 0 instead keeps exp2 of its
    // hidden scores at exp2(-inf) = 0 and of a NaN score at NaN (fully masked rows:
    // docs/design.md).
    const V m_use = hn::IfThenElse(hn::Eq(mx, neg_inf), hn::Zero(d), mx);
    // Pass 2: probabilities and their sum.
    const V sum = Exp2InPlaceAndSum(d, st + r, bc, ldst, m_use);
    const V a =
        Exp2NonPositive(d, hn::Sub(m_old, m_use));  // 0 for an empty state, 1 if m did not move
    hn::StoreU(a, d, alpha + r);
    hn::StoreU(hn::MulAdd(hn::LoadU(d, l + r), a, sum), d, l + r);
    hn::StoreU(mx, d, m + r);
  }
}

// Lane i of v moved to lane i - shift (mod Lanes(d), a power of two): lanes `shift` apart meet.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V RotateLanesDown(D d, V v, size_t shift) {
  const hn::RebindToSigned<D> di;
  const auto index = hn::And(hn::Add(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(shift))),
                             hn::Set(di, static_cast<int32_t>(hn::Lanes(d) - 1)));
  return hn::TableLookupLanes(v, hn::IndicesFromVec(d, index));
}

// Lanes [0, rows) of v repeated across the vector (rows divides Lanes(d)).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V RepeatFirstLanes(D d, V v, size_t rows) {
  const hn::RebindToSigned<D> di;
  const auto index = hn::And(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(rows - 1)));
  return hn::TableLookupLanes(v, hn::IndicesFromVec(d, index));
}

// The online-softmax step for a head with few query rows, its tile's scores packed densely:
// st[c * rows + r] for key c < nb and row r, Lanes(d) / rows keys per vector (rows and Lanes(d)
// powers of two), every key visible, no ALiBi. Decoding has 1 to 8 rows per head, which the
// one-lane-per-row form leaves in a vector of 16 lanes: packed, a tile of 16 keys costs
// rows vectors of exp2 rather than 16. A row's lanes in a vector are reduced with log2(keys
// per vector) lane rotations for its maximum and again for its sum. m, l and alpha hold each
// row's value in lane r < rows (the layout of OnlineSoftmaxPanel) and, on exit, repeated in
// every key slot of the vector; st's lanes past nb * rows, up to whole vectors, are
// overwritten.
template <class D>
HWY_INLINE void OnlineSoftmaxPacked(D d, float* HWY_RESTRICT st, size_t nb, size_t rows,
                                    float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                                    float* HWY_RESTRICT alpha) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  const size_t vectors = (nb * rows + N - 1) / N;
  for (size_t i = nb * rows; i < vectors * N; ++i) st[i] = kNegInf;  // no key: exp2 gives 0
  const V neg_inf = hn::Set(d, kNegInf);
  const V m_old = RepeatFirstLanes(d, hn::LoadU(d, m), rows);
  V mx = MaxOfStrided(d, st, vectors, N, m_old);
  for (size_t shift = rows; shift < N; shift *= 2) mx = hn::Max(mx, RotateLanesDown(d, mx, shift));
  // As in OnlineSoftmaxPanel: a row that has seen nothing subtracts 0, not -inf.
  const V m_use = hn::IfThenElse(hn::Eq(mx, neg_inf), hn::Zero(d), mx);
  V sum = Exp2InPlaceAndSum(d, st, vectors, N, m_use);
  for (size_t shift = rows; shift < N; shift *= 2)
    sum = hn::Add(sum, RotateLanesDown(d, sum, shift));
  const V a = Exp2NonPositive(d, hn::Sub(m_old, m_use));
  hn::StoreU(a, d, alpha);
  hn::StoreU(hn::MulAdd(RepeatFirstLanes(d, hn::LoadU(d, l), rows), a, sum), d, l);
  hn::StoreU(mx, d, m);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#endif  // STREAMATTN_CPU_TILE_SOFTMAX_INL_H_
