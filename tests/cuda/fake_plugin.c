/* Stand-ins for libstreamattn_cuda.so, built in variants by tests/cuda/CMakeLists.txt to check
 * how the core treats each kind of plugin without a GPU:
 *   FAKE_ABI=<n>        a table of another ABI version (must be rejected);
 *   FAKE_NO_ENTRY       no entry symbol (must be rejected);
 *   FAKE_DEVICES=<n>    how many devices it reports (0: "no device"; 1: a CUDA context, whose
 *                       operations are recorded, not computed, so dispatch can be checked).
 * "Device" memory is host memory here, so copy_to_host is a memcpy. */
#include <stdio.h>
#include <string.h>

#include "cuda/plugin_abi.h"

#ifndef FAKE_ABI
#define FAKE_ABI SATTN_CUDA_PLUGIN_ABI_VERSION
#endif
#ifndef FAKE_DEVICES
#define FAKE_DEVICES 1
#endif

static sattn_cuda_attention_args last_attention;
static sattn_cuda_merge_args last_merge;
static int attention_calls;
static int merge_calls;
static int copy_calls;

static int32_t DeviceCount(char* reason, size_t reason_size) {
  if (FAKE_DEVICES == 0) snprintf(reason, reason_size, "fake plugin: the driver reports no device");
  return FAKE_DEVICES;
}

static int32_t Attention(const sattn_cuda_attention_args* args, char* message, size_t size) {
  (void)message;
  (void)size;
  last_attention = *args;
  ++attention_calls;
  return SATTN_OK;
}

static int32_t MergeStates(const sattn_cuda_merge_args* args, char* message, size_t size) {
  (void)message;
  (void)size;
  last_merge = *args;
  ++merge_calls;
  return SATTN_OK;
}

static int32_t CopyToHost(void* dst, const void* src, size_t bytes, int32_t device_index,
                          void* stream, char* message, size_t size) {
  (void)device_index;
  (void)stream;
  (void)message;
  (void)size;
  memcpy(dst, src, bytes);
  ++copy_calls;
  return SATTN_OK;
}

static const sattn_cuda_plugin kTable = {FAKE_ABI,
                                         sizeof(sattn_cuda_plugin),
                                         "fake plugin for tests",
                                         DeviceCount,
                                         MergeStates,
                                         Attention,
                                         CopyToHost};

#ifdef FAKE_NO_ENTRY
SATTN_API int sattn_cuda_plugin_entry_misspelt(void) { return 0; }
#else
SATTN_API const sattn_cuda_plugin* sattn_cuda_plugin_entry(void) { return &kTable; }
#endif

/* What the test reads back (through dlsym on the same, already loaded, file). */
SATTN_API int fake_attention_calls(void) { return attention_calls; }
SATTN_API int fake_merge_calls(void) { return merge_calls; }
SATTN_API int fake_copy_calls(void) { return copy_calls; }
SATTN_API const sattn_cuda_attention_args* fake_last_attention(void) { return &last_attention; }
SATTN_API const sattn_cuda_merge_args* fake_last_merge(void) { return &last_merge; }
