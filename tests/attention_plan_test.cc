// The attention plan (cpu/attention_plan-inl.h) and the worker scratch laid out from it
// (cpu/attention_scratch-inl.h), on every compiled target: which driver a shape takes, tile and
// panel shapes that fit the work, and a scratch layout whose typed arrays are aligned, disjoint,
// inside the buffer and as long as the drivers read.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention_plan_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "compiled_target-inl.h"
#include "cpu/attention_plan-inl.h"
#include "cpu/attention_scratch-inl.h"
#include "hwy/tests/hwy_gtest.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace streamattn {
namespace HWY_NAMESPACE {

// A contiguous [batch, seq, heads, dim] view of no data: the plan reads only shapes, strides
// and dtypes.
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

const std::pair<int64_t, int64_t> kHeadShapes[] = {{8, 8}, {32, 8}, {32, 2}, {32, 1}};

// Calls check(args, plan, rows per kv head of a work item) for decoding and prefill lengths
// of seq_q over the head shapes above, head_dim 128 in f16.
template <class D, class Check>
void ForEachQueryShape(D d, const Check& check) {
  for (int64_t seq_q : {1, 2, 3, 4, 5, 8, 12, 16, 200}) {
    for (auto [hq, hkv] : kHeadShapes) {
      const AttentionArgs a = ArgsOf(seq_q, hq, hkv, 128, DType::kF16);
      const AttentionPlan c = MakeAttentionPlan(d, a);
      check(a, c, static_cast<size_t>(c.positions * a.group));
    }
  }
}

// Decode exactly when a work item has fewer rows per kv head than lanes; its work items then
// hold every kv head and all of seq_q, and only decode reads the cache in place.
void TestPathFollowsRowsPerHead() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  ForEachQueryShape(d, [&](const AttentionArgs& a, const AttentionPlan& c, size_t rows) {
    EXPECT_EQ(c.decode(), rows < lanes) << a.seq_q << " x " << a.heads_q << "/" << a.heads_kv;
    if (!c.decode()) {
      EXPECT_FALSE(c.cache_in_place);
      return;
    }
    EXPECT_EQ(c.heads, a.heads_kv);
    EXPECT_EQ(c.positions, a.seq_q);
    EXPECT_EQ(c.rows_pad, lanes) << "one panel";
    EXPECT_EQ(c.cache_in_place, kNativeF16);
    if (c.stream_tiles) EXPECT_TRUE(kStreamTilesOnTarget && c.packed_scores && rows <= 4);
  });
  EXPECT_FALSE(MakeAttentionPlan(d, ArgsOf(4096, 8, 8, 128, DType::kBF16)).decode());
}

// GEMM score panels are as few vectors wide as pad a work item's rows least (decoding's 16 or
// 32 rows per kv head must not pad to the prefill's 48), and decoding tiles of several kv
// heads hold at least kDecodeHeadTileBytes of K rows per head.
void TestTileShapesFitTheWork() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  ForEachQueryShape(d, [&](const AttentionArgs&, const AttentionPlan& c, size_t rows) {
    ASSERT_EQ(c.panel_rows, c.panel_vectors * lanes);
    ASSERT_EQ(c.rows_pad % c.panel_rows, 0u);
    if (c.decode()) return;
    size_t least = RoundUp(rows, kNvS * lanes);
    for (size_t nv = 1; nv < kNvS; ++nv) least = std::min(least, RoundUp(rows, nv * lanes));
    EXPECT_EQ(c.rows_pad, least) << rows << " rows";
    EXPECT_GE(c.panel_vectors, 1u);
    EXPECT_LE(c.panel_vectors, kNvS);
  });
  // The prefill's items of 384 rows keep the widest panels.
  const AttentionPlan long_plan = MakeAttentionPlan(d, ArgsOf(4096, 32, 8, 128, DType::kF16));
  EXPECT_EQ(long_plan.panel_vectors, kNvS);
  // An item with fewer rows under that plan (a short prompt packed beside a long one) computes
  // its rows to the next whole vector, not to the next whole panel.
  for (size_t rows : {size_t{1}, lanes - 1, lanes, lanes + 1, long_plan.panel_rows + 1,
                      long_plan.panel_rows + lanes, 2 * long_plan.panel_rows}) {
    const size_t panels = (rows + long_plan.panel_rows - 1) / long_plan.panel_rows;
    size_t computed = 0;
    for (size_t p = 0; p < panels; ++p) {
      const size_t width = long_plan.PanelWidth(rows, p);
      EXPECT_EQ(width % lanes, 0u) << rows << " rows, panel " << p;
      EXPECT_LE(width, long_plan.panel_rows) << rows << " rows, panel " << p;
      computed += width;
    }
    EXPECT_EQ(computed, RoundUp(rows, lanes)) << rows << " rows";
    EXPECT_EQ(long_plan.FilledRows(rows), RoundUp(rows, lanes)) << rows << " rows";
  }
  for (DType kv : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (int64_t dim : {64, 128, 256}) {
      const AttentionPlan c = MakeAttentionPlan(d, ArgsOf(1, 32, 8, dim, kv));
      ASSERT_EQ(c.heads, 8);
      const size_t row_bytes =
          static_cast<size_t>(ElementBytes(kv, static_cast<int64_t>(c.dim_pad)));
      EXPECT_GE(c.keys_per_tile * row_bytes, std::min(kDecodeHeadTileBytes, 16 * row_bytes));
      EXPECT_LE(c.keys_per_tile, kKeysPerTile);
      EXPECT_EQ(c.keys_per_tile % 8, 0u);
    }
  }
}

