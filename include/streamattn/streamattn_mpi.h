/*
 * streamattn_mpi: attention over keys and values sharded across the ranks of an MPI
 * communicator (libstreamattn_mpi, CMake target streamattn::mpi; built when MPI is found, see
 * STREAMATTN_MPI). Each rank runs sattn_attention over its own shard, which yields the
 * online-softmax state of that shard (running max, sum of exponentials and weighted values) in
 * (o, lse) form; the states are then combined by an MPI reduction whose user-defined MPI_Op is
 * the merge of sattn_merge_states. Nothing of size seq_q x seq_k is communicated: each rank
 * sends batch * seq_q * heads_q records of head_dim_v + 1 floats.
 *
 * Conventions are those of streamattn.h, plus:
 *  - Every function here is collective over `comm`: all its ranks must call it, with the same
 *    root, and it returns the same status on every rank. A rank whose own arguments are wrong
 *    gets the message naming them; the others get "rank R: <that message>".
 *  - The failure message is read with sattn_mpi_last_error() (thread-local), not
 *    sattn_last_error().
 *  - The global keys of sequence b are the ranks' shards concatenated in rank order: rank r holds
 *    global keys [offset_r(b), offset_r(b) + n_r(b)), with n_r(b) its shard's key count
 *    (k_shard.shape[1], or options->seqused_k[b], or the paged cache length) and offset_r(b) the
 *    sum of the key counts of the ranks below it. Causal masks and windows apply to the global
 *    positions (query i sees global keys j <= i + seq_k_total - seq_q), through each shard's
 *    offset; a shard that sees no key of a row contributes the identity (lse = -inf).
 *  - An empty shard is given as k_shard = v_shard = NULL.
 *  - Options: scale, causal, has_window, window_left, window_right and softcap describe the
 *    attention over all the keys and must be equal on every rank. sinks join the softmax once:
 *    give them on every rank or on none (rank 0 applies them). mask, seqused_k and block_table
 *    describe this rank's shard (the mask's last extent is its key count). alibi_slopes is
 *    SATTN_ERR_UNSUPPORTED (its distances need every key's global position inside the kernel).
 *  - Results are the same bytes on every rank and on every run with the same number of ranks and
 *    the same shards (and any thread counts): the MPI_Op is declared non-commutative, so MPI
 *    must merge the ranks' states in rank order, s_0 + s_1 + ... + s_(P-1), never in order of
 *    arrival, with a bracketing that Open MPI's algorithms fix by the communicator and message
 *    sizes alone. Different rank counts bracket differently and may differ in the last bits.
 *  - This layer's buffers, batch x seq_q x heads_q x (head_dim_v + 2) floats (and, in decode,
 *    a copy of the query), come from malloc, not from the context's allocator; MPI allocates
 *    its own for the reduction.
 *
 * The header is C99 and C++ compatible.
 */
#ifndef STREAMATTN_STREAMATTN_MPI_H_
#define STREAMATTN_STREAMATTN_MPI_H_

#include <mpi.h>

#include "streamattn/streamattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sequence-parallel attention: every rank holds the same q and one shard of k and v; every rank
 * gets out and lse over all the keys (MPI_Allreduce). Arguments are those of sattn_attention,
 * with k_shard and v_shard in place of k and v (NULL and NULL for an empty shard). lse may be
 * NULL. Threads: the context's, on each rank. */
SATTN_API sattn_status sattn_mpi_attention(sattn_context* ctx, MPI_Comm comm, const sattn_tensor* q,
                                           const sattn_tensor* k_shard, const sattn_tensor* v_shard,
                                           const sattn_tensor* out, const sattn_tensor* lse,
                                           const sattn_attention_options* options);

/* Decoding against a KV cache spread over the ranks: the query lives on `root` and is broadcast;
 * each rank attends over its part of the cache and the states are reduced to `root`
 * (MPI_Reduce), the only rank that writes out and lse. On the other ranks q, out and lse are
 * not read and may be NULL. Otherwise as sattn_mpi_attention. */
SATTN_API sattn_status sattn_mpi_decode(sattn_context* ctx, MPI_Comm comm, int root,
                                        const sattn_tensor* q, const sattn_tensor* k_shard,
                                        const sattn_tensor* v_shard, const sattn_tensor* out,
                                        const sattn_tensor* lse,
                                        const sattn_attention_options* options);

/* The merge as MPI objects, for callers who lay out and reduce states themselves (e.g. with
 * MPI_Iallreduce): *record is MPI_Type_contiguous(head_dim_v + 1, MPI_FLOAT), committed, one
 * row's (lse, o[0..head_dim_v)) with lse in natural log (-inf: the identity); *op merges such
 * records (and only those) as sattn_merge_states does, never failing. op is non-commutative so
 * that MPI keeps rank order (see above). Free both with MPI_Type_free and MPI_Op_free. */
SATTN_API sattn_status sattn_mpi_merge_op_create(int32_t head_dim_v, MPI_Datatype* record,
                                                 MPI_Op* op);

/* Where the last sattn_mpi_attention or sattn_mpi_decode call on this thread spent its time on
 * this rank, in seconds (MPI_Wtime). */
typedef struct sattn_mpi_timings {
  uint32_t struct_size; /* sizeof(sattn_mpi_timings), set by the caller */
  double total;         /* the whole call */
  double exchange;      /* shapes and key counts of every rank; decode: the query's broadcast */
  double compute;       /* sattn_attention over this rank's shard, and packing the records */
  double agree;         /* agreeing that every rank succeeded: mostly waiting for the slowest */
  double reduce;        /* the MPI reduction that applies the merge */
  double unpack;        /* writing out and lse from the merged records */
} sattn_mpi_timings;

/* Copies up to timings->struct_size bytes of the last call's timings (zeros before any call). */
SATTN_API sattn_status sattn_mpi_last_timings(sattn_mpi_timings* timings);

/* The message of the last failed sattn_mpi_* call on this thread ("" if none). */
SATTN_API const char* sattn_mpi_last_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STREAMATTN_STREAMATTN_MPI_H_ */
