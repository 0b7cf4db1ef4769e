#include "codegen/codegen.h"
#include "codegen/exports.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dp_solver/programs.h"
#include "spec/rank_generator.h"

namespace planner {

namespace {

// A stage time as launch.yaml carries it ({:.9g}) and every rank reads it back.
double AsWritten(double x) { return std::strtod(fmt::format("{:.9g}", x).c_str(), nullptr); }

// Each rank's program, from the stage times launch.yaml carries (so the order is the one a
// rank would derive from the file), checked deadlock-free before anything is written.
Status AddPrograms(LaunchPlan* L) {
  LaunchPlan carried = *L;
  for (auto& s : carried.stages) {
    for (double* x : {&s.predicted_compute_s, &s.predicted_forward_s, &s.predicted_backward_input_s,
                      &s.predicted_backward_weight_s, &s.predicted_p2p_s}) {
      *x = AsWritten(*x);
    }
  }
  PLANNER_RETURN_IF_ERROR(BuildPrograms(carried, &L->programs));
  PLANNER_RETURN_IF_ERROR(AssignPrograms(L));
  Status s = CheckPrograms(*L);
  if (!s.ok())
    return Status::Internal("the plan's programs are not deadlock-free, so no launch directory is written: " +
                            s.message());
  return Status::OK();
}

}  // namespace

namespace {

// launch.yaml's header and stages from the plan.
LaunchPlan LaunchHeader(const Plan& plan, const std::string& model_digest, const CodegenOptions& o) {
  LaunchPlan L;
  static_cast<ParallelLayout&>(L) = plan;  // the plan's layout, then what launch.yaml holds of it
  L.model_digest = model_digest;
  L.device = o.device;
  L.grad_dtype = plan.grad_dtype;
  L.optimizer_state = plan.optimizer_state;
  L.fp8_param_gather = plan.fp8_param_gather;
  L.vertical_sync =
      plan.vertical_sync;  // PipeDream's vertical sync (the plan reader allows it with schedule pipedream only)
  L.interleave = std::max<int64_t>(1, plan.interleave);
  L.cp = std::max<int64_t>(1, plan.cp);
  L.ep = std::max<int64_t>(1, plan.ep);
  L.etp = std::max<int64_t>(1, plan.etp);
  L.global_batch = plan.global_batch;
  L.gpus_per_node = std::max<int64_t>(1, o.gpus_per_node);
  L.run = o.run;
  L.predicted_iteration_s = plan.predicted.iteration_s;
  L.predicted_bubble_fraction = plan.predicted.bubble_fraction;
  for (const auto& s : plan.stages) {
    LaunchStage ls;
    ls.first_layer = s.first_layer;
    ls.last_layer = s.last_layer;
    ls.replicas = s.replicas;
    ls.chunk = s.chunk;
    ls.predicted_compute_s = s.forward_s + s.backward_input_s + s.backward_weight_s;
    ls.predicted_forward_s = s.forward_s;
    ls.predicted_backward_input_s = s.backward_input_s;
    ls.predicted_backward_weight_s = s.backward_weight_s;
    ls.predicted_p2p_s = s.p2p_s;
    ls.predicted_dp_allreduce_s = s.dp_allreduce_s;
    ls.predicted_ep_comm_s =
        s.ep_comm_s * static_cast<double>(plan.num_microbatches);  // per microbatch in the plan, per iteration here
    ls.predicted_peak_memory_bytes = s.peak_memory_bytes;
    L.stages.push_back(ls);
  }
  return L;
}

// The rank's host slot and device on it.
void Place(const LaunchPlan& L, LaunchRank* r) {
  r->node = r->rank / L.gpus_per_node;
  r->local_device = r->rank % L.gpus_per_node;
}

// MoE parallel folding (Megatron-Core; MOE.md): a stage's n = t cp d ranks, i = tp_rank + t (cp_rank + cp
// replica) (its ranks are stage n + i), read as i = etp_rank + etp (ep_rank + ep edp_rank): the expert generator's
// layout (kExpertOrder over etp, ep, edp and pp). EP groups (token "ep") per (stage, edp rank, etp rank) in ep rank
// order; expert-data-parallel groups (token "dp") per (stage, ep rank, etp rank).
Status ExpertGroups(int64_t p, int64_t n, LaunchPlan* L) {
  const int64_t ep = L->ep, etp = L->etp;
  if (ep <= 1 || n % (ep * etp) != 0) return Status::OK();
  RankGenerator experts;
  const ParallelSizes sizes{.tp = etp, .ep = ep, .dp = n / (ep * etp), .pp = p};
  PLANNER_RETURN_IF_ERROR(RankGenerator::Make(sizes, kExpertOrder, &experts));
  PLANNER_RETURN_IF_ERROR(experts.Ranks("ep", &L->ep_groups));
  return experts.Ranks("dp", &L->edp_groups);
}

// Uniform plans: the dense generator's layout (Megatron's order tp-cp-dp-pp), rank = ((position x d + replica) x cp
// + cp rank) x t + tp rank, and its groups: TP (token "tp") per (position, replica, cp rank); the gradient
// ("data_parallel") group (token "dp-cp") per (position, tp rank) spans replicas and CP ranks, which hold the same
// weights (Megatron's data-parallel group with context parallelism); PP ("pp") per (replica, cp, tp rank); CP
// ("cp", written with cp > 1 only) per (position, replica, tp rank). Neighbours: PipelineNeighbours.
Status UniformRanks(int64_t p, int64_t d, int64_t t, LaunchPlan* L) {
  const int64_t cp = std::max<int64_t>(1, L->cp);
  RankGenerator dense;
  PLANNER_RETURN_IF_ERROR(RankGenerator::Make({.tp = t, .cp = cp, .dp = d, .pp = p}, kDenseOrder, &dense));
  for (int64_t rank = 0; rank < dense.world_size(); ++rank) {
    LaunchRank x;
    x.rank = rank;
    x.stage = dense.Coordinate(rank, ParallelDim::kPp);
    x.replica = dense.Coordinate(rank, ParallelDim::kDp);
    x.tp_rank = dense.Coordinate(rank, ParallelDim::kTp);
    x.cp_rank = dense.Coordinate(rank, ParallelDim::kCp);
    Place(*L, &x);
    L->ranks.push_back(x);
  }
  PLANNER_RETURN_IF_ERROR(dense.Ranks("tp", &L->tp_groups));
  PLANNER_RETURN_IF_ERROR(dense.Ranks("dp-cp", &L->dp_groups));
  PLANNER_RETURN_IF_ERROR(dense.Ranks("pp", &L->pp_groups));
  PLANNER_RETURN_IF_ERROR(ExpertGroups(p, d * cp * t, L));
  if (cp == 1) return Status::OK();
  return dense.Ranks("cp", &L->cp_groups);
}

// Rank of replica k's tp rank j of a stage: its devices as the plan lists them (PipeDream's
// hierarchical optimizer puts a top-level stage's replicas on different servers:
// dp_solver/pipedream_dp.cc, FlattenStages), else replicas x t consecutive ranks from its offset
// (auto mode's per-stage replication costs that group: docs/cost_model.md section 8).
int64_t ReplicaRank(const PlanStage& st, int64_t t, int64_t k, int64_t j) {
  if (static_cast<int64_t>(st.devices.size()) == st.replicas * t) return st.devices[static_cast<size_t>(k * t + j)];
  return st.device_offset + k * t + j;
}

// Per-stage replication: stage s holds replicas x t ranks (ReplicaRank); each stage's replicas of
// one tp rank form its DP group. node = rank / gpus_per_node, as run.sh and slurm.sbatch place them.
void ReplicatedRanks(const Plan& plan, int64_t t, LaunchPlan* L) {
  std::vector<std::vector<std::vector<int64_t>>> ranks_of(plan.stages.size());  // [stage][tp rank] -> ranks
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& st = plan.stages[s];
    ranks_of[s].resize(static_cast<size_t>(t));
    for (int64_t k = 0; k < st.replicas; ++k)
      for (int64_t j = 0; j < t; ++j) ranks_of[s][static_cast<size_t>(j)].push_back(ReplicaRank(st, t, k, j));
  }
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& st = plan.stages[s];
    for (int64_t k = 0; k < st.replicas; ++k) {
      std::vector<int64_t> g;
      for (int64_t j = 0; j < t; ++j) {
        LaunchRank x;
        x.rank = ReplicaRank(st, t, k, j);
        x.stage = static_cast<int64_t>(s);
        x.replica = k;
        x.tp_rank = j;
        Place(*L, &x);
        L->ranks.push_back(x);
        g.push_back(x.rank);
      }
      L->tp_groups.push_back(g);
    }
    for (int64_t j = 0; j < t; ++j) L->dp_groups.push_back(ranks_of[s][static_cast<size_t>(j)]);
  }
}

