// sattn_mpi_attention and sattn_mpi_decode: attention over keys sharded across MPI ranks.
//
// Each rank turns its shard into the online-softmax state (m, l, O) of that shard
// (docs/design.md), in (o, lse) form, with one sattn_attention call (the global causal mask and
// window are said through its own options, see shard_mask.h), packs it as records (lse, o[dim])
// and joins one MPI reduction whose op is the merge (merge_op.h). Collectives per call: an
// all-gather of every rank's shapes and key counts (so all ranks reach the same verdict on them),
// in decode the query's broadcast, one 8-byte all-reduce that agrees every rank computed without
// error, and the reduction. Every error is found before the reduction, so every rank returns the
// same status.
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "core/dtype.h"
#include "core/online_state.h"
#include "core/versioned_options.h"
#include "mpi/merge_op.h"
#include "mpi/shard_mask.h"
#include "mpi/views.h"
#include "streamattn/streamattn_mpi.h"

namespace streamattn {
namespace mpi {
namespace {

thread_local Error last_error;
thread_local sattn_mpi_timings last_timings;

// Collective payloads are counted in int: larger buffers go in pieces of this many elements.
constexpr int64_t kMaxCount = INT_MAX;

// What each rank tells every other before computing (one MPI_Allgather of int64).
enum Field : int {
  kStatus,  // sattn_status of this rank's own checks
  kBatch,   // q's shape and dtype, where this rank has q (else 0)
  kSeqQ,
  kHeadsQ,
  kHeadDim,
  kQDType,
  kHeadDimV,    // v_shard.shape[3]; 0 for an empty shard
  kOutDimV,     // out.shape[3] where this rank writes out; else 0
  kKeys,        // the shard's keys, the same for every sequence; -1: per sequence (seqused_k)
  kWindowLeft,  // the canonical global mask, causal folded into the right bound
  kWindowRight,
  kScaleBits,
  kSoftcapBits,
  kHasSinks,
  kFields
};

// One rank's side of a collective call.
struct Call {
  sattn_context* ctx = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, root = 0;
  bool reduce_to_root = false;  // decode: q from root, the result only on root
  const sattn_tensor *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr, *lse = nullptr;
  sattn_attention_options options{};
  GlobalMask mask;

  bool HasQ(int r) const { return !reduce_to_root || r == root; }
  bool Writes() const { return HasQ(rank); }
  bool Empty() const { return k == nullptr; }
};

// What every rank agreed on from the exchanged table.
struct Global {
  int64_t batch = 0, seq_q = 0, heads_q = 0, head_dim = 0, head_dim_v = 0;
  int32_t q_dtype = SATTN_DTYPE_F32;
  // Per sequence (or one entry for all when every shard's count is uniform): the keys before
  // this rank's shard, and all the keys.
  std::vector<int64_t> offset, total, keys;
  int64_t Rows() const { return batch * seq_q * heads_q; }
};

Error MpiFailed(const char* what, int err) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  MPI_Error_string(err, text, &length);
  return Fail(SATTN_ERR_BACKEND_UNAVAILABLE, "%s failed: %s", what, text);
}

// The options as this library knows them (core/versioned_options.h's rule for other sizes), with
// the scalar checks done here too, so that a call in which every shard is empty still rejects
// what sattn_attention would.
Error ReadAttentionOptions(const sattn_attention_options* user, Call* call) {
  sattn_attention_options& o = call->options;
  o = sattn_attention_options{};
  if (user != nullptr) {
    const OptionsRead read = CopyVersionedOptions(*user, kFirstAttentionOptionsSize, &o);
    if (read.verdict == OptionsVerdict::kTooSmall) {
      return Fail(SATTN_ERR_INVALID_ARGUMENT,
                  "options->struct_size=%u is smaller than the smallest known size %zu (set it "
                  "to sizeof(sattn_attention_options))",
                  read.struct_size, kFirstAttentionOptionsSize);
    }
    if (read.verdict == OptionsVerdict::kUnknownField) {
      return Fail(SATTN_ERR_UNSUPPORTED,
                  "options sets a field at byte %zu that this streamattn_mpi does not know",
                  read.byte);
    }
  }
  if (user != nullptr && CutsAttentionOptionsField(user->struct_size)) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT,
                "options->struct_size=%u ends inside a field: it is not the size of a version "
                "(set it to sizeof(sattn_attention_options))",
                user->struct_size);
  }
  o.struct_size = sizeof(o);
  if (o.k_scales != nullptr || o.v_scales != nullptr) {
    return Fail(SATTN_ERR_UNSUPPORTED,
                "options->%s: quantized caches are not supported across shards (shard f32, f16 "
                "or bf16 caches)",
                o.k_scales != nullptr ? "k_scales" : "v_scales");
  }
  if (o.cu_seqlens_q != nullptr || o.cu_seqlens_k != nullptr) {
    return Fail(SATTN_ERR_UNSUPPORTED,
                "options->%s: packed variable-length batches are not supported across shards",
                o.cu_seqlens_q != nullptr ? "cu_seqlens_q" : "cu_seqlens_k");
  }
  if (o.alibi_slopes != nullptr) {
    return Fail(SATTN_ERR_UNSUPPORTED,
                "options->alibi_slopes is not supported across shards (ALiBi needs each key's "
                "global position inside the kernel)");
  }
  if (!std::isfinite(o.scale)) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT, "options->scale=%g must be finite", o.scale);
  }
  if (!(o.softcap >= 0.0f) || std::isinf(o.softcap)) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT,
                "options->softcap=%g must be finite and >= 0 (0 = none)", o.softcap);
  }
  if (o.has_window && (o.window_left < -1 || o.window_right < -1)) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT,
                "options->window_left=%lld and window_right=%lld must be >= -1 (-1 = unbounded)",
                static_cast<long long>(o.window_left), static_cast<long long>(o.window_right));
  }
  call->mask = CanonicalMask(o.causal != 0, o.has_window != 0, o.window_left, o.window_right);
  return Error();
}

