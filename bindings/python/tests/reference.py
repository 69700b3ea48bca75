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


def max_relative_error(got, want):
    """max |got - want| / max |want|, the C++ suite's measure (tests/test_util.h)."""
    got = to_f64(got)
    return np.abs(got - want).max() / max(np.abs(want).max(), 1e-300)


def to_f64(x):
    """Any array the binding accepts (numpy of any dtype, torch) as float64 numpy."""
    if hasattr(x, "detach"):  # torch: through float32, which holds bf16 and f16 exactly
        x = x.detach().float().numpy()
    return np.asarray(x).astype(np.float64)


# ------------------------------------------------------------------ quantized KV caches
# sattn_quantize_kv's rules as the header states them, written here in numpy: scales max |x| /
# 127 (i8) or / 7 (i4) of each group in float32, rounded to the scales' dtype (f16 saturating
# at 65504); q = x / scale in float32, rounded half to even, saturated; fp8 the nearest E4M3
# (ml_dtypes' float8_e4m3fn) of x / scale saturated to +-448; i4 packed two a byte, element 2j
# in the low half of byte j.

INT_MAX = {"i8": 127, "i4": 7}


def pack_i4(q):
    """int [..., d] in [-8, 7] -> uint8 [..., d / 2]: element 2j low, 2j + 1 high."""
    q = np.asarray(q).astype(np.int64)
    return ((q[..., 0::2] & 0xF) | ((q[..., 1::2] & 0xF) << 4)).astype(np.uint8)


def unpack_i4(packed):
    """uint8 [..., d / 2] -> int8 [..., d], each nibble two's complement."""
    packed = np.asarray(packed).astype(np.int64)
    nibbles = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[:-1] + (-1,))
    return np.where(nibbles >= 8, nibbles - 16, nibbles).astype(np.int8)


def quantize(x, fmt, group=32, scales_dtype=np.float16, scale=None):
    """Rows x [b, n, h, d] (float32 values) -> (values, scales) as the cache stores them: int8,
    packed uint8 (i4) or float8_e4m3fn values; group scales of scales_dtype [b, n, h, d / group],
    or fp8's float32 scale [h] or [1] as given."""
    import ml_dtypes
    x = np.asarray(x, np.float32)
    if fmt == "fp8_e4m3":
        scale = np.asarray(scale, np.float32).reshape(-1)
        per_head = np.broadcast_to(scale, (x.shape[2],))[:, None]
        return np.clip(x / per_head, -448, 448).astype(ml_dtypes.float8_e4m3fn), scale
    max_q = np.float32(INT_MAX[fmt])
    groups = x.reshape(x.shape[:3] + (x.shape[3] // group, group))
    s = np.abs(groups).max(axis=-1) / max_q  # float32
    stored = np.minimum(s, np.float32(65504)).astype(np.float16) if scales_dtype == np.float16 \
        else s.astype(np.float32)
    s32 = stored.astype(np.float32)[..., None]
    q = np.where(s32 == 0, 0, np.rint(groups / np.where(s32 == 0, 1, s32)))
    q = np.clip(q, -max_q, max_q).astype(np.int8).reshape(x.shape)
    return (pack_i4(q) if fmt == "i4" else q), stored


def dequantize(values, scales, fmt):
    """What a cache's values stand for, float64: q * the group's scale, or e4m3 * the head's."""
    values = np.asarray(values)
    scales = np.asarray(scales).astype(np.float64)
    if fmt == "fp8_e4m3":
        x = values.astype(np.float64)
        return x * np.broadcast_to(scales.reshape(-1), (x.shape[2],))[:, None]
    q = (unpack_i4(values) if fmt == "i4" else values).astype(np.float64)
    return q * np.repeat(scales, q.shape[3] // scales.shape[3], axis=3)
