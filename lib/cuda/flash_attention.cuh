// The flash attention kernel's parameters and launcher (flash_attention_kernel.cuh holds the
// kernel; flash_f16.cu and flash_bf16.cu instantiate it). One kernel serves prefill and decode:
// a block computes 64 rows, and a row is a (query position, query head) pair. Prefill blocks
// take 64 positions of one query head; decode blocks pack the `group` query heads of one kv head
// (pack = group), so each K/V byte is read once per kv head, and split the keys into
// `num_splits` chunks whose partial states are merged afterwards (merge_states.cuh).
#ifndef STREAMATTN_CUDA_FLASH_ATTENTION_CUH_
#define STREAMATTN_CUDA_FLASH_ATTENTION_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace streamattn {
namespace cuda {

struct FlashParams {
  const void* q;  // [batch, seq_q, heads_q, D], inner stride 1, 16-byte aligned rows
  const void* k;  // [batch, seq_k, heads_kv, D], or paged [num_pages, page_size, heads_kv, D]
  const void* v;
  int64_t q_strides[3], k_strides[3], v_strides[3];
  void* out;  // [batch, seq_q, heads_q, D], any float dtype and strides
  int32_t out_dtype;
  int64_t out_strides[4];
  float* lse;  // [batch, heads_q, seq_q] or nullptr
  int64_t lse_strides[3];
  // Split partials (num_splits > 1): o [split, batch, seq_q, heads_q, D] and
  // lse [split, batch, heads_q, seq_q], contiguous float32.
  float* part_o;
  float* part_lse;
  const int32_t* seqused_k;  // [batch] or nullptr
  int64_t seqused_stride;
  const int32_t* block_table;  // [batch, max_pages] or nullptr (dense)
  int64_t table_strides[2];
  int64_t page_size;
  int64_t batch, seq_q, seq_k, heads_q, heads_kv, group;
  int32_t pack;  // query heads per block row set: 1 (prefill) or group (decode)
  int32_t num_splits;
  int64_t split_keys;  // keys per split
  // Scores in log2 units: softcap_log2 * tanh(q.k * score_mul) with a softcap, else
  // q.k * score_mul (score_mul = scale * log2(e)).
  float score_mul;
  float softcap_log2;                 // softcap * log2(e), 0: none
  int64_t window_left, window_right;  // -1: unbounded
};

constexpr int kFlashRows = 64;  // rows per block (4 warps x 16)
constexpr int kFlashThreads = 128;

// Queues the kernel for head_dim D on `stream`; T is __half or __nv_bfloat16. Instantiated in
// flash_f16.cu and flash_bf16.cu for D = 64, 128, 256.
template <typename T, int D>
cudaError_t LaunchFlash(const FlashParams& p, cudaStream_t stream);

}  // namespace cuda
}  // namespace streamattn

#endif  // STREAMATTN_CUDA_FLASH_ATTENTION_CUH_
