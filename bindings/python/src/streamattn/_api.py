"""The operations, mirroring the C API: each takes arrays (numpy, or anything with __dlpack__,
such as a PyTorch CPU tensor) without copying them, and writes into `out=` when given or into a
new numpy array otherwise. A failed call raises streamattn.Error with the library's message."""

import collections
import ctypes
import threading

import numpy as np

from . import _native as N
from . import _views

_lib, library_path = N.load()


class Error(RuntimeError):
    """A call that returned a status other than SATTN_OK.

    status: the sattn_status number; status_name: its text ("invalid argument"); message: the
    library's sattn_last_error() for the call (it names the argument at fault)."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = _lib.sattn_status_string(status).decode()
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


class InvalidArgumentError(Error, ValueError):
    """SATTN_ERR_INVALID_ARGUMENT: the call was malformed and nothing was written."""


def _check(status):
    if status != N.OK:
        message = _lib.sattn_last_error().decode()  # thread-local: read on the calling thread
        raise (InvalidArgumentError if status == N.ERR_INVALID_ARGUMENT else Error)(status,
                                                                                   message)


def version():
    """The version of the loaded library, "major.minor.patch"."""
    return _lib.sattn_version().decode()


class Context:
    """A sattn_context: thread pool, scratch and backend choice. One thread at a time may use a
    context; the module-level functions use one default context per Python thread.

    num_threads: CPU threads, 0 = every core the process may use. backend: "auto", "cpu" or
    "cuda". cpu_kernel: the CPU's prefill tile kernel, "auto", "f32-fma", "avx512-bf16",
    "neon-bf16" or "neon-fp16" (an error where the CPU cannot run it); info() names the kernel
    each dtype gets."""

    def __init__(self, num_threads=0, backend="auto", cpu_kernel="auto"):
        if backend not in N.BACKENDS:
            raise ValueError("backend must be one of %s, not %r" % (sorted(N.BACKENDS), backend))
        if cpu_kernel not in N.CPU_KERNELS:
            raise ValueError("cpu_kernel must be one of %s, not %r"
                             % (sorted(N.CPU_KERNELS), cpu_kernel))
        options = N.ContextOptions()
        options.struct_size = ctypes.sizeof(options)
        options.num_threads = num_threads
        options.backend = N.BACKENDS[backend]
        options.cpu_kernel = N.CPU_KERNELS[cpu_kernel]
        handle = ctypes.c_void_p()
        _check(_lib.sattn_context_create(ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle
        # Held here: a context collected at interpreter exit may outlive this module's globals.
        self._destroy = _lib.sattn_context_destroy

    def close(self):
        """Frees the context now (it is freed on garbage collection otherwise)."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            self._destroy(handle)

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def handle(self):
        if not self._handle:
            raise ValueError("the context is closed")
        return self._handle

    def info(self):
        """What this context runs on: backend, threads and SIMD target, as a dict."""
        info = N.ContextInfo()
        info.struct_size = ctypes.sizeof(info)
        _check(_lib.sattn_context_get_info(self.handle, ctypes.byref(info)))
        return {
            "version": version(),
            "library": library_path,
            "backend": N.BACKEND_NAMES.get(info.backend, str(info.backend)),
            "backend_reason": info.backend_reason.decode(),
            "num_threads": info.num_threads,
            "simd_target": info.simd_target.decode(),
            "compiled_targets": info.compiled_targets.decode(),
            "cuda_availability": info.cuda_availability.decode(),
            "cpu_kernels": {"float32": info.f32_kernel.decode(),
                            "float16": info.f16_kernel.decode(),
                            "bfloat16": info.bf16_kernel.decode()},
        }

    def attention(self, q, k, v, **kwargs):
        return attention(q, k, v, context=self, **kwargs)

    def quantize_kv(self, src, format=None, **kwargs):
        return quantize_kv(src, format, context=self, **kwargs)

    def merge_states(self, o_parts, lse_parts, **kwargs):
        return merge_states(o_parts, lse_parts, context=self, **kwargs)

    def softmax(self, x, **kwargs):
        return softmax(x, context=self, **kwargs)

    def log_softmax(self, x, **kwargs):
        return log_softmax(x, context=self, **kwargs)

    def softmax_topk(self, x, k, **kwargs):
        return softmax_topk(x, k, context=self, **kwargs)

    def exp2(self, x, **kwargs):
        return exp2(x, context=self, **kwargs)


