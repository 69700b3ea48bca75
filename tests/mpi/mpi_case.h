// One sharded attention problem, built the same on every rank from a seed: the global q, k and
// v, how the keys are split across the ranks, and the options. It runs three ways: sharded
// through streamattn_mpi (this rank's part), single-process sattn_attention over the
// concatenated keys, and the double oracle; the tests compare them.
#ifndef STREAMATTN_TESTS_MPI_MPI_CASE_H_
#define STREAMATTN_TESTS_MPI_MPI_CASE_H_

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reference/reference_attention.h"
#include "streamattn/streamattn.h"

namespace streamattn {
namespace mpi_testing {

struct ShardedCase {
  int64_t batch = 2, seq_q = 5, heads_q = 4, heads_kv = 2, head_dim = 32;
  int64_t head_dim_v = 0;                  // 0: head_dim
  std::vector<int64_t> shard_keys;         // rank r's shard holds shard_keys[r] keys (0: empty)
  std::vector<std::vector<int64_t>> used;  // optional [rank][b]: keys used (seqused_k)
  sattn_dtype kv_dtype = SATTN_DTYPE_F32, out_dtype = SATTN_DTYPE_F32;
  bool causal = false, has_window = false;
  int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool sinks = false;
  bool mask = false;     // an additive mask (20% -inf); each shard gets its own columns
  double q_range = 2.0;  // q in [-q_range, q_range): larger scores stress the merge
  bool decode = false;   // sattn_mpi_decode, with the query and the result on `root`
  int root = 0;
  uint64_t seed = 1;

  int64_t DimV() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  std::string Describe() const;
};

// This process's rank in MPI_COMM_WORLD, and the number of ranks there.
int Rank();
int Size();

// How the keys are split over the ranks.
enum class Split { kEven, kUneven, kEmptyFirst, kEmptyMiddle, kAllOnLast };
std::vector<int64_t> SplitKeys(int64_t keys, int ranks, Split split);
const char* SplitName(Split split);

struct Outcome {
  sattn_status status = SATTN_OK;
  std::string error;
  bool has_result = false;     // this rank received out and lse
  reference::Array out, lse;   // as doubles, [b, s, h, d] and [b, h, s]
  std::vector<uint8_t> bytes;  // out's and lse's raw bytes
};

// This rank's sattn_mpi_attention (or sattn_mpi_decode) call.
Outcome RunSharded(sattn_context* ctx, MPI_Comm comm, const ShardedCase& c);
// sattn_attention over all the keys on this process.
Outcome RunSingleProcess(sattn_context* ctx, const ShardedCase& c);
// The double oracle over all the keys.
reference::AttentionResult RunOracle(const ShardedCase& c);

// The errors the tests bound: out by ||got - want||_inf / ||want||_inf, lse by
// max |got - want| / max(1, |want|) (infinities must match exactly).
double OutError(const reference::Array& got, const reference::Array& want);
double LseError(const reference::Array& got, const reference::Array& want);

// The largest errors seen by this process, printed by the test main on rank 0.
struct Figures {
  int cases = 0;
  double single_out = 0, single_lse = 0, oracle_out = 0, oracle_lse = 0;
  int bitwise_equal_to_single = 0;
};
Figures& RecordedFigures();

}  // namespace mpi_testing
}  // namespace streamattn

#endif  // STREAMATTN_TESTS_MPI_MPI_CASE_H_
