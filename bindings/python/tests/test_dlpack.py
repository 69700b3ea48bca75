"""Inputs and outputs through __dlpack__: PyTorch CPU tensors (float32, float16, bfloat16),
read in place, and a producer that is neither numpy nor torch."""

import numpy as np
import pytest

import reference
import streamattn
from streamattn import _views
from conftest import optional_import


@pytest.fixture(scope="module")
def torch():
    return optional_import("torch")


def test_torch_tensors_are_viewed_without_copies(torch):
    t = torch.randn(2, 8, 4, 16)
    v = _views.view("q", t)
    assert v.tensor.data == t.data_ptr()
    assert v.shape == (2, 8, 4, 16)
    # A transposed ([b, h, s, d] -> [b, s, h, d]) tensor keeps its strides, not a copy.
    tt = torch.randn(2, 4, 8, 16).transpose(1, 2)
    vt = _views.view("q", tt)
    assert vt.tensor.data == tt.data_ptr()
    assert [vt.tensor.strides[i] for i in range(4)] == list(tt.stride())


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_attention_on_torch_tensors(torch, dtype_name):
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(5)
    # Stored [b, h, s, d], passed as [b, s, h, d] views, as a model's attention layer has them.
    q = torch.randn(1, 8, 40, 64, generator=g, dtype=torch.float32).to(dtype).transpose(1, 2)
    k = torch.randn(1, 2, 70, 64, generator=g, dtype=torch.float32).to(dtype).transpose(1, 2)
    v = torch.randn(1, 2, 70, 64, generator=g, dtype=torch.float32).to(dtype).transpose(1, 2)
    out = torch.empty(1, 40, 8, 64, dtype=dtype)
    lse = torch.empty(1, 8, 40)
    result, lse_back = streamattn.attention(q, k, v, causal=True, out=out, lse=lse)
    assert result is out and lse_back is lse  # written in place through DLPack
    want, want_lse = reference.attention(*(reference.to_f64(x) for x in (q, k, v)), causal=True)
    tol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}[dtype_name]
    np.testing.assert_allclose(reference.to_f64(out), want, atol=tol * np.abs(want).max())
    np.testing.assert_allclose(lse.numpy(), want_lse, atol=2e-5)


def test_torch_inputs_give_numpy_outputs_by_default(torch):
    x = torch.randn(3, 50)
    p = streamattn.softmax(x)
    assert isinstance(p, np.ndarray) and p.dtype == np.float32
    np.testing.assert_allclose(p, reference.softmax(x.numpy()), rtol=1e-5, atol=1e-7)


def test_torch_int_options_and_bf16_results(torch):
    ml_dtypes = optional_import("ml_dtypes")
    q = torch.randn(2, 1, 4, 32, dtype=torch.bfloat16)
    k = torch.randn(2, 10, 2, 32, dtype=torch.bfloat16)
    v = torch.randn(2, 10, 2, 32, dtype=torch.bfloat16)
    seqused = torch.tensor([10, 4])  # int64, as torch makes them: converted, it is tiny
    out = streamattn.attention(q, k, v, seqused_k=seqused)
    assert out.dtype == np.dtype(ml_dtypes.bfloat16)  # numpy bf16, via ml_dtypes
    want, _ = reference.attention(*(reference.to_f64(x) for x in (q, k, v)), seqused_k=[10, 4])
    np.testing.assert_allclose(reference.to_f64(out), want, atol=1e-2 * np.abs(want).max())


def test_tensors_that_require_grad_are_refused_by_torch(torch):
    q = torch.randn(1, 2, 1, 8, requires_grad=True)
    with pytest.raises((RuntimeError, BufferError), match="detach"):
        streamattn.attention(q, q.detach(), q.detach())


class DLPackOnly:
    """A producer known only by its __dlpack__ (here numpy's own export)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_any_dlpack_producer(rng):
    x = rng.standard_normal((4, 30)).astype(np.float32)
    out = np.empty_like(x)
    streamattn.softmax(DLPackOnly(x[:, ::3]), out=DLPackOnly(out[:, ::3]))
    np.testing.assert_allclose(out[:, ::3], reference.softmax(x[:, ::3]), rtol=1e-5, atol=1e-7)


def test_read_only_dlpack_outputs_are_refused():
    frozen = np.zeros(10, np.float32)
    frozen.flags.writeable = False
    # DLPack 1.0 producers flag it (our check); older numpy refuses to export it at all.
    with pytest.raises((ValueError, BufferError), match="read-only|readonly"):
        streamattn.softmax(np.ones(10, np.float32), out=DLPackOnly(frozen))
