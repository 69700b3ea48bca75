"""streamattn.attention on packed variable-length batches (cu_seqlens_q, cu_seqlens_k) against
the float64 numpy oracle, run on each sequence's own slice."""

import numpy as np
import pytest

import reference
import streamattn
from conftest import optional_import


def packed_problem(rng, q_lens, k_lens, hq=4, hkv=2, d=32):
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(k_lens)]).astype(np.int32)
    q = rng.standard_normal((1, cu_q[-1], hq, d)).astype(np.float32)
    k = rng.standard_normal((1, cu_k[-1], hkv, d)).astype(np.float32)
    v = rng.standard_normal((1, cu_k[-1], hkv, d)).astype(np.float32)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("options", [dict(causal=True), dict(window=(4, 0)),
                                     dict(causal=True, sinks=[0.5, -1.0, 2.0, 0.0])])
def test_each_sequence_matches_its_own_oracle(rng, options):
    q_lens, k_lens = [7, 0, 1, 20], [9, 3, 0, 20]
    q, k, v, cu_q, cu_k = packed_problem(rng, q_lens, k_lens)
    out, lse = streamattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                    return_lse=True, **options)
    assert out.shape == q.shape and lse.shape == (1, 4, cu_q[-1])
    for b in range(len(q_lens)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if q_lens[b] == 0:
            continue
        if k_lens[b] == 0:  # no keys: out = 0, lse = -inf (or the sink's logit)
            assert np.all(out[:, qs] == 0)
            if "sinks" not in options:
                assert np.all(lse[:, :, qs] == -np.inf)
            continue
        want, want_lse = reference.attention(q[:, qs], k[:, ks], v[:, ks], **options)
        np.testing.assert_allclose(out[:, qs], want, atol=1e-5 * max(1, np.abs(want).max()))
        np.testing.assert_allclose(lse[:, :, qs], want_lse, atol=2e-5)


def test_packed_queries_over_a_paged_cache(rng):
    q_lens, k_lens = [3, 5], [10, 4]
    q, _, _, cu_q, _ = packed_problem(rng, q_lens, k_lens)
    page = 4
    k = rng.standard_normal((6, page, 2, 32)).astype(np.float32)
    v = rng.standard_normal((6, page, 2, 32)).astype(np.float32)
    table = np.array([[5, 0, 2], [1, 3, 4]], np.int32)
    out = streamattn.attention(q, k, v, cu_seqlens_q=cu_q, block_table=table,
                               seqused_k=np.array(k_lens, np.int32), causal=True)
    for b in range(2):
        # Sequence b's keys gathered from its pages.
        kb = k[table[b]].reshape(1, -1, 2, 32)[:, :k_lens[b]]
        vb = v[table[b]].reshape(1, -1, 2, 32)[:, :k_lens[b]]
        qs = slice(cu_q[b], cu_q[b + 1])
        want = reference.attention(q[:, qs], kb, vb, causal=True)[0]
        np.testing.assert_allclose(out[:, qs], want, atol=1e-5 * max(1, np.abs(want).max()))


def test_a_mask_is_refused_with_packed_queries(rng):
    q, k, v, cu_q, cu_k = packed_problem(rng, [2, 3], [2, 3])
    mask = np.zeros((1, 1, 5, 5), np.float32)
    with pytest.raises(streamattn.InvalidArgumentError, match="cu_seqlens_q"):
        streamattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, mask=mask)


def test_torch_attention_takes_the_packed_keywords(rng):
    torch = optional_import("torch")
    import streamattn.torch as sat
    q, k, v, cu_q, cu_k = packed_problem(rng, [4, 0, 6], [5, 2, 6])
    want, want_lse = streamattn.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                          causal=True, return_lse=True)
    qt, kt, vt = (torch.from_numpy(x) for x in (q, k, v))
    out, lse = sat.attention(qt, kt, vt, cu_seqlens_q=torch.from_numpy(cu_q),
                             cu_seqlens_k=cu_k.tolist(), causal=True, return_lse=True)
    assert np.array_equal(out.numpy(), want) and np.array_equal(lse.numpy(), want_lse)
    into = torch.empty_like(qt)
    sat.attention(qt, kt, vt, cu_seqlens_q=cu_q.tolist(), cu_seqlens_k=cu_k.tolist(),
                  causal=True, out=into)
    assert np.array_equal(into.numpy(), want)