_default = threading.local()


def default_context():
    """This Python thread's context (all cores, automatic backend), made on first use."""
    ctx = getattr(_default, "context", None)
    if ctx is None:
        ctx = _default.context = Context()
    return ctx


def info(context=None):
    """Version, library path, backend, threads and SIMD target (chosen and compiled in)."""
    return (context or default_context()).info()


def _output(name, given, shape, dtype_code):
    """The view an operation writes: `given` (checked writable) or a new numpy array."""
    if given is not None:
        return given, _views.view(name, given, writable=True)
    array = np.empty(shape, _views.numpy_dtype(dtype_code))
    return array, _views.view(name, array, writable=True)


def _out_dtype(dtype, default_code):
    if dtype is None:
        # bfloat16 results need ml_dtypes to live in numpy; without it they come as float32.
        if default_code == N.DTYPE_BF16 and _views.bfloat16_dtype() is None:
            return N.DTYPE_F32
        return default_code
    # Names ("bfloat16") and torch dtypes go by name; anything else through numpy.
    by_name = isinstance(dtype, str) or hasattr(dtype, "is_floating_point")
    code = _views.dtype_code(dtype if by_name else np.dtype(dtype))
    if code is None or code == N.DTYPE_I32:
        raise TypeError("dtype must be float32, float16 or bfloat16, not %s" % (dtype,))
    return code


def _ref(v):
    return None if v is None else v.ref()


def attention_options(scale, causal, window, softcap, f32_pv, tensor_options,
                      int8_queries=False):
    """The sattn_attention_options of attention()'s keywords; tensor_options maps the names of
    the tensor options given (alibi_slopes, mask, sinks, seqused_k, block_table, k_scales,
    v_scales, cu_seqlens_q, cu_seqlens_k) to their Views, which must outlive the call. Shared
    by streamattn.torch."""
    options = N.AttentionOptions()
    options.struct_size = ctypes.sizeof(options)
    options.scale = 0.0 if scale is None else scale
    options.causal = 1 if causal else 0
    if window is not None:
        left, right = window
        options.has_window = 1
        options.window_left = -1 if left is None else left
        options.window_right = -1 if right is None else right
    options.softcap = 0.0 if softcap is None else softcap
    options.f32_pv = 1 if f32_pv else 0
    options.int8_queries = 1 if int8_queries else 0
    for field, v in tensor_options.items():
        setattr(options, field, ctypes.pointer(v.tensor))
    return options


def cache_pair(name, cache):
    """attention's k or v as (values, scales): an array (scales None), or a quantized cache's
    (values, scales) pair. Shared by streamattn.torch."""
    if not isinstance(cache, tuple):
        return cache, None
    if len(cache) != 2:
        raise ValueError("%s: a quantized cache is a (values, scales) pair, not %d items"
                         % (name, len(cache)))
    return cache


def _cache_views(name, cache):
    """The Views of attention's k or v (the scales' None for an array)."""
    values, scales = cache_pair(name, cache)
    vv = _views.view(name, values, cache=True)
    return vv, None if scales is None else scales_view(name + "_scales", scales, vv.dtype)


def scales_view(name, scales, values_code):
    """The View of a quantized cache's scales: an FP8 cache's float32 [heads_kv] or [1] (a
    number stands for [1]; converted like the other small options), else the group scales as
    given (f16 or f32, laid out like the values)."""
    if values_code != N.DTYPE_FP8_E4M3:
        return _views.view(name, scales)
    if not isinstance(scales, np.ndarray) and hasattr(scales, "__dlpack__"):
        scales = np.from_dlpack(scales)
    return _views.small_view(name, np.reshape(scales, -1) if np.ndim(scales) == 0 else scales,
                             np.float32)


