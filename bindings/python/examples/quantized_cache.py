import numpy as np
import streamattn

rng = np.random.default_rng(0)
q = rng.standard_normal((1, 1, 32, 128), dtype=np.float32)     # a decoding step, 32 heads
k = rng.standard_normal((1, 4096, 8, 128), dtype=np.float32)   # the cache: 8 kv heads
v = rng.standard_normal((1, 4096, 8, 128), dtype=np.float32)

# int8 K and V, a float16 scale per group of 32 channels: 1.06 bytes an element, not 2.
k8, v8 = (streamattn.quantize_kv(x, "i8", group=32) for x in (k, v))  # (values, scales)
out = streamattn.attention(q, k8, v8)  # read in place; scores and out in float32
exact = streamattn.attention(q, k, v)
print("i8 cache vs float32: max |difference| %.1e" % np.abs(out - exact).max())

# 4-bit K (uint8 [..., 64]: two values a byte, low half first); FP8 E4M3 V, a scale per kv head.
k4 = streamattn.quantize_kv(k, "i4")
v_fp8 = streamattn.quantize_kv(v, "fp8_e4m3", scale=np.abs(v).max(axis=(0, 1, 3)) / 448)
out = streamattn.attention(q, k4, v_fp8)

# Caches that grow: new rows go to key positions[b] (or into pages, with block_table=).
k_cache = (np.zeros((1, 8192, 8, 128), np.int8), np.zeros((1, 8192, 8, 4), np.float16))
v_cache = (np.zeros_like(k_cache[0]), np.zeros_like(k_cache[1]))
for x, cache in ((k, k_cache), (v, v_cache)):
    streamattn.quantize_kv(x, out=cache)                            # keys 0..4095
    streamattn.quantize_kv(x[:, -1:], out=cache, positions=[4096])  # key 4096
out = streamattn.attention(q, k_cache, v_cache, seqused_k=[4097])
