#include "mpi_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "streamattn/streamattn_mpi.h"
#include "test_util.h"

namespace streamattn {
namespace mpi_testing {
namespace {

using reference::Array;
using testing_util::RoundTo;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The problem's numbers, identical on every rank: generated in one fixed order from the seed.
struct Data {
  std::vector<double> q;                   // [B, Sq, Hq, d]
  std::vector<std::vector<double>> k, v;   // per rank: [B, n_r, Hkv, d(v)], rounded to kv
  std::vector<std::vector<int64_t>> used;  // [rank][b]
  std::vector<int64_t> offset;             // first global key of each shard (non-ragged)
  int64_t total = 0;                       // all keys (non-ragged)
  std::vector<double> mask;                // [Hq, Sq, total] global columns
  std::vector<double> sinks;               // [Hq]
};

Data MakeData(const ShardedCase& c) {
  const int ranks = static_cast<int>(c.shard_keys.size());
  std::mt19937_64 rng(c.seed);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  Data d;
  d.q.resize(c.batch * c.seq_q * c.heads_q * c.head_dim);
  for (double& x : d.q) x = RoundTo(SATTN_DTYPE_F32, uniform(-c.q_range, c.q_range));
  for (int r = 0; r < ranks; ++r) {
    const int64_t n = c.shard_keys[r];
    std::vector<double> k(c.batch * n * c.heads_kv * c.head_dim);
    std::vector<double> v(c.batch * n * c.heads_kv * c.DimV());
    for (double& x : k) x = RoundTo(c.kv_dtype, uniform(-1.0, 1.0));
    for (double& x : v) x = RoundTo(c.kv_dtype, uniform(-1.0, 1.0));
    d.k.push_back(std::move(k));
    d.v.push_back(std::move(v));
    d.used.push_back(c.used.empty() ? std::vector<int64_t>(c.batch, n) : c.used[r]);
    d.offset.push_back(d.total);
    d.total += n;
  }
  if (c.mask) {
    d.mask.resize(c.heads_q * c.seq_q * d.total);
    for (double& x : d.mask) x = uniform(0.0, 1.0) < 0.2 ? -kInf : uniform(-1.0, 1.0);
  }
  for (int64_t h = 0; h < c.heads_q && c.sinks; ++h) d.sinks.push_back(0.5 * h - 1.0);
  return d;
}

std::vector<uint8_t> Encode(const std::vector<double>& values, sattn_dtype dtype) {
  const size_t size = dtype == SATTN_DTYPE_F32 ? 4 : 2;
  std::vector<uint8_t> bytes(std::max<size_t>(1, values.size()) * size);
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = static_cast<float>(values[i]);
    if (dtype == SATTN_DTYPE_F32) {
      std::memcpy(&bytes[i * 4], &f, 4);
    } else {
      const uint16_t h =
          dtype == SATTN_DTYPE_F16 ? testing_util::ToF16(f) : testing_util::ToBF16(f);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

double DecodeAt(const std::vector<uint8_t>& bytes, sattn_dtype dtype, size_t i) {
  if (dtype == SATTN_DTYPE_F32) {
    float f;
    std::memcpy(&f, &bytes[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[i * 2], 2);
  return dtype == SATTN_DTYPE_F16 ? testing_util::FromF16(h) : testing_util::FromBF16(h);
}

sattn_tensor View(void* data, sattn_dtype dtype, std::vector<int64_t> shape) {
  return sattn_tensor_contiguous(data, dtype, static_cast<int32_t>(shape.size()), shape.data());
}

bool Ragged(const ShardedCase& c, const Data& d) { return !c.used.empty() || d.total == 0; }

// The global keys of sequence b in order: (rank, local index) pairs.
std::vector<std::pair<int, int64_t>> GlobalKeys(const Data& d, int64_t b) {
  std::vector<std::pair<int, int64_t>> keys;
  for (size_t r = 0; r < d.used.size(); ++r) {
    for (int64_t l = 0; l < d.used[r][b]; ++l) keys.emplace_back(static_cast<int>(r), l);
  }
  return keys;
}

// k or v over all the keys: [B, capacity, Hkv, dim], each sequence's keys packed at the front.
std::vector<double> Concatenate(const ShardedCase& c, const Data& d, bool values,
                                int64_t capacity) {
  const int64_t dim = values ? c.DimV() : c.head_dim;
  std::vector<double> all(c.batch * capacity * c.heads_kv * dim, 0.0);
  for (int64_t b = 0; b < c.batch; ++b) {
    const auto keys = GlobalKeys(d, b);
    for (size_t j = 0; j < keys.size(); ++j) {
      const auto& shard = values ? d.v[keys[j].first] : d.k[keys[j].first];
      const int64_t n = c.shard_keys[keys[j].first];
      const double* from = &shard[((b * n + keys[j].second) * c.heads_kv) * dim];
      std::copy(from, from + c.heads_kv * dim, &all[((b * capacity + j) * c.heads_kv) * dim]);
    }
  }
  return all;
}

int64_t Capacity(const ShardedCase& c, const Data& d) {
  int64_t capacity = 1;
  for (int64_t b = 0; b < c.batch; ++b) {
    capacity = std::max<int64_t>(capacity, GlobalKeys(d, b).size());
  }
  return capacity;
}

sattn_attention_options Options(const ShardedCase& c) {
  sattn_attention_options o{};
  o.struct_size = sizeof(o);
  o.causal = c.causal;
  o.has_window = c.has_window;
  o.window_left = c.window_left;
  o.window_right = c.window_right;
  o.softcap = c.softcap;
  return o;
}

// Reads out and lse back as doubles, with their raw bytes.
void Collect(const ShardedCase& c, const std::vector<uint8_t>& out, const std::vector<float>& lse,
             Outcome* o) {
  o->out = Array({c.batch, c.seq_q, c.heads_q, c.DimV()});
  for (int64_t i = 0; i < o->out.size(); ++i) o->out.data[i] = DecodeAt(out, c.out_dtype, i);
  o->lse = Array({c.batch, c.heads_q, c.seq_q});
  for (int64_t i = 0; i < o->lse.size(); ++i) o->lse.data[i] = lse[i];
  o->bytes = out;
  const uint8_t* raw = reinterpret_cast<const uint8_t*>(lse.data());
  o->bytes.insert(o->bytes.end(), raw, raw + lse.size() * sizeof(float));
}

}  // namespace

std::string ShardedCase::Describe() const {
  std::ostringstream s;
  s << (decode ? "decode(root " + std::to_string(root) + ") " : "") << "batch=" << batch
    << " seq_q=" << seq_q << " heads=" << heads_q << "/" << heads_kv << " dim=" << head_dim << "/"
    << DimV() << " shards=[";
  for (size_t r = 0; r < shard_keys.size(); ++r) s << (r ? "," : "") << shard_keys[r];
  s << "]" << (used.empty() ? "" : " ragged") << " kv=" << testing_util::DTypeName(kv_dtype)
    << " out=" << testing_util::DTypeName(out_dtype) << (causal ? " causal" : "");
  if (has_window) s << " window=[" << window_left << "," << window_right << "]";
  s << (softcap > 0 ? " softcap" : "") << (sinks ? " sinks" : "") << (mask ? " mask" : "")
    << " seed=" << seed;
  return s.str();
}

int Rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int Size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::vector<int64_t> SplitKeys(int64_t keys, int ranks, Split split) {
  std::vector<int64_t> shards(ranks, 0);
  std::vector<int> holders;  // ranks that get keys
  for (int r = 0; r < ranks; ++r) {
    const bool empty = (split == Split::kEmptyFirst && r == 0 && ranks > 1) ||
                       (split == Split::kEmptyMiddle && r == ranks / 2 && ranks > 1) ||
                       (split == Split::kAllOnLast && r != ranks - 1);
    if (!empty) holders.push_back(r);
  }
  if (split == Split::kEven) {
    for (int r = 0; r < ranks; ++r) shards[r] = keys / ranks + (r < keys % ranks ? 1 : 0);
    return shards;
  }
  // Uneven: weights 3, 1, 4, 2, ... so no two neighbours hold the same share.
  int64_t weight_sum = 0;
  std::vector<int64_t> weights;
  for (size_t i = 0; i < holders.size(); ++i) {
    weights.push_back(1 + static_cast<int64_t>((i * 7 + 2) % 4));
    weight_sum += weights.back();
  }
  int64_t given = 0;
  for (size_t i = 0; i + 1 < holders.size(); ++i) {
    shards[holders[i]] = keys * weights[i] / weight_sum;
    given += shards[holders[i]];
  }
  shards[holders.back()] = keys - given;
  return shards;
}

const char* SplitName(Split split) {
  switch (split) {
    case Split::kEven:
      return "even";
    case Split::kUneven:
      return "uneven";
    case Split::kEmptyFirst:
      return "empty-first";
    case Split::kEmptyMiddle:
      return "empty-middle";
    case Split::kAllOnLast:
      return "all-on-last";
  }
  return "?";
}

Outcome RunSharded(sattn_context* ctx, MPI_Comm comm, const ShardedCase& c) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const Data d = MakeData(c);
  const int64_t n = c.shard_keys[rank];
  std::vector<uint8_t> q = Encode(d.q, SATTN_DTYPE_F32);
  std::vector<uint8_t> k = Encode(d.k[rank], c.kv_dtype), v = Encode(d.v[rank], c.kv_dtype);
  const sattn_tensor q_view =
      View(q.data(), SATTN_DTYPE_F32, {c.batch, c.seq_q, c.heads_q, c.head_dim});
  const sattn_tensor k_view = View(k.data(), c.kv_dtype, {c.batch, n, c.heads_kv, c.head_dim});
  const sattn_tensor v_view = View(v.data(), c.kv_dtype, {c.batch, n, c.heads_kv, c.DimV()});
  sattn_attention_options options = Options(c);
  std::vector<int32_t> used(d.used[rank].begin(), d.used[rank].end());
  sattn_tensor used_view = View(used.data(), SATTN_DTYPE_I32, {c.batch});
  if (!c.used.empty()) options.seqused_k = &used_view;
  std::vector<float> sinks(d.sinks.begin(), d.sinks.end());
  sattn_tensor sinks_view = View(sinks.data(), SATTN_DTYPE_F32, {c.heads_q});
  if (c.sinks) options.sinks = &sinks_view;
  std::vector<float> mask(c.heads_q * c.seq_q * std::max<int64_t>(n, 1));
  for (int64_t i = 0; c.mask && i < c.heads_q * c.seq_q; ++i) {
    for (int64_t l = 0; l < n; ++l) mask[i * n + l] = d.mask[i * d.total + d.offset[rank] + l];
  }
  sattn_tensor mask_view = View(mask.data(), SATTN_DTYPE_F32, {1, c.heads_q, c.seq_q, n});
  if (c.mask) options.mask = &mask_view;

  std::vector<uint8_t> out(
      c.batch * c.seq_q * c.heads_q * c.DimV() * (c.out_dtype == SATTN_DTYPE_F32 ? 4 : 2), 0xA5);
  std::vector<float> lse(c.batch * c.heads_q * c.seq_q, 12345.0f);
  const sattn_tensor out_view =
      View(out.data(), c.out_dtype, {c.batch, c.seq_q, c.heads_q, c.DimV()});
  const sattn_tensor lse_view = View(lse.data(), SATTN_DTYPE_F32, {c.batch, c.heads_q, c.seq_q});
  const bool empty = n == 0;
  Outcome o;
  if (c.decode) {
    const bool root = rank == c.root;
    o.status = sattn_mpi_decode(ctx, comm, c.root, root ? &q_view : nullptr,
                                empty ? nullptr : &k_view, empty ? nullptr : &v_view,
                                root ? &out_view : nullptr, root ? &lse_view : nullptr, &options);
    o.has_result = root;
  } else {
    o.status = sattn_mpi_attention(ctx, comm, &q_view, empty ? nullptr : &k_view,
                                   empty ? nullptr : &v_view, &out_view, &lse_view, &options);
    o.has_result = true;
  }
  if (o.status != SATTN_OK) o.error = sattn_mpi_last_error();
  Collect(c, out, lse, &o);
  return o;
}

Outcome RunSingleProcess(sattn_context* ctx, const ShardedCase& c) {
  const Data d = MakeData(c);
  const int64_t capacity = Capacity(c, d);
  std::vector<uint8_t> q = Encode(d.q, SATTN_DTYPE_F32);
  std::vector<uint8_t> k = Encode(Concatenate(c, d, false, capacity), c.kv_dtype);
  std::vector<uint8_t> v = Encode(Concatenate(c, d, true, capacity), c.kv_dtype);
  const sattn_tensor q_view =
      View(q.data(), SATTN_DTYPE_F32, {c.batch, c.seq_q, c.heads_q, c.head_dim});
  const sattn_tensor k_view =
      View(k.data(), c.kv_dtype, {c.batch, capacity, c.heads_kv, c.head_dim});
  const sattn_tensor v_view = View(v.data(), c.kv_dtype, {c.batch, capacity, c.heads_kv, c.DimV()});
  sattn_attention_options options = Options(c);
  std::vector<int32_t> used(c.batch);
  for (int64_t b = 0; b < c.batch; ++b) used[b] = static_cast<int32_t>(GlobalKeys(d, b).size());
  sattn_tensor used_view = View(used.data(), SATTN_DTYPE_I32, {c.batch});
  if (Ragged(c, d)) options.seqused_k = &used_view;
  std::vector<float> sinks(d.sinks.begin(), d.sinks.end());
  sattn_tensor sinks_view = View(sinks.data(), SATTN_DTYPE_F32, {c.heads_q});
  if (c.sinks) options.sinks = &sinks_view;
  std::vector<float> mask(d.mask.begin(), d.mask.end());
  sattn_tensor mask_view = View(mask.data(), SATTN_DTYPE_F32, {1, c.heads_q, c.seq_q, d.total});
  if (c.mask) options.mask = &mask_view;
  std::vector<uint8_t> out(c.batch * c.seq_q * c.heads_q * c.DimV() *
                           (c.out_dtype == SATTN_DTYPE_F32 ? 4 : 2));
  std::vector<float> lse(c.batch * c.heads_q * c.seq_q);
  const sattn_tensor out_view =
      View(out.data(), c.out_dtype, {c.batch, c.seq_q, c.heads_q, c.DimV()});
  const sattn_tensor lse_view = View(lse.data(), SATTN_DTYPE_F32, {c.batch, c.heads_q, c.seq_q});
  Outcome o;
  o.status = sattn_attention(ctx, &q_view, &k_view, &v_view, &out_view, &lse_view, &options);
  if (o.status != SATTN_OK) o.error = sattn_last_error();
  o.has_result = true;
  Collect(c, out, lse, &o);
  return o;
}

reference::AttentionResult RunOracle(const ShardedCase& c) {
  const Data d = MakeData(c);
  const int64_t capacity = Capacity(c, d);
  const Array q({c.batch, c.seq_q, c.heads_q, c.head_dim});
  Array qa = q, ka({c.batch, capacity, c.heads_kv, c.head_dim}),
        va({c.batch, capacity, c.heads_kv, c.DimV()});
  qa.data = d.q;
  ka.data = Concatenate(c, d, false, capacity);
  va.data = Concatenate(c, d, true, capacity);
  reference::AttentionSpec spec;
  spec.causal = c.causal;
  if (c.has_window) {
    spec.window_left = c.window_left;
    spec.window_right = c.window_right;
  }
  spec.softcap = c.softcap;
  spec.sinks = d.sinks;
  if (Ragged(c, d)) {
    for (int64_t b = 0; b < c.batch; ++b) spec.seqused_k.push_back(GlobalKeys(d, b).size());
  }
  if (c.mask) {
    const std::vector<double> mask = d.mask;
    const int64_t seq_q = c.seq_q, total = d.total;
    spec.mask = [mask, seq_q, total](int64_t, int64_t h, int64_t i, int64_t j) {
      return static_cast<double>(static_cast<float>(mask[(h * seq_q + i) * total + j]));
    };
  }
  return reference::Attention(qa, ka, va, spec);
}

double OutError(const Array& got, const Array& want) {
  return testing_util::MaxRelativeError(got, want);
}

double LseError(const Array& got, const Array& want) {
  if (got.shape != want.shape) return kInf;
  double worst = 0.0;
  for (int64_t i = 0; i < want.size(); ++i) {
    const double g = got.data[i], w = want.data[i];
    if (std::isnan(g) || std::isnan(w)) {
      if (std::isnan(g) != std::isnan(w)) return kInf;
      continue;
    }
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) return kInf;
      continue;
    }
    worst = std::max(worst, std::fabs(g - w) / std::max(1.0, std::fabs(w)));
  }
  return worst;
}

Figures& RecordedFigures() {
  static Figures figures;
  return figures;
}

}  // namespace mpi_testing
}  // namespace streamattn
