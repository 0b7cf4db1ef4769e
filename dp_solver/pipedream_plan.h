// PipeDream mode (planner solve --mode pipedream): PipeDream's optimizer (pipedream_dp.h) run on a
// cluster's machine levels, and its result as a Plan: the stages with their layers, replicas and
// devices, their times split by the profile's forward / backward ratio, PipeDream's objective and
// the levels in notes (docs/cost_model.md section 6). Pure function of its inputs; thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "dp_solver/pipedream_dp.h"
#include "spec/cluster_spec.h"
#include "spec/plan.h"
#include "spec/profile.h"

namespace planner {

// The levels that hold `gpus` GPUs of `cluster`: its topology levels, innermost first, each taken
// whole (or as much of it as is left), until they hold the GPUs; one machine on the innermost level
// for a single GPU. InvalidArgument when the GPUs do not fill whole units of a level (the fix is
// --pd-machines).
Status PipeDreamLevels(const ClusterSpec& cluster, int64_t gpus, std::vector<int64_t>* machines,
                       std::vector<double>* bandwidths_Bps);

// Runs PipeDream's optimizer on `profile` with `options` (options.machines empty: the levels of
// `cluster` that hold `gpus`, PipeDreamLevels) and fills *plan's mode, layout, stages, predicted
// times and notes; the caller adds the inputs' provenance. Errors: those of PipeDreamLevels and
// SolvePipeDream.
Status BuildPipeDreamPlan(const Profile& profile, const ClusterSpec& cluster, int64_t gpus,
                          const PipeDreamOptions& options, Plan* plan);

}  // namespace planner
