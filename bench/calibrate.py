#!/usr/bin/env python3
"""Calibration against published runs (docs/performance.md, "Calibration").

Every row is a published training run: a model, a GPU count, a global batch and the
layout the authors used, forced with `planner solve` flags; the planner chooses what the
paper does not state (microbatch size, interleave degree where free, ZeRO stage). The
script prints one table per source with the published figure, the prediction on the same
scale and the error, then the mean absolute error per GPU type and precision.

  python3 bench/calibrate.py                       # the tables, the clusters' efficiencies as they are
  python3 bench/calibrate.py --fit                 # also: the error at each efficiency on a grid, per GPU type
  python3 bench/calibrate.py --bands               # also: each engine's band per precision, as configs/engines/*.yaml write it
  python3 bench/calibrate.py --write-bands         # rewrite the `band:` block of configs/engines/*.yaml from this run
  python3 bench/calibrate.py --check-bands         # exit 1 when an engine file's band differs from this run (tests)

Bands (docs/cost_model.md section 2, "Bands"): per engine and precision, the signed errors
(predicted - published) / published of the rows run on that engine at that precision (fp16 and bf16
together: the same tensor-core rate and kernels), joined with the published check rows of dense models run on it
(`checks` in the band: NeMo's long-sequence and 24.07 tables, Megatron-Core's 2025-26 recipes on H100 and Blackwell,
torchtitan's Dec 2024 benchmarks, Megatron-DeepSpeed's runs; not fitted, their spread only), widened to include 0;
with fewer than 3 of both it joins the whole set's spread (every engine, every precision). Rounded outwards to 0.001.

Published figures are compared on their own definitions:
  megatron-sc21   TFLOP/s per GPU with Megatron eq. (3) FLOPs (full recompute counted), i.e.
                  F3 / (n T) with T the predicted iteration time.
  korthikanti     MFU with eq. (7) model FLOPs over 312 TFLOP/s (A100 fp16/bf16 peak).
  llama3          MFU as the plan reports it (predicted.mfu: model FLOPs / (n peak T)).
  deepseek-v3     tokens/s per GPU (predicted.tokens_per_second_per_gpu), against the report's 180K
                  H800 GPU-hours per trillion tokens: 1e12 / (180e3 x 3600) = 1543 tokens/s/GPU.
  issue27         tokens/s per GPU (predicted.tokens_per_second_per_gpu) against five published H100 runs:
                  torchtitan's performance doc (Dec 2024; tokens/s/GPU as published, and the peak memory
                  in GiB beside predicted.peak_memory_GiB), NeMo's long-context table (TFLOP/s/GPU in
                  NeMo's llama2 FLOPs formula of the time, full s^2 attention, turned into tokens/s/GPU:
                  TFLOP/s / FLOPs per token) and MLPerf Training v3.1 GPT-3 175B (global batch x seq /
                  (step seconds x GPUs)). Rows pass `--engine` only where `planner solve --help` lists it.
"""
import argparse
import functools
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANNER = os.path.join(ROOT, "build", "planner", "planner")


def gpt(name, layers, hidden, heads, seq=2048, vocab=51200, batch=1, extra=""):
    return (f"format_version: 1\nname: {name}\nprecision: fp16\nglobal_batch: {batch}\n"
            f"gpt: {{layers: {layers}, hidden: {hidden}, heads: {heads}, seq: {seq}, vocab: {vocab}, attention: unfused{extra}}}\n")