// This rank's checks before the exchange: what the exchange itself reports.
Error CheckLocally(const sattn_attention_options* user_options, Call* call, int64_t* fields) {
  if (call->ctx == nullptr) return Fail(SATTN_ERR_INVALID_ARGUMENT, "ctx must not be NULL");
  SATTN_MPI_RETURN_IF_FAILED(ReadAttentionOptions(user_options, call));
  const sattn_attention_options& o = call->options;
  fields[kWindowLeft] = call->mask.window_left;
  fields[kWindowRight] = call->mask.window_right;
  fields[kScaleBits] = FloatBits(o.scale);
  fields[kSoftcapBits] = FloatBits(o.softcap);
  fields[kHasSinks] = o.sinks != nullptr;
  if (call->Writes()) {
    SATTN_MPI_RETURN_IF_FAILED(CheckView(call->q, "q", 4, true));
    fields[kBatch] = call->q->shape[0];
    fields[kSeqQ] = call->q->shape[1];
    fields[kHeadsQ] = call->q->shape[2];
    fields[kHeadDim] = call->q->shape[3];
    fields[kQDType] = call->q->dtype;
    SATTN_MPI_RETURN_IF_FAILED(CheckView(call->out, "out", 4, true));
    fields[kOutDimV] = call->out->shape[3];
  }
  if ((call->k == nullptr) != (call->v == nullptr)) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT,
                "k_shard and v_shard must both be NULL (an empty shard) or both be given");
  }
  if (call->Empty()) return Error();  // kKeys = 0
  SATTN_MPI_RETURN_IF_FAILED(CheckView(call->k, "k_shard", 4, true));
  SATTN_MPI_RETURN_IF_FAILED(CheckView(call->v, "v_shard", 4, true));
  fields[kHeadDimV] = call->v->shape[3];
  if (o.seqused_k != nullptr) {
    SATTN_MPI_RETURN_IF_FAILED(
        CheckView(o.seqused_k, "options->seqused_k", 1, false, SATTN_DTYPE_I32));
    fields[kKeys] = -1;
  } else if (o.block_table != nullptr) {
    SATTN_MPI_RETURN_IF_FAILED(
        CheckView(o.block_table, "options->block_table", 2, false, SATTN_DTYPE_I32));
    fields[kKeys] = o.block_table->shape[1] * call->k->shape[1];
  } else {
    fields[kKeys] = call->k->shape[1];
  }
  return Error();
}

// The failure of rank `failing`, as every rank reports it: that rank's own message, which it
// broadcasts, prefixed elsewhere with its rank.
Error ShareFailure(const Call& call, int failing, sattn_status code, const Error& local) {
  Error e;
  e.code = code;
  char text[sizeof(e.message)];
  std::memcpy(text, local.message, sizeof(text));
  const int err = MPI_Bcast(text, sizeof(text), MPI_CHAR, failing, call.comm);
  if (err != MPI_SUCCESS) return MpiFailed("MPI_Bcast of an error message", err);
  text[sizeof(text) - 1] = '\0';
  if (failing == call.rank) return local;
  std::snprintf(e.message, sizeof(e.message), "rank %d: %s", failing, text);
  return e;
}

