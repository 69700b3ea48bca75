// Backend: what a device must provide. The API layer validates every argument and builds these
// argument structs; a backend only computes (and may still refuse with SATTN_ERR_UNSUPPORTED).
#ifndef STREAMATTN_CORE_BACKEND_H_
#define STREAMATTN_CORE_BACKEND_H_

#include <cstdint>

#include "core/attention_args.h"
#include "core/status.h"
#include "core/tensor.h"
#include "streamattn/streamattn.h"

namespace streamattn {

// sattn_merge_states after validation: num_parts (o, lse) pairs, all of shape
// [batch, seq, heads, head_dim] and [batch, heads, seq].
struct MergeStatesArgs {
  int32_t num_parts = 0;
  const Tensor* o_parts = nullptr;
  const Tensor* lse_parts = nullptr;
  Tensor out;
  const Tensor* lse_out = nullptr;  // optional
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual sattn_backend kind() const = 0;

  virtual Status Exp2(const float* x, float* y, int64_t n) = 0;
  virtual Status MergeStates(const MergeStatesArgs& args) = 0;
  virtual Status Attention(const AttentionArgs& args) = 0;
};

}  // namespace streamattn

#endif  // STREAMATTN_CORE_BACKEND_H_
