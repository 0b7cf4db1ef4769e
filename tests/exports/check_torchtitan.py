#!/usr/bin/env python3
"""Checks torchtitan.toml exports (planner codegen) with torchtitan 0.2's own code.

  PYTHONPATH=TORCHTITAN_0_2_2_DIR python check_torchtitan.py LAUNCH_DIR...

For every directory, in one process: torchtitan's ConfigManager parses the TOML (unknown sections or
keys are errors there); every model.converters name is one torchtitan registered (the lookup its trainer
makes at launch); ParallelDims(dp_replicate, dp_shard, cp, tp, pp, ...) validates the degrees at
launch.yaml's world size; the trainer's batch rules (local_batch_size % pipeline_parallel_microbatch_size,
global_batch_size % (local x dp)); get_schedule_class knows the schedule and the model parts fit it
(single-stage: one part per rank; loop: parts % pp; V: two parts per rank, as pipeline_module_split
places them); the llama3 flavor's model, built on the meta device from torchtitan's TransformerModelArgs,
has the launch directory's model.yaml dimensions (layers, hidden, heads, KV heads, SwiGLU width,
vocabulary) and every FQN of module_fqns_per_model_part names one of its modules, each top-level module
exactly once. Prints "ok DIR" / "FAIL DIR: reason"; exit 1 on any FAIL.
"""
import os
import re
import sys


def launch(d):
    text = open(os.path.join(d, "launch.yaml")).read()
    head = dict(re.findall(r"(?m)^(schedule|interleave|tp|pp|dp|cp): ([\w-]+)\s*$", text))
    world = sum(1 for l in text.splitlines() if l.startswith("  - {rank: "))
    import yaml
    gpt = yaml.safe_load(open(os.path.join(d, "model.yaml"))).get("gpt") or {}
    dims = {k: v for k, v in gpt.items() if isinstance(v, int)}
    return head, world, dims


def check(d):
    import torch
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, ScheduleDualPipeV, ScheduleZBVZeroBubble, get_schedule_class
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec
    head, world, dims = launch(d)
    try:
        c = ConfigManager().parse_args(["--job.config_file", os.path.join(d, "torchtitan.toml")])
    except BaseException as e:  # argparse / tyro exit on a bad key
        return f"ConfigManager: {type(e).__name__}: {e}"
    p, t = c.parallelism, c.training
    try:
        pd = ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree, cp=p.context_parallel_degree,
                          tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree, ep=1, etp=1, world_size=world)
    except AssertionError as e:
        return f"ParallelDims: {e}"
    for k in ("tp", "pp", "cp"):
        if getattr(pd, k) != int(head.get(k, 1)):
            return f"{k} {getattr(pd, k)}, launch.yaml {head.get(k)}"
    dp = pd.dp_replicate * pd.dp_shard
    if dp != int(head["dp"]):
        return f"data parallel {dp}, launch.yaml dp {head['dp']}"
    if t.global_batch_size % (t.local_batch_size * dp) != 0:
        return f"global batch {t.global_batch_size} not divisible by local {t.local_batch_size} x dp {dp} (the trainer asserts it)"
    if pd.pp > 1:
        if t.local_batch_size % p.pipeline_parallel_microbatch_size != 0:
            return f"local batch {t.local_batch_size} not divisible by microbatch {p.pipeline_parallel_microbatch_size}"
        cls = get_schedule_class(p.pipeline_parallel_schedule)
        parts = p.module_fqns_per_model_part or []
        n = len(parts)
        if n % pd.pp != 0:
            return f"{n} model parts not divisible by pp {pd.pp} (pipeline_module_split asserts it)"
        if issubclass(cls, PipelineScheduleSingle) and n != pd.pp:
            return f"{cls.__name__} is single-stage: {n} parts for pp {pd.pp}"
        if cls in (ScheduleZBVZeroBubble, ScheduleDualPipeV) and n != 2 * pd.pp:
            return f"{cls.__name__} places 2 stages per rank (V): {n} parts for pp {pd.pp}"
    # model.converters: each a converter torchtitan registered (build_model_converters looks the names up:
    # "float8" alone is a KeyError at launch in 0.2.2, whose float8 converter is "quantize.linear.float8").
    from torchtitan.protocols.model_converter import _registry_model_converter_cls as registry
    for name in c.model.converters:
        if name not in registry:
            return f"converter {name!r} is not registered (torchtitan 0.2.2 knows {sorted(registry)})"
    spec = get_train_spec(c.model.name)
    args = spec.model_args[c.model.flavor]
    with torch.device("meta"):
        model = spec.model_cls(args)
    w1 = model.layers["0"].feed_forward.w1
    got = dict(layers=args.n_layers, hidden=args.dim, heads=args.n_heads, kv_heads=args.n_kv_heads or args.n_heads, ffn=w1.out_features, vocab=args.vocab_size)
    for k, v in got.items():
        if dims.get(k, v if k == "kv_heads" else None) != v:
            return f"flavor {c.model.flavor}'s {k} is {v}, model.yaml's {dims.get(k)}"
    if t.seq_len != dims.get("seq"):
        return f"seq_len {t.seq_len}, model.yaml seq {dims.get('seq')}"
    if pd.pp > 1:
        seen = []
        for part in p.module_fqns_per_model_part:
            for f in part:
                try:
                    model.get_submodule(f)
                except AttributeError:
                    return f"FQN {f} names no module of llama3 {c.model.flavor}"
                seen.append(f)
        want = ["tok_embeddings"] + [f"layers.{i}" for i in range(args.n_layers)] + ["norm", "output"]
        if sorted(seen) != sorted(want):
            return f"model parts hold {len(seen)} modules, not each of the model's {len(want)} once"
    return ""


def main():
    bad = 0
    for d in sys.argv[1:]:
        try:
            why = check(d)
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
        print(f"ok {d}" if not why else f"FAIL {d}: {why}", flush=True)
        bad += bool(why)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
