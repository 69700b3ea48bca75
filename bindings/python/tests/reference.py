"""The float64 numpy oracle for the Python suite: plain, three-pass softmax attention with every
option of sattn_attention, written for obviousness, as tests/reference/ is for the C++ suite."""

import numpy as np


def attention(q, k, v, scale=None, causal=False, window=None, softcap=None, alibi_slopes=None,
              mask=None, sinks=None, seqused_k=None):
    """q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv] as float64 -> (out, lse)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    b, sq, hq, d = q.shape
    sk, hkv, dv = k.shape[1], k.shape[2], v.shape[3]
    group = hq // hkv
    scale = 1.0 / np.sqrt(d) if not scale else scale
    out = np.zeros((b, sq, hq, dv))
    lse = np.full((b, hq, sq), -np.inf)
    for bi in range(b):
        n = sk if seqused_k is None else int(seqused_k[bi])
        kh = np.repeat(k[bi, :n], group, axis=1)  # [n, hq, d]: query head h reads kv h // group
        vh = np.repeat(v[bi, :n], group, axis=1)
        s = np.einsum("qhd,khd->hqk", q[bi], kh) * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        i = np.arange(sq)[:, None]
        j = np.arange(n)[None, :]
        diagonal = i + n - sq  # the key aligned with query i (bottom-right)
        if alibi_slopes is not None:
            s = s - np.asarray(alibi_slopes, np.float64)[:, None, None] * np.abs(diagonal - j)
        if mask is not None:
            m = np.asarray(mask, np.float64)
            s = s + np.broadcast_to(m[min(bi, m.shape[0] - 1)][:, :, :n], s.shape)
        visible = np.ones((sq, n), bool)
        if causal:
            visible &= j <= diagonal
        if window is not None:
            left, right = window
            if left is not None and left >= 0:
                visible &= j >= diagonal - left
            if right is not None and right >= 0:
                visible &= j <= diagonal + right
        s = np.where(visible[None], s, -np.inf)
        if sinks is not None:
            sink = np.broadcast_to(np.asarray(sinks, np.float64)[:, None, None], (hq, sq, 1))
            s = np.concatenate([s, sink], axis=2)
        m = s.max(axis=2, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(s - m)
        total = e.sum(axis=2, keepdims=True)
        row_lse = np.where(total > 0, np.log(np.where(total > 0, total, 1.0)) + m, -np.inf)
        p = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
        if sinks is not None:
            p = p[:, :, :n]
        out[bi] = np.einsum("hqk,khd->qhd", p, vh)
        lse[bi] = row_lse[:, :, 0]
    return out, lse


def paged(k, v, table, page):
    """k and v [b, pages * page, h, d] laid out as a paged cache through block table `table`
    [b, pages]: (k_pages, v_pages) [num_pages, page, h, d], NaN in every row no page names."""
    k, v, table = np.asarray(k), np.asarray(v), np.asarray(table)
    k_pages = np.full((table.size, page) + k.shape[2:], np.nan, k.dtype)
    v_pages = np.full((table.size, page) + v.shape[2:], np.nan, v.dtype)
    for bi in range(table.shape[0]):
        for p in range(table.shape[1]):
            k_pages[table[bi, p]] = k[bi, p * page:(p + 1) * page]
            v_pages[table[bi, p]] = v[bi, p * page:(p + 1) * page]
    return k_pages, v_pages


def softmax(x, temperature=1.0):
    x = np.asarray(x, np.float64) / temperature
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x, temperature=1.0):
    x = np.asarray(x, np.float64) / temperature
    return x - logsumexp(x)


def logsumexp(x):
    x = np.asarray(x, np.float64)
    m = x.max(axis=-1, keepdims=True)
    return np.log(np.exp(x - m).sum(axis=-1, keepdims=True)) + m


def to_f64(x):
    """Any array the binding accepts (numpy of any dtype, torch) as float64 numpy."""
    if hasattr(x, "detach"):  # torch: through float32, which holds bf16 and f16 exactly
        x = x.detach().float().numpy()
    return np.asarray(x).astype(np.float64)
