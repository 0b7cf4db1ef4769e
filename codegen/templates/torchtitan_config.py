# The template of torchtitan_config.py: codegen/torchtitan.cc writes the lines between the two
# "planner template" markers, each PLAN_<name> replaced by the plan's value (a line holding only one
# stands for whole lines, possibly none). The lines outside the markers define the names so that the
# template is a module Python tools check (tests/codegen/templates_lint.sh); docs/exports.md, "Templates".
PLAN_pipeline_lines = PLAN_cuda_graph_lines = PLAN_ac = PLAN_converters = None
PLAN_compile = PLAN_async_tp = False
PLAN_dp_replicate = PLAN_dp_shard = PLAN_tp = PLAN_cp = PLAN_pp = PLAN_local_batch = PLAN_global_batch = 1
PLAN_seq, PLAN_steps = 8192, 10
# ---- planner template begins ----
# torchtitan 0.3 config module of the plan (PLAN_world ranks, tp-cp-pp-dp PLAN_tp-PLAN_cp-PLAN_pp-PLAN_dp, PLAN_sched); the same settings as
# torchtitan.toml (torchtitan 0.2). Written by planner codegen. Run from this directory:
#   PYTHONPATH=. torchrun --nproc-per-node N -m torchtitan.train --module torchtitan_config --config plan
from torchtitan.components.quantization import Float8LinearConverter, MXFP8LinearConverter
from torchtitan.config import CompileConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.llama3 import model_registry
from torchtitan.models.llama3.config_registry import PLAN_flavor_fn


def plan():
    c = PLAN_flavor_fn()
    # The preset's model, compile and float8 settings replaced by the plan's (the 405B preset turns on
    # float8, torch.compile and async TP): the same as torchtitan.toml, but for float8's recipe where 0.3 has
    # rowwise only (codegen notes it).
    c.model_spec = model_registry("PLAN_flavor", converters=PLAN_converters)
    c.compile = CompileConfig(enable=PLAN_compile, enable_async_tensor_parallel=PLAN_async_tp)
    p = c.parallelism
    p.data_parallel_replicate_degree = PLAN_dp_replicate
    p.data_parallel_shard_degree = PLAN_dp_shard
    p.fsdp_reshard_after_forward = "PLAN_fsdp"
    p.tensor_parallel_degree = PLAN_tp
    p.context_parallel_degree = PLAN_cp
    p.pipeline_parallel_degree = PLAN_pp
    PLAN_pipeline_lines
    t = c.training
    t.local_batch_size = PLAN_local_batch
    t.global_batch_size = PLAN_global_batch
    t.seq_len = PLAN_seq
    t.steps = PLAN_steps
    t.mixed_precision_param = "PLAN_param_dtype"
    PLAN_cuda_graph_lines
    c.activation_checkpoint = PLAN_ac
    return c
# ---- planner template ends ----
# The names PLAN_converters and PLAN_ac may use (codegen/torchtitan.cc): the float8 and MXFP8 converters and the checkpoint classes.
_USED_BY_PLACEHOLDERS = (Float8LinearConverter, MXFP8LinearConverter, FullAC, SelectiveAC)
