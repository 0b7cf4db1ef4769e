#!/usr/bin/env python3
"""Measured kernel rates for the planner's kernel table (issue 27's GPU section; tools/gpu/check.sh step 8):
GEMMs in bf16 and FP8 (cuBLASLt through torch.matmul and torch._scaled_mm, per-tensor scales) at the shapes the
table's sources and the calibration runs use, attention by kernel (scaled_dot_product_attention's cuDNN and
flash backends; PyTorch's flash backend is FlashAttention-2) forward and backward, causal or not, head dim 64
and 128, 512 to 16384 tokens at 16384 tokens per batch (the FlashAttention-3 paper's protocol: hidden 2048),
one rank's ring-attention steps (context parallelism 2 / 4 / 8 at 32K / 64K / 128K) with and without their merges,
and the host's cost of launching kernels: one tiny kernel, and one GEMM per expert as Transformer Engine's
grouped GEMM loops over experts on Hopper (host seconds against the GPU's).

Timing: CUDA events, --warmup untimed runs, the median of --reps. FLOPs: 2 M N K per GEMM; attention
4 b a s^2 d forward (halved causal), backward 2.5x the forward (the FlashAttention papers' count).
One line per measurement, the planner's comparison (`build/bench/kernel_table_check CLUSTER FILE`) reads them:
    device NVIDIA H100 80GB HBM3 cc=9.0
    gemm bf16 m=8192 n=14336 k=4096 tflops=712.3
    gemm fp8 m=8192 n=14336 k=4096 accum=split tflops=1203.0      (accum=fast: TE's forward GEMM's setting)
    attention cudnn fwd causal=1 d=128 seq=4096 tflops=512.0
    ring cudnn fwd cp=4 d=128 seq=65536 steps_ms=9.1 merges_ms=0.4 tflops=480.0 with_merges_tflops=461.0
    launch host_us=6.1 (tiny kernels, queued without a sync)
    experts e=16 m=512 n=3072 k=4096 host_ms=0.41 gpu_ms=0.36

    python3 bench/kernel_rates_peer.py --device cuda > kernel-rates.txt
    python3 bench/kernel_rates_peer.py --device cpu --smoke          (a test of the script: tiny shapes, bf16 only)
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# (M, N, K): the K sweep at M = N = 4096 (the table's k_half: DeepGEMM's K 512..16384 rows), Llama 3 8B's block at
# 8192 tokens, and the MoE expert GEMMs of the checks (Megatron-LM moe_perf's Mixtral and DeepSeek proxies, Qwen3-235B
# at tp 4 ep 8: 512 tokens per expert).
GEMMS = [(4096, 4096, k) for k in (512, 1024, 2048, 4096, 8192, 16384)] + [
    (m, 4096, 4096) for m in (128, 256, 1024)] + [
    (8192, 6144, 4096), (8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336),
    (8192, 14336, 4096), (8192, 2048, 7168), (8192, 7168, 2048),
    (512, 3072, 4096), (512, 4096, 1536), (2048, 3072, 4096)]
SMOKE_GEMMS = [(64, 64, 32), (32, 48, 64)]
ATTN_SEQ = [512, 1024, 2048, 4096, 8192, 16384]


def events_ms(fn, spin=False):
    """One run of fn() on the GPU: (CUDA-event milliseconds around it, host milliseconds to enqueue it). spin: queued
    behind a ~10 ms spin kernel (torch.cuda._sleep), so that every kernel is queued before the first starts and the
    events time the GPU's work alone, not the host's launch of it."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if spin:
        torch.cuda._sleep(20_000_000)
    t = time.perf_counter()
    a.record()
    fn()
    b.record()
    host = 1e3 * (time.perf_counter() - t)
    b.synchronize()
    return a.elapsed_time(b), host


