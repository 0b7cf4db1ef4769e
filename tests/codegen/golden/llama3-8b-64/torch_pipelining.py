# torch.distributed.pipelining settings of the plan (64 ranks, tp-pp-dp 4-2-8, interleaved).
# The model's top-level submodules must carry the planner's layer names.
from torch.distributed.pipelining import SplitPoint, pipeline
from torch.distributed.pipelining import ScheduleInterleaved1F1B

SPLIT_SPEC = {
    "block8": SplitPoint.BEGINNING,
    "block17": SplitPoint.BEGINNING,
    "block26": SplitPoint.BEGINNING,
}
SCHEDULE = ScheduleInterleaved1F1B
N_MICROBATCHES = 32
MICROBATCH_SIZE = 2
STAGES_PER_RANK = 2


def build(model, example_microbatch, stage_index, device, group=None, loss_fn=None):
    """Splits `model` at SPLIT_SPEC and returns (stage, schedule) for this rank."""
    pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=SPLIT_SPEC)
    stage = pipe.build_stage(stage_index, device, group)
    return stage, SCHEDULE(stage, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
