// torch_pipelining.py: the plan for torch.distributed.pipelining.
#include "codegen/exports.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>


namespace planner {
namespace codegen_internal {

void AddTorchPipelining(const ModelSpec& model, const LaunchPlan& L, Files* files, std::vector<std::string>* notes) {
  const int64_t n = static_cast<int64_t>(L.ranks.size());
  const char* sched = L.schedule == Schedule::kGpipe ? "ScheduleGPipe"
                      : L.schedule == Schedule::kInterleaved ? "ScheduleInterleaved1F1B"
                      : L.schedule == Schedule::kZbH1 ? "ScheduleInterleavedZeroBubble"
                      : L.schedule == Schedule::kDualPipeV ? "ScheduleDualPipeV"
                                              : "Schedule1F1B";
  if (L.schedule == Schedule::kDualPipeV) {
    notes->push_back("torch_pipelining.py: ScheduleDualPipeV takes both stages of a rank, stage indices r and 2 x pp - 1 - r (the V), as a list; build() makes one");
  }
  if (L.schedule == Schedule::kPipeDream) notes->push_back("torch_pipelining.py: no asynchronous schedule in torch.distributed.pipelining; exported as 1F1B");
  std::string splits;
  for (const auto& s : L.stages) {
    if (s.first_layer == 0) continue;
    splits += fmt::format("    \"{}\": SplitPoint.BEGINNING,\n", model.layers[static_cast<size_t>(s.first_layer)].name);
  }
  files->emplace_back("torch_pipelining.py", fmt::format(R"PY(# torch.distributed.pipelining settings of the plan ({} ranks, tp-pp-dp {}-{}-{}, {}).
# The model's top-level submodules must carry the planner's layer names.
from torch.distributed.pipelining import SplitPoint, pipeline
from torch.distributed.pipelining import {}

SPLIT_SPEC = {{
{}}}
SCHEDULE = {}
N_MICROBATCHES = {}
MICROBATCH_SIZE = {}
STAGES_PER_RANK = {}


def build(model, example_microbatch, stage_index, device, group=None, loss_fn=None):
    """Splits `model` at SPLIT_SPEC and returns (stage, schedule) for this rank."""
    pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=SPLIT_SPEC)
    stage = pipe.build_stage(stage_index, device, group)
    return stage, SCHEDULE(stage, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
)PY",
                                                         n, L.tp, L.pp, L.dp, ScheduleName(L.schedule), sched, splits, sched, L.num_microbatches,
                                                         L.microbatch_size, L.interleave));
}

}  // namespace codegen_internal
}  // namespace planner