// A byte range of the layout: [begin, end).
struct Range {
  size_t begin, end;
  const char* name;
};

template <typename T>
Range RangeOf(const ScratchSlot<T>& slot, size_t base, const char* name) {
  return Range{base + slot.offset, base + slot.offset + slot.count * sizeof(T), name};
}

// Every array on a cache line, none overlapping another, all inside `bytes`, each as long as
// the drivers index it; and Bind hands out exactly those addresses.
void CheckLayout(const AttentionPlan& plan) {
  const AttentionScratchLayout s = MakeAttentionScratchLayout(plan);
  const size_t R = plan.rows_pad, heads = static_cast<size_t>(plan.heads);
  std::vector<Range> ranges = {RangeOf(s.k_tile, 0, "k_tile"),
                               RangeOf(s.v_tile, 0, "v_tile"),
                               RangeOf(s.scores, 0, "scores"),
                               RangeOf(s.alpha, 0, "alpha"),
                               RangeOf(s.lo_rel, 0, "lo_rel"),
                               RangeOf(s.hi_rel, 0, "hi_rel"),
                               RangeOf(s.diagonal_rel, 0, "diagonal_rel"),
                               RangeOf(s.row, 0, "row"),
                               RangeOf(s.lo, 0, "lo"),
                               RangeOf(s.hi, 0, "hi"),
                               RangeOf(s.panel_active, 0, "panel_active"),
                               RangeOf(s.panel_partial, 0, "panel_partial"),
                               RangeOf(s.panel_covered, 0, "panel_covered"),
                               RangeOf(s.row_pointers, 0, "row_pointers")};
  for (size_t h = 0; h < heads; ++h) {
    const size_t block = s.head_block + h * s.head_bytes;
    for (Range r :
         {RangeOf(s.head_q, block, "head q"), RangeOf(s.head_o, block, "head o"),
          RangeOf(s.head_m, block, "head m"), RangeOf(s.head_l, block, "head l"),
          RangeOf(s.head_slope2, block, "head slope2"), RangeOf(s.head_q8, block, "head q8"),
          RangeOf(s.head_q8_bias, block, "head q8 bias"),
          RangeOf(s.head_q8_scale, block, "head q8 scale")}) {
      ranges.push_back(r);
    }
  }
  for (const Range& r : ranges) {
    EXPECT_EQ(r.begin % 64, 0u) << r.name;
    EXPECT_LE(r.end, s.bytes) << r.name;
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (size_t j = i + 1; j < ranges.size(); ++j) {
      const bool apart = ranges[i].end <= ranges[j].begin || ranges[j].end <= ranges[i].begin ||
                         ranges[i].begin == ranges[i].end || ranges[j].begin == ranges[j].end;
      EXPECT_TRUE(apart) << ranges[i].name << " overlaps " << ranges[j].name;
    }
  }
  const size_t kpt = plan.keys_per_tile;
  EXPECT_GE(s.k_tile.count, heads * kpt * plan.dim_pad);
  EXPECT_GE(s.v_tile.count, heads * kpt * plan.dim_v_pad);
  EXPECT_GE(s.scores.count, kpt * R);
  if (plan.packed_scores) EXPECT_GE(s.scores.count, 2 * heads * plan.packed_st_stride);
  EXPECT_GE(s.alpha.count, std::max<size_t>(2, heads) * R);
  EXPECT_GE(s.lo.count, R);
  EXPECT_GE(s.panel_active.count, R / plan.panel_rows);
  EXPECT_GE(s.row.count, std::max(plan.dim_pad, plan.dim_v_pad));
  EXPECT_GE(s.head_q.count, R * plan.dim_pad);
  EXPECT_GE(s.head_o.count, R * plan.dim_v_pad);
  if (plan.int8_scores) {  // QuantizeQueryRows' output (decode/int8_scores-inl.h)
    EXPECT_GE(s.head_q8.count, R * plan.dim_pad);
    EXPECT_GE(s.head_q8_bias.count, R * plan.dim_pad / 8);
    EXPECT_GE(s.head_q8_scale.count, R);
  }
  if (plan.cache_in_place) {
    EXPECT_GE(s.row_pointers.count, 4 * (kpt + kStreamStepKeys) * sizeof(const void*));
  }
  std::vector<unsigned char> buffer(s.bytes + 64);
  unsigned char* base = buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64;
  const AttentionScratch bound = s.Bind(base);
  EXPECT_EQ(static_cast<void*>(bound.scores), base + s.scores.offset);
  EXPECT_EQ(static_cast<void*>(bound.lo), base + s.lo.offset);
  EXPECT_EQ(static_cast<void*>(bound.RowPointers<float>()), base + s.row_pointers.offset);
  const HeadScratch last = bound.Head(plan.heads - 1);
  EXPECT_EQ(static_cast<void*>(last.o),
            base + s.head_block + (heads - 1) * s.head_bytes + s.head_o.offset);
}

