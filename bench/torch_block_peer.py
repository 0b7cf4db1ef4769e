#!/usr/bin/env python3
"""PyTorch eager timing of a Llama-style transformer block: the peer our own block
(runtime/kernels/layers.cc transformer_block with norm rmsnorm, position rope, act swiglu,
GQA, no biases) is compared with in tools/gpu/check.sh ("our block within 1.3x of PyTorch
eager in bf16", docs/gpu.md).

The block: x + attn(rmsnorm(x)), then h + swiglu_mlp(rmsnorm(h)); attention projects q (heads)
and k, v (kv_heads) with one fused GEMM as ours does, rotates q and k (RoPE, rotate-half,
theta 500000), runs torch.nn.functional.scaled_dot_product_attention (causal, GQA by repeating
k / v) and an output projection; the MLP is one fused gate|up GEMM, silu(gate) * up, and a down
projection. --tp T times one tensor-parallel shard (heads, kv_heads and ffn divided by T) without
its all-reduces, as `planner profile --tp T` times ours.

Timing: CUDA events around forward and around backward (the sum of the output, as our profiler's
fixed output gradient), --warmup untimed passes, the median of --reps. One line per microbatch:
    torch block bf16 b=1 tp=1 seq=2048 h=4096 fwd_ms=1.234 bwd_ms=2.345 total_ms=3.579

    python3 bench/torch_block_peer.py --device cuda --microbatch-sizes 1,2,4,8      (llama3-8b's block)
    python3 bench/torch_block_peer.py --device cpu --smoke                          (a test of the script)
--smoke: tiny shapes and 2 repetitions, and a check that the block's output and gradients are
finite and shaped as its input (exit 1 otherwise).
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, h, heads, kv_heads, head_dim, ffn, theta):
        super().__init__()
        self.heads, self.kv_heads, self.d, self.theta = heads, kv_heads, head_dim, theta
        self.norm1 = torch.nn.RMSNorm(h, eps=1e-5)
        self.norm2 = torch.nn.RMSNorm(h, eps=1e-5)
        self.qkv = torch.nn.Linear(h, (heads + 2 * kv_heads) * head_dim, bias=False)
        self.proj = torch.nn.Linear(heads * head_dim, h, bias=False)
        self.gate_up = torch.nn.Linear(h, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, h, bias=False)

    def rope(self, x):  # x [b, heads, s, d], rotate-half
        s, d = x.shape[-2], x.shape[-1]
        inv = self.theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
        ang = torch.arange(s, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, x):  # x [b, s, h]
        b, s, _ = x.shape
        qkv = self.qkv(self.norm1(x))
        q, k, v = qkv.split([self.heads * self.d, self.kv_heads * self.d, self.kv_heads * self.d], -1)
        q = self.rope(q.view(b, s, self.heads, self.d).transpose(1, 2))
        k = self.rope(k.view(b, s, self.kv_heads, self.d).transpose(1, 2))
        v = v.view(b, s, self.kv_heads, self.d).transpose(1, 2)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        hdn = x + self.proj(a.transpose(1, 2).reshape(b, s, self.heads * self.d))
        gate, up = self.gate_up(self.norm2(hdn)).chunk(2, -1)
        return hdn + self.down(F.silu(gate) * up)


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--microbatch-sizes", default="1")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=14336)
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--smoke", action="store_true", help="tiny shapes, 2 repetitions, finiteness checks")
    a = p.parse_args()
    if a.smoke:
        a.seq, a.hidden, a.heads, a.kv_heads, a.ffn, a.warmup, a.reps = 16, 64, 4, 2, 96, 1, 2
    for name, v in (("heads", a.heads), ("kv-heads", a.kv_heads), ("ffn", a.ffn)):
        if v % a.tp:
            p.error(f"--tp {a.tp} does not divide --{name} {v}")
    if a.heads % a.kv_heads or a.hidden % a.heads:
        p.error("--heads must divide --hidden and be a multiple of --kv-heads")
    return a


class Timer:
    def __init__(self, device):
        self.cuda = device == "cuda"

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, t0, t1):
        if self.cuda:
            torch.cuda.synchronize()
            return t0.elapsed_time(t1)
        return (t1 - t0) * 1e3


def time_block(a, blk, b, dtype):
    x = torch.randn(b, a.seq, a.hidden, device=a.device, dtype=dtype, requires_grad=True)
    timer, fwd, bwd = Timer(a.device), [], []
    for rep in range(a.warmup + a.reps):
        blk.zero_grad(set_to_none=True)
        x.grad = None
        t0 = timer.mark()
        y = blk(x)
        t1 = timer.mark()
        y.sum().backward()
        t2 = timer.mark()
        f, g = timer.ms(t0, t1), timer.ms(t1, t2)
        if rep >= a.warmup:
            fwd.append(f)
            bwd.append(g)
    if a.smoke:
        grads = [x.grad] + [p.grad for p in blk.parameters()]
        if y.shape != x.shape or not torch.isfinite(y).all() or any(gr is None or not torch.isfinite(gr).all() for gr in grads):
            print("torch block smoke: FAIL (output shape or non-finite values)")
            sys.exit(1)
    return statistics.median(fwd), statistics.median(bwd)


def main():
    a = parse()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_block_peer: --device cuda: torch sees no CUDA device; use --device cpu --smoke", file=sys.stderr)
        sys.exit(1)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    blk = Block(a.hidden, a.heads // a.tp, a.kv_heads // a.tp, a.hidden // a.heads, a.ffn // a.tp, a.rope_theta).to(a.device, dtype)
    for b in [int(v) for v in a.microbatch_sizes.split(",")]:
        f, g = time_block(a, blk, b, dtype)
        print(f"torch block {a.dtype} b={b} tp={a.tp} seq={a.seq} h={a.hidden} fwd_ms={f:.3f} bwd_ms={g:.3f} total_ms={f + g:.3f}", flush=True)
    if a.smoke:
        print("torch block smoke: ok")


if __name__ == "__main__":
    main()
