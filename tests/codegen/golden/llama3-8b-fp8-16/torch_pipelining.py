# torch.distributed.pipelining settings of the plan (16 ranks, tp-pp-dp 8-1-2, 1f1b).
# The model's top-level submodules must carry the planner's layer names.
from torch.distributed.pipelining import SplitPoint, pipeline
from torch.distributed.pipelining import Schedule1F1B

SPLIT_SPEC = {
}
SCHEDULE = Schedule1F1B
N_MICROBATCHES = 32
MICROBATCH_SIZE = 8
STAGES_PER_RANK = 1


def build(model, example_microbatch, stage_index, device, group=None, loss_fn=None):
    """Splits `model` at SPLIT_SPEC and returns (stage, schedule) for this rank."""
    pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=SPLIT_SPEC)
    stage = pipe.build_stage(stage_index, device, group)
    return stage, SCHEDULE(stage, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
