"""Quantized KV caches from numpy: streamattn.quantize_kv against the header's rules written
independently in reference.py (every format, f16 and f32 scales, every source dtype, into a
cache at positions and through a block table, NaN and Inf refused with nothing written), and
attention over quantized caches against the float64 oracle on the values they stand for."""

import numpy as np
import pytest

import reference
import streamattn
from conftest import optional_import
from reference import max_relative_error as relative_error

ml_dtypes = optional_import("ml_dtypes")

# (format, group): i8 in groups of 32 and one scale a row, i4 in groups of 32 and 16, fp8 with
# a scale per kv head and one for the tensor.
CASES = {"i8 g32": ("i8", 32), "i8 row": ("i8", None), "i4 g32": ("i4", 32),
         "i4 g16": ("i4", 16), "fp8 head": ("fp8_e4m3", "head"),
         "fp8 tensor": ("fp8_e4m3", "tensor")}


def rows(rng, shape, dtype=np.float32):
    """Rows of several magnitudes: groups of zeros, of tiny values (an f16 scale underflows), of
    huge ones (an f16 scale saturates at 65504, so q saturates too; beyond an f16 source's
    range, so not there), ties of x / scale."""
    x = rng.standard_normal(shape).astype(np.float32)
    x *= np.exp(rng.uniform(-3, 3, shape[:3] + (1,))).astype(np.float32)
    x[0, 0, 0, :16] = 0.0
    if shape[1] > 1:
        x[0, 1, 0, :32] *= np.float32(1e-7)
        x[0, 1, -1, :32] *= np.float32(1e7 if dtype != np.float16 else 1e3)
    # x / scale exactly between integers, where half to even differs from half away: a scale
    # of 1 from the i8 groups of channel 0 (max 127) and the i4 ones of channel 32 (max 7).
    x[-1, -1, -1, :5] = [127.0, 2.5, -1.5, 0.5, 62.5]
    if shape[3] >= 64:
        x[-1, -1, -1, 32:48] = np.clip(x[-1, -1, -1, 32:48], -1, 1)
        x[-1, -1, -1, 32:36] = [7.0, 2.5, -1.5, 0.5]
    return x.astype(dtype)


def fp8_scale(x, how):
    """max |x| / 448 per kv head ([heads_kv]) or for the tensor ([1]), as vLLM sets them."""
    amax = np.abs(x.astype(np.float32)).max(axis=(0, 1, 3))
    return ((amax if how == "head" else amax.max(keepdims=True)) / 448).astype(np.float32)


def quantize(x, case, scales_dtype=np.float16):
    """(library's, reference's) quantization of x under CASES[case]."""
    fmt, how = CASES[case]
    if fmt == "fp8_e4m3":
        scale = fp8_scale(x, how)
        return (streamattn.quantize_kv(x, fmt, scale=scale),
                reference.quantize(x.astype(np.float32), fmt, scale=scale))
    group = x.shape[3] if how is None else how
    got = streamattn.quantize_kv(x, fmt, group=group, scales_dtype=scales_dtype)
    return got, reference.quantize(x.astype(np.float32), fmt, group, scales_dtype)