class Timer:
    def __init__(self, device, warmup, reps):
        self.cuda, self.warmup, self.reps = device.type == "cuda", warmup, reps

    def ms(self, fn, spin=False):
        """Median milliseconds of fn() over reps runs, after warmup. spin (events_ms): the GPU's work alone, not the
        host's launch of it (a 30 us GEMM timed without it reads up to half its rate: PyTorch takes ~20 us to launch
        a matmul)."""
        for _ in range(self.warmup):
            fn()
        times = []
        for _ in range(self.reps):
            if self.cuda:
                times.append(events_ms(fn, spin)[0])
            else:
                t = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t))
        return statistics.median(times)


def fp8_ok(device):
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 9) and hasattr(torch, "_scaled_mm")


def gemm_lines(device, timer, shapes, precisions):
    out = []
    for p in precisions:
        for m, n, k in shapes:
            a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            b = torch.randn(n, k, device=device, dtype=torch.bfloat16)
            if p == "bf16":
                bt = b.t()
                fn = lambda: torch.matmul(a, bt)
            else:  # per-tensor scaled e4m3, the second operand column-major as cuBLASLt wants it
                a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
                one = torch.ones((), device=device, dtype=torch.float32)
                for fast in (False, True):  # TE: fast accumulation in the forward GEMM, split in dgrad / wgrad
                    ms = timer.ms(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                           use_fast_accum=fast), spin=True)
                    out.append(f"gemm {p} m={m} n={n} k={k} accum={'fast' if fast else 'split'} "
                               f"tflops={2.0 * m * n * k / (ms * 1e-3) / 1e12:.4g}")
                continue
            ms = timer.ms(fn, spin=True)
            out.append(f"gemm {p} m={m} n={n} k={k} tflops={2.0 * m * n * k / (ms * 1e-3) / 1e12:.4g}")
    return out


