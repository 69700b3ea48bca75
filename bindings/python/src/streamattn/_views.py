"""Arrays to sattn_tensor views, without copies.

numpy arrays (float32, float16, ml_dtypes.bfloat16, int32; and for a quantized KV cache's
values int8, ml_dtypes.float8_e4m3fn, or uint8 holding packed 4-bit pairs) are viewed through
their __array_interface__; anything else with __dlpack__ (a PyTorch tensor, a JAX or CuPy array) is
read through DLPack here, with ctypes, rather than through numpy.from_dlpack, because numpy has
no bfloat16. A view holds a reference to what keeps its memory alive (the array, or the DLPack
capsule, whose own destructor releases the producer's tensor: the capsule is borrowed, not
consumed).
"""

import ctypes

import numpy as np

from . import _native as N

# DLPack (dlpack.h): DLDeviceType, DLDataTypeCode and the versioned-tensor flags.
_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST = 1, 2, 3
_KDL_INT, _KDL_UINT, _KDL_FLOAT, _KDL_BFLOAT, _KDL_FLOAT8_E4M3FN = 0, 1, 2, 4, 10
_DL_FLAG_READ_ONLY = 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def bfloat16_dtype():
    """numpy's bfloat16 dtype from ml_dtypes, or None when ml_dtypes is not installed."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def numpy_dtype(code):
    """The numpy dtype of a sattn_dtype (bfloat16 needs ml_dtypes; else float32 stands in)."""
    if code == N.DTYPE_BF16:
        return bfloat16_dtype() or np.dtype(np.float32)
    return np.dtype({N.DTYPE_F32: np.float32, N.DTYPE_F16: np.float16,
                     N.DTYPE_I32: np.int32}[code])


def dtype_code(dtype):
    """The sattn_dtype of a numpy dtype, a name ("bfloat16"), or a torch dtype; None if none."""
    name = str(dtype).replace("torch.", "")
    return {"float32": N.DTYPE_F32, "float16": N.DTYPE_F16, "bfloat16": N.DTYPE_BF16,
            "int32": N.DTYPE_I32}.get(name)


# How numpy and torch hold the quantized KV-cache formats: I8 as int8, FP8 E4M3 as
# float8_e4m3fn (ml_dtypes, torch), I4 as uint8 bytes of two elements each (see i4_layout).
_CACHE_STORAGE = {"int8": N.DTYPE_I8, "float8_e4m3fn": N.DTYPE_FP8_E4M3, "uint8": N.DTYPE_I4}
CACHE_DTYPES = "float32, float16, bfloat16, int8 (i8), float8_e4m3fn, uint8 (packed i4)"


def cache_dtype_code(dtype):
    """dtype_code, also taking the storage of the quantized formats (a k or v cache's values)."""
    return _CACHE_STORAGE.get(str(dtype).replace("torch.", "")) or dtype_code(dtype)


def float8_e4m3_dtype():
    """numpy's float8_e4m3fn dtype (ml_dtypes; the OCP E4M3 the header describes)."""
    import ml_dtypes
    return np.dtype(ml_dtypes.float8_e4m3fn)


def i4_layout(name, shape, strides):
    """The element view of packed I4 bytes: uint8 [..., head_dim / 2] with strides in bytes,
    byte j of a row holding element 2j in its low 4 bits and element 2j + 1 in its high 4 bits
    (each a two's-complement q in [-8, 7]), as the sattn_tensor of [..., head_dim] elements,
    whose strides count half bytes: the last one 1, every other twice the byte stride, so each
    row starts on a byte. Bytes that are not adjacent along the last axis hold no such row."""
    shape, strides = list(shape), list(strides)
    if shape[-1] > 1 and strides[-1] != 1:
        raise ValueError("%s: packed i4 bytes (uint8) must be adjacent along the last axis "
                         "(byte stride 1, not %d): each byte holds two elements of a row"
                         % (name, strides[-1]))
    return shape[:-1] + [2 * shape[-1]], [2 * s for s in strides[:-1]] + [1]


class View:
    """A sattn_tensor plus the objects that keep its memory alive."""

    __slots__ = ("tensor", "keepalive")

    def __init__(self, tensor, keepalive):
        self.tensor = tensor
        self.keepalive = keepalive

    @property
    def shape(self):
        return tuple(self.tensor.shape[i] for i in range(self.tensor.ndim))

    @property
    def dtype(self):
        return self.tensor.dtype

    def ref(self):
        return ctypes.byref(self.tensor)


def _fill(data, dtype, device, device_index, shape, strides):
    t = N.Tensor()
    t.data = data
    t.dtype = dtype
    t.device = device
    t.device_index = device_index
    t.ndim = len(shape)
    for i, (extent, stride) in enumerate(zip(shape, strides)):
        t.shape[i] = extent
        t.strides[i] = stride
    return t


def _check_rank(name, ndim):
    if not 1 <= ndim <= N.MAX_NDIM:
        raise ValueError("%s: %d dims; streamattn takes 1 to %d" % (name, ndim, N.MAX_NDIM))


def _unsupported(name, what, cache):
    return TypeError("%s: dtype %s is not supported (%s)"
                     % (name, what, CACHE_DTYPES if cache else "float32, float16, bfloat16, int32"))


def _numpy_view(name, a, writable, cache=False):
    code = (cache_dtype_code if cache else dtype_code)(a.dtype)
    if code is None:
        raise _unsupported(name, a.dtype, cache)
    _check_rank(name, a.ndim)
    if writable and not a.flags.writeable:
        raise ValueError("%s: the array is read-only" % name)
    itemsize = a.dtype.itemsize
    if any(s % itemsize for s in a.strides):
        raise ValueError("%s: strides %s (bytes) are not whole elements of %d bytes"
                         % (name, a.strides, itemsize))
    shape, strides = a.shape, [s // itemsize for s in a.strides]
    if code == N.DTYPE_I4:
        shape, strides = i4_layout(name, shape, strides)
    return View(_fill(a.ctypes.data, code, N.DEVICE_CPU, 0, shape, strides), a)


def _dlpack_capsule(obj):
    try:  # DLPack 1.0 carries a read-only flag; older producers only know the legacy form
        return obj.__dlpack__(max_version=(1, 0))
    except TypeError:
        return obj.__dlpack__()


_DL_CODES = {(_KDL_FLOAT, 32): N.DTYPE_F32, (_KDL_FLOAT, 16): N.DTYPE_F16,
             (_KDL_BFLOAT, 16): N.DTYPE_BF16, (_KDL_INT, 32): N.DTYPE_I32}
_DL_CACHE_CODES = {(_KDL_INT, 8): N.DTYPE_I8, (_KDL_FLOAT8_E4M3FN, 8): N.DTYPE_FP8_E4M3,
                   (_KDL_UINT, 8): N.DTYPE_I4}


def _dlpack_view(name, obj, writable, cache=False):
    capsule = _dlpack_capsule(obj)
    capsule_name = _capsule_name(capsule)
    if capsule_name == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, capsule_name))
        if writable and managed.flags & _DL_FLAG_READ_ONLY:
            raise ValueError("%s: the tensor is read-only" % name)
    elif capsule_name == b"dltensor":
        managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, capsule_name))
    else:
        raise TypeError("%s: __dlpack__ returned a capsule named %r" % (name, capsule_name))
    dl = managed.dl_tensor
    _check_rank(name, dl.ndim)
    key = (dl.dtype.code, dl.dtype.bits)
    code = _DL_CODES.get(key) or (_DL_CACHE_CODES.get(key) if cache else None)
    if code is None or dl.dtype.lanes != 1:
        raise _unsupported(name, "(DLPack code %d, %d bits, %d lanes)"
                           % (dl.dtype.code, dl.dtype.bits, dl.dtype.lanes), cache)
    if dl.device.device_type in (_KDL_CPU, _KDL_CUDA_HOST):
        device, index = N.DEVICE_CPU, 0
    elif dl.device.device_type == _KDL_CUDA:
        device, index = N.DEVICE_CUDA, dl.device.device_id
    else:
        raise TypeError("%s: DLPack device type %d is neither the CPU nor CUDA"
                        % (name, dl.device.device_type))
    shape = [dl.shape[i] for i in range(dl.ndim)]
    if dl.strides:
        strides = [dl.strides[i] for i in range(dl.ndim)]
    else:  # NULL strides: compact row-major
        strides, step = [0] * dl.ndim, 1
        for i in reversed(range(dl.ndim)):
            strides[i], step = step, step * shape[i]
    if code == N.DTYPE_I4:
        shape, strides = i4_layout(name, shape, strides)
    data = (dl.data or 0) + dl.byte_offset
    return View(_fill(data, code, device, index, shape, strides), (obj, capsule))