def assert_same_bytes(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("case,scales_dtype", [
    (case, dtype) for case in sorted(CASES) for dtype in (np.float16, np.float32)
    if CASES[case][0] != "fp8_e4m3" or dtype == np.float32])  # fp8's scales: float32, given
def test_quantize_follows_the_header_rules(rng, case, scales_dtype):
    x = rows(rng, (2, 5, 3, 64))
    got, want = quantize(x, case, scales_dtype)
    assert isinstance(got, streamattn.QuantizedKV)
    assert_same_bytes(got.values, want[0])
    assert_same_bytes(got.scales, want[1])
    expected = {"i8": np.int8, "i4": np.uint8, "fp8_e4m3": ml_dtypes.float8_e4m3fn}
    assert got.values.dtype == expected[CASES[case][0]]
    if CASES[case][0] == "i4":
        assert got.values.shape == (2, 5, 3, 32)  # two elements a byte


def test_fp8_takes_the_nearest_e4m3_ties_to_even_and_saturates():
    # Under a scale of 1: ties between E4M3 neighbours (1 | 1.125, 1.125 | 1.25, 0 | 2^-9,
    # 2^-9 | 2^-8 among the subnormals) and values past the largest finite one, 448.
    x = np.zeros((1, 1, 1, 16), np.float32)
    x[0, 0, 0, :8] = [1.0625, 1.1875, 2.0 ** -10, 3 * 2.0 ** -10, 464.0, -500.0, 1e30, -0.0]
    got = streamattn.quantize_kv(x, "fp8_e4m3", scale=1.0)
    want = reference.quantize(x, "fp8_e4m3", scale=1.0)
    assert_same_bytes(got.values, want[0])
    np.testing.assert_array_equal(got.values[0, 0, 0, :7].astype(np.float32),
                                  [1.0, 1.25, 0.0, 2.0 ** -8, 448.0, -448.0, 448.0])


@pytest.mark.parametrize("src_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", ["i8 g32", "i4 g32", "fp8 head"])
def test_half_precision_sources_and_strided_ones(rng, src_dtype, case):
    dtype = np.float16 if src_dtype == "float16" else ml_dtypes.bfloat16
    x = rows(rng, (2, 3, 4, 64), dtype)
    got, want = quantize(x, case)
    assert_same_bytes(got.values, want[0])
    strided = np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)[:, ::-1]
    again, want = quantize(strided, case)
    assert_same_bytes(again.values, want[0])
    assert_same_bytes(again.scales, want[1])


@pytest.mark.parametrize("case", ["i8 g32", "i4 g16", "fp8 head"])
def test_quantize_into_a_cache_at_positions(rng, case):
    fmt, _ = CASES[case]
    x = rows(rng, (2, 4, 2, 64))
    fresh, want = quantize(x, case)
    cache_len = 12
    values = np.full((2, cache_len) + fresh.values.shape[2:], 0x5A, np.uint8).view(
        fresh.values.dtype)
    scales = fresh.scales if fmt == "fp8_e4m3" else np.full(
        (2, cache_len) + fresh.scales.shape[2:], 3.0, fresh.scales.dtype)
    before = values.copy(), scales.copy()
    positions = [8, 3]
    back = streamattn.quantize_kv(x, out=(values, scales), positions=positions)
    assert back.values is values and back.scales is scales
    for b, p in enumerate(positions):
        written = np.zeros(cache_len, bool)
        written[p:p + 4] = True
        assert_same_bytes(values[b, written], want[0][b])
        assert_same_bytes(values[b, ~written], before[0][b, ~written])  # the rest untouched
        if fmt != "fp8_e4m3":
            assert_same_bytes(scales[b, written], want[1][b])
            assert_same_bytes(scales[b, ~written], before[1][b, ~written])


