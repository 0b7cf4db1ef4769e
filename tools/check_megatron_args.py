#!/usr/bin/env python3
"""Checks a megatron.args file (planner codegen) with Megatron-LM's own code.

  python3 tools/check_megatron_args.py MEGATRON_LM_DIR LAUNCH_DIR/megatron.args [--world-size N] [--plan PLAN.yaml]

Runs, on the file's flags (one or more per line, split as the shell splits `$(cat megatron.args)`):
  1. megatron.training.arguments.parse_args: every flag known, every value of its type and choices;
  2. validate_args with args.world_size = N (default: tp x pp x cp x dp from the launch.yaml beside
     the file), as pretrain_gpt.py does on rank 0;
  3. core_transformer_config_from_args: the TransformerConfig / MLATransformerConfig checks, which
     include the pipeline layout's validate_layer_layout;
  4. Megatron's split of the layers: per virtual stage (model order, stage q on pipeline rank q mod pp)
     its decoder layers and MTP modules, from the layout or from get_num_layers_to_build; with --plan
     compared with the plan's stages (their first / last layer names), and the gradient buffer dtype
     validate_args settles (accumulate_allreduce_grads_in_fp32) with the plan's grad_dtype.
Prints one line per step and "megatron.args: PASS" or "megatron.args: FAIL (step: reason)"; exit 0 / 1.

Nothing here needs a GPU or a process group. validate_args asks the device twice (the grouped-GEMM
compute capability and the architecture generation for CUDA_DEVICE_MAX_CONNECTIONS): without a GPU
the checker answers sm_90 (H100 / H800, Hopper) and sets CUDA_DEVICE_MAX_CONNECTIONS=1, as a Hopper
launch of Megatron-LM with tp or cp > 1 must (unset with FSDP, which asks for that). TransformerConfig asks Transformer Engine's version
(FP8, MoE with FP8): without an importable Transformer Engine (it needs CUDA) the checker answers
--te-version (default 2.10.0) and that its fused RoPE kernel exists. Both stand-ins are printed. Megatron-LM itself is not part of this repository:
pass a checkout (docs/formats.md names the commit checked).
"""
import argparse
import os
import re
import shlex
import sys


def read_flags(path):
    flags = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                flags.extend(shlex.split(line))
    return flags


def launch_world_size(args_path):
    """tp x pp x cp x dp from the launch.yaml beside megatron.args, or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(args_path)), "launch.yaml")
    if not os.path.exists(path):
        return None
    sizes = {"tp": 1, "pp": 1, "cp": 1, "dp": 1}
    with open(path) as f:
        for line in f:
            m = re.match(r"^(tp|pp|cp|dp): (\d+)\s*$", line)
            if m:
                sizes[m.group(1)] = int(m.group(2))
    return sizes["tp"] * sizes["pp"] * sizes["cp"] * sizes["dp"]


def plan_chunks(plan_path, num_layers, num_mtp):
    """Per stage of the plan (model order): (decoder blocks, MTP modules), from its layer names."""
    stages, cur = [], {}
    with open(plan_path) as f:
        text = f.read()
    body = text.split("\nstages:\n", 1)[1] if "\nstages:\n" in text else ""
    for line in body.splitlines():
        if line and not line.startswith(" "):
            break  # the next top-level key
        m = re.match(r"^\s*-?\s*(first_layer_name|last_layer_name): \"?([^\"]+)\"?\s*$", line)
        if m:
            cur[m.group(1)] = m.group(2)
            if "first_layer_name" in cur and "last_layer_name" in cur:
                stages.append((cur["first_layer_name"], cur["last_layer_name"]))
                cur = {}

    def ordinal(name):  # the GPT template's order: embedding, block i, mtp j, then norm / head / loss
        if name == "embedding":
            return 0
        m = re.match(r"^block(\d+)$", name)
        if m:
            return 1 + int(m.group(1))
        m = re.match(r"^mtp(\d+)$", name)
        if m:
            return 1 + num_layers + int(m.group(1))
        return float("inf")

    out = []
    for first, last in stages:
        lo, hi = ordinal(first), ordinal(last)
        blocks = sum(1 for i in range(1, num_layers + 1) if lo <= i <= hi)
        mtp = sum(1 for j in range(num_layers + 1, num_layers + 1 + num_mtp) if lo <= j <= hi)
        out.append((blocks, mtp))
    return out


def stub_te(te_version):
    """Transformer Engine needs CUDA to import: without it, Megatron's version checks get te_version."""
    try:
        import transformer_engine  # noqa: F401

        return "Transformer Engine installed"
    except Exception:  # noqa: BLE001 - ImportError, or a CUDA library missing
        import megatron.core.utils as U
        from packaging.version import Version

        U._te_version = Version(te_version)
        import megatron.core.models.common.embeddings.rope_utils as R

        def te_kernel(*a, **k):
            raise RuntimeError("Transformer Engine stand-in: kernels do not run in this checker")

        # TransformerConfig asks whether TE's fused RoPE kernel exists (apply_rope_fusion, on by default).
        if R.fused_apply_rotary_pos_emb is None:
            R.fused_apply_rotary_pos_emb = te_kernel
        return f"no Transformer Engine: version {te_version} and its fused RoPE kernel answered to Megatron's checks"


