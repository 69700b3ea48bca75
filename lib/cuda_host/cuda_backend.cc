#include "cuda_host/cuda_backend.h"

#include <cstring>
#include <utility>

namespace streamattn {
namespace {

sattn_tensor ToView(const Tensor& t) {
  sattn_tensor view{};
  view.data = t.data;
  view.dtype = static_cast<int32_t>(t.dtype);
  view.device = t.device;
  view.device_index = t.device_index;
  view.ndim = t.ndim;
  for (int i = 0; i < SATTN_MAX_NDIM; ++i) {
    view.shape[i] = t.shape[i];
    view.strides[i] = t.strides[i];
  }
  return view;
}

Status FromPlugin(int32_t code, const char* message) {
  if (code == SATTN_OK) return Status();
  switch (code) {
    case SATTN_ERR_INVALID_ARGUMENT:
    case SATTN_ERR_UNSUPPORTED:
    case SATTN_ERR_OUT_OF_MEMORY:
    case SATTN_ERR_BACKEND_UNAVAILABLE:
    case SATTN_ERR_INTERNAL:
      return Status(static_cast<sattn_status>(code), std::string("cuda: ") + message);
    default:
      return Internal("cuda: the plugin returned an unknown status %d (%s)", code, message);
  }
}

}  // namespace

Status CudaBackend::Exp2(const float*, float*, int64_t) {
  return Unsupported("sattn_exp2 runs on host arrays only");
}

Status CudaBackend::Softmax(const SoftmaxArgs&) {
  return Unsupported("sattn_softmax on device tensors: the CUDA backend does not implement it");
}

Status CudaBackend::SoftmaxTopK(const SoftmaxTopKArgs&) {
  return Unsupported(
      "sattn_softmax_topk on device tensors: the CUDA backend does not implement it");
}

Status CudaBackend::MergeStates(const MergeStatesArgs& args) {
  if (plugin_->merge_states == nullptr) {
    return Unsupported("sattn_merge_states on device tensors: this CUDA plugin lacks it");
  }
  Vector<sattn_tensor> o(args.num_parts, alloc_), lse(args.num_parts, alloc_);
  for (int32_t i = 0; i < args.num_parts; ++i) {
    o[i] = ToView(args.o_parts[i]);
    lse[i] = ToView(args.lse_parts[i]);
  }
  const sattn_tensor out = ToView(args.out);
  sattn_tensor lse_out{};
  if (args.lse_out != nullptr) lse_out = ToView(*args.lse_out);
  sattn_cuda_merge_args c{};
  c.num_parts = args.num_parts;
  c.o_parts = o.data();
  c.lse_parts = lse.data();
  c.out = &out;
  c.lse_out = args.lse_out != nullptr ? &lse_out : nullptr;
  c.device_index = args.out.device_index;
  c.stream = *stream_;
  char message[512] = "";
  return FromPlugin(plugin_->merge_states(&c, message, sizeof(message)), message);
}

Status CudaBackend::QuantizeKV(const QuantizeKVArgs& /* args */) {
  return Unsupported("sattn_quantize_kv on device tensors: the CUDA backend does not implement it");
}

Status CudaBackend::Attention(const AttentionArgs& a) {
  // Options the kernels do not implement are refused here by name, never approximated.
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&a.k, "k"}, {&a.v, "v"}}) {
    if (IsQuantizedDType(t->dtype)) {
      return Unsupported("%s.dtype=%s: the CUDA backend does not read quantized caches", name,
                         DTypeName(t->dtype));
    }
  }
  if (!a.q_offsets.empty()) {
    return Unsupported(
        "options->cu_seqlens_q: the CUDA backend does not implement packed variable-length "
        "batches");
  }
  if (!a.alibi_slopes.empty()) {
    return Unsupported("options->alibi_slopes: the CUDA backend does not implement ALiBi");
  }
  if (a.has_mask) {
    return Unsupported("options->mask: the CUDA backend does not implement additive masks");
  }
  if (!a.sinks.empty()) {
    return Unsupported("options->sinks: the CUDA backend does not implement attention sinks");
  }
  if (plugin_->attention == nullptr) {
    return Unsupported("sattn_attention on device tensors: this CUDA plugin lacks it");
  }
  const sattn_tensor q = ToView(a.q), k = ToView(a.k), v = ToView(a.v), out = ToView(a.out);
  const sattn_tensor lse = ToView(a.lse), table = ToView(a.block_table);
  sattn_tensor seqused{};
  sattn_cuda_attention_args c{};
  c.q = &q;
  c.k = &k;
  c.v = &v;
  c.out = &out;
  c.lse = a.has_lse ? &lse : nullptr;
  if (a.seqused_k_view.data != nullptr) {
    seqused = ToView(a.seqused_k_view);
    c.seqused_k = &seqused;
  }
  c.block_table = a.paged ? &table : nullptr;
  c.batch = a.batch;
  c.seq_q = a.seq_q;
  c.seq_k = a.seq_k;
  c.heads_q = a.heads_q;
  c.heads_kv = a.heads_kv;
  c.head_dim = a.head_dim;
  c.head_dim_v = a.head_dim_v;
  c.page_size = a.page_size;
  c.scale = a.scale;
  c.softcap = a.softcap;
  c.window_left = a.window_left;
  c.window_right = a.window_right;
  c.device_index = a.q.device_index;
  c.stream = *stream_;
  char message[512] = "";
  return FromPlugin(plugin_->attention(&c, message, sizeof(message)), message);
}

Status CudaBackend::CopyToHost(const Tensor& t, const char* name, Vector<unsigned char>* storage,
                               Tensor* host) const {
  if (plugin_->copy_to_host == nullptr) {
    return Unsupported("%s: this CUDA plugin cannot copy device tensors to the host", name);
  }
  const uintptr_t lowest = t.LowestByte();
  const size_t bytes = t.EndByte() - lowest;
  storage->resize(bytes);
  char message[512] = "";
  SATTN_RETURN_IF_ERROR(
      FromPlugin(plugin_->copy_to_host(storage->data(), reinterpret_cast<const void*>(lowest),
                                       bytes, t.device_index, *stream_, message, sizeof(message)),
                 message));
  *host = t;
  host->data = storage->data() + (reinterpret_cast<uintptr_t>(t.data) - lowest);
  host->device = SATTN_DEVICE_CPU;
  host->device_index = 0;
  return Status();
}

}  // namespace streamattn