// Every rank's verdict on the exchanged table; the same on every rank, as it reads the same
// numbers.
Error AgreeOnTable(const Call& call, const std::vector<int64_t>& table, const Error& local,
                   Global* g) {
  auto at = [&](int r, Field f) { return table[static_cast<size_t>(r) * kFields + f]; };
  for (int r = 0; r < call.size; ++r) {
    if (at(r, kStatus) != SATTN_OK) {
      return ShareFailure(call, r, static_cast<sattn_status>(at(r, kStatus)), local);
    }
  }
  const int ref = call.reduce_to_root ? call.root : 0;
  for (int r = 0; r < call.size; ++r) {
    if (call.HasQ(r)) {
      for (int f = kBatch; f <= kQDType; ++f) {
        if (at(r, Field(f)) == at(ref, Field(f))) continue;
        return Fail(SATTN_ERR_INVALID_ARGUMENT,
                    "rank %d: q (shape [%lld, %lld, %lld, %lld], dtype %lld) differs from rank "
                    "%d's (shape [%lld, %lld, %lld, %lld], dtype %lld)",
                    r, (long long)at(r, kBatch), (long long)at(r, kSeqQ), (long long)at(r, kHeadsQ),
                    (long long)at(r, kHeadDim), (long long)at(r, kQDType), ref,
                    (long long)at(ref, kBatch), (long long)at(ref, kSeqQ),
                    (long long)at(ref, kHeadsQ), (long long)at(ref, kHeadDim),
                    (long long)at(ref, kQDType));
      }
    }
    for (int f = kWindowLeft; f <= kHasSinks; ++f) {
      if (at(r, Field(f)) == at(0, Field(f))) continue;
      return Fail(SATTN_ERR_INVALID_ARGUMENT,
                  "rank %d: options (causal, window, scale, softcap or whether sinks are given) "
                  "differ from rank 0's; they describe the attention over all the keys",
                  r);
    }
  }
  g->batch = at(ref, kBatch);
  g->seq_q = at(ref, kSeqQ);
  g->heads_q = at(ref, kHeadsQ);
  g->head_dim = at(ref, kHeadDim);
  g->q_dtype = static_cast<int32_t>(at(ref, kQDType));
  int dv_rank = -1;
  for (int r = 0; r < call.size; ++r) {
    const int64_t dv = at(r, kHeadDimV);
    if (dv == 0) continue;
    if (dv_rank < 0) dv_rank = r;
    if (dv != at(dv_rank, kHeadDimV)) {
      return Fail(SATTN_ERR_INVALID_ARGUMENT,
                  "rank %d: v_shard.shape[3]=%lld differs from rank %d's %lld", r, (long long)dv,
                  dv_rank, (long long)at(dv_rank, kHeadDimV));
    }
  }
  g->head_dim_v = dv_rank >= 0 ? at(dv_rank, kHeadDimV) : at(ref, kOutDimV);
  for (int r = 0; r < call.size; ++r) {
    if (call.HasQ(r) && at(r, kOutDimV) != g->head_dim_v) {
      return Fail(SATTN_ERR_INVALID_ARGUMENT,
                  "rank %d: out.shape[3]=%lld must equal head_dim_v=%lld (v_shard.shape[3])", r,
                  (long long)at(r, kOutDimV), (long long)g->head_dim_v);
    }
  }
  bool uniform = true;
  int64_t offset = 0, total = 0;
  for (int r = 0; r < call.size; ++r) {
    uniform = uniform && at(r, kKeys) >= 0;
    if (r < call.rank) offset += at(r, kKeys);
    total += at(r, kKeys);
  }
  if (uniform) {
    g->offset.assign(1, offset);
    g->total.assign(1, total);
    g->keys.assign(1, at(call.rank, kKeys));
  }
  return Error();
}

