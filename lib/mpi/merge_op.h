// The merge of two online-softmax states (docs/design.md) applied to packed records, as an MPI
// reduction operator.
//
// A record is one row's state in (o, lse) form: lse (natural log, -inf for the empty set) then
// o[0..dim), dim + 1 floats. MergeRecords is sattn_merge_states' rule for two parts (the core's
// MergeWeights, then out = w_in o_in + w_inout o_inout, skipping a part of weight 0 without
// reading it), written as scalar code over header-only core pieces because an MPI_Op can
// neither report an error nor carry a context: it must not allocate, fail or need threads.
#ifndef STREAMATTN_MPI_MERGE_OP_H_
#define STREAMATTN_MPI_MERGE_OP_H_

#include <mpi.h>

#include <cstdint>

namespace streamattn {
namespace mpi {

// inout[r] = in[r] + inout[r] for `count` records of dim + 1 floats; `in` is the left operand
// (the lower ranks, for MPI's non-commutative order).
void MergeRecords(const float* in, float* inout, int64_t count, int64_t dim);

// Creates the record datatype and the non-commutative op; MPI error codes pass through.
int CreateMergeOp(int64_t dim, MPI_Datatype* record, MPI_Op* op);

}  // namespace mpi
}  // namespace streamattn

#endif  // STREAMATTN_MPI_MERGE_OP_H_
