#!/usr/bin/env python3
"""PyTorch eager yardstick for kiln-bench-decode: the same Muse Spark layers
(config.json), written the way one writes them in eager PyTorch, with random
weights in the same formats (NVFP4 experts in layers 1..L-2, dequantised per
step for the experts the router picks; bf16 elsewhere; a bf16 KV cache).

Prints, from one run on the GPU:
  - device-to-device copy bandwidth (bytes read + written),
  - bf16 tensor-core throughput (an 8192^3 matmul),
  - eager decode time per token at batch 1 with a KV length of --context,
  - eager decode time of a step of --batch conversations, one token each, each
    with its own KV cache of --context (1 skips it),
  - eager prefill time of --prefill tokens (0 skips it).

  python3 bench/torch_eager_proxy.py CONFIG.json [--context 4096] [--batch 8] [--prefill 4096]
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(torch.bfloat16)


class Nvfp4Stack:
    """[E, out, in] experts: E2M1 codes (two a byte), E4M3 scales per 16, an f32 scale per expert."""

    def __init__(self, experts, out, inp, dev):
        self.packed = torch.randint(0, 256, (experts, out, inp // 2), dtype=torch.uint8, device=dev)
        scale = torch.full((experts, out, inp // 16), 1.0 / math.sqrt(inp) / 3.0, device=dev)
        self.scales = scale.to(torch.float8_e4m3fn)
        self.glob = torch.ones(experts, device=dev)
        self.lut = torch.tensor(E2M1, device=dev, dtype=torch.bfloat16)

    def weight(self, e):
        p = self.packed[e]
        codes = torch.stack([p & 15, p >> 4], dim=-1).reshape(p.shape[0], -1).long()
        w = self.lut[codes] * self.scales[e].to(torch.bfloat16).repeat_interleave(16, dim=-1)
        return w * self.glob[e].to(torch.bfloat16)


class Bf16Stack:
    def __init__(self, experts, out, inp, dev):
        self.w = torch.randn(experts, out, inp, device=dev, dtype=torch.bfloat16) / math.sqrt(inp)

    def weight(self, e):
        return self.w[e]


def rope(x, pos, theta):
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d // 2, device=x.device, dtype=torch.float32) * 2 / d)
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    xf = x.float()
    a, b = xf[..., : d // 2], xf[..., d // 2:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(torch.bfloat16)


class Layer:
    def __init__(self, cfg, index, dev):
        H, nh, nkv, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        E, I, Lt = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["moe_latent_size"]
        L = cfg["num_hidden_layers"]
        r = lambda *s: torch.randn(*s, device=dev, dtype=torch.bfloat16) / math.sqrt(s[-1])
        ones = lambda n: torch.ones(n, device=dev, dtype=torch.bfloat16)
        self.cfg = cfg
        self.qkv = r((nh + 2 * nkv) * hd, H)
        self.o = r(H, nh * hd)
        self.norms = [ones(H) for _ in range(4)]
        self.qn, self.kn = ones(hd), ones(hd)
        self.gates = [ones(H) * 0.45, ones(H) * 0.45]
        self.router = r(E, H)
        self.pool, self.unpool = r(Lt, H), r(H, Lt)
        self.ein = ones(Lt)
        self.post = torch.ones(E, Lt, device=dev, dtype=torch.bfloat16)
        stack = Nvfp4Stack if 0 < index < L - 1 else Bf16Stack
        self.gate, self.up, self.down = stack(E, I, Lt, dev), stack(E, I, Lt, dev), stack(E, Lt, I, dev)
        period = cfg.get("global_attention_period", 4)
        self.window = 0 if (L - 1 - index) % period == 0 else cfg["sliding_window"]

    def attention(self, x, pos, kv):
        c = self.cfg
        nh, nkv, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
        T = x.shape[0]
        qkv = F.linear(x, self.qkv)
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = rope(rms_norm(q.view(T, nh, hd), self.qn, eps), pos, c["rope_theta"])
        k = rope(rms_norm(k.view(T, nkv, hd), self.kn, eps), pos, c["rope_theta"])
        v = v.view(T, nkv, hd)
        kc, vc = kv
        past = kc.shape[0]
        keys = torch.cat([kc, k]) if past else k
        vals = torch.cat([vc, v]) if past else v
        S = keys.shape[0]
        qpos = torch.arange(past, past + T, device=x.device)[:, None]
        kpos = torch.arange(S, device=x.device)[None, :]
        mask = kpos <= qpos
        if self.window:
            mask &= kpos > qpos - self.window
        g = nh // nkv
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), keys.repeat_interleave(g, 1).transpose(0, 1),
            vals.repeat_interleave(g, 1).transpose(0, 1), attn_mask=mask, scale=1 / math.sqrt(hd))
        return F.linear(out.transpose(0, 1).reshape(T, nh * hd), self.o)

    def attention_batch(self, x, pos, kv):
        """Token b continues conversation b: its own cache [B, S, nkv, hd]."""
        c = self.cfg
        nh, nkv, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
        B = x.shape[0]
        qkv = F.linear(x, self.qkv)
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = rope(rms_norm(q.view(B, nh, hd), self.qn, eps), pos, c["rope_theta"])
        k = rope(rms_norm(k.view(B, nkv, hd), self.kn, eps), pos, c["rope_theta"])
        kc, vc = kv
        keys = torch.cat([kc, k[:, None]], dim=1)
        vals = torch.cat([vc, v.view(B, 1, nkv, hd)], dim=1)
        if self.window:
            keys, vals = keys[:, -self.window:], vals[:, -self.window:]
        g = nh // nkv
        out = F.scaled_dot_product_attention(
            q[:, :, None], keys.repeat_interleave(g, 2).transpose(1, 2),
            vals.repeat_interleave(g, 2).transpose(1, 2), scale=1 / math.sqrt(hd))
        return F.linear(out.reshape(B, nh * hd), self.o)

    def moe(self, u):
        c = self.cfg
        K, eps = c["num_experts_per_tok"], c["rms_norm_eps"]
        p = torch.softmax(F.linear(u, self.router).float(), dim=-1)
        w, idx = torch.topk(p, K, dim=-1)
        w = w / w.sum(-1, keepdim=True)
        z = rms_norm(F.linear(u, self.pool), self.ein, eps)
        s = torch.zeros(z.shape, device=z.device, dtype=torch.float32)
        for e in torch.unique(idx).tolist():
            rows, slot = (idx == e).nonzero(as_tuple=True)
            zr = z[rows]
            h = F.silu(F.linear(zr, self.gate.weight(e))) * F.linear(zr, self.up.weight(e))
            y = rms_norm(F.linear(h, self.down.weight(e)), self.post[e], eps)
            s.index_add_(0, rows, y.float() * w[rows, slot][:, None])
        return F.linear(s.to(torch.bfloat16), self.unpool)

    def forward(self, x, pos, kv, batched=False):
        eps = self.cfg["rms_norm_eps"]
        attend = self.attention_batch if batched else self.attention
        a = attend(rms_norm(x, self.norms[0], eps), pos, kv)
        h = x + self.gates[0] * rms_norm(a, self.norms[1], eps)
        m = self.moe(rms_norm(h, self.norms[2], eps))
        return h + self.gates[1] * rms_norm(m, self.norms[3], eps)


def timed(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--prefill", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    cfg = json.load(open(args.config))
    dev = torch.device("cuda")
    torch.manual_seed(0)

    a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    copy_ms = min(timed(lambda: b.copy_(a), 5) for _ in range(3))
    print(f"torch copy bandwidth: {2 * a.numel() / copy_ms / 1e6:.0f} GB/s (bytes read + written)")
    del a, b
    m = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    timed(lambda: m @ m, 3)  # warm-up: cuBLAS picks its kernel
    mm_ms = timed(lambda: m @ m, 20)
    tflops = 2 * 8192 ** 3 / mm_ms / 1e9
    print(f"torch bf16 matmul 8192^3: {tflops:.0f} TFLOP/s")
    del m

    H, V, nkv, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["num_key_value_heads"], cfg["head_dim"]
    layers = [Layer(cfg, i, dev) for i in range(cfg["num_hidden_layers"])]
    embed = torch.randn(V, H, device=dev, dtype=torch.bfloat16)
    head = torch.randn(V, H, device=dev, dtype=torch.bfloat16) / math.sqrt(H)
    final = torch.ones(H, device=dev, dtype=torch.bfloat16)
    eps = cfg["rms_norm_eps"]
    print(f"torch weights: {torch.cuda.memory_allocated() / 2**30:.1f} GiB")

    def forward(ids, pos, kvs, batched=False):
        x = embed[ids]
        for layer, kv in zip(layers, kvs):
            x = layer.forward(x, pos, kv, batched)
        return F.linear(rms_norm(x if batched else x[-1:], final, eps), head)

    with torch.no_grad():
        kv_len = lambda l: args.context if not l.window else min(args.context, l.window)
        kvs = [(torch.randn(kv_len(l), nkv, hd, device=dev, dtype=torch.bfloat16),
                torch.randn(kv_len(l), nkv, hd, device=dev, dtype=torch.bfloat16)) for l in layers]
        ids = torch.tensor([5], device=dev)
        pos = torch.tensor([args.context], device=dev)
        forward(ids, pos, kvs)
        ms = timed(lambda: forward(ids, pos, kvs), args.steps)
        print(f"torch eager decode: batch 1, KV length {args.context}: {ms:.3f} ms/token")
        if args.batch > 1:
            B = args.batch
            bkvs = [(torch.randn(B, kv_len(l), nkv, hd, device=dev, dtype=torch.bfloat16),
                     torch.randn(B, kv_len(l), nkv, hd, device=dev, dtype=torch.bfloat16)) for l in layers]
            bids = torch.randint(0, V, (B,), device=dev)
            bpos = torch.full((B,), args.context, device=dev)
            forward(bids, bpos, bkvs, True)
            ms = timed(lambda: forward(bids, bpos, bkvs, True), args.steps)
            print(f"torch eager decode: batch {B}, KV length {args.context} each: {ms:.3f} ms a step")
            del bkvs
        if args.prefill:
            ids = torch.randint(0, V, (args.prefill,), device=dev)
            pos = torch.arange(args.prefill, device=dev)
            empty = [(torch.empty(0, nkv, hd, device=dev, dtype=torch.bfloat16),) * 2 for _ in layers]
            ms = timed(lambda: forward(ids, pos, empty), 1)
            print(f"torch eager prefill: {args.prefill} tokens in {ms:.1f} ms")


if __name__ == "__main__":
    sys.exit(main())