// Per-sequence key counts (some shard has seqused_k) and a mask that needs offsets: every rank's
// counts, all-gathered. A rank whose seqused_k has the wrong length contributes zeros and
// reports the error when the ranks agree.
Error GatherKeyCounts(const Call& call, Global* g, Error* pending) {
  const int64_t batch = g->batch;
  std::vector<int64_t> mine(batch, 0), all(static_cast<size_t>(batch) * call.size);
  const sattn_tensor* used = call.options.seqused_k;
  if (!call.Empty() && used == nullptr) {
    mine.assign(batch, call.options.block_table != nullptr
                           ? call.options.block_table->shape[1] * call.k->shape[1]
                           : call.k->shape[1]);
  } else if (!call.Empty()) {
    if (used->shape[0] != batch) {
      *pending =
          Fail(SATTN_ERR_INVALID_ARGUMENT, "options->seqused_k.shape[0]=%lld must equal batch=%lld",
               (long long)used->shape[0], (long long)batch);
    } else {
      for (int64_t b = 0; b < batch; ++b) {
        mine[b] = *static_cast<const int32_t*>(ElementAt(*used, &b));
      }
    }
  }
  if (batch > kMaxCount / call.size) {
    return Fail(SATTN_ERR_UNSUPPORTED, "batch=%lld is too large", (long long)batch);
  }
  const int err = MPI_Allgather(mine.data(), static_cast<int>(batch), MPI_INT64_T, all.data(),
                                static_cast<int>(batch), MPI_INT64_T, call.comm);
  if (err != MPI_SUCCESS) return MpiFailed("MPI_Allgather of key counts", err);
  g->offset.assign(batch, 0);
  g->total.assign(batch, 0);
  g->keys = mine;
  for (int r = 0; r < call.size; ++r) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = all[static_cast<size_t>(r) * batch + b];
      if (r < call.rank) g->offset[b] += n;
      g->total[b] += n;
    }
  }
  return Error();
}

// The outputs this layer writes itself, and the views it slices per sequence, checked against
// the agreed shapes.
Error CheckOutputsAndSlices(const Call& call, const Global& g) {
  const sattn_attention_options& o = call.options;
  if (call.Writes()) {
    const sattn_tensor& out = *call.out;
    SATTN_MPI_RETURN_IF_FAILED(CheckExtent(out, "out", 0, g.batch, "q.shape[0]"));
    SATTN_MPI_RETURN_IF_FAILED(CheckExtent(out, "out", 1, g.seq_q, "q.shape[1]"));
    SATTN_MPI_RETURN_IF_FAILED(CheckExtent(out, "out", 2, g.heads_q, "q.shape[2]"));
    SATTN_MPI_RETURN_IF_FAILED(CheckNoSelfOverlap(out, "out"));
    SATTN_MPI_RETURN_IF_FAILED(CheckNoOverlap(out, "out", *call.q, "q", true));
    if (!call.Empty()) {
      SATTN_MPI_RETURN_IF_FAILED(CheckNoOverlap(out, "out", *call.k, "k_shard", false));
      SATTN_MPI_RETURN_IF_FAILED(CheckNoOverlap(out, "out", *call.v, "v_shard", false));
    }
    if (call.lse != nullptr) {
      const sattn_tensor& lse = *call.lse;
      SATTN_MPI_RETURN_IF_FAILED(CheckView(call.lse, "lse", 3, false, SATTN_DTYPE_F32));
      SATTN_MPI_RETURN_IF_FAILED(CheckExtent(lse, "lse", 0, g.batch, "q.shape[0]"));
      SATTN_MPI_RETURN_IF_FAILED(CheckExtent(lse, "lse", 1, g.heads_q, "q.shape[2]"));
      SATTN_MPI_RETURN_IF_FAILED(CheckExtent(lse, "lse", 2, g.seq_q, "q.shape[1]"));
      SATTN_MPI_RETURN_IF_FAILED(CheckNoSelfOverlap(lse, "lse"));
      SATTN_MPI_RETURN_IF_FAILED(CheckNoOverlap(lse, "lse", out, "out", false));
      SATTN_MPI_RETURN_IF_FAILED(CheckNoOverlap(lse, "lse", *call.q, "q", false));
      if (!call.Empty()) {
        SATTN_MPI_RETURN_IF_FAILED(CheckNoOverlap(lse, "lse", *call.k, "k_shard", false));
        SATTN_MPI_RETURN_IF_FAILED(CheckNoOverlap(lse, "lse", *call.v, "v_shard", false));
      }
    }
  }
  if (call.rank == 0 && o.sinks != nullptr) {
    SATTN_MPI_RETURN_IF_FAILED(CheckView(o.sinks, "options->sinks", 1, false, SATTN_DTYPE_F32));
    SATTN_MPI_RETURN_IF_FAILED(CheckExtent(*o.sinks, "options->sinks", 0, g.heads_q, "heads_q"));
    for (int64_t h = 0; h < g.heads_q; ++h) {  // rank 0 applies them even to an empty shard
      const float x = *static_cast<const float*>(ElementAt(*o.sinks, &h));
      if (std::isnan(x) || x == -kNegInf) {
        return Fail(SATTN_ERR_INVALID_ARGUMENT, "options->sinks[%lld]=%g must be finite or -inf",
                    static_cast<long long>(h), x);
      }
    }
  }
  if (call.Empty()) return Error();
  // Slicing must not hide a wrong extent: the sliced dims must be what sattn_attention wants.
  if (o.block_table == nullptr) {
    SATTN_MPI_RETURN_IF_FAILED(CheckExtent(*call.k, "k_shard", 0, g.batch, "batch"));
    SATTN_MPI_RETURN_IF_FAILED(CheckExtent(*call.v, "v_shard", 0, g.batch, "batch"));
  } else {
    SATTN_MPI_RETURN_IF_FAILED(
        CheckExtent(*o.block_table, "options->block_table", 0, g.batch, "batch"));
  }
  if (o.seqused_k != nullptr) {
    SATTN_MPI_RETURN_IF_FAILED(
        CheckExtent(*o.seqused_k, "options->seqused_k", 0, g.batch, "batch"));
  }
  if (o.mask != nullptr) {
    SATTN_MPI_RETURN_IF_FAILED(CheckView(o.mask, "options->mask", 4, true));
    if (o.mask->shape[0] != 1) {
      SATTN_MPI_RETURN_IF_FAILED(CheckExtent(*o.mask, "options->mask", 0, g.batch, "batch"));
    }
    SATTN_MPI_RETURN_IF_FAILED(CheckExtent(*o.mask, "options->mask", 2, g.seq_q, "seq_q"));
  }
  return Error();
}

