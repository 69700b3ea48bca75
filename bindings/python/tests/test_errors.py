"""Failures: the library's status and message as a Python exception, nothing written; and the
binding's own checks before a call."""

import numpy as np
import pytest

import streamattn


def test_a_malformed_call_raises_the_library_message_and_writes_nothing(rng):
    q = rng.standard_normal((1, 4, 2, 128)).astype(np.float32)
    k = rng.standard_normal((1, 8, 2, 96)).astype(np.float32)
    out = np.full((1, 4, 2, 128), 7.0, np.float32)
    with pytest.raises(streamattn.InvalidArgumentError) as info:
        streamattn.attention(q, k, k, out=out)
    e = info.value
    assert isinstance(e, streamattn.Error) and isinstance(e, ValueError)
    assert e.status == 1 and e.status_name == "invalid argument"
    assert e.message == "k.shape[3]=96 must equal q.shape[3]=128"
    assert str(e) == "invalid argument: k.shape[3]=96 must equal q.shape[3]=128"
    assert (out == 7.0).all()


def test_option_errors_name_the_option(rng):
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    with pytest.raises(streamattn.Error, match="alibi_slopes"):
        streamattn.attention(q, q, q, alibi_slopes=[0.5, 0.5])  # 2 slopes for 4 heads
    with pytest.raises(streamattn.Error, match="k=0"):
        streamattn.softmax_topk(q.reshape(-1), 0)


def test_unsupported_dtypes_and_ranks_are_type_and_value_errors():
    with pytest.raises(TypeError, match="q: dtype float64"):
        streamattn.attention(np.zeros((1, 1, 1, 8)), np.zeros((1, 1, 1, 8), np.float32),
                             np.zeros((1, 1, 1, 8), np.float32))
    with pytest.raises(ValueError, match="5 dims"):
        streamattn.softmax(np.zeros((1, 1, 1, 1, 2), np.float32))
    with pytest.raises(ValueError, match="read-only"):
        x = np.zeros(4, np.float32)
        x.flags.writeable = False
        streamattn.softmax(np.zeros(4, np.float32), out=x)
    with pytest.raises(TypeError, match="output must be"):
        streamattn.softmax(np.zeros(4, np.float32), out=[0.0] * 4)


def test_contexts():
    with pytest.raises(streamattn.InvalidArgumentError, match="num_threads"):
        streamattn.Context(num_threads=-1)
    with pytest.raises(ValueError, match="backend"):
        streamattn.Context(backend="tpu")
    ctx = streamattn.Context(1)
    ctx.close()
    with pytest.raises(ValueError, match="closed"):
        ctx.softmax(np.zeros(3, np.float32))
