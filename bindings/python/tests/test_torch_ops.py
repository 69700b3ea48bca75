"""streamattn.torch on torch tensors: every op in float32, float16 and bfloat16, on contiguous
and transposed tensors, against torch's own scaled_dot_product_attention and softmax in float64
(and the float64 oracle, reference.py, for the options torch has no counterpart of)."""

import math

import numpy as np
import pytest

import reference
import streamattn
from conftest import optional_import

torch = optional_import("torch")
import streamattn.torch as sat  # noqa: E402  (needs torch)
from streamattn import _torch_ops  # noqa: E402

F = torch.nn.functional
DTYPES = ["float32", "float16", "bfloat16"]
# Of the largest |value| of the float64 result: the output's own rounding, and for bfloat16 the
# native kernel's rounding of P (docs/performance.md).
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}


def randn(*shape, dtype="float32", transposed=False, seed=[0]):
    """A tensor of `shape`; transposed: a view of memory whose dims 1 and 2 are swapped (a
    [b, h, s, d] tensor over [b, s, h, d] memory, or the reverse), so its strides are not
    row-major."""
    seed[0] += 1
    g = torch.Generator().manual_seed(seed[0])
    if transposed:
        shape = (shape[0], shape[2], shape[1]) + tuple(shape[3:])
    x = torch.randn(*shape, generator=g).to(getattr(torch, dtype))
    return x.transpose(1, 2) if transposed else x


def assert_close(got, want, dtype):
    assert isinstance(got, torch.Tensor)
    tol = TOLERANCE[dtype] * max(1.0, want.abs().max().item())
    torch.testing.assert_close(got.double(), want, rtol=0, atol=tol)


def sdpa64(q, k, v, **kwargs):
    """torch's SDPA in float64 on [b, h, s, d] tensors: the reference of these tests."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kwargs)


def bottom_right_causal(seq_q, seq_k):
    """streamattn's causal mask as the boolean mask torch takes: query i sees j <= i + S - L."""
    i = torch.arange(seq_q)[:, None]
    return torch.arange(seq_k)[None, :] <= i + seq_k - seq_q


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_torch_sdpa(dtype, layout, transposed, causal):
    b, hq, hkv, sq, sk, d = 2, 8, 2, 40, 70, 64  # GQA, seq_q < seq_k
    bhsd = layout == "bhsd"
    shape = (lambda s, h: (b, h, s, d)) if bhsd else (lambda s, h: (b, s, h, d))
    q = randn(*shape(sq, hq), dtype=dtype, transposed=transposed)
    k = randn(*shape(sk, hkv), dtype=dtype, transposed=transposed)
    v = randn(*shape(sk, hkv), dtype=dtype, transposed=transposed)
    out, lse = sat.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    assert out.dtype == q.dtype and out.shape == q.shape and out.is_contiguous()
    as_bhsd = (lambda x: x) if bhsd else (lambda x: x.transpose(1, 2))
    mask = bottom_right_causal(sq, sk) if causal else None
    want = sdpa64(*(as_bhsd(x) for x in (q, k, v)), attn_mask=mask, enable_gqa=True)
    assert_close(as_bhsd(out), want, dtype)
    # lse: log sum exp of the scaled scores, in float64 from the same (rounded) inputs.
    qd, kd = as_bhsd(q).double(), as_bhsd(k).double().repeat_interleave(hq // hkv, dim=1)
    scores = qd @ kd.transpose(-1, -2) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), rtol=0, atol=2e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("seq_q,seq_k", [(17, 17), (9, 33), (33, 9), (1, 20)])
def test_sdpa_entry_has_torch_semantics(dtype, is_causal, seq_q, seq_k):
    # Top-left causal whatever the lengths, as torch's own.
    q = randn(2, 4, seq_q, 32, dtype=dtype)
    k = randn(2, 4, seq_k, 32, dtype=dtype, transposed=True)
    v = randn(2, 4, seq_k, 32, dtype=dtype, transposed=True)
    got = sat.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    assert got.is_contiguous() and got.dtype == q.dtype
    assert_close(got, sdpa64(q, k, v, is_causal=is_causal), dtype)