void TestScratchLayoutIsTypedAndDisjoint() {
  const hn::ScalableTag<float> d;
  for (int64_t seq_q : {1, 4, 200, 4096}) {
    for (auto [hq, hkv] : kHeadShapes) {
      for (DType kv : {DType::kF16, DType::kF32}) {
        for (int64_t dim : {64, 96, 128})
          CheckLayout(MakeAttentionPlan(d, ArgsOf(seq_q, hq, hkv, dim, kv)));
      }
    }
  }
}

// MLA after weight absorption (DeepSeek-V2/V3, Kimi K2): one latent kv head of 576 channels,
// V its first 512, 16 or 128 query heads. Decoding one position is a GEMM of 16 or 128 rows per
// kv head, so it takes the prefill driver; V as a view of K's leading channels is seen as such
// (V rows taken from the converted K tile), a separate V is not; and the worker's scratch stays
// bounded and independent of the cache length.
void TestMlaShapes() {
  const hn::ScalableTag<float> d;
  for (int64_t heads_q : {16, 128}) {
    for (DType kv : {DType::kBF16, DType::kF16, DType::kF32}) {
      AttentionArgs a = ArgsOf(1, heads_q, 1, 576, kv);
      a.head_dim_v = 512;
      a.v = a.k, a.v.shape[3] = 512;  // a view of k's leading channels
      AttentionPlan c = MakeAttentionPlan(d, a);
      EXPECT_FALSE(c.decode()) << heads_q << " rows per kv head";
      EXPECT_TRUE(c.values_in_key_tile);
      EXPECT_EQ(c.dim_pad, RoundUp(576, c.lanes));
      EXPECT_EQ(c.dim_v_pad, RoundUp(512, c.lanes));
      CheckLayout(c);
      const size_t bytes = MakeAttentionScratchLayout(c).bytes;
      EXPECT_LE(bytes, size_t{4} << 20);
      a.seq_k = 1 << 20;
      EXPECT_EQ(MakeAttentionScratchLayout(MakeAttentionPlan(d, a)).bytes, bytes);
      // The same shapes in a second buffer (or at another offset) are two tensors.
      a.v = ShapeOnly(kv, a.seq_k, 1, 512);
      a.v.strides[2] = a.k.strides[2], a.v.strides[1] = a.k.strides[1];
      a.v.data = reinterpret_cast<void*>(uintptr_t{64});
      EXPECT_FALSE(MakeAttentionPlan(d, a).values_in_key_tile);
    }
  }
  // Prefill at the widest rows keeps work items of 192 rows (one position of 128 heads), whose
  // scratch stays under 2 MiB; heads of 128 channels take 384.
  AttentionArgs a = ArgsOf(4096, 128, 1, 576, DType::kBF16);
  a.head_dim_v = 512, a.v = a.k, a.v.shape[3] = 512;
  const AttentionPlan wide = MakeAttentionPlan(d, a);
  CheckLayout(wide);
  EXPECT_EQ(wide.positions, 1);
  EXPECT_LE(MakeAttentionScratchLayout(wide).bytes, size_t{2} << 20);
  const AttentionPlan narrow = MakeAttentionPlan(d, ArgsOf(4096, 8, 8, 128, DType::kBF16));
  const AttentionPlan narrow256 = MakeAttentionPlan(d, ArgsOf(4096, 8, 8, 256, DType::kBF16));
  if (kSpreadScoreRows) {  // fewer, as TestItemRowsSpreadScoresOverL1Sets checks
    EXPECT_GT(narrow.positions, 192);
    EXPECT_LE(narrow.positions, 384);
    EXPECT_GT(narrow256.positions, 96);
    EXPECT_LE(narrow256.positions, 192);
  } else {
    EXPECT_EQ(narrow.positions, 384);
    EXPECT_EQ(narrow256.positions, 192);
  }
}

