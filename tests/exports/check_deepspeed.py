#!/usr/bin/env python3
"""Checks DeepSpeed exports (planner codegen's deepspeed/) with DeepSpeed's own code.

  python check_deepspeed.py config LAUNCH_DIR...      # each directory's ds_config.json + partition.json
  torchrun --nproc-per-node W check_deepspeed.py module LAUNCH_DIR   # PlannedPipelineModule on gloo/CPU

`config`, in one process for every directory, per directory:
  1. the top-level keys of ds_config.json are keys DeepSpeed reads (the string literals and constants of
     deepspeed/runtime/config.py, constants.py and the tensor-parallel config: DeepSpeedConfig accepts
     unknown top-level keys silently), the `pipeline` keys those of get_pipeline_config's defaults;
  2. PipeModelDataParallelTopology(num_pp, num_mp, num_dp) from partition.json spans launch.yaml's ranks
     and places every rank where launch.yaml does (get_rank(pipe=stage, data=replica, model=tp_rank));
  3. DeepSpeedConfig(ds_config, mpu) with the topology's data-parallel size (its batch assertion
     train_batch = micro x accumulation x dp, pydantic models of every section); AutoTP configs (no
     train_batch_size) with the world size, autotp_size equal to launch.yaml's tp;
  4. parts: num_stages + 1 boundaries over every layer, each pipeline rank's stage as many layers as
     launch.yaml's stages on that rank (the loop q mod pp, or the V for dualpipev);
  5. the precision mix: DeepSpeedEngine's own _do_optimizer_sanity_check (run on the parsed config with
     a torch.optim.Adam; it raises NotImplementedError for a gradient accumulation dtype DeepSpeed
     cannot run with those weights and that ZeRO stage), and the gradient dtype DeepSpeed then runs
     (get_data_types) is launch.yaml's grad_dtype where the plan states one, else the noted model dtype.
`module` builds the exported pipeline.py's PlannedPipelineModule with one Linear per planner layer and
checks this rank's stage, its layers and its topology coordinates against partition.json and launch.yaml.
Prints "ok DIR" / "FAIL DIR: reason" per directory; exit 1 on any FAIL.
"""
import importlib
import json
import os
import re
import sys


def launch(d):
    text = open(os.path.join(d, "launch.yaml")).read()
    head = {k: v for k, v in re.findall(r"(?m)^(schedule|interleave|tp|pp|dp|cp): ([\w-]+)\s*$", text)}
    ranks = [dict((k, int(v)) for k, v in re.findall(r"(rank|stage|replica|tp_rank): (\d+)", l))
             for l in text.splitlines() if l.startswith("  - {rank: ")]
    stages = [tuple(int(x) for x in m) for m in re.findall(r"(?m)^  - \{first_layer: (\d+), last_layer: (\d+)", text)]
    return head, ranks, stages


def known_keys():
    import deepspeed.runtime.constants as C
    from deepspeed.runtime import config as cfg_mod
    keys = {v for k, v in vars(C).items() if k.isupper() and isinstance(v, str)}
    for mod in ("deepspeed.runtime.config", "deepspeed.runtime.tensor_parallel.config"):
        src = open(importlib.import_module(mod).__file__).read()
        keys |= set(re.findall(r"[\"']([a-z][a-z0-9_]*)[\"']", src))
    return keys, cfg_mod.get_pipeline_config({})


def check_config(d, known, pipe_defaults):
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
    from deepspeed.runtime.tensor_parallel import get_tensor_parallel_config
    ds = os.path.join(d, "deepspeed")
    cfg = json.load(open(os.path.join(ds, "ds_config.json")))
    part = json.load(open(os.path.join(ds, "partition.json")))
    head, ranks, stages = launch(d)
    unknown = sorted(set(cfg) - known)
    if unknown:
        return f"top-level keys DeepSpeed does not read: {unknown}"
    for k, v in cfg.get("pipeline", {}).items():
        if k not in pipe_defaults or type(v) is not type(pipe_defaults[k]):
            return f"pipeline.{k} = {v!r} is not a key of get_pipeline_config with its type ({sorted(pipe_defaults)})"
    if "topology" not in part:
        return "partition.json has no topology (the engine would take every rank as data parallel)"
    t = part["topology"]
    topo = PipeModelDataParallelTopology(num_pp=t["num_pp"], num_mp=t["num_mp"], num_dp=t["num_dp"])
    if topo.world_size() != len(ranks):
        return f"topology spans {topo.world_size()} ranks, launch.yaml {len(ranks)}"
    for r in ranks:
        want = topo.get_rank(pipe=r["stage"], data=r["replica"], model=r["tp_rank"])
        if want != r["rank"]:
            return f"launch.yaml's rank {r['rank']} (stage {r['stage']}, replica {r['replica']}, tp rank {r['tp_rank']}) is DeepSpeed's rank {want}"
    dp = topo.get_dim("data")

    class MPU:
        def get_data_parallel_world_size(self):
            return dp

        def get_data_parallel_rank(self):
            return 0

    dist.get_rank = lambda *a, **k: 0
    dist.get_world_size = lambda *a, **k: len(ranks)
    try:
        if "train_batch_size" in cfg:
            c = DeepSpeedConfig(dict(cfg), mpu=MPU())
        else:
            c = DeepSpeedConfig(dict(cfg))  # AutoTP: the engine makes the groups itself
            autotp = get_tensor_parallel_config(cfg).autotp_size
            if autotp != int(head.get("tp", 1)) or int(head.get("pp", 1)) != 1:
                return f"AutoTP size {autotp} with tp {head.get('tp')} pp {head.get('pp')}"
    except Exception as e:  # DeepSpeed's own assertion / validation error is the finding
        return f"DeepSpeedConfig: {type(e).__name__}: {str(e).splitlines()[0]}"
    if c.train_micro_batch_size_per_gpu != cfg["train_micro_batch_size_per_gpu"] or c.gradient_accumulation_steps != cfg["gradient_accumulation_steps"]:
        return "DeepSpeedConfig derived other batch settings"
    why = check_precision(d, c, int(head.get("pp", 1)) > 1)
    if why:
        return why
    pp = int(head["pp"])
    parts = part["parts"]
    n = len(part["layers"])
    if part["num_stages"] != pp or len(parts) != pp + 1 or parts[0] != 0 or parts[-1] != n or any(b <= a for a, b in zip(parts, parts[1:])):
        return f"parts {parts} are not {pp} non-empty stages over {n} layers"
    per_rank = [0] * pp
    for q, (first, last) in enumerate(stages):
        r = (q if q < pp else 2 * pp - 1 - q) if head["schedule"] == "dualpipev" else q % pp
        per_rank[r] += last - first + 1
    got = [b - a for a, b in zip(parts, parts[1:])]
    if got != per_rank:
        return f"stages hold {got} layers per pipeline rank, launch.yaml's stages {per_rank}"
    return ""


