"""The C ABI through ctypes: finding and loading libstreamattn, its structs and prototypes.

Mirrors include/streamattn/streamattn.h; the option structs begin with struct_size, so this
module works with any library whose major version it was written for (checked at load).
"""

import ctypes
import ctypes.util
import os
import pathlib

ABI_MAJOR = 0  # the SONAME's number: libstreamattn.so.0
MAX_NDIM = 4

# sattn_status
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_OUT_OF_MEMORY = 3
ERR_BACKEND_UNAVAILABLE = 4
ERR_INTERNAL = 5
ERR_RUNNER_FAILED = 6  # the context's parallel runner failed (not set from Python)

# sattn_dtype
DTYPE_F32 = 1
DTYPE_F16 = 2
DTYPE_BF16 = 3
DTYPE_I32 = 4
DTYPE_I8 = 5  # the quantized KV-cache formats (the header has their bytes)
DTYPE_FP8_E4M3 = 6
DTYPE_I4 = 7  # two elements a byte; views count shape and strides in elements
DTYPE_NAMES = {DTYPE_F32: "float32", DTYPE_F16: "float16", DTYPE_BF16: "bfloat16",
               DTYPE_I32: "int32", DTYPE_I8: "i8", DTYPE_FP8_E4M3: "fp8_e4m3", DTYPE_I4: "i4"}

# sattn_device
DEVICE_CPU = 0
DEVICE_CUDA = 1

# sattn_backend
BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}
BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}
CPU_KERNELS = {"auto": 0, "f32-fma": 1, "avx512-bf16": 2, "neon-bf16": 3, "neon-fp16": 4}


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_NDIM),
        ("strides", ctypes.c_int64 * MAX_NDIM),
    ]


class ContextOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("num_threads", ctypes.c_int32),
        ("backend", ctypes.c_int32),
        ("alloc_fn", ctypes.c_void_p),  # the allocator: always NULL from Python
        ("free_fn", ctypes.c_void_p),
        ("alloc_user", ctypes.c_void_p),
        ("cpu_kernel", ctypes.c_int32),
    ]


class ContextInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("backend", ctypes.c_int32),
        ("num_threads", ctypes.c_int32),
        ("backend_reason", ctypes.c_char_p),
        ("simd_target", ctypes.c_char_p),
        ("compiled_targets", ctypes.c_char_p),
        ("cuda_availability", ctypes.c_char_p),
        ("f32_kernel", ctypes.c_char_p),
        ("f16_kernel", ctypes.c_char_p),
        ("bf16_kernel", ctypes.c_char_p),
    ]


_TensorP = ctypes.POINTER(Tensor)


class AttentionOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("has_window", ctypes.c_int32),
        ("window_left", ctypes.c_int64),
        ("window_right", ctypes.c_int64),
        ("softcap", ctypes.c_float),
        ("alibi_slopes", _TensorP),
        ("mask", _TensorP),
        ("sinks", _TensorP),
        ("seqused_k", _TensorP),
        ("block_table", _TensorP),
        ("f32_pv", ctypes.c_int32),
        ("k_scales", _TensorP),  # the third version
        ("v_scales", _TensorP),
        ("int8_queries", ctypes.c_int32),  # the fourth version
        ("cu_seqlens_q", _TensorP),  # the fifth version
        ("cu_seqlens_k", _TensorP),
    ]


class QuantizeKVOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("positions", _TensorP),
        ("block_table", _TensorP),
    ]


class SoftmaxOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("temperature", ctypes.c_float)]


_LIBRARY_NAMES = ("libstreamattn.so.%d" % ABI_MAJOR, "libstreamattn.so")


def _candidates():
    """Where the library may be, in the order tried, as (how it was found, path or name)."""
    env = os.environ.get("STREAMATTN_LIBRARY")
    if env:
        # An explicit choice is the only one tried: a wrong path should fail, not fall back.
        return [("STREAMATTN_LIBRARY", env)]
    here = pathlib.Path(__file__).resolve().parent
    found = [("next to the package", str(here / name)) for name in _LIBRARY_NAMES
             if (here / name).exists()]
    system = ctypes.util.find_library("streamattn")
    found += [("system path", name) for name in (system,) + _LIBRARY_NAMES if name]
    return found


def _declare(lib):
    c = ctypes
    status = c.c_int
    ctx_p = c.c_void_p
    t = _TensorP
    protos = {
        "sattn_version": (c.c_char_p, []),
        "sattn_status_string": (c.c_char_p, [c.c_int]),
        "sattn_last_error": (c.c_char_p, []),
        "sattn_context_create": (status, [c.POINTER(ContextOptions), c.POINTER(ctx_p)]),
        "sattn_context_destroy": (status, [ctx_p]),
        "sattn_context_get_info": (status, [ctx_p, c.POINTER(ContextInfo)]),
        "sattn_context_set_cuda_stream": (status, [ctx_p, c.c_void_p]),
        "sattn_exp2": (status, [ctx_p, c.c_void_p, c.c_void_p, c.c_int64]),
        "sattn_attention": (status, [ctx_p, t, t, t, t, t, c.POINTER(AttentionOptions)]),
        "sattn_quantize_kv": (status, [ctx_p, t, t, t, c.POINTER(QuantizeKVOptions)]),
        "sattn_merge_states": (status, [ctx_p, c.c_int32, t, t, t, t]),
        "sattn_softmax": (status, [ctx_p, t, t, c.POINTER(SoftmaxOptions)]),
        "sattn_log_softmax": (status, [ctx_p, t, t, c.POINTER(SoftmaxOptions)]),
        "sattn_softmax_topk": (status, [ctx_p, t, c.c_int32, t, t, t,
                                        c.POINTER(SoftmaxOptions)]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def load():
    """Loads libstreamattn: $STREAMATTN_LIBRARY, else a copy next to this package, else the
    system's (ld.so's search: LD_LIBRARY_PATH, the ld.so cache, /usr/local/lib, ...)."""
    errors = []
    for how, path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s (%s): %s" % (path, how, e))
            continue
        version = lib.sattn_version
        version.restype = ctypes.c_char_p
        text = version().decode()
        if int(text.split(".")[0]) != ABI_MAJOR:
            errors.append("%s (%s): version %s, this package needs %d.x"
                          % (path, how, text, ABI_MAJOR))
            continue
        return _declare(lib), path
    raise ImportError(
        "streamattn: cannot load libstreamattn (tried: %s). Set STREAMATTN_LIBRARY to the "
        "library's path, or install it (cmake --install) where the loader finds it."
        % ("; ".join(errors) or "nothing found"))
