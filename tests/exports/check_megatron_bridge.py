"""Checks codegen's megatron_bridge.py exports with Megatron-Bridge's own code (PyPI megatron-bridge 0.6.2 on
megatron-core 0.19.2, tests/exports/setup_bridge_venv.sh): each file imports, every field it sets is a field of the
Bridge dataclass it is given to (a dataclass takes unknown attributes silently once built, so this is checked by
name), config() builds the ConfigContainer, and Bridge's runtime_config_update (mixed precision applied, the
data-parallel size derived from WORLD_SIZE, the communication overlap set up, ConfigContainer.validate with the
model's TransformerConfig checks) accepts it; the result must be the plan's layout (launch.yaml beside it).
Usage: python check_megatron_bridge.py DIR... (each a codegen launch directory holding megatron_bridge.py).
No GPU: Transformer Engine is stubbed for the two Bridge modules that import it unguarded (bridge_stubs.py),
Megatron-Core itself runs without it. Prints "ok DIR" or "FAIL DIR: reason" per directory; exit 1 on any failure."""
import dataclasses
import importlib.util
import os
import re
import sys
import tempfile
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bridge_stubs  # noqa: E402  (before any megatron import)
from megatron.bridge.models import GPTModelProvider  # noqa: E402
from megatron.bridge.peft.lora import LoRA  # noqa: E402
from megatron.bridge.training.comm_overlap import CommOverlapConfig  # noqa: E402
from megatron.bridge.training.config import (  # noqa: E402
    CheckpointConfig,
    DistributedDataParallelConfig,
    OptimizerConfig,
    TrainingConfig,
    runtime_config_update,
)
from megatron.bridge.training.mixed_precision import MixedPrecisionConfig  # noqa: E402

# Megatron-Core must run as without Transformer Engine: the stubs only serve Bridge's unguarded imports.
assert "transformer_engine" not in bridge_stubs.STUBBED
for name in [n for n in sys.modules if n == "transformer_engine" or n.startswith("transformer_engine.")]:
    del sys.modules[name]

SECTIONS = [("MODEL", GPTModelProvider), ("TRAIN", TrainingConfig), ("DDP", DistributedDataParallelConfig),
            ("OPTIMIZER", OptimizerConfig), ("MIXED_PRECISION", MixedPrecisionConfig),
            ("CHECKPOINT", CheckpointConfig), ("COMM_OVERLAP", CommOverlapConfig)]


def launch_fields(path):
    """The plan's layout as launch.yaml writes it (its top-level scalar keys)."""
    out = {}
    for line in open(path):
        m = re.match(r"^([a-z_]+): (\S+)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def check(d):
    spec = importlib.util.spec_from_file_location("megatron_bridge_export", os.path.join(d, "megatron_bridge.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, cls in SECTIONS:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(getattr(mod, name)) - known)
        if unknown:
            return f"{name}: {unknown} are not fields of {cls.__name__}"
    if mod.LORA is not None:
        unknown = sorted(set(mod.LORA) - {f.name for f in dataclasses.fields(LoRA)})
        if unknown:
            return f"LORA: {unknown} are not fields of LoRA"
    os.environ.update(WORLD_SIZE=str(mod.WORLD_SIZE), RANK="0", LOCAL_RANK="0")
    base = tempfile.mkdtemp(prefix="bridge-base-")  # Bridge checks the base checkpoint's directory exists
    cfg = mod.config(train_iters=10, pretrained_checkpoint=base if mod.FINETUNE else None,
                     tokenizer="gpt2" if mod.FINETUNE else None)
    runtime_config_update(cfg)
    L = launch_fields(os.path.join(d, "launch.yaml"))
    m = cfg.model
    got = {"tp": m.tensor_model_parallel_size, "pp": m.pipeline_model_parallel_size, "cp": m.context_parallel_size,
           "dp": cfg.data_parallel_size, "interleave": m.virtual_pipeline_model_parallel_size or 1,
           "microbatch_size": cfg.train.micro_batch_size, "global_batch": cfg.train.global_batch_size}
    for key, value in got.items():
        if key in L and int(L[key]) != int(value):
            return f"Bridge runs {key} {value}, the plan {L[key]}"
    # What the file sets is what Bridge runs: no field changed by its finalization (mixed precision, the
    # communication-overlap setup, FSDP's defaults), the mapped ones (activation, attention backend) by name.
    finals = [("MODEL", cfg.model), ("TRAIN", cfg.train), ("DDP", cfg.ddp), ("OPTIMIZER", cfg.optimizer),
              ("MIXED_PRECISION", cfg.mixed_precision), ("CHECKPOINT", cfg.checkpoint)]
    for name, obj in finals:
        for key, want in getattr(mod, name).items():
            have = getattr(obj, key)
            if key in ("activation_func", "attention_backend"):
                have = getattr(have, "__name__", getattr(have, "name", have))
            if key == "pipeline_model_parallel_layout":  # parsed into Megatron-Core's layout object
                have = str(have)
            if have != want:
                return f"Bridge runs {name} {key}={have!r}, the file sets {want!r}"
    if mod.FINETUNE and cfg.peft is None and mod.LORA is not None:
        return "the plan's LoRA is not in the config"
    return ""


def main(dirs):
    failed = 0
    for d in dirs:
        try:
            why = check(d)
        except Exception as e:  # Bridge's own refusals are assertions and ValueErrors
            why = f"{type(e).__name__}: {' '.join(str(e).split())}"  # one line: Bridge's messages span several
            if os.environ.get("VERBOSE"):
                traceback.print_exc()
        print(f"FAIL {d}: {why}" if why else f"ok {d}")
        failed += bool(why)
    print(f"megatron-bridge: {len(dirs) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
