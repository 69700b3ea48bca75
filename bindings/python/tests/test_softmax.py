"""softmax, log_softmax, softmax_topk and exp2 against float64 numpy."""

import numpy as np
import pytest

import reference
import streamattn
from conftest import optional_import


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1000), (5, 33)])
@pytest.mark.parametrize("temperature", [None, 0.7])
def test_softmax_and_log_softmax(rng, shape, temperature):
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    t = temperature or 1.0
    np.testing.assert_allclose(streamattn.softmax(x, temperature=temperature),
                               reference.softmax(x, t), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(streamattn.log_softmax(x, temperature=temperature),
                               reference.log_softmax(x, t), rtol=0, atol=2e-5)


def test_large_scores_do_not_overflow():
    x = np.array([[90.0, 95.0, 100.0], [1e30, 0.0, -1e30]], np.float32)
    np.testing.assert_allclose(streamattn.softmax(x), reference.softmax(x), atol=1e-6)


def test_in_place_and_strided(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    want = reference.softmax(x[:, ::2])
    view = x[:, ::2]
    assert streamattn.softmax(view, out=view) is view
    np.testing.assert_allclose(x[:, ::2], want, rtol=1e-5, atol=1e-7)


def test_half_precision_logits(rng):
    bf16 = optional_import("ml_dtypes").bfloat16
    for dtype in (np.float16, bf16):
        x = rng.standard_normal((3, 200)).astype(dtype)
        p = streamattn.softmax(x, dtype=np.float32)
        assert p.dtype == np.float32
        np.testing.assert_allclose(p, reference.softmax(reference.to_f64(x)), rtol=1e-5,
                                   atol=1e-7)
        assert streamattn.softmax(x).dtype == np.dtype(dtype)


@pytest.mark.parametrize("k", [1, 5, 64])
def test_softmax_topk(rng, k):
    x = rng.standard_normal((6, 500)).astype(np.float32)
    indices, probs, lse = streamattn.softmax_topk(x, k, temperature=0.8, return_lse=True)
    assert indices.dtype == np.int32 and probs.dtype == np.float32
    assert indices.shape == probs.shape == (6, k) and lse.shape == (6,)
    want_p = reference.softmax(x, 0.8)
    for r in range(6):
        want_order = np.argsort(-x[r], kind="stable")[:k]
        np.testing.assert_array_equal(indices[r], want_order)
        np.testing.assert_allclose(probs[r], want_p[r, want_order], rtol=1e-5)
    np.testing.assert_allclose(lse, reference.logsumexp(x / 0.8)[:, 0], atol=2e-5)


def test_softmax_topk_of_one_row(rng):
    x = rng.standard_normal(50).astype(np.float32)
    indices, probs = streamattn.softmax_topk(x, 3)
    assert indices.shape == (3,)
    np.testing.assert_array_equal(indices, np.argsort(-x)[:3])


def test_exp2(rng):
    x = rng.uniform(-150, 128, 10000).astype(np.float32)
    y = streamattn.exp2(x)
    np.testing.assert_allclose(y, np.exp2(x.astype(np.float64)), rtol=3e-7, atol=3e-45)
    streamattn.exp2(x, out=x)  # in place
    np.testing.assert_array_equal(x, y)