@pytest.mark.parametrize("case", ["i8 row", "i4 g32", "fp8 tensor"])
def test_quantize_through_a_block_table(rng, case):
    fmt, _ = CASES[case]
    batch, page, pages_per_seq, n = 2, 4, 3, 5
    x = rows(rng, (batch, n, 2, 32))
    fresh, want = quantize(x, case)
    table = rng.permutation(batch * pages_per_seq).reshape(batch, pages_per_seq).astype(np.int32)
    values = np.zeros((batch * pages_per_seq, page) + fresh.values.shape[2:], fresh.values.dtype)
    scales = fresh.scales if fmt == "fp8_e4m3" else np.zeros(
        (batch * pages_per_seq, page) + fresh.scales.shape[2:], fresh.scales.dtype)
    positions = np.array([2, 7], np.int32)
    streamattn.quantize_kv(x, fmt, out=(values, scales), positions=positions, block_table=table)
    for b in range(batch):
        for t in range(n):
            key = positions[b] + t
            page_index, row = table[b, key // page], key % page
            assert_same_bytes(values[page_index, row], want[0][b, t])
            if fmt != "fp8_e4m3":
                assert_same_bytes(scales[page_index, row], want[1][b, t])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("fmt", ["i8", "i4", "fp8_e4m3"])
def test_a_non_finite_element_is_refused_by_index_with_nothing_written(rng, bad, fmt):
    x = rng.standard_normal((2, 3, 2, 32)).astype(np.float32)
    x[1, 2, 0, 5] = bad
    fresh = streamattn.quantize_kv(np.zeros_like(x), fmt, scale=1.0 if fmt == "fp8_e4m3"
                                   else None)
    values, scales = fresh.values.copy(), fresh.scales.copy()
    with pytest.raises(streamattn.InvalidArgumentError,
                       match=r"src\[1, 2, 0, 5\]=-?(nan|inf) cannot be quantized"):
        streamattn.quantize_kv(x, out=(values, scales))
    assert_same_bytes(values, fresh.values)
    assert_same_bytes(scales, fresh.scales)


def test_argument_errors():
    x = np.ones((1, 2, 2, 64), np.float32)
    with pytest.raises(ValueError, match="group=24 must divide head_dim=64"):
        streamattn.quantize_kv(x, "i8", group=24)
    with pytest.raises(ValueError, match="format must be one of"):
        streamattn.quantize_kv(x, "q4_0")
    with pytest.raises(ValueError, match="fp8_e4m3 needs its scale"):
        streamattn.quantize_kv(x, "fp8_e4m3")
    with pytest.raises(ValueError, match="scale= is for fp8_e4m3"):
        streamattn.quantize_kv(x, "i8", scale=0.1)
    with pytest.raises(TypeError, match="scales_dtype"):
        streamattn.quantize_kv(x, "i8", scales_dtype="bfloat16")
    with pytest.raises(ValueError, match="give it as out="):
        streamattn.quantize_kv(x, "i8", positions=[0])
    cache = streamattn.quantize_kv(x, "i4")
    with pytest.raises(ValueError, match="format='i8' but out's values hold i4"):
        streamattn.quantize_kv(x, "i8", out=cache)
    with pytest.raises(ValueError, match="group=16 but scales"):
        streamattn.quantize_kv(x, group=16, out=cache)
    # The library's own checks, its message: a scale <= 0, a group that does not divide.
    with pytest.raises(streamattn.InvalidArgumentError, match=r"scales\[0\]=-1 must be finite"):
        streamattn.quantize_kv(x, "fp8_e4m3", scale=-1.0)
    wrong = np.zeros((1, 2, 2, 3), np.float16)
    with pytest.raises(streamattn.InvalidArgumentError, match=r"scales.shape\[3\]=3 must divide"):
        streamattn.quantize_kv(x, out=(cache.values, wrong))
    # A packed i4 array whose bytes are not adjacent along a row cannot hold one.
    bytes_apart = np.zeros((1, 2, 2, 64), np.uint8)[..., ::2]
    with pytest.raises(ValueError, match=r"values: packed i4 bytes .*\(byte stride 1, not 2\)"):
        streamattn.quantize_kv(x, out=(bytes_apart, cache.scales))
    with pytest.raises(TypeError, match=r"values: dtype int16 is not supported \(.*uint8"):
        streamattn.quantize_kv(x, out=(np.zeros((1, 2, 2, 64), np.int16), cache.scales))


# ------------------------------------------------------------------ attention over them


def quantized_cache(case, x):
    """(the library's cache of x under CASES[case], the float64 values it stands for)."""
    got, _ = quantize(x, case)
    return got, reference.dequantize(got.values, got.scales, CASES[case][0])


SHAPES = {  # decode with GQA, several query rows, a chunked prefill past the decode path's 16
    "decode gqa": dict(b=2, sq=1, sk=300, hq=8, hkv=2, d=128),
    "decode rows": dict(b=1, sq=4, sk=200, hq=4, hkv=4, d=64),
    "prefill": dict(b=1, sq=40, sk=96, hq=4, hkv=1, d=64),
}
OPTIONS = {"causal": dict(causal=True), "window": dict(causal=True, window=(37, 0)),
           "softcap": dict(softcap=3.0, scale=0.3), "plain": dict()}


@pytest.mark.parametrize("case", ["i8 g32", "i8 row", "i4 g32", "fp8 head", "fp8 tensor"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_attention_over_quantized_caches_matches_the_oracle(rng, case, shape, option):
    s = SHAPES[shape]
    q = rng.standard_normal((s["b"], s["sq"], s["hq"], s["d"])).astype(np.float32)
    k = rng.standard_normal((s["b"], s["sk"], s["hkv"], s["d"])).astype(np.float32)
    v = rng.standard_normal((s["b"], s["sk"], s["hkv"], s["d"])).astype(np.float32)
    (kq, k_real), (vq, v_real) = quantized_cache(case, k), quantized_cache(case, v)
    out, lse = streamattn.attention(q, kq, vq, return_lse=True, **OPTIONS[option])
    want, want_lse = reference.attention(q, k_real, v_real, **OPTIONS[option])
    assert out.dtype == np.float32 and out.shape == want.shape
    assert relative_error(out, want) <= 2e-6
    np.testing.assert_allclose(lse, want_lse, rtol=0, atol=2e-5)


def test_k_and_v_in_different_formats_and_a_plain_v(rng):
    q = rng.standard_normal((1, 2, 8, 64)).astype(np.float32)
    k = rng.standard_normal((1, 90, 2, 64)).astype(np.float32)
    v = rng.standard_normal((1, 90, 2, 64)).astype(np.float32)
    (kq, k_real), (vq, v_real) = quantized_cache("i8 g32", k), quantized_cache("i4 g32", v)
    want, _ = reference.attention(q, k_real, v_real, causal=True)
    assert relative_error(streamattn.attention(q, kq, vq, causal=True), want) <= 2e-6
    want, _ = reference.attention(q, k_real, v, causal=True)
    assert relative_error(streamattn.attention(q, kq, v, causal=True), want) <= 2e-6
    fq, f_real = quantized_cache("fp8 tensor", v)
    number = (fq.values, float(fq.scales[0]))  # one scale for the tensor, as a number
    want, _ = reference.attention(q, k_real, f_real, causal=True)
    assert relative_error(streamattn.attention(q, kq, number, causal=True), want) <= 2e-6


@pytest.mark.parametrize("case", ["i8 g32", "i4 g32", "fp8 head"])
@pytest.mark.parametrize("sq", [1, 24])  # decode, and chunked prefill against the pages
def test_paged_quantized_cache_with_seqused_k(rng, case, sq):
    fmt, _ = CASES[case]
    batch, page, pages_per_seq, hkv, d = 2, 16, 4, 2, 64
    cache_len = page * pages_per_seq
    q = rng.standard_normal((batch, sq, 4, d)).astype(np.float32)
    k = rng.standard_normal((batch, cache_len, hkv, d)).astype(np.float32)
    v = rng.standard_normal((batch, cache_len, hkv, d)).astype(np.float32)
    table = rng.permutation(batch * pages_per_seq).reshape(batch, pages_per_seq).astype(np.int32)
    caches, real = [], []
    for x in (k, v):
        fresh, x_real = quantized_cache(case, x)
        values = np.zeros((batch * pages_per_seq, page) + fresh.values.shape[2:],
                          fresh.values.dtype)
        scales = fresh.scales if fmt == "fp8_e4m3" else np.zeros(
            (batch * pages_per_seq, page) + fresh.scales.shape[2:], fresh.scales.dtype)
        caches.append(streamattn.quantize_kv(x, out=(values, scales), block_table=table))
        real.append(x_real)
    seqused = [61, 30]
    out = streamattn.attention(q, caches[0], caches[1], block_table=table, seqused_k=seqused,
                               causal=True)
    want, _ = reference.attention(q, real[0], real[1], seqused_k=seqused, causal=True)
    assert relative_error(out, want) <= 2e-6


def test_head_major_quantized_buffers_need_no_copies(rng):
    # [b, h, s, d] caches (values, and i4 bytes) viewed as [b, s, h, d], as q and k are.
    q = rng.standard_normal((1, 3, 4, 64)).astype(np.float32)
    k = rng.standard_normal((1, 50, 2, 64)).astype(np.float32)
    fresh, k_real = quantized_cache("i4 g32", k)
    values = np.ascontiguousarray(fresh.values.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    scales = np.ascontiguousarray(fresh.scales.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    out = streamattn.attention(q, (values, scales), k)
    want, _ = reference.attention(q, k_real, k)
    assert relative_error(out, want) <= 2e-6


def test_attention_errors_carry_the_library_message(rng):
    q = rng.standard_normal((1, 1, 2, 64)).astype(np.float32)
    k = rng.standard_normal((1, 8, 2, 64)).astype(np.float32)
    kq = streamattn.quantize_kv(k, "i8")
    out = np.full((1, 1, 2, 64), 7.0, np.float32)
    with pytest.raises(streamattn.InvalidArgumentError,
                       match=r"options->k_scales must not be NULL: k.dtype=i8 needs its scales"):
        streamattn.attention(q, kq.values, k, out=out)
    with pytest.raises(streamattn.InvalidArgumentError,
                       match=r"options->v_scales\[0\]=-0.5 must be finite and >= 0"):
        streamattn.attention(q, k, (np.zeros(k.shape, ml_dtypes.float8_e4m3fn), -0.5), out=out)
    with pytest.raises(streamattn.InvalidArgumentError, match=r"options->k_scales.dtype=bf16"):
        streamattn.attention(q, (kq.values, kq.scales.astype(ml_dtypes.bfloat16)), k, out=out)
    assert (out == 7.0).all()
    with pytest.raises(ValueError, match="k: a quantized cache is a .values, scales. pair"):
        streamattn.attention(q, (kq.values, kq.scales, None), k)
    with pytest.raises(TypeError, match="q: dtype int8"):
        streamattn.attention(kq.values, k, k)


def test_a_nan_group_scale_makes_the_rows_that_see_it_nan(rng):
    q = rng.standard_normal((1, 1, 2, 32)).astype(np.float32)
    k = rng.standard_normal((1, 10, 1, 32)).astype(np.float32)
    kq = streamattn.quantize_kv(k, "i8", scales_dtype=np.float32)
    kq.scales[0, 7, 0, 0] = np.nan
    assert np.isnan(streamattn.attention(q, kq, k)).all()
    # Keys a row does not see are never read into its result.
    kept = streamattn.attention(q, kq, k, seqused_k=[7])
    want, _ = reference.attention(q, reference.dequantize(kq.values, kq.scales, "i8")[:, :7],
                                  k[:, :7])
    assert relative_error(kept, want) <= 2e-6


def test_context_method_and_f32_scales(rng):
    k = rows(rng, (1, 4, 2, 64))
    with streamattn.Context(1) as ctx:
        got = ctx.quantize_kv(k, "i8", group=64, scales_dtype="f32")
    want = reference.quantize(k, "i8", 64, np.float32)
    assert_same_bytes(got.values, want[0])
    assert_same_bytes(got.scales, want[1])


def test_the_accuracy_script_ranks_the_formats_by_their_bits(rng):
    # bench/quantized_kv_error.py (docs/performance.md's table) on a small random case: error
    # against the unquantized oracle grows as the cache's bits shrink.
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[3] / "bench" / "quantized_kv_error.py"
    spec = importlib.util.spec_from_file_location("quantized_kv_error", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with streamattn.Context(1) as ctx:
        errors = script.measure(ctx, script.random_cases(rng, 3, 512, True, 4, 2, 64))
    mean = {name: e.row()[1] for name, e in errors.items()}
    assert mean["f16"] < mean["i8 g32"] <= mean["i8 per row"] < mean["fp8_e4m3 per head"] \
        < mean["i4 g32"]
    assert mean["i4 g32"] < 0.05  # still an approximation of attention, not noise


@pytest.mark.parametrize("case", ["i8 g32", "i4 g32", "fp8 head"])
def test_int8_queries_stay_within_their_rounding(rng, case):
    """int8_queries: decoding over an int4 k may round the queries to int8 (where the CPU sums
    them in integers). Against the float64 oracle on the unquantized k and v, the error stays
    within 4x the int4 cache's own (measured 1.0x); int8 and fp8 caches are not affected."""
    q = rng.uniform(-1, 1, (2, 1, 8, 128)).astype(np.float32)
    k = rng.uniform(-1, 1, (2, 1500, 8, 128)).astype(np.float32)
    v = rng.uniform(-1, 1, (2, 1500, 8, 128)).astype(np.float32)
    (kq, k_real), (vq, v_real) = quantized_cache(case, k), quantized_cache(case, v)
    exact = streamattn.attention(q, kq, vq, causal=True)
    fast = streamattn.attention(q, kq, vq, causal=True, int8_queries=True)
    want, _ = reference.attention(q, k_real, v_real, causal=True)
    assert relative_error(exact, want) <= 2e-6
    unquantized, _ = reference.attention(q, k, v, causal=True)
    assert relative_error(fast, unquantized) <= 4 * relative_error(exact, unquantized)
    if not case.startswith("i4"):
        np.testing.assert_array_equal(fast, exact)
