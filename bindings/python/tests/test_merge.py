"""merge_states: partial results over disjoint keys merge into attention over all of them."""

import numpy as np

import reference
import streamattn


def test_split_kv_parts_merge_to_the_whole(rng):
    q = rng.standard_normal((1, 3, 4, 32)).astype(np.float32)
    k = rng.standard_normal((1, 100, 2, 32)).astype(np.float32)
    v = rng.standard_normal((1, 100, 2, 32)).astype(np.float32)
    cuts = [0, 17, 60, 100]
    parts = [streamattn.attention(q, k[:, a:b], v[:, a:b], return_lse=True)
             for a, b in zip(cuts, cuts[1:])]
    out, lse = streamattn.merge_states([o for o, _ in parts], [l for _, l in parts],
                                       return_lse=True)
    want, want_lse = reference.attention(q, k, v)
    np.testing.assert_allclose(out, want, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, atol=2e-5)


def test_in_place_and_empty_parts(rng):
    o = [rng.standard_normal((1, 2, 3, 8)).astype(np.float32) for _ in range(2)]
    lse = [rng.standard_normal((1, 3, 2)).astype(np.float32) for _ in range(2)]
    empty_o = np.full((1, 2, 3, 8), np.nan, np.float32)  # never read: its lse is -inf
    empty_lse = np.full((1, 3, 2), -np.inf, np.float32)
    want_w = np.exp(lse[0] - np.logaddexp(lse[0], lse[1])).transpose(0, 2, 1)[..., None]
    want = want_w * o[0] + (1 - want_w) * o[1]
    out = streamattn.merge_states([o[0], empty_o, o[1]], [lse[0], empty_lse, lse[1]], out=o[0])
    assert out is o[0]
    np.testing.assert_allclose(o[0], want, atol=1e-6)