def stub_device(fsdp):
    import torch

    if torch.cuda.is_available():
        return "a real GPU"

    class Props:
        major, minor, name = 9, 0, "sm_90 (stub: no GPU on this machine)"

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: Props()
    # The launch environment Megatron-LM asks for on Hopper: 1 for tp / cp > 1, unset (or > 1) with FSDP.
    if fsdp:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        return "no GPU: sm_90 answered for the device queries, CUDA_DEVICE_MAX_CONNECTIONS unset (FSDP)"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return "no GPU: sm_90 answered for the device queries, CUDA_DEVICE_MAX_CONNECTIONS=1"


def megatron_chunks(config, args):
    """Megatron's (decoder, mtp) per virtual stage in model order q = vpp x pp + pp_rank."""
    p = args.pipeline_model_parallel_size
    v = args.virtual_pipeline_model_parallel_size or 1
    layout = config.pipeline_model_parallel_layout
    if layout is not None:
        from megatron.core.transformer.enums import LayerType

        return [
            (layout.layout[q % p][q // p].count(LayerType.decoder), layout.layout[q % p][q // p].count(LayerType.mtp))
            for q in range(p * v)
        ]
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    mtp = args.mtp_num_layers or 0
    out = []
    for q in range(p * v):
        n = get_num_layers_to_build(config, vp_stage=(q // p) if v > 1 else None, pp_rank=q % p)
        # Without a layout Megatron builds the MTP modules after the decoder on the last stage.
        out.append((n, mtp if q == p * v - 1 else 0))
    return out


def optimizer_state_bytes(args):
    """Adam's state per parameter as Megatron-Core keeps it from the parsed args: the master copy (fp32; with
    --use-precision-aware-optimizer, TE FusedAdam's int16 remainders beside bf16 weights where OptimizerConfig's
    store_param_remainders, default true, holds and no FP8 recipe but delayed scaling runs, else --main-params-dtype) and the two moments
    (--exp-avg-dtype, --exp-avg-sq-dtype; fp32 without the precision-aware optimizer)."""
    import dataclasses
    import torch
    from megatron.core.optimizer.optimizer_config import OptimizerConfig
    size = lambda d: torch.tensor([], dtype=d).element_size()  # noqa: E731
    if not getattr(args, "use_precision_aware_optimizer", False):
        return 12 if (args.bf16 or args.fp16) else 8
    remainders = {f.name: f.default for f in dataclasses.fields(OptimizerConfig)}.get("store_param_remainders", False)
    # TE keeps the master (as remainders) only without an FP8 recipe or with delayed scaling
    # (OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8); else Megatron-Core keeps it in main_params_dtype.
    te_master = not args.fp8 or args.fp8_recipe == "delayed"
    # FP8 parameters under TE's master: FusedAdam stores remainders for them too (nominally bf16) and its FP8 Adam
    # kernel takes an fp32 master only: it cannot step them (tools/check_megatron_core.py says the same).
    if te_master and remainders and getattr(args, "fp8_param_gather", False):
        raise RuntimeError("TE FusedAdam would store int16 remainders for the FP8 parameters (nominally bf16) and its "
                           "FP8 Adam kernel needs an fp32 master (--fp8-param-gather with the precision-aware "
                           "optimizer under delayed scaling)")
    master = 2 if (te_master and remainders and args.bf16 and args.main_params_dtype == torch.float32) else size(args.main_params_dtype)
    return master + size(args.exp_avg_dtype) + size(args.exp_avg_sq_dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("megatron_dir")
    ap.add_argument("args_file")
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--te-version", default="2.10.0", help="the Transformer Engine version answered when none is importable")
    ap.add_argument("--plan", default=None, help="the plan the file was written from: its split is compared with Megatron's")
    o = ap.parse_args()
    flags = read_flags(o.args_file)
    world = o.world_size or launch_world_size(o.args_file)
    if world is None:
        print("megatron.args: FAIL (setup: no --world-size and no launch.yaml beside the file)")
        return 1
    sys.path.insert(0, os.path.abspath(o.megatron_dir))
    device = stub_device(any(f in flags for f in ("--use-megatron-fsdp", "--use-torch-fsdp2")))
    step = "import"
    try:
        from megatron.training import arguments as A
        try:
            from megatron.training.argument_utils import core_transformer_config_from_args
        except ImportError:  # Megatron-LM <= core_v0.16: the function lives in arguments.py
            core_transformer_config_from_args = A.core_transformer_config_from_args

        device += "; " + stub_te(o.te_version)

        step = "parse_args"
        sys.argv = ["pretrain_gpt.py"] + flags
        try:
            args = A.parse_args()
        except SystemExit as e:  # argparse prints its own error line
            raise RuntimeError(f"argparse exited {e.code}")
        print(f"parse_args: ok ({len(flags)} words)")
        step = "validate_args"
        args.world_size, args.rank = world, 0
        A.validate_args(args)
        print(f"validate_args: ok (world size {world}, dp {args.data_parallel_size}, vpp {args.virtual_pipeline_model_parallel_size}; {device})")
        step = "TransformerConfig"
        config = core_transformer_config_from_args(args)
        print(f"TransformerConfig: ok ({type(config).__name__})")
        step = "split"
        chunks = megatron_chunks(config, args)
        print("split (decoder layers, MTP) per virtual stage, model order: " + " ".join(f"{d}" + (f"+{m}m" if m else "") for d, m in chunks))
        if o.plan:
            want = plan_chunks(o.plan, args.num_layers, args.mtp_num_layers or 0)
            if want != chunks:
                raise RuntimeError(f"Megatron's split {chunks} differs from the plan's {want}")
            print("split: equals the plan's")
            # The gradient buffer validate_args settled (fp32 when accumulate_allreduce_grads_in_fp32, else
            # the parameters' dtype: distributed/param_and_grad_buffer's grad_dtype) against the plan's.
            step = "grad_dtype"
            m = re.search(r'(?m)^grad_dtype: "?(\w+)"?\s*$', open(o.plan).read())
            params = "fp16" if args.fp16 else "bf16" if args.bf16 else "fp32"
            runs = "fp32" if args.accumulate_allreduce_grads_in_fp32 or params == "fp32" else params
            if m and m.group(1) != runs:
                raise RuntimeError(f"Megatron keeps gradients in {runs}, the plan in {m.group(1)}")
            print(f"grad_dtype: {runs}" + (", the plan's" if m else " (the plan states none)"))
            step = "optimizer_state"
            keeps = optimizer_state_bytes(args)
            m = re.search(r'(?m)^optimizer_state: "?([\w-]+)"?\s*$', open(o.plan).read())
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            from check_megatron_core import optimizer_state_mismatch

            why = optimizer_state_mismatch(keeps, m.group(1) if m else None, args.bf16 or args.fp16,
                                           bool(args.fp8) and args.fp8_recipe != "delayed")
            if why:
                raise RuntimeError("Megatron's " + why)
            print(f"optimizer_state: {keeps} B per parameter" + (f", the plan's {m.group(1)}" if m else ", fp32"))
    except Exception as e:  # noqa: BLE001 - every failure is the verdict
        print(f"megatron.args: FAIL ({step}: {type(e).__name__}: {e})")
        return 1
    print("megatron.args: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