// Prefill's items of several per call take the target's rows, or on x86 below AVX-512 the most
// rows above half of them whose S^T rows are not a multiple of 128 bytes apart (and so spread
// over L1's sets), in whole widest panels. An item that is the whole call keeps its rows.
void TestItemRowsSpreadScoresOverL1Sets() {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d), panel = kNvS * lanes;
  auto spread = [](size_t rows_pad) { return rows_pad * sizeof(float) % 128 != 0; };
  size_t changed = 0;
  for (int64_t dim : {64, 128, 256}) {
    for (int64_t group : {1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64}) {
      const int64_t target = std::max<int64_t>(1, TargetRows(dim, dim) / group);
      const AttentionPlan c = MakeAttentionPlan(d, ArgsOf(8192, 8 * group, 8, dim, DType::kF16));
      SCOPED_TRACE(::testing::Message() << "dim " << dim << ", group " << group);
      if (!kSpreadScoreRows || spread(RoundUp(static_cast<size_t>(target * group), panel))) {
        EXPECT_EQ(c.positions, target);
        continue;
      }
      // No candidate between the one chosen and the target qualifies.
      auto qualifies = [&](int64_t positions) {
        const size_t rows = static_cast<size_t>(positions * group);
        return positions > target / 2 && rows % panel == 0 && spread(rows);
      };
      for (int64_t p = c.positions + 1; p < target; ++p) EXPECT_FALSE(qualifies(p)) << p;
      if (c.positions == target) continue;  // none qualifies
      ++changed;
      EXPECT_TRUE(qualifies(c.positions)) << c.positions;
      EXPECT_EQ(c.panel_vectors, kNvS);
      EXPECT_EQ(c.rows_pad, static_cast<size_t>(c.positions * group));
      EXPECT_TRUE(spread(c.rows_pad)) << c.rows_pad;
    }
  }
  // 384 rows of head_dim 128 in panels of 3 vectors are 1536 bytes apart: always changed there.
  EXPECT_EQ(changed > 0, kSpreadScoreRows);
  // One item per call: its rows, whatever their stride (384 positions of one kv head).
  EXPECT_EQ(MakeAttentionPlan(d, ArgsOf(384, 8, 8, 128, DType::kF16)).positions, 384);
}

}  // namespace HWY_NAMESPACE
}  // namespace streamattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace streamattn {
namespace {

class AttentionPlanTest : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(AttentionPlanTest);
SATTN_TEST_RUNS_ON_ITS_TARGET(AttentionPlanTest)
HWY_EXPORT_AND_TEST_P(AttentionPlanTest, TestPathFollowsRowsPerHead);
HWY_EXPORT_AND_TEST_P(AttentionPlanTest, TestTileShapesFitTheWork);
HWY_EXPORT_AND_TEST_P(AttentionPlanTest, TestScratchLayoutIsTypedAndDisjoint);
HWY_EXPORT_AND_TEST_P(AttentionPlanTest, TestMlaShapes);
HWY_EXPORT_AND_TEST_P(AttentionPlanTest, TestItemRowsSpreadScoresOverL1Sets);

}  // namespace
}  // namespace streamattn
#endif  // HWY_ONCE
