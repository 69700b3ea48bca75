// Decoding's tile steps (cpu/decode/) on every compiled target, against a scalar model of the
// online-softmax state: after a run of streamed tiles (StreamCacheTiles, where the target
// streams), one tile read from the cache in place (AdvanceHeadsOverCacheTile, packed scores
// and not, where the target reads in place) or one converted tile (ConvertKeyTile and
// AdvanceHeadByDots), every kv head's rows hold m + log2 l (the row's base-2 log-sum-exp) and
// O / l as the model computes them in double from the same scaled queries and cache values.
// Shapes: 1 to 4 rows per kv head, 1 to 8 kv heads, head dims that fill the streamed steps'
// register blocks and one that does not, partial tiles, f32, f16 and bf16 caches.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode_step_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "compiled_target-inl.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "cpu/cache_element-inl.h"
#include "cpu/decode/decode_tile-inl.h"
#include "cpu/decode/stream_tiles-inl.h"
#include "cpu/work_item-inl.h"
#include "hwy/tests/hwy_gtest.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

DType DTypeOf(F32Element) { return DType::kF32; }
DType DTypeOf(F16Element) { return DType::kF16; }
DType DTypeOf(BF16Element) { return DType::kBF16; }

Tensor ContiguousView(void* data, DType dtype, int64_t seq, int64_t heads, int64_t dim) {
  Tensor t;
  t.data = data, t.dtype = dtype, t.ndim = 4;
  t.shape[0] = 1, t.shape[1] = seq, t.shape[2] = heads, t.shape[3] = dim;
  t.strides[3] = 1, t.strides[2] = dim, t.strides[1] = heads * dim;
  t.strides[0] = seq * heads * dim;
  return t;
}

// One decoding position of `rows` query heads per kv head over a cache of seq_k keys of
// element type E, with its plan, bound scratch and work item; the heads' queries packed and
// their states empty, as the decode driver starts a work item.
template <class E>
struct DecodeCase {
  using T = typename E::Stored;
  std::vector<float> q, k_values, v_values;  // the cache's values as f32, for the model
  std::vector<T> k, v;
  std::vector<unsigned char> buffer;
  AttentionArgs a;
  AttentionPlan plan;
  AttentionScratchLayout layout;
  AttentionScratch s;
  WorkItem item;

  template <class D>
  DecodeCase(D d, std::mt19937& rng, int64_t rows, int64_t heads_kv, int64_t dim, int64_t seq_k) {
    const int64_t heads_q = rows * heads_kv, n = seq_k * heads_kv * dim;
    std::uniform_int_distribution<int> mantissa(-255, 255);  // values exact in every dtype
    q.resize(static_cast<size_t>(heads_q * dim));
    for (float& x : q) x = static_cast<float>(mantissa(rng)) / 64.0f;
    for (auto* cache : {&k_values, &v_values}) {
      cache->resize(static_cast<size_t>(n));
      for (float& x : *cache) x = static_cast<float>(mantissa(rng)) / 256.0f;
    }
    k.resize(static_cast<size_t>(n)), v.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      StoreFromFloat(DTypeOf(E{}), k_values[i], &k[i]);
      StoreFromFloat(DTypeOf(E{}), v_values[i], &v[i]);
    }
    a.batch = 1, a.seq_q = 1, a.seq_k = seq_k, a.heads_q = heads_q, a.heads_kv = heads_kv;
    a.head_dim = a.head_dim_v = dim, a.group = rows;
    a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
    a.q = ContiguousView(q.data(), DType::kF32, 1, heads_q, dim);
    a.k = ContiguousView(k.data(), DTypeOf(E{}), seq_k, heads_kv, dim);
    a.v = ContiguousView(v.data(), DTypeOf(E{}), seq_k, heads_kv, dim);
    plan = MakeAttentionPlan(d, a);
    layout = MakeAttentionScratchLayout(plan);
    buffer.resize(layout.bytes + 64);
    const size_t misalign = reinterpret_cast<uintptr_t>(buffer.data()) % 64;
    s = layout.Bind(buffer.data() + (64 - misalign) % 64);
    item = WorkItem{0, 0, 0, 1, 0, seq_k, nullptr};
    for (int64_t h = 0; h < plan.heads; ++h) {
      PackQueryRows(d, a, plan, item, h, s.Head(h).q, s.row);
      StartHeadState(a, plan, item, h, s.Head(h));
    }
  }

  // Every head's rows against the model over keys [0, keys): the base-2 log-sum-exp and O / l.
  void ExpectStatesOver(int64_t keys, const char* what) const {
    const size_t dim = plan.dim, rows = static_cast<size_t>(a.group);
    for (int64_t h = 0; h < plan.heads; ++h) {
      const HeadScratch head = s.Head(h);
      for (size_t r = 0; r < rows; ++r) {
        std::vector<double> scores(static_cast<size_t>(keys));
        double m = -INFINITY;
        for (int64_t j = 0; j < keys; ++j) {
          const float* key = &k_values[static_cast<size_t>((j * a.heads_kv + h) * a.head_dim)];
          double score = 0.0;
          for (size_t i = 0; i < dim; ++i) score += double{head.q[r * plan.dim_pad + i]} * key[i];
          scores[j] = score, m = std::max(m, score);
        }
        double l = 0.0;
        std::vector<double> o(dim, 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          const double p = std::exp2(scores[j] - m);
          const float* value = &v_values[static_cast<size_t>((j * a.heads_kv + h) * a.head_dim)];
          l += p;
          for (size_t i = 0; i < dim; ++i) o[i] += p * value[i];
        }
        const double lse = m + std::log2(l), got_lse = head.m[r] + std::log2(head.l[r]);
        ASSERT_NEAR(got_lse, lse, 1e-4 * (1.0 + std::abs(lse)))
            << what << ": head " << h << " row " << r << " of " << rows << ", dim " << dim;
        for (size_t i = 0; i < dim; ++i) {
          ASSERT_NEAR(head.o[r * plan.dim_v_pad + i] / head.l[r], o[i] / l, 1e-5)
              << what << ": head " << h << " row " << r << " element " << i;
        }
      }
    }
  }
};

