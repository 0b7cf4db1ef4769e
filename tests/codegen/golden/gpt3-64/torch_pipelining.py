# torch.distributed.pipelining settings of the plan (64 ranks, tp-pp-dp 8-8-1, interleaved).
# The model's top-level submodules must carry the planner's layer names.
from torch.distributed.pipelining import SplitPoint, pipeline
from torch.distributed.pipelining import ScheduleInterleaved1F1B

SPLIT_SPEC = {
    "block3": SplitPoint.BEGINNING,
    "block6": SplitPoint.BEGINNING,
    "block9": SplitPoint.BEGINNING,
    "block12": SplitPoint.BEGINNING,
    "block15": SplitPoint.BEGINNING,
    "block18": SplitPoint.BEGINNING,
    "block21": SplitPoint.BEGINNING,
    "block24": SplitPoint.BEGINNING,
    "block27": SplitPoint.BEGINNING,
    "block30": SplitPoint.BEGINNING,
    "block33": SplitPoint.BEGINNING,
    "block36": SplitPoint.BEGINNING,
    "block39": SplitPoint.BEGINNING,
    "block42": SplitPoint.BEGINNING,
    "block45": SplitPoint.BEGINNING,
    "block48": SplitPoint.BEGINNING,
    "block51": SplitPoint.BEGINNING,
    "block54": SplitPoint.BEGINNING,
    "block57": SplitPoint.BEGINNING,
    "block60": SplitPoint.BEGINNING,
    "block63": SplitPoint.BEGINNING,
    "block66": SplitPoint.BEGINNING,
    "block69": SplitPoint.BEGINNING,
    "block72": SplitPoint.BEGINNING,
    "block75": SplitPoint.BEGINNING,
    "block78": SplitPoint.BEGINNING,
    "block81": SplitPoint.BEGINNING,
    "block84": SplitPoint.BEGINNING,
    "block87": SplitPoint.BEGINNING,
    "block90": SplitPoint.BEGINNING,
    "block93": SplitPoint.BEGINNING,
}
SCHEDULE = ScheduleInterleaved1F1B
N_MICROBATCHES = 128
MICROBATCH_SIZE = 1
STAGES_PER_RANK = 4


def build(model, example_microbatch, stage_index, device, group=None, loss_fn=None):
    """Splits `model` at SPLIT_SPEC and returns (stage, schedule) for this rank."""
    pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=SPLIT_SPEC)
    stage = pipe.build_stage(stage_index, device, group)
    return stage, SCHEDULE(stage, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
