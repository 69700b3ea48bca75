/*
 * The contract between libstreamattn and its optional CUDA plugin, libstreamattn_cuda.so.
 *
 * The core library never links CUDA: it dlopen()s the plugin at run time (from
 * $STREAMATTN_CUDA_PLUGIN, else from the directory libstreamattn itself was loaded from), looks
 * up one C symbol, SATTN_CUDA_PLUGIN_ENTRY, and checks the table's abi_version before using any
 * other field. A plugin built for another ABI version is rejected with a message, never called.
 * Fields are only appended within a version; a new meaning takes a new version number.
 *
 * C, so the plugin can be built by nvcc without the library's C++ internals.
 */
#ifndef STREAMATTN_CUDA_PLUGIN_ABI_H_
#define STREAMATTN_CUDA_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "streamattn/streamattn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SATTN_CUDA_PLUGIN_ABI_VERSION 1
#define SATTN_CUDA_PLUGIN_ENTRY "sattn_cuda_plugin_entry"

/* sattn_merge_states on device tensors (already validated by the core). */
typedef struct sattn_cuda_merge_args {
  int32_t num_parts;
  const sattn_tensor* o_parts;
  const sattn_tensor* lse_parts;
  const sattn_tensor* out;
  const sattn_tensor* lse_out; /* NULL: not wanted */
  int32_t device_index;
  void* stream; /* cudaStream_t; NULL: the default stream */
} sattn_cuda_merge_args;

/* sattn_attention on device tensors, validated and made canonical by the core (see
 * lib/core/attention_args.h for the meaning of each field). Every view is a device view on
 * `device_index`; optional ones are NULL. Options the plugin does not implement arrive flagged
 * so it can refuse them by name. */
typedef struct sattn_cuda_attention_args {
  const sattn_tensor* q;
  const sattn_tensor* k;
  const sattn_tensor* v;
  const sattn_tensor* out;
  const sattn_tensor* lse;         /* NULL: not wanted */
  const sattn_tensor* seqused_k;   /* NULL: every sequence has seq_k keys */
  const sattn_tensor* block_table; /* NULL: dense k, v */
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, head_dim, head_dim_v, page_size;
  float scale;                       /* natural units */
  float softcap;                     /* 0: none */
  int64_t window_left, window_right; /* -1: unbounded; causal is window_right = 0 */
  int32_t has_alibi, has_mask, has_sinks;
  int32_t device_index;
  void* stream; /* cudaStream_t; NULL: the default stream */
} sattn_cuda_attention_args;

typedef struct sattn_cuda_plugin {
  uint32_t abi_version;   /* SATTN_CUDA_PLUGIN_ABI_VERSION */
  uint32_t struct_size;   /* sizeof(sattn_cuda_plugin) as the plugin was built */
  const char* build_info; /* e.g. "CUDA 13.0, sm_80 sm_90 + PTX" */
  /* Usable devices (>= 0), or -1 with the reason in `reason` (no driver, ...). */
  int32_t (*device_count)(char* reason, size_t reason_size);
  /* Operations; NULL when this plugin does not implement one. Each returns a sattn_status and,
   * on failure, a message in `message`. */
  int32_t (*merge_states)(const sattn_cuda_merge_args* args, char* message, size_t message_size);
  int32_t (*attention)(const sattn_cuda_attention_args* args, char* message, size_t message_size);
  /* Copies `bytes` of device memory to the host, ordered after the work already queued on
   * `stream` (and waiting for it): the core validates small option tensors (seqused_k,
   * block_table, ALiBi slopes, sinks) that live on the device this way. */
  int32_t (*copy_to_host)(void* host_dst, const void* device_src, size_t bytes,
                          int32_t device_index, void* stream, char* message, size_t message_size);
} sattn_cuda_plugin;

/* The plugin's one exported symbol. */
typedef const sattn_cuda_plugin* (*sattn_cuda_plugin_entry_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STREAMATTN_CUDA_PLUGIN_ABI_H_ */