// This rank's state of every row, as records (lse, o[dim]) in [batch, seq_q, heads_q] order:
// the identity where the shard shows a row nothing (or, on rank 0 with sinks, the sink's part),
// sattn_attention's (o, lse) elsewhere.
Error ComputeShardStates(const Call& call, const Global& g, const sattn_tensor& q, float* records,
                         float* lse) {
  const int64_t dv = g.head_dim_v, rec = dv + 1;
  const int64_t sq = g.seq_q, hq = g.heads_q;
  const sattn_attention_options& o = call.options;
  const bool sinks = call.rank == 0 && o.sinks != nullptr;
  for (int64_t h = 0; h < hq; ++h) {
    const float init = sinks ? *static_cast<const float*>(ElementAt(*o.sinks, &h)) : kNegInf;
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t s = 0; s < sq; ++s) lse[(b * hq + h) * sq + s] = init;
    }
  }
  std::memset(records, 0, sizeof(float) * g.Rows() * rec);
  if (!call.Empty()) {
    auto plan_for = [&](int64_t b) {
      const size_t i = g.offset.size() == 1 ? 0 : static_cast<size_t>(b);
      return PlanShardCall(call.mask, sq, g.total[i] - g.offset[i] - g.keys[i]);
    };
    const bool paged = o.block_table != nullptr;
    // Sequences whose shards need the same call go together (all of them, unless seqused_k
    // gives the shards different fills under a mask).
    for (int64_t first = 0, nb = 1; first < g.batch; first += nb) {
      const ShardCall plan = plan_for(first);
      for (nb = 1; first + nb < g.batch; ++nb) {
        const ShardCall next = plan_for(first + nb);
        if (next.rows != plan.rows || next.window_left != plan.window_left ||
            next.window_right != plan.window_right || next.has_window != plan.has_window) {
          break;
        }
      }
      const int64_t rows = plan.rows;
      if (rows == 0) continue;
      sattn_attention_options local = o;
      local.causal = 0;  // folded into the window
      local.has_window = plan.has_window;
      local.window_left = plan.window_left;
      local.window_right = plan.window_right;
      local.sinks = sinks ? o.sinks : nullptr;
      sattn_tensor mask, used, table;
      if (o.mask != nullptr) {
        mask = o.mask->shape[0] == 1 ? *o.mask : Slice(*o.mask, 0, first, nb);
        mask = Slice(mask, 2, 0, rows);
        local.mask = &mask;
      }
      if (o.seqused_k != nullptr) {
        used = Slice(*o.seqused_k, 0, first, nb);
        local.seqused_k = &used;
      }
      if (paged) {
        table = Slice(*o.block_table, 0, first, nb);
        local.block_table = &table;
      }
      const sattn_tensor q_part = Slice(Slice(q, 0, first, nb), 1, 0, rows);
      const sattn_tensor k_part = paged ? *call.k : Slice(*call.k, 0, first, nb);
      const sattn_tensor v_part = paged ? *call.v : Slice(*call.v, 0, first, nb);
      sattn_tensor o_part{};
      o_part.data = records + first * sq * hq * rec + 1;
      o_part.dtype = SATTN_DTYPE_F32;
      o_part.ndim = 4;
      const int64_t o_shape[4] = {nb, rows, hq, dv},
                    o_strides[4] = {sq * hq * rec, hq * rec, rec, 1};
      std::memcpy(o_part.shape, o_shape, sizeof(o_shape));
      std::memcpy(o_part.strides, o_strides, sizeof(o_strides));
      const int64_t lse_shape[3] = {nb, hq, rows};
      sattn_tensor lse_part =
          sattn_tensor_contiguous(lse + first * hq * sq, SATTN_DTYPE_F32, 3, lse_shape);
      lse_part.strides[0] = hq * sq;
      lse_part.strides[1] = sq;
      const sattn_status status =
          sattn_attention(call.ctx, &q_part, &k_part, &v_part, &o_part, &lse_part, &local);
      if (status != SATTN_OK) {
        return Fail(status, "sattn_attention over this rank's shard: %s", sattn_last_error());
      }
    }
  }
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t s = 0; s < sq; ++s) {
      for (int64_t h = 0; h < hq; ++h) {
        records[((b * sq + s) * hq + h) * rec] = lse[(b * hq + h) * sq + s];
      }
    }
  }
  return Error();
}

