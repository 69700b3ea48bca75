"""One decoding step of multi-head latent attention (MLA: DeepSeek-V2/V3/R1, Kimi K2), absorbed
and run by streamattn, checked against the same step un-absorbed in PyTorch.

MLA caches, per token, one latent vector c (512 channels) and one rotary key k_R (64 channels)
shared by every head. Head i's key is [W_UK_i c ; k_R] and its value W_UV_i c (128 channels
each). DeepSeek-V2 (section 2.1.3) absorbs the up-projections: q_i . (W_UK_i c) =
(W_UK_i^T q_i) . c, and the output's W_UV_i moves past the softmax's weighted sum. So each head's
query becomes 576 channels [W_UK_i^T q_C_i ; q_R_i], every head attends to the one cached row
[c ; k_R] (one kv head, 576 channels), V is the first 512 channels of that same row, and
W_UV_i is applied to each head's 512-channel result afterwards. streamattn takes V as a view of
the cache's leading channels and reads the cache once.
"""

import math

import torch
import streamattn.torch as sat

torch.manual_seed(0)
BATCH, CACHE, HEADS = 2, 300, 16  # 16 query heads: one device's share of 128 under TP 8
D_MODEL, D_LATENT, D_Q_LATENT, D_NOPE, D_ROPE, D_V = 1024, 512, 384, 128, 64, 128
SCALE = 1.0 / math.sqrt(D_NOPE + D_ROPE)  # the un-absorbed head's width sets the scale


def weight(*shape):
    return torch.randn(*shape, dtype=torch.float64) / math.sqrt(shape[-1])


W_DKV, W_KR = weight(D_LATENT, D_MODEL), weight(D_ROPE, D_MODEL)  # cache projections
W_DQ = weight(D_Q_LATENT, D_MODEL)
W_UQ, W_QR = weight(HEADS, D_NOPE, D_Q_LATENT), weight(HEADS, D_ROPE, D_Q_LATENT)
W_UK, W_UV = weight(HEADS, D_NOPE, D_LATENT), weight(HEADS, D_V, D_LATENT)
W_O = weight(D_MODEL, HEADS * D_V)


def rope(x, positions):
    """Rotary embedding of x [batch, seq, heads, D_ROPE] (pairs of channels) at positions [seq]."""
    half = D_ROPE // 2
    freq = 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)
    angle = (positions[:, None].double() * freq)[None, :, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * angle.cos() - x2 * angle.sin()
    out[..., 1::2] = x1 * angle.sin() + x2 * angle.cos()
    return out


hidden = torch.randn(BATCH, CACHE, D_MODEL, dtype=torch.float64)  # the last token decodes
positions = torch.arange(CACHE)
latent = hidden @ W_DKV.T                                          # [batch, seq, 512]
k_rope = rope((hidden @ W_KR.T).unsqueeze(2), positions).squeeze(2)  # [batch, seq, 64]
c_q = hidden[:, -1:] @ W_DQ.T                                      # [batch, 1, 384]
q_nope = torch.einsum("bsc,hdc->bshd", c_q, W_UQ)                  # [batch, 1, heads, 128]
q_rope = rope(torch.einsum("bsc,hdc->bshd", c_q, W_QR), positions[-1:])


def reference():
    """The step as MLA defines it: per-head keys and values up-projected from the latent cache."""
    k_nope = torch.einsum("bsc,hdc->bshd", latent, W_UK)           # [batch, seq, heads, 128]
    keys = torch.cat([k_nope, k_rope[:, :, None].expand(-1, -1, HEADS, -1)], dim=-1)
    values = torch.einsum("bsc,hdc->bshd", latent, W_UV)           # [batch, seq, heads, 128]
    queries = torch.cat([q_nope, q_rope], dim=-1)                  # [batch, 1, heads, 192]
    scores = torch.einsum("bqhd,bkhd->bhqk", queries, keys) * SCALE
    heads = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), values)
    return heads.reshape(BATCH, 1, HEADS * D_V) @ W_O.T


def absorbed(dtype):
    """The step absorbed: one shared 576-channel kv head, V the cache's first 512 channels."""
    cache = torch.cat([latent, k_rope], dim=-1)[:, :, None].to(dtype)  # [batch, seq, 1, 576]
    q = torch.cat([torch.einsum("bshd,hdc->bshc", q_nope, W_UK), q_rope], dim=-1).to(dtype)
    # k and v are views of one buffer: v = the leading 512 channels of every cached row.
    out_latent = sat.attention(q, cache, cache[..., :D_LATENT], scale=SCALE, causal=True)
    heads = torch.einsum("bshc,hdc->bshd", out_latent.double(), W_UV)  # W_UV after the softmax
    return heads.reshape(BATCH, 1, HEADS * D_V) @ W_O.T


def compare():
    want = reference()
    scale = want.abs().max().item()
    diffs = {}
    for dtype in (torch.float32, torch.bfloat16):
        diffs[dtype] = (absorbed(dtype) - want).abs().max().item() / scale
        print("absorbed MLA (%s) vs un-absorbed reference: max |difference| %.1e of the largest "
              "output" % (str(dtype).replace("torch.", ""), diffs[dtype]))
    return diffs


if __name__ == "__main__":
    diffs = compare()
    assert diffs[torch.float32] < 1e-5
    assert diffs[torch.bfloat16] < 3e-2  # bfloat16's rounding of q, the cache and the output