// Whether some data-parallel group has two or more ranks (gradients to synchronise).
bool AnyDpSync(const LaunchPlan& L) {
  for (const auto& g : L.dp_groups) {
    if (g.size() > 1) return true;
  }
  return false;
}

// The plan's dp_comm; ps and byteps get plan.dp_servers server ranks numbered after the workers
// (ps co-located: none, launch `ps_placement: colocated`).
// With nothing to synchronise (every DP group one rank) the launch runs allreduce-hier without
// servers (GenerateLaunchFiles notes it).
Status AddServers(const Plan& plan, LaunchPlan* L) {
  L->dp_comm = plan.dp_comm;
  if (!DpCommUsesServers(plan.dp_comm)) return Status::OK();
  if (plan.dp_comm == DpComm::kParameterServer && plan.dp_servers < 1 && !plan.ps_colocated) {
    return Status::InvalidArgument(
        "plan: dp_comm ps needs dp_servers >= 1; set dp_servers in plan.yaml or solve again");
  }
  if (!AnyDpSync(*L)) {
    L->dp_comm = DpComm::kHierAllReduce;
    return Status::OK();
  }
  L->ps_colocated =
      plan.dp_comm == DpComm::kParameterServer && plan.ps_colocated;  // servers: [] (every worker sums its shard)
  const int64_t n = static_cast<int64_t>(L->ranks.size());
  for (int64_t i = 0; i < plan.dp_servers; ++i) L->servers.push_back(n + i);
  return Status::OK();
}

}  // namespace

