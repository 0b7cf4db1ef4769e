#include "runtime/launch_layout.h"

#include <fmt/format.h>

#include "spec/input_limits.h"

namespace planner {

Status LayoutOf(const LaunchPlan& L, LaunchLayout* out) {
  LaunchLayout y;
  y.schedule = L.schedule;  // parsed once, where launch.yaml is read
  y.async = y.schedule == Schedule::kPipeDream;
  y.replicated = y.async;
  for (const auto& st : L.stages) y.replicated = y.replicated || st.replicas != L.dp;
  if (y.replicated && (L.interleave != 1 || (y.schedule != Schedule::k1F1B && !y.async))) {
    return Status::NotSupported(
        fmt::format("{}: per-stage replication runs with the 1F1B (flush) or PipeDream (asynchronous) schedule and "
                    "interleave 1; regenerate with planner codegen",
                    L.path));
  }
  int64_t batch = 0;  // the sizes are bounded where launch.yaml is read; the product is checked all the same
  if (!y.replicated &&
      (!CheckedProduct({L.microbatch_size, L.num_microbatches, L.dp}, &batch) || L.global_batch != batch)) {
    return Status::InvalidArgument(
        fmt::format("{}: global_batch {} != microbatch_size {} x num_microbatches {} x dp {}", L.path, L.global_batch,
                    L.microbatch_size, L.num_microbatches, L.dp));
  }
  y.stages = static_cast<int64_t>(L.stages.size());
  y.positions = y.replicated ? y.stages : L.pp;
  int64_t virtual_stages = 0;
  if (!CheckedProduct({y.positions, L.interleave}, &virtual_stages) || y.stages != virtual_stages) {
    return Status::InvalidArgument(
        fmt::format("{}: {} stages for pp {} x interleave {}", L.path, y.stages, y.positions, L.interleave));
  }
  if (y.replicated) {
    if (L.global_batch % L.microbatch_size != 0) {
      return Status::InvalidArgument(fmt::format("{}: microbatch_size {} does not divide global_batch {}", L.path,
                                                 L.microbatch_size, L.global_batch));
    }
    for (const auto& st : L.stages) {
      if ((L.global_batch / L.microbatch_size) % st.replicas != 0) {
        return Status::InvalidArgument(fmt::format("{}: {} microbatches do not split evenly over a stage's {} replicas",
                                                   L.path, L.global_batch / L.microbatch_size, st.replicas));
      }
    }
  }
  y.microbatches = y.replicated ? L.global_batch / L.microbatch_size : L.num_microbatches;
  *out = y;
  return Status::OK();
}

RankTable::RankTable(const LaunchPlan& L) {
  for (const auto& r : L.ranks) ranks_[{r.stage, r.replica, r.tp_rank, r.cp_rank}] = r.rank;
}

int64_t RankTable::At(int64_t position, int64_t replica, int64_t tp_rank, int64_t cp_rank) const {
  auto it = ranks_.find({position, replica, tp_rank, cp_rank});
  return it == ranks_.end() ? -1 : it->second;
}

}  // namespace planner
