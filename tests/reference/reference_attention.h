// The oracle: naive, three-pass safe softmax and attention in double precision, with every
// option the library offers. It favours obviousness over speed; every kernel is judged by it.
#ifndef STREAMATTN_TESTS_REFERENCE_REFERENCE_ATTENTION_H_
#define STREAMATTN_TESTS_REFERENCE_REFERENCE_ATTENTION_H_

#include <cstdint>
#include <functional>
#include <vector>

namespace streamattn {
namespace reference {

// A dense row-major double tensor of rank <= 4 (unused trailing extents are 1).
struct Array {
  std::vector<int64_t> shape;
  std::vector<double> data;

  Array() = default;
  explicit Array(std::vector<int64_t> shape_in, double fill = 0.0);
  int64_t size() const { return static_cast<int64_t>(data.size()); }
  int64_t Offset(std::initializer_list<int64_t> index) const;
  double& operator()(std::initializer_list<int64_t> index) { return data[Offset(index)]; }
  double operator()(std::initializer_list<int64_t> index) const { return data[Offset(index)]; }
};

// The three passes of the seed's "safe softmax": max, sum of exp(s - max), divide.
// -inf entries get probability 0; an all -inf row gives all zeros (never NaN).
std::vector<double> Softmax(const std::vector<double>& scores);
// log(sum exp(s)), -inf for an empty or all -inf row.
double LogSumExp(const std::vector<double>& scores);

struct AttentionSpec {
  double scale = 0.0;         // 0: 1 / sqrt(head_dim)
  bool causal = false;        // bottom-right aligned: query i sees keys j <= i + seq_k - seq_q
  int64_t window_left = -1;   // -1: unbounded; else keys j >= i + seq_k - seq_q - left
  int64_t window_right = -1;  // -1: unbounded; else keys j <= i + seq_k - seq_q + right
  double softcap = 0.0;       // > 0: score = softcap * tanh(score / softcap), after scaling
  std::vector<double> alibi_slopes;  // per query head: score -= slope * |i + seq_k - seq_q - j|
  // Additive mask mask(b, h, i, j), added after softcap and ALiBi; -inf hides the key (even
  // if its q.k is NaN).
  std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)> mask;
  std::vector<double> sinks;       // per query head: a logit that joins the denominator only
  std::vector<int64_t> seqused_k;  // per batch: only the first seqused_k[b] keys exist
};

struct AttentionResult {
  Array out;  // [batch, seq_q, heads_q, head_dim]
  Array lse;  // [batch, heads_q, seq_q], natural log; -inf for a row that sees nothing
};

// q [batch, seq_q, heads_q, d], k and v [batch, seq_k, heads_kv, d] (v may have its own
// head_dim). Query head h reads kv head h / (heads_q / heads_kv).
AttentionResult Attention(const Array& q, const Array& k, const Array& v,
                          const AttentionSpec& spec);

// Whether query i of a row sees key j (seq_k = the keys that exist for this batch entry).
bool KeyVisible(int64_t i, int64_t j, int64_t seq_q, int64_t seq_k, const AttentionSpec& spec);

}  // namespace reference
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_REFERENCE_REFERENCE_ATTENTION_H_
