// What a launch plan means to the runtime, read once per run: the schedule,
// whether stages are
// replicated one by one, the virtual stages and how a program numbers its
// microbatches; and the rank table that resolves a program's peers. Plain
// value types; docs/runtime.md ("The executor's parts").
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "common/status.h"
#include "spec/kinds.h"
#include "spec/launch_plan.h"

namespace planner {

struct LaunchLayout {
  Schedule schedule = Schedule::k1F1B;
  bool async = false;       // PipeDream: no flush; one program covers the run's remaining microbatches
  bool replicated = false;  // per-stage replication ("2-1-1", PipeDream): microbatch j on replica j mod r of each stage
  int64_t stages = 1;       // Q: virtual stages
  int64_t positions =
      1;  // p: pipeline positions; a rank holds the virtual stages ChunkStage(schedule, c, its position, p):
          // q = c p + its position, or DualPipeV's V (its position and 2p - 1 - it)
  // Microbatches per iteration in a program's numbering: replicated, all of the global batch (round
  // robin over each stage's replicas); else this replica's (its samples follow the lower replicas').
  int64_t microbatches = 1;
};

// Reads the layout of `launch`; an error names launch.yaml and what does not fit (replication with a schedule other than 1F1B / PipeDream or with interleaving, a batch
// that does not split, a stage count other than pp x interleave).
Status LayoutOf(const LaunchPlan& launch, LaunchLayout* out);

// The ranks of a launch by (pipeline position, replica, tensor-parallel rank, context-parallel rank).
class RankTable {
 public:
  explicit RankTable(const LaunchPlan& launch);
  // The rank at (position, replica, tp_rank, cp_rank); -1 when the launch has none.
  int64_t At(int64_t position, int64_t replica, int64_t tp_rank, int64_t cp_rank = 0) const;

 private:
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int64_t> ranks_;
};

}  // namespace planner
