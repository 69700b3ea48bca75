"""streamattn for PyTorch: the operations on torch.Tensors, as torch.library custom ops.

    import torch, streamattn.torch as sat
    out = sat.attention(q, k, v, causal=True)                 # [batch, seq, heads, dim], ours
    out = sat.attention(q, k, v, causal=True, layout="bhsd")  # torch's [batch, heads, seq, dim]
    out = sat.scaled_dot_product_attention(q, k, v, is_causal=True)   # SDPA's signature
    out = sat.attention(q, sat.quantize_kv(k, "i8"), sat.quantize_kv(v, "i8"))  # int8 cache
    sat.register_transformers()   # then from_pretrained(..., attn_implementation="streamattn")

Importable only where torch is installed (the streamattn package itself needs only numpy).
Tensors are read in place with their strides, never copied, and results are tensors that torch
allocates (or the caller's `out=`). The ops are registered as `torch.ops.streamattn.*` with
fake implementations, so torch.compile traces through them without graph breaks. CPU tensors
run on the CPU; CUDA tensors on the CUDA backend (on torch's current stream) when the plugin
is loaded, and otherwise fail with the library's message naming the device. A failed call
raises streamattn.Error with the library's message, as the numpy API does. For inference:
the ops have no autograd formula (a backward through them raises torch's error saying so).

Threads: without `context=`, each Python thread uses a context of torch.get_num_threads()
threads, so torch.set_num_threads() governs streamattn too.
"""

import math

import torch

if not hasattr(torch.library, "custom_op"):
    raise ImportError("streamattn.torch needs torch 2.4 or newer (torch.library.custom_op); "
                      "this is torch %s" % torch.__version__)

from . import _api, _native  # noqa: E402
from . import _torch_ops as _ops  # noqa: E402  (after the version check)
from ._torch_transformers import register_transformers, transformers_attention  # noqa: E402

QuantizedKV = _api.QuantizedKV

__all__ = ["attention", "quantize_kv", "QuantizedKV", "merge_states", "softmax", "log_softmax",
           "softmax_topk", "scaled_dot_product_attention", "register_transformers",
           "transformers_attention"]

_LAYOUTS = ("bshd", "bhsd")


def _heads_first(layout):
    if layout not in _LAYOUTS:
        raise ValueError("layout must be 'bshd' (batch, seq, heads, dim) or 'bhsd' (batch, "
                         "heads, seq, dim), not %r" % (layout,))
    return layout == "bhsd"


def _as_ours(x, heads_first):
    """[b, h, s, d] as the [b, s, h, d] view streamattn takes (a view, never a copy)."""
    return x.transpose(1, 2) if heads_first and x is not None else x


