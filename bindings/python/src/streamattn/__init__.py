"""streamattn: exact softmax attention for inference on CPUs, from Python.

Pure Python over the library's C ABI (ctypes): no compiler at install time. The library is
loaded from $STREAMATTN_LIBRARY, else from beside this package, else from the system path.

    import numpy as np, streamattn
    out = streamattn.attention(q, k, v, causal=True)       # numpy arrays or torch tensors
    out, lse = streamattn.attention(q, k, v, return_lse=True)
    k8 = streamattn.quantize_kv(k, "i8")                   # (int8 values, float16 group scales)
    out = streamattn.attention(q, k8, v)                   # k read as int8, in place

Arrays are numpy arrays (float32, float16, ml_dtypes.bfloat16, int32; a quantized cache's values
int8, ml_dtypes.float8_e4m3fn or packed 4-bit uint8) or anything with __dlpack__ (PyTorch CPU
tensors, bfloat16 included); none is copied. Results are written into
`out=` when given, else returned as new numpy arrays. Failures raise streamattn.Error (an
InvalidArgumentError, also a ValueError, for malformed calls) with the library's message.
"""

from ._api import (Context, Error, InvalidArgumentError, QuantizedKV, attention, default_context,
                   exp2, info, library_path, log_softmax, merge_states, quantize_kv, softmax,
                   softmax_topk, version)

__version__ = "0.1.0"

__all__ = ["Context", "Error", "InvalidArgumentError", "QuantizedKV", "attention",
           "default_context", "exp2", "info", "library_path", "log_softmax", "merge_states",
           "quantize_kv", "softmax", "softmax_topk", "version", "__version__"]