def sdpa_backends(device):
    """(name, backend) of the scaled_dot_product_attention backends timed: cuDNN and flash (FlashAttention-2) on
    CUDA, the math path on the CPU (backend None)."""
    if device.type != "cuda":
        return [("math", None)]
    from torch.nn.attention import SDPBackend
    return [("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)]


def sdpa_ms(timer, backend, q, k, v, causal, g):
    """Median ms of the forward and of forward + backward on `backend` (fresh gradients each run: no accumulation
    adds timed with the backward). RuntimeError when the backend refuses the shape (or is not built)."""
    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def both():
        torch.autograd.grad(fwd(), (q, k, v), g)

    if backend is None:
        return timer.ms(fwd), timer.ms(both)
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel([backend]):
        return timer.ms(fwd), timer.ms(both)


def attention_lines(device, timer, seqs, smoke):
    out = []
    for name, backend in sdpa_backends(device):
        for d in ((16,) if smoke else (64, 128)):
            heads = (2 if smoke else 2048 // d)
            for causal in (True, False):
                for s in seqs:
                    b = max(1, (64 if smoke else 16384) // s)
                    q, k, v = (torch.randn(b, heads, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                               for _ in range(3))
                    g = torch.randn(b, heads, s, d, device=device, dtype=torch.bfloat16)
                    try:
                        f_ms, t_ms = sdpa_ms(timer, backend, q, k, v, causal, g)
                    except RuntimeError as e:  # the backend refuses the shape (or is not built)
                        out.append(f"# attention {name} d={d} seq={s} causal={int(causal)}: {str(e).splitlines()[0]}")
                        continue
                    flops = 4.0 * b * heads * s * s * d / (2 if causal else 1)
                    bwd_ms = max(t_ms - f_ms, 1e-6)
                    out.append(f"attention {name} fwd causal={int(causal)} d={d} seq={s} tflops={flops / f_ms / 1e9:.4g}")
                    out.append(f"attention {name} bwd causal={int(causal)} d={d} seq={s} "
                               f"tflops={2.5 * flops / bwd_ms / 1e9:.4g}")
    return out


def ring_lines(device, timer, smoke):
    """Context parallelism's ring steps on one GPU, serially, as one rank of a load-balanced ring runs them (the
    planner's cp_ring, docs/cost_model.md "Ring attention's steps"): the rank holds s = S / cp tokens as two chunks of
    s/2; step 0 is causal over its own s, each later step a non-causal block of s x s/2 (the kv's first chunk) or
    s/2 x s (the rank's second query chunk): the mean of the two is timed. Beside them the merge a ring does between
    steps: the output corrected by the new softmax statistics in fp32 (out x exp(lse_old - lse) + out_step x
    exp(lse_step - lse)), once per later step. Rates are the steps' FLOPs (S^2 / (2 cp) pairs per rank, 4 d per pair
    forward, backward 2.5x) over their time, kernels alone and with the merges: the planner prices the kernels on
    its table and multiplies by cp_ring (1 for Transformer Engine, whose merges run beside the next kernel)."""
    cases = [(64, 2), (64, 4)] if smoke else [(32768, 2), (65536, 4), (131072, 8)]
    d, heads = (16, 2) if smoke else (128, 16)
    out = []
    for name, backend in sdpa_backends(device):
        for total, cp in cases:
            s = total // cp

            def tensors(n):
                return [torch.randn(1, heads, n, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                        for _ in range(2)]

            q_full, k_full = tensors(s)
            v_full = torch.randn_like(k_full, requires_grad=True)
            q_half, k_half = tensors(s // 2)
            v_half = torch.randn_like(k_half, requires_grad=True)
            shapes = {"diag": (q_full, k_full, v_full, True), "kv_half": (q_full, k_half, v_half, False),
                      "q_half": (q_half, k_full, v_full, False)}
            acc = torch.zeros(1, heads, s, d, device=device, dtype=torch.float32)
            lse = torch.zeros(1, heads, s, 1, device=device, dtype=torch.float32)
            step_out = torch.randn(1, heads, s, d, device=device, dtype=torch.bfloat16)
            step_lse = torch.randn(1, heads, s, 1, device=device, dtype=torch.float32)

            def merge():
                new = torch.logaddexp(lse, step_lse)
                return acc * torch.exp(lse - new) + step_out.float() * torch.exp(step_lse - new)

            try:
                fwd_ms, bwd_ms = {}, {}
                for key, (q, k, v, causal) in shapes.items():
                    fwd_ms[key], t_ms = sdpa_ms(timer, backend, q, k, v, causal, torch.randn_like(q))
                    bwd_ms[key] = max(t_ms - fwd_ms[key], 1e-6)
            except RuntimeError as e:
                out.append(f"# ring {name} cp={cp} seq={total}: {str(e).splitlines()[0]}")
                continue
            merge_ms = timer.ms(merge)
            flops = 4.0 * heads * d * total * total / (2 * cp)  # one rank's steps, forward
            for pas, ms, f in (("fwd", fwd_ms, flops), ("bwd", bwd_ms, 2.5 * flops)):
                steps = ms["diag"] + (cp - 1) * (ms["kv_half"] + ms["q_half"]) / 2
                # The backward's accumulations (dq, and dk / dv passed along) are about the forward merge's bytes.
                merges = (cp - 1) * merge_ms
                out.append(f"ring {name} {pas} cp={cp} d={d} seq={total} steps_ms={steps:.4g} merges_ms={merges:.4g} "
                           f"tflops={f / steps / 1e9:.4g} with_merges_tflops={f / (steps + merges) / 1e9:.4g}")
    return out


def host_lines(device, timer, smoke):
    """Host microseconds per tiny kernel launch, and a per-expert GEMM loop's host time against its GPU time."""
    x = torch.zeros(1, device=device)
    y = torch.empty_like(x)
    n = 200 if smoke else 2000
    for _ in range(50):
        torch.add(x, 1, out=y)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        torch.add(x, 1, out=y)
    host_us = 1e6 * (time.perf_counter() - t) / n
    if device.type == "cuda":
        torch.cuda.synchronize()
    out = [f"launch host_us={host_us:.2f} (tiny kernels, queued without a sync)"]
    e, m, nn, k = (4, 32, 48, 64) if smoke else (16, 512, 3072, 4096)
    xs = [torch.randn(m, k, device=device, dtype=torch.bfloat16) for _ in range(e)]
    ws = [torch.randn(k, nn, device=device, dtype=torch.bfloat16) for _ in range(e)]

    def loop():
        return [torch.matmul(a, w) for a, w in zip(xs, ws)]

    gpu_ms = timer.ms(loop, spin=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    loop()
    host_ms = 1e3 * (time.perf_counter() - t)
    if device.type == "cuda":
        torch.cuda.synchronize()
    out.append(f"experts e={e} m={m} n={nn} k={k} host_ms={host_ms:.3f} gpu_ms={gpu_ms:.3f}")
    return out


def split_ms(device, fn, reps):
    """Median (host, gpu, wall) milliseconds of fn(): host = the time to enqueue it; wall = CUDA events around it as
    it runs; gpu = CUDA events around it enqueued behind a ~10 ms spin kernel (torch.cuda._sleep), so that every
    kernel is queued before the first starts and the events time the kernels back to back without the host."""
    host, gpu, wall = [], [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        w, h = events_ms(fn)
        wall.append(w)
        host.append(h)
        gpu.append(events_ms(fn, spin=True)[0])
    return statistics.median(host), statistics.median(gpu), statistics.median(wall)


def moe_loop_lines(device, smoke):
    """Per-expert GEMM loops as Transformer Engine runs its grouped GEMM on Hopper (one cuBLASLt call per local
    expert), at the checks' expert shapes (Qwen3-30B-A3B's fc1 2048 -> 2 x 768 and fc2 768 -> 2048; moe_perf's
    4096 -> 3072) and tokens per expert 128 to 2048: bf16 (1 kernel per expert) and FP8 with current scaling's
    input quantization per expert in eager PyTorch (abs, amax, float, divide, multiply, cast, reciprocal, GEMM: 8
    launches). Host against GPU time is what the MoE block's host-time model rests on (docs/cost_model.md "The MoE
    expert block's host time")."""
    if device.type != "cuda" or smoke:
        return []
    out = []
    for n, k in ((1536, 2048), (2048, 768), (3072, 4096)):
        for m in (128, 512, 2048):
            for e in (4, 8, 16, 32):
                xs = [torch.randn(m, k, device=device, dtype=torch.bfloat16) for _ in range(e)]
                ws = [torch.randn(n, k, device=device, dtype=torch.bfloat16) for _ in range(e)]
                wts = [w.t() for w in ws]
                w8s = [w.to(torch.float8_e4m3fn).t() for w in ws]
                one = torch.ones((), device=device, dtype=torch.float32)

                def bf16():
                    return [torch.matmul(x, w) for x, w in zip(xs, wts)]

                def fp8():
                    outs = []
                    for x, w8 in zip(xs, w8s):
                        amax = x.abs().amax().float()
                        scale = 448.0 / amax
                        x8 = (x * scale).to(torch.float8_e4m3fn)
                        outs.append(torch._scaled_mm(x8, w8, scale_a=scale.reciprocal(), scale_b=one,
                                                     out_dtype=torch.bfloat16))
                    return outs

                for prec, fn, kernels in (("bf16", bf16, 1), ("fp8", fp8, 8)):
                    if prec == "fp8" and not fp8_ok(device):
                        continue
                    for _ in range(3):
                        fn()
                    h, g, w = split_ms(device, fn, 7)
                    if h > 9.0:  # the ~10 ms spin kernel ran out before the host had queued the loop
                        out.append(f"# moe_loop {prec} e={e} m={m}: host {h:.3g} ms reaches the spin kernel's ~10 ms; "
                                   "its gpu_ms holds host time")
                    out.append(f"moe_loop {prec} e={e} m={m} n={n} k={k} kernels_per_expert={kernels} "
                               f"host_ms={h:.4g} gpu_ms={g:.4g} wall_ms={w:.4g} "
                               f"gpu_tflops={2.0 * e * m * n * k / (g * 1e-3) / 1e12:.4g}")
    return out


def memory_lines(device, timer, smoke):
    """Memory-bound work's HBM rate: a device-to-device copy, the FP8 cast with its amax (current scaling), an
    RMSNorm-like row op, and the fused Adam step (fp32 params, grads, two moments: 28 bytes moved per parameter)."""
    if device.type != "cuda" or smoke:
        return []
    out = []
    n = 1 << 28  # 256 Mi elements: 512 MiB in bf16, 1 GiB in fp32, far past the 50-60 MB L2
    x = torch.randn(n, device=device, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    ms = timer.ms(lambda: y.copy_(x))
    out.append(f"memory copy bf16 bytes={4 * n} gbps={4 * n / (ms * 1e-3) / 1e9:.5g}")

    def cast():
        amax = x.abs().amax().float()
        return (x * (448.0 / amax)).to(torch.float8_e4m3fn)

    ms = timer.ms(cast)
    out.append(f"memory fp8_cast_with_amax bytes_min={3 * n} gbps_min_bytes={3 * n / (ms * 1e-3) / 1e9:.5g} "
               f"ms={ms:.4g}")
    rows = x.view(-1, 4096)
    wn = torch.ones(4096, device=device, dtype=torch.bfloat16)
    ms = timer.ms(lambda: F.rms_norm(rows, (4096,), wn))
    out.append(f"memory rms_norm bf16 h=4096 bytes={4 * n} gbps={4 * n / (ms * 1e-3) / 1e9:.5g}")
    p = 1 << 26  # 64 Mi parameters
    params = [torch.zeros(p, device=device, dtype=torch.float32, requires_grad=True)]
    params[0].grad = torch.randn(p, device=device, dtype=torch.float32)
    opt = torch.optim.Adam(params, lr=1e-4, fused=True)
    ms = timer.ms(opt.step)
    out.append(f"memory adam_fused fp32 params={p} bytes={28 * p} gbps={28 * p / (ms * 1e-3) / 1e9:.5g}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, bf16 only, 2 repetitions (a test of the script)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--skip", default="", help="comma list of parts to leave out: gemm, attention, ring, host, memory")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("kernel_rates_peer.py: no CUDA device; use --device cpu --smoke")
    device = torch.device(args.device)
    skip = set(filter(None, args.skip.split(",")))
    if not skip <= {"gemm", "attention", "ring", "host", "memory"}:
        sys.exit(f"kernel_rates_peer.py: --skip takes gemm, attention, ring, host, memory; got {args.skip}")
    timer = Timer(device, 1 if args.smoke else args.warmup, 2 if args.smoke else args.reps)
    if device.type == "cuda":
        cc = torch.cuda.get_device_capability(device)
        print(f"device {torch.cuda.get_device_name(device)} cc={cc[0]}.{cc[1]}", flush=True)
    else:
        print("device cpu", flush=True)
    if "gemm" not in skip:
        precisions = ["bf16"] + (["fp8"] if fp8_ok(device) and not args.smoke else [])
        for line in gemm_lines(device, timer, SMOKE_GEMMS if args.smoke else GEMMS, precisions):
            print(line, flush=True)
    if "attention" not in skip:
        for line in attention_lines(device, timer, [16, 32] if args.smoke else ATTN_SEQ, args.smoke):
            print(line, flush=True)
    if "ring" not in skip:
        for line in ring_lines(device, timer, args.smoke):
            print(line, flush=True)
    if "host" not in skip:
        for line in host_lines(device, timer, args.smoke):
            print(line, flush=True)
    for part, lines in (("host", lambda: moe_loop_lines(device, args.smoke)),
                        ("memory", lambda: memory_lines(device, timer, args.smoke))):
        if part in skip:
            continue
        try:  # printed whole or not at all; a failure here leaves the lines above standing
            for line in lines():
                print(line, flush=True)
        except (RuntimeError, AttributeError, TypeError) as e:
            print(f"# {part}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)


if __name__ == "__main__":
    main()
