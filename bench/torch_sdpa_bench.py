#!/usr/bin/env python3
"""streamattn.torch against PyTorch's own CPU scaled_dot_product_attention, at the README's
shapes (one attention layer of Llama-3-8B: 32 query heads over 8 kv heads, head_dim 128), in
one process, timed alternately call for call (bench/cpu_sdpa_bench.py's median_pair_seconds),
and a table of medians and ratios.

    python bench/torch_sdpa_bench.py [--prompt 4096] [--cache 4096] [--threads 1,2]
                                     [--dtypes bfloat16] [--pairs 5] [--decode-pairs 50]

Both sides make the same call, scaled_dot_product_attention(q, k, v, is_causal=...,
enable_gqa=True) on [batch, heads, seq, dim] tensors: torch's, and streamattn.torch's
(a torch.library custom op reading the tensors in place, writing a tensor torch allocates), so
the op's own overhead is in the figures. Torch's CPU kernels may take GQA slowly, so a second
baseline is torch's SDPA on k and v whose heads were repeated before timing (what transformers
does on CPU), timed against streamattn on the unrepeated ones.

Prefill: the causal prompt (seq_q = seq_k = --prompt), GFLOP/s of the causal pairs. Decode: one
query row against a cache of --cache keys, each call on the next of enough cache copies to
exceed 256 MiB, so the K/V bytes come from memory, as a model's other layers would leave them;
GB/s counts the cache's K and V once (the repeated baseline reads four times as many).
torch.set_num_threads sets both sides' threads (streamattn.torch's default context follows
it). speedup = the baseline's median / streamattn's. On a shared machine, trust the ratios
(each pair of calls is timed back to back) rather than the milliseconds.
"""
import argparse
import itertools

import torch
from torch.nn.functional import scaled_dot_product_attention as torch_sdpa

import streamattn
import streamattn.torch
from cpu_sdpa_bench import median_pair_seconds

HEADS_Q, HEADS_KV, HEAD_DIM = 32, 8, 128  # Llama-3-8B, as `streamattn run` serves it


def tensors(shape, dtype, generator):
    return torch.rand(shape, generator=generator).mul_(2).sub_(1).to(dtype)


def repeated(kv):
    """k or v with each kv head repeated for its query heads, as transformers' SDPA path does
    where torch's kernels take no GQA (made before timing: the baseline's best case)."""
    return kv.repeat_interleave(HEADS_Q // HEADS_KV, dim=1)


def prefill_case(seq, dtype, g):
    q = tensors((1, HEADS_Q, seq, HEAD_DIM), dtype, g)
    k, v = (tensors((1, HEADS_KV, seq, HEAD_DIM), dtype, g) for _ in range(2))
    k_rep, v_rep = repeated(k), repeated(v)
    flops = 4.0 * seq * seq * HEAD_DIM * HEADS_Q / 2  # causal: the pairs computed

    def call(sdpa, repeat=False):
        if repeat:
            return lambda: sdpa(q, k_rep, v_rep, is_causal=True)
        return lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True)
    return call, flops / 1e9, "GFLOP/s"


def decode_case(cache, dtype, g):
    q = tensors((1, HEADS_Q, 1, HEAD_DIM), dtype, g)
    kv_bytes = 2 * cache * HEADS_KV * HEAD_DIM * q.element_size()
    copies = max(2, -(-(256 << 20) // kv_bytes))
    caches = [tuple(tensors((1, HEADS_KV, cache, HEAD_DIM), dtype, g) for _ in range(2))
              for _ in range(copies)]
    rotation = itertools.cycle(range(copies))  # shared: each call reads a copy out of cache
    repeated_caches = {}

    def call(sdpa, repeat=False):
        if repeat and not repeated_caches:
            repeated_caches.update((i, tuple(repeated(x) for x in kv))
                                   for i, kv in enumerate(caches))

        def step():
            i = next(rotation)
            if repeat:
                return sdpa(q, *repeated_caches[i])
            return sdpa(q, *caches[i], enable_gqa=True)
        return step
    return call, kv_bytes / 1e9, "GB/s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=4096)
    parser.add_argument("--cache", type=int, default=4096)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--decode-pairs", type=int, default=50)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(1)
    info = streamattn.info()
    print("torch %s, streamattn %s (%s); h%d/%d d%d, batch 1"
          % (torch.__version__, streamattn.version(), info["simd_target"], HEADS_Q, HEADS_KV,
             HEAD_DIM))
    rows = []
    baselines = (("torch SDPA, enable_gqa", False),
                 ("torch SDPA, k/v repeated beforehand", True))
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for name, (call, units, unit), pairs in (
                    ("prefill s%d causal" % args.prompt, prefill_case(args.prompt, dtype, g),
                     args.pairs),
                    ("decode c%d" % args.cache, decode_case(args.cache, dtype, g),
                     args.decode_pairs)):
                for baseline, repeat in baselines:
                    ours, theirs = median_pair_seconds(
                        call(streamattn.torch.scaled_dot_product_attention),
                        call(torch_sdpa, repeat), pairs)
                    rows.append((name, dtype_name, threads, baseline, ours, theirs, units, unit))
                    print("  %s %s threads=%d: %.2f ms, %s %.2f ms" % (
                        name, dtype_name, threads, ours * 1e3, baseline, theirs * 1e3),
                        flush=True)
    print()
    print("| case | dtype | threads | baseline | streamattn.torch ms | baseline ms | streamattn "
          "| baseline | speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, dtype_name, threads, baseline, ours, theirs, units, unit in rows:
        print("| %s | %s | %d | %s | %.2f | %.2f | %.1f %s | %.1f %s | %.2fx |" % (
            name, dtype_name, threads, baseline, ours * 1e3, theirs * 1e3, units / ours, unit,
            units / theirs, unit, theirs / ours))

if __name__ == "__main__":
    main()
