// The malformed-call matrix's cases for packed variable-length batches (cu_seqlens_q,
// cu_seqlens_k; run by malformed_call_test.cc with the rest of the matrix).
#include "malformed_call.h"

namespace streamattn {
namespace testing_util {

std::vector<Malformed> PackedBatchMatrix() {
  const sattn_status kInvalid = SATTN_ERR_INVALID_ARGUMENT;
  return {
      {"packed: cu_seqlens_q not starting at 0", kInvalid, "options->cu_seqlens_q[0]=1 must be 0",
       [](Calls& c) {
         c.cu_q.Set({0}, 1);
         return c.Packed();
       }},
      {"packed: cu_seqlens_q decreasing", kInvalid,
       "options->cu_seqlens_q[2]=10 must be >= options->cu_seqlens_q[1]=11",
       [](Calls& c) {
         c.cu_q.Set({1}, 11);
         return c.Packed();
       }},
      {"packed: cu_seqlens_k not ending at the packed length", kInvalid,
       "options->cu_seqlens_k[2]=13 must equal k.shape[1]=14",
       [](Calls& c) {
         c.cu_k.Set({2}, 13);
         return c.Packed();
       }},
      {"packed: cu_seqlens_q not ending at the packed length", kInvalid,
       "options->cu_seqlens_q[2]=10 must equal q.shape[1]=9",
       [](Calls& c) {
         c.packed_q.shape[1] = 9;
         c.packed_out.shape[1] = 9;
         return c.Packed();
       }},
      {"packed: float cu_seqlens_q", kInvalid, "options->cu_seqlens_q.dtype=f32 must be i32",
       [](Calls& c) {
         c.cu_q_view.dtype = SATTN_DTYPE_F32;
         return c.Packed();
       }},
      {"packed: cu_seqlens_k of rank 2", kInvalid, "options->cu_seqlens_k.ndim=2 must be 1",
       [](Calls& c) {
         c.cu_k_view.ndim = 2;
         c.cu_k_view.shape[1] = 1;
         c.cu_k_view.strides[1] = 1;
         return c.Packed();
       }},
      {"packed: cu_seqlens_k of another batch", kInvalid,
       "options->cu_seqlens_k.shape[0]=2 must equal options->cu_seqlens_q.shape[0]=3",
       [](Calls& c) {
         c.cu_k_view.shape[0] = 2;
         return c.Packed();
       }},
      {"packed: cu_seqlens_q of one entry", kInvalid,
       "options->cu_seqlens_q.shape[0]=1 must be batch + 1 >= 2",
       [](Calls& c) {
         c.cu_q_view.shape[0] = 1;
         c.packed_options.cu_seqlens_k = nullptr;
         return c.Packed();
       }},
      {"packed: q with a batch of 2", kInvalid, "q.shape[0]=2 must be 1 with options->cu_seqlens_q",
       [](Calls& c) {
         c.packed_q = c.dense.q_view;
         return c.Packed();
       }},
      {"packed: k with a batch of 2", kInvalid, "k.shape[0]=2 must be 1 with options->cu_seqlens_k",
       [](Calls& c) {
         c.packed_k = c.dense.k_view;
         return c.Packed();
       }},
      {"packed: dense k of another batch", kInvalid,
       "k.shape[0]=1 must equal the batch, options->cu_seqlens_q.shape[0] - 1=2",
       [](Calls& c) {
         c.packed_options.cu_seqlens_k = nullptr;
         return c.Packed();
       }},
      {"packed: cu_seqlens_k without cu_seqlens_q", kInvalid,
       "options->cu_seqlens_k requires options->cu_seqlens_q",
       [](Calls& c) {
         c.packed_options.cu_seqlens_q = nullptr;
         return c.Packed();
       }},
      {"packed: cu_seqlens_k with a block table", kInvalid,
       "options->cu_seqlens_k and options->block_table exclude each other",
       [](Calls& c) {
         c.packed_options.block_table = &c.paged.block_table_view;
         return c.Packed();
       }},
      {"packed: block table of another batch", kInvalid,
       "options->block_table.shape[0]=2 must equal the batch, options->cu_seqlens_q.shape[0] - "
       "1=1",
       [](Calls& c) {
         c.cu_q_view.shape[0] = 2;  // {0, 2}: one sequence of the paged call's two q rows
         c.cu_q.Set({1}, 2);
         c.packed_q = c.paged.q_view;
         c.packed_q.shape[1] = 2, c.packed_q.shape[0] = 1;
         c.packed_out = c.paged.out_view;
         c.packed_out.shape[1] = 2, c.packed_out.shape[0] = 1;
         c.packed_options = c.paged.options;
         c.packed_options.cu_seqlens_q = &c.cu_q_view;
         return sattn_attention(c.ctx.get(), &c.packed_q, &c.paged.k_view, &c.paged.v_view,
                                &c.packed_out, nullptr, &c.packed_options);
       }},
      {"packed: a mask", kInvalid, "options->mask must be NULL with options->cu_seqlens_q",
       [](Calls& c) {
         c.packed_options.mask = &c.dense.mask_view;
         return c.Packed();
       }},
      {"packed: seqused_k past a sequence's packed keys", kInvalid,
       "options->seqused_k[0]=8 must be in [0, 7]",
       [](Calls& c) {
         c.dense.seqused_k.Set({0}, 8);
         c.packed_options.seqused_k = &c.dense.seqused_k_view;
         return c.Packed();
       }},
  };
}

}  // namespace testing_util
}  // namespace streamattn