def attention(q, k, v, *, scale=None, causal=False, window=None, softcap=None, alibi_slopes=None,
              mask=None, sinks=None, seqused_k=None, block_table=None, out=None, lse=None,
              return_lse=False, dtype=None, f32_pv=False, int8_queries=False, cu_seqlens_q=None,
              cu_seqlens_k=None, context=None):
    """Exact softmax attention, sattn_attention: out = softmax(scale q k^T + bias) v.

    q [batch, seq_q, heads_q, head_dim]; k, v [batch, seq_k, heads_kv, head_dim(_v)], or
    [num_pages, page_size, heads_kv, head_dim] with block_table. float32, float16 or bfloat16,
    any strides (a [batch, heads, seq, dim] tensor's .transpose(1, 2) needs no copy). k and v
    may each also be a quantized cache, the (values, scales) pair quantize_kv returns (its
    formats there): int8 or packed uint8 values with their group scales, or float8_e4m3fn
    values with float32 scales [heads_kv] or [1] (or a number); K and V may differ.

    scale: None = 1/sqrt(head_dim). causal: bottom-right aligned. window: (left, right), None
    or -1 for an unbounded side. softcap: tanh capping of scores. alibi_slopes, sinks: float32
    [heads_q]. mask: additive, [batch or 1, heads_q or 1, seq_q, seq_k]. seqused_k: int32
    [batch] keys per sequence. block_table: int32 [batch, max_pages] (paged KV cache).
    f32_pv: P.V in float32 where a native CPU kernel (bfloat16 inputs) would round P.
    int8_queries: over an int4 k, round each query row to int8 where decoding can then sum
    Q.K^T in integers (AVX512-VNNI): faster, slightly less exact
    (sattn_attention_options.int8_queries).
    cu_seqlens_q: int32 [batch + 1] prefix sums of the query lengths of a packed batch
    (FlashAttention's varlen layout): q and out are then [1, total_q, heads_q, head_dim] and lse
    [1, heads_q, total_q]; causal, window and ALiBi align per sequence; mask must be None.
    cu_seqlens_k: likewise for k and v ([1, total_k, heads_kv, head_dim]); without it, k and v
    are paged (block_table) or [batch, seq_k, ...] per sequence.
    out: where to write (else a new array of `dtype`, default q's dtype). lse: where to write the
    float32 [batch, heads_q, seq_q] log-sum-exps. Returns out, or (out, lse) when return_lse is
    true or lse is given."""
    ctx = context or default_context()
    qv = _views.view("q", q)
    (kv, k_scales), (vv, v_scales) = _cache_views("k", k), _cache_views("v", v)
    if len(qv.shape) != 4 or len(vv.shape) != 4:
        raise ValueError("q and v must have 4 dims ([batch, seq, heads, head_dim]); got q %s, "
                         "v %s" % (qv.shape, vv.shape))
    batch, seq_q, heads_q, _ = qv.shape
    out, ov = _output("out", out, (batch, seq_q, heads_q, vv.shape[3]),
                      _out_dtype(dtype, qv.dtype))
    want_lse = return_lse or lse is not None
    lv = None
    if want_lse:
        if lse is None:
            lse = np.empty((batch, heads_q, seq_q), np.float32)
        lv = _views.view("lse", lse, writable=True)

    keep = {}
    for field, value, dtype_ in (("alibi_slopes", alibi_slopes, np.float32),
                                 ("sinks", sinks, np.float32),
                                 ("seqused_k", seqused_k, np.int32),
                                 ("block_table", block_table, np.int32),
                                 ("cu_seqlens_q", cu_seqlens_q, np.int32),
                                 ("cu_seqlens_k", cu_seqlens_k, np.int32),
                                 ("mask", mask, None)):
        if value is not None:
            keep[field] = (_views.view(field, value) if dtype_ is None
                           else _views.small_view(field, value, dtype_))
    for field, view in (("k_scales", k_scales), ("v_scales", v_scales)):
        if view is not None:
            keep[field] = view
    options = attention_options(scale, causal, window, softcap, f32_pv, keep, int8_queries)
    _check(_lib.sattn_attention(ctx.handle, qv.ref(), kv.ref(), vv.ref(), ov.ref(), _ref(lv),
                                ctypes.byref(options)))
    return (out, lse) if want_lse else out


# ------------------------------------------------------------------ quantized KV caches

QuantizedKV = collections.namedtuple("QuantizedKV", ["values", "scales"])
QuantizedKV.__doc__ = """A quantized K or V cache: values and the scales they are read with, the
pair attention() takes for k or v (any (values, scales) tuple will do)."""

FORMATS = {"i8": N.DTYPE_I8, "fp8_e4m3": N.DTYPE_FP8_E4M3, "i4": N.DTYPE_I4}
_SCALES_DTYPES = {"f16": N.DTYPE_F16, "float16": N.DTYPE_F16, "f32": N.DTYPE_F32,
                  "float32": N.DTYPE_F32}


def format_code(format):
    """The sattn_dtype of a format name: "i8", "fp8_e4m3" or "i4"."""
    if format not in FORMATS:
        raise ValueError("format must be one of %s, not %r" % (sorted(FORMATS), format))
    return FORMATS[format]


