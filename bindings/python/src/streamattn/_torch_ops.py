"""streamattn's operations registered with torch.library as custom ops (namespace
`streamattn`), each with a fake (meta) implementation, so that torch.compile traces them into
its graphs and torch.library.opcheck accepts them. streamattn.torch is the public face; this
module holds the ops themselves.

Every op reads its tensors in place (data pointer, shape and strides, any strides: a transposed
view costs nothing) and writes into tensors torch allocates, or into the caller's `out` in the
mutating `*_out` forms. The ops take streamattn's layouts ([batch, seq, heads, dim] for
attention and merge_states, the last axis for the softmax family); streamattn.torch turns
torch's [batch, heads, seq, dim] into them with .transpose(1, 2), which is a view. A
`context` argument is a key: 0 is the calling thread's default context, which runs on
torch.get_num_threads() threads; others name a streamattn.Context (context_key).
"""

import ctypes
import itertools
import threading
import weakref
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _api
from . import _native as N
from . import _views

_I64x4 = ctypes.c_int64 * N.MAX_NDIM

# ------------------------------------------------------------------ tensors and contexts


def tensor_view(name, t, cache=False):
    """A View of a torch tensor through its data pointer and strides (no copy, and no DLPack
    capsule: a few microseconds a tensor matter for decoding steps). CPU tensors become host
    views, CUDA tensors device views; anything else is refused. cache: t may also be a
    quantized cache's values (int8, float8_e4m3fn, or uint8 bytes of packed i4 pairs, viewed
    in elements as the library counts them)."""
    code = (_views.cache_dtype_code if cache else _views.dtype_code)(t.dtype)
    if code is None:
        raise _views._unsupported(name, t.dtype, cache)
    _views._check_rank(name, t.dim())
    device = t.device
    if device.type == "cpu":
        where, index = N.DEVICE_CPU, 0
    elif device.type == "cuda":
        where, index = N.DEVICE_CUDA, device.index or 0
    else:
        raise TypeError("%s: device %s is neither the CPU nor CUDA" % (name, device))
    shape, strides = t.shape, t.stride()
    if code == N.DTYPE_I4:
        shape, strides = _views.i4_layout(name, shape, strides)
    view = N.Tensor(t.data_ptr(), code, where, index, len(shape), _I64x4(*shape),
                    _I64x4(*strides))
    return _views.View(view, t)


_explicit_contexts = weakref.WeakValueDictionary()  # context_key -> streamattn.Context
_keys = itertools.count(1)
_per_thread = threading.local()


@torch.compiler.assume_constant_result  # traced as the constant it returns: no graph break
def context_key(context):
    """The integer an op takes for `context`: 0 for None (the thread's default context), else
    a number given to that Context once (never reused, unlike id())."""
    if context is None:
        return 0
    key = context.__dict__.get("_torch_key")
    if key is None:
        key = context.__dict__["_torch_key"] = next(_keys)
        _explicit_contexts[key] = context
    return key


def _context(key):
    if key:
        ctx = _explicit_contexts.get(key)
        if ctx is None:
            raise ValueError("streamattn.torch: the context of this call no longer exists")
        return ctx
    # The default follows torch's own thread setting, so torch.set_num_threads governs both.
    threads = torch.get_num_threads()
    contexts = getattr(_per_thread, "contexts", None)
    if contexts is None:
        contexts = _per_thread.contexts = {}
    ctx = contexts.get(threads)
    if ctx is None:
        ctx = contexts[threads] = _api.Context(num_threads=threads)
    return ctx


def _on_stream(ctx, views):
    """Points a CUDA context at torch's current stream when the call has device tensors, so the
    kernels run in order with torch's work. On a context without CUDA nothing is set, and the
    library's own error (device tensors need a context that runs on CUDA) reaches the caller."""
    cuda = [v for v in views if v is not None and v.tensor.device == N.DEVICE_CUDA]
    if not cuda:
        return
    backend = getattr(ctx, "_torch_backend", None)
    if backend is None:
        backend = ctx._torch_backend = ctx.info()["backend"]
    if backend == "cuda":
        stream = torch.cuda.current_stream(cuda[0].tensor.device_index).cuda_stream
        _api._check(_api._lib.sattn_context_set_cuda_stream(ctx.handle, stream))