def view(name, obj, writable=False, cache=False):
    """A View of obj (numpy array or __dlpack__ object) named `name` in error messages.
    cache: obj may also hold a quantized cache's values (int8, float8_e4m3fn, packed uint8)."""
    if isinstance(obj, np.ndarray):
        return _numpy_view(name, obj, writable, cache)
    if hasattr(obj, "__dlpack__"):
        return _dlpack_view(name, obj, writable, cache)
    if writable:
        raise TypeError("%s: an output must be a numpy array or a __dlpack__ tensor, not %s"
                        % (name, type(obj).__name__))
    return _numpy_view(name, np.asarray(obj), writable, cache)


def small_view(name, obj, dtype):
    """A View of a small option array (ALiBi slopes, sinks, lengths, block tables), converted to
    `dtype` (np.float32 or np.int32) when it is not already: these are a few numbers per head or
    sequence, where a copy costs nothing and saves every caller a cast."""
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__"):
        obj = np.from_dlpack(obj)  # a CPU tensor as a numpy array, sharing its memory
    a = np.asarray(obj)
    if a.dtype != dtype:
        if np.issubdtype(dtype, np.integer):
            if not np.issubdtype(a.dtype, np.integer):
                raise TypeError("%s: needs integers, got %s" % (name, a.dtype))
            if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
                raise ValueError("%s: values do not fit int32" % name)
        a = a.astype(dtype)
    return _numpy_view(name, a, False)