# Megatron-LM SC'21 Table 1 (Narayanan et al. 2021): (params, heads, hidden, layers, t, p, n, B, TFLOP/s per GPU).
MEGATRON_T1 = [
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137), ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138),
    ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142), ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138), ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148), ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163), ("1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
# Korthikanti et al. 2022 Tables 3 and 5: (name, heads, hidden, layers, t, p, n, B, b, v, MFU selective+SP, MFU full).
KORTHIKANTI = [
    ("22B", 64, 6144, 48, 8, 1, 8, 4, 4, 1, 0.415, 0.321), ("175B", 96, 12288, 96, 8, 8, 64, 64, 1, 3, 0.514, 0.390),
    ("530B", 128, 20480, 105, 8, 35, 280, 280, 1, 3, 0.560, 0.432), ("1T", 160, 25600, 128, 8, 64, 512, 512, 1, 1, 0.563, 0.426),
]
# Llama 3 paper (Dubey et al. 2024) Table 4, Llama 3.1 405B, BF16 MFU: (GPUs, tp, cp, pp, dp, seq, global batch (sequences), MFU).
LLAMA3 = [
    (8192, 8, 1, 16, 64, 8192, 2048, 0.43), (16384, 8, 1, 16, 128, 8192, 2048, 0.41),
    (16384, 8, 16, 16, 8, 131072, 128, 0.38),
]


# DeepSeek-V3 technical report (arXiv:2412.19437): 2048 H800, PP16 (DualPipe), EP64 over 8 nodes, no TP,
# ZeRO-1, FP8 GEMMs, 180K GPU-hours per trillion tokens; sequence 4096, batch 15360 sequences (the
# model file). (run, flags, published tokens/s/GPU)
DEEPSEEK = [
    ("DeepSeek-V3 671B n2048 pp16 ep64 dualpipev fp8",
     ["--pp", "16", "--ep", "64", "--etp", "1", "--tp", "1", "--cp", "1", "--zero", "1", "--schedule", "dualpipev",
      "--precision", "fp8", "--moe-dispatcher", "flex"], 1e12 / (180e3 * 3600)),
]

# Issue 27: five published H100 runs, each forced to its published layout. (run, model file, cluster key,
# GPUs, flags, engine, published tokens/s/GPU, published peak memory GiB or None). Rows 1-2 (torchtitan
# performance doc, Dec 2024): Llama 3.1 8B (llama3-8b.yaml: the same architecture) on H100 96 GB HBM2e at
# 500 W, FSDP2 over every GPU (ZeRO-3, tp 1, pp 1), local batch 2, seq 8192, selective activation
# checkpointing (the planner's closest: --recompute selective); row 2 adds torch.compile and float8
# linears (tensorwise). Rows 3-4 (NeMo long-context table, Llama 2 7B, H100 SXM 80GB, FP8). Row 5
# (MLPerf Training v3.1, NVIDIA Eos, GPT-3 175B): TP 4, PP 8, interleave 12, DP 16, microbatch 1,
# distributed optimizer, sequence parallel, no recompute.


def nemo_llama2_flops_per_token(s, l=32, h=4096, ffn=11008, heads=32, groups=32, v=32000):
    """NeMo's llama2 FLOPs formula (full s^2 attention) per token: l h^2 (12 + 12 g/a + 18 f/h + 12 s/h + 6 V/(l h))."""
    return l * h * h * (12 + 12 * groups / heads + 18 * ffn / h + 12 * s / h + 6 * v / (l * h))


# NeMo 24.03.01's Llama 2 7B training config as the long-sequence table ran it (NeMo-Framework-Launcher
# conf/training/llama/llama2_7b.yaml): micro_batch_size 1, no activation checkpointing, the distributed optimizer
# (distributed_fused_adam: optimizer states sharded over data parallelism, ZeRO-1) with grad_sync_dtype bf16 (the
# gradient buffer in bf16), virtual_pipeline_model_parallel_size null (plain 1F1B where pp > 1).
# NeMo 1.x (megatron_base_model.py, v2.0.0 L791-812) gives Apex's DistributedFusedAdam store_params false and
# store_param_remainders true when the optimizer's dtype is fp32 and the weights bf16: 10 B of state per parameter
# (the int16 remainders and fp32 moments), not 12: --optimizer-state fp32-remainders.
NEMO_2403 = ["--microbatch", "1", "--zero", "1", "--recompute", "none", "--grad-dtype", "bf16", "--schedule", "1f1b",
             "--optimizer-state", "fp32-remainders"]
# NVIDIA's MLPerf GPT-3 175B configuration (NeMo-Framework-Launcher conf/training/gpt3/mlperf.yaml, the submission's
# settings): ub_tp_comm_overlap true (Transformer Engine userbuffers: TP all-gathers / reduce-scatters overlapped with
# the GEMMs) and grad_sync_dtype bf16 with the Megatron-Core distributed optimizer.
MLPERF_GPT3 = ["--tp-comm-overlap", "on", "--grad-dtype", "bf16"]

ISSUE27 = [
    ("torchtitan Llama 3.1 8B n8 FSDP2(zero3) b2 seq8192 bf16 selective-AC", "llama3-8b.yaml", "h100_96", 8,
     ["--tp", "1", "--pp", "1", "--cp", "1", "--zero", "3", "--microbatch", "2", "--global-batch", "16", "--seq", "8192",
      "--precision", "bf16", "--recompute", "selective"], "torchtitan", 5762, 82.4),
    ("torchtitan Llama 3.1 8B n128 FSDP2(zero3) b2 seq8192 compile+float8 selective-AC", "llama3-8b.yaml", "h100_96", 128,
     ["--tp", "1", "--pp", "1", "--cp", "1", "--zero", "3", "--microbatch", "2", "--global-batch", "256", "--seq", "8192",
      "--precision", "fp8", "--recompute", "selective"], "torchtitan-compile", 8380, 61.8),
    ("NeMo Llama 2 7B n4 tp1 pp1 cp1 dp4 B1024 seq4096 fp8 (768 TFLOP/s)", "llama2-7b.yaml", "h100", 4,
     ["--tp", "1", "--pp", "1", "--cp", "1", "--global-batch", "1024", "--seq", "4096", "--precision", "fp8"] + NEMO_2403,
     "nemo-24", 768e12 / nemo_llama2_flops_per_token(4096), None),
    ("NeMo Llama 2 7B n64 tp4 pp1 cp2 dp8 B64 seq65536 fp8 (574 TFLOP/s)", "llama2-7b.yaml", "h100", 64,
     ["--tp", "4", "--pp", "1", "--cp", "2", "--global-batch", "64", "--seq", "65536", "--precision", "fp8"] + NEMO_2403,
     "nemo-24", 574e12 / nemo_llama2_flops_per_token(65536), None),
    ("MLPerf v3.1 GPT-3 175B n512 tp4 pp8 v12 dp16 B2048 b1 fp8 zero1 sp (11.054 s/step)", "gpt3-175b.yaml", "h100", 512,
     ["--tp", "4", "--pp", "8", "--cp", "1", "--schedule", "interleaved", "--interleave", "12", "--microbatch", "1",
      "--global-batch", "2048", "--seq", "2048", "--precision", "fp8", "--zero", "1", "--sp", "on", "--recompute", "none"]
     + MLPERF_GPT3,
     "megatron-core", 2048 * 2048 / (11.054 * 512), None),
]

# Checks, not calibration (no band, no summary): NeMo's long-sequence table (NVIDIA/NeMo
# docs/source/performance/performance_long_sequence.md, added Oct 2024, container NeMo 24.03.01, DGX-H100, FP8,
# Llama 2 7B, 4M tokens per step), the "with CP" layouts: (seq K, GPUs, global batch, published TFLOP/s/GPU in
# NeMo's full-attention formula, tp, pp, dp, cp). Rows 4K and 64K are ISSUE27's. Costed on Transformer Engine's
# FlashAttention-2 backend, as the launcher ran them (nemo_engine: NVTE_FUSED_ATTN 0).
# (thousand tokens, GPUs) of the NEMO_LONG rows that are also ISSUE27's calibration runs: not counted again as checks.
NEMO_LONG_CALIBRATION = {(4, 4), (64, 64)}
NEMO_LONG = [(4, 4, 1024, 768, 1, 1, 4, 1), (8, 8, 512, 730, 1, 2, 4, 1), (16, 16, 256, 660, 2, 1, 8, 1),
             (32, 32, 128, 610, 2, 1, 8, 2), (64, 64, 64, 574, 4, 1, 8, 2), (128, 128, 32, 555, 4, 1, 8, 4),
             (256, 256, 16, 549, 4, 1, 8, 8), (512, 512, 8, 549, 8, 1, 4, 16), (1024, 1024, 4, 536, 8, 1, 4, 32)]

# Checks, not calibration: NeMo's performance summary (NVIDIA/NeMo docs/source/performance/performance_summary.md,
# container NeMo 24.07, DGX-H100, FP8; tokens/s/GPU as published): (name, model file or NEMO_MODELS key, GPUs,
# global batch, microbatch, seq, tp, pp, cp, vp, tokens/s/GPU). The recipes' settings (NeMo-Framework-Launcher
# conf/training): the distributed optimizer with grad_sync_dtype bf16, no activation recompute, sequence parallelism
# and Transformer Engine's TP communication overlap (ub_tp_comm_overlap) where tp > 1.
NEMO_2407 = [
    ("GPT3-5B", "gpt3-5b", 64, 2048, 4, 2048, 1, 1, 1, 1, 22521),
    ("GPT3-20B", "gpt3-20b", 64, 256, 2, 2048, 2, 1, 1, 1, 5851),
    ("GPT3-175B", "gpt3-175b.yaml", 128, 256, 1, 2048, 4, 8, 1, 6, 726),
    ("GPT3-175B", "gpt3-175b.yaml", 512, 2048, 2, 2048, 4, 8, 1, 6, 782),
    ("LLAMA2-7B", "llama2-7b.yaml", 8, 128, 1, 4096, 1, 1, 1, 1, 16847),
    ("LLAMA2-13B", "llama2-13b", 16, 128, 1, 4096, 1, 4, 1, 10, 8646),
    ("LLAMA2-70B", "llama2-70b", 64, 128, 1, 4096, 4, 4, 1, 20, 1707),
    ("Nemotron-8B", "nemotron-8b", 64, 256, 4, 4096, 2, 1, 1, 1, 12701),
    ("Nemotron-22B", "nemotron-22b", 64, 256, 2, 4096, 2, 4, 1, 10, 4256),
    ("Nemotron-340B", "nemotron-4-340b.yaml", 128, 32, 1, 4096, 8, 8, 1, 12, 322),
    ("LLAMA3-8B", "llama3-8b.yaml", 8, 128, 1, 8192, 1, 1, 2, 1, 12036),
    ("LLAMA3-70B", "llama3-70b.yaml", 64, 128, 1, 8192, 4, 4, 2, 5, 1533),
]
# The optimizer state each recipe keeps: distributed_fused_adam with bf16 weights keeps fp32 remainders (10 B per
# parameter, NEMO_2403's note); launcher 24.07 conf/training/nemotron/nemotron_340b.yaml sets optim.dtype bf16: bf16
# moments and no master (4 B). That file's layout is not the summary's (pp 12, vp 8, global batch 2304, fp8 off
# against pp 8, vp 12, 32, FP8): the optimizer's dtype is assumed kept from it.
NEMO_2407_OPTIM = {"Nemotron-340B": "bf16"}
# The models configs/models lacks, as the recipes define them (GPT-3: GPT-2 BPE padded to 50304, GeLU, LayerNorm, learned
# positions, biases, dropout 0.1; Llama 2: SwiGLU, RMSNorm, RoPE; Nemotron: squared ReLU, LayerNorm, RoPE, 256K vocabulary).
LLAMA_BLOCK = "ffn_act: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false, dropout: 0"
NEMOTRON_BLOCK = "ffn_act: relu2, norm: layernorm, position: rope, bias: false, tie_embeddings: false, dropout: 0"
NEMO_MODELS = {
    "gpt3-5b": "layers: 24, hidden: 4096, heads: 32, ffn: 16384, seq: 2048, vocab: 50304",
    "gpt3-20b": "layers: 44, hidden: 6144, heads: 48, ffn: 24576, seq: 2048, vocab: 50304",
    "llama2-13b": f"layers: 40, hidden: 5120, heads: 40, kv_heads: 40, ffn: 13824, {LLAMA_BLOCK}, seq: 4096, vocab: 32000",
    "llama2-70b": f"layers: 80, hidden: 8192, heads: 64, kv_heads: 8, ffn: 28672, {LLAMA_BLOCK}, seq: 4096, vocab: 32000",
    "nemotron-8b": f"layers: 32, hidden: 4096, heads: 32, kv_heads: 32, ffn: 16384, {NEMOTRON_BLOCK}, seq: 4096, vocab: 256000",
    "nemotron-22b": f"layers: 40, hidden: 6144, heads: 48, kv_heads: 48, ffn: 24576, {NEMOTRON_BLOCK}, seq: 4096, vocab: 256000",
}

# Checks, not calibration: fine-tuning on packed samples, SFT (every weight) and LoRA (gpt.lora: the base frozen,
# rank-r adapters trained). NeMo 24.07's performance summary (NVIDIA/NeMo docs/source/performance/performance_summary.md
# at 9c5c5e9709, DGX-H100, FP8, "SQuAD-v1.1, inputs packed to 4096 tokens", GBS 32, MBS 1; NeMo 1.0's LoRA default:
# rank 32 on attention_qkv, megatron_gpt_finetuning_config.yaml, an assumption for these rows) and Megatron-Bridge
# 26.06's (docs/performance-summary.md at tag v0.5.0; Llama 3 70B, seq 4096, GBS 32, MBS 1; its recipes,
# scripts/performance/configs/llama/llama3_llm_finetune.py: rank 16 on linear_qkv, packed SQuAD, FP8 current scaling,
# the distributed optimizer, TP communication overlap where tp > 1, no recompute on H100; GB200's TE CUDA graphs of
# the MLP are not costed). NeMo 24.07's rows as NeMo-Framework-Launcher tag 24.07's examples/peft/llama/h100/*.sh ran
# them (the same GPUs, batches, tp and pp; fp8 with fp8_params; the 13B SFT interleaved vp 10, the 70B SFT vp 20 with
# SP and TP overlap; LoRA on fused_adam). The packed rows' length-weighted mean sample is Megatron-Bridge's own SQuAD statistic
# (training/utils/flop_utils.py, PR #2416: sum s_i^2 = 842,603 per 4096-token row): 206 tokens.
# (source, task, model file or NEMO_MODELS key, cluster, GPUs, tp, pp, vp, lora (rank, targets) or None, recipe,
# engine, tokens/s/GPU).
SQUAD_PACKED_LENGTH = 206
FINETUNE = [
    ("NeMo 24.07", "SFT", "llama2-7b.yaml", "dgx-h100.yaml", 8, 1, 1, 1, None, "ds", "nemo-24", 16891),
    ("NeMo 24.07", "SFT", "llama2-13b", "dgx-h100.yaml", 8, 1, 4, 10, None, "ds", "nemo-24", 10176),
    ("NeMo 24.07", "SFT", "llama2-70b", "dgx-h100.yaml", 16, 4, 4, 20, None, "ds", "nemo-24", 1816),
    ("NeMo 24.07", "LoRA", "llama2-7b.yaml", "dgx-h100.yaml", 8, 1, 1, 1, (32, "qkv"), "ds", "nemo-24", 24824),
    ("NeMo 24.07", "LoRA", "llama2-13b", "dgx-h100.yaml", 8, 1, 1, 1, (32, "qkv"), "ds", "nemo-24", 14629),
    ("NeMo 24.07", "LoRA", "llama2-70b", "dgx-h100.yaml", 8, 2, 4, 1, (32, "qkv"), "ds", "nemo-24", 2621),
    ("MB 26.06", "SFT", "llama3-70b.yaml", "dgx-h100.yaml", 32, 4, 4, 5, None, "cs", "megatron-core", 1638),
    ("MB 26.06", "SFT", "llama3-70b.yaml", "gb200-nvl72.yaml", 32, 1, 8, 10, None, "cs", "megatron-core", 3864),
    ("MB 26.06", "SFT", "llama3-70b.yaml", "gb200-nvl72.yaml", 32, 1, 8, 10, None, "mx", "megatron-core", 3593),
    ("MB 26.06", "LoRA", "llama3-70b.yaml", "dgx-h100.yaml", 8, 2, 4, 20, (16, "qkv"), "cs", "megatron-core", 2643),
    ("MB 26.06", "LoRA", "llama3-70b.yaml", "gb200-nvl72.yaml", 8, 1, 2, 20, (16, "qkv"), "cs", "megatron-core", 6206),
    ("MB 26.06", "LoRA", "llama3-70b.yaml", "gb200-nvl72.yaml", 8, 1, 4, 20, (16, "qkv"), "mx", "megatron-core", 5958),
]


def finetune_model(tmp, model, lora):
    """A model file for a FINETUNE row: the bundled file (or NEMO_MODELS key) with its samples packed and, for LoRA,
    the adapters (gpt.lora)."""
    if model in NEMO_MODELS:
        text = (f"format_version: 1\nname: {model}\nprecision: bf16\nglobal_batch: 32\n"
                f"gpt: {{{NEMO_MODELS[model]}}}\n")
        text = text.replace("}\n", f", packed_length: {SQUAD_PACKED_LENGTH}" +
                            (f", lora: {{rank: {lora[0]}, targets: [{lora[1]}]}}" if lora else "") + "}\n")
    else:
        extra = f"  packed_length: {SQUAD_PACKED_LENGTH}\n" + (
            f"  lora: {{rank: {lora[0]}, targets: [{lora[1]}]}}\n" if lora else "")
        text = open(os.path.join(ROOT, "configs", "models", model)).read().replace("\ngpt:\n", "\ngpt:\n" + extra, 1)
    path = os.path.join(tmp, f"ft-{model.replace('.yaml', '')}-{'lora' if lora else 'sft'}.yaml")
    open(path, "w").write(text)
    return path


def run_finetune(tmp):
    rows = []
    for src, task, model, cluster, n, t, p, v, lora, recipe, engine, pub in FINETUNE:
        flags = ["--tp", str(t), "--pp", str(p), "--cp", "1", "--global-batch", "32", "--microbatch", "1", "--seq",
                 "4096", "--precision", "fp8", "--zero", "0,1", "--recompute", "none", "--grad-dtype", "bf16"]
        flags += RECIPE_FLAGS.get(recipe, []) + FP8_PARAMS.get(recipe, []) + schedule_flags(v)
        flags += ["--sp", "on", "--tp-comm-overlap", "on"] if t > 1 else []
        # NeMo 24.07's SFT (launcher conf/peft/llama/sft.yaml: distributed_fused_adam, dtype bf16) with fp8_params:
        # NeMo r2.0.0rc1 megatron_base_model.py L784-806 forces Apex's store_params, a bf16 master shard beside the
        # bf16 moments (bf16-master, 6 B). Its LoRA scripts run fused_adam with fp32 masters (O2) on the adapters.
        flags += ["--optimizer-state", "bf16-master"] if engine == "nemo-24" and task == "SFT" else []
        plan, err = solve(finetune_model(tmp, model, lora), os.path.join(ROOT, "configs", "clusters", cluster), n,
                          flags + engine_args(tmp, engine)[0])
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        add_check("megatron-core", "fp8", pred, pub)
        gpu = "GB200" if cluster.startswith("gb200") else "H100"
        name = model.replace(".yaml", "")
        rows.append((f"{src} {task} {name} {gpu} n{n} tp{t} pp{p} vp{v}{f' r{lora[0]} {lora[1]}' if lora else ''} "
                     f"fp8-{recipe}", pub, pred, layout(plan) if plan else "REFUSED: " + err))
    return rows


# Checks, not calibration: torchtitan's Dec 2024 benchmarks (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md;
# Grand Teton H100 96 GB HBM2e at 500 W, h100-96gb-500w.yaml; TPS/GPU and GiB as published) beside the two calibration
# rows: (table, run, model, GPUs, tp, pp, cp, v, local batch, microbatch, seq, precision, recompute, engine, async TP,
# TPS/GPU, GiB). FSDP2 everywhere (ZeRO-3; under PP without reshard after forward), SAC = op-level selective
# (op_sac), Float8 = torchao tensorwise; under PP the microbatch count is torchtitan's default then, the pp degree
# (8: microbatch 4 of the local batch 32), which the published 1F1B / interleaved ratio (1.28) fits; interleaved with
# 2 stages per rank. Table 4's async-TP row is not a check: the engine's tp_comm_overlap_hidden is measured on it.
TORCHTITAN_2412 = [
    ("T1", "8B n8 FSDP compile", "llama3-8b.yaml", 8, 1, 1, 1, 1, 2, 2, 8192, "bf16", "selective", "torchtitan-compile", 0, 6667, 77.0),
    ("T1", "8B n8 FSDP compile float8", "llama3-8b.yaml", 8, 1, 1, 1, 1, 2, 2, 8192, "fp8", "selective", "torchtitan-compile", 0, 8532, 76.8),
    ("T2", "8B n8 FSDP8 CP1 32K float8 full-AC", "llama3-8b.yaml", 8, 1, 1, 1, 1, 1, 1, 32768, "fp8", "full", "torchtitan-compile", 0, 3890, 83.9),
    ("T2", "8B n8 FSDP4 CP2 64K float8 full-AC", "llama3-8b.yaml", 8, 1, 1, 2, 1, 1, 1, 65536, "fp8", "full", "torchtitan-compile", 0, 2540, 84.2),
    ("T2", "8B n8 FSDP2 CP4 128K float8 full-AC", "llama3-8b.yaml", 8, 1, 1, 4, 1, 1, 1, 131072, "fp8", "full", "torchtitan-compile", 0, 1071, 84.0),
    ("T2", "8B n8 FSDP1 CP8 256K float8 full-AC", "llama3-8b.yaml", 8, 1, 1, 8, 1, 1, 1, 262144, "fp8", "full", "torchtitan-compile", 0, 548, 84.5),
    ("T3", "8B n128 FSDP", "llama3-8b.yaml", 128, 1, 1, 1, 1, 2, 2, 8192, "bf16", "selective", "torchtitan", 0, 5605, 67.0),
    ("T3", "8B n128 FSDP compile", "llama3-8b.yaml", 128, 1, 1, 1, 1, 2, 2, 8192, "bf16", "selective", "torchtitan-compile", 0, 6514, 62.0),
    ("T4", "70B n256 FSDP32 TP8 float8 full-AC", "llama3-70b.yaml", 256, 8, 1, 1, 1, 16, 16, 8192, "fp8", "full", "torchtitan-compile", 0, 829, 71.9),
    ("T4", "70B n256 FSDP32 TP8 float8 full-AC async-TP (sets the engine's TP overlap)", "llama3-70b.yaml", 256, 8, 1, 1, 1, 16, 16, 8192, "fp8", "full", "torchtitan-compile", 1, 876, 67.6),
    ("T5", "405B n512 FSDP8 TP8 PP8 1F1B float8 async-TP", "llama3.1-405b.yaml", 512, 8, 8, 1, 1, 32, 4, 8192, "fp8", "full", "torchtitan-compile", 1, 100, 82.5),
    ("T5", "405B n512 FSDP8 TP8 PP8 interleaved float8 async-TP", "llama3.1-405b.yaml", 512, 8, 8, 1, 2, 32, 4, 8192, "fp8", "full", "torchtitan-compile", 1, 128, 72.7),
    ("T6", "405B n512 FSDP8 TP8 PP8 CP1 32K", "llama3.1-405b.yaml", 512, 8, 8, 1, 1, 8, 1, 32768, "fp8", "full", "torchtitan-compile", 1, 76, 75.3),
    ("T6", "405B n512 FSDP4 TP8 PP8 CP2 64K", "llama3.1-405b.yaml", 512, 8, 8, 2, 1, 8, 1, 65536, "fp8", "full", "torchtitan-compile", 1, 47, 75.9),
    ("T6", "405B n512 FSDP2 TP8 PP8 CP4 128K", "llama3.1-405b.yaml", 512, 8, 8, 4, 1, 8, 1, 131072, "fp8", "full", "torchtitan-compile", 1, 31, 77.1),
    ("T6", "405B n512 FSDP1 TP8 PP8 CP8 256K", "llama3.1-405b.yaml", 512, 8, 8, 8, 1, 8, 1, 262144, "fp8", "full", "torchtitan-compile", 1, 16, 84.9),
]

# Checks, not calibration: Megatron-Core's newer H100 FP8 recipes (NVIDIA-NeMo/Megatron-Bridge
# docs/performance-summary-archive.md, releases 25.09 to 26.04.01; NVIDIA/Megatron-LM examples/llama/README.md at
# core_r0.12; the NeMo 25.02 performance page): (source, model file, GPUs, global batch, microbatch, seq, tp, pp, cp,
# vp, ep, FP8 recipe: cs current scaling / ds delayed, extra flags, tokens/s/GPU). The recipes (Megatron-Bridge
# scripts/performance configs): distributed optimizer, grad_reduce_in_fp32 False (bf16 gradients), TP communication
# overlap (userbuffers) where tp > 1 except where the extra flags turn it off (Qwen3-235B's H100 recipe:
# CommOverlapConfig(tp_comm_overlap=False); DeepSeek-V3's recipe default), no recompute unless named, the MoE
# all-to-all overlapped where moe_a2a_overlap is set, experts force-balanced (dropless). Dispatchers: Qwen3-235B
# alltoall (the recipe's moe_token_dispatcher_type), Qwen3-30B-A3B flex + HybridEP, DeepSeek-V3 25.09 flex + DeepEP
# (run_script.py enable_deepep on H100, overlap_grad_reduce False). Qwen3-30B-A3B on 16 H100 in FP8: EP 16 at 26.04.01
# (8826 / 8901 / 8960 tokens/s/GPU at 26.06 / 26.04 / 26.04.01: stable) and PP 2 VP 12 EP 8 at 26.02.01 (9058; the
# same layout at 26.02: 5113). Left out: Qwen3-30B-A3B at 25.11 (5275 tokens/s/GPU, half of 25.09's 10494 for the
# same layout) and at 26.02, and GPT-OSS-120B (no model file).
MEGATRON_BRIDGE = [
    ("MB 25.11", "llama3-70b.yaml", 64, 128, 1, 8192, 4, 8, 1, 5, 1, "cs", [], 1602),
    ("MB 25.11", "llama3.1-405b.yaml", 1024, 512, 1, 8192, 8, 8, 2, 8, 1, "cs", [], 292),
    ("MB 26.04.01", "llama3-70b.yaml", 64, 256, 1, 8192, 4, 8, 1, 5, 1, "cs", [], 1664),
    ("MB 26.04.01", "llama3.1-405b.yaml", 1024, 1536, 1, 8192, 8, 8, 2, 8, 1, "cs", [], 328),
    ("Megatron-LM core_r0.12", "llama3-8b.yaml", 8, 128, 1, 8192, 1, 1, 2, 1, 1, "ds", [], 13812),
    ("Megatron-LM core_r0.12", "llama3-70b.yaml", 64, 128, 1, 8192, 4, 8, 1, 5, 1, "ds", [], 1621),
    ("Megatron-LM core_r0.12", "llama3.1-405b.yaml", 1024, 512, 1, 8192, 8, 8, 2, 8, 1, "ds", [], 315),
    ("NeMo 25.02", "gpt3-175b.yaml", 512, 2048, 2, 2048, 4, 8, 1, 6, 1, "ds", [], 866),
    ("MB 26.04.01", "qwen3-30b-a3b.yaml", 16, 1024, 1, 4096, 1, 1, 1, 1, 16, "cs", ["--moe-dispatcher", "flex"], 8960),
    ("MB 26.02.01", "qwen3-30b-a3b.yaml", 16, 1024, 1, 4096, 1, 2, 1, 12, 8, "cs", ["--moe-dispatcher", "flex"], 9058),
    ("MB 25.11", "qwen3-235b-a22b.yaml", 256, 2048, 1, 4096, 2, 8, 1, 4, 32, "cs",
     ["--moe-overlap", "on", "--tp-comm-overlap", "off"], 1575),
    ("MB 26.04.01", "qwen3-235b-a22b.yaml", 256, 8192, 1, 4096, 2, 8, 1, 4, 32, "cs",
     ["--moe-overlap", "on", "--tp-comm-overlap", "off"], 1712),
    ("MB 25.09", "deepseek-v3.yaml", 1024, 8192, 1, 4096, 2, 8, 1, 4, 64, "cs",
     ["--moe-overlap", "on", "--moe-dispatcher", "flex", "--tp-comm-overlap", "off", "--overlap-grad-reduce", "off",
      "--pipeline-model-parallel-layout", "Et|(tt|)*30mL", "--recompute", "selective",
      "--recompute-modules", "mla_up_proj,mlp"], 1297),
]

# Checks, not calibration: published Megatron-Core MoE runs on H100 in bf16 with their step times, among them
# two A/B pairs of the EP all-to-all overlap (--overlap-moe-expert-parallel-comm). (source, model file, GPUs, global
# batch, microbatch, seq, tp, pp, vp, ep, extra flags, published step seconds). Sources: Megatron-Bridge
# skills/nemo-mbridge-perf-expert-parallel-overlap/SKILL.md ("HybridEP Production-Shape Benchmark", 2026-07-25:
# 16 H100, TP1 PP1 EP16, MBS1 GBS1024, seq 4096, force-balanced, flex + HybridEP; the Nsight share that
# megatron-core.yaml's moe_a2a_hidden takes comes from the same pair); yanring/Megatron-MoE-ModelZoo
# best_practice/qwen3/readme.md at 020b8136 (256 H100, seq 4096, GBS 2048, distributed optimizer, overlapped DP,
# no TP communication overlap; recompute "norm, act" = --recompute-modules layernorm moe_act; DeepEP = flex,
# A2A = alltoall). Two software generations: the EP 32 rows ran the moe_dev branch (f3e6c5), the EP 8 rows Megatron-LM
# main 1e057005 (May 2025: no moe_router / moe_preprocess CUDA-graph scopes, so an eager MoE path with a host sync per
# layer in either dispatcher). Every row's command forces balance: examples/qwen3/run_235b.sh at 31c5686 (committed
# with the readme's table, 2025-05-27) passes --moe-router-force-load-balancing on all five ("for stable
# benchmarking"), so all are costed balanced and the EP 8 rows' error is not routing. That script's tp 4 command also
# passes --moe-router-aux-loss-fusion, which Megatron-LM 1e057005 does not parse: the run behind its 29.0 s differs from
# the script in some unknown way. Its FSDP command runs --no-gradient-accumulation-fusion (not costed: slower).
MOE_H100 = [
    ("Bridge skill", "qwen3-30b-a3b.yaml", 16, 1024, 1, 4096, 1, 1, 1, 16,
     ["--moe-dispatcher", "flex", "--grad-dtype", "bf16"], 24.7138),
    ("Bridge skill", "qwen3-30b-a3b.yaml", 16, 1024, 1, 4096, 1, 1, 1, 16,
     ["--moe-dispatcher", "flex", "--grad-dtype", "bf16", "--moe-overlap", "on"], 20.9920),
    ("ModelZoo", "qwen3-235b-a22b.yaml", 256, 2048, 1, 4096, 2, 8, 4, 32,
     ["--moe-dispatcher", "flex", "--recompute", "selective", "--recompute-modules", "layernorm,moe_act"], 19.7),
    ("ModelZoo", "qwen3-235b-a22b.yaml", 256, 2048, 1, 4096, 2, 8, 4, 32,
     ["--moe-dispatcher", "flex", "--recompute", "selective", "--recompute-modules", "layernorm,moe_act",
      "--moe-overlap", "on"], 17.6),
    ("ModelZoo", "qwen3-235b-a22b.yaml", 256, 2048, 4, 4096, 2, 1, 1, 8,
     ["--moe-dispatcher", "flex", "--recompute", "full", "--zero", "3"], 17.6),
    ("ModelZoo", "qwen3-235b-a22b.yaml", 256, 2048, 1, 4096, 2, 32, 3, 8,
     ["--recompute", "selective", "--recompute-modules", "layernorm,moe_act"], 24.2),
    ("ModelZoo", "qwen3-235b-a22b.yaml", 256, 2048, 1, 4096, 4, 8, 4, 8,
     ["--moe-dispatcher", "flex", "--recompute", "none"], 29.0),
]


def run_moe_h100(cluster):
    rows = []
    for src, model, n, B, b, seq, t, p, v, ep, extra, step_s in MOE_H100:
        flags = ["--tp", str(t), "--pp", str(p), "--cp", "1", "--global-batch", str(B), "--microbatch", str(b),
                 "--seq", str(seq), "--precision", "bf16", "--ep", str(ep), "--etp", "1"] + schedule_flags(v)
        flags += ["--zero", "1"] if "--zero" not in extra else []
        flags += ["--sp", "on"] if t > 1 else []
        plan, err = solve(os.path.join(ROOT, "configs", "models", model), cluster, n, flags + extra)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        name = (f"{src} {model[:-5]} n{n} tp{t} pp{p} vp{v} ep{ep} B{B} b{b} "
                + ("flex" if "flex" in extra else "alltoall") + (" overlap" if "--moe-overlap" in extra else ""))
        add_check("megatron-core", "bf16", pred, B * seq / n / step_s, moe=True)
        rows.append((name, B * seq / n / step_s, pred, layout(plan) if plan else "REFUSED: " + err))
    return rows


# The same readme's long-context table (ModelZoo commit b0b92ff, 2025-11-04): Qwen3-235B-A22B on 256 H100, TP 4, PP 8,
# VPP 4, EP 8, CP 1 / 2 / 4 / 8 at seq 16K / 32K / 64K / 128K, GBS 256, DeepEP (flex), selective recompute of
# layernorm and moe, forced balance. Its TFLOP/s/GPU (295 / 335 / 368 / 389) are Megatron-LM's
# num_floating_point_operations (megatron/training/training.py, identical at 1e057005 and d4194b7: causal attention
# counted as half, no recompute counted): FLOPs per token = 1.29110e11 + 4 620 288 s for this model, so tokens/s/GPU
# 1440 / 1194 / 852 / 529. (seq, cp, published tokens/s/GPU)
MOE_LONG_H100 = [(16384, 1, 1440), (32768, 2, 1194), (65536, 4, 852), (131072, 8, 529)]


# The same table's dropless rows (no forced balance): 237 / 277 / 320 / 357
# TFLOP/s/GPU at 16K / 32K / 64K / 128K. (seq, cp, published TFLOP/s/GPU)
MOE_LONG_DROPLESS_H100 = [(16384, 1, 237), (32768, 2, 277), (65536, 4, 320), (131072, 8, 357)]


def qwen3_235b_flops_per_token(seq):
    """Megatron-LM's num_floating_point_operations per token for Qwen3-235B-A22B (causal attention as half)."""
    return 1.29110e11 + 4620288 * seq


def moe_long_solve(cluster, seq, cp, extra=()):
    flags = ["--tp", "4", "--pp", "8", "--cp", str(cp), "--global-batch", "256", "--microbatch", "1", "--seq",
             str(seq), "--precision", "bf16", "--ep", "8", "--etp", "1", "--zero", "1", "--sp", "on",
             "--moe-dispatcher", "flex", "--recompute", "selective", "--recompute-modules", "layernorm,moe"]
    return solve(os.path.join(ROOT, "configs", "models", "qwen3-235b-a22b.yaml"), cluster, 256,
                 flags + schedule_flags(4) + list(extra))


def run_moe_long(cluster):
    rows = []
    for seq, cp, pub in MOE_LONG_H100:
        plan, err = moe_long_solve(cluster, seq, cp)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        add_check("megatron-core", "bf16", pred, pub, moe=True)
        rows.append((f"qwen3-235b-a22b seq {seq} cp {cp}", pub, pred, layout(plan) if plan else "REFUSED: " + err))
    return rows


def run_moe_long_dropless(cluster):
    """The dropless rows: the busiest EP rank's token share (--moe-imbalance) solved on the 16K row alone (bisection on
    the predicted tokens/s), then the 32K-128K rows predicted with it: a check that one imbalance, a property of the
    routing and not of the sequence, carries across MoE's falling share of the step. Returns (imbalance, rows); the
    first row is the one the imbalance was solved on."""
    def tokens(seq, cp, imbalance):
        plan, err = moe_long_solve(cluster, seq, cp, ["--moe-imbalance", f"{imbalance:.6f}"])
        return (plan["predicted"]["tokens_per_second_per_gpu"], layout(plan)) if plan else (None, "REFUSED: " + err)
    seq0, cp0, tf0 = MOE_LONG_DROPLESS_H100[0]
    target, lo, hi = tf0 * 1e12 / qwen3_235b_flops_per_token(seq0), 1.0, 4.0
    if tokens(seq0, cp0, lo)[0] is None:
        return None, []
    for _ in range(30):  # predicted tokens/s falls as the imbalance grows
        mid = (lo + hi) / 2
        got = tokens(seq0, cp0, mid)[0]  # a refused layout (more stash) counts as too slow
        lo, hi = (mid, hi) if got is not None and got > target else (lo, mid)
    imbalance = (lo + hi) / 2
    rows = []
    for i, (seq, cp, tf) in enumerate(MOE_LONG_DROPLESS_H100):
        pred, lay = tokens(seq, cp, imbalance)
        rows.append((f"qwen3-235b-a22b seq {seq} cp {cp} dropless" + (" (imbalance solved here)" if i == 0 else ""),
                     tf * 1e12 / qwen3_235b_flops_per_token(seq), pred, lay))
    return imbalance, rows


# One MoELayer on 8 H100 (EP 8 inside a node, TP 1, sequence 4096, microbatch 1, forced-balanced routing, no
# attention), forward and backward ms as CUDA events time them: Megatron-LM's MoE performance regression test,
# tests/functional_tests/test_cases/common/moe_perf/ (test_cases.py: the proxies; __main__.py: TransformerConfig
# defaults, so an ungated GeLU MLP, permute and router fusion on, TE grouped GEMM; baseline.json, commit 32f2c9cf).
# deepep and hybridep both run Megatron's flex dispatcher; fp8 is hybrid blockwise. A kernel-level check of the MoE
# MLP: the prediction is a one-layer model's stage minus the same model with the MoE MLP left out. The harness never
# passes the proxies' moe_shared_expert_intermediate_size, so the DeepSeek layer has no shared expert (none here), and
# it leaves bias_activation_fusion off: GeLU unfused, fp32 routing probabilities multiplied in (docs/performance.md).
MOE_PROXIES = {
    "mixtral": {"hidden": 4096, "moe": "experts: 8, top_k: 2, expert_ffn: 14336, router: softmax"},
    "deepseek": {"hidden": 7168, "moe": "experts: 32, top_k: 8, expert_ffn: 2048, route_groups: 8, "
                                        "route_group_limit: 4, router: sigmoid"},
}
MOE_LAYER_H100 = [  # (proxy, backend, precision, forward ms, backward ms)
    ("mixtral", "alltoall", "bf16", 4.262, 7.825), ("mixtral", "deepep", "bf16", 4.609, 8.030),
    ("mixtral", "hybridep", "bf16", 4.414, 7.840), ("deepseek", "alltoall", "bf16", 6.943, 10.453),
    ("deepseek", "deepep", "bf16", 5.425, 9.059), ("deepseek", "hybridep", "bf16", 5.246, 8.846),
    ("mixtral", "alltoall", "fp8", 3.676, 6.719), ("mixtral", "deepep", "fp8", 4.029, 6.942),
    ("mixtral", "hybridep", "fp8", 3.738, 6.641), ("deepseek", "alltoall", "fp8", 7.414, 10.088),
    ("deepseek", "deepep", "fp8", 5.841, 8.589), ("deepseek", "hybridep", "fp8", 5.001, 7.716),
]


def moe_layer_model(tmp, proxy, precision, with_moe):
    """A one-layer model file: embedding, the proxy's moe_block (or its attention and two norms alone), head, loss."""
    h, moe = MOE_PROXIES[proxy]["hidden"], MOE_PROXIES[proxy]["moe"]
    common = "heads: 8, position: rope, bias: false, dropout: false"
    body = ([f"  - {{type: moe_block, {common}, act: gelu, norm: rmsnorm, {moe}}}"] if with_moe else
            ["  - {type: rmsnorm}", f"  - {{type: attention, {common}}}", "  - {type: rmsnorm}"])
    text = "\n".join(["format_version: 1", f"name: {proxy}-layer", f"dtype: {precision}", "global_batch: 8",
                      "input: [4096]", "layers:", f"  - {{type: embedding, vocab: 128, hidden: {h}, dropout: false}}"]
                     + body + ["  - {type: lm_head, vocab: 128, tied: false}", "  - {type: loss}"]) + "\n"
    path = os.path.join(tmp, f"{proxy}-{precision}-{'moe' if with_moe else 'attn'}.yaml")
    open(path, "w").write(text)
    return path


def run_moe_layer(tmp, cluster):
    """(case, measured fwd ms, predicted, measured bwd ms, predicted, note) per MOE_LAYER_H100 row."""
    # The test's layer has no main_grad (no DDP wrapper; TransformerConfig's gradient_accumulation_fusion False).
    unfused = (r"^wgrad_accumulation: fused", "wgrad_accumulation: separate")
    layer = megatron_core_variant(tmp, "megatron-core-layer", *unfused)
    blockwise = megatron_core_variant(tmp, "megatron-core-layer-fp8-blockwise", r"^fp8_recipe: delayed",
                                      "fp8_recipe: blockwise", unfused)
    base = ["--tp", "1", "--pp", "1", "--cp", "1", "--global-batch", "8", "--microbatch", "1", "--recompute", "none",
            "--zero", "1", "--schedule", "1f1b"]
    rows = []
    for proxy, backend, precision, fwd, bwd in MOE_LAYER_H100:
        engine = ["--engine", blockwise if precision == "fp8" else layer]
        dispatch = ["--moe-dispatcher", "alltoall" if backend == "alltoall" else "flex"]
        parts = []
        for with_moe in (True, False):
            flags = base + engine + (["--ep", "8", "--etp", "1"] + dispatch if with_moe else [])
            plan, err = solve(moe_layer_model(tmp, proxy, precision, with_moe), cluster, 8, flags)
            if plan is None:
                break
            st = plan["stages"][0]
            parts.append((st["forward_seconds"], st["backward_input_seconds"] + st["backward_weight_seconds"]))
        name = f"{proxy} {backend} {precision}"
        if len(parts) < 2:
            rows.append((name, fwd, None, bwd, None, "REFUSED: " + err))
            continue
        rows.append((name, fwd, 1e3 * (parts[0][0] - parts[1][0]), bwd, 1e3 * (parts[0][1] - parts[1][1]), ""))
    return rows


# Checks, not calibration: Megatron-DeepSpeed's largest published runs, on DeepSpeed's PipelineEngine (1F1B, no
# interleaving). (name, model file text, GPUs, global batch, microbatch, tp, pp, flags, published step seconds, cluster
# file where not the A100 default).
# Megatron-Turing NLG 530B (Smith et al. 2022, arXiv 2201.11990 section 2.4 and its Figure/Table of system throughput:
# 105 layers, h 20480, 128 heads, seq 2048, GBS 1920 on 280 / 350 / 420 DGX A100 80 GB, TP 8, PP 35; 60.1 / 50.2 /
# 44.4 s per iteration = 126 / 121 / 113 TFLOP/s per GPU in Megatron's eq. 3), full activation checkpointing.
# BLOOM-176B (bigscience-workshop/bigscience README.md at 39ed8110, "Important checkpoints": iteration 85376, "elapsed
# time per iteration (s): 104.70 ... TFLOPs: 149.77"; train/tr11-176B-ml/tr11-176B-ml.slurm at dc8d99ff: TP 4, PP 12,
# DP 8 on 384 A100 80 GB, MBS 2, GBS 2048, 70 layers, h 14336, 112 heads, vocab 250880, bf16, full checkpointing,
# DeepSpeed's bf16 optimizer sharding its states as ZeRO-1 does), on Jean Zay's network (4 Omni-Path 100 Gb/s links
# per 8-GPU node: configs/clusters/jean-zay-a100.yaml); MT-NLG on Selene (dgx-a100). BF16_Optimizer's fp32
# accumulation of every microbatch's gradients is the deepspeed engine's grad_accumulation_bytes (+5% measured when it
# arrived: chronicles-prequel.md). Not costed, BLOOM: the job's CUDA_LAUNCH_BLOCKING=1 (tr11-176B-ml.slurm; the
# chronicles measured -6% at 80 GPUs, 0 at 160).
MTNLG = gpt("mt-nlg-530b", 105, 20480, 128, batch=1920)
BLOOM = gpt("bloom-176b", 70, 14336, 112, vocab=250880, batch=2048).replace("precision: fp16", "precision: bf16")
DEEPSPEED_A100 = [
    ("BLOOM 176B", BLOOM, 384, 2048, 2, 4, 12, ["--precision", "bf16"], 104.70, "jean-zay-a100.yaml"),
    ("MT-NLG 530B", MTNLG, 2240, 1920, 1, 8, 35, [], 60.1, None),
    ("MT-NLG 530B", MTNLG, 2800, 1920, 1, 8, 35, [], 50.2, None),
    ("MT-NLG 530B", MTNLG, 3360, 1920, 1, 8, 35, [], 44.4, None),
]


def run_deepspeed_a100(tmp, cluster):
    rows = []
    for name, text, n, B, b, t, p, extra, step_s, own in DEEPSPEED_A100:
        path = os.path.join(tmp, f"ds-{name.split()[0]}.yaml")
        open(path, "w").write(text)
        flags = ["--engine", "deepspeed", "--tp", str(t), "--pp", str(p), "--cp", "1", "--sp", "off", "--recompute",
                 "full", "--microbatch", str(b), "--global-batch", str(B), "--schedule", "1f1b", "--zero", "0,1"] + extra
        plan, err = solve(path, os.path.join(ROOT, "configs", "clusters", own) if own else cluster, n, flags)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        prec = extra[extra.index("--precision") + 1] if "--precision" in extra else "fp16"
        add_check("deepspeed", prec, pred, B * 2048 / n / step_s)
        rows.append((f"{name} t{t} p{p} n{n} B{B} b{b}", B * 2048 / n / step_s, pred,
                     layout(plan) if plan else "REFUSED: " + err))
    return rows


def table_layer(title, rows):
    """Forward and backward ms of one layer, measured and predicted; returns both errors of every row."""
    print(f"\n### {title}\n\n| case | forward ms | predicted | error | backward ms | predicted | error |\n"
          "|---|---|---|---|---|---|---|")
    errs = []
    for name, fwd, pf, bwd, pb, note in rows:
        if pf is None:
            print(f"| {name} | {fwd:.2f} | - | - | {bwd:.2f} | - | {note} |")
            continue
        ef, eb = (pf - fwd) / fwd, (pb - bwd) / bwd
        errs += [ef, eb]
        print(f"| {name} | {fwd:.2f} | {pf:.2f} | {100 * ef:+.1f}% | {bwd:.2f} | {pb:.2f} | {100 * eb:+.1f}% |")
    return errs


MEGATRON_2021 = ["--zero", "0", "--overlap-grad-reduce", "off", "--overlap-param-gather", "off"]
# Schedules Megatron-Core runs.
MEGATRON_SCHEDULES = ["--schedule", "1f1b,interleaved"]


BAND_ROWS = []  # (engine, precision, signed error) of every row in the summaries
CHECK_ROWS = []  # (engine, precision, signed error) of the published check rows of dense models, every engine
MOE_ROWS = []  # (engine, precision, signed error, calibration run?) of every MoE row (balanced routing): band_moe


def add_check(engine, precision, pred, pub, moe=False):
    """A published check row's signed error into its band's pool: band_moe's (MOE_ROWS, routed experts) or band's
    (CHECK_ROWS); nothing for a refused row (pred None)."""
    if pred is None:
        return
    if moe:
        MOE_ROWS.append((engine, precision, (pred - pub) / pub, False))
    else:
        CHECK_ROWS.append((engine, precision, (pred - pub) / pub))


FREE = []  # free-search rows: (run, tp-pp-dp, cp, plan, MFU %, published layout's time / free time, modelled reason)


def free_reason(pub, free):
    """The modelled reason the free plan is faster than the published layout: the iteration difference split into
    the pipeline bubble, recompute (hardware FLOPs beyond the model's), exposed data-parallel time, and the rest
    (compute rates and TP / CP / EP communication), largest first, in seconds per iteration."""
    def parts(p):
        x = p["predicted"]
        t = x["iteration_seconds"]
        bubble = x["pipeline_seconds"] * x["bubble_fraction"]
        recompute = (x["pipeline_seconds"] - bubble) * (1 - x["mfu"] / x["hfu"]) if x["hfu"] > 0 else 0
        dp = x["dp_allreduce_seconds"] + x["optimizer_seconds"]
        return {"pipeline bubble": bubble, "recompute": recompute, "exposed DP": dp,
                "compute and TP/CP/EP communication": t - bubble - recompute - dp}
    a, b = parts(pub), parts(free)
    d = sorted(((a[k] - b[k], k) for k in a), reverse=True)
    return ", ".join(f"{k} {v:+.2f} s" for v, k in d if abs(v) > 0.005 * pub["predicted"]["iteration_seconds"])


def eq3(l, h, s, v, batch):
    return 96 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def eq7(l, h, s, v, batch):
    return 72 * batch * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


KERNELS = None  # --kernels FILE: a measured Hopper table in place of the built-in one on the Hopper clusters' runs


def solve(model_path, cluster, gpus, flags):
    cmd = [PLANNER, "solve", "--gpus", str(gpus), "--model", model_path, "--cluster", cluster, "--top", "1", "--json"] + flags
    if KERNELS and "--kernels" not in flags and not any(a in os.path.basename(cluster) for a in ("a100", "jean-zay")):
        cmd += ["--kernels", KERNELS]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    return json.loads(r.stdout), None


def with_efficiency(cluster, eff, tmp):
    """A copy of the cluster file with `efficiency:` replaced (for --fit)."""
    if eff is None:
        return cluster
    lines = open(cluster).read().splitlines()
    out = [f"efficiency: {eff}" if l.startswith("efficiency:") else l for l in lines]
    path = os.path.join(tmp, f"{os.path.basename(cluster)}-{eff}.yaml")
    open(path, "w").write("\n".join(out) + "\n")
    return path


def layout(plan):
    return (f"b={plan['microbatch_size']} {plan['schedule']} v={plan['interleave']} "
            f"{plan['recompute']}" + (f" N={plan['recompute_num_layers']}" if plan.get('recompute_num_layers') else "")
            + (" acct" if plan.get('account_embedding_loss') else "") + f" zero={plan['zero_stage']}" + (" sp" if plan.get("sequence_parallel") else "")
            + (f" ep={plan['ep']} etp={plan['etp']}" if plan.get("ep", 1) > 1 else "")
            + (f" modules={','.join(plan['recompute_modules'])}" if plan.get("recompute_modules") else "")
            + (f" cp-comm={plan['inputs']['cp_comm_type']}" if plan.get("inputs", {}).get("cp_comm_type") else ""))


def run_megatron(tmp, cluster):
    rows = []
    for name, a, h, l, t, p, n, B, pub in MEGATRON_T1:
        path = os.path.join(tmp, f"t1-{name}.yaml")
        open(path, "w").write(gpt(f"t1-{name}", l, h, a, batch=B))
        # Megatron-LM as of 2021: no sequence parallelism, no distributed optimizer, no overlap of the
        # gradient all-reduce (SC'21 section 5).
        plan, err = solve(path, cluster, n, ["--tp", str(t), "--pp", str(p), "--cp", "1", "--sp", "off", "--recompute", "full",
                                             "--schedule", "interleaved,1f1b"] + MEGATRON_2021)
        pred = eq3(l, h, 2048, 51200, B) / (n * plan["predicted"]["iteration_seconds"]) / 1e12 if plan else None
        rows.append((f"{name} t{t} p{p} n{n} B{B}", pub, pred, layout(plan) if plan else err))
        # Free search with 2021's Megatron-LM (no SP, no distributed optimizer, no selective recompute).
        free, ferr = solve(path, cluster, n, ["--sp", "off", "--recompute", "none,full", "--schedule",
                                              "interleaved,1f1b"] + MEGATRON_2021)
        add_free(f"SC'21 {name} n{n} (A100)", plan, free, ferr)
    return rows


def run_korthikanti(tmp, cluster):
    rows = []
    for name, a, h, l, t, p, n, B, b, v, mfu_sel, mfu_full in KORTHIKANTI:
        path = os.path.join(tmp, f"k-{name}.yaml")
        open(path, "w").write(gpt(f"k-{name}", l, h, a, batch=B))
        # 175B and 530B: interleaved with 3 chunks (the paper); 22B has one stage; 1T: not stated, the planner chooses.
        sched = ["--schedule", "interleaved", "--interleave", str(v)] if v > 1 else MEGATRON_SCHEDULES
        for rc, sp, pub in (("selective", "on", mfu_sel), ("full", "off", mfu_full)):
            plan, err = solve(path, cluster, n, ["--tp", str(t), "--pp", str(p), "--cp", "1", "--sp", sp, "--recompute", rc,
                                                 "--microbatch", str(b)] + sched + MEGATRON_2021)
            pred = eq7(l, h, 2048, 51200, B) / (n * 312e12 * plan["predicted"]["iteration_seconds"]) if plan else None
            rows.append((f"{name} {rc}{' + SP' if sp == 'on' else ''} t{t} p{p} n{n}", 100 * pub, 100 * pred if pred else None,
                         layout(plan) if plan else err))
            if rc == "selective":  # free search with the 2022 software: SP, selective or full recompute, no ZeRO
                free, ferr = solve(path, cluster, n, MEGATRON_SCHEDULES + MEGATRON_2021)
                add_free(f"Korthikanti {name} n{n} (A100)", plan, free, ferr)
    return rows


def run_llama(tmp, cluster):
    rows = []
    model = os.path.join(ROOT, "configs", "models", "llama3.1-405b.yaml")
    for n, t, cp, p, d, s, B, pub in LLAMA3:
        # Meta's context parallelism all-gathers K and V (Llama 3 paper section 3.3.2): Megatron's --cp-comm-type
        # allgather, for the forced layout and for the free search beside it.
        cpc = ["--cp-comm-type", "allgather"] if cp > 1 else []
        plan, err = solve(model, cluster, n, ["--tp", str(t), "--pp", str(p), "--cp", str(cp), "--seq", str(s),
                                              "--global-batch", str(B), "--precision", "bf16"] + MEGATRON_SCHEDULES + cpc)
        pred = plan["predicted"]["mfu"] if plan else None
        rows.append((f"405B n{n} tp{t} cp{cp} pp{p} dp{d} seq{s}", 100 * pub, 100 * pred if pred else None,
                     layout(plan) if plan else err))
        # Free search over the same GPUs, sequence and batch: never predicted slower than the published layout.
        free, ferr = solve(model, cluster, n, ["--seq", str(s), "--global-batch", str(B), "--precision", "bf16"]
                           + MEGATRON_SCHEDULES + cpc)
        add_free(f"405B n{n} seq{s}", plan, free, ferr)
    return rows


def megatron_core_variant(tmp, name, pattern, replacement, *more):
    """configs/engines/megatron-core.yaml renamed `name` with the one line matching `pattern` replaced (and each
    further (pattern, replacement) pair in `more`): a variant whose shares cannot drift from Megatron-Core's. Exits
    when a line is not there (the file changed)."""
    text = open(os.path.join(ENGINES_DIR, "megatron-core.yaml")).read().replace("name: megatron-core", f"name: {name}", 1)
    for pat, rep in [(pattern, replacement)] + list(more):
        text, count = re.subn(pat, rep, text, count=1, flags=re.M)
        if count != 1:
            sys.exit(f"calibrate.py: megatron-core.yaml has no line matching {pat!r}; update the variant {name}")
    path = os.path.join(tmp, f"{name}.yaml")
    open(path, "w").write(text)
    return path


def deepseek_engine(tmp):
    """DeepSeek's engine (HAI-LLM, not public) as the V3 report runs it: Megatron-Core's kernels and shares
    with the report's DualPipe, which Megatron-Core does not run, and its dispatch kernels, which overlap the IB
    and NVLink hops (report section 3.2.2: "IB and NVLink communications are fully overlapped"); its rows join
    megatron-core's band."""
    return megatron_core_variant(tmp, "deepseek-v3-report", r"^schedules: \[[^\]]*\]",
                                 "schedules: [1f1b, interleaved, zb-h1, dualpipev]",
                                 (r"^moe_flex_hops: serial", "moe_flex_hops: overlapped"))


@functools.lru_cache(maxsize=None)
def nemo_engine(tmp):
    """Megatron-Core as NeMo-Framework-Launcher 24.03.01-24.07 ran it: Transformer Engine with NVTE_FUSED_ATTN 0
    (launcher_scripts/conf/config.yaml, "Disable cudnn FA until we've tested it more"; removed in 04b8d098,
    2024-08-29), so TE's DotProductAttention ran the flash-attn package's FlashAttention-2 kernels, not cuDNN's. The
    NeMo long-sequence (24.03.01) and performance-summary (24.07) rows run on it; they join megatron-core's band.
    Written once per run (cached): every NeMo row names the same file."""
    return megatron_core_variant(tmp, "megatron-core-nemo-24", r"^attention: cudnn .*$",
                                 "attention: fa2  # NVTE_FUSED_ATTN=0: TE's flash-attn backend (FlashAttention-2)",
                                 (r"^  bf16-moments: \[1\].*$",
                                  "  bf16-moments: [1]\n  bf16: [1]  # optim.dtype bf16: Apex DistributedFusedAdam, bf16 "
                                  "moments, no master (store_params false)\n  bf16-master: [1]  # ... with fp8_params: "
                                  "NeMo forces store_params, a bf16 master shard"))


def engine_args(tmp, engine):
    """(--engine flags, band engine) of a row's engine: nemo-24 is Megatron-Core with NeMo 24's FA-2 backend."""
    if engine == "nemo-24":
        return ["--engine", nemo_engine(tmp)], "megatron-core"
    return ["--engine", engine], engine


def schedule_flags(v):
    """The pipeline schedule of a published layout: interleaved with v chunks per rank, else 1F1B."""
    return ["--schedule", "interleaved", "--interleave", str(v)] if v > 1 else ["--schedule", "1f1b"]


def run_deepseek(tmp, cluster):
    rows = []
    model = os.path.join(ROOT, "configs", "models", "deepseek-v3.yaml")
    engine = ["--engine", deepseek_engine(tmp)]
    for name, flags, pub in DEEPSEEK:
        flags = flags + engine
        # The planner's default costing (--moe-overlap off: the all-to-all exposed); recompute: what fits
        # (the search finds DeepSeek's module set, RMSNorm, MLA up projections and SwiGLU, report
        # section 3.2.3). The row is also printed with --moe-overlap on (DualPipe's overlap as the
        # option models it) to show how far that option is from the published run.
        plan, err = solve(model, cluster, 2048, flags)
        on, _ = solve(model, cluster, 2048, flags + ["--moe-overlap", "on"])
        if on:
            rows.append((name + " (--moe-overlap on)", pub, on["predicted"]["tokens_per_second_per_gpu"], layout(on) + " (not in the summary)"))
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        rows.append((name, pub, pred, layout(plan) if plan else err))
        free, ferr = solve(model, cluster, 2048, engine)
        if plan and free:
            ratio = plan["predicted"]["iteration_seconds"] / free["predicted"]["iteration_seconds"]
            FREE.append((name.split(" n2048")[0] + " n2048", free["parallel"],
                         free["cp"], layout(free), 100 * free["predicted"]["mfu"], ratio, free_reason(plan, free)))
    return rows


_ENGINE_FLAG = None


def engine_flag_listed():
    """Whether `planner solve --help` lists --engine (asked once)."""
    global _ENGINE_FLAG
    if _ENGINE_FLAG is None:
        r = subprocess.run([PLANNER, "solve", "--help"], capture_output=True, text=True)
        _ENGINE_FLAG = "--engine" in r.stdout + r.stderr
    return _ENGINE_FLAG


def run_issue27(tmp, clusters):
    rows = []
    for name, model, cluster, n, flags, engine, pub, pub_mem in ISSUE27:
        eng, band = engine_args(tmp, engine)
        eng = eng if engine_flag_listed() else []
        plan, err = solve(os.path.join(ROOT, "configs", "models", model), clusters[cluster], n, flags + eng)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        # torchtitan logs the allocator's reserved peak (max_reserved): compared with the planner's reserved estimate.
        mem = plan["predicted"].get("peak_reserved_GiB", plan["predicted"]["peak_memory_GiB"]) if plan else None
        if pred is not None:
            BAND_ROWS.append((band, flags[flags.index("--precision") + 1], (pred - pub) / pub))
        rows.append((name, pub, pred, pub_mem, mem, (layout(plan) if plan else "REFUSED: " + err)
                     + (f" engine={plan['inputs']['engine'] if plan else band}" if eng else "")))
        # Free search over the same GPUs, workload, precision, engine and engine options (the layout flags dropped).
        free, ferr = solve(os.path.join(ROOT, "configs", "models", model), clusters[cluster], n,
                           without_layout(flags) + eng)
        add_free(name.split(" (")[0], plan, free, ferr)
    return rows


LAYOUT_FLAGS = {"--tp", "--pp", "--cp", "--zero", "--microbatch", "--schedule", "--interleave", "--vp", "--sp",
                "--recompute", "--recompute-modules"}


def without_layout(flags):
    """A forced row's flags without its layout (sizes, microbatch, schedule, ZeRO, SP, recompute): the free search's."""
    out, i = [], 0
    while i < len(flags):
        if flags[i] in LAYOUT_FLAGS:
            i += 2
            continue
        out.append(flags[i])
        i += 1
    return out


def add_free(run, plan, free, ferr):
    """One row of the free-search table: the published layout's predicted time over the free search's."""
    if plan and free:
        ratio = plan["predicted"]["iteration_seconds"] / free["predicted"]["iteration_seconds"]
        FREE.append((run, free.get("parallel", ""), free["cp"], layout(free), 100 * free["predicted"]["mfu"], ratio,
                     free_reason(plan, free)))
    elif plan:
        FREE.append((run, "-", "-", ferr, 0.0, 0.0, ""))


def run_nemo_long(tmp, cluster):
    rows = []
    eng = engine_args(tmp, "nemo-24")[0]
    model = os.path.join(ROOT, "configs", "models", "llama2-7b.yaml")
    for k, n, B, pub, t, p, d, cp in NEMO_LONG:
        s = 1024 * k
        plan, err = solve(model, cluster, n, ["--tp", str(t), "--pp", str(p), "--cp", str(cp), "--global-batch", str(B),
                                              "--seq", str(s), "--precision", "fp8"] + NEMO_2403 + eng)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] * nemo_llama2_flops_per_token(s) / 1e12 if plan else None
        if (k, n) not in NEMO_LONG_CALIBRATION:
            add_check("megatron-core", "fp8", pred, pub)
        rows.append((f"Llama 2 7B {k}K n{n} tp{t} pp{p} cp{cp} dp{d} B{B} fp8", pub, pred,
                     layout(plan) if plan else "REFUSED: " + err))
    return rows


