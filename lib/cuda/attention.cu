// sattn_attention on device tensors: the checks only the CUDA kernels need (dtypes, head_dim,
// layout), the choice between the prefill and the split-KV decode form of the flash kernel, and
// the combine of split partials with the merge kernel. Arguments arrive validated by the core.
#include <algorithm>

#include "core/dtype.h"
#include "cuda/cuda_common.cuh"
#include "cuda/flash_attention.cuh"
#include "cuda/merge_states.cuh"
#include "cuda/plugin_entries.h"

namespace streamattn {
namespace cuda {
namespace {

constexpr int64_t kMaxDecodeRows = 16;  // seq_q up to this takes the split-KV decode form
constexpr int64_t kMinKeysPerSplit = 256;
constexpr int64_t kMaxSplits = 128;
constexpr int64_t kMaxGridYZ = 65535;

// q, k and v rows are read as 16-byte vectors.
int32_t CheckRows(const sattn_tensor& t, const char* name, const Reply& reply) {
  bool aligned = reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
  for (int i = 0; i < 3; ++i) aligned &= t.shape[i] == 1 || t.strides[i] % 8 == 0;
  if (t.strides[3] == 1 && aligned) return SATTN_OK;
  return reply.Fail(SATTN_ERR_UNSUPPORTED,
                    "%s: the CUDA kernels need head_dim contiguous (strides[3]=1) and rows "
                    "aligned to 16 bytes (data, and strides[0..2] of extents above 1, multiples of "
                    "8 elements); got strides [%lld, %lld, %lld, %lld]",
                    name, static_cast<long long>(t.strides[0]),
                    static_cast<long long>(t.strides[1]), static_cast<long long>(t.strides[2]),
                    static_cast<long long>(t.strides[3]));
}

int32_t CheckSupported(const sattn_cuda_attention_args& a, const Reply& reply) {
  if (a.has_alibi) return reply.Fail(SATTN_ERR_UNSUPPORTED, "options->alibi_slopes: no ALiBi");
  if (a.has_mask) return reply.Fail(SATTN_ERR_UNSUPPORTED, "options->mask: no additive mask");
  if (a.has_sinks) return reply.Fail(SATTN_ERR_UNSUPPORTED, "options->sinks: no sinks");
  const int32_t dtype = a.q->dtype;
  if (dtype != SATTN_DTYPE_F16 && dtype != SATTN_DTYPE_BF16) {
    return reply.Fail(SATTN_ERR_UNSUPPORTED,
                      "q.dtype=%s: the CUDA kernels take f16 or bf16 q, k and v (f32 runs on "
                      "the CPU backend, with host tensors)",
                      DTypeName(dtype));
  }
  for (const auto& [t, name] :
       {std::pair<const sattn_tensor*, const char*>{a.k, "k"}, {a.v, "v"}}) {
    if (t->dtype != dtype) {
      return reply.Fail(SATTN_ERR_UNSUPPORTED,
                        "%s.dtype=%s differs from q.dtype=%s: the CUDA kernels need one dtype for "
                        "q, k and v",
                        name, DTypeName(t->dtype), DTypeName(dtype));
    }
  }
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) {
    return reply.Fail(SATTN_ERR_UNSUPPORTED,
                      "head_dim=%lld: the CUDA kernels cover head_dim 64, 128 and 256",
                      static_cast<long long>(a.head_dim));
  }
  if (a.head_dim_v != a.head_dim) {
    return reply.Fail(
        SATTN_ERR_UNSUPPORTED,
        "head_dim_v=%lld differs from head_dim=%lld: the CUDA kernels need them equal",
        static_cast<long long>(a.head_dim_v), static_cast<long long>(a.head_dim));
  }
  int32_t status = CheckRows(*a.q, "q", reply);
  if (status == SATTN_OK) status = CheckRows(*a.k, "k", reply);
  if (status == SATTN_OK) status = CheckRows(*a.v, "v", reply);
  return status;
}

cudaError_t Launch(int32_t dtype, int64_t head_dim, const FlashParams& p, cudaStream_t stream) {
  const bool f16 = dtype == SATTN_DTYPE_F16;
  switch (head_dim) {
    case 64:
      return f16 ? LaunchFlash<__half, 64>(p, stream) : LaunchFlash<__nv_bfloat16, 64>(p, stream);
    case 128:
      return f16 ? LaunchFlash<__half, 128>(p, stream) : LaunchFlash<__nv_bfloat16, 128>(p, stream);
    default:
      return f16 ? LaunchFlash<__half, 256>(p, stream) : LaunchFlash<__nv_bfloat16, 256>(p, stream);
  }
}

// Decode: enough splits of the keys to give every SM two blocks, none under kMinKeysPerSplit
// keys. Depends only on the shapes and the device, so results do not vary between calls.
void ChooseSplits(const sattn_cuda_attention_args& a, int sms, FlashParams* p) {
  p->num_splits = 1;
  p->split_keys = std::max<int64_t>(a.seq_k, 1);
  if (a.seq_q > kMaxDecodeRows) return;
  const int64_t row_blocks = (a.seq_q * p->pack + kFlashRows - 1) / kFlashRows;
  const int64_t blocks = row_blocks * (a.heads_q / p->pack) * a.batch;
  int64_t splits = (2 * static_cast<int64_t>(sms) + blocks - 1) / blocks;
  splits = std::min({splits, (a.seq_k + kMinKeysPerSplit - 1) / kMinKeysPerSplit, kMaxSplits,
                     kMaxGridYZ / a.batch});
  if (splits <= 1) return;
  const int64_t keys = (a.seq_k + splits - 1) / splits;
  p->split_keys = (keys + 63) / 64 * 64;
  p->num_splits = static_cast<int32_t>((a.seq_k + p->split_keys - 1) / p->split_keys);
}

}  // namespace

int32_t RunAttention(const sattn_cuda_attention_args* args, char* message, size_t message_size) {
  const Reply reply{message, message_size};
  const sattn_cuda_attention_args& a = *args;
  if (const int32_t status = CheckSupported(a, reply); status != SATTN_OK) return status;

  FlashParams p{};
  p.q = a.q->data;
  p.k = a.k->data;
  p.v = a.v->data;
  for (int i = 0; i < 3; ++i) {
    p.q_strides[i] = a.q->strides[i];
    p.k_strides[i] = a.k->strides[i];
    p.v_strides[i] = a.v->strides[i];
  }
  p.out = a.out->data;
  p.out_dtype = a.out->dtype;
  for (int i = 0; i < 4; ++i) p.out_strides[i] = a.out->strides[i];
  if (a.lse != nullptr) {
    p.lse = static_cast<float*>(a.lse->data);
    for (int i = 0; i < 3; ++i) p.lse_strides[i] = a.lse->strides[i];
  }
  if (a.seqused_k != nullptr) {
    p.seqused_k = static_cast<const int32_t*>(a.seqused_k->data);
    p.seqused_stride = a.seqused_k->strides[0];
  }
  if (a.block_table != nullptr) {
    p.block_table = static_cast<const int32_t*>(a.block_table->data);
    p.table_strides[0] = a.block_table->strides[0];
    p.table_strides[1] = a.block_table->strides[1];
    p.page_size = a.page_size;
  }
  p.batch = a.batch;
  p.seq_q = a.seq_q;
  p.seq_k = a.seq_k;
  p.heads_q = a.heads_q;
  p.heads_kv = a.heads_kv;
  p.group = a.heads_q / a.heads_kv;
  p.pack = a.seq_q <= kMaxDecodeRows ? static_cast<int32_t>(p.group) : 1;
  constexpr float kLog2e = 1.4426950408889634f;
  p.score_mul = a.softcap > 0.0f ? a.scale / a.softcap : a.scale * kLog2e;
  p.softcap_log2 = a.softcap > 0.0f ? a.softcap * kLog2e : 0.0f;
  p.window_left = a.window_left;
  p.window_right = a.window_right;

  const int64_t row_blocks = (a.seq_q * p.pack + kFlashRows - 1) / kFlashRows;
  if (a.heads_q / p.pack > kMaxGridYZ || a.batch > kMaxGridYZ || row_blocks > INT32_MAX) {
    return reply.Fail(SATTN_ERR_UNSUPPORTED,
                      "batch=%lld, heads_q=%lld, seq_q=%lld exceed the CUDA grid (at most 65535 "
                      "sequences and heads)",
                      static_cast<long long>(a.batch), static_cast<long long>(a.heads_q),
                      static_cast<long long>(a.seq_q));
  }

  DeviceGuard guard;
  cudaError_t error = guard.Enter(a.device_index);
  if (error != cudaSuccess) return reply.FailCuda(error, "selecting the device of q");
  int sms = 0;
  error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a.device_index);
  if (error != cudaSuccess) return reply.FailCuda(error, "querying the device");
  ChooseSplits(a, sms, &p);
  const auto stream = static_cast<cudaStream_t>(a.stream);
  if (p.num_splits == 1) {
    error = Launch(a.q->dtype, a.head_dim, p, stream);
    return error == cudaSuccess ? SATTN_OK : reply.FailCuda(error, "launching the flash kernel");
  }