Status BuildLaunchPlan(const Plan& plan, const std::string& model_digest, const CodegenOptions& o, LaunchPlan* out) {
  if (plan.stages.empty()) return Status::InvalidArgument("the plan has no stages");
  LaunchPlan L = LaunchHeader(plan, model_digest, o);
  const int64_t t = std::max<int64_t>(1, plan.tp);
  bool uniform = plan.schedule != Schedule::kPipeDream;
  for (const auto& s : plan.stages) uniform = uniform && s.replicas == plan.dp;
  if (L.ep > 1 && (!uniform || (t * L.cp * plan.dp) % (L.ep * L.etp) != 0)) {
    return Status::InvalidArgument(
        fmt::format("plan: ep {} x etp {} must divide each stage's tp x cp x dp = {} ranks, with uniform stages (MoE "
                    "parallel folding)",
                    L.ep, L.etp, t * L.cp * plan.dp));
  }
  if (uniform) {
    if (plan.pp * L.interleave != static_cast<int64_t>(plan.stages.size())) {
      return Status::InvalidArgument(fmt::format("plan: pp {} x interleave {} does not match its {} stages", plan.pp,
                                                 L.interleave, plan.stages.size()));
    }
    PLANNER_RETURN_IF_ERROR(UniformRanks(plan.pp, plan.dp, t, &L));
  } else if (L.cp > 1) {
    return Status::NotSupported(
        "plan: context parallelism runs with uniform stages (no per-stage replication, not pipedream); solve with cp "
        "1");
  } else {
    ReplicatedRanks(plan, t, &L);
  }
  std::sort(L.ranks.begin(), L.ranks.end(), [](const LaunchRank& a, const LaunchRank& b) { return a.rank < b.rank; });
  for (size_t i = 0; i < L.ranks.size(); ++i) {
    if (L.ranks[i].rank != static_cast<int64_t>(i))
      return Status::InvalidArgument("plan: its stages do not place every rank exactly once");
  }
  std::vector<std::vector<int64_t>> prev, next;  // the pipeline group's neighbours (spec/launch_plan.h)
  PipelineNeighbours(L, &prev, &next);
  for (size_t i = 0; i < L.ranks.size(); ++i) {
    L.ranks[i].prev = std::move(prev[i]);
    L.ranks[i].next = std::move(next[i]);
  }
  PLANNER_RETURN_IF_ERROR(AddServers(plan, &L));
  PLANNER_RETURN_IF_ERROR(AddPrograms(&L));
  *out = std::move(L);
  return Status::OK();
}

Status GenerateLaunchFiles(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o,
                           std::vector<std::pair<std::string, std::string>>* files, std::vector<std::string>* notes) {
  files->emplace_back("launch.yaml", LaunchPlanToYaml(L));
  if (DpCommUsesServers(plan.dp_comm) && !DpCommUsesServers(L.dp_comm)) {
    notes->push_back(fmt::format(
        "dp_comm {}: every data-parallel group has one rank, so there are no gradients to synchronise; launch.yaml "
        "runs dp_comm allreduce-hier without server ranks",
        DpCommName(plan.dp_comm)));
  }
  const codegen_internal::ExportInput in{plan, model, L, o};
  std::vector<const codegen_internal::ExportTarget*> written;  // targets that wrote their files, not a refusal
  for (const codegen_internal::ExportTarget& e : codegen_internal::Exports()) {
    const bool wanted = o.exports.empty() || std::find(o.exports.begin(), o.exports.end(), e.name) != o.exports.end();
    if (!wanted) continue;
    const size_t before = files->size();
    e.write(in, files, notes);
    const bool refused = std::any_of(files->begin() + static_cast<std::ptrdiff_t>(before), files->end(),
                                     [](const auto& f) { return f.first.find("refused") != std::string::npos; });
    if (!refused) written.push_back(&e);
  }
  const std::string engine_note = codegen_internal::EngineNote(plan, written);
  if (!engine_note.empty()) notes->push_back(engine_note);
  return Status::OK();
}

}  // namespace planner
