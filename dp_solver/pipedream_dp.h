// PipeDream's optimizer (msr-fiddle/pipedream optimizer_graph_hierarchical.py,
// SOSP'19), reproduced exactly: the profile DAG is linearised into antichain
// states, and a min-max DP over (segment, machines) picks contiguous stages
// and a replication factor per stage, level by level over the machine
// hierarchy. Its cost model, flags and quirks are those of the released code
// (docs/cost_model.md section 6; shared/docs/pipedream-notes.md section 2).
// Pure function of its inputs; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/profile.h"

namespace planner {

struct PipeDreamOptions {
  std::vector<int64_t> machines;   // per level, innermost first (-n)
  std::vector<double> bandwidths;  // bytes/s per level (-b)
  double memory_bytes = 16e9;      // -s
  bool straight_pipeline = false;
  bool use_memory_constraint = false;
  bool use_fewer_machines = false;
  double activation_compression_ratio = 0;  // 0: activation transfers ignored (PipeDream's default)
};

struct PipeDreamStage {
  int64_t first_state = 0;  // half-open range of antichain states [first, end)
  int64_t end_state = 0;
  int64_t replicas = 1;  // flattened: product over levels
  std::vector<int64_t>
      devices;           // the replicas' devices as the levels place them (device = unit index, innermost fastest)
  double compute_s = 0;  // raw fwd+bwd seconds of the segment
  std::vector<std::string> layers;  // profile layer names in this stage
};

struct PipeDreamResult {
  double objective_s = 0;       // "Time per stage in pipeline": seconds per minibatch
  double single_machine_s = 0;  // sum of fwd+bwd
  double data_parallel_s = 0;   // PipeDream's DP baseline
  int64_t num_states = 0;
  int64_t machines_used = 0;
  std::vector<PipeDreamStage> stages;  // lowest-level stages, in order
  std::string config;                  // flattened "3-1"
};

Status SolvePipeDream(const Profile& profile, const PipeDreamOptions& options, PipeDreamResult* out);

// Antichain states of a DAG (exposed for tests): state s has a frontier and
// the set of nodes up to it; pred[s] are all ancestor states.
struct AntichainStates {
  std::vector<std::vector<int>> frontier;  // augmented antichain node indices
  std::vector<std::vector<char>> members;  // node in frontier-or-ancestor set
  std::vector<std::vector<int>> pred;      // all ancestor states (sorted)
};
// Nodes: `inputs[v]` lists producer indices. `start` is the first source.
Status BuildAntichainStates(const std::vector<std::vector<int>>& inputs, const std::vector<char>& alive, int start,
                            int64_t max_states, AntichainStates* out);

}  // namespace planner
