# torchtitan 0.3 config module of the plan (64 ranks, tp-cp-pp-dp 4-2-2-4, zb-h1); the same settings as
# torchtitan.toml (torchtitan 0.2). Written by planner codegen. Run from this directory:
#   PYTHONPATH=. torchrun --nproc-per-node N -m torchtitan.train --module torchtitan_config --config plan
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.llama3 import model_registry
from torchtitan.models.llama3.config_registry import llama3_70b


def plan():
    c = llama3_70b()
    p = c.parallelism
    p.data_parallel_replicate_degree = 1
    p.data_parallel_shard_degree = 4
    p.fsdp_reshard_after_forward = "default"
    p.tensor_parallel_degree = 4
    p.context_parallel_degree = 2
    p.pipeline_parallel_degree = 2
    p.pipeline_parallel_schedule = "InterleavedZeroBubble"
    p.pipeline_parallel_microbatch_size = 1
    p.module_fqns_per_model_part = [
        ["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3", "layers.4", "layers.5", "layers.6", "layers.7", "layers.8", "layers.9", "layers.10", "layers.11", "layers.12", "layers.13", "layers.14", "layers.15", "layers.16", "layers.17", "layers.18", "layers.19", "layers.20", "layers.21", "layers.22", "layers.23", "layers.24", "layers.25", "layers.26", "layers.27", "layers.28", "layers.29", "layers.30", "layers.31", "layers.32", "layers.33", "layers.34", "layers.35", "layers.36", "layers.37", "layers.38", "layers.39"],
        ["layers.40", "layers.41", "layers.42", "layers.43", "layers.44", "layers.45", "layers.46", "layers.47", "layers.48", "layers.49", "layers.50", "layers.51", "layers.52", "layers.53", "layers.54", "layers.55", "layers.56", "layers.57", "layers.58", "layers.59", "layers.60", "layers.61", "layers.62", "layers.63", "layers.64", "layers.65", "layers.66", "layers.67", "layers.68", "layers.69", "layers.70", "layers.71", "layers.72", "layers.73", "layers.74", "layers.75", "layers.76", "layers.77", "layers.78", "layers.79", "norm", "lm_head"],
    ]
    t = c.training
    t.local_batch_size = 128
    t.global_batch_size = 512
    t.seq_len = 8192
    t.steps = 20
    t.mixed_precision_param = "bfloat16"
    t.disable_cuda_graphs = True  # torchtitan 0.3: CUDA graphs do not run with pipeline parallelism
    c.activation_checkpoint = None
    return c
