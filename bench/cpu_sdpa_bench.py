#!/usr/bin/env python3
"""PyTorch's CPU scaled_dot_product_attention beside streamattn, on the same tensors, in one
process, timed alternately call for call (so a drifting machine affects both alike).

    python bench/cpu_sdpa_bench.py [--seq 4096] [--heads 8] [--head-dim 128] [--threads 1,2]
                                   [--dtypes bfloat16,float16,float32] [--pairs 5]

Prefill shapes (seq_q = seq_k), causal and not. Tensors are stored [batch, heads, seq, dim],
as torch's SDPA takes them; streamattn reads the same memory as [batch, seq, heads, dim] views
through DLPack (no copy) and writes into a preallocated torch tensor. Prints, per row, both
GFLOP/s (4 seq^2 dim heads, halved under causal), the kernel streamattn ran, and
speedup_vs_torch = torch's median time / streamattn's. Uses the Python environment of the test
suite (scripts/python-env.sh), where torch is installed.
"""
import argparse
import statistics
import time

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

import streamattn


def median_pair_seconds(a, b, pairs):
    a(), b()  # warm-up: thread pools, first-touch of outputs
    times_a, times_b = [], []
    for i in range(pairs):
        for fn, times in ((a, times_a), (b, times_b)) if i % 2 == 0 else ((b, times_b),
                                                                           (a, times_a)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(times_a), statistics.median(times_b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(1)
    shape = (1, args.heads, args.seq, args.head_dim)
    print("torch %s, streamattn %s (%s)" % (torch.__version__, streamattn.version(),
                                           streamattn.Context().info()["simd_target"]))
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        ctx = streamattn.Context(num_threads=threads)
        kernels = ctx.info()["cpu_kernels"]
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            q, k, v = (torch.rand(shape, generator=g).mul(2).sub(1).to(dtype) for _ in range(3))
            out = torch.empty(shape, dtype=dtype)
            for causal in (False, True):
                def ours():
                    ctx.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                  causal=causal, out=out.transpose(1, 2))

                def theirs():
                    sdpa(q, k, v, is_causal=causal)

                t_ours, t_theirs = median_pair_seconds(ours, theirs, args.pairs)
                flops = 4.0 * args.seq * args.seq * args.head_dim * args.heads
                flops *= 0.5 if causal else 1.0
                print("h%d/%d d%d s%d %s%s threads=%d: streamattn %.1f GFLOP/s (%s), torch %.1f "
                      "GFLOP/s, speedup_vs_torch %.2f" % (
                          args.heads, args.heads, args.head_dim, args.seq, dtype_name,
                          " causal" if causal else "", threads, flops / t_ours * 1e-9,
                          kernels[dtype_name], flops / t_theirs * 1e-9, t_theirs / t_ours))


if __name__ == "__main__":
    main()
