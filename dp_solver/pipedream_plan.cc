#include "dp_solver/pipedream_plan.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace planner {

Status PipeDreamLevels(const ClusterSpec& cluster, int64_t gpus, std::vector<int64_t>* machines,
                       std::vector<double>* bandwidths_Bps) {
  machines->clear();
  bandwidths_Bps->clear();
  int64_t left = gpus;
  for (const auto& l : cluster.levels) {
    if (left <= 1) break;
    int64_t take = std::min(left, l.size);
    if (left % take != 0) {
      return Status::InvalidArgument(
          fmt::format("--gpus {} does not fill whole '{}' units of {}; pass --pd-machines", gpus, l.name, l.size));
    }
    machines->push_back(take);
    bandwidths_Bps->push_back(l.bandwidth_GBps * 1e9);
    left /= take;
  }
  if (machines->empty()) {
    *machines = {1};
    *bandwidths_Bps = {cluster.levels[0].bandwidth_GBps * 1e9};
  }
  return Status::OK();
}

namespace {

// One stage of PipeDream's result as a plan stage: its layer range and names, replicas, devices
// (those PipeDream's levels place, else consecutive from *offset) and PipeDream's seconds per
// minibatch split by the profile's forward / backward ratio.
PlanStage PlanStageOf(const Profile& profile, const PipeDreamStage& s, bool levels_placed, int64_t* offset) {
  PlanStage ps;
  int64_t lo = INT64_MAX, hi = -1;
  for (const auto& name : s.layers) {
    int64_t idx = profile.FindLayer(name);
    lo = std::min(lo, idx);
    hi = std::max(hi, idx);
  }
  if (hi < 0) lo = hi = 0;
  ps.first_layer = lo;
  ps.last_layer = hi;
  ps.first_layer_name = s.layers.empty() ? "(empty)" : s.layers.front();
  ps.last_layer_name = s.layers.empty() ? "(empty)" : s.layers.back();
  ps.replicas = s.replicas;
  // Where PipeDream's levels put the replicas (a top-level stage's replicas on different
  // servers); consecutive from the offset when the levels leave machines unused.
  ps.devices = s.devices;
  if (static_cast<int64_t>(ps.devices.size()) != s.replicas || !levels_placed) {
    ps.devices.clear();
    for (int64_t k = 0; k < s.replicas; ++k) ps.devices.push_back(*offset + k);
  }
  ps.device_offset = ps.devices.front();
  *offset += s.replicas;
  double f = 0, bwd = 0;
  for (const auto& name : s.layers) {
    const auto& t = profile.layers[static_cast<size_t>(profile.FindLayer(name))].timings[0];
    f += t.forward_s;
    bwd += t.backward_s;
  }
  ps.forward_s = f / static_cast<double>(s.replicas);
  ps.backward_input_s = bwd / 2 / static_cast<double>(s.replicas);
  ps.backward_weight_s = bwd / 2 / static_cast<double>(s.replicas);
  return ps;
}

}  // namespace

Status BuildPipeDreamPlan(const Profile& profile, const ClusterSpec& cluster, int64_t gpus,
                          const PipeDreamOptions& options, Plan* plan) {
  PipeDreamOptions o = options;
  if (o.machines.empty()) PLANNER_RETURN_IF_ERROR(PipeDreamLevels(cluster, gpus, &o.machines, &o.bandwidths));
  PipeDreamResult r;
  PLANNER_RETURN_IF_ERROR(SolvePipeDream(profile, o, &r));
  plan->mode = PlanMode::kPipeDream;
  plan->config = r.config;
  plan->gpus_used = r.machines_used;
  plan->pp = static_cast<int64_t>(r.stages.size());
  plan->tp = 1;
  plan->dp = 1;
  plan->schedule = Schedule::kPipeDream;
  plan->microbatch_size = profile.reference_microbatch;
  plan->num_microbatches = 1;
  plan->global_batch = profile.reference_microbatch;
  const int64_t machines = std::accumulate(o.machines.begin(), o.machines.end(), int64_t{1}, std::multiplies<>());
  const bool levels_placed = r.machines_used == machines;  // else the levels leave machines unused
  int64_t offset = 0;
  for (const auto& s : r.stages) plan->stages.push_back(PlanStageOf(profile, s, levels_placed, &offset));
  plan->predicted.iteration_s = r.objective_s;
  plan->predicted.pipeline_s = r.objective_s;
  plan->predicted.samples_per_second = static_cast<double>(profile.reference_microbatch) / r.objective_s;
  plan->notes.push_back(
      fmt::format("PipeDream objective: {:.10g} s per minibatch of {} ({} antichain states); "
                  "single machine {:.6g} s, PipeDream's data-parallel baseline {:.6g} s",
                  r.objective_s, profile.reference_microbatch, r.num_states, r.single_machine_s, r.data_parallel_s));
  std::string levels;
  for (size_t i = 0; i < o.machines.size(); ++i) {
    levels += fmt::format("{}{} x {:.4g} B/s", i ? ", " : "", o.machines[i], o.bandwidths[i]);
  }
  plan->notes.push_back("levels (innermost first): " + levels);
  return Status::OK();
}

}  // namespace planner