MASKS = {  # attn_mask shapes SDPA broadcasts to [batch=2, heads=4, L=9, S=33]
    "L,S": (9, 33), "b,1,L,S": (2, 1, 9, 33), "b,1,1,S": (2, 1, 1, 33), "1,h,L,S": (1, 4, 9, 33),
    "b,h,L,S": (2, 4, 9, 33),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("shape", sorted(MASKS))
def test_sdpa_entry_masks(dtype, kind, shape):
    q, k, v = randn(2, 4, 9, 32, dtype=dtype), randn(2, 4, 33, 32, dtype=dtype), \
        randn(2, 4, 33, 32, dtype=dtype)
    g = torch.Generator().manual_seed(7)
    keep = torch.rand(MASKS[shape], generator=g) > 0.3
    keep[..., 0] = True  # every row sees a key (rows that see none are tested apart)
    if kind == "bool":
        mask = keep
    else:
        mask = torch.randn(MASKS[shape], generator=g).masked_fill(~keep, -math.inf)
        mask = mask.to(q.dtype)  # SDPA takes a float mask of the query's dtype
    got = sat.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert_close(got, sdpa64(q, k, v, attn_mask=mask if kind == "bool" else mask.double()), dtype)


def test_sdpa_entry_gqa_scale_three_dims_and_broadcast_batch():
    q, k, v = randn(2, 8, 12, 64), randn(2, 2, 30, 64), randn(2, 2, 30, 48)
    got = sat.scaled_dot_product_attention(q, k, v, scale=0.3, enable_gqa=True, is_causal=True)
    assert got.shape == (2, 8, 12, 48)
    assert_close(got, sdpa64(q, k, v, scale=0.3, enable_gqa=True, is_causal=True), "float32")
    q3, k3, v3 = randn(3, 10, 16), randn(3, 14, 16), randn(3, 14, 16)
    mask = torch.rand(10, 14) > 0.2
    mask[:, 0] = True
    got = sat.scaled_dot_product_attention(q3, k3, v3, attn_mask=mask)
    assert got.shape == (3, 10, 16)
    assert_close(got, sdpa64(q3, k3, v3, attn_mask=mask), "float32")
    # Queries of batch 1 against keys of batch 3: SDPA broadcasts, through strides here.
    q1 = randn(1, 2, 5, 16)
    kb, vb = randn(3, 2, 14, 16), randn(3, 2, 14, 16)
    got = sat.scaled_dot_product_attention(q1, kb, vb)
    assert got.shape == (3, 2, 5, 16)
    assert_close(got, sdpa64(q1.expand(3, -1, -1, -1), kb, vb), "float32")


def test_sdpa_entry_refuses_what_torch_refuses():
    q = randn(1, 4, 8, 16)
    k = randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="enable_gqa"):
        sat.scaled_dot_product_attention(q, k, k)
    with pytest.raises(ValueError, match="attn_mask and is_causal"):
        sat.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(8, 8, dtype=torch.bool),
                                         is_causal=True)
    with pytest.raises(ValueError, match="dropout"):
        sat.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="scale=0"):
        sat.scaled_dot_product_attention(q, q, q, scale=0.0)


def test_rows_that_see_no_key_get_zeros():
    q, k, v = randn(1, 2, 4, 16), randn(1, 2, 6, 16), randn(1, 2, 6, 16)
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1] = False
    got = sat.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert (got[:, :, 1] == 0).all()
    assert_close(got, sdpa64(q, k, v, attn_mask=mask), "float32")  # torch's zeros too


