"""Quantized KV caches on torch tensors: streamattn.torch.quantize_kv against the header's rules
(reference.py), in both layouts, into a cache slice and through pages, NaN refused; attention
over (values, scales) pairs against the float64 oracle on the values they stand for; and the
numpy API reading torch's int8, uint8 and float8_e4m3fn tensors through DLPack."""

import numpy as np
import pytest

import reference
import streamattn
from conftest import optional_import

torch = optional_import("torch")
ml_dtypes = optional_import("ml_dtypes")
import streamattn.torch as sat  # noqa: E402  (needs torch)

STORAGE = {"i8": torch.int8, "i4": torch.uint8, "fp8_e4m3": torch.float8_e4m3fn}


def randn(*shape, seed=[0]):
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    return torch.randn(*shape, generator=g) * torch.rand(shape[:3] + (1,), generator=g).mul(4)


def as_bytes(t):
    return t.contiguous().view(torch.uint8).numpy()


def fp8_scale(x):
    return x.float().abs().amax(dim=(0, 1, 3)) / 448  # per kv head, [b, s, h, d]


def bshd(t, layout):
    return t.transpose(1, 2) if layout == "bhsd" and t.dim() == 4 else t


def quantize_both(x, fmt, layout, group=None, scales_dtype=torch.float16):
    """(streamattn.torch's, reference's) quantization of x [b, s, h, d], passed in `layout`."""
    scale = fp8_scale(x) if fmt == "fp8_e4m3" else None
    got = sat.quantize_kv(bshd(x, layout), fmt, layout=layout, group=group, scale=scale,
                          scales_dtype=scales_dtype)
    want = reference.quantize(x.float().numpy(), fmt, group or 32,
                              np.float16 if scales_dtype == torch.float16 else np.float32,
                              None if scale is None else scale.numpy())
    return got, want


@pytest.mark.parametrize("fmt", sorted(STORAGE))
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("src_dtype", ["float32", "bfloat16"])
def test_quantize_kv_follows_the_header_rules(fmt, layout, src_dtype):
    x = randn(2, 5, 3, 64).to(getattr(torch, src_dtype))
    got, want = quantize_both(x, fmt, layout)
    assert isinstance(got, sat.QuantizedKV) and got.values.dtype == STORAGE[fmt]
    values, scales = bshd(got.values, layout), bshd(got.scales, layout)
    assert values.shape == (2, 5, 3, 32 if fmt == "i4" else 64)
    np.testing.assert_array_equal(as_bytes(values), want[0].view(np.uint8))
    np.testing.assert_array_equal(scales.numpy(), want[1])


def test_group_sizes_and_f32_scales():
    x = randn(1, 4, 2, 64)
    for fmt, group in (("i8", 64), ("i8", 16), ("i4", 16)):
        got, want = quantize_both(x, fmt, "bshd", group, torch.float32)
        assert got.scales.dtype == torch.float32 and got.scales.shape[3] == 64 // group
        np.testing.assert_array_equal(as_bytes(got.values), want[0].view(np.uint8))
        np.testing.assert_array_equal(got.scales.numpy(), want[1])


