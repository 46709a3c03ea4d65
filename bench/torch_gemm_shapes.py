"""The yardstick of Kiln's prefill GEMMs: cuBLAS (through PyTorch) on the
dense linear shapes of a config at M prompt tokens, bf16 in and out, timed
with CUDA events (median of 20 after warm-up) in the same run as Kiln.

  python3 bench/torch_gemm_shapes.py CONFIG.json [--tokens 4096]
prints one line per shape: "cublas NxK at M: T us, R TFLOP/s".
"""
import argparse
import json

import torch


def shapes(config):
    h = config["hidden_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    latent = config.get("moe_latent_size", h)
    return {"q_proj": (q, h), "k_proj": (kv, h), "o_proj": (h, q),
            "pooler": (latent, h), "unpooler": (h, latent)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--tokens", type=int, default=4096)
    args = parser.parse_args()
    config = json.load(open(args.config))
    m = args.tokens
    for name, (n, k) in shapes(config).items():
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.matmul(x, w.t())
        times = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(x, w.t())
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        us = sorted(times)[len(times) // 2]
        print(f"cublas {name} {n}x{k} at {m}: {us:.1f} us, {2 * m * n * k / us / 1e6:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
