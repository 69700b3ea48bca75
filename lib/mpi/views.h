// What the MPI layer checks and does with tensor views itself. It sees only the public C API,
// so it cannot use the core's validated Tensor: these checks cover the views this layer reads
// or writes directly (the query it broadcasts, the outputs it unpacks into), with the core's
// rules and message style, before the ranks agree; sattn_attention checks everything else.
#ifndef STREAMATTN_MPI_VIEWS_H_
#define STREAMATTN_MPI_VIEWS_H_

#include <cstdint>

#include "streamattn/streamattn.h"

namespace streamattn {
namespace mpi {

// A failure and its message, as sattn_mpi_last_error() will show it.
struct Error {
  sattn_status code = SATTN_OK;
  char message[512] = "";
  bool ok() const { return code == SATTN_OK; }
};

Error Fail(sattn_status code, const char* format, ...) __attribute__((format(printf, 2, 3)));

#define SATTN_MPI_RETURN_IF_FAILED(expr)      \
  do {                                        \
    ::streamattn::mpi::Error error_ = (expr); \
    if (!error_.ok()) return error_;          \
  } while (0)

// Bytes per element of a dtype code; 0 for an unknown one.
int64_t ElementSize(int32_t dtype);
int64_t NumElements(const sattn_tensor& t);

// Non-NULL, `ndim` dims each >= 1, a host view with non-NULL data, and (float_only) f32, f16
// or bf16, else exactly `dtype`.
Error CheckView(const sattn_tensor* t, const char* name, int32_t ndim, bool float_only,
                int32_t dtype = SATTN_DTYPE_F32);

// "name.shape[dim]=x must equal want (what)".
Error CheckExtent(const sattn_tensor& t, const char* name, int dim, int64_t want, const char* what);

// An output must not write any element twice (core/view_overlap.h, the rule the core applies).
Error CheckNoSelfOverlap(const sattn_tensor& t, const char* name);

// Outputs must not share a byte with inputs or other outputs; `allow_identical` permits exactly
// the same view (out = q, in place).
Error CheckNoOverlap(const sattn_tensor& out, const char* out_name, const sattn_tensor& in,
                     const char* in_name, bool allow_identical);

// The view of elements [begin, begin + count) of dimension `dim`.
sattn_tensor Slice(const sattn_tensor& t, int dim, int64_t begin, int64_t count);

// Pointer to an element; index has t.ndim entries.
void* ElementAt(const sattn_tensor& t, const int64_t* index);

// Row-major strides for every dim of extent > 1.
bool IsContiguous(const sattn_tensor& t);

// Copies the view's elements, row-major, to dst (NumElements x ElementSize bytes).
void PackContiguous(const sattn_tensor& t, void* dst);

}  // namespace mpi
}  // namespace streamattn

#endif  // STREAMATTN_MPI_VIEWS_H_
