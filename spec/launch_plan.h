// LaunchPlan: a plan turned into ranks, written as launch/launch.yaml by
// `planner codegen` and read by every rank of `planner run` (docs/formats.md).
// One entry per rank (node slot, local device, stage, replica, tp rank, its
// pipeline neighbours) and every communicator group. Validated on read:
// ranks cover 0..N-1 once, stages and groups reference real ranks, a
// uniform plan's groups are the rank generator's (spec/rank_generator.h), the
// model file matches its digest, every rank has exactly one program (the
// ordered actions it executes, spec/program.h). Plain value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/dp_comm.h"
#include "spec/dtype.h"
#include "spec/kinds.h"
#include "spec/layout.h"
#include "spec/model_state.h"
#include "spec/program.h"

namespace planner {

struct LaunchRank {
  int64_t rank = 0;
  int64_t node = 0;          // host slot: index of the node in the hostfile / allocation
  int64_t local_device = 0;  // GPU index on the node (CPU runs: the core)
  int64_t stage = 0;
  int64_t replica = 0;  // index within the stage's replicas
  int64_t tp_rank = 0;
  int64_t cp_rank = 0;              // context-parallel rank (holds sequence chunks cp_rank and 2 cp - 1 - cp_rank)
  std::vector<int64_t> prev, next;  // ranks of the previous / next stage with the same tp and cp rank
  int64_t program = -1;             // index into LaunchPlan::programs (derived, not written: see AssignPrograms)
};

struct LaunchStage {
  int64_t first_layer = 0, last_layer = 0;  // inclusive, model layer indices
  int64_t replicas = 1;
  int64_t chunk = 0;               // interleaved: model chunk on its device
  double predicted_compute_s = 0;  // per microbatch (F + B + W) from the plan
  double predicted_forward_s = 0, predicted_backward_input_s = 0, predicted_backward_weight_s = 0, predicted_p2p_s = 0;
  double predicted_dp_allreduce_s = 0;     // per iteration, the gradient all-reduce of the stage's replica group
  double predicted_peak_memory_bytes = 0;  // per device, in the plan's dtype and optimizer state
  double predicted_ep_comm_s = 0;          // per iteration, the MoE layers' all-to-alls (0: the plan has no prediction)
};

struct LaunchRun {
  int64_t iterations = 20;
  int64_t warmup_iterations = 2;
  std::string optimizer = "adam";  // adam | sgd
  double learning_rate = 1e-3;
  uint64_t seed = 1;
  int64_t checkpoint_every = 0;  // 0: never
  double timeout_s = 60;
  int64_t threads = 1;
  bool overlap_dp = false;  // all-reduce gradients on a second thread during the last backward
};

// The launch plan: the plan's layout (ParallelLayout; launch.yaml carries its sizes, schedule and
// microbatching, not recompute or ZeRO, which the runtime does not run) with every rank, its
// groups and programs. Expert parallelism (MoE layers; MOE.md's folding): within a stage the
// tp x cp x dp ranks, i = tp_rank + t (cp_rank + cp replica), are read as i = etp_rank + etp (ep_rank
// + ep edp_rank).
struct LaunchPlan : ParallelLayout {
  std::string path;
  std::string model_file = "model.yaml";  // relative to launch.yaml
  std::string model_digest;
  std::string plan_digest;
  Device device = Device::kCpu;
  int64_t global_batch = 1;
  int64_t gpus_per_node = 1;
  std::vector<LaunchStage> stages;
  std::vector<LaunchRank> ranks;
  // dp_groups: the ranks holding the same weights, whose gradients are summed (dp x cp: Megatron's
  // data-parallel group with context parallelism); cp_groups: the ring of each sequence.
  std::vector<std::vector<int64_t>> tp_groups, dp_groups, pp_groups, cp_groups;
  // ep_groups: the ranks that exchange tokens (rank k of a group holds experts [k E / ep, (k+1) E / ep));
  // edp_groups: the ranks holding the same experts, whose expert gradients are summed (ep > 1 only).
  std::vector<std::vector<int64_t>> ep_groups, edp_groups;
  // How each data-parallel group sums its gradients (DpComm); `ps` and `byteps` with summation
  // servers: extra ranks after the workers (servers[i] = ranks.size() + i), which hold no stage and
  // run the summation loop; the world is ranks.size() + servers.size() processes.
  DpComm dp_comm = DpComm::kHierAllReduce;
  std::vector<int64_t> servers;
  // ps co-located (`ps_placement: colocated`, with `servers: []`): every worker is the summation
  // server of its 1/n shard of its group's gradients; no extra ranks.
  bool ps_colocated = false;
  bool vertical_sync = false;  // PipeDream's vertical sync (schedule pipedream only)
  // The plan's gradient buffer dtype (plan.yaml grad_dtype: fp32, fp16 or bf16; none: the default
  // for the model's precision). The runtime accumulates and reduces in fp32 whatever it says; the
  // run report prices the plan's model state with it.
  std::optional<DType> grad_dtype;
  // The plan's optimizer state (launch.yaml optimizer_state, written when not fp32). The runtime keeps fp32
  // master weights and moments whatever it says; the run report prices the plan's model state with it.
  OptimizerState optimizer_state = OptimizerState::kFp32;
  // The plan's FP8 parameters (launch.yaml fp8_param_gather, written when true). The runtime keeps bf16 weights and
  // casts per use whatever it says; the run report says so beside the plan's model state.
  bool fp8_param_gather = false;
  LaunchRun run;
  double predicted_iteration_s = 0, predicted_bubble_fraction = 0;
  // One program per distinct (pipeline position, replica) (dp_solver/programs.h):
  // rank r runs the program whose position is its stage and whose replica is
  // its replica or -1.
  std::vector<RankProgram> programs;
};

// Per-stage replication ("2-1-1": any stage's replicas differ from dp, or the
// pipedream schedule): programs are per (stage, replica) and a pipeline
// position is a stage; otherwise virtual stage q runs on position q % pp.
bool PerStageReplication(const LaunchPlan& L);
// Every rank's pipeline neighbours, indexed like L.ranks: uniform plans, the ranks of the same (replica,
// tp rank, cp rank) at the previous / next position, wrapping from the last to the first for the
// interleaved schedule (DualPipeV's V feeds its own last device); per-stage replication, every replica of
// the previous / next stage at the same tp rank, in replica order. Codegen writes them as prev / next;
// the program checker compares stated ones with them.
void PipelineNeighbours(const LaunchPlan& L, std::vector<std::vector<int64_t>>* prev,
                        std::vector<std::vector<int64_t>>* next);
// The rank that `me`'s send or receive `a` talks to: the rank at the peer
// stage's position with the action's peer replica (this rank's replica when
// it names none) and this rank's tp and cp ranks; -1 for other actions or when no
// such rank exists. Scans L.ranks.
int64_t PeerRank(const LaunchPlan& L, const LaunchRank& me, const Action& a);

// Index of the program of `rank` in L.programs: -1 when none serves it, -2
// when several do.
int64_t FindProgram(const LaunchPlan& L, const LaunchRank& rank);
// Sets every rank's `program`; InvalidArgument unless every rank has exactly one.
Status AssignPrograms(LaunchPlan* L);

// The index of `rank` in its group of `groups` (its EP rank for ep_groups); 0 when no group holds it.
int64_t RankInGroup(const std::vector<std::vector<int64_t>>& groups, int64_t rank);

std::string LaunchPlanToYaml(const LaunchPlan& plan);
Status ParseLaunchPlan(const std::string& path, const std::string& text, LaunchPlan* out);
Status LoadLaunchPlan(const std::string& path, LaunchPlan* out);

}  // namespace planner