def run_nemo_2407(tmp, cluster):
    rows = []
    for name, model, n, B, b, seq, t, p, cp, v, pub in NEMO_2407:
        if model in NEMO_MODELS:
            path = os.path.join(tmp, model + ".yaml")
            open(path, "w").write(f"format_version: 1\nname: {model}\nprecision: bf16\nglobal_batch: {B}\n"
                                  f"gpt: {{{NEMO_MODELS[model]}}}\n")
        else:
            path = os.path.join(ROOT, "configs", "models", model)
        flags = ["--tp", str(t), "--pp", str(p), "--cp", str(cp), "--global-batch", str(B), "--microbatch", str(b),
                 "--seq", str(seq), "--precision", "fp8", "--zero", "1", "--recompute", "none", "--grad-dtype", "bf16"]
        flags += schedule_flags(v)
        flags += ["--sp", "on", "--tp-comm-overlap", "on"] if t > 1 else []
        flags += ["--optimizer-state", NEMO_2407_OPTIM.get(name, "fp32-remainders")]
        plan, err = solve(path, cluster, n, flags + engine_args(tmp, "nemo-24")[0])
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        add_check("megatron-core", "fp8", pred, pub)
        rows.append((f"{name} n{n} tp{t} pp{p} cp{cp} vp{v} B{B} b{b} seq{seq} fp8", pub, pred,
                     layout(plan) if plan else "REFUSED: " + err))
    return rows