// The merged records into the caller's out (any float dtype and strides) and lse: conversions
// only, so nothing here can fail after the ranks agreed.
void UnpackRecords(const Global& g, const float* records, const sattn_tensor& out,
                   const sattn_tensor* lse) {
  const int64_t dv = g.head_dim_v, rec = dv + 1, es = ElementSize(out.dtype);
  const DType dtype = static_cast<DType>(out.dtype);
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t s = 0; s < g.seq_q; ++s) {
      for (int64_t h = 0; h < g.heads_q; ++h) {
        const float* r = records + ((b * g.seq_q + s) * g.heads_q + h) * rec;
        char* row = static_cast<char*>(out.data) +
                    (b * out.strides[0] + s * out.strides[1] + h * out.strides[2]) * es;
        for (int64_t j = 0; j < dv; ++j)
          StoreFromFloat(dtype, r[1 + j], row + j * out.strides[3] * es);
        if (lse != nullptr) {
          const int64_t index[3] = {b, h, s};
          *static_cast<float*>(ElementAt(*lse, index)) = r[0];
        }
      }
    }
  }
}

// Broadcasts the query from root: packed on root unless already contiguous, received into
// `buffer` elsewhere (into `discard` when that could not be allocated: the collective must
// still happen).
Error BroadcastQuery(const Call& call, const Global& g, char* buffer, sattn_tensor* q) {
  static char discard[1 << 20];
  const int64_t es = ElementSize(g.q_dtype);
  const int64_t bytes = g.Rows() * g.head_dim * es;
  const int64_t shape[4] = {g.batch, g.seq_q, g.heads_q, g.head_dim};
  char* data = buffer;
  if (call.rank == call.root) {
    if (IsContiguous(*call.q)) {
      data = static_cast<char*>(call.q->data);
    } else if (buffer != nullptr) {
      PackContiguous(*call.q, buffer);
    }
  }
  constexpr int64_t kChunk = sizeof(discard);
  for (int64_t done = 0; done < bytes; done += kChunk) {
    const int n = static_cast<int>(bytes - done < kChunk ? bytes - done : kChunk);
    char* at = data != nullptr ? data + done : discard;
    const int err = MPI_Bcast(at, n, MPI_BYTE, call.root, call.comm);
    if (err != MPI_SUCCESS) return MpiFailed("MPI_Bcast of q", err);
  }
  *q = call.rank == call.root
           ? *call.q
           : sattn_tensor_contiguous(data, static_cast<sattn_dtype>(g.q_dtype), 4, shape);
  return Error();
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

Error Run(Call& call, const sattn_attention_options* options, sattn_mpi_timings* t) {
  if (call.comm == MPI_COMM_NULL) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT, "comm must not be MPI_COMM_NULL");
  }
  int inter = 0;
  MPI_Comm_test_inter(call.comm, &inter);
  if (inter) return Fail(SATTN_ERR_INVALID_ARGUMENT, "comm must be an intra-communicator");
  MPI_Comm_rank(call.comm, &call.rank);
  MPI_Comm_size(call.comm, &call.size);
  if (call.root < 0 || call.root >= call.size) {
    return Fail(SATTN_ERR_INVALID_ARGUMENT, "root=%d must be in [0, %d)", call.root, call.size);
  }
  double mark = MPI_Wtime();
  auto lap = [&](double* slot) {
    const double now = MPI_Wtime();
    *slot += now - mark;
    mark = now;
  };

  int64_t fields[kFields] = {};
  const Error local = CheckLocally(options, &call, fields);
  fields[kStatus] = local.code;
  std::vector<int64_t> table(static_cast<size_t>(call.size) * kFields);
  int err =
      MPI_Allgather(fields, kFields, MPI_INT64_T, table.data(), kFields, MPI_INT64_T, call.comm);
  if (err != MPI_SUCCESS) return MpiFailed("MPI_Allgather of shapes", err);
  Global g;
  SATTN_MPI_RETURN_IF_FAILED(AgreeOnTable(call, table, local, &g));
  Error pending;
  const bool bounded = call.mask.window_left >= 0 || call.mask.window_right >= 0;
  if (g.offset.empty()) {
    if (bounded) {
      SATTN_MPI_RETURN_IF_FAILED(GatherKeyCounts(call, &g, &pending));
    } else {  // no mask: offsets do not matter
      g.offset.assign(1, 0);
      g.total.assign(1, 0);
      g.keys.assign(1, 0);
    }
  }

  // One allocation for the records, the lse of this shard and, in decode, the query.
  const int64_t rows = g.Rows(), rec = g.head_dim_v + 1;
  const int64_t q_bytes = call.reduce_to_root ? rows * g.head_dim * ElementSize(g.q_dtype) : 0;
  const size_t bytes = sizeof(float) * static_cast<size_t>(rows * rec + rows) + q_bytes;
  std::unique_ptr<char, FreeDeleter> memory(static_cast<char*>(std::malloc(bytes)));
  if (memory == nullptr && pending.ok()) {
    pending =
        Fail(SATTN_ERR_OUT_OF_MEMORY, "out of memory: %zu bytes for the shard's records", bytes);
  }
  float* records = reinterpret_cast<float*>(memory.get());
  float* lse = records != nullptr ? records + rows * rec : nullptr;
  char* q_buffer = records != nullptr ? reinterpret_cast<char*>(lse + rows) : nullptr;
  sattn_tensor q{};
  if (call.reduce_to_root) {
    SATTN_MPI_RETURN_IF_FAILED(BroadcastQuery(call, g, q_bytes > 0 ? q_buffer : nullptr, &q));
  } else {
    q = *call.q;
  }
  lap(&t->exchange);

  if (pending.ok()) pending = CheckOutputsAndSlices(call, g);
  if (pending.ok()) pending = ComputeShardStates(call, g, q, records, lse);
  lap(&t->compute);

  // Agree: the highest failing status wins, then the lowest rank.
  const int64_t mine = pending.ok() ? 0
                                    : (static_cast<int64_t>(pending.code) << 32) |
                                          static_cast<int64_t>(INT32_MAX - call.rank);
  int64_t worst = 0;
  err = MPI_Allreduce(&mine, &worst, 1, MPI_INT64_T, MPI_MAX, call.comm);
  if (err != MPI_SUCCESS) return MpiFailed("MPI_Allreduce of statuses", err);
  if (worst != 0) {
    const int failing = INT32_MAX - static_cast<int>(worst & 0xFFFFFFFF);
    return ShareFailure(call, failing, static_cast<sattn_status>(worst >> 32), pending);
  }
  lap(&t->agree);

  MPI_Datatype record;
  MPI_Op op;
  err = CreateMergeOp(g.head_dim_v, &record, &op);
  if (err != MPI_SUCCESS) return MpiFailed("creating the merge op", err);
  for (int64_t done = 0; done < rows && err == MPI_SUCCESS; done += kMaxCount) {
    const int n = static_cast<int>(rows - done < kMaxCount ? rows - done : kMaxCount);
    float* at = records + done * rec;
    if (!call.reduce_to_root) {
      err = MPI_Allreduce(MPI_IN_PLACE, at, n, record, op, call.comm);
    } else {
      err = MPI_Reduce(call.rank == call.root ? MPI_IN_PLACE : at, at, n, record, op, call.root,
                       call.comm);
    }
  }
  MPI_Op_free(&op);
  MPI_Type_free(&record);
  if (err != MPI_SUCCESS) return MpiFailed("the reduction of states", err);
  lap(&t->reduce);

  if (call.Writes()) UnpackRecords(g, records, *call.out, call.lse);
  lap(&t->unpack);
  return Error();
}

