// streamattn_mpi_bench: sharded attention under mpirun, and where its time goes.
//
//   mpirun -np 4 streamattn_mpi_bench [--quick] [--threads N] [--repeats N]
//
// Two workloads, each timed over several calls after a warm-up (a barrier before each call,
// so every call starts together): sequence-parallel prefill (a block of queries against a long
// causal context split evenly over the ranks, sattn_mpi_attention) and decoding (one token per
// sequence against a cache spread over the ranks, sattn_mpi_decode to rank 0). Per call, the
// slowest rank's time for each phase (sattn_mpi_timings) is taken; the median over calls is
// printed with the share of the whole spent in the reduction. Rank counts are compared by
// running the program once per count (scripts/bench-mpi.sh runs 1 to 4).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "core/dtype.h"
#include "streamattn/streamattn_mpi.h"
#include "timing.h"

namespace {

using streamattn::F32ToF16;
using streamattn::bench::Median;
using streamattn::bench::NewCpuContext;

struct Args {
  bool quick = false;
  int threads = 0;  // per rank; 0: this node's cores divided among its ranks
  int repeats = 9;
};

struct Workload {
  const char* name;
  bool decode;
  int64_t batch, seq_q, heads_q, heads_kv, head_dim, keys;  // keys: per sequence, all ranks
  bool causal;
};

void Check(sattn_status status, const char* what) {
  if (status == SATTN_OK) return;
  std::fprintf(stderr, "streamattn_mpi_bench: %s failed: %s: %s\n", what,
               sattn_status_string(status), sattn_mpi_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void Run(const Workload& w, const Args& args, sattn_context* ctx, int threads) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int64_t mine = w.keys / size + (rank < w.keys % size ? 1 : 0);
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(w.batch * w.seq_q * w.heads_q * w.head_dim);
  std::mt19937 q_rng(99);  // the same query on every rank
  for (float& x : q) x = u(q_rng);
  std::vector<uint16_t> k(w.batch * mine * w.heads_kv * w.head_dim), v(k.size());
  for (uint16_t& x : k) x = F32ToF16(u(rng));
  for (uint16_t& x : v) x = F32ToF16(u(rng));
  std::vector<float> out(q.size()), lse(w.batch * w.heads_q * w.seq_q), first_out;
  const int64_t q_shape[4] = {w.batch, w.seq_q, w.heads_q, w.head_dim};
  const int64_t kv_shape[4] = {w.batch, mine, w.heads_kv, w.head_dim};
  const int64_t lse_shape[3] = {w.batch, w.heads_q, w.seq_q};
  const sattn_tensor qv = sattn_tensor_contiguous(q.data(), SATTN_DTYPE_F32, 4, q_shape);
  const sattn_tensor kv = sattn_tensor_contiguous(k.data(), SATTN_DTYPE_F16, 4, kv_shape);
  const sattn_tensor vv = sattn_tensor_contiguous(v.data(), SATTN_DTYPE_F16, 4, kv_shape);
  const sattn_tensor ov = sattn_tensor_contiguous(out.data(), SATTN_DTYPE_F32, 4, q_shape);
  const sattn_tensor lv = sattn_tensor_contiguous(lse.data(), SATTN_DTYPE_F32, 3, lse_shape);
  sattn_attention_options options{};
  options.struct_size = sizeof(options);
  options.causal = w.causal;
  const bool has_result = !w.decode || rank == 0;
  auto call = [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    if (w.decode) {
      Check(sattn_mpi_decode(ctx, MPI_COMM_WORLD, 0, has_result ? &qv : nullptr, &kv, &vv,
                             has_result ? &ov : nullptr, has_result ? &lv : nullptr, &options),
            "sattn_mpi_decode");
    } else {
      Check(sattn_mpi_attention(ctx, MPI_COMM_WORLD, &qv, &kv, &vv, &ov, &lv, &options),
            "sattn_mpi_attention");
    }
    sattn_mpi_timings t{};
    t.struct_size = sizeof(t);
    sattn_mpi_last_timings(&t);
    double mine_t[6] = {t.total, t.exchange, t.compute, t.agree, t.reduce, t.unpack}, worst[6];
    MPI_Allreduce(mine_t, worst, 6, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return std::vector<double>(worst, worst + 6);
  };
  call();  // warm-up: thread pools, scratch, MPI connections
  first_out = out;
  std::vector<std::vector<double>> phases(6);
  for (int r = 0; r < args.repeats; ++r) {
    const std::vector<double> t = call();
    for (int i = 0; i < 6; ++i) phases[i].push_back(t[i] * 1e3);
  }
  int same = !has_result || (first_out == out);
  int all_same = 0;
  MPI_Allreduce(&same, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  // Every rank holding the result holds the same bytes: equal hashes (FNV-1a) everywhere.
  uint64_t hash = 1469598103934665603ull;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(out.data());
  for (size_t i = 0; i < out.size() * sizeof(float); ++i)
    hash = (hash ^ bytes[i]) * 1099511628211ull;
  uint64_t lowest = hash, highest = hash;
  if (!w.decode) {
    MPI_Allreduce(&hash, &lowest, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&hash, &highest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  }
  if (rank != 0) return;
  // The merge op alone on one process (MPI_Reduce_local): what the reduction costs without
  // waiting for the network or for other ranks to be scheduled.
  const int64_t rows = w.batch * w.seq_q * w.heads_q;
  std::vector<float> in(rows * (w.head_dim + 1)), inout(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = inout[i] = u(rng);
  MPI_Datatype record;
  MPI_Op op;
  Check(sattn_mpi_merge_op_create(static_cast<int32_t>(w.head_dim), &record, &op),
        "sattn_mpi_merge_op_create");
  std::vector<double> op_ms;
  for (int r = 0; r < args.repeats; ++r) {
    const double start = MPI_Wtime();
    MPI_Reduce_local(in.data(), inout.data(), static_cast<int>(rows), record, op);
    op_ms.push_back((MPI_Wtime() - start) * 1e3);
  }
  MPI_Op_free(&op);
  MPI_Type_free(&record);
  double m[6];
  for (int i = 0; i < 6; ++i) m[i] = Median(phases[i]);
  const double record_bytes = 4.0 * w.batch * w.seq_q * w.heads_q * (w.head_dim + 1);
  std::printf(
      "mpi %-8s ranks=%d threads/rank=%d batch=%lld seq_q=%lld heads=%lld/%lld dim=%lld "
      "keys=%lld%s records=%.0f KiB\n"
      "    total %8.3f ms | exchange %7.3f  compute %8.3f  wait %7.3f  reduce %7.3f  unpack "
      "%6.3f ms | reduction share %5.1f%% (with wait %5.1f%%) | same bytes every call: %s, on "
      "every rank: %s\n    the merge op alone on one rank's records (MPI_Reduce_local): %.3f ms\n",
      w.name, size, threads, (long long)w.batch, (long long)w.seq_q, (long long)w.heads_q,
      (long long)w.heads_kv, (long long)w.head_dim, (long long)w.keys, w.causal ? " causal" : "",
      record_bytes / 1024.0, m[0], m[1], m[2], m[3], m[4], m[5], 100.0 * m[4] / m[0],
      100.0 * (m[3] + m[4]) / m[0], all_same ? "yes" : "NO",
      w.decode ? "root only" : (lowest == highest ? "yes" : "NO"), Median(op_ms));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      args.quick = true;
      args.repeats = 5;
    } else if (a == "--threads" && i + 1 < argc) {
      args.threads = std::atoi(argv[++i]);
    } else if (a == "--repeats" && i + 1 < argc) {
      args.repeats = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: mpirun -np N %s [--quick] [--threads N] [--repeats N]\n",
                   argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  // Threads per rank: this node's cores shared among the ranks on it.
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int node_ranks = 1;
  MPI_Comm_size(node, &node_ranks);
  MPI_Comm_free(&node);
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = args.threads > 0 ? args.threads : std::max(1, cores / node_ranks);
  sattn_context* ctx = NewCpuContext(threads);
  if (ctx == nullptr) {
    std::fprintf(stderr, "context: %s\n", sattn_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int64_t scale = args.quick ? 1 : 4;
  const Workload workloads[] = {
      {"prefill", false, 1, 128, 8, 8, 128, 4096 * scale, true},
      {"decode", true, 8, 1, 32, 8, 128, 8192 * scale, false},
  };
  for (const Workload& w : workloads) Run(w, args, ctx, threads);
  sattn_context_destroy(ctx);
  MPI_Finalize();
  return 0;
}
