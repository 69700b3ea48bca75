// The shard mask plan against the oracle's KeyVisible: for every split of a short sequence into
// a shard, every mask, every query and key, the shard's call (its rows and window, as
// sattn_attention reads them over the shard alone) shows exactly the keys the global mask
// shows. Needs no MPI to run.
#include "mpi/shard_mask.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "reference/reference_attention.h"

namespace streamattn {
namespace mpi {
namespace {

using reference::AttentionSpec;
using reference::KeyVisible;

TEST(ShardMask, EveryShardSeesExactlyItsGloballyVisibleKeys) {
  const int64_t bounds[] = {-1, 0, 1, 2, 3, 5, 9};
  int64_t checked = 0;
  for (int64_t total = 0; total <= 9; ++total) {
    for (int64_t seq_q = 1; seq_q <= 11; ++seq_q) {
      for (int causal = 0; causal <= 1; ++causal) {
        for (int64_t left : bounds) {
          for (int64_t right : bounds) {
            AttentionSpec global;
            global.causal = causal;
            global.window_left = left;
            global.window_right = right;
            const GlobalMask mask = CanonicalMask(causal, true, left, right);
            for (int64_t offset = 0; offset <= total; ++offset) {
              for (int64_t n = 1; offset + n <= total; ++n) {
                const ShardCall call = PlanShardCall(mask, seq_q, total - offset - n);
                ASSERT_GE(call.rows, 0);
                ASSERT_LE(call.rows, seq_q);
                AttentionSpec local;  // sattn_attention over rows [0, call.rows) of the shard
                if (call.has_window) {
                  ASSERT_GE(call.window_left, -1);
                  ASSERT_GE(call.window_right, -1);
                  local.window_left = call.window_left;
                  local.window_right = call.window_right;
                }
                for (int64_t i = 0; i < seq_q; ++i) {
                  for (int64_t l = 0; l < n; ++l) {
                    const bool want = KeyVisible(i, offset + l, seq_q, total, global);
                    const bool got = i < call.rows && KeyVisible(i, l, call.rows, n, local);
                    ASSERT_EQ(got, want)
                        << "total=" << total << " seq_q=" << seq_q << " causal=" << causal
                        << " left=" << left << " right=" << right << " offset=" << offset
                        << " n=" << n << " query " << i << " key " << offset + l;
                    ++checked;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000000);
}

TEST(ShardMask, NoMaskNeedsNoWindow) {
  const ShardCall call = PlanShardCall(CanonicalMask(false, false, 3, 4), 7, 100);
  EXPECT_FALSE(call.has_window);
  EXPECT_EQ(call.rows, 7);
}

TEST(ShardMask, HugeRightBoundSaturatesToUnbounded) {
  const int64_t huge = std::numeric_limits<int64_t>::max() - 1;
  const ShardCall call = PlanShardCall(CanonicalMask(false, true, -1, huge), 4, 1000);
  EXPECT_TRUE(call.has_window);
  EXPECT_EQ(call.window_right, -1);
  EXPECT_EQ(call.rows, 4);
}

}  // namespace
}  // namespace mpi
}  // namespace streamattn