// Records the call: its timings always, its message only when it failed (the message is that
// of the last failed call).
sattn_status Finish(const Error& e, const sattn_mpi_timings& timings) {
  if (!e.ok()) last_error = e;
  last_timings = timings;
  return e.code;
}

sattn_status Enter(sattn_context* ctx, MPI_Comm comm, bool reduce_to_root, int root,
                   const sattn_tensor* q, const sattn_tensor* k, const sattn_tensor* v,
                   const sattn_tensor* out, const sattn_tensor* lse,
                   const sattn_attention_options* options) {
  sattn_mpi_timings timings{};
  timings.struct_size = sizeof(timings);
  try {
    Call call;
    call.ctx = ctx;
    call.comm = comm;
    call.root = root;
    call.reduce_to_root = reduce_to_root;
    call.q = q;
    call.k = k;
    call.v = v;
    call.out = out;
    call.lse = lse;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) {
      return Finish(
          Fail(SATTN_ERR_INVALID_ARGUMENT, "MPI is not initialized (or already finalized)"),
          timings);
    }
    const double start = MPI_Wtime();
    const Error e = Run(call, options, &timings);
    timings.total = MPI_Wtime() - start;
    return Finish(e, timings);
  } catch (const std::bad_alloc&) {
    return Finish(Fail(SATTN_ERR_OUT_OF_MEMORY, "out of memory"), timings);
  } catch (...) {
    return Finish(Fail(SATTN_ERR_INTERNAL, "unexpected exception"), timings);
  }
}

}  // namespace
}  // namespace mpi
}  // namespace streamattn