def run_torchtitan_2412(cluster):
    rows = []
    for tab, name, model, n, t, p, cp, v, lb, b, seq, prec, rc, eng, atp, pub, mem in TORCHTITAN_2412:
        dp = n // (t * p * cp)
        flags = ["--tp", str(t), "--pp", str(p), "--cp", str(cp), "--zero", "3", "--microbatch", str(b), "--global-batch",
                 str(dp * lb), "--seq", str(seq), "--precision", prec, "--recompute", rc, "--engine", eng]
        if p > 1:
            flags += schedule_flags(v)
        if t > 1:
            flags += ["--sp", "on", "--tp-comm-overlap", "on" if atp else "off"]
        plan, err = solve(os.path.join(ROOT, "configs", "models", model), cluster, n, flags)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        got = plan["predicted"].get("peak_reserved_GiB", plan["predicted"]["peak_memory_GiB"]) if plan else None
        lay = (layout(plan) if plan else "REFUSED: " + err) + f" engine={eng}"
        if "sets the" not in name:
            add_check(eng, prec, pred, pub)
        rows.append((f"{tab} {name}", pub, pred, mem, got, lay + (" (not in the summary)" if "sets the" in name else "")))
    return rows


# The published recipes' FP8 scaling as solve --fp8-recipe costs it: ds delayed (Megatron-Core's default), cs current
# scaling (Megatron --fp8-recipe tensorwise), mx MXFP8.
RECIPE_FLAGS = {"ds": [], "cs": ["--fp8-recipe", "current"], "mx": ["--fp8-recipe", "mxfp8"]}
# FP8 parameters as Megatron-Bridge's and NeMo 2's FP8 presets keep them (megatron/bridge/training/mixed_precision.py,
# v0.6.0, and nemo/collections/llm/recipes/precision/mixed_precision.py: fp8_param_gather True for delayed, current
# scaling and MXFP8; False for blockwise; scripts/performance/utils/precision.py picks them for fp8_cs / fp8_mx). NeMo
# 24.07's fine-tuning rows are assumed to run them too (fp8_params; its overrides were not found).
FP8_PARAMS = {"ds": ["--fp8-param-gather"], "cs": ["--fp8-param-gather"], "mx": ["--fp8-param-gather"]}


