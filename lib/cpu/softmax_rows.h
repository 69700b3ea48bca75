// What softmax and softmax + top-k share outside the SIMD lanes: how a row is cut into parts
// (the unit of parallelism, fixed by the row length alone, so results never depend on the
// thread count), the fold of the parts' states with ⊕, and the finish of a row's state into
// what the write pass or the caller needs. c = log2(e) / T turns score differences into base 2.
#ifndef STREAMATTN_CPU_SOFTMAX_ROWS_H_
#define STREAMATTN_CPU_SOFTMAX_ROWS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/online_state.h"

namespace streamattn {

// Rows are read and written in chunks of this many scores: a multiple of four vectors on every
// target, and 8 KiB of f32, so a converted chunk stays in L1 until it is used.
constexpr int64_t kSoftmaxChunk = 2048;

// A row's parts: part p is [p * part_len, min(n, (p + 1) * part_len)). Each part's state is
// computed on its own (its lanes start empty) and the row's state is the left fold of the
// parts' states with MergeRowStates, in part order, whichever threads computed them.
struct RowSplit {
  static constexpr int64_t kBlock = 16384;  // scores: the shortest part
  static constexpr int64_t kMaxParts = 64;  // bounds the per-row bookkeeping of a split row

  int64_t n = 0;
  int64_t part_len = kBlock;  // a multiple of kBlock
  int64_t parts = 1;

  explicit RowSplit(int64_t row_len) : n(row_len) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    part_len = kBlock * ((blocks + kMaxParts - 1) / kMaxParts);
    parts = (n + part_len - 1) / part_len;
  }
  int64_t Begin(int64_t part) const { return part * part_len; }
  int64_t End(int64_t part) const { return std::min(n, (part + 1) * part_len); }
};

// Whether to hand the parts of each row to different tasks (few rows), rather than whole rows.
// Either way gives the same bytes; this only balances the work.
inline bool SplitRowsAcrossTasks(int64_t rows, const RowSplit& split, int workers) {
  return workers > 1 && split.parts > 1 && rows < 4 * static_cast<int64_t>(workers);
}

// The online state of a part of a row (or of a whole row), kept against a score rather than a
// scaled one: max is the largest score seen (unscaled) and l = sum exp2((s - max) c). Every
// exponent is then a difference of scores times c, which rounds at the magnitude of the
// difference: exp2(s c - round(max c)) would be off by the rounding of max c, which for scores
// near 1e30 is itself ~1e23. NaN in both fields: the row saw a NaN or +inf.
struct ScoreState {
  float max = kNegInf;
  float l = 0.0f;
};

// The row's state from its parts' states: each part becomes the base-2 online-softmax state
// ((max_p - max) c, l_p) against the row's maximum (exactly 0 for the part that holds it), and
// they fold with ⊕ in part order. Depends only on the parts, never on who computed them.
inline ScoreState FoldParts(const ScoreState* parts, int64_t count, float c) {
  ScoreState row;
  for (int64_t p = 0; p < count; ++p) {
    if (std::isnan(parts[p].max)) return parts[p];
    row.max = std::max(row.max, parts[p].max);
  }
  if (row.max == kNegInf) return row;
  RowState folded;
  for (int64_t p = 0; p < count; ++p) {
    RowState part;
    part.m = parts[p].max == kNegInf ? kNegInf : (parts[p].max - row.max) * c;
    part.l = parts[p].l;
    MergeRowStates(&folded, nullptr, part, nullptr, 0);
  }
  row.l = folded.l;
  return row;
}

// A row's state in the form the write pass and the caller use.
struct RowFinish {
  enum Kind { kNormal, kEmpty, kNaN };  // kEmpty: every score was -inf
  Kind kind = kNormal;
  float max = 0.0f;    // the row's largest score (unscaled)
  float inv_l = 0.0f;  // 1 / l
  float log_l = 0.0f;  // ln l: log_softmax(s) = (s - max) / T - ln l
  double lse = 0.0;    // natural log-sum-exp of s / T: max / T + ln l
};

inline RowFinish FinishRow(const ScoreState& s, float temperature) {
  RowFinish f;
  if (std::isnan(s.max) || std::isnan(s.l)) {
    f.kind = RowFinish::kNaN;
    f.lse = std::numeric_limits<double>::quiet_NaN();
    return f;
  }
  if (s.max == kNegInf || s.l == 0.0f) {
    f.kind = RowFinish::kEmpty;
    f.lse = -std::numeric_limits<double>::infinity();
    return f;
  }
  f.max = s.max;
  f.inv_l = 1.0f / s.l;
  const double log_l = std::log(static_cast<double>(s.l));
  f.log_l = static_cast<float>(log_l);
  f.lse = static_cast<double>(s.max) / temperature + log_l;
  return f;
}

}  // namespace streamattn

#endif  // STREAMATTN_CPU_SOFTMAX_ROWS_H_