template <class E, class D>
void CheckShape(D d, std::mt19937& rng, int64_t rows, int64_t heads_kv, int64_t dim) {
  int64_t kpt = 0;
  {  // A run of whole streamed tiles: one, and three.
    DecodeCase<E> one(d, rng, rows, heads_kv, dim, 1);
    kpt = static_cast<int64_t>(one.plan.keys_per_tile);
  }
  if constexpr (kStreamTilesOnTarget) {
    for (int64_t tiles : {1, 3}) {
      DecodeCase<E> c(d, rng, rows, heads_kv, dim, tiles * kpt + 5);
      // One kv head of up to 4 rows that divide the lanes always streams on these targets.
      if (heads_kv == 1 && rows != 3) ASSERT_TRUE(c.plan.stream_tiles) << rows << " rows";
      if (!c.plan.stream_tiles) break;
      StreamCacheTiles(d, E{}, E{}, c.a, c.plan, c.item, 0, tiles, c.a.seq_k, c.s);
      c.ExpectStatesOver(tiles * kpt, "streamed run");
    }
  }
  for (int64_t nb : {kpt, kpt - 3, int64_t{1}}) {  // one tile, whole and partial
    DecodeCase<E> c(d, rng, rows, heads_kv, dim, nb);
    const ItemKeys keys = FindVisibleKeys(c.a, c.plan, c.item, c.s);
    const TileKeys tile = TileAt(c.plan, keys, 0, 4);
    ASSERT_TRUE(MarkPanelsForTile(c.a, c.plan, c.item, keys, tile, c.s));
    if constexpr (kNativeF16) {
      if (c.plan.cache_in_place) {
        AdvanceHeadsOverCacheTile(d, E{}, E{}, c.a, c.plan, c.item, tile, nb, c.s);
        c.ExpectStatesOver(nb, c.plan.packed_scores ? "in place, packed" : "in place");
        continue;
      }
    }
    ConvertKeyTile(d, c.a, c.plan, 0, 0, 0, tile.nb, tile.nb_pad, c.s.k_tile, c.s.v_tile);
    const size_t ldk = static_cast<size_t>(heads_kv) * c.plan.dim_pad;
    const size_t ldv = static_cast<size_t>(heads_kv) * c.plan.dim_v_pad;
    for (int64_t h = 0; h < heads_kv; ++h) {
      AdvanceHeadByDots(d, c.a, c.plan, c.item, h, tile,
                        DenseRows{c.s.k_tile + static_cast<size_t>(h) * c.plan.dim_pad, ldk},
                        DenseRows{c.s.v_tile + static_cast<size_t>(h) * c.plan.dim_v_pad, ldv},
                        c.s);
    }
    c.ExpectStatesOver(nb, "converted");
  }
}

template <class E>
void CheckElement() {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  std::mt19937 rng(11);
  for (int64_t rows : {1, 2, 3, 4}) {
    if (rows >= lanes) continue;  // not decoding on this target
    for (int64_t heads_kv : {1, 3, 8}) {
      // 3 vectors: not whole blocks of 4, the streamed steps' general path.
      for (int64_t dim : {int64_t{64}, int64_t{128}, 3 * lanes}) {
        CheckShape<E>(d, rng, rows, heads_kv, dim);
      }
    }
  }
}

void TestDecodeStepsMatchTheModel() {
  CheckElement<F32Element>();
  CheckElement<F16Element>();
  CheckElement<BF16Element>();
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

class DecodeStepTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(DecodeStepTest);
SATTN_TEST_RUNS_ON_ITS_TARGET(DecodeStepTest)
HWY_EXPORT_AND_TEST_P(DecodeStepTest, TestDecodeStepsMatchTheModel);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