def run_megatron_bridge(cluster):
    rows = []
    for src, model, n, B, b, seq, t, p, cp, v, ep, recipe, extra, pub in MEGATRON_BRIDGE:
        flags = ["--tp", str(t), "--pp", str(p), "--cp", str(cp), "--global-batch", str(B), "--microbatch", str(b),
                 "--seq", str(seq), "--precision", "fp8", "--zero", "1", "--grad-dtype", "bf16"]
        if "--recompute" not in extra:
            flags += ["--recompute", "none"]
        if "--pipeline-model-parallel-layout" not in extra:
            flags += schedule_flags(v)
        flags += ["--sp", "on"] if t > 1 else []
        flags += ["--tp-comm-overlap", "on"] if t > 1 and "--tp-comm-overlap" not in extra else []
        flags += ["--ep", str(ep), "--etp", "1"] if ep > 1 else []
        flags += RECIPE_FLAGS[recipe] + FP8_PARAMS[recipe]
        plan, err = solve(os.path.join(ROOT, "configs", "models", model), cluster, n, flags + extra)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        add_check("megatron-core", "fp8", pred, pub, moe=ep > 1)
        rows.append((f"{src} {model[:-5]} n{n} tp{t} pp{p} cp{cp} vp{v} ep{ep} B{B} b{b} seq{seq} fp8-{recipe}", pub, pred,
                     layout(plan) if plan else "REFUSED: " + err))
    return rows