@pytest.mark.parametrize("fmt", sorted(STORAGE))
def test_quantize_into_a_cache_slice_and_through_pages(fmt):
    x = randn(2, 3, 2, 32)
    fresh, want = quantize_both(x, fmt, "bshd")
    # A slice: rows 4.. of a [2, 10, ...] cache, at positions [1, 5] of that slice.
    cache = torch.zeros((2, 10) + tuple(fresh.values.shape[2:]), dtype=fresh.values.dtype)
    scales = fresh.scales if fmt == "fp8_e4m3" else torch.full(
        (2, 10) + tuple(fresh.scales.shape[2:]), 9.0, dtype=fresh.scales.dtype)
    back = sat.quantize_kv(x, out=(cache[:, 4:], scales if fmt == "fp8_e4m3" else scales[:, 4:]),
                           positions=[1, 2])
    assert back.values.data_ptr() == cache[:, 4:].data_ptr()
    for b, p in enumerate([1, 2]):
        np.testing.assert_array_equal(as_bytes(cache[b, 4 + p:4 + p + 3]),
                                      want[0][b].view(np.uint8))
        assert as_bytes(cache[b, :4 + p]).max() == 0 and as_bytes(cache[b, 7 + p:]).max() == 0
        if fmt != "fp8_e4m3":
            np.testing.assert_array_equal(scales[b, 4 + p:7 + p].numpy(), want[1][b])
            assert (scales[b, :4 + p] == 9).all()
    # Pages of 2 rows, handed out in reverse.
    table = torch.tensor([[3, 2], [1, 0]], dtype=torch.int32)
    pages = torch.zeros((4, 2) + tuple(fresh.values.shape[2:]), dtype=fresh.values.dtype)
    page_scales = fresh.scales if fmt == "fp8_e4m3" else torch.zeros(
        (4, 2) + tuple(fresh.scales.shape[2:]), dtype=fresh.scales.dtype)
    sat.quantize_kv(x, fmt, out=(pages, page_scales), block_table=table, positions=[0, 1])
    for b, start in enumerate([0, 1]):
        for t in range(3):
            key = start + t
            page, row = int(table[b, key // 2]), key % 2
            np.testing.assert_array_equal(as_bytes(pages[page, row]),
                                          want[0][b, t].view(np.uint8))


def test_a_nan_is_refused_by_index_with_nothing_written():
    x = randn(1, 2, 2, 32)
    x[0, 1, 1, 7] = float("nan")
    values = torch.full((1, 2, 2, 32), 5, dtype=torch.int8)
    scales = torch.full((1, 2, 2, 1), 2.0, dtype=torch.float16)
    with pytest.raises(streamattn.InvalidArgumentError,
                       match=r"src\[0, 1, 1, 7\]=nan cannot be quantized"):
        sat.quantize_kv(x, out=(values, scales))
    assert (values == 5).all() and (scales == 2).all()
    with pytest.raises(ValueError, match="fp8_e4m3 needs its scale"):
        sat.quantize_kv(x, "fp8_e4m3")
    with pytest.raises(ValueError, match="format='i4' but out's values are torch.int8"):
        sat.quantize_kv(x, "i4", out=(values, scales))


def dequantized(cache, fmt):
    """What a [b, s, h, ...] torch cache stands for, float64 (reference.dequantize's numpy)."""
    numpy_dtype = {"i8": np.int8, "i4": np.uint8, "fp8_e4m3": ml_dtypes.float8_e4m3fn}[fmt]
    return reference.dequantize(as_bytes(cache.values).view(numpy_dtype),
                                cache.scales.float().numpy(), fmt)


@pytest.mark.parametrize("fmt", sorted(STORAGE))
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("options", [dict(causal=True), dict(window=(20, 0), softcap=2.0)])
def test_attention_over_quantized_caches_matches_the_oracle(fmt, layout, options):
    q, k, v = randn(2, 3, 8, 64), randn(2, 70, 2, 64), randn(2, 70, 2, 64)
    kq, vq = (sat.quantize_kv(bshd(x, layout), fmt, layout=layout,
                              scale=fp8_scale(x) if fmt == "fp8_e4m3" else None) for x in (k, v))
    out = sat.attention(bshd(q, layout), kq, vq, layout=layout, **options)
    k_real, v_real = (dequantized(sat.QuantizedKV(bshd(c.values, layout),
                                                  bshd(c.scales, layout)), fmt)
                      for c in (kq, vq))
    want, _ = reference.attention(q.numpy(), k_real, v_real, **options)
    assert reference.max_relative_error(bshd(out, layout), want) <= 2e-6
    # Into a given out and lse, in place.
    given = torch.empty_like(bshd(q, layout))
    lse = torch.empty(2, 8, 3)
    sat.attention(bshd(q, layout), kq, vq, layout=layout, out=given, lse=lse, **options)
    torch.testing.assert_close(given, out, rtol=0, atol=0)


def test_paged_quantized_attention_with_mixed_formats():
    batch, page, pages = 2, 8, 3
    q, k, v = randn(batch, 20, 4, 32), randn(batch, page * pages, 2, 32), \
        randn(batch, page * pages, 2, 32)
    table = torch.tensor([[5, 0, 3], [1, 4, 2]], dtype=torch.int32)
    caches = []
    for x, fmt in ((k, "i4"), (v, "fp8_e4m3")):
        fresh = sat.quantize_kv(x, fmt, scale=fp8_scale(x) if fmt == "fp8_e4m3" else None)
        values = torch.zeros((batch * pages, page) + tuple(fresh.values.shape[2:]),
                             dtype=fresh.values.dtype)
        scales = fresh.scales if fmt == "fp8_e4m3" else torch.zeros(
            (batch * pages, page) + tuple(fresh.scales.shape[2:]), dtype=fresh.scales.dtype)
        sat.quantize_kv(x, out=(values, scales), block_table=table)
        caches.append((fresh, fmt, (values, scales)))
    seqused = torch.tensor([24, 13])
    out = sat.attention(q, caches[0][2], caches[1][2], block_table=table, seqused_k=seqused,
                        causal=True)
    k_real, v_real = (dequantized(fresh, fmt) for fresh, fmt, _ in caches)
    want, _ = reference.attention(q.numpy(), k_real, v_real, seqused_k=[24, 13], causal=True)
    assert reference.max_relative_error(out, want) <= 2e-6


def test_the_numpy_api_reads_torch_caches_through_dlpack():
    q, k = randn(1, 2, 4, 64), randn(1, 30, 2, 64)
    for fmt in sorted(STORAGE):
        cache = sat.quantize_kv(k, fmt, scale=fp8_scale(k) if fmt == "fp8_e4m3" else None)
        got = streamattn.attention(q, tuple(cache), k)  # torch tensors into the numpy API
        want = sat.attention(q, cache, k)
        np.testing.assert_array_equal(got, want.numpy())
        # And quantize_kv into torch tensors given as out.
        values, scales = torch.zeros_like(cache.values), cache.scales.clone()
        streamattn.quantize_kv(k, out=(values, scales))
        torch.testing.assert_close(as_bytes(values), as_bytes(cache.values), rtol=0, atol=0)


@pytest.mark.parametrize("fmt", ["i8", "i4"])
def test_int8_queries_reach_the_library(fmt):
    """int8_queries through the custom op: against the oracle on the unquantized k and v, within
    4x the quantized cache's own error (bitwise the exact result where the CPU has no integer
    dot products)."""
    q, k, v = randn(1, 1, 8, 128), randn(1, 1500, 8, 128), randn(1, 1500, 8, 128)
    kq, vq = (sat.quantize_kv(x, fmt) for x in (k, v))
    exact = sat.attention(q, kq, vq, causal=True).numpy()
    fast = sat.attention(q, kq, vq, causal=True, int8_queries=True).numpy()
    want, _ = reference.attention(q.numpy(), k.numpy(), v.numpy(), causal=True)
    assert reference.max_relative_error(fast, want) <= 4 * reference.max_relative_error(exact, want)
