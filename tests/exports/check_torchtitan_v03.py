#!/usr/bin/env python3
"""Checks torchtitan_config.py exports (planner codegen) with torchtitan 0.3's own code.

  python check_torchtitan_v03.py LAUNCH_DIR...

For every directory, in one process: torchtitan's ConfigManager loads the module
(`--module torchtitan_config --config plan`, Trainer.Config's own checks run); ParallelDims.from_config
validates the degrees at launch.yaml's world size; the schedule resolves (get_schedule_class) and the
model parts fit it; the model, built on the meta device from the config's model_spec, holds every FQN of
module_fqns_per_model_part, each top-level module once; and every setting equals the same directory's
torchtitan.toml (degrees, batch, seq_len, schedule, parts with `output` named `lm_head`, activation
checkpointing, precision, float8 / MXFP8 linears counted in the built model (lm_head not one), torch.compile, async TP as the TOML says), so the
two files are one plan. Prints "ok DIR" / "FAIL DIR: reason".
torchtitan's float8 and MXFP8 converters ask the GPU's compute capability when the config is built: without
a GPU the checker answers sm_100 (B200: both run there) and says so.
"""
import os
import sys
import tomllib


def check(d):
    import torch
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, ScheduleDualPipeV, ScheduleZBVZeroBubble, get_schedule_class
    from torchtitan.config import ConfigManager
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    from torchtitan.distributed.parallel_dims import ParallelDims
    text = open(os.path.join(d, "launch.yaml")).read()
    world = sum(1 for l in text.splitlines() if l.startswith("  - {rank: "))
    toml = tomllib.load(open(os.path.join(d, "torchtitan.toml"), "rb"))
    sys.modules.pop("torchtitan_config", None)
    sys.path.insert(0, os.path.abspath(d))
    try:
        c = ConfigManager().parse_args(["--module", "torchtitan_config", "--config", "plan"])
    except BaseException as e:
        return f"ConfigManager: {type(e).__name__}: {e}"
    finally:
        sys.path.pop(0)
    p, t = c.parallelism, c.training
    pd = ParallelDims.from_config(p, world)
    tp_, tt_ = toml["parallelism"], toml["training"]
    pairs = [("data_parallel_replicate_degree", p.data_parallel_replicate_degree), ("data_parallel_shard_degree", p.data_parallel_shard_degree),
             ("fsdp_reshard_after_forward", p.fsdp_reshard_after_forward), ("tensor_parallel_degree", p.tensor_parallel_degree),
             ("context_parallel_degree", p.context_parallel_degree), ("pipeline_parallel_degree", p.pipeline_parallel_degree)]
    if pd.pp > 1:
        pairs += [("pipeline_parallel_schedule", p.pipeline_parallel_schedule), ("pipeline_parallel_microbatch_size", p.pipeline_parallel_microbatch_size)]
    for k, v in pairs:
        if tp_.get(k) != v:
            return f"parallelism.{k} {v!r}, torchtitan.toml {tp_.get(k)!r}"
    for k in ("local_batch_size", "global_batch_size", "seq_len", "steps", "mixed_precision_param"):
        if tt_[k] != getattr(t, k):
            return f"training.{k} {getattr(t, k)!r}, torchtitan.toml {tt_[k]!r}"
    ac = toml["activation_checkpoint"]["mode"]
    want = {"full": FullAC.Config, "selective": SelectiveAC.Config, "none": type(None)}[ac]
    if not isinstance(c.activation_checkpoint, want):
        return f"activation_checkpoint {type(c.activation_checkpoint).__name__}, torchtitan.toml mode {ac}"
    dp = pd.dp_replicate * pd.dp_shard
    if t.global_batch_size % (t.local_batch_size * dp) != 0:
        return f"global batch {t.global_batch_size} not divisible by local {t.local_batch_size} x dp {dp}"
    with torch.device("meta"):
        model = c.model_spec.model.build()
    # What changes training beyond the sizes: float8 or MXFP8 linears (counted in the built model, the output
    # layer not among them: the plan costs it in bf16) and torch.compile.
    convs = toml.get("model", {}).get("converters", [])
    for kind, conv in (("Float8", "quantize.linear.float8"), ("MXFP8", "quantize.linear.mx")):
        n8 = sum(1 for m in model.modules() if kind in type(m).__name__)
        if (conv in convs) != (n8 > 0):
            return f"{n8} {kind} linears in the model, torchtitan.toml converters {convs}"
        off = [n for n, m in model.named_modules() if n.startswith("layers.") and type(m).__name__.endswith("Linear")
               and not any(True for _ in m.children()) and kind not in type(m).__name__]
        if conv in convs and off:
            return f"{len(off)} linears of the blocks are not {kind} (first {off[0]}), torchtitan.toml converters {convs}"
        if kind in type(model.get_submodule("lm_head")).__name__:
            return f"lm_head is {type(model.get_submodule('lm_head')).__name__}: the plan costs the output layer in bf16"
    want_compile = bool(toml.get("compile", {}).get("enable", False))
    if c.compile.enable != want_compile:
        return f"compile.enable {c.compile.enable}, torchtitan.toml {want_compile}"
    want_async = bool(toml.get("parallelism", {}).get("enable_async_tensor_parallel", False))
    if c.compile.enable_async_tensor_parallel != want_async:
        return (f"compile.enable_async_tensor_parallel {c.compile.enable_async_tensor_parallel}, torchtitan.toml "
                f"{want_async} (the plan's inputs.tp_comm_overlap)")
    if pd.pp > 1:
        parts = p.module_fqns_per_model_part
        if [[("output" if f == "lm_head" else f) for f in part] for part in parts] != tp_["module_fqns_per_model_part"]:
            return "model parts differ from torchtitan.toml's (output named lm_head)"
        cls = get_schedule_class(p.pipeline_parallel_schedule)
        n = len(parts)
        if n % pd.pp or (issubclass(cls, PipelineScheduleSingle) and n != pd.pp) or (cls in (ScheduleZBVZeroBubble, ScheduleDualPipeV) and n != 2 * pd.pp):
            return f"{n} model parts do not fit {cls.__name__} at pp {pd.pp}"
        seen = [f for part in parts for f in part]
        for f in seen:
            try:
                model.get_submodule(f)
            except AttributeError:
                return f"FQN {f} names no module of the model"
        tops = [n_ for n_, _ in model.named_children()]
        want_ = [x for x in tops if x != "layers"] + [f"layers.{k}" for k in model.layers.keys()]
        if sorted(seen) != sorted(want_):
            return f"model parts hold {len(seen)} modules, not each of the model's {len(want_)} once"
    return ""


def main():
    import torchtitan.components.quantization.float8 as f8
    import torchtitan.components.quantization.mx as mx
    f8.has_cuda_capability = mx.has_cuda_capability = lambda major, minor: (10, 0) >= (major, minor)
    print("check_torchtitan_v03: no GPU here; torchtitan's float8 / MXFP8 capability checks answered sm_100 (B200)", flush=True)
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
