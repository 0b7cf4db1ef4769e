# torchtitan 0.3 config module of the plan (64 ranks, tp-cp-pp-dp 4-1-2-8, interleaved); the same settings as
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
    c.model_spec = model_registry("8B", converters=[])
    c.compile = CompileConfig(enable=False, enable_async_tensor_parallel=False)
    p = c.parallelism
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 8
    p.fsdp_reshard_after_forward = "never"
    p.tensor_parallel_degree = 4
    p.context_parallel_degree = 1
    p.pipeline_parallel_degree = 2
    p.pipeline_parallel_schedule = "Interleaved1F1B"
    p.pipeline_parallel_microbatch_size = 2
    p.module_fqns_per_model_part = [
        ["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3", "layers.4", "layers.5", "layers.6", "layers.7"],
        ["layers.8", "layers.9", "layers.10", "layers.11", "layers.12", "layers.13", "layers.14", "layers.15", "layers.16"],
        ["layers.17", "layers.18", "layers.19", "layers.20", "layers.21", "layers.22", "layers.23", "layers.24", "layers.25"],
        ["layers.26", "layers.27", "layers.28", "layers.29", "layers.30", "layers.31", "norm", "lm_head"],
    ]
    t = c.training
    t.local_batch_size = 64
    t.global_batch_size = 512
    t.seq_len = 8192
    t.steps = 20
    t.mixed_precision_param = "bfloat16"
    t.disable_cuda_graphs = True  # torchtitan 0.3: CUDA graphs do not run with pipeline parallelism
    c.activation_checkpoint = None
    return c
