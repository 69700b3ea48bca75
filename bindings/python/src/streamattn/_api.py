"""The operations, mirroring the C API: each takes arrays (numpy, or anything with __dlpack__,
such as a PyTorch CPU tensor) without copying them, and writes into `out=` when given or into a
new numpy array otherwise. A failed call raises streamattn.Error with the library's message."""

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

    def close(self):
        """Frees the context now (it is freed on garbage collection otherwise)."""
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _lib.sattn_context_destroy(handle)

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


def attention(q, k, v, *, scale=None, causal=False, window=None, softcap=None, alibi_slopes=None,
              mask=None, sinks=None, seqused_k=None, block_table=None, out=None, lse=None,
              return_lse=False, dtype=None, f32_pv=False, context=None):
    """Exact softmax attention, sattn_attention: out = softmax(scale q k^T + bias) v.

    q [batch, seq_q, heads_q, head_dim]; k, v [batch, seq_k, heads_kv, head_dim(_v)], or
    [num_pages, page_size, heads_kv, head_dim] with block_table. float32, float16 or bfloat16,
    any strides (a [batch, heads, seq, dim] tensor's .transpose(1, 2) needs no copy).

    scale: None = 1/sqrt(head_dim). causal: bottom-right aligned. window: (left, right), None
    or -1 for an unbounded side. softcap: tanh capping of scores. alibi_slopes, sinks: float32
    [heads_q]. mask: additive, [batch or 1, heads_q or 1, seq_q, seq_k]. seqused_k: int32
    [batch] keys per sequence. block_table: int32 [batch, max_pages] (paged KV cache).
    f32_pv: P.V in float32 where a native CPU kernel (bfloat16 inputs) would round P.
    out: where to write (else a new array of `dtype`, default q's dtype). lse: where to write the
    float32 [batch, heads_q, seq_q] log-sum-exps. Returns out, or (out, lse) when return_lse is
    true or lse is given."""
    ctx = context or default_context()
    qv, kv, vv = (_views.view("q", q), _views.view("k", k), _views.view("v", v))
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
    keep = []
    for field, value, dtype_ in (("alibi_slopes", alibi_slopes, np.float32),
                                 ("sinks", sinks, np.float32),
                                 ("seqused_k", seqused_k, np.int32),
                                 ("block_table", block_table, np.int32),
                                 ("mask", mask, None)):
        if value is None:
            continue
        ov_ = (_views.view(field, value) if dtype_ is None
               else _views.small_view(field, value, dtype_))
        keep.append(ov_)
        setattr(options, field, ctypes.pointer(ov_.tensor))
    _check(_lib.sattn_attention(ctx.handle, qv.ref(), kv.ref(), vv.ref(), ov.ref(), _ref(lv),
                                ctypes.byref(options)))
    return (out, lse) if want_lse else out


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