def _ref(view):
    return None if view is None else view.ref()


def _dtype_or(dtype, default):
    return default if dtype is None else dtype


# ------------------------------------------------------------------ attention


def head_dim(values):
    """A k or v cache's head_dim: its last extent, twice that for packed i4 bytes (uint8)."""
    return values.shape[-1] * (2 if values.dtype == torch.uint8 else 1)


def attention_out_shape(q, v, heads_first):
    if q.dim() != 4 or v.dim() != 4:
        raise ValueError("q and v must have 4 dims ([batch, seq, heads, head_dim]); got q %s, "
                         "v %s" % (tuple(q.shape), tuple(v.shape)))
    batch, seq_q, heads_q, _ = q.shape
    if heads_first:
        return (batch, heads_q, seq_q, head_dim(v)), (batch, heads_q, seq_q)
    return (batch, seq_q, heads_q, head_dim(v)), (batch, heads_q, seq_q)


def _attention_into(q, k, v, out, lse, scale, causal, window_left, window_right, softcap,
                    alibi_slopes, mask, sinks, seqused_k, block_table, f32_pv, context,
                    k_scales=None, v_scales=None, int8_queries=False, cu_seqlens_q=None,
                    cu_seqlens_k=None):
    """sattn_attention on torch tensors: out (and lse, if given) in streamattn's layout; k and
    v of a quantized format with their k_scales and v_scales; packed batches with cu_seqlens."""
    ctx = _context(context)
    views = [tensor_view(n, t.detach(), cache=n in ("k", "v"))
             for n, t in (("q", q), ("k", k), ("v", v), ("out", out))]
    lv = None if lse is None else tensor_view("lse", lse)
    tensor_options = {}
    for name, t in (("alibi_slopes", alibi_slopes), ("sinks", sinks), ("seqused_k", seqused_k),
                    ("block_table", block_table), ("mask", mask), ("k_scales", k_scales),
                    ("v_scales", v_scales), ("cu_seqlens_q", cu_seqlens_q),
                    ("cu_seqlens_k", cu_seqlens_k)):
        if t is not None:
            tensor_options[name] = tensor_view(name, t.detach())
    window = None
    if window_left != -1 or window_right != -1:
        window = (window_left, window_right)
    options = _api.attention_options(scale, causal, window, softcap, f32_pv, tensor_options,
                                     int8_queries)
    _on_stream(ctx, views + [lv] + list(tensor_options.values()))
    qv, kv, vv, ov = views
    _api._check(_api._lib.sattn_attention(ctx.handle, qv.ref(), kv.ref(), vv.ref(), ov.ref(),
                                          _ref(lv), ctypes.byref(options)))


