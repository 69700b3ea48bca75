"""streamattn.attention against the float64 numpy oracle: shapes, every option, dtypes, strided
and paged layouts, outputs given and returned."""

import numpy as np
import pytest

import reference
import streamattn
from conftest import optional_import


def qkv(rng, b=2, sq=9, sk=33, hq=4, hkv=2, d=32, dv=None, dtype=np.float32):
    q = rng.standard_normal((b, sq, hq, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hkv, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hkv, dv or d)).astype(dtype)
    return q, k, v


def assert_close(got, want, tol):
    got = reference.to_f64(got)
    scale = max(1.0, np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("shape", [
    dict(b=1, sq=1, sk=1, hq=1, hkv=1, d=8),
    dict(b=2, sq=9, sk=33, hq=4, hkv=2, d=32),     # GQA, seq_q < seq_k
    dict(b=1, sq=130, sk=130, hq=3, hkv=1, d=64),   # MQA, past one tile
    dict(b=1, sq=4, sk=300, hq=8, hkv=8, d=128),    # decode-like, MHA
    dict(b=1, sq=5, sk=20, hq=2, hkv=1, d=16, dv=40),  # head_dim_v != head_dim
])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_oracle(rng, shape, causal):
    q, k, v = qkv(rng, **shape)
    out, lse = streamattn.attention(q, k, v, causal=causal, return_lse=True)
    want, want_lse = reference.attention(q, k, v, causal=causal)
    assert out.dtype == np.float32 and out.shape == want.shape
    assert_close(out, want, 1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5)


OPTIONS = {
    "scale": dict(scale=0.05),
    "window": dict(window=(5, 2)),
    "window_left_only": dict(window=(3, None), causal=True),
    "softcap": dict(softcap=1.5),
    "alibi": dict(alibi_slopes=[0.5, 0.25, 0.125, 0.0625]),
    "sinks": dict(sinks=np.array([0.0, 2.0, -1.0, 5.0], np.float32)),
    "seqused_k": dict(seqused_k=[33, 0]),
    "everything": dict(scale=0.2, causal=True, window=(11, -1), softcap=4.0,
                       alibi_slopes=[0.1, 0.2, 0.3, 0.4], sinks=[1.0, 0.0, -2.0, 0.5],
                       seqused_k=np.array([20, 31], np.int64)),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_each_option(rng, name):
    q, k, v = qkv(rng)
    opts = OPTIONS[name]
    out, lse = streamattn.attention(q, k, v, return_lse=True, **opts)
    want, want_lse = reference.attention(q, k, v, **opts)
    assert_close(out, want, 1e-5)
    finite = np.isfinite(want_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(lse[finite], want_lse[finite], atol=2e-5)


@pytest.mark.parametrize("mask_shape", [(2, 4, 9, 33), (1, 1, 9, 33), (2, 1, 9, 33)])
def test_additive_mask_broadcasts(rng, mask_shape):
    q, k, v = qkv(rng)
    mask = rng.standard_normal(mask_shape).astype(np.float32)
    mask[rng.random(mask_shape) < 0.3] = -np.inf
    out = streamattn.attention(q, k, v, mask=mask)
    want, _ = reference.attention(q, k, v, mask=mask)
    assert_close(out, want, 1e-5)


def test_paged_cache_with_a_block_table(rng):
    b, pages_per_seq, page, hkv, d = 2, 4, 8, 2, 32
    q, k, v = qkv(rng, b=b, sq=3, sk=pages_per_seq * page, hkv=hkv, d=d)
    table = rng.permutation(b * pages_per_seq).reshape(b, pages_per_seq).astype(np.int32)
    k_pages, v_pages = reference.paged(k, v, table, page)
    seqused = [29, 17]
    out = streamattn.attention(q, k_pages, v_pages, block_table=table, seqused_k=seqused,
                               causal=True)
    want, _ = reference.attention(q, k, v, seqused_k=seqused, causal=True)
    assert_close(out, want, 1e-5)


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_half_precision_inputs_and_outputs(rng, dtype_name):
    if dtype_name == "bfloat16":
        dtype = optional_import("ml_dtypes").bfloat16
    else:
        dtype = np.float16
    q, k, v = qkv(rng, dtype=dtype)
    out = streamattn.attention(q, k, v, causal=True)
    assert out.dtype == np.dtype(dtype)  # a new out takes q's dtype
    want, _ = reference.attention(q, k, v, causal=True)  # on the rounded inputs
    assert_close(out, want, 1e-2 if dtype_name == "bfloat16" else 2e-3)
    out32 = streamattn.attention(q, k, v, causal=True, dtype=np.float32)
    assert out32.dtype == np.float32
    # A native kernel rounds P to the inputs' type (docs/performance.md); f32_pv keeps it.
    kernel = streamattn.Context().info()["cpu_kernels"][dtype_name]
    native = 4e-3 if dtype_name == "bfloat16" else 5e-4
    assert_close(out32, want, 1e-5 if kernel == "f32-fma" else native)
    exact = streamattn.attention(q, k, v, causal=True, dtype=np.float32, f32_pv=True)
    assert_close(exact, want, 1e-5)


def test_a_forced_cpu_kernel_is_reported_or_refused():
    ctx = streamattn.Context(cpu_kernel="f32-fma")
    assert set(ctx.info()["cpu_kernels"].values()) == {"f32-fma"}
    for name, dtype_name in [("avx512-bf16", "bfloat16"), ("neon-bf16", "bfloat16"),
                             ("neon-fp16", "float16")]:
        try:
            native = streamattn.Context(cpu_kernel=name)
        except streamattn.Error as e:
            assert name in str(e)
        else:
            assert native.info()["cpu_kernels"][dtype_name] == name
    with pytest.raises(ValueError):
        streamattn.Context(cpu_kernel="amx")


def test_head_major_buffers_and_strided_outputs_need_no_copies(rng):
    # [b, h, s, d] buffers, as many frameworks keep them, viewed as [b, s, h, d].
    q_bhsd = rng.standard_normal((2, 4, 9, 32)).astype(np.float32)
    k_bhsd = rng.standard_normal((2, 2, 33, 32)).astype(np.float32)
    v_bhsd = rng.standard_normal((2, 2, 33, 32)).astype(np.float32)
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q_bhsd, k_bhsd, v_bhsd))
    out_bhsd = np.zeros((2, 4, 9, 32), np.float32)
    result = streamattn.attention(q, k, v, causal=True, out=out_bhsd.transpose(0, 2, 1, 3))
    want, _ = reference.attention(q, k, v, causal=True)
    assert_close(out_bhsd.transpose(0, 2, 1, 3), want, 1e-5)
    assert np.shares_memory(result, out_bhsd)


def test_negative_strides_on_inputs(rng):
    q, k, v = qkv(rng)
    out = streamattn.attention(q[:, ::-1], k[:, ::-1], v[:, ::-1])
    want, _ = reference.attention(q[:, ::-1], k[:, ::-1], v[:, ::-1])
    assert_close(out, want, 1e-5)


def test_in_place_over_q_and_given_lse(rng):
    q, k, v = qkv(rng)
    want, want_lse = reference.attention(q, k, v)
    lse = np.empty((2, 4, 9), np.float32)
    out, lse_back = streamattn.attention(q, k, v, out=q, lse=lse)
    assert out is q and lse_back is lse
    assert_close(q, want, 1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5)


def test_same_bytes_for_any_thread_count(rng):
    q, k, v = qkv(rng, b=1, sq=200, sk=300, hq=8, hkv=2, d=64)
    with streamattn.Context(1) as one, streamattn.Context(2) as two:
        a = one.attention(q, k, v, causal=True)
        b = two.attention(q, k, v, causal=True)
    np.testing.assert_array_equal(a, b)
