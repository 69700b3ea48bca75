#include "reference/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace streamattn {
namespace reference {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

Array::Array(std::vector<int64_t> shape_in, double fill) : shape(std::move(shape_in)) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  data.assign(n, fill);
}

int64_t Array::Offset(std::initializer_list<int64_t> index) const {
  if (index.size() != shape.size()) throw std::invalid_argument("Array: wrong number of indices");
  int64_t offset = 0;
  size_t dim = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= shape[dim]) throw std::out_of_range("Array: index out of range");
    offset = offset * shape[dim] + i;
    ++dim;
  }
  return offset;
}

std::vector<double> Softmax(const std::vector<double>& scores) {
  double m = -kInf;
  for (double s : scores) m = std::isnan(s) || s > m ? s : m;  // pass 1: max (NaN wins)
  std::vector<double> p(scores.size(), 0.0);
  if (m == -kInf) return p;
  double l = 0.0;
  for (size_t j = 0; j < scores.size(); ++j) {  // pass 2: sum
    p[j] = scores[j] == -kInf ? 0.0 : std::exp(scores[j] - m);
    l += p[j];
  }
  for (double& x : p) x /= l;  // pass 3: normalise
  return p;
}

double LogSumExp(const std::vector<double>& scores) {
  double m = -kInf;
  for (double s : scores) m = std::isnan(s) || s > m ? s : m;
  if (m == -kInf || std::isnan(m)) return m;
  double l = 0.0;
  for (double s : scores) l += s == -kInf ? 0.0 : std::exp(s - m);
  return m + std::log(l);
}

bool KeyVisible(int64_t i, int64_t j, int64_t seq_q, int64_t seq_k, const AttentionSpec& spec) {
  if (j >= seq_k) return false;
  const int64_t diagonal = i + seq_k - seq_q;  // the key aligned with query i
  if (spec.causal && j > diagonal) return false;
  if (spec.window_left >= 0 && j < diagonal - spec.window_left) return false;
  if (spec.window_right >= 0 && j > diagonal + spec.window_right) return false;
  return true;
}

AttentionResult Attention(const Array& q, const Array& k, const Array& v,
                          const AttentionSpec& spec) {
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4) {
    throw std::invalid_argument("q, k, v must be rank 4");
  }
  const int64_t batch = q.shape[0], seq_q = q.shape[1], heads_q = q.shape[2], dim = q.shape[3];
  const int64_t seq_k = k.shape[1], heads_kv = k.shape[2], dim_v = v.shape[3];
  if (heads_q % heads_kv != 0) throw std::invalid_argument("heads_q % heads_kv != 0");
  if (k.shape[0] != batch || k.shape[3] != dim || v.shape[0] != batch || v.shape[1] != seq_k ||
      v.shape[2] != heads_kv) {
    throw std::invalid_argument("q, k, v shapes disagree");
  }
  // Where row (i0, i1, i2) of a rank-4 array starts: its last dimension is contiguous.
  auto row = [](const Array& a, int64_t i0, int64_t i1, int64_t i2) {
    return ((i0 * a.shape[1] + i1) * a.shape[2] + i2) * a.shape[3];
  };
  const int64_t group = heads_q / heads_kv;
  const double scale = spec.scale != 0.0 ? spec.scale : 1.0 / std::sqrt(static_cast<double>(dim));

  AttentionResult result{Array({batch, seq_q, heads_q, dim_v}), Array({batch, heads_q, seq_q})};
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t used_k = spec.seqused_k.empty() ? seq_k : spec.seqused_k[b];
    for (int64_t hk = 0; hk < heads_kv; ++hk) {
      // This kv head's keys and values as plain rows (only a copy, for speed), shared by the
      // group of query heads that read it.
      std::vector<double> keys(seq_k * dim), values(seq_k * dim_v);
      for (int64_t j = 0; j < seq_k; ++j) {
        const double* k_row = k.data.data() + row(k, b, j, hk);
        const double* v_row = v.data.data() + row(v, b, j, hk);
        std::copy(k_row, k_row + dim, keys.data() + j * dim);
        std::copy(v_row, v_row + dim_v, values.data() + j * dim_v);
      }
      for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (int64_t i = 0; i < seq_q; ++i) {
          const double* query = q.data.data() + row(q, b, i, h);
          std::vector<double> scores(seq_k, -kInf);
          for (int64_t j = 0; j < seq_k; ++j) {
            if (!KeyVisible(i, j, seq_q, used_k, spec)) continue;
            const double bias = spec.mask ? spec.mask(b, h, i, j) : 0.0;
            if (bias == -kInf) continue;  // hidden by the mask, whatever q.k is
            double s = 0.0;
            for (int64_t d = 0; d < dim; ++d) s += query[d] * keys[j * dim + d];
            s *= scale;
            if (spec.softcap > 0.0) s = spec.softcap * std::tanh(s / spec.softcap);
            if (!spec.alibi_slopes.empty()) {
              s -= spec.alibi_slopes[h] * std::fabs(static_cast<double>(i + used_k - seq_q - j));
            }
            scores[j] = s + bias;
          }
          // The sink joins the softmax as one more logit whose value vector is zero.
          std::vector<double> logits = scores;
          if (!spec.sinks.empty()) logits.push_back(spec.sinks[h]);
          const std::vector<double> p = Softmax(logits);
          bool any_visible = false;
          for (double s : scores) any_visible = any_visible || s != -kInf;
          // o = sum_j p_j v_j, key by key (each element still sums its terms in key order).
          std::vector<double> o(dim_v, 0.0);
          for (int64_t j = 0; j < seq_k; ++j) {
            if (scores[j] == -kInf) continue;  // hidden V never read
            for (int64_t d = 0; d < dim_v; ++d) o[d] += p[j] * values[j * dim_v + d];
          }
          double* out_row = result.out.data.data() + row(result.out, b, i, h);
          for (int64_t d = 0; d < dim_v; ++d) out_row[d] = any_visible ? o[d] : 0.0;
          result.lse({b, h, i}) = LogSumExp(logits);
        }
      }
    }
  }
  return result;
}

}  // namespace reference
}  // namespace streamattn