@torch.library.custom_op("streamattn::attention", mutates_args=())
def attention_op(q: Tensor, k: Tensor, v: Tensor, out_heads_first: bool, scale: Optional[float],
                 causal: bool, window_left: int, window_right: int, softcap: Optional[float],
                 alibi_slopes: Optional[Tensor], mask: Optional[Tensor], sinks: Optional[Tensor],
                 seqused_k: Optional[Tensor], block_table: Optional[Tensor], f32_pv: bool,
                 out_dtype: Optional[torch.dtype], context: int, k_scales: Optional[Tensor] = None,
                 v_scales: Optional[Tensor] = None, int8_queries: bool = False,
                 cu_seqlens_q: Optional[Tensor] = None,
                 cu_seqlens_k: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """sattn_attention into new tensors: q [b, s_q, h_q, d], k and v [b, s_k, h_kv, d(_v)] (or
    pages with block_table; or quantized, with k_scales and v_scales) -> (out, lse float32
    [b, h_q, s_q]); out is [b, s_q, h_q, d_v], or [b, h_q, s_q, d_v] when out_heads_first,
    contiguous either way, of out_dtype (else q's)."""
    out_shape, lse_shape = attention_out_shape(q, v, out_heads_first)
    out = torch.empty(out_shape, dtype=_dtype_or(out_dtype, q.dtype), device=q.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    _attention_into(q, k, v, out.transpose(1, 2) if out_heads_first else out, lse, scale, causal,
                    window_left, window_right, softcap, alibi_slopes, mask, sinks, seqused_k,
                    block_table, f32_pv, context, k_scales, v_scales, int8_queries, cu_seqlens_q,
                    cu_seqlens_k)
    return out, lse


@attention_op.register_fake
def _(q, k, v, out_heads_first, scale, causal, window_left, window_right, softcap, alibi_slopes,
      mask, sinks, seqused_k, block_table, f32_pv, out_dtype, context, k_scales=None,
      v_scales=None, int8_queries=False, cu_seqlens_q=None, cu_seqlens_k=None):
    out_shape, lse_shape = attention_out_shape(q, v, out_heads_first)
    return (q.new_empty(out_shape, dtype=_dtype_or(out_dtype, q.dtype)),
            q.new_empty(lse_shape, dtype=torch.float32))


@torch.library.custom_op("streamattn::attention_out", mutates_args=("out", "lse"))
def attention_out_op(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor],
                     scale: Optional[float], causal: bool, window_left: int, window_right: int,
                     softcap: Optional[float], alibi_slopes: Optional[Tensor],
                     mask: Optional[Tensor], sinks: Optional[Tensor], seqused_k: Optional[Tensor],
                     block_table: Optional[Tensor], f32_pv: bool, context: int,
                     k_scales: Optional[Tensor] = None,
                     v_scales: Optional[Tensor] = None, int8_queries: bool = False,
                     cu_seqlens_q: Optional[Tensor] = None,
                     cu_seqlens_k: Optional[Tensor] = None) -> None:
    """sattn_attention into the caller's out [b, s_q, h_q, d_v] (any strides; it may be q
    itself) and, when given, lse float32 [b, h_q, s_q]."""
    _attention_into(q, k, v, out, lse, scale, causal, window_left, window_right, softcap,
                    alibi_slopes, mask, sinks, seqused_k, block_table, f32_pv, context, k_scales,
                    v_scales, int8_queries, cu_seqlens_q, cu_seqlens_k)


@attention_out_op.register_fake
def _(q, k, v, out, lse, scale, causal, window_left, window_right, softcap, alibi_slopes, mask,
      sinks, seqused_k, block_table, f32_pv, context, k_scales=None, v_scales=None,
      int8_queries=False, cu_seqlens_q=None, cu_seqlens_k=None):
    return None


# ------------------------------------------------------------------ quantized KV caches

STORAGE = {N.DTYPE_I8: torch.int8, N.DTYPE_FP8_E4M3: torch.float8_e4m3fn,
            N.DTYPE_I4: torch.uint8}  # i4: bytes of two elements
_SCALES = {N.DTYPE_F16: torch.float16, N.DTYPE_F32: torch.float32}


def quantized_shapes(src, format, group, scales_dtype):
    """(values shape and dtype, scales shape and dtype) of a new cache of src's rows; an fp8
    cache's scales are the caller's [heads_kv] or [1] (the scale argument, copied)."""
    code = _api.format_code(format)
    values, scales = _api.new_cache_shapes("src", tuple(src.shape), code, group)
    scales_dtype = _SCALES[_api.scales_dtype_code(scales_dtype)] if scales else torch.float32
    return (values, STORAGE[code]), (scales, scales_dtype)


def _quantize_into(src, values, scales, scale, positions, block_table, group, context):
    """sattn_quantize_kv on torch tensors: src's rows into values and, for i8 and i4, scales
    (written); an fp8 cache reads `scale`."""
    ctx = _context(context)
    sv = tensor_view("src", src.detach())
    vv = tensor_view("values", values, cache=True)
    scv = None if scales is None else tensor_view("scales", scales)
    fp8_scale = _api.check_quantize_scales(vv.dtype, vv, scv, scale, group)
    if fp8_scale is not None:
        scv = tensor_view("scales", fp8_scale.detach())
    extra = [None if t is None else tensor_view(name, t)
             for name, t in (("positions", positions), ("block_table", block_table))]
    _on_stream(ctx, [sv, vv, scv] + extra)
    _api.run_quantize_kv(ctx, sv, vv, scv, *extra)


@torch.library.custom_op("streamattn::quantize_kv", mutates_args=())
def quantize_kv_op(src: Tensor, format: str, group: Optional[int], scales_dtype: torch.dtype,
                   scale: Optional[Tensor], context: int) -> Tuple[Tensor, Tensor]:
    """sattn_quantize_kv into new tensors: src [b, n, h_kv, d] -> (values, scales) of `format`
    ("i8" int8, "i4" uint8 [b, n, h_kv, d / 2] packed pairs, "fp8_e4m3" float8_e4m3fn):
    scales_dtype [b, n, h_kv, d / group] group scales, or for fp8 a float32 copy of scale."""
    (v_shape, v_dtype), (s_shape, s_dtype) = quantized_shapes(src, format, group, scales_dtype)
    values = torch.empty(v_shape, dtype=v_dtype, device=src.device)
    if s_shape is None:  # fp8: the scale read, returned as a new tensor (ops return no aliases)
        _api.check_quantize_scales(N.DTYPE_FP8_E4M3, None, None, scale, group)
        scales = scale.detach().to(torch.float32, copy=True).reshape(-1)
        _quantize_into(src, values, None, scales, None, None, group, context)
    else:
        scales = torch.empty(s_shape, dtype=s_dtype, device=src.device)
        _quantize_into(src, values, scales, scale, None, None, group, context)
    return values, scales


@quantize_kv_op.register_fake
def _(src, format, group, scales_dtype, scale, context):
    (v_shape, v_dtype), (s_shape, s_dtype) = quantized_shapes(src, format, group, scales_dtype)
    if s_shape is None:
        s_shape = (1 if scale is None else scale.numel(),)
    return src.new_empty(v_shape, dtype=v_dtype), src.new_empty(s_shape, dtype=s_dtype)


@torch.library.custom_op("streamattn::quantize_kv_out", mutates_args=("values", "scales"))
def quantize_kv_out_op(src: Tensor, values: Tensor, scales: Optional[Tensor],
                       scale: Optional[Tensor], positions: Optional[Tensor],
                       block_table: Optional[Tensor], group: Optional[int],
                       context: int) -> None:
    """sattn_quantize_kv into the caller's cache: values (any strides; paged with block_table)
    and, for i8 and i4, scales (written); an fp8 cache reads scale (scales None)."""
    _quantize_into(src, values, scales, scale, positions, block_table, group, context)


@quantize_kv_out_op.register_fake
def _(src, values, scales, scale, positions, block_table, group, context):
    return None


# ------------------------------------------------------------------ merge_states


def merge_out_shape(o_parts, heads_first):
    if not o_parts:
        raise ValueError("merge_states: no parts (the result's shape cannot be inferred)")
    o = o_parts[0]
    if o.dim() != 4:
        raise ValueError("o_parts[0] must have 4 dims ([batch, seq, heads, head_dim]); got %s"
                         % (tuple(o.shape),))
    batch, seq, heads, dim = o.shape
    if heads_first:
        return (batch, heads, seq, dim), (batch, heads, seq)
    return (batch, seq, heads, dim), (batch, heads, seq)


def _merge_into(o_parts, lse_parts, out, lse_out, context):
    ctx = _context(context)
    if len(o_parts) != len(lse_parts):
        raise ValueError("%d o_parts but %d lse_parts" % (len(o_parts), len(lse_parts)))
    ovs = [tensor_view("o_parts[%d]" % i, o.detach()) for i, o in enumerate(o_parts)]
    lvs = [tensor_view("lse_parts[%d]" % i, x.detach()) for i, x in enumerate(lse_parts)]
    o_array = (N.Tensor * max(1, len(ovs)))(*[x.tensor for x in ovs])
    l_array = (N.Tensor * max(1, len(lvs)))(*[x.tensor for x in lvs])
    outv = tensor_view("out", out)
    lv = None if lse_out is None else tensor_view("lse_out", lse_out)
    _on_stream(ctx, ovs + lvs + [outv, lv])
    _api._check(_api._lib.sattn_merge_states(ctx.handle, len(ovs), o_array, l_array, outv.ref(),
                                             _ref(lv)))


@torch.library.custom_op("streamattn::merge_states", mutates_args=())
def merge_states_op(o_parts: List[Tensor], lse_parts: List[Tensor], out_heads_first: bool,
                    out_dtype: Optional[torch.dtype], context: int) -> Tuple[Tensor, Tensor]:
    """sattn_merge_states into new tensors: parts [b, s, h, d] with lse float32 [b, h, s] ->
    (out [b, s, h, d], or [b, h, s, d] when out_heads_first; lse float32 [b, h, s])."""
    out_shape, lse_shape = merge_out_shape(o_parts, out_heads_first)
    o = o_parts[0]
    out = torch.empty(out_shape, dtype=_dtype_or(out_dtype, o.dtype), device=o.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=o.device)
    _merge_into(o_parts, lse_parts, out.transpose(1, 2) if out_heads_first else out, lse, context)
    return out, lse


@merge_states_op.register_fake
def _(o_parts, lse_parts, out_heads_first, out_dtype, context):
    out_shape, lse_shape = merge_out_shape(o_parts, out_heads_first)
    o = o_parts[0]
    return (o.new_empty(out_shape, dtype=_dtype_or(out_dtype, o.dtype)),
            o.new_empty(lse_shape, dtype=torch.float32))


@torch.library.custom_op("streamattn::merge_states_out", mutates_args=("out", "lse_out"))
def merge_states_out_op(o_parts: List[Tensor], lse_parts: List[Tensor], out: Tensor,
                        lse_out: Optional[Tensor], context: int) -> None:
    """sattn_merge_states into the caller's out (which may be one of o_parts) and lse_out."""
    _merge_into(o_parts, lse_parts, out, lse_out, context)


@merge_states_out_op.register_fake
def _(o_parts, lse_parts, out, lse_out, context):
    return None


# ------------------------------------------------------------------ the softmax family


def _row_blocks(tensors):
    """Views of `tensors` (equal leading shapes) with the leading dims folded into one [rows]
    axis, the library's [rows, n] form; where strides forbid folding, one block per index of
    the first dim, recursively. A 1-D tensor is its own block."""
    if tensors[0].dim() <= 2:
        return [tensors]
    try:
        return [[t.view(-1, t.shape[-1]) if t.dim() == tensors[0].dim() else t.view(-1)
                 for t in tensors]]
    except RuntimeError:  # not foldable as a view: no copy, one call per leading index
        return [block for i in range(tensors[0].shape[0])
                for block in _row_blocks([t[i] for t in tensors])]


def _softmax_into(fn, x, out, temperature, context):
    ctx = _context(context)
    options = _api._softmax_options(temperature)
    for xb, ob in _row_blocks([x.detach(), out]):
        xv, ov = tensor_view("in", xb), tensor_view("out", ob)
        _on_stream(ctx, [xv, ov])
        _api._check(fn(ctx.handle, xv.ref(), ov.ref(), ctypes.byref(options)))


def _define_softmax(name, c_name):
    c_fn = getattr(_api._lib, c_name)

    def functional(x: Tensor, temperature: Optional[float], out_dtype: Optional[torch.dtype],
                   context: int) -> Tensor:
        out = torch.empty(x.shape, dtype=_dtype_or(out_dtype, x.dtype), device=x.device)
        _softmax_into(c_fn, x, out, temperature, context)
        return out

    def into(x: Tensor, out: Tensor, temperature: Optional[float], context: int) -> None:
        _softmax_into(c_fn, x, out, temperature, context)

    functional.__doc__ = ("%s over the last dim of x (any rank) into a new tensor of out_dtype "
                          "(else x's)" % c_name)
    into.__doc__ = "%s over the last dim of x into the caller's out (which may be x)" % c_name
    op = torch.library.custom_op("streamattn::" + name, functional, mutates_args=())
    op.register_fake(lambda x, temperature, out_dtype, context: x.new_empty(
        x.shape, dtype=_dtype_or(out_dtype, x.dtype)))
    out_op = torch.library.custom_op("streamattn::%s_out" % name, into, mutates_args=("out",))
    out_op.register_fake(lambda x, out, temperature, context: None)
    return op, out_op


softmax_op, softmax_out_op = _define_softmax("softmax", "sattn_softmax")
log_softmax_op, log_softmax_out_op = _define_softmax("log_softmax", "sattn_log_softmax")


def topk_shapes(x, k):
    if x.dim() < 1:
        raise ValueError("softmax_topk: x must have at least 1 dim")
    return tuple(x.shape[:-1]) + (k,), tuple(x.shape[:-1])


def _topk_into(x, k, indices, probs, lse, temperature, context):
    ctx = _context(context)
    options = _api._softmax_options(temperature)
    if lse is not None and x.dim() == 1:
        lse = lse.view(1)  # the library's lse of a 1-D x is [1]
    blocks = _row_blocks([x.detach(), indices, probs] + ([] if lse is None else [lse]))
    for xb, ib, pb, *lb in blocks:
        xv, iv, pv = tensor_view("in", xb), tensor_view("indices", ib), tensor_view("probs", pb)
        lv = tensor_view("lse", lb[0]) if lb else None
        _on_stream(ctx, [xv, iv, pv, lv])
        _api._check(_api._lib.sattn_softmax_topk(ctx.handle, xv.ref(), k, iv.ref(), pv.ref(),
                                                 _ref(lv), ctypes.byref(options)))


@torch.library.custom_op("streamattn::softmax_topk", mutates_args=())
def softmax_topk_op(x: Tensor, k: int, temperature: Optional[float],
                    context: int) -> Tuple[Tensor, Tensor, Tensor]:
    """sattn_softmax_topk over the last dim of x (any rank): (indices int32 [..., k], probs
    float32 [..., k], lse float32 [...]), each row by descending probability."""
    top_shape, lse_shape = topk_shapes(x, k)
    indices = torch.empty(top_shape, dtype=torch.int32, device=x.device)
    probs = torch.empty(top_shape, dtype=torch.float32, device=x.device)
    lse = torch.empty(lse_shape, dtype=torch.float32, device=x.device)
    _topk_into(x, k, indices, probs, lse, temperature, context)
    return indices, probs, lse


@softmax_topk_op.register_fake
def _(x, k, temperature, context):
    top_shape, lse_shape = topk_shapes(x, k)
    return (x.new_empty(top_shape, dtype=torch.int32), x.new_empty(top_shape, dtype=torch.float32),
            x.new_empty(lse_shape, dtype=torch.float32))


@torch.library.custom_op("streamattn::softmax_topk_out", mutates_args=("indices", "probs", "lse"))
def softmax_topk_out_op(x: Tensor, k: int, indices: Tensor, probs: Tensor, lse: Optional[Tensor],
                        temperature: Optional[float], context: int) -> None:
    """sattn_softmax_topk into the caller's indices (int32), probs (float32) and, when given,
    lse (float32)."""
    _topk_into(x, k, indices, probs, lse, temperature, context)


@softmax_topk_out_op.register_fake
def _(x, k, indices, probs, lse, temperature, context):
    return None
