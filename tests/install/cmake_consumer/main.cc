// The README's C++ example: causal grouped-query attention through the header-only wrapper,
// built by a consumer project against the installed package. Exits non-zero if a result is off.
#include <cmath>
#include <cstdio>
#include <streamattn/streamattn.hpp>
#include <vector>

int main() {
  namespace sa = streamattn;
  const int64_t seq = 300, heads_q = 8, heads_kv = 2, dim = 64;
  std::vector<float> q(seq * heads_q * dim, 0.5f), k(seq * heads_kv * dim, 0.25f),
      v(seq * heads_kv * dim, 3.0f), out(q.size()), lse(heads_q * seq);
  try {
    sa::Context ctx;  // every core; the best backend and SIMD target of this machine
    ctx.Attention(sa::Tensor(q.data(), {1, seq, heads_q, dim}),
                  sa::Tensor(k.data(), {1, seq, heads_kv, dim}),
                  sa::Tensor(v.data(), {1, seq, heads_kv, dim}),
                  sa::Tensor(out.data(), {1, seq, heads_q, dim}),
                  sa::Tensor(lse.data(), {1, heads_q, seq}), sa::AttentionOptions().set_causal());
    // Equal scores (0.5 * 0.25 * 64 / sqrt(64) = 1): each output is the mean of 3s, and query
    // i's log-sum-exp is 1 + log(i + 1).
    std::printf("%s on %s: out[0] = %g, lse[299] = %.4f\n", sa::Version().c_str(),
                ctx.Info().simd_target.c_str(), out[0], lse[seq - 1]);
    if (std::fabs(out[0] - 3.0f) > 1e-5f || std::fabs(lse[seq - 1] - 1.0 - std::log(300.0)) > 1e-4)
      return 1;

    ctx.Attention(sa::Tensor(q.data(), {1, seq, heads_q, dim}),  // k's head_dim is wrong
                  sa::Tensor(k.data(), {1, seq, heads_kv, 32}),
                  sa::Tensor(v.data(), {1, seq, heads_kv, dim}),
                  sa::Tensor(out.data(), {1, seq, heads_q, dim}));
    return 1;
  } catch (const sa::Error& e) {  // status() and the library's message()
    std::printf("expected error: %s\n", e.what());
    return e.status() == SATTN_ERR_INVALID_ARGUMENT ? 0 : 1;
  }
}
