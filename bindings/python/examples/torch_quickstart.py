import torch
import streamattn.torch as sat  # needs torch; `import streamattn` alone needs only numpy

q = torch.randn(1, 32, 512, 128).bfloat16()  # torch's layout: [batch, heads, seq, head_dim]
k = torch.randn(1, 8, 512, 128).bfloat16()
v = torch.randn(1, 8, 512, 128).bfloat16()
# One line in place of torch's SDPA, with its semantics (is_causal aligned top-left).
out = sat.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
want = torch.nn.functional.scaled_dot_product_attention(
    q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True)
print("vs torch's float32 SDPA: max |difference| %.1e" % (out.float() - want).abs().max())
assert (out.float() - want).abs().max() < 2e-2  # bfloat16's rounding of the output

# streamattn's own keywords: a sliding window of 128 keys, tanh softcapping of the scores.
out = sat.attention(q, k, v, layout="bhsd", causal=True, window=(127, 0), softcap=30.0)
sat.register_transformers()  # then from_pretrained(..., attn_implementation="streamattn")