# Checks, not calibration: Megatron-Core on Blackwell (DGX B200, GB200 NVL72), FP8, the layouts the tables publish.
# NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md at 067f987d (last changed in 4ab94dfa): releases
# 25.11 (FP8-CS with FP8-MX in parentheses: Transformer Engine's current scaling and MXFP8, "32x32 granularity" on
# Blackwell) and 26.04.01 (GB200 MXFP8 rows). (source, model file, cluster file, GPUs, global batch, microbatch, seq,
# tp, pp, cp, vp, ep, FP8 recipe: cs | mx, extra flags, tokens/s/GPU). FSDP 64 is Megatron FSDP (--zero 3); recompute is
# not stated and left to the planner (the memory decides); TP communication overlap where tp > 1, as the recipes run.
# The MoE rows are BLACKWELL_MOE; not here: GPT-OSS (no model file), Qwen3-30B-A3B's 25.09 rows (they drop tokens) and
# NVFP4 (no table figure).
BLACKWELL = [
    ("MB 25.11", "llama3-8b.yaml", "b200.yaml", 8, 128, 2, 8192, 1, 1, 1, 1, 1, "cs", [], 30624),
    ("MB 25.11", "llama3-8b.yaml", "b200.yaml", 8, 128, 2, 8192, 1, 1, 1, 1, 1, "mx", [], 29521),
    ("MB 25.11", "llama3.1-405b.yaml", "b200.yaml", 128, 64, 1, 8192, 4, 8, 2, 8, 1, "cs", [], 661),
    ("MB 25.11", "llama3.1-405b.yaml", "b200.yaml", 128, 64, 1, 8192, 4, 8, 2, 8, 1, "mx", [], 624),
    ("MB 25.11", "llama3-8b.yaml", "gb200-nvl72.yaml", 8, 128, 2, 8192, 1, 1, 1, 1, 1, "cs", [], 31508),
    ("MB 25.11", "llama3-8b.yaml", "gb200-nvl72.yaml", 8, 128, 2, 8192, 1, 1, 1, 1, 1, "mx", [], 29789),
    ("MB 25.11", "llama3-70b.yaml", "gb200-nvl72.yaml", 64, 256, 2, 8192, 1, 1, 1, 1, 1, "cs", ["--zero", "3"], 4312),
    ("MB 25.11", "llama3.1-405b.yaml", "gb200-nvl72.yaml", 256, 1536, 1, 8192, 4, 16, 1, 4, 1, "cs", [], 813),
    ("MB 26.04.01", "llama3-70b.yaml", "gb200-nvl72.yaml", 64, 256, 1, 8192, 2, 4, 1, 5, 1, "mx", [], 3712),
    ("MB 26.04.01", "llama3.1-405b.yaml", "gb200-nvl72.yaml", 256, 1536, 1, 8192, 4, 16, 1, 8, 1, "mx", [], 800),
]