extern "C" {

SATTN_API sattn_status sattn_mpi_attention(sattn_context* ctx, MPI_Comm comm, const sattn_tensor* q,
                                           const sattn_tensor* k_shard, const sattn_tensor* v_shard,
                                           const sattn_tensor* out, const sattn_tensor* lse,
                                           const sattn_attention_options* options) {
  return streamattn::mpi::Enter(ctx, comm, false, 0, q, k_shard, v_shard, out, lse, options);
}

SATTN_API sattn_status sattn_mpi_decode(sattn_context* ctx, MPI_Comm comm, int root,
                                        const sattn_tensor* q, const sattn_tensor* k_shard,
                                        const sattn_tensor* v_shard, const sattn_tensor* out,
                                        const sattn_tensor* lse,
                                        const sattn_attention_options* options) {
  return streamattn::mpi::Enter(ctx, comm, true, root, q, k_shard, v_shard, out, lse, options);
}

SATTN_API sattn_status sattn_mpi_merge_op_create(int32_t head_dim_v, MPI_Datatype* record,
                                                 MPI_Op* op) {
  using streamattn::mpi::Fail;
  sattn_mpi_timings keep = streamattn::mpi::last_timings;
  if (record == nullptr || op == nullptr) {
    return streamattn::mpi::Finish(
        Fail(SATTN_ERR_INVALID_ARGUMENT, "record and op must not be NULL"), keep);
  }
  if (head_dim_v < 1 || head_dim_v > (1 << 20)) {
    return streamattn::mpi::Finish(
        Fail(SATTN_ERR_INVALID_ARGUMENT, "head_dim_v=%d must be in [1, %d]", head_dim_v, 1 << 20),
        keep);
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return streamattn::mpi::Finish(
        Fail(SATTN_ERR_INVALID_ARGUMENT, "MPI is not initialized (or already finalized)"), keep);
  }
  const int err = streamattn::mpi::CreateMergeOp(head_dim_v, record, op);
  if (err != MPI_SUCCESS) {
    return streamattn::mpi::Finish(streamattn::mpi::MpiFailed("creating the merge op", err), keep);
  }
  return SATTN_OK;
}

SATTN_API sattn_status sattn_mpi_last_timings(sattn_mpi_timings* timings) {
  if (timings == nullptr || timings->struct_size < sizeof(uint32_t)) {
    return SATTN_ERR_INVALID_ARGUMENT;
  }
  const size_t size =
      timings->struct_size < sizeof(*timings) ? timings->struct_size : sizeof(*timings);
  const uint32_t keep = timings->struct_size;
  std::memcpy(static_cast<void*>(timings), &streamattn::mpi::last_timings, size);
  timings->struct_size = keep;
  return SATTN_OK;
}

SATTN_API const char* sattn_mpi_last_error(void) { return streamattn::mpi::last_error.message; }

}  // extern "C"