OPTIONS = {
    "window": dict(window=(5, 2)),
    "softcap": dict(softcap=1.5, scale=0.4),
    "alibi": dict(alibi_slopes=[0.5, 0.25, 0.125, 0.0625]),
    "sinks": dict(sinks=torch.tensor([0.0, 2.0, -1.0, 5.0])),
    "seqused_k": dict(seqused_k=torch.tensor([33, 0])),  # int64: converted, as it is tiny
    "mask": dict(mask=torch.randn(2, 1, 9, 33)),
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_options_match_the_oracle(name, dtype):
    q, k, v = randn(2, 9, 4, 32, dtype=dtype), randn(2, 33, 2, 32, dtype=dtype), \
        randn(2, 33, 2, 32, dtype=dtype)
    opts = OPTIONS[name]
    out, lse = sat.attention(q, k, v, causal=True, return_lse=True, **opts)
    oracle = {key: reference.to_f64(x) if isinstance(x, torch.Tensor) else x
              for key, x in opts.items()}
    want, want_lse = reference.attention(*(reference.to_f64(x) for x in (q, k, v)), causal=True,
                                         **oracle)
    assert_close(out, torch.from_numpy(want), dtype)
    finite = np.isfinite(want_lse)
    np.testing.assert_array_equal(np.isfinite(lse.numpy()), finite)
    np.testing.assert_allclose(lse.numpy()[finite], want_lse[finite], atol=2e-5)


def test_paged_cache_with_a_block_table():
    b, pages, page, hkv, d = 2, 4, 8, 2, 32
    q, k, v = randn(b, 3, 4, d), randn(b, pages * page, hkv, d), randn(b, pages * page, hkv, d)
    table = torch.randperm(b * pages, generator=torch.Generator().manual_seed(3)).view(b, pages)
    k_pages, v_pages = (torch.from_numpy(x) for x in reference.paged(k, v, table, page))
    seqused = [29, 17]
    out = sat.attention(q, k_pages, v_pages, block_table=table, seqused_k=seqused, causal=True)
    want, _ = reference.attention(q.numpy(), k.numpy(), v.numpy(), seqused_k=seqused, causal=True)
    assert_close(out, torch.from_numpy(want), "float32")


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_outputs_given_are_written_in_place(layout):
    q, k, v = randn(2, 9, 4, 32), randn(2, 33, 2, 32), randn(2, 33, 2, 32)
    want, want_lse = sat.attention(q, k, v, causal=True, return_lse=True)
    if layout == "bhsd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        want = want.transpose(1, 2)
    # Strided in the layout of the call: the memory of the other layout.
    out = torch.empty(2, 9, 4, 32) if layout == "bhsd" else torch.empty(2, 4, 9, 32)
    out = out.transpose(1, 2)
    lse = torch.empty(2, 4, 9)
    result, lse_back = sat.attention(q, k, v, causal=True, layout=layout, out=out, lse=lse)
    assert result is out and lse_back is lse
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(lse, want_lse, rtol=0, atol=0)
    # In place over q (the library allows exactly that overlap).
    q2 = q.clone()
    assert sat.attention(q2, k, v, causal=True, layout=layout, out=q2) is q2
    torch.testing.assert_close(q2, want, rtol=0, atol=0)


def test_tensors_are_read_in_place():
    t = torch.randn(2, 4, 8, 16).transpose(1, 2)  # [b, h, s, d] memory as [b, s, h, d]
    v = _torch_ops.tensor_view("q", t)
    assert v.tensor.data == t.data_ptr()
    assert [v.tensor.shape[i] for i in range(4)] == list(t.shape)
    assert [v.tensor.strides[i] for i in range(4)] == list(t.stride())
    offset = torch.randn(10, 6)[2:, 1:]
    assert _torch_ops.tensor_view("x", offset).tensor.data == offset.data_ptr()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_merge_states_of_two_halves_is_attention_over_all(dtype, layout):
    q = randn(1, 4, 12, 32, dtype=dtype, transposed=layout == "bshd")  # [b, h, s, d] values
    k, v = randn(1, 4, 50, 32, dtype=dtype), randn(1, 4, 50, 32, dtype=dtype)
    halves = (slice(0, 20), slice(20, None))
    parts = [sat.attention(q, k[:, :, s], v[:, :, s], layout="bhsd", return_lse=True,
                           dtype=torch.float32) for s in halves]
    o_parts = [o if layout == "bhsd" else o.transpose(1, 2) for o, _ in parts]
    merged, lse = sat.merge_states(o_parts, [x for _, x in parts], layout=layout,
                                   return_lse=True)
    assert merged.dtype == torch.float32
    got = merged if layout == "bhsd" else merged.transpose(1, 2)
    assert_close(got.to(q.dtype), sdpa64(q, k, v), dtype)
    _, want_lse = sat.attention(q, k, v, layout="bhsd", return_lse=True)
    torch.testing.assert_close(lse, want_lse, rtol=0, atol=1e-5)
    # In place into part 0.
    sat.merge_states(o_parts, [x for _, x in parts], layout=layout, out=o_parts[0])
    torch.testing.assert_close(o_parts[0], merged, rtol=0, atol=0)


def softmax_inputs(dtype, transposed):
    if transposed:  # rows whose elements are 7 apart: column-major memory
        return randn(300, 7, dtype=dtype).t()
    return randn(7, 300, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_softmax_family(dtype, transposed, fn):
    x = softmax_inputs(dtype, transposed)
    want = getattr(torch, fn)(x.double() / 0.7, -1)
    got = getattr(sat, fn)(x, temperature=0.7)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert_close(got, want, dtype)
    got32 = getattr(sat, fn)(x, temperature=0.7, dtype=torch.float32)
    assert_close(got32, want, "float32")
    out = torch.empty_like(x)  # x's strides (a different path of the kernel when strided)
    assert getattr(sat, fn)(x, temperature=0.7, out=out) is out
    assert_close(out, want, dtype)


def test_softmax_over_any_dim_and_rank_without_copies():
    base = randn(5, 3, 40)
    x = base.transpose(0, 1)  # [3, 5, 40] whose leading dims cannot fold into one
    torch.testing.assert_close(sat.softmax(x).double(), torch.softmax(x.double(), -1),
                               rtol=0, atol=1e-6)
    torch.testing.assert_close(sat.softmax(base, dim=1).double(),
                               torch.softmax(base.double(), 1), rtol=0, atol=1e-6)
    y = randn(4, 2, 6, 30)
    torch.testing.assert_close(sat.log_softmax(y, dim=2).double(),
                               torch.log_softmax(y.double(), 2), rtol=0, atol=1e-5)
    inplace = y.clone()
    sat.softmax(inplace, out=inplace)
    torch.testing.assert_close(inplace.double(), torch.softmax(y.double(), -1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transposed", [False, True])
def test_softmax_topk(dtype, transposed):
    x = softmax_inputs(dtype, transposed)
    indices, probs, lse = sat.softmax_topk(x, 5, temperature=0.8, return_lse=True)
    assert indices.dtype == torch.int32 and probs.dtype == torch.float32
    assert indices.shape == probs.shape == (7, 5) and lse.shape == (7,)
    p = torch.softmax(x.double() / 0.8, -1)
    top = p.topk(5, -1)
    torch.testing.assert_close(probs.double(), top.values, rtol=1e-5, atol=1e-7)
    # Equal scores (frequent in bfloat16) may take either index: compare what they point at.
    torch.testing.assert_close(p.gather(1, indices.long()), top.values, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(lse.double(), torch.logsumexp(x.double() / 0.8, -1), rtol=0,
                               atol=1e-5)
    one_i, one_p = sat.softmax_topk(x[0], 3)
    assert one_i.shape == (3,)
    torch.testing.assert_close(one_i, sat.softmax_topk(x[:1], 3)[0][0], rtol=0, atol=0)
    three = x.reshape(7, 1, 300) if not transposed else x.unsqueeze(1)
    assert sat.softmax_topk(three, 3)[0].shape == (7, 1, 3)
    given = (torch.empty(7, 5, dtype=torch.int32), torch.empty(5, 7).t(), torch.empty(7))
    back = sat.softmax_topk(x, 5, temperature=0.8, indices=given[0], probs=given[1], lse=given[2])
    assert all(a is b for a, b in zip(back, given))
    for a, b in zip(given, (indices, probs, lse)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_errors_carry_the_library_message():
    q = torch.randn(1, 4, 2, 128)
    k = torch.randn(1, 8, 2, 96)
    with pytest.raises(streamattn.InvalidArgumentError,
                       match=r"k.shape\[3\]=96 must equal q.shape\[3\]=128"):
        sat.attention(q, k, k)
    with pytest.raises(streamattn.Error, match="k=0"):
        sat.softmax_topk(torch.randn(10), 0)
    with pytest.raises(TypeError, match="float64"):
        sat.attention(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="layout"):
        sat.attention(q, q, q, layout="sbhd")


class CudaStandIn:
    """What the ops read of a CUDA tensor (this host has no GPU): a device, a pointer, strides."""

    def __init__(self, t):
        self.t, self.dtype, self.shape = t, t.dtype, t.shape
        self.device = torch.device("cuda", 0)

    def dim(self):
        return self.t.dim()

    def data_ptr(self):
        return 1 << 20

    def stride(self):
        return self.t.stride()

    def detach(self):
        return self


def test_cuda_tensors_without_the_cuda_backend_are_a_clear_error():
    if streamattn.info()["backend"] == "cuda":
        pytest.skip("this host runs the CUDA backend")  # never reached without a GPU
    q, out = CudaStandIn(torch.randn(1, 4, 2, 32)), CudaStandIn(torch.empty(1, 4, 2, 32))
    assert _torch_ops.tensor_view("q", q).tensor.device == streamattn._native.DEVICE_CUDA
    with pytest.raises(streamattn.InvalidArgumentError,
                       match="q.device=cuda but this context runs on the cpu backend"):
        _torch_ops._attention_into(q, q, q, out, None, None, False, -1, -1, None, None, None,
                                   None, None, None, False, 0)
    with pytest.raises(TypeError, match="neither the CPU nor CUDA"):
        _torch_ops.tensor_view("q", torch.empty(2, device="meta"))


def test_contexts_and_threads():
    q, k, v = randn(1, 200, 8, 64), randn(1, 300, 2, 64), randn(1, 300, 2, 64)
    with streamattn.Context(1) as one:
        a = sat.attention(q, k, v, causal=True, context=one)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        b = sat.attention(q, k, v, causal=True)  # a default context of torch's 2 threads
        assert _torch_ops._context(0).info()["num_threads"] == 2
    finally:
        torch.set_num_threads(previous)
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same bytes for any thread count