  // Split-KV: partial states in stream-ordered scratch, then the merge over the splits.
  const int64_t states = a.batch * a.seq_q * a.heads_q;
  const size_t o_bytes = static_cast<size_t>(p.num_splits * states * a.head_dim) * sizeof(float);
  const size_t lse_bytes = static_cast<size_t>(p.num_splits * states) * sizeof(float);
  void* scratch = nullptr;
  error = cudaMallocAsync(&scratch, o_bytes + lse_bytes, stream);
  if (error != cudaSuccess) return reply.FailCuda(error, "allocating split-KV partials");
  p.part_o = static_cast<float*>(scratch);
  p.part_lse = p.part_o + o_bytes / sizeof(float);
  error = Launch(a.q->dtype, a.head_dim, p, stream);
  if (error == cudaSuccess) {
    MergeJob job{};
    job.batch = a.batch;
    job.seq = a.seq_q;
    job.heads = a.heads_q;
    job.dim = a.head_dim;
    job.num_parts = p.num_splits;
    job.uniform = true;
    job.o0 = {p.part_o,
              SATTN_DTYPE_F32,
              {a.seq_q * a.heads_q * a.head_dim, a.heads_q * a.head_dim, a.head_dim, 1}};
    job.o_step = states * a.head_dim;
    job.lse0 = {p.part_lse, {a.heads_q * a.seq_q, a.seq_q, 1}};
    job.lse_step = states;
    job.out = a.out->data;
    job.out_dtype = a.out->dtype;
    for (int i = 0; i < 4; ++i) job.out_strides[i] = a.out->strides[i];
    if (a.lse != nullptr) {
      job.lse_out = {static_cast<const float*>(a.lse->data),
                     {a.lse->strides[0], a.lse->strides[1], a.lse->strides[2]}};
    }
    error = LaunchMerge(job, stream);
  }
  return reply.FreeAfterLaunch(scratch, stream, error, "launching split-KV decode",
                               "freeing split-KV partials");
}

}  // namespace cuda
}  // namespace streamattn
