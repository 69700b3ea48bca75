// The scalar side of softmax and softmax + top-k: the 64-bit candidate keys order by score,
// then lower index, over every kind of float; the candidate store keeps exactly the k best of
// any stream (random, tied, ascending) while pruning a bounded number of times; rows split into
// at most 64 parts that tile them; and folding part states with ⊕ gives the state of the whole
// row, with empty parts anywhere and NaN poisoning.
#include "cpu/topk_candidates.h"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu/softmax_rows.h"
#include "gtest/gtest.h"

namespace streamattn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(TopKKeyTest, OrdersByScoreThenLowerIndex) {
  const float values[] = {-kInf,  -FLT_MAX, -1.5f, -FLT_MIN, -1e-45f, -0.0f, 0.0f,
                          1e-45f, FLT_MIN,  1.0f,  1.5f,     FLT_MAX, kInf};
  const uint32_t indices[] = {0, 1, 7, 0x7FFFFFFEu};
  for (float a : values) {
    for (float b : values) {
      for (uint32_t i : indices) {
        for (uint32_t j : indices) {
          const bool a_first = a > b || (a == b && i < j);  // -0 == +0: the index decides
          EXPECT_EQ(TopKKey(a, i) > TopKKey(b, j), a_first)
              << a << "@" << i << " " << b << "@" << j;
        }
      }
      const uint64_t key = TopKKey(a, 12345);
      EXPECT_EQ(TopKKeyIndex(key), 12345);
      EXPECT_EQ(TopKKeyValue(key), a == 0.0f ? 0.0f : a);
      EXPECT_FALSE(std::signbit(TopKKeyValue(TopKKey(-0.0f, 0))));
    }
  }
}

// Feeds a stream to a store the way the SIMD side does (one candidate at a time, only those
// at or above the threshold) and returns the kept keys, best first.
std::vector<uint64_t> RunStore(const std::vector<float>& stream, size_t k, size_t* accepted) {
  constexpr size_t kLanes = 8;
  std::vector<uint8_t> buffer(CandidateStore::Bytes(k, kLanes));
  CandidateStore store;
  store.Init(buffer.data(), k, kLanes);
  *accepted = 0;
  for (size_t i = 0; i < stream.size(); ++i) {
    if (!(stream[i] >= store.threshold())) continue;
    store.MakeRoom(1);
    store.values()[0] = stream[i];
    store.indices()[0] = static_cast<int32_t>(i);
    store.Appended(1);
    ++*accepted;
  }
  size_t count;
  uint64_t* keys = store.Kept(&count);
  std::vector<uint64_t> kept(keys, keys + count);
  std::sort(kept.begin(), kept.end(), std::greater<uint64_t>());
  return kept;
}

std::vector<uint64_t> BruteForce(const std::vector<float>& stream, size_t k) {
  std::vector<uint64_t> all;
  for (size_t i = 0; i < stream.size(); ++i) all.push_back(TopKKey(stream[i], i));
  std::sort(all.begin(), all.end(), std::greater<uint64_t>());
  all.resize(std::min(k, all.size()));
  return all;
}

TEST(CandidateStoreTest, KeepsExactlyTheKBest) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> uniform(-5.0f, 5.0f);
  std::uniform_int_distribution<int> few(-3, 3);
  for (size_t k : {1, 2, 7, 100, 1024}) {
    for (int kind = 0; kind < 5; ++kind) {
      std::vector<float> stream(20000);
      for (size_t i = 0; i < stream.size(); ++i) {
        switch (kind) {
          case 0:
            stream[i] = uniform(rng);
            break;
          case 1:
            stream[i] = static_cast<float>(few(rng));
            break;  // ties everywhere
          case 2:
            stream[i] = static_cast<float>(i);
            break;  // every score accepted
          case 3:
            stream[i] = -kInf;
            break;
          case 4:
            stream[i] = i % 3 ? -kInf : (i % 2 ? -0.0f : 0.0f);
            break;
        }
      }
      size_t accepted;
      EXPECT_EQ(RunStore(stream, k, &accepted), BruteForce(stream, k))
          << "k=" << k << " kind=" << kind;
      if (kind == 0) {
        // Random order: about k ln(n / k) scores ever beat the threshold, not n.
        EXPECT_LT(accepted, 4 * k * std::log(20000.0 / k) + 4 * k + 64) << "k=" << k;
      }
    }
  }
}