def scales_dtype_code(dtype):
    """The sattn_dtype of group scales: "f16" / "float16" or "f32" / "float32" (or the numpy
    or torch dtype of either)."""
    if isinstance(dtype, str) or hasattr(dtype, "is_floating_point"):  # a name, a torch dtype
        name = str(dtype).replace("torch.", "")
    else:
        name = str(np.dtype(dtype))
    if name not in _SCALES_DTYPES:
        raise TypeError("scales_dtype must be float16 or float32, not %s" % (dtype,))
    return _SCALES_DTYPES[name]


def new_cache_shapes(name, shape, code, group):
    """The shapes of new values and group scales for `shape` [batch, n, heads_kv, head_dim] rows
    in format `code` with groups of `group` channels (None: 32, or head_dim if smaller):
    values [..., head_dim] (i8, fp8), or [..., head_dim / 2] bytes (i4); scales [batch, n,
    heads_kv, head_dim / group], or None for fp8 (its scales are the caller's)."""
    if len(shape) != 4:
        raise ValueError("%s must have 4 dims ([batch, n, heads_kv, head_dim]); got %s"
                         % (name, tuple(shape)))
    dim = shape[3]
    values = tuple(shape)
    if code == N.DTYPE_I4:
        if dim % 2:
            raise ValueError("i4 packs two elements a byte: head_dim=%d (%s.shape[3]) must be "
                             "even" % (dim, name))
        values = values[:3] + (dim // 2,)
    if code == N.DTYPE_FP8_E4M3:
        return values, None
    group = min(32, dim) if group is None else group
    if group < 1 or dim % group:
        raise ValueError("group=%d must divide head_dim=%d (%s.shape[3])" % (group, dim, name))
    return values, tuple(shape[:3]) + (dim // group,)


def check_quantize_scales(code, values, scales, scale, group):
    """quantize_kv's scale arguments for values (a View) of format `code`: an fp8 cache reads
    one scale, out's scales or scale= (returned); an i8 or i4 cache writes its group scales
    (a View), which an explicit group must agree with (returns None)."""
    if code == N.DTYPE_FP8_E4M3:
        if group is not None:
            raise ValueError("group=%r: fp8_e4m3 has a scale per kv head or for the tensor, "
                             "not groups" % (group,))
        if (scales is None) == (scale is None):
            raise ValueError("fp8_e4m3 needs its scale (float32 [heads_kv] or [1], e.g. "
                             "max |x| / 448) once: as scale= or as out's scales")
        return scale if scales is None else scales
    if scale is not None:
        raise ValueError("scale= is for fp8_e4m3; i8 and i4 compute their group scales")
    if scales is None:
        raise ValueError("out: the scales of an i8 or i4 cache must not be None")
    if group is not None and len(scales.shape) == 4 and len(values.shape) == 4:
        implied = values.shape[3] // max(1, scales.shape[3])
        if implied != group:
            raise ValueError("group=%d but scales [..., %d] over head_dim %d make groups of %d"
                             % (group, scales.shape[3], values.shape[3], implied))
    return None


def existing_cache(out, positions, block_table):
    """quantize_kv's out, the (values, scales) of a cache to write into, or None for new arrays,
    which positions and block_table (they place rows in a cache) cannot go with."""
    if out is None:
        if positions is not None or block_table is not None:
            raise ValueError("positions and block_table place rows in an existing cache: "
                             "give it as out=(values, scales)")
        return None
    if not isinstance(out, tuple) or len(out) != 2:
        raise ValueError("out must be a (values, scales) pair")
    return out


def run_quantize_kv(ctx, src, values, scales, positions=None, block_table=None):
    """sattn_quantize_kv on Views (positions and block_table optional Views). Shared by
    streamattn.torch."""
    options = N.QuantizeKVOptions()
    options.struct_size = ctypes.sizeof(options)
    if positions is not None:
        options.positions = ctypes.pointer(positions.tensor)
    if block_table is not None:
        options.block_table = ctypes.pointer(block_table.tensor)
    _check(_lib.sattn_quantize_kv(ctx.handle, src.ref(), values.ref(), scales.ref(),
                                  ctypes.byref(options)))


def quantize_kv(src, format=None, *, group=None, scales_dtype="float16", scale=None, out=None,
                positions=None, block_table=None, context=None):
    """Quantizes K or V rows into a quantized cache, sattn_quantize_kv; returns
    QuantizedKV(values, scales), the pair attention() takes for k or v.

    src: [batch, n, heads_kv, head_dim] float32, float16 or bfloat16, any strides; every
    element finite (a NaN or infinity is an InvalidArgumentError naming its index, and nothing
    is written). format (default: out's, else "i8"):
      "i8"       int8 values, q = x / scale rounded to nearest even and saturated to
                 [-127, 127]; one scale per group of `group` consecutive channels of a row
                 (default 32, or head_dim if smaller; head_dim gives one a row: "per row"),
                 max |x| / 127 of the group rounded to
                 scales_dtype ("float16", the default, or "float32"; f16 saturates at 65504).
      "i4"       4-bit values packed two a byte into uint8 [..., head_dim // 2]: element 2j of a
                 row in the low 4 bits of byte j, element 2j + 1 in the high 4 bits, each a
                 two's-complement q in [-7, 7] (readers take -8), scale max |x| / 7 of the
                 group. Its rows must be whole bytes (the last axis adjacent bytes); the
                 library's view counts elements (half bytes), which this conversion does.
      "fp8_e4m3" ml_dtypes.float8_e4m3fn values, the nearest E4M3 to x / scale, saturated to
                 +-448; scale= is the caller's: float32 [heads_kv] (a scale per kv head) or [1]
                 or a number (one for the tensor), each finite and > 0, typically
                 max |x| / 448 over what the cache will hold. Returned as the float32 array.
    out: (values, scales) to write into, an existing cache (any strides): [batch, cache_len,
    heads_kv, ...], or pages [num_pages, page_size, heads_kv, ...] with block_table (int32
    [batch, max_pages], as attention's); row t of sequence b goes to key positions[b] + t
    (positions: int32 [batch], default 0). For fp8, out's scales (or scale=) are read. Without
    out, new arrays of src's shape are returned (positions and block_table need out)."""
    ctx = context or default_context()
    sv = _views.view("src", src)
    if existing_cache(out, positions, block_table) is None:
        code = format_code("i8" if format is None else format)
        values_shape, scales_shape = new_cache_shapes("src", sv.shape, code, group)
        values = np.empty(values_shape, _views.float8_e4m3_dtype()
                          if code == N.DTYPE_FP8_E4M3 else np.int8 if code == N.DTYPE_I8
                          else np.uint8)
        scales = None if scales_shape is None else np.empty(
            scales_shape, _views.numpy_dtype(scales_dtype_code(scales_dtype)))
    else:
        values, scales = out
    vv = _views.view("values", values, writable=True, cache=True)
    if format is not None and format_code(format) != vv.dtype:
        raise ValueError("format=%r but out's values hold %s"
                         % (format, N.DTYPE_NAMES.get(vv.dtype, vv.dtype)))
    is_fp8 = vv.dtype == N.DTYPE_FP8_E4M3
    scv = None if scales is None or is_fp8 else _views.view("scales", scales, writable=True)
    fp8_scale = check_quantize_scales(vv.dtype, vv, scales if is_fp8 else scv, scale, group)
    if fp8_scale is not None:
        scv = scales_view("scales", fp8_scale, vv.dtype)
        scales = scv.keepalive
    run_quantize_kv(ctx, sv, vv, scv,
                    None if positions is None else _views.small_view("positions", positions,
                                                                     np.int32),
                    None if block_table is None else _views.small_view("block_table",
                                                                       block_table, np.int32))
    return QuantizedKV(values, scales)


def merge_states(o_parts, lse_parts, *, out=None, lse_out=None, return_lse=False, dtype=None,
                 context=None):
    """Merges partial attention results over disjoint key sets, sattn_merge_states.

    o_parts: a sequence of [batch, seq, heads, head_dim] arrays; lse_parts: the matching float32
    [batch, heads, seq] log-sum-exps (-inf marks an empty part). Returns out, or (out, lse_out)
    when return_lse is true or lse_out is given. out may be one of o_parts (in place)."""
    ctx = context or default_context()
    o_parts, lse_parts = list(o_parts), list(lse_parts)
    if len(o_parts) != len(lse_parts):
        raise ValueError("%d o_parts but %d lse_parts" % (len(o_parts), len(lse_parts)))
    if not o_parts and out is None:
        raise ValueError("merging no parts needs out= (its shape cannot be inferred)")
    ovs = [_views.view("o_parts[%d]" % i, o) for i, o in enumerate(o_parts)]
    lvs = [_views.view("lse_parts[%d]" % i, x) for i, x in enumerate(lse_parts)]
    o_array = (N.Tensor * max(1, len(ovs)))(*[x.tensor for x in ovs])
    l_array = (N.Tensor * max(1, len(lvs)))(*[x.tensor for x in lvs])
    shape = ovs[0].shape if ovs else None
    out, outv = _output("out", out, shape, _out_dtype(dtype, ovs[0].dtype if ovs else N.DTYPE_F32))
    want_lse = return_lse or lse_out is not None
    lv = None
    if want_lse:
        if lse_out is None:
            b, s, h = outv.shape[0], outv.shape[1], outv.shape[2]
            lse_out = np.empty((b, h, s), np.float32)
        lv = _views.view("lse_out", lse_out, writable=True)
    _check(_lib.sattn_merge_states(ctx.handle, len(ovs), o_array, l_array, outv.ref(), _ref(lv)))
    return (out, lse_out) if want_lse else out


def _softmax_options(temperature):
    options = N.SoftmaxOptions()
    options.struct_size = ctypes.sizeof(options)
    options.temperature = 0.0 if temperature is None else temperature
    return options


def _softmax_like(fn, x, temperature, out, dtype, context):
    ctx = context or default_context()
    xv = _views.view("in", x)
    out, ov = _output("out", out, xv.shape, _out_dtype(dtype, xv.dtype))
    options = _softmax_options(temperature)
    _check(fn(ctx.handle, xv.ref(), ov.ref(), ctypes.byref(options)))
    return out


def softmax(x, *, temperature=None, out=None, dtype=None, context=None):
    """Softmax over the last axis of a [n] or [rows, n] array, sattn_softmax (scores divided by
    temperature). out may be x (in place); a new array has `dtype`, default x's dtype."""
    return _softmax_like(_lib.sattn_softmax, x, temperature, out, dtype, context)


def log_softmax(x, *, temperature=None, out=None, dtype=None, context=None):
    """Log-softmax over the last axis, sattn_log_softmax; arguments as softmax."""
    return _softmax_like(_lib.sattn_log_softmax, x, temperature, out, dtype, context)


def softmax_topk(x, k, *, temperature=None, indices=None, probs=None, lse=None,
                 return_lse=False, context=None):
    """The k most likely entries of each row under the softmax of the whole row, in one read,
    sattn_softmax_topk. Returns (indices int32, probs float32), shaped [k] or [rows, k], each row
    by descending probability; with return_lse (or lse given) also the rows' log-sum-exps."""
    ctx = context or default_context()
    xv = _views.view("in", x)
    shape = xv.shape[:-1] + (k,)
    indices, iv = _output("indices", indices, shape, N.DTYPE_I32)
    probs, pv = _output("probs", probs, shape, N.DTYPE_F32)
    want_lse = return_lse or lse is not None
    lv = None
    if want_lse:
        lse, lv = _output("lse", lse, xv.shape[:-1] or (1,), N.DTYPE_F32)
    options = _softmax_options(temperature)
    _check(_lib.sattn_softmax_topk(ctx.handle, xv.ref(), k, iv.ref(), pv.ref(), _ref(lv),
                                   ctypes.byref(options)))
    return (indices, probs, lse) if want_lse else (indices, probs)


def exp2(x, *, out=None, context=None):
    """2**x elementwise by the library's SIMD exp2 (at most 2 ulp), for contiguous float32
    arrays; out may be x."""
    ctx = context or default_context()
    xv = _views.view("x", x)
    if out is None:
        out = np.empty(xv.shape, np.float32)
    ov = _views.view("out", out, writable=True)
    for name, v in (("x", xv), ("out", ov)):
        contiguous = all(v.tensor.strides[i] == int(np.prod(v.shape[i + 1:], dtype=np.int64))
                         for i in range(len(v.shape)))
        if v.dtype != N.DTYPE_F32 or not contiguous:
            raise ValueError("exp2: %s must be contiguous float32" % name)
    n = int(np.prod(xv.shape, dtype=np.int64))
    if ov.shape != xv.shape:
        raise ValueError("exp2: out shape %s differs from x shape %s" % (ov.shape, xv.shape))
    _check(_lib.sattn_exp2(ctx.handle, xv.tensor.data, ov.tensor.data, n))
    return out
