// The MPI_Op of the sharded attention: MergeRecords over the records MPI hands it.
#include "mpi/merge_op.h"

#include <cmath>

#include "core/online_state.h"

namespace streamattn {
namespace mpi {

void MergeRecords(const float* in, float* inout, int64_t count, int64_t dim) {
  const int64_t stride = dim + 1;
  for (int64_t r = 0; r < count; ++r) {
    const float* left = in + r * stride;
    float* right = inout + r * stride;
    float lse[2] = {left[0], right[0]};
    float weights[2];
    const float merged = MergeWeights(lse, 2, weights);
    right[0] = merged;
    float* o = right + 1;
    if (std::isnan(merged)) {
      for (int64_t j = 0; j < dim; ++j) o[j] = merged;
      continue;
    }
    // The order of sattn_merge_states' accumulation: 0, then part 0, then part 1.
    for (int64_t j = 0; j < dim; ++j) {
      float acc = 0.0f;
      if (weights[0] != 0.0f) acc += left[1 + j] * weights[0];
      if (weights[1] != 0.0f) acc += o[j] * weights[1];
      o[j] = acc;
    }
  }
}

namespace {

// MPI_User_function. The record size, and so dim, comes from the datatype MPI passes back: the
// op carries no other state.
extern "C" void MergeRecordsOp(void* in, void* inout, int* len, MPI_Datatype* type) {
  int bytes = 0;
  MPI_Type_size(*type, &bytes);
  const int64_t dim = bytes / static_cast<int64_t>(sizeof(float)) - 1;
  if (dim < 0) return;
  MergeRecords(static_cast<const float*>(in), static_cast<float*>(inout), *len, dim);
}

}  // namespace

int CreateMergeOp(int64_t dim, MPI_Datatype* record, MPI_Op* op) {
  int err = MPI_Type_contiguous(static_cast<int>(dim + 1), MPI_FLOAT, record);
  if (err != MPI_SUCCESS) return err;
  err = MPI_Type_commit(record);
  if (err == MPI_SUCCESS) {
    // Non-commutative although the merge is commutative in exact arithmetic: in floats the two
    // operand orders may differ in the last bit, and only a non-commutative op obliges MPI to
    // keep rank order (no arrival-order combining), which makes results reproducible.
    err = MPI_Op_create(&MergeRecordsOp, /*commute=*/0, op);
  }
  if (err != MPI_SUCCESS) MPI_Type_free(record);
  return err;
}

}  // namespace mpi
}  // namespace streamattn
