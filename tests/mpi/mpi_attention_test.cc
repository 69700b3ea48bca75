// streamattn_mpi under mpirun (1 to 4 ranks): every result equals single-process
// sattn_attention over the concatenated keys within 1e-6 (f32), and the double oracle within
// the suite's usual tolerance; for even, uneven and empty shards, causal masks, windows, sinks,
// masks, ragged caches and decoding; the same bytes on every rank and on a second run; errors
// agreed by every rank. Every rank runs every test and every collective: no ASSERT may skip one.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mpi_case.h"
#include "streamattn/streamattn_mpi.h"
#include "test_util.h"

namespace streamattn {
namespace mpi_testing {
namespace {

using testing_util::ScopedContext;

constexpr Split kSplits[] = {Split::kEven, Split::kUneven, Split::kEmptyFirst, Split::kEmptyMiddle,
                             Split::kAllOnLast};

// Runs the case sharded twice, then checks reproducibility, equality across ranks, and the
// result against single-process sattn_attention and the oracle.
void CheckCase(const ShardedCase& c) {
  SCOPED_TRACE(c.Describe());
  ScopedContext ctx(1);
  const Outcome first = RunSharded(ctx.get(), MPI_COMM_WORLD, c);
  const Outcome second = RunSharded(ctx.get(), MPI_COMM_WORLD, c);
  EXPECT_EQ(first.status, SATTN_OK) << first.error;
  EXPECT_TRUE(first.bytes == second.bytes) << "a second run gave other bytes";
  std::vector<uint8_t> reference = first.bytes;
  MPI_Bcast(reference.data(), static_cast<int>(reference.size()), MPI_BYTE, c.decode ? c.root : 0,
            MPI_COMM_WORLD);
  if (!first.has_result || first.status != SATTN_OK) return;
  EXPECT_TRUE(first.bytes == reference) << "rank " << Rank() << " got other bytes";

  const Outcome single = RunSingleProcess(ctx.get(), c);
  EXPECT_EQ(single.status, SATTN_OK) << single.error;
  const reference::AttentionResult oracle = RunOracle(c);
  const double single_out = OutError(first.out, single.out);
  const double single_lse = LseError(first.lse, single.lse);
  const double oracle_out = OutError(first.out, oracle.out);
  const double oracle_lse = LseError(first.lse, oracle.lse);
  const bool f32 = c.out_dtype == SATTN_DTYPE_F32;
  EXPECT_LE(single_out, f32 ? 1e-6 : 1e-3);  // f16/bf16: one rounding of a last-bit difference
  EXPECT_LE(single_lse, 1e-6);
  EXPECT_LE(oracle_out, f32 ? 2e-5 : 8e-3);
  EXPECT_LE(oracle_lse, 2e-5);
  if (!f32) return;
  Figures& f = RecordedFigures();
  ++f.cases;
  f.single_out = std::max(f.single_out, single_out);
  f.single_lse = std::max(f.single_lse, single_lse);
  f.oracle_out = std::max(f.oracle_out, oracle_out);
  f.oracle_lse = std::max(f.oracle_lse, oracle_lse);
  if (first.out.data == single.out.data && first.lse.data == single.lse.data) {
    ++f.bitwise_equal_to_single;
  }
}

ShardedCase Base(int64_t keys, Split split, uint64_t seed) {
  ShardedCase c;
  c.shard_keys = SplitKeys(keys, Size(), split);
  c.seed = seed;
  return c;
}

TEST(MpiAttention, MatchesSingleProcessForEverySplit) {
  uint64_t seed = 1;
  for (Split split : kSplits) {
    SCOPED_TRACE(SplitName(split));
    CheckCase(Base(37, split, seed++));
    ShardedCase mha = Base(200, split, seed++);  // MHA, head_dim_v != head_dim, one sequence
    mha.batch = 1;
    mha.heads_q = mha.heads_kv = 3;
    mha.head_dim = 64;
    mha.head_dim_v = 40;
    mha.seq_q = 20;
    CheckCase(mha);
  }
}

TEST(MpiAttention, CausalMasksUseEachShardsGlobalOffset) {
  uint64_t seed = 100;
  for (Split split : kSplits) {
    SCOPED_TRACE(SplitName(split));
    for (int64_t seq_q : {29, 7, 1}) {  // square prefill, a chunk of queries, one query
      ShardedCase c = Base(29 + (seq_q == 7 ? 21 : 0), split, seed++);
      c.seq_q = seq_q;
      c.causal = true;
      CheckCase(c);
    }
    ShardedCase more_queries = Base(6, split, seed++);  // the first rows see no key at all
    more_queries.seq_q = 9;
    more_queries.causal = true;
    CheckCase(more_queries);
  }
}

TEST(MpiAttention, WindowsDropTheRowsThatSeeNoneOfAShard) {
  uint64_t seed = 200;
  const int64_t windows[][2] = {{3, 0}, {0, 0}, {5, 2}, {-1, 4}, {11, -1}};
  for (Split split : kSplits) {
    SCOPED_TRACE(SplitName(split));
    for (const auto& w : windows) {
      ShardedCase c = Base(40, split, seed++);
      c.seq_q = 12;
      c.has_window = true;
      c.window_left = w[0];
      c.window_right = w[1];
      c.causal = w[1] == 0 && w[0] == 3;
      CheckCase(c);
    }
  }
}

TEST(MpiAttention, SinksSoftcapMasksAndHalfPrecision) {
  uint64_t seed = 300;
  for (Split split : {Split::kUneven, Split::kEmptyFirst, Split::kAllOnLast}) {
    SCOPED_TRACE(SplitName(split));
    ShardedCase sinks = Base(33, split, seed++);
    sinks.sinks = true;
    sinks.softcap = 3.0f;
    sinks.causal = true;
    sinks.q_range = 6.0;
    CheckCase(sinks);
    ShardedCase mask = Base(45, split, seed++);  // a mask whose rows the window trims
    mask.mask = true;
    mask.seq_q = 10;
    mask.has_window = true;
    mask.window_left = 4;
    mask.window_right = 1;
    CheckCase(mask);
    ShardedCase f16 = Base(64, split, seed++);
    f16.kv_dtype = SATTN_DTYPE_F16;
    f16.causal = true;
    f16.seq_q = 16;
    CheckCase(f16);
    ShardedCase bf16 = f16;
    bf16.kv_dtype = SATTN_DTYPE_BF16;
    bf16.out_dtype = SATTN_DTYPE_F16;
    CheckCase(bf16);
  }
}

TEST(MpiAttention, RaggedShardsWithSequsedK) {
  std::mt19937_64 rng(7);  // the same draws on every rank
  for (int trial = 0; trial < 3; ++trial) {
    ShardedCase c = Base(0, Split::kEven, 400 + trial);
    c.batch = 3;
    c.seq_q = 4;
    c.causal = trial != 1;
    c.has_window = trial == 2;
    c.window_left = 6;
    c.shard_keys.assign(Size(), 0);
    c.used.assign(Size(), std::vector<int64_t>(c.batch, 0));
    for (int r = 0; r < Size(); ++r) {
      c.shard_keys[r] = 1 + static_cast<int64_t>(rng() % 20);
      for (int64_t b = 0; b < c.batch; ++b) {
        c.used[r][b] = static_cast<int64_t>(rng() % (c.shard_keys[r] + 1));  // 0 included
      }
    }
    CheckCase(c);
  }
}

TEST(MpiAttention, EveryShardEmptyGivesTheIdentity) {
  for (bool sinks : {false, true}) {
    ShardedCase c = Base(0, Split::kEven, 500);
    c.sinks = sinks;
    c.causal = true;
    CheckCase(c);
    ScopedContext ctx(1);
    const Outcome o = RunSharded(ctx.get(), MPI_COMM_WORLD, c);
    for (double x : o.out.data) EXPECT_EQ(x, 0.0);
    for (int64_t i = 0; i < o.lse.size(); ++i) {
      const int64_t h = (i / c.seq_q) % c.heads_q;
      EXPECT_EQ(o.lse.data[i], sinks ? 0.5 * h - 1.0 : -INFINITY);
    }
  }
}

TEST(MpiDecode, QueryFromRootResultOnRoot) {
  uint64_t seed = 600;
  for (Split split : {Split::kUneven, Split::kEmptyFirst, Split::kEmptyMiddle}) {
    SCOPED_TRACE(SplitName(split));
    ShardedCase c = Base(300, split, seed++);
    c.decode = true;
    c.root = Size() - 1;
    c.batch = 3;
    c.seq_q = 1;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.head_dim = 64;
    c.kv_dtype = SATTN_DTYPE_F16;
    CheckCase(c);
    ShardedCase speculative = c;  // a few draft tokens, causal over the whole cache
    speculative.seq_q = 4;
    speculative.causal = true;
    speculative.root = 0;
    speculative.seed = seed++;
    CheckCase(speculative);
  }
}

// One rank's crafted records through sattn_mpi_merge_op_create and MPI_Allreduce, against
// sattn_merge_states over every rank's parts: finite rows agree to rounding; empty, NaN and
// all-empty rows exactly.
TEST(MpiMergeOp, MergesRecordsAsMergeStatesDoes) {
  const int size = Size(), rank = Rank();
  const int64_t dim = 5, rows = 6;
  auto make = [&](int r, std::vector<float>* records) {
    std::mt19937_64 rng(900 + r);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    records->assign(rows * (dim + 1), 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      float* rec = records->data() + i * (dim + 1);
      for (int64_t j = 0; j <= dim; ++j) rec[j] = u(rng);
      if (i == 1 && r % 2 == 0) rec[0] = -INFINITY;            // some parts empty
      if (i == 2) rec[0] = -INFINITY;                          // every part empty
      if (i == 3 && r == size - 1) rec[0] = NAN;               // one NaN part
      if (i == 4 && r == 0) rec[1] = NAN, rec[0] = -INFINITY;  // garbage in an empty part
      if (i == 5) rec[0] = 80.0f + r;                          // exp would overflow without max
    }
  };
  std::vector<float> mine;
  make(rank, &mine);
  MPI_Datatype record;
  MPI_Op op;
  ASSERT_EQ(sattn_mpi_merge_op_create(dim, &record, &op), SATTN_OK);
  std::vector<float> merged = mine;
  MPI_Allreduce(MPI_IN_PLACE, merged.data(), rows, record, op, MPI_COMM_WORLD);
  MPI_Op_free(&op);
  MPI_Type_free(&record);

  ScopedContext ctx(1);
  std::vector<std::vector<float>> parts(size);
  std::vector<sattn_tensor> o_parts, lse_parts;
  for (int r = 0; r < size; ++r) {
    make(r, &parts[r]);
    const int64_t o_shape[4] = {1, rows, 1, dim}, lse_shape[3] = {1, 1, rows};
    sattn_tensor o = sattn_tensor_contiguous(parts[r].data() + 1, SATTN_DTYPE_F32, 4, o_shape);
    o.strides[1] = dim + 1;
    sattn_tensor l = sattn_tensor_contiguous(parts[r].data(), SATTN_DTYPE_F32, 3, lse_shape);
    l.strides[2] = dim + 1;
    o_parts.push_back(o);
    lse_parts.push_back(l);
  }
  std::vector<float> out(rows * dim), lse(rows);
  const int64_t o_shape[4] = {1, rows, 1, dim}, lse_shape[3] = {1, 1, rows};
  const sattn_tensor out_view = sattn_tensor_contiguous(out.data(), SATTN_DTYPE_F32, 4, o_shape);
  const sattn_tensor lse_view = sattn_tensor_contiguous(lse.data(), SATTN_DTYPE_F32, 3, lse_shape);
  ASSERT_EQ(
      sattn_merge_states(ctx.get(), size, o_parts.data(), lse_parts.data(), &out_view, &lse_view),
      SATTN_OK)
      << sattn_last_error();
  for (int64_t i = 0; i < rows; ++i) {
    const float* rec = merged.data() + i * (dim + 1);
    if (std::isnan(lse[i])) {
      EXPECT_TRUE(std::isnan(rec[0])) << "row " << i;
      for (int64_t j = 0; j < dim && size > 1; ++j) {  // one rank: the record as given
        EXPECT_TRUE(std::isnan(rec[1 + j])) << "row " << i;
      }
      continue;
    }
    if (lse[i] == -INFINITY) {  // all parts empty: zeros once merged (one rank merges nothing)
      EXPECT_EQ(rec[0], lse[i]) << "row " << i;
      for (int64_t j = 0; j < dim && size > 1; ++j) EXPECT_EQ(rec[1 + j], 0.0f) << "row " << i;
      continue;
    }
    if (std::isinf(lse[i])) {
      EXPECT_EQ(rec[0], lse[i]) << "row " << i;
    } else {
      EXPECT_NEAR(rec[0], lse[i], 1e-6 * std::max(1.0f, std::fabs(lse[i]))) << "row " << i;
    }
    for (int64_t j = 0; j < dim; ++j) {
      EXPECT_NEAR(rec[1 + j], out[i * dim + j], 1e-6) << "row " << i << " col " << j;
      EXPECT_FALSE(std::isnan(rec[1 + j])) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace mpi_testing
}  // namespace streamattn