FLEX = ["--moe-dispatcher", "flex"]
FLEX_OVERLAP = FLEX + ["--moe-overlap", "on"]
# Whole-iteration CUDA graphs (Megatron-Bridge 26.06's cuda_graph_impl full_iteration): the GPU replays the step's
# launches, so the expert block's host launches cost nothing: run_blackwell costs these rows on a megatron-core
# variant whose moe_host launches are 0 (the planner has no CUDA-graph option).
GRAPHS = ["GRAPHS"]

# The same archive's MoE rows on Blackwell, 26.04.01, MXFP8, TP 1, force-balanced and dropless (the archive's note),
# and the 26.06 release's GB200 rows of the same models (docs/performance-summary.md at tag v0.5.0). BLACKWELL's
# columns. Dispatcher, EP overlap and CUDA graphs as the release's recipes set them (scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py at tags v0.4.1, 2026-05-06, and v0.5.0, 2026-06-16): 26.04.01 runs HybridEP (flex)
# on both Qwen3-30B-A3B rows and Qwen3-235B on GB200, alltoall on Qwen3-235B on B200, the EP all-to-all not
# overlapped (moe_a2a_overlap False), Transformer Engine CUDA graphs of the router and preprocess (and attention, except
# Qwen3-30B MXFP8 on GB200) only; 26.06 adds the EP overlap (moe_a2a_overlap), whole-iteration CUDA graphs
# (cuda_graph_impl full_iteration), CuTeDSL's fused expert MLP and FP8 attention (fp8_dot_product_attention), of
# which the planner costs the overlap; the graphs make the launches free, which the model already finds hidden
# behind the GPU's work at these shapes; the fused MLP and FP8 attention are not costed.
BLACKWELL_MOE = [
    ("MB 26.04.01", "qwen3-30b-a3b.yaml", "b200.yaml", 8, 512, 4, 4096, 1, 1, 1, 1, 8, "mx", FLEX, 27136),
    ("MB 26.04.01", "qwen3-30b-a3b.yaml", "gb200-nvl72.yaml", 8, 512, 4, 4096, 1, 1, 1, 1, 8, "mx", FLEX, 26112),
    ("MB 26.04.01", "qwen3-235b-a22b.yaml", "b200.yaml", 256, 8192, 1, 4096, 1, 8, 1, 1, 8, "mx", [], 3776),
    ("MB 26.04.01", "qwen3-235b-a22b.yaml", "gb200-nvl72.yaml", 256, 8192, 1, 4096, 1, 8, 1, 3, 32, "mx", FLEX, 5680),
    ("MB 26.06", "qwen3-30b-a3b.yaml", "gb200-nvl72.yaml", 8, 512, 4, 4096, 1, 1, 1, 1, 8, "mx",
     FLEX_OVERLAP + GRAPHS, 40706),
    ("MB 26.06", "qwen3-235b-a22b.yaml", "gb200-nvl72.yaml", 256, 8192, 1, 4096, 1, 8, 1, 3, 32, "mx",
     FLEX_OVERLAP + GRAPHS, 7376),
]


# GPT-OSS 120B at Megatron-Bridge 26.04.01 (docs/performance-summary-archive.md; the recipe at tag v0.4.2, where the
# release's two dispatcher cherry-picks landed: scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py,
# V2, GBS 1280, and utils/overrides.py): bf16 (fp32-free gradient reduce: grad_reduce_in_fp32 False), TP 1, the
# alltoall dispatcher, selective recompute of layernorm and moe_act, no CUDA graphs, no virtual pipeline and no
# embedding / loss accounting, forced balance (moe_router_force_load_balancing); GB200 adds the EP all-to-all overlap
# (moe_a2a_overlap). BLACKWELL's columns, recipe "bf16".
SEL_NORM_ACT = ["--recompute", "selective", "--recompute-modules", "layernorm,moe_act"]
GPT_OSS = [
    ("MB 26.04.01", "gpt-oss-120b.yaml", "dgx-h100.yaml", 64, 1280, 1, 4096, 1, 4, 1, 1, 8, "bf16", SEL_NORM_ACT, 5824),
    ("MB 26.04.01", "gpt-oss-120b.yaml", "b200.yaml", 64, 1280, 4, 4096, 1, 1, 1, 1, 8, "bf16", SEL_NORM_ACT, 13568),
    ("MB 26.04.01", "gpt-oss-120b.yaml", "gb200-nvl72.yaml", 64, 1280, 4, 4096, 1, 1, 1, 1, 64, "bf16",
     SEL_NORM_ACT + ["--moe-overlap", "on"], 16640),
]


def run_blackwell(tmp, table):
    """The rows of BLACKWELL or BLACKWELL_MOE; rows with routed experts (ep > 1) join MOE_ROWS (band_moe)."""
    rows = []
    graphs = megatron_core_variant(tmp, "megatron-core-graphs", r"^    fp8_delayed: \[4, 6\]", "    fp8_delayed: [0, 0]")
    for src, model, cluster, n, B, b, seq, t, p, cp, v, ep, recipe, extra, pub in table:
        graphed = "GRAPHS" in extra
        if graphed:
            extra = [x for x in extra if x != "GRAPHS"] + ["--engine", graphs]
        precision = "bf16" if recipe == "bf16" else "fp8"
        flags = ["--tp", str(t), "--pp", str(p), "--cp", str(cp), "--global-batch", str(B), "--microbatch", str(b),
                 "--seq", str(seq), "--precision", precision, "--grad-dtype", "bf16"] + RECIPE_FLAGS.get(recipe, [])
        flags += FP8_PARAMS.get(recipe, [])
        flags += [] if "--zero" in extra else ["--zero", "1"]
        flags += schedule_flags(v) + (["--sp", "on", "--tp-comm-overlap", "on"] if t > 1 else [])
        flags += ["--ep", str(ep), "--etp", "1"] if ep > 1 else []
        plan, err = solve(os.path.join(ROOT, "configs", "models", model), os.path.join(ROOT, "configs", "clusters", cluster),
                          n, flags + extra)
        pred = plan["predicted"]["tokens_per_second_per_gpu"] if plan else None
        add_check("megatron-core", precision, pred, pub, moe=ep > 1)
        gpu = "GB200" if cluster.startswith("gb200") else "H100" if cluster.startswith("dgx-h100") else "B200"
        rows.append((f"{src} {model[:-5]} {gpu} n{n} tp{t} pp{p} cp{cp} vp{v}{f' ep{ep}' if ep > 1 else ''} B{B} b{b} "
                     f"seq{seq} {'bf16' if recipe == 'bf16' else 'fp8-' + recipe}{' graphs' if graphed else ''}", pub,
                     pred,
                     layout(plan) if plan else "REFUSED: " + err))
    return rows


def table_mem(title, unit, rows):
    """table() with the published and predicted peak memory (GiB) beside the figure."""
    print(f"\n### {title}\n\n| run | published {unit} | predicted | error | published GiB | predicted GiB (reserved) | plan |\n"
          "|---|---|---|---|---|---|---|")
    errs = []
    for run, pub, pred, pub_mem, mem, plan in rows:
        pm = f"{pub_mem:.1f}" if pub_mem is not None else "-"
        if pred is None:
            print(f"| {run} | {pub:.1f} | - | - | {pm} | - | {plan} |")
            continue
        e = (pred - pub) / pub
        if "(not in the summary)" not in plan:
            errs.append(e)
        print(f"| {run} | {pub:.1f} | {pred:.1f} | {100 * e:+.1f}% | {pm} | {mem:.1f} | {plan} |")
    return errs


def table(title, unit, rows):
    print(f"\n### {title}\n\n| run | published {unit} | predicted | error | plan |\n|---|---|---|---|---|")
    errs = []
    for run, pub, pred, plan in rows:
        if pred is None:
            print(f"| {run} | {pub:.1f} | - | - | {plan} |")
            continue
        e = (pred - pub) / pub
        if "(not in the summary)" not in plan:
            errs.append(e)
        print(f"| {run} | {pub:.1f} | {pred:.1f} | {100 * e:+.1f}% | {plan} |")
    return errs


def summary(name, errs, expected):
    if not errs:
        print(f"{name}: no rows")
        return float("inf")
    mae = sum(abs(e) for e in errs) / len(errs)
    worst = max(abs(e) for e in errs)
    missing = expected - len(errs)
    print(f"{name}: {len(errs)} rows{' (' + str(missing) + ' failed)' if missing else ''}, mean |error| {100 * mae:.2f}%, "
          f"worst {100 * worst:.1f}%")
    return mae if not missing else float("inf")


ENGINES_DIR = os.path.join(ROOT, "configs", "engines")
BAND_PRECISIONS = ("bf16", "fp16", "fp8")


def bands():
    """{engine: ([(precision, low, high, runs, checks)], [the same for band_moe])} for every engine file, by the rule
    in the module docstring; band_moe where the engine has MoE rows at a precision: their spread joined with the
    dense band's (runs, checks: the MoE calibration and check rows)."""
    every = [e for _, _, e in BAND_ROWS]
    out = {}
    for f in sorted(os.listdir(ENGINES_DIR)):
        if not f.endswith(".yaml"):
            continue
        engine = f[:-5]
        rows, moe = [], []
        for p in BAND_PRECISIONS:
            group = ("bf16", "fp16") if p in ("bf16", "fp16") else (p,)
            errs = [e for eng, pr, e in BAND_ROWS if eng == engine and pr in group]
            checks = [e for eng, pr, e in CHECK_ROWS if eng == engine and pr in group]
            pool = errs + checks + [0.0] + (every if len(errs) + len(checks) < 3 else [])
            rows.append((p, math.floor(1000 * min(pool)) / 1000, math.ceil(1000 * max(pool)) / 1000, len(errs),
                         len(checks)))
            mrows = [(e, cal) for eng, pr, e, cal in MOE_ROWS if eng == engine and pr in group]
            if mrows:
                mpool = pool + [e for e, _ in mrows]
                moe.append((p, math.floor(1000 * min(mpool)) / 1000, math.ceil(1000 * max(mpool)) / 1000,
                            sum(1 for _, c in mrows if c), sum(1 for _, c in mrows if not c)))
        out[engine] = (rows, moe)
    return out


def band_block(rows, key="band"):
    lines = [f"{key}:  # bench/calibrate.py --write-bands: signed error of predicted tokens/s on the calibration and published check runs "
             "(docs/cost_model.md \"Bands\")" + ("; MoE models: the MoE runs joined with `band`" if key == "band_moe" else "")]
    lines += [f"  {p}: {{low: {lo:.3f}, high: {hi:.3f}, runs: {n}" + (f", checks: {c}" if c else "") + "}"
              for p, lo, hi, n, c in rows]
    return "\n".join(lines) + "\n"


def engine_file_band(text, key="band"):
    """The `band:` (or `band_moe:`) block of an engine file as [(precision, low, high, runs, checks)] (the format
    band_block writes)."""
    rows = []
    block = text.split(f"\n{key}:", 1)
    if len(block) < 2:
        return rows
    body = re.split(r"\n[a-z_]+:", "\n" + block[1].split("\n", 1)[1] if "\n" in block[1] else "", maxsplit=1)[0]
    for m in re.finditer(r"^  (bf16|fp16|fp8): \{low: (-?[0-9.]+), high: (-?[0-9.]+), runs: ([0-9]+)"
                         r"(?:, checks: ([0-9]+))?\}", body, re.M):
        rows.append((m.group(1), float(m.group(2)), float(m.group(3)), int(m.group(4)), int(m.group(5) or 0)))
    return rows