// Two stores of one row sharing a bound, the later half of the row running first: the first
// half must still keep its scores equal to the second half's k-th best (they win on index).
TEST(CandidateStoreTest, SharedBoundKeepsTies) {
  constexpr size_t kLanes = 4;
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<int> few(0, 4);
  for (size_t k : {1, 5, 64}) {
    std::vector<float> stream(5000);
    for (float& x : stream) x = static_cast<float>(few(rng));
    std::atomic<float> bound(-kInf);
    std::vector<uint64_t> merged;
    for (size_t half : {1, 0}) {
      std::vector<uint8_t> buffer(CandidateStore::Bytes(k, kLanes));
      CandidateStore store;
      store.Init(buffer.data(), k, kLanes);
      store.Share(&bound);
      for (size_t i = half * 2500; i < (half + 1) * 2500; ++i) {
        if (!(stream[i] >= store.threshold())) continue;
        store.MakeRoom(1);
        store.values()[0] = stream[i];
        store.indices()[0] = static_cast<int32_t>(i);
        store.Appended(1);
      }
      size_t count;
      const uint64_t* keys = store.Kept(&count);
      merged.insert(merged.end(), keys, keys + count);
    }
    EXPECT_EQ(bound.load(), 4.0f);  // the second half's k-th best, published to the first
    merged.resize(KeepBestKeys(merged.data(), merged.size(), k));
    std::sort(merged.begin(), merged.end(), std::greater<uint64_t>());
    EXPECT_EQ(merged, BruteForce(stream, k)) << "k=" << k;
  }
}

TEST(RowSplitTest, PartsTileTheRow) {
  for (int64_t n :
       {int64_t{1}, int64_t{2047}, int64_t{16383}, int64_t{16384}, int64_t{16385}, int64_t{1000003},
        64 * RowSplit::kBlock, 64 * RowSplit::kBlock + 1, int64_t{2147483647}}) {
    const RowSplit split(n);
    EXPECT_GE(split.parts, 1);
    EXPECT_LE(split.parts, RowSplit::kMaxParts) << n;
    EXPECT_EQ(split.part_len % RowSplit::kBlock, 0);
    EXPECT_EQ(split.part_len % kSoftmaxChunk, 0);
    EXPECT_EQ(split.Begin(0), 0);
    for (int64_t p = 0; p < split.parts; ++p) {
      EXPECT_LT(split.Begin(p), split.End(p)) << "empty part " << p << " of n=" << n;
      if (p + 1 < split.parts) EXPECT_EQ(split.End(p), split.Begin(p + 1));
    }
    EXPECT_EQ(split.End(split.parts - 1), n);
  }
  EXPECT_EQ(RowSplit(1000003).parts, 62);  // parts of 16384 up to 64 of them
}

// The state of scores as ScoreState, in double then rounded.
ScoreState StateOf(const std::vector<float>& s, float c) {
  ScoreState state;
  for (float x : s) state.max = std::max(state.max, x);
  if (state.max == -kInf) return state;
  double l = 0.0;
  for (float x : s) l += std::exp2((static_cast<double>(x) - state.max) * c);
  state.l = static_cast<float>(l);
  return state;
}

TEST(FoldPartsTest, EqualsTheStateOfTheWholeRow) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> uniform(-30.0f, 30.0f);
  const float c = 1.4426950408889634f / 0.7f;
  for (int parts = 1; parts <= 6; ++parts) {
    for (int empty = -1; empty < parts; ++empty) {
      std::vector<float> all;
      std::vector<ScoreState> states;
      for (int p = 0; p < parts; ++p) {
        std::vector<float> piece(1 + rng() % 50);
        for (float& x : piece)
          x = p == empty ? -kInf : uniform(rng) + 1e30f * (p == 0 && empty == -1);
        all.insert(all.end(), piece.begin(), piece.end());
        states.push_back(StateOf(piece, c));
      }
      const ScoreState want = StateOf(all, c);
      const ScoreState got = FoldParts(states.data(), parts, c);
      EXPECT_EQ(got.max, want.max);
      EXPECT_NEAR(got.l, want.l, 1e-6 * want.l) << parts << " parts, empty " << empty;
    }
  }
  ScoreState empty_parts[3];
  const ScoreState none = FoldParts(empty_parts, 3, c);
  EXPECT_EQ(none.max, -kInf);
  EXPECT_EQ(none.l, 0.0f);
  EXPECT_EQ(FinishRow(none, 1.0f).kind, RowFinish::kEmpty);
  EXPECT_EQ(FinishRow(none, 1.0f).lse, -std::numeric_limits<double>::infinity());

  ScoreState poisoned[3] = {StateOf({1.0f, 2.0f}, c), ScoreState(), StateOf({3.0f}, c)};
  poisoned[1].max = poisoned[1].l = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(FoldParts(poisoned, 3, c).l));
  EXPECT_EQ(FinishRow(FoldParts(poisoned, 3, c), 1.0f).kind, RowFinish::kNaN);
}

TEST(FinishRowTest, LseOfHugeScoresKeepsItsDigits) {
  // lse = max / T + ln l computed in double: for scores near 1e30 the f32 max is exact.
  ScoreState s;
  s.max = 1e30f;
  s.l = 2.0f;
  const RowFinish f = FinishRow(s, 1.0f);
  EXPECT_EQ(f.kind, RowFinish::kNormal);
  EXPECT_EQ(f.lse, static_cast<double>(1e30f) + std::log(2.0));
  EXPECT_EQ(f.inv_l, 0.5f);
}

}  // namespace
}  // namespace streamattn
