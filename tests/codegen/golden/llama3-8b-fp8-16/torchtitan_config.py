# torchtitan 0.3 config module of the plan (16 ranks, tp-cp-pp-dp 8-1-1-2, 1f1b); the same settings as
# torchtitan.toml (torchtitan 0.2). Written by planner codegen. Run from this directory:
#   PYTHONPATH=. torchrun --nproc-per-node N -m torchtitan.train --module torchtitan_config --config plan
from torchtitan.components.quantization import Float8LinearConverter, MXFP8LinearConverter
from torchtitan.config import CompileConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.llama3 import model_registry
from torchtitan.models.llama3.config_registry import llama3_8b


def plan():
    c = llama3_8b()
    # The preset's model, compile and float8 settings replaced by the plan's (the 405B preset turns on
    # float8, torch.compile and async TP): the same as torchtitan.toml, but for float8's recipe where 0.3 has
    # rowwise only (codegen notes it).
    c.model_spec = model_registry("8B", converters=[Float8LinearConverter.Config(filter_fqns=["lm_head"], recipe_name="rowwise")])
    c.compile = CompileConfig(enable=False, enable_async_tensor_parallel=False)
    p = c.parallelism
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 2
    p.fsdp_reshard_after_forward = "never"
    p.tensor_parallel_degree = 8
    p.context_parallel_degree = 1
    p.pipeline_parallel_degree = 1
    t = c.training
    t.local_batch_size = 256
    t.global_batch_size = 512
    t.seq_len = 8192
    t.steps = 20
    t.mixed_precision_param = "bfloat16"
    c.activation_checkpoint = None
    return c
