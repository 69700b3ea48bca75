#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of bench/gpu_bench.cc, in the same run,
and the table that puts both side by side (bench/gpu_check.sh).

    python3 bench/sdpa_bench.py STREAMATTN_CSV

reads streamattn_gpu_bench's CSV lines, times torch on the same shapes (f16; forward with
FlashAttention-2 forced via sdpa_kernel(SDPBackend.FLASH_ATTENTION) and with torch's default
choice, cuDNN on Hopper; decode with the default choice; a device copy for the bandwidth
ratio), and prints one table. Times are medians of CUDA-event-timed calls after a warm-up.
"""
import csv
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa


def median_seconds(fn, iterations=10):
    for _ in range(2):
        fn()
    times = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    return statistics.median(times)


def forward_tflops(d, seq, causal, backend):
    batch, heads = 4, 16
    q, k, v = (torch.rand(batch, heads, seq, d, device="cuda", dtype=torch.float16) * 2 - 1
               for _ in range(3))

    def run():
        if backend is None:
            sdpa(q, k, v, is_causal=bool(causal))
        else:
            with sdpa_kernel(backend):
                sdpa(q, k, v, is_causal=bool(causal))

    try:
        s = median_seconds(run, 5 if seq >= 16384 else 10)
    except RuntimeError as error:  # the backend refuses the shape
        print(f"torch {backend}: {error}".splitlines()[0], file=sys.stderr)
        return None
    return 4.0 * batch * heads * seq * seq * d / (2.0 if causal else 1.0) / s * 1e-12


def decode_gbps(d, seq_k):
    batch, heads_q, heads_kv = 4, 32, 8
    q = torch.rand(batch, heads_q, 1, d, device="cuda", dtype=torch.float16)
    k = torch.rand(batch, heads_kv, seq_k, d, device="cuda", dtype=torch.float16)
    v = torch.rand(batch, heads_kv, seq_k, d, device="cuda", dtype=torch.float16)
    try:
        s = median_seconds(lambda: sdpa(q, k, v, enable_gqa=True), 20)
    except (RuntimeError, TypeError) as error:
        print(f"torch decode: {error}".splitlines()[0], file=sys.stderr)
        return None
    return 2.0 * k.numel() * 2 / s * 1e-9


def copy_gbps():
    src = torch.empty(1 << 29, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    s = median_seconds(lambda: dst.copy_(src))
    return 2.0 * src.numel() * 2 / s * 1e-9


def fmt(x):
    return "n/a" if x is None else f"{x:.1f}"


def main():
    ours = {}
    with open(sys.argv[1]) as f:
        for row in csv.reader(f):
            if len(row) == 5:
                ours[tuple(row[:4])] = float(row[4])
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("\nforward, f16, batch 4, 16 heads, TFLOP/s")
    print(f"{'head_dim':>8} {'seq':>6} {'causal':>6} {'streamattn':>10} {'torch FA2':>10} "
          f"{'torch default':>13} {'vs FA2':>7}")
    for d in (64, 128):
        for seq in (1024, 4096, 16384):
            for causal in (0, 1):
                mine = ours.get(("forward", str(d), str(seq), str(causal)))
                fa2 = forward_tflops(d, seq, causal, SDPBackend.FLASH_ATTENTION)
                default = forward_tflops(d, seq, causal, None)
                ratio = f"{mine / fa2:.2f}" if mine and fa2 else "n/a"
                print(f"{d:>8} {seq:>6} {causal:>6} {fmt(mine):>10} {fmt(fa2):>10} "
                      f"{fmt(default):>13} {ratio:>7}")
    copy = copy_gbps()
    print(f"\ndecode, f16, batch 4, 32 query heads over 8, head_dim 128, one query, GB/s of K+V"
          f" (device copy: {copy:.0f} GB/s read+write)")
    print(f"{'seq_k':>6} {'streamattn':>10} {'paged':>7} {'torch':>7} {'of copy':>8}")
    for seq_k in (4096, 16384, 65536):
        dense = ours.get(("decode", "128", str(seq_k), "0"))
        paged = ours.get(("decode", "128", str(seq_k), "1"))
        theirs = decode_gbps(128, seq_k)
        share = f"{dense / copy:.0%}" if dense else "n/a"
        print(f"{seq_k:>6} {fmt(dense):>10} {fmt(paged):>7} {fmt(theirs):>7} {share:>8}")
    ours_copy = ours.get(("copy", "0", "0", "0"))
    print(f"\ncopy bandwidth: streamattn_gpu_bench {fmt(ours_copy)} GB/s, torch {copy:.1f} GB/s")


if __name__ == "__main__":
    main()
