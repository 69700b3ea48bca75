// The global causal mask and window of a sharded attention, said with sattn_attention's own
// options for one shard, so no kernel needs to know about shards.
//
// sattn_attention aligns masks to its own keys: query i of seq_q sees local key l when
//   i + n - seq_q - window_left <= l <= i + n - seq_q + window_right   (n: the shard's keys).
// Globally, a shard holding keys [off, off + n) of S must show query i the keys j = off + l with
//   i + S - seq_q - wl <= j <= i + S - seq_q + wr,
// i.e. the local diagonal moves right by after = S - off - n, the keys that follow the shard.
// Both bounds are then the caller's plus `after`: window_right + after, window_left - after.
// A right bound only grows, so it always fits. A left bound below zero cannot be said (-1
// means unbounded), but then a trailing block of queries sees none of the shard: dropping the
// last t query rows (a view of rows [0, seq_q - t)) moves the diagonal right by t as well, so
// taking t = after - wl leaves a left bound of exactly 0, and the dropped rows contribute the
// identity. ALiBi would need the same shift inside the kernel, so it is not supported.
#ifndef STREAMATTN_MPI_SHARD_MASK_H_
#define STREAMATTN_MPI_SHARD_MASK_H_

#include <algorithm>
#include <cstdint>

namespace streamattn {
namespace mpi {

// The caller's mask, made canonical: causal folded into the right bound (-1: unbounded).
struct GlobalMask {
  int64_t window_left = -1;
  int64_t window_right = -1;
};

inline GlobalMask CanonicalMask(bool causal, bool has_window, int64_t window_left,
                                int64_t window_right) {
  GlobalMask m;
  if (has_window) {
    m.window_left = window_left;
    m.window_right = window_right;
  }
  if (causal) m.window_right = m.window_right < 0 ? 0 : std::min<int64_t>(m.window_right, 0);
  return m;
}

// One shard's sattn_attention call: query rows [0, rows) with the given window; rows
// [rows, seq_q) see no key of the shard. rows == 0: the shard contributes only the identity.
struct ShardCall {
  int64_t rows = 0;
  bool has_window = false;
  int64_t window_left = -1;
  int64_t window_right = -1;
};

// after = keys of the sequence that follow the shard (>= 0).
inline ShardCall PlanShardCall(const GlobalMask& mask, int64_t seq_q, int64_t after) {
  ShardCall call;
  call.rows = seq_q;
  if (mask.window_left < 0 && mask.window_right < 0) return call;  // every key visible
  call.has_window = true;
  int64_t shift = after;  // how far right the diagonal moves through the window bounds
  if (mask.window_left >= 0) {
    if (mask.window_left >= after) {
      call.window_left = mask.window_left - after;
    } else {
      const int64_t dropped = after - mask.window_left;
      call.rows = std::max<int64_t>(0, seq_q - dropped);
      call.window_left = 0;
      shift = mask.window_left;  // the dropped rows supplied the rest of the shift
    }
  }
  // A right bound past every key is unbounded; saturating keeps huge windows from overflowing.
  if (mask.window_right >= 0 &&
      __builtin_add_overflow(mask.window_right, shift, &call.window_right)) {
    call.window_right = -1;
  }
  return call;
}

}  // namespace mpi
}  // namespace streamattn

#endif  // STREAMATTN_MPI_SHARD_MASK_H_