def _small(x, dtype, device):
    """A per-head or per-sequence option as a tensor of `dtype` (a few numbers: converting
    them, when needed, costs nothing beside the call)."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x if x.dtype == dtype else x.to(dtype)
    return torch.as_tensor(x, dtype=dtype, device=device)


def _cache(name, cache, heads_first, device):
    """attention's k or v as (values, scales) in streamattn's layout: a tensor (scales None),
    or a quantized cache's pair; an fp8 cache's scale may be a number or any float tensor."""
    values, scales = _api.cache_pair(name, cache)
    if scales is None:
        return _as_ours(values, heads_first), None
    if values.dtype == torch.float8_e4m3fn:
        return _as_ours(values, heads_first), _small(scales, torch.float32, device).reshape(-1)
    return _as_ours(values, heads_first), _as_ours(scales, heads_first)


def _window(window):
    if window is None:
        return -1, -1
    left, right = window
    return (-1 if left is None else left), (-1 if right is None else right)


def attention(q, k, v, *, layout="bshd", scale=None, causal=False, window=None, softcap=None,
              alibi_slopes=None, mask=None, sinks=None, seqused_k=None, block_table=None,
              out=None, lse=None, return_lse=False, dtype=None, f32_pv=False, int8_queries=False,
              cu_seqlens_q=None, cu_seqlens_k=None, context=None):
    """Exact softmax attention on torch tensors, with the keywords of streamattn.attention.

    layout "bshd" (the default, streamattn's and FlashAttention's): q [batch, seq_q, heads_q,
    head_dim], k and v [batch, seq_k, heads_kv, head_dim(_v)] (or pages with block_table), out
    [batch, seq_q, heads_q, head_dim_v]. layout "bhsd" (torch's): the same with heads before
    seq, in and out. Any strides either way (no copies); a new out is contiguous in its layout.
    float32, float16 or bfloat16; heads_q a multiple of heads_kv (GQA/MQA).

    scale: None = 1/sqrt(head_dim). causal: bottom-right aligned when seq_q != seq_k (the last
    query sees every key; scaled_dot_product_attention gives torch's top-left). window: (left,
    right), None or -1 for an unbounded side. softcap, alibi_slopes [heads_q], mask (additive,
    [batch or 1, heads_q or 1, seq_q, seq_k] in either layout), sinks [heads_q], seqused_k
    [batch], block_table [batch, max_pages]: as streamattn.attention; the per-head and
    per-sequence options may be tensors of any dtype or sequences, converted (they are tiny).
    out, lse (float32 [batch, heads_q, seq_q]): written in place when given. dtype: a new out's
    dtype (default q's). f32_pv, int8_queries: as streamattn.attention. cu_seqlens_q,
    cu_seqlens_k [batch + 1]: a packed batch, as streamattn.attention (layout "bshd" only).
    Returns out, or (out, lse) when return_lse is true or lse is given."""
    heads_first = _heads_first(layout)
    if heads_first and (cu_seqlens_q is not None or cu_seqlens_k is not None):
        raise ValueError('cu_seqlens_q and cu_seqlens_k take layout "bshd" ([1, total, heads, '
                         'dim]), not "bhsd"')
    packed = (_small(cu_seqlens_q, torch.int32, q.device),
              _small(cu_seqlens_k, torch.int32, q.device))
    left, right = _window(window)
    options = (scale, bool(causal), left, right, softcap,
               _small(alibi_slopes, torch.float32, q.device), mask,
               _small(sinks, torch.float32, q.device), _small(seqused_k, torch.int32, q.device),
               _small(block_table, torch.int32, q.device), bool(f32_pv))
    key = _ops.context_key(context)
    q = _as_ours(q, heads_first)
    (k, k_scales), (v, v_scales) = (_cache(name, x, heads_first, q.device)
                                    for name, x in (("k", k), ("v", v)))
    if out is None and lse is None:
        out, lse = _ops.attention_op(q, k, v, heads_first, *options, dtype, key, k_scales,
                                     v_scales, bool(int8_queries), *packed)
        return (out, lse) if return_lse else out
    out_shape, lse_shape = _ops.attention_out_shape(q, v, heads_first)
    if out is None:
        out = q.new_empty(out_shape, dtype=q.dtype if dtype is None else dtype)
    if lse is None and return_lse:
        lse = q.new_empty(lse_shape, dtype=torch.float32)
    _ops.attention_out_op(q, k, v, _as_ours(out, heads_first), lse, *options, key, k_scales,
                          v_scales, bool(int8_queries), *packed)
    return (out, lse) if lse is not None else out


def quantize_kv(src, format=None, *, layout="bshd", group=None, scales_dtype=torch.float16,
                scale=None, out=None, positions=None, block_table=None, context=None):
    """Quantizes K or V rows into a quantized cache (streamattn.quantize_kv, whose docstring
    has the formats' rules) on torch tensors: returns QuantizedKV(values, scales), which
    attention() takes for k or v.

    src: [batch, n, heads_kv, head_dim] (layout "bhsd": [batch, heads_kv, n, head_dim]),
    float32, float16 or bfloat16, any strides, every element finite. format (default: out's,
    else "i8"): "i8" torch.int8 values; "i4" torch.uint8 [..., head_dim // 2], element 2j of a
    row in the low 4 bits of byte j and 2j + 1 in the high 4 bits; both with `scales_dtype`
    (torch.float16 or torch.float32) group scales [..., head_dim // group] (group default 32, or
    head_dim if smaller).
    "fp8_e4m3" torch.float8_e4m3fn values, with scale= float32 [heads_kv] or [1] (or a number):
    x / scale is stored; the returned scales are a float32 copy of it.
    New tensors ([batch, n, heads_kv, ...] in memory, whose transposed views layout "bhsd"
    returns) unless out=(values, scales) is given, an existing cache
    in `layout` (pages with block_table, int32 [batch, max_pages]), into which row t of
    sequence b goes at key positions[b] + t (positions: int32 [batch]); an fp8 cache's out
    scales (or scale=) are read."""
    heads_first = _heads_first(layout)
    key = _ops.context_key(context)
    src = _as_ours(src, heads_first)
    if scale is not None:
        scale = _small(scale, torch.float32, src.device).reshape(-1)
    if _api.existing_cache(out, positions, block_table) is None:
        values, scales = _ops.quantize_kv_op(src, "i8" if format is None else format, group,
                                             scales_dtype, scale, key)
        return QuantizedKV(_as_ours(values, heads_first),
                           _as_ours(scales, heads_first) if scales.dim() == 4 else scales)
    values, scales = out
    if format is not None and _ops.STORAGE[_api.format_code(format)] != values.dtype:
        raise ValueError("format=%r but out's values are %s" % (format, values.dtype))
    options = (_small(positions, torch.int32, src.device),
               _small(block_table, torch.int32, src.device), group, key)
    values_ours = _as_ours(values, heads_first)
    if values.dtype == torch.float8_e4m3fn:  # its scale is read: out's, or scale=
        read = _api.check_quantize_scales(_native.DTYPE_FP8_E4M3, None, scales, scale, group)
        read = _small(read, torch.float32, src.device).reshape(-1)
        _ops.quantize_kv_out_op(src, values_ours, None, read, *options)
        return QuantizedKV(values, read)
    _ops.quantize_kv_out_op(src, values_ours, _as_ours(scales, heads_first), scale, *options)
    return QuantizedKV(values, scales)


def merge_states(o_parts, lse_parts, *, layout="bshd", out=None, lse_out=None, return_lse=False,
                 dtype=None, context=None):
    """Merges partial attention results over disjoint key sets (streamattn.merge_states).

    o_parts: [batch, seq, heads, head_dim] tensors (layout "bhsd": [batch, heads, seq,
    head_dim]); lse_parts: float32 [batch, heads, seq] (-inf marks an empty part). out, lse_out:
    written in place when given (out may be one of o_parts). Returns out, or (out, lse_out) when
    return_lse is true or lse_out is given."""
    heads_first = _heads_first(layout)
    o_parts = [_as_ours(o, heads_first) for o in o_parts]
    lse_parts = list(lse_parts)
    key = _ops.context_key(context)
    if out is None and lse_out is None:
        out, lse_out = _ops.merge_states_op(o_parts, lse_parts, heads_first, dtype, key)
        return (out, lse_out) if return_lse else out
    out_shape, lse_shape = _ops.merge_out_shape(o_parts, heads_first)
    if out is None:
        out = o_parts[0].new_empty(out_shape, dtype=o_parts[0].dtype if dtype is None else dtype)
    if lse_out is None and return_lse:
        lse_out = o_parts[0].new_empty(lse_shape, dtype=torch.float32)
    _ops.merge_states_out_op(o_parts, lse_parts, _as_ours(out, heads_first), lse_out, key)
    return (out, lse_out) if lse_out is not None else out


def _softmax_like(op, out_op, x, dim, temperature, out, dtype, context):
    key = _ops.context_key(context)
    last = dim in (-1, x.dim() - 1)
    xs = x if last else x.movedim(dim, -1)  # any strides: the moved axis is a view
    if out is not None:
        out_op(xs, out if last else out.movedim(dim, -1), temperature, key)
        return out
    result = op(xs, temperature, dtype, key)
    return result if last else result.movedim(-1, dim)


def softmax(x, dim=-1, *, temperature=None, out=None, dtype=None, context=None):
    """Softmax of x along `dim` (any rank; scores divided by temperature), streamattn.softmax.
    out may be x (in place); a new tensor has `dtype`, default x's."""
    return _softmax_like(_ops.softmax_op, _ops.softmax_out_op, x, dim, temperature, out, dtype,
                         context)


def log_softmax(x, dim=-1, *, temperature=None, out=None, dtype=None, context=None):
    """Log-softmax of x along `dim`; arguments as softmax."""
    return _softmax_like(_ops.log_softmax_op, _ops.log_softmax_out_op, x, dim, temperature, out,
                         dtype, context)


def softmax_topk(x, k, *, temperature=None, indices=None, probs=None, lse=None,
                 return_lse=False, context=None):
    """The k likeliest entries of each row of x (last dim, any rank) under the softmax of the
    whole row, in one read: (indices int32 [..., k], probs float32 [..., k]), by descending
    probability (int32, as the library writes them); with return_lse (or lse given) also the
    rows' log-sum-exps, float32 [...]. indices, probs, lse: written in place when given."""
    key = _ops.context_key(context)
    if indices is None and probs is None and lse is None:
        indices, probs, lse = _ops.softmax_topk_op(x, k, temperature, key)
        return (indices, probs, lse) if return_lse else (indices, probs)
    top_shape, lse_shape = _ops.topk_shapes(x, k)
    if indices is None:
        indices = x.new_empty(top_shape, dtype=torch.int32)
    if probs is None:
        probs = x.new_empty(top_shape, dtype=torch.float32)
    if lse is None and return_lse:
        lse = x.new_empty(lse_shape, dtype=torch.float32)
    _ops.softmax_topk_out_op(x, k, indices, probs, lse, temperature, key)
    return (indices, probs, lse) if lse is not None else (indices, probs)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False, *, context=None):
    """torch.nn.functional.scaled_dot_product_attention's signature and semantics, computed by
    streamattn: swap it in with one line for inference.

    query [batch, heads_q, L, E], key [batch, heads_kv, S, E], value [batch, heads_kv, S, Ev]
    (or the 3-D [batch, L, E] forms); float32, float16 or bfloat16; any strides (no copies).
    Returns [batch, heads_q, L, Ev] (contiguous) in query's dtype.

    is_causal follows PyTorch, not streamattn: the mask is aligned TOP-LEFT, query i sees keys
    j <= i, also when L != S (streamattn's own `causal`, as in attention(), is bottom-right:
    query i sees j <= i + S - L). It is computed without a mask: for L < S the keys past L are
    seen by no query and are left out (a view); for L > S it is a window whose right edge is
    L - S. attn_mask: boolean (True takes part) or additive float, broadcastable to [batch,
    heads_q, L, S], as SDPA takes it; a boolean mask is turned into an additive bfloat16 one (the
    library takes additive masks), which is the one copy of L x S here; a float one is read in
    place, broadcast through strides. As in PyTorch, attn_mask and is_causal together are an
    error, and so are heads_kv != heads_q unless enable_gqa (which is native: no repeat of k,
    v). scale: None = 1/sqrt(E); 0 is refused (the library reads 0 as the default). dropout_p
    must be 0: streamattn is for inference. A row that sees no key gets zeros."""
    if dropout_p:
        raise ValueError("dropout_p=%r: streamattn computes attention for inference, without "
                         "dropout" % (dropout_p,))
    if attn_mask is not None and is_causal:
        raise ValueError("attn_mask and is_causal cannot both be set (as in PyTorch)")
    if query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        raise ValueError("query, key and value must all have 4 dims ([batch, heads, seq, dim]) "
                         "or all 3 ([batch, seq, dim]); got %s, %s, %s"
                         % (tuple(query.shape), tuple(key.shape), tuple(value.shape)))
    if query.dim() == 4 and not enable_gqa and key.shape[1] != query.shape[1]:
        raise ValueError("key has %d heads and query %d: set enable_gqa=True for grouped-query "
                         "attention (as in PyTorch)" % (key.shape[1], query.shape[1]))
    if scale is not None and scale == 0:
        raise ValueError("scale=0 is not supported (the library reads 0 as 1/sqrt(E))")
    return torch_layout_attention(query, key, value, attn_mask, is_causal, scale,
                                  out_heads_first=True, context=context)


def torch_layout_attention(query, key, value, mask, top_left_causal, scale, *, softcap=None,
                           sinks=None, out_heads_first, context=None):
    """Attention on torch's layout ([batch, heads, seq, dim], or [batch, seq, dim]) with
    SDPA's masks and top-left causal alignment, without SDPA's restrictions: a mask with
    top_left_causal, softcap and sinks are allowed. out_heads_first: [batch, heads, L, Ev]
    memory (SDPA's) rather than [batch, L, heads, Ev] (what transformers' layers take)."""
    three_d = query.dim() == 3
    if three_d:
        query, key, value = (x.unsqueeze(1) for x in (query, key, value))
        if mask is not None:
            mask = mask.reshape((1,) * (3 - mask.dim()) + tuple(mask.shape)).unsqueeze(1)
    # SDPA broadcasts the batch (say, learned queries of batch 1); strides of 0 do it here.
    batch = max(query.shape[0], key.shape[0], value.shape[0])
    query, key, value = (x.expand(batch, -1, -1, -1) for x in (query, key, value))
    seq_q, seq_k = query.shape[2], key.shape[2]
    causal, window = False, None
    if top_left_causal:
        if seq_k >= seq_q:  # keys past seq_q are seen by no query; then the corners coincide
            key, value = key[:, :, :seq_q], value[:, :, :seq_q]
            if mask is not None:
                mask = mask[..., :seq_q]
            seq_k = seq_q
            causal = True
        else:  # diagonal i + seq_k - seq_q, moved right by seq_q - seq_k: j <= i
            window = (None, seq_q - seq_k)
    if mask is not None:
        if mask.dtype == torch.bool:
            additive = torch.full(mask.shape, -math.inf, dtype=torch.bfloat16, device=mask.device)
            mask = additive.masked_fill_(mask, 0.0)
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
        mask = mask.expand(mask.shape[0], mask.shape[1], seq_q, seq_k)
    # The op reads [b, s, h, d] views of torch's [b, h, s, d] either way; only the memory of
    # the new out differs: SDPA's [b, h, s, d], or the [b, s, h, d] a transformers layer
    # reshapes to [b, s, h * d] for free.
    layout = "bhsd" if out_heads_first else "bshd"
    if not out_heads_first:
        query, key, value = (x.transpose(1, 2) for x in (query, key, value))
    out = attention(query, key, value, layout=layout, scale=scale, causal=causal, window=window,
                    softcap=softcap, mask=mask, sinks=sinks, context=context)
    return out.squeeze(1 if out_heads_first else 2) if three_d else out
