// The malformed-call matrix's cases for quantized caches: sattn_attention's scales and packed
// views, and sattn_quantize_kv (run by malformed_call_test.cc with the rest of the matrix).
#include "malformed_call.h"

namespace streamattn {
namespace testing_util {

std::vector<Malformed> QuantizedCacheMatrix() {
  const sattn_status kInvalid = SATTN_ERR_INVALID_ARGUMENT;
  return {
      // ---- attention over quantized caches
      {"quantized: k_scales missing", kInvalid, "options->k_scales must not be NULL: k.dtype=i4",
       [](Calls& c) {
         c.quantized.options.k_scales = nullptr;
         return c.Quantized();
       }},
      {"quantized: scales beside a float cache", kInvalid,
       "options->v_scales must be NULL: v.dtype=f32",
       [](Calls& c) {
         c.dense.options.v_scales = &c.dense.k_view;
         return c.Dense();
       }},
      {"quantized: group scales of bf16", kInvalid,
       "options->k_scales.dtype=bf16 must be f16 or f32",
       [](Calls& c) {
         c.quantized.k_scales_view.dtype = SATTN_DTYPE_BF16;
         return c.Quantized();
       }},
      {"quantized: groups that do not divide head_dim", kInvalid,
       "options->k_scales.shape[3]=3 must divide k.shape[3]=8",
       [](Calls& c) {
         c.quantized.k_scales_view.shape[3] = 3;
         return c.Quantized();
       }},
      {"quantized: an odd group for i4", kInvalid, "must be even for i4",
       [](Calls& c) {
         c.quantized.k_scales_view.shape[3] = 8;
         c.quantized.k_scales_view.strides[2] = 8;
         return c.Quantized();
       }},
      {"quantized: scales of another page size", kInvalid,
       "options->k_scales.shape[1]=3 must equal k.shape[1]=4",
       [](Calls& c) {
         c.quantized.k_scales_view.shape[1] = 3;
         return c.Quantized();
       }},
      {"quantized: a negative fp8 scale", kInvalid, "options->v_scales[1]=-1 must be finite",
       [](Calls& c) {
         c.quantized.v_scales.Set({1}, -1.0);
         return c.Quantized();
       }},
      {"quantized: a NaN fp8 scale", kInvalid, "options->v_scales[0]=nan must be finite",
       [](Calls& c) {
         c.quantized.v_scales.Set({0}, kNaNf);
         return c.Quantized();
       }},
      {"quantized: an infinite fp8 scale", kInvalid, "options->v_scales[0]=inf must be finite",
       [](Calls& c) {
         c.quantized.v_scales.Set({0}, INFINITY);
         return c.Quantized();
       }},
      {"quantized: fp8 scales of neither heads_kv nor 1", kInvalid,
       "options->v_scales.shape[0]=3 must be heads_kv=2",
       [](Calls& c) {
         c.quantized.v_scales_view.shape[0] = 3;
         return c.Quantized();
       }},
      {"quantized: an i4 stride that splits a byte", kInvalid, "k.strides[2]=9 splits a byte",
       [](Calls& c) {
         c.quantized.k_view.strides[2] = 9;
         return c.Quantized();
       }},
      {"quantized: i4 elements not adjacent", kInvalid, "k.strides[3]=2 must be 1",
       [](Calls& c) {
         c.quantized.k_view.strides[3] = 2;
         return c.Quantized();
       }},
      {"quantized: an unknown dtype", kInvalid, "k.dtype=8 is not a sattn_dtype",
       [](Calls& c) {
         c.quantized.k_view.dtype = 8;
         return c.Quantized();
       }},
      {"quantized: a quantized q", kInvalid, "q.dtype=i8 must be f32, f16 or bf16",
       [](Calls& c) {
         c.quantized.q_view.dtype = SATTN_DTYPE_I8;
         return c.Quantized();
       }},
      {"quantized: out on the scales", kInvalid, "out overlaps options->k_scales",
       [](Calls& c) {
         c.quantized.out_view.data = c.quantized.k_scales_view.data;
         c.quantized.out_view.dtype = SATTN_DTYPE_F16;
         return c.Quantized();
       }},
      {"quantized: struct_size cutting int8_queries", kInvalid, "ends inside a field",
       [](Calls& c) {
         c.quantized.options.struct_size =
             static_cast<uint32_t>(offsetof(sattn_attention_options, int8_queries) + 2);
         return c.Quantized();
       }},
      {"quantized: struct_size cutting k_scales", kInvalid, "ends inside a field",
       [](Calls& c) {
         // Half a pointer in: inside the field on 32- and 64-bit targets alike.
         c.quantized.options.struct_size =
             static_cast<uint32_t>(offsetof(sattn_attention_options, k_scales) + sizeof(void*) / 2);
         return c.Quantized();
       }},
      // ---- quantize_kv
      {"quantize: NULL context", kInvalid, "ctx must not be NULL",
       [](Calls& c) {
         return sattn_quantize_kv(nullptr, &c.kv_src_view, &c.kv_values_view, &c.kv_scales_view,
                                  &c.quantize_options);
       }},
      {"quantize: NULL src", kInvalid, "src must not be NULL",
       [](Calls& c) {
         return sattn_quantize_kv(c.ctx.get(), nullptr, &c.kv_values_view, &c.kv_scales_view,
                                  &c.quantize_options);
       }},
      {"quantize: NULL scales", kInvalid, "scales must not be NULL",
       [](Calls& c) {
         return sattn_quantize_kv(c.ctx.get(), &c.kv_src_view, &c.kv_values_view, nullptr,
                                  &c.quantize_options);
       }},
      {"quantize: values of a float dtype", kInvalid, "values.dtype=f16 must be i8, fp8_e4m3 or i4",
       [](Calls& c) {
         c.kv_values_view.dtype = SATTN_DTYPE_F16;
         return c.QuantizeKV();
       }},
      {"quantize: a quantized src", kInvalid, "src.dtype=i8 must be f32, f16 or bf16",
       [](Calls& c) {
         c.kv_src_view.dtype = SATTN_DTYPE_I8;
         return c.QuantizeKV();
       }},
      {"quantize: rows past the cache", kInvalid, "options->positions[1]=4: its 3 rows",
       [](Calls& c) {
         c.kv_positions.Set({1}, 4);
         return c.QuantizeKV();
       }},
      {"quantize: a negative position", kInvalid, "options->positions[0]=-1",
       [](Calls& c) {
         c.kv_positions.Set({0}, -1);
         return c.QuantizeKV();
       }},
      {"quantize: groups that do not divide head_dim", kInvalid,
       "scales.shape[3]=3 must divide values.shape[3]=8",
       [](Calls& c) {
         c.kv_scales_view.shape[3] = 3;
         return c.QuantizeKV();
       }},
      {"quantize: head_dim of src and values differ", kInvalid,
       "values.shape[3]=4 must equal src.shape[3]=8",
       [](Calls& c) {
         c.kv_values_view.shape[3] = 4;
         return c.QuantizeKV();
       }},
      {"quantize: a NaN in src", kInvalid, "src[1, 2, 0, 5]=nan cannot be quantized",
       [](Calls& c) {
         c.kv_src.Set({1, 2, 0, 5}, kNaNf);
         return c.QuantizeKV();
       }},
      {"quantize: values on src", kInvalid, "values overlaps src",
       [](Calls& c) {
         c.kv_values_view.data = c.kv_src_view.data;
         return c.QuantizeKV();
       }},
      {"quantize: scales on values", kInvalid, "scales overlaps values",
       [](Calls& c) {
         c.kv_scales_view.data = c.kv_values_view.data;
         c.kv_scales_view.dtype = SATTN_DTYPE_F16;
         return c.QuantizeKV();
       }},
      {"quantize: an fp8 scale of 0", kInvalid, "scales[0]=0 must be finite and > 0",
       [](Calls& c) {
         c.kv_values_view.dtype = SATTN_DTYPE_FP8_E4M3;
         c.quantized.v_scales.Set({0}, 0.0);  // float32 [heads_kv = 2], read for fp8
         c.kv_scales_view = c.quantized.v_scales_view;
         return c.QuantizeKV();
       }},
      {"quantize: an i4 row that ends inside a byte", kInvalid, "values.shape[3]=7 must be even",
       [](Calls& c) {
         c.kv_values_view.dtype = SATTN_DTYPE_I4;
         c.kv_values_view.shape[3] = 7;
         return c.QuantizeKV();
       }},
  };
}

}  // namespace testing_util
}  // namespace streamattn
