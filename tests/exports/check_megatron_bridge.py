"""Checks codegen's megatron_bridge.py exports with Megatron-Bridge's own code (PyPI megatron-bridge 0.6.2 on
megatron-core 0.19.2, tests/exports/setup_bridge_venv.sh): each file imports, every field it sets is a field of the
Bridge dataclass it is given to (a dataclass takes unknown attributes silently once built, so this is checked by
name), config() builds the ConfigContainer, and Bridge's runtime_config_update (mixed precision applied, the
data-parallel size derived from WORLD_SIZE, the communication overlap set up, ConfigContainer.validate with the
model's TransformerConfig checks) accepts it; the result must be the plan's layout (launch.yaml beside it).
Usage: python check_megatron_bridge.py DIR... (each a codegen launch directory holding megatron_bridge.py).
No GPU: Transformer Engine is stubbed for the Bridge modules that import it unguarded (bridge_stubs.py; the Bridge
modules imported after them see the stub too, and only test for it), Megatron-Core's TE layer runs without it, and
TE's fused RoPE is stood in for by a name (TransformerConfig asks for it under apply_rope_fusion). So the check does
not cover what needs TE itself: TE's version rules, the precision-aware optimizer's FusedAdam, model construction. Prints "ok DIR" or "FAIL DIR: reason" per directory; exit 1 on any failure."""
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
from megatron.bridge.models.mla_provider import MLAModelProvider  # noqa: E402
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
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec  # noqa: E402
import megatron.core.extensions.transformer_engine as core_te  # noqa: E402

# Megatron-Core's TE layer (imported before Bridge's PEFT) saw Transformer Engine absent, as on a machine without it;
# Bridge modules imported after its PEFT layers saw the stub (they only test for it). Later imports see it absent.
assert "transformer_engine" not in bridge_stubs.STUBBED and not core_te.HAVE_TE
for name in [n for n in sys.modules if n == "transformer_engine" or n.startswith("transformer_engine.")]:
    del sys.modules[name]

# Transformer Engine's fused RoPE, which TransformerConfig requires for apply_rope_fusion (Megatron-LM's default, as
# the export writes it): absent without TE, present on any GPU machine with it. Stood in for by a name, so the rest
# of the config's checks run; whether the run's TE has it is not checked here.
from megatron.core.models.common.embeddings import rope_utils  # noqa: E402
import megatron.core.utils as megatron_core_utils  # noqa: E402
from packaging.version import Version as PkgVersion  # noqa: E402

if rope_utils.fused_apply_rotary_pos_emb is None:
    rope_utils.fused_apply_rotary_pos_emb = lambda *args, **kwargs: None
# Bridge's TE version rules (is_te_min_version, e.g. TE >= 2.7 for delay_wgrad_compute with overlap_grad_reduce) read
# Megatron-Core's cached TE version: the stubs' (the 26.04 container's TE 2.14), as a GPU run with it would.
megatron_core_utils._te_version = PkgVersion(bridge_stubs.TE_VERSION)

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
        if name == "MODEL" and mod.MODEL.get("multi_latent_attention"):
            cls = MLAModelProvider  # the template's provider for MLA models
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
    # Megatron-LM's rule Bridge does not check: interleaving at pp 2 needs the p2p overlap (without it one batch holds
    # sends both ways to the same peer; training/arguments.py validate_args).
    if (m.virtual_pipeline_model_parallel_size or 1) > 1 and m.pipeline_model_parallel_size <= 2 and not m.overlap_p2p_comm:
        return "interleaved schedule at pp 2 without overlap_p2p_comm (Megatron-LM refuses it: batched p2p both ways)"
    # CommOverlapConfig's fields land on the model and DDP configs.
    for key, want in mod.COMM_OVERLAP.items():
        obj = cfg.model if hasattr(cfg.model, key) else cfg.ddp
        if getattr(obj, key) != want:
            return f"Bridge runs COMM_OVERLAP {key}={getattr(obj, key)!r}, the file sets {want!r}"
    # Transformer Engine dispatches context parallelism on these names and raises on others at the first attention
    # forward (attention/dot_product_attention/context_parallel.py), after this check would have passed.
    if m.context_parallel_size > 1 and m.cp_comm_type not in ("p2p", "all_gather", "a2a", "a2a+p2p"):
        return f"cp_comm_type {m.cp_comm_type!r} is none of Transformer Engine's p2p, all_gather, a2a, a2a+p2p"
    # MLA as Megatron-LM builds it: YaRN at factor 1 (Megatron-LM's --rotary-scaling-factor default; the MLA config's
    # is 40).
    if "kv_lora_rank" in mod.MODEL:  # (without multi_latent_attention the template's GPTModelProvider refuses them)
        if m.rotary_scaling_factor != 1.0:
            return f"MLA rotary_scaling_factor {m.rotary_scaling_factor!r}: Megatron-LM runs 1.0 (--rotary-scaling-factor)"
        if "q_lora_rank" not in mod.MODEL:  # Megatron-LM: None without --q-lora-rank (the query projected directly)
            return f"MLA model runs q_lora_rank={m.q_lora_rank!r} (the MLA config's default) where Megatron-LM runs None"
        # MLAModelProvider's base order puts some of GPTModelProvider's defaults (the Megatron-LM-like ones every other
        # export runs on) back to Megatron-Core's: each such field the file does not set must run GPTModelProvider's.
        for f in dataclasses.fields(GPTModelProvider):
            if f.name in mod.MODEL or f.name == "rotary_scaling_factor":
                continue
            gpt = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            mla = next(x for x in dataclasses.fields(MLAModelProvider) if x.name == f.name)
            mla = mla.default_factory() if mla.default_factory is not dataclasses.MISSING else mla.default
            if repr(gpt) != repr(mla) and getattr(m, f.name) != gpt:
                return f"MLA model runs {f.name}={getattr(m, f.name)!r} where GPTModelProvider runs {gpt!r}"
    # An MoE or MLA model's layers built one by one (moe_layer_freq; MLA's attention), not one layer's spec copied.
    spec = getattr(m, "transformer_layer_spec", None)
    if getattr(m, "multi_latent_attention", False) and getattr(spec, "func", None) is not get_gpt_decoder_block_spec:
        return f"MLA model with transformer_layer_spec {spec!r}: not the block spec that builds MLA"
    if m.num_moe_experts and getattr(spec, "func", None) is not get_gpt_decoder_block_spec:
        return f"MoE model with transformer_layer_spec {spec!r}: moe_layer_freq would be ignored"
    if mod.FINETUNE and cfg.peft is None and mod.LORA is not None:
        return "the plan's LoRA is not in the config"
    return ""


def main(dirs):
    failed = 0
    environ = dict(os.environ)
    for d in dirs:
        os.environ.clear()  # each file as a fresh run sees it: Bridge applies a config's env_vars to the process
        os.environ.update(environ)
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