def handle_bands(args):
    computed = bands()
    status = 0
    for engine, (rows, moe) in computed.items():
        path = os.path.join(ENGINES_DIR, engine + ".yaml")
        text = open(path).read()
        block = band_block(rows) + (band_block(moe, "band_moe") if moe else "")
        if args.bands:
            print(f"\n# {engine}\n" + block, end="")
        if args.write_bands:
            cut = min(i for i in (text.find("\nband:"), text.find("\nband_moe:"), len(text)) if i >= 0)
            head = text[:cut].rstrip("\n") + "\n"
            open(path, "w").write(head + block)
        if args.check_bands:
            same = lambda have, want: len(have) == len(want) and all(
                a[0] == b[0] and a[3] == b[3] and a[4] == b[4] and abs(a[1] - b[1]) < 0.0015 and abs(a[2] - b[2]) < 0.0015
                for a, b in zip(have, want))
            have, have_moe = engine_file_band(text), engine_file_band(text, "band_moe")
            if not same(have, rows) or not same(have_moe, moe):
                status = 1
                print(f"calibrate.py: {path}: band {have} / band_moe {have_moe} differ from this run's {rows} / {moe}; "
                      "run python3 bench/calibrate.py --write-bands", file=sys.stderr)
    if args.check_bands and status == 0:
        print(f"bands: {len(computed)} engine files agree with {len(BAND_ROWS)} calibration rows, "
              f"{len(CHECK_ROWS)} check rows and {len(MOE_ROWS)} MoE rows")
    return status


def main():
    global PLANNER, KERNELS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a100", default=os.path.join(ROOT, "configs", "clusters", "dgx-a100.yaml"))
    ap.add_argument("--h100", default=os.path.join(ROOT, "configs", "clusters", "dgx-h100.yaml"))
    ap.add_argument("--h800", default=os.path.join(ROOT, "configs", "clusters", "h800.yaml"))
    ap.add_argument("--h100-96gb", default=os.path.join(ROOT, "configs", "clusters", "h100-96gb-500w.yaml"))
    ap.add_argument("--fit", action="store_true", help="scan efficiencies and print the mean |error| of each")
    ap.add_argument("--grid", default="0.50,0.55,0.60,0.65,0.70,0.75,0.80")
    ap.add_argument("--planner", default=PLANNER, help="the planner binary (default: build/planner/planner)")
    ap.add_argument("--bands", action="store_true", help="print each engine's band per precision")
    ap.add_argument("--write-bands", action="store_true", help="rewrite configs/engines/*.yaml's band blocks")
    ap.add_argument("--check-bands", action="store_true", help="exit 1 when an engine file's band differs")
    ap.add_argument("--kernels", help="cost the H100 / H800 runs with this kernel table (e.g. the measured "
                    "configs/kernels/h200-measured.yaml) instead of the built-in published one; not with the band options")
    args = ap.parse_args()
    PLANNER = args.planner
    if args.kernels and (args.write_bands or args.check_bands):
        sys.exit("calibrate.py: --kernels compares tables; the bands are the built-in table's (drop --kernels)")
    KERNELS = args.kernels
    if not os.path.exists(PLANNER):
        sys.exit("calibrate.py: build the planner first (make build)")
    with tempfile.TemporaryDirectory() as tmp:
        a100 = table("Megatron-LM SC'21 Table 1 (A100, fp16, full recompute)", "TFLOP/s/GPU", run_megatron(tmp, args.a100))
        a100 += table("Korthikanti et al. 2022 (A100, fp16)", "MFU %", run_korthikanti(tmp, args.a100))
        h100 = table("Llama 3 Table 4 (H100, bf16)", "MFU %", run_llama(tmp, args.h100))
        h800 = table("DeepSeek-V3 report (H800, fp8)", "tokens/s/GPU", run_deepseek(tmp, args.h800))
        issue27 = table_mem("issue27: torchtitan, NeMo long context, MLPerf v3.1 GPT-3 (H100)", "tokens/s/GPU",
                            run_issue27(tmp, {"h100": args.h100, "h100_96": args.h100_96gb}))
        table("Checks, not calibration: NeMo long-sequence table (Llama 2 7B, H100, FP8, NeMo 24.03.01; TFLOP/s/GPU "
              "in NeMo's full-attention formula)", "TFLOP/s/GPU", run_nemo_long(tmp, args.h100))
        nemo = table("Checks, not calibration: NeMo 24.07 performance summary (H100, FP8; the recipes' layouts)",
                     "tokens/s/GPU", run_nemo_2407(tmp, args.h100))
        finetune = table("Checks, not calibration: fine-tuning on packed SQuAD, SFT and LoRA (NeMo 24.07, Megatron-Bridge "
                         "26.06; H100, GB200; FP8)", "tokens/s/GPU", run_finetune(tmp))
        titan = table_mem("Checks, not calibration: torchtitan's Dec 2024 benchmarks (H100 96 GB, 500 W)", "TPS/GPU",
                          run_torchtitan_2412(args.h100_96gb))
        bridge = table("Checks, not calibration: Megatron-Core's 2025-26 recipes (Megatron-Bridge, Megatron-LM, NeMo 25.02; "
                       "H100, FP8)", "tokens/s/GPU", run_megatron_bridge(args.h100))
        blackwell = table("Checks, not calibration: Megatron-Core on Blackwell (Megatron-Bridge 25.11 and 26.04.01; DGX B200, "
                          "GB200 NVL72; FP8 current scaling and MXFP8)", "tokens/s/GPU", run_blackwell(tmp, BLACKWELL))
        blackwell_moe = table("Checks, not calibration: Megatron-Core MoE on Blackwell (Megatron-Bridge 26.04.01 and 26.06; MXFP8, "
                              "force-balanced)", "tokens/s/GPU", run_blackwell(tmp, BLACKWELL_MOE))
        gpt_oss = table("Checks, not calibration: GPT-OSS 120B (Megatron-Bridge 26.04.01; H100, B200, GB200; bf16, "
                        "sliding-window attention on every other block, force-balanced)", "tokens/s/GPU",
                        run_blackwell(tmp, GPT_OSS))
        moe = table("Checks, not calibration: Megatron-Core MoE runs (Megatron-Bridge, Megatron-MoE-ModelZoo; H100, bf16)",
                    "tokens/s/GPU", run_moe_h100(args.h100))
        moe_long = table("Checks, not calibration: Qwen3-235B-A22B long context (Megatron-MoE-ModelZoo; 256 H100, TP 4, "
                         "EP 8, PP 8 x VP 4, forced balance)", "tokens/s/GPU", run_moe_long(args.h100))
        imbalance, dropless_rows = run_moe_long_dropless(args.h100)
        dropless = table(f"Checks, not calibration: the same table's dropless rows (--moe-imbalance "
                         f"{imbalance or 0:.3f}, solved on the 16K row)", "tokens/s/GPU", dropless_rows)[1:]
        layer = table_layer("Checks, not calibration: one MoE layer, Megatron-LM's moe_perf test (8 H100, EP 8, seq 4096; "
                            "ms per pass; error on time: + is slower than measured)", run_moe_layer(tmp, args.h100))
        deepspeed = table("Checks, not calibration: Megatron-DeepSpeed on DeepSpeed's PipelineEngine (A100, the "
                          "deepspeed engine)", "tokens/s/GPU", run_deepspeed_a100(tmp, args.a100))
        print("\n### Free search against the published layout (the calibration set: A100 fp16, H100 bf16, H800 fp8, issue 27's five)\n\n"
              "Above 1.25x the modelled reason is named: the published layout's iteration minus the free plan's, by part "
              "(seconds per iteration, largest first).\n\n"
              "| run | free: tp-pp-dp | cp | plan | MFU % | published layout's time / free search's | modelled reason |\n"
              "|---|---|---|---|---|---|---|")
        for run, par, cpv, lay, mfu, ratio, why in FREE:
            print(f"| {run} | {par} | {cpv} | {lay} | {mfu:.1f} | {ratio:.3f}{'' if ratio >= 1 else ' (SLOWER)'} | "
                  f"{why if ratio > 1.25 else '-'} |")
        print()
        summary("A100 fp16 (dgx-a100)", a100, len(MEGATRON_T1) + 2 * len(KORTHIKANTI))
        summary("H100 bf16 (dgx-h100)", h100, len(LLAMA3))
        summary("H800 fp8 (h800)", h800, len(DEEPSEEK))
        summary("issue27 H100 bf16/fp8 (h100-96gb-500w, dgx-h100)", issue27, len(ISSUE27))
        summary("checks: NeMo 24.07 H100 fp8", nemo, len(NEMO_2407))
        summary("checks: fine-tuning SFT / LoRA fp8", finetune, len(FINETUNE))
        summary("checks: torchtitan Dec 2024 H100", titan, len(TORCHTITAN_2412) - 1)
        summary("checks: Megatron-Core 2025-26 recipes H100 fp8", bridge, len(MEGATRON_BRIDGE))
        summary("checks: Megatron-Core Blackwell B200 / GB200 fp8", blackwell, len(BLACKWELL))
        if blackwell:
            print(f"checks: Megatron-Core Blackwell B200 / GB200 fp8: signed mean {100 * sum(blackwell) / len(blackwell):+.2f}%")
        summary("checks: Megatron-Core MoE Blackwell fp8 (MXFP8)", blackwell_moe, len(BLACKWELL_MOE))
        summary("checks: GPT-OSS 120B bf16 (H100, B200, GB200)", gpt_oss, len(GPT_OSS))
        summary("checks: Megatron-Core MoE H100 bf16", moe, len(MOE_H100))
        if moe:
            print(f"checks: Megatron-Core MoE H100 bf16: signed mean {100 * sum(moe) / len(moe):+.2f}%")
        summary("checks: Megatron-DeepSpeed A100 (deepspeed engine)", deepspeed, len(DEEPSPEED_A100))
        if deepspeed:
            print(f"checks: Megatron-DeepSpeed A100: signed mean {100 * sum(deepspeed) / len(deepspeed):+.2f}%")
        summary("checks: Qwen3-235B long context H100 bf16", moe_long, len(MOE_LONG_H100))
        if moe_long:
            print(f"checks: Qwen3-235B long context H100 bf16: signed mean {100 * sum(moe_long) / len(moe_long):+.2f}%")
        summary("checks: Qwen3-235B dropless, 32K-128K at the 16K row's imbalance", dropless,
                len(MOE_LONG_DROPLESS_H100) - 1)
        summary("checks: one MoE layer H100 (forward and backward ms)", layer, 2 * len(MOE_LAYER_H100))
        if layer:
            print(f"checks: one MoE layer H100: signed mean {100 * sum(layer) / len(layer):+.2f}% (on time)")
        if bridge:
            print(f"checks: Megatron-Core 2025-26 recipes H100 fp8: signed mean {100 * sum(bridge) / len(bridge):+.2f}%")
        if titan:
            print(f"checks: torchtitan Dec 2024 H100: signed mean {100 * sum(titan) / len(titan):+.2f}%")
        if nemo:
            print(f"checks: NeMo 24.07 H100 fp8: signed mean {100 * sum(nemo) / len(nemo):+.2f}%")
        BAND_ROWS.extend([("megatron-core", "fp16", e) for e in a100] + [("megatron-core", "bf16", e) for e in h100]
                         + [("megatron-core", "fp8", e) for e in h800])
        MOE_ROWS.extend([("megatron-core", "fp8", e, True) for e in h800])  # DeepSeek-V3: MoE calibration runs
        if args.bands or args.write_bands or args.check_bands:
            status = handle_bands(args)
            if status:
                sys.exit(status)
        if args.fit:
            print("\n### Fit: mean |error| (worst row) per efficiency\n\n| efficiency | A100 fp16 | H100 bf16 |\n|---|---|---|")
            for eff in [float(x) for x in args.grid.split(",")]:
                ca, ch = with_efficiency(args.a100, eff, tmp), with_efficiency(args.h100, eff, tmp)
                with open(os.devnull, "w") as null:
                    old, sys.stdout = sys.stdout, null
                    ea = table("", "", run_megatron(tmp, ca)) + table("", "", run_korthikanti(tmp, ca))
                    eh = table("", "", run_llama(tmp, ch))
                    sys.stdout = old
                def cell(errs):
                    mae = sum(abs(e) for e in errs) / max(1, len(errs))
                    worst = max((abs(e) for e in errs), default=0.0)
                    return f"{100 * mae:.2f}% (worst {100 * worst:.1f}%, {len(errs)} rows)"
                print(f"| {eff:.2f} | {cell(ea)} | {cell(eh)} |")


if __name__ == "__main__":
    main()
