#!/usr/bin/env python3
"""PyTorch yardstick for Kiln's prefill attention: scaled_dot_product_attention,
causal, GQA (the proxy's 96 query heads over 8 KV heads, head_dim 128), bf16, at
each given length, on the GPU. Prints, per length, the median time of 10 runs and
its rate counting the causal half of the products (2 * 2 * Hq * D * T (T + 1) / 2
FLOP), and the bf16 matmul rate (8192^3) of the same run.

  python3 bench/torch_sdpa.py 4096 32768
"""
import sys

import torch
import torch.nn.functional as F

HQ, HKV, D = 96, 8, 128


def median_ms(fn, reps=10):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main():
    lengths = [int(a) for a in sys.argv[1:]] or [4096, 32768]
    dev = "cuda"
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ a)
    print(f"torch bf16 matmul 8192^3: {2 * 8192**3 / ms / 1e9:.0f} TFLOP/s")
    for t in lengths:
        q = torch.randn(1, HQ, t, D, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, HKV, t, D, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, HKV, t, D, device=dev, dtype=torch.bfloat16)
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
        flop = 4 * HQ * D * t * (t + 1) / 2
        print(f"torch sdpa causal {HQ}/{HKV}x{D} at {t} tokens: {ms:.3f} ms, {flop / ms / 1e9:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
