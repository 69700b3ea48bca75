import numpy as np
import streamattn

rng = np.random.default_rng(0)
q = rng.standard_normal((1, 256, 8, 64), dtype=np.float32)  # [batch, seq_q, heads_q, head_dim]
k = rng.standard_normal((1, 256, 2, 64), dtype=np.float32)  # [batch, seq_k, heads_kv, head_dim]
v = rng.standard_normal((1, 256, 2, 64), dtype=np.float32)
out = streamattn.attention(q, k, v, causal=True)  # a new numpy array, [1, 256, 8, 64]

# Attention over two parts of the keys, merged, is attention over all of them.
parts = [streamattn.attention(q, k[:, s], v[:, s], return_lse=True)
         for s in (slice(0, 100), slice(100, None))]
merged = streamattn.merge_states([o for o, _ in parts], [lse for _, lse in parts])
assert np.allclose(merged, streamattn.attention(q, k, v), atol=1e-5)

# Sampling: the 5 likeliest of 32000 tokens at temperature 0.8, in one read of the logits.
logits = rng.standard_normal(32000, dtype=np.float32)
token_ids, probs = streamattn.softmax_topk(logits, 5, temperature=0.8)

try:
    streamattn.attention(q, k[..., :32], v)
except streamattn.Error as e:
    print(e)  # invalid argument: k.shape[3]=32 must equal q.shape[3]=64
print(streamattn.info()["simd_target"], token_ids, probs.round(4))