def check_precision(d, c, pipelined):
    """DeepSpeedEngine's precision checks on config `c`: methods of the engine bound to a bare object
    holding the parsed config (the engine itself needs a model and a process group)."""
    import types
    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine
    eng = types.SimpleNamespace(_config=c, global_rank=0, pipeline_parallelism=pipelined)
    for name in ("get_data_types", "zero_optimization", "zero_optimization_stage", "zero_cpu_offload", "zero_compute_grad_norm",
                 "zero_allow_untested_optimizer", "fp16_enabled", "bfloat16_enabled"):
        setattr(eng, name, types.MethodType(getattr(DeepSpeedEngine, name), eng))
    try:
        DeepSpeedEngine._do_optimizer_sanity_check(eng, torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))]))
    except Exception as e:
        return f"DeepSpeedEngine._do_optimizer_sanity_check: {type(e).__name__}: {str(e).splitlines()[0]}"
    model_dtype, grad_dtype = eng.get_data_types()
    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
    m = re.search(r"(?m)^grad_dtype: (\w+)\s*$", open(os.path.join(d, "launch.yaml")).read())
    if m and names[grad_dtype] != m.group(1) and not (m.group(1) == "fp32" and grad_dtype == model_dtype):
        return f"DeepSpeed accumulates gradients in {names[grad_dtype]}, the plan in {m.group(1)}"
    return ""


def main_config(dirs):
    import deepspeed  # noqa: F401  (the accelerator warning goes to stderr)
    known, pipe_defaults = known_keys()
    bad = 0
    for d in dirs:
        try:
            why = check_config(d, known, pipe_defaults)
        except Exception as e:  # a file the checker cannot read is a finding too, not the end of the run
            why = f"{type(e).__name__}: {e}"
        print(f"ok {d}" if not why else f"FAIL {d}: {why}", flush=True)
        bad += bool(why)
    return 1 if bad else 0


def main_module(d):
    import torch.nn as nn
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # no shm JIT build on CPU
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    sys.path.insert(0, os.path.join(d, "deepspeed"))
    import pipeline
    names = pipeline.PARTITION["layers"]
    m = pipeline.PlannedPipelineModule(layers=[nn.Linear(4, 4) for _ in names], loss_fn=nn.MSELoss())
    import torch.distributed as tdist
    rank = tdist.get_rank()
    head, ranks, _ = launch(d)
    me = next(r for r in ranks if r["rank"] == rank)
    coord = m._topo.get_coord(rank)
    parts = pipeline.PARTITION["parts"]
    why = ""
    if m.stage_id != me["stage"] or (coord.pipe, coord.data, coord.model) != (me["stage"], me["replica"], me["tp_rank"]):
        why = f"stage {m.stage_id} coord {coord}, launch.yaml stage {me['stage']} replica {me['replica']} tp rank {me['tp_rank']}"
    elif list(m.parts) != parts or (m._local_start, m._local_stop) != (parts[me["stage"]], parts[me["stage"] + 1]):
        why = f"parts {list(m.parts)} local [{m._local_start}, {m._local_stop}), partition.json {parts}"
    print(f"rank {rank}: " + (f"ok stage {m.stage_id} layers {names[m._local_start:m._local_stop]}" if not why else f"FAIL {why}"), flush=True)
    tdist.barrier()
    return 1 if why else 0


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("config", "module"):
        raise SystemExit(__doc__)
    sys.exit(main_config(sys.argv[2:]) if sys.argv[1] == "config" else main_module(sys.argv[2]))
