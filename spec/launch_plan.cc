#include "spec/launch_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "spec/input_limits.h"
#include "spec/program_check.h"
#include "spec/rank_generator.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

std::string List(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string Groups(const char* name, const std::vector<std::vector<int64_t>>& g) {
  std::string s = fmt::format("  {}:\n", name);
  if (g.empty()) return fmt::format("  {}: []\n", name);
  for (const auto& x : g) s += "    - " + List(x) + "\n";
  return s;
}

// programs: [{position, replica, actions: "F0.0 SA0.0 ..."}]; every rank gets exactly one.
Status ReadPrograms(const YamlReader& r, const YAML::Node& root, LaunchPlan* p) {
  const YAML::Node& pg = root["programs"];
  if (!pg.IsDefined())
    return r.FieldError(root, "programs",
                        "missing required field; regenerate the launch directory with planner codegen");
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(pg, "programs"));
  for (size_t i = 0; i < pg.size(); ++i) {
    std::string f = fmt::format("programs[{}]", i);
    PLANNER_RETURN_IF_ERROR(r.RequireMap(pg[i], f));
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(pg[i], f, {"position", "replica", "actions"}));
    RankProgram g;
    std::string text;
    PLANNER_RETURN_IF_ERROR(r.GetInt(pg[i], "position", f + ".position", &g.position, true, 0));
    PLANNER_RETURN_IF_ERROR(r.GetInt(pg[i], "replica", f + ".replica", &g.replica, true, -1));
    PLANNER_RETURN_IF_ERROR(r.GetString(pg[i], "actions", f + ".actions", &text, true));
    Status s = ParseActions(text, &g.actions);
    if (!s.ok()) return r.FieldError(pg[i]["actions"], f + ".actions", s.message());
    p->programs.push_back(std::move(g));
  }
  Status s = AssignPrograms(p);
  if (!s.ok()) return r.FieldError(pg, "programs", s.message());
  return Status::OK();
}

// The pipeline positions of a launch (pp, or one per stage with per-stage replication) and the
// replicas a rank of `stage` may have.
int64_t Positions(const LaunchPlan& p) { return PerStageReplication(p) ? static_cast<int64_t>(p.stages.size()) : p.pp; }
int64_t ReplicasAt(const LaunchPlan& p, int64_t stage) {
  return PerStageReplication(p) ? p.stages[static_cast<size_t>(stage)].replicas : p.dp;
}

// Every rank's (stage, replica, tp rank, cp rank) exists in the layout and is held by one rank, and
// the ranks are as many as the layout has: tp x cp x dp x pp, or the stages' replicas x tp.
Status CheckRankTable(const YamlReader& r, const YAML::Node& rk, const LaunchPlan& p) {
  const int64_t positions = Positions(p);
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> slots;
  int64_t expected = 0;
  for (int64_t s = 0; s < positions && PerStageReplication(p); ++s)
    expected += p.stages[static_cast<size_t>(s)].replicas * p.tp;
  if (!PerStageReplication(p) && !CheckedProduct({p.tp, p.cp, p.dp, p.pp}, &expected)) expected = -1;
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    const LaunchRank& x = p.ranks[i];
    const std::string f = fmt::format("ranks[{}]", i);
    if (x.stage >= positions || x.stage >= static_cast<int64_t>(p.stages.size())) {
      return r.FieldError(
          rk[i]["stage"], f + ".stage",
          fmt::format("stage {} does not exist: the launch has pipeline positions 0..{}", x.stage, positions - 1));
    }
    if (x.replica >= ReplicasAt(p, x.stage)) {
      return r.FieldError(rk[i]["replica"], f + ".replica",
                          fmt::format("replica {} does not exist: stage {} has {} replicas", x.replica, x.stage,
                                      ReplicasAt(p, x.stage)));
    }
    if (!slots.insert({x.stage, x.replica, x.tp_rank, x.cp_rank}).second) {
      return r.FieldError(
          rk[i], f,
          fmt::format("rank {} has the same stage {}, replica {}, tp_rank {} and cp_rank {} as an earlier rank", x.rank,
                      x.stage, x.replica, x.tp_rank, x.cp_rank));
    }
  }
  if (static_cast<int64_t>(p.ranks.size()) != expected) {
    return r.FieldError(rk, "ranks",
                        fmt::format("{} ranks, but the layout (tp {}, cp {}, dp {}, pp {}, stage replicas) has {}; "
                                    "regenerate with planner codegen",
                                    p.ranks.size(), p.tp, p.cp, p.dp, p.pp,
                                    expected < 0 ? std::string("more than 2^63") : std::to_string(expected)));
  }
  return Status::OK();
}

// One kind of communicator group: which ranks belong together (`same`), the index a member must
// have in its group (`index`; empty: any order) and the group's size (`size`, given its first member).
struct GroupRule {
  const char* key;
  const std::vector<std::vector<int64_t>>* groups;
  bool required;  // every rank in exactly one group (the runtime splits a communicator by it)
  std::function<std::tuple<int64_t, int64_t, int64_t>(const LaunchRank&)> same;
  std::function<int64_t(const LaunchRank&)> index;
  std::function<int64_t(const LaunchRank&)> size;
  const char* what;  // what the members share, for the message
};

Status CheckGroupRule(const YamlReader& r, const YAML::Node& groups, const LaunchPlan& p, const GroupRule& g) {
  const YAML::Node node = groups[g.key];
  const std::string f = fmt::format("groups.{}", g.key);
  if (!g.required && g.groups->empty()) return Status::OK();
  std::vector<int64_t> seen(p.ranks.size(), -1);
  for (size_t i = 0; i < g.groups->size(); ++i) {
    const auto& members = (*g.groups)[i];
    const YAML::Node at = node.IsDefined() && node.IsSequence() && i < node.size() ? node[i] : node;
    const std::string fi = fmt::format("{}[{}]", f, i);
    if (members.empty()) return r.FieldError(at, fi, "an empty group; every group holds at least one rank");
    const LaunchRank& first = p.ranks[static_cast<size_t>(members[0])];
    if (static_cast<int64_t>(members.size()) != g.size(first)) {
      return r.FieldError(at, fi,
                          fmt::format("{} ranks, but a {} group of this launch has {}; regenerate with planner codegen",
                                      members.size(), g.key, g.size(first)));
    }
    for (size_t k = 0; k < members.size(); ++k) {
      const LaunchRank& m = p.ranks[static_cast<size_t>(members[k])];
      if (seen[static_cast<size_t>(m.rank)] >= 0) {
        return r.FieldError(at, fi,
                            fmt::format("rank {} is already in {}[{}]; each rank is in one {} group", m.rank, f,
                                        seen[static_cast<size_t>(m.rank)], g.key));
      }
      seen[static_cast<size_t>(m.rank)] = static_cast<int64_t>(i);
      if (g.same(m) != g.same(first)) {
        return r.FieldError(at, fi,
                            fmt::format("ranks {} and {} do not share {}; the group contradicts the ranks table",
                                        first.rank, m.rank, g.what));
      }
      if (g.index && g.index(m) != static_cast<int64_t>(k)) {
        return r.FieldError(
            at, fi,
            fmt::format("rank {} is member {} of the group but its ranks entry says {}; list the members in that order",
                        m.rank, k, g.index(m)));
      }
    }
  }
  for (size_t q = 0; q < seen.size(); ++q) {
    if (seen[q] < 0)
      return r.FieldError(node.IsDefined() ? node : groups, f,
                          fmt::format("rank {} is in no {} group; every rank needs one", q, g.key));
  }
  return Status::OK();
}

// The communicator groups against the ranks table and tp / cp / dp / pp / ep: checked before any
// communication, since a rank in no group (or groups that disagree between ranks) reaches
// MPI_Comm_split with a wrong colour, and groups that contradict the layout make replicas diverge.
Status CheckGroups(const YamlReader& r, const YAML::Node& root, const LaunchPlan& p) {
  const YAML::Node g = root["groups"];
  if (!g.IsDefined())
    return r.FieldError(root, "groups", "missing required field; regenerate the launch directory with planner codegen");
  const bool replicated = PerStageReplication(p);
  const int64_t positions = Positions(p);
  const int64_t experts = p.ep * p.etp;
  const std::vector<GroupRule> rules = {
      {"tensor_parallel", &p.tp_groups, true,
       [](const LaunchRank& x) {
         return std::tuple{x.stage, x.replica, x.cp_rank};
       },
       [](const LaunchRank& x) { return x.tp_rank; }, [&p](const LaunchRank&) { return p.tp; },
       "a stage, replica and cp rank"},
      {"data_parallel", &p.dp_groups, true,
       [](const LaunchRank& x) {
         return std::tuple{x.stage, x.tp_rank, int64_t{0}};
       },
       nullptr, [&p](const LaunchRank& x) { return ReplicasAt(p, x.stage) * p.cp; }, "a stage and tp rank"},
      {"pipeline", &p.pp_groups, false,
       [](const LaunchRank& x) {
         return std::tuple{x.replica, x.tp_rank, x.cp_rank};
       },
       [](const LaunchRank& x) { return x.stage; }, [positions](const LaunchRank&) { return positions; },
       "a replica, tp rank and cp rank"},
      {"context_parallel", &p.cp_groups, p.cp > 1,
       [](const LaunchRank& x) {
         return std::tuple{x.stage, x.replica, x.tp_rank};
       },
       [](const LaunchRank& x) { return x.cp_rank; }, [&p](const LaunchRank&) { return p.cp; },
       "a stage, replica and tp rank"},
      {"expert_parallel", &p.ep_groups, p.ep > 1,
       [](const LaunchRank& x) {
         return std::tuple{x.stage, int64_t{0}, int64_t{0}};
       },
       nullptr, [&p](const LaunchRank&) { return p.ep; }, "a stage"},
      {"expert_data_parallel", &p.edp_groups, p.ep > 1,
       [](const LaunchRank& x) {
         return std::tuple{x.stage, int64_t{0}, int64_t{0}};
       },
       nullptr, [&p, experts](const LaunchRank&) { return p.tp * p.cp * p.dp / experts; }, "a stage"},
  };
  for (const GroupRule& rule : rules) {
    if (replicated && std::string(rule.key) == "pipeline")
      continue;  // per-stage replication has no pipeline groups (codegen writes [])
    PLANNER_RETURN_IF_ERROR(CheckGroupRule(r, g, p, rule));
  }
  return Status::OK();
}

// Uniform launches (no per-stage replication, which has its own layout): every group list equals the rank
// generator's for the file's sizes, group for group and in its order (spec/rank_generator.h: kDenseOrder over tp,
// cp, dp, pp; the expert lists kExpertOrder over etp, ep, edp, pp), so that groups edited consistently with the
// ranks table but not with the layout, or listed in another order, are refused. An optional list left empty
// (pipeline, context_parallel with cp 1, the expert lists with ep 1) is not compared.
Status CheckGroupsAgainstGenerator(const YamlReader& r, const YAML::Node& root, const LaunchPlan& p) {
  if (PerStageReplication(p)) return Status::OK();
  const YAML::Node g = root["groups"];
  RankGenerator dense, experts;
  Status made = RankGenerator::Make({.tp = p.tp, .cp = p.cp, .dp = p.dp, .pp = p.pp}, kDenseOrder, &dense);
  if (!made.ok()) return r.FieldError(g, "groups", made.message());
  if (!p.ep_groups.empty() || !p.edp_groups.empty()) {
    const int64_t stage_ranks = p.tp * p.cp * p.dp;  // bounded: the ranks table has this many per stage
    if (stage_ranks % (p.ep * p.etp) != 0) {
      const std::string why = fmt::format(
          "ep {} x etp {} does not divide a stage's tp x cp x dp = {} ranks (MoE "
          "parallel folding); codegen the plan again",
          p.ep, p.etp, stage_ranks);
      return r.FieldError(root["ep"], "ep", why);
    }
    const ParallelSizes sizes{.tp = p.etp, .ep = p.ep, .dp = stage_ranks / (p.ep * p.etp), .pp = p.pp};
    made = RankGenerator::Make(sizes, kExpertOrder, &experts);
    if (!made.ok()) return r.FieldError(root["ep"], "ep", made.message());
  }
  struct Source {
    const char* key;
    const RankGroups* groups;
    const RankGenerator* generator;
    const char* token;
  };
  const Source sources[] = {
      {"tensor_parallel", &p.tp_groups, &dense, "tp"},   {"data_parallel", &p.dp_groups, &dense, "dp-cp"},
      {"pipeline", &p.pp_groups, &dense, "pp"},          {"context_parallel", &p.cp_groups, &dense, "cp"},
      {"expert_parallel", &p.ep_groups, &experts, "ep"}, {"expert_data_parallel", &p.edp_groups, &experts, "dp"}};
  for (const Source& x : sources) {
    if (x.groups->empty()) continue;
    RankGroups want;
    PLANNER_RETURN_IF_ERROR(x.generator->Ranks(x.token, &want));
    const std::string f = fmt::format("groups.{}", x.key);
    const std::string made_by = (x.generator == &experts ? "expert " : "") + x.generator->Describe();
    const YAML::Node node = g[x.key];
    if (want.size() != x.groups->size()) {
      return r.FieldError(
          node, f,
          fmt::format("{} groups but {} make {}; codegen the plan again", x.groups->size(), made_by, want.size()));
    }
    for (size_t i = 0; i < want.size(); ++i) {
      if ((*x.groups)[i] == want[i]) continue;
      const YAML::Node at = node.IsSequence() && i < node.size() ? node[i] : node;
      return r.FieldError(at, f,
                          fmt::format("group {} is {} but {} make {}; codegen the plan again", i, List((*x.groups)[i]),
                                      made_by, List(want[i])));
    }
  }
  return Status::OK();
}

}  // namespace

void PipelineNeighbours(const LaunchPlan& L, std::vector<std::vector<int64_t>>* prev,
                        std::vector<std::vector<int64_t>>* next) {
  const size_t n = L.ranks.size();
  prev->assign(n, {});
  next->assign(n, {});
  if (PerStageReplication(L)) {
    std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>>
        of;  // (stage, tp) -> (replica, rank)
    for (const auto& r : L.ranks) of[{r.stage, r.tp_rank}].push_back({r.replica, r.rank});
    auto ranks = [&](int64_t stage, int64_t tp) {
      std::vector<int64_t> v;
      auto it = of.find({stage, tp});
      if (it == of.end()) return v;
      std::vector<std::pair<int64_t, int64_t>> x = it->second;
      std::sort(x.begin(), x.end());
      for (const auto& [k, rank] : x) v.push_back(rank);
      return v;
    };
    for (size_t i = 0; i < n; ++i) {
      const LaunchRank& r = L.ranks[i];
      if (r.stage > 0) (*prev)[i] = ranks(r.stage - 1, r.tp_rank);
      (*next)[i] = ranks(r.stage + 1, r.tp_rank);
    }
    return;
  }
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<std::pair<int64_t, size_t>>> chains;  // -> (stage, i)
  for (size_t i = 0; i < n; ++i)
    chains[{L.ranks[i].replica, L.ranks[i].tp_rank, L.ranks[i].cp_rank}].push_back({L.ranks[i].stage, i});
  const int64_t p = L.pp;
  const bool wrap = L.interleave > 1 && p > 1 && L.schedule != Schedule::kDualPipeV;
  for (auto& [key, chain] : chains) {
    std::sort(chain.begin(), chain.end());
    const size_t c = chain.size();
    for (size_t s = 0; s < c; ++s) {
      const size_t i = chain[s].second;
      if (s > 0) (*prev)[i] = {L.ranks[chain[s - 1].second].rank};
      else if (wrap && c > 1) (*prev)[i] = {L.ranks[chain.back().second].rank};
      if (s + 1 < c) (*next)[i] = {L.ranks[chain[s + 1].second].rank};
      else if (wrap && c > 1) (*next)[i] = {L.ranks[chain.front().second].rank};
    }
  }
}

bool PerStageReplication(const LaunchPlan& L) {
  bool replicated = L.schedule == Schedule::kPipeDream;
  for (const auto& st : L.stages) replicated = replicated || st.replicas != L.dp;
  return replicated;
}

int64_t PeerRank(const LaunchPlan& L, const LaunchRank& me, const Action& a) {
  if (!IsTransfer(a)) return -1;
  const int64_t to = PeerStage(a);
  const int64_t q_count = static_cast<int64_t>(L.stages.size());
  if (to < 0 || to >= q_count || L.pp < 1) return -1;
  const int64_t position = PerStageReplication(L) ? to : StagePosition(L.schedule, to, L.pp);
  const int64_t replica = a.peer_replica == Action::kSameReplica ? me.replica : a.peer_replica;
  for (const auto& r : L.ranks) {
    if (r.stage == position && r.replica == replica && r.tp_rank == me.tp_rank && r.cp_rank == me.cp_rank)
      return r.rank;
  }
  return -1;
}

int64_t FindProgram(const LaunchPlan& L, const LaunchRank& rank) {
  int64_t found = -1;
  for (size_t i = 0; i < L.programs.size(); ++i) {
    const RankProgram& g = L.programs[i];
    if (g.position != rank.stage || (g.replica != -1 && g.replica != rank.replica)) continue;
    if (found >= 0) return -2;
    found = static_cast<int64_t>(i);
  }
  return found;
}

Status AssignPrograms(LaunchPlan* L) {
  std::vector<bool> used(L->programs.size(), false);
  for (auto& r : L->ranks) {
    r.program = FindProgram(*L, r);
    if (r.program == -1)
      return Status::InvalidArgument(
          fmt::format("no program for rank {} (stage {}, replica {})", r.rank, r.stage, r.replica));
    if (r.program == -2) {
      return Status::InvalidArgument(
          fmt::format("several programs for rank {} (stage {}, replica {}); each rank has exactly one", r.rank, r.stage,
                      r.replica));
    }
    used[static_cast<size_t>(r.program)] = true;
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (!used[i]) {
      return Status::InvalidArgument(fmt::format("program {} (position {}, replica {}) is run by no rank; remove it", i,
                                                 L->programs[i].position, L->programs[i].replica));
    }
  }
  return Status::OK();
}

int64_t RankInGroup(const std::vector<std::vector<int64_t>>& groups, int64_t rank) {
  for (const auto& g : groups) {
    auto it = std::find(g.begin(), g.end(), rank);
    if (it != g.end()) return it - g.begin();
  }
  return 0;
}

std::string LaunchPlanToYaml(const LaunchPlan& p) {
  std::string o = "# Written by planner codegen; read by every rank of planner run (docs/formats.md).\n";
  o += "format_version: 1\n";
  o += fmt::format("model_file: \"{}\"\nmodel_digest: \"{}\"\nplan_digest: \"{}\"\n", p.model_file, p.model_digest,
                   p.plan_digest);
  o += fmt::format("device: {}\nschedule: {}\ninterleave: {}\n", DeviceName(p.device), ScheduleName(p.schedule),
                   p.interleave);
  o += fmt::format("tp: {}\npp: {}\ndp: {}\n", p.tp, p.pp, p.dp);
  // Written only when used, so that launch files of plans without them keep their form.
  if (p.cp > 1 || p.sequence_parallel)
    o += fmt::format("cp: {}\nsequence_parallel: {}\n", p.cp, p.sequence_parallel ? "true" : "false");
  if (p.ep > 1) o += fmt::format("ep: {}\netp: {}\n", p.ep, p.etp);
  if (p.dp_comm != DpComm::kHierAllReduce || !p.servers.empty())
    o += fmt::format("dp_comm: {}\nservers: {}\n", DpCommName(p.dp_comm), List(p.servers));
  if (p.ps_colocated) o += "ps_placement: colocated\n";
  if (p.vertical_sync) o += "vertical_sync: true\n";
  if (p.grad_dtype) o += fmt::format("grad_dtype: {}\n", DTypeName(*p.grad_dtype));
  if (p.optimizer_state != OptimizerState::kFp32)
    o += fmt::format("optimizer_state: {}\n", OptimizerStateName(p.optimizer_state));
  if (p.fp8_param_gather) o += "fp8_param_gather: true\n";
  o += fmt::format("config: \"{}\"\n", p.config);
  o += fmt::format("microbatch_size: {}\nnum_microbatches: {}\nglobal_batch: {}\ngpus_per_node: {}\n",
                   p.microbatch_size, p.num_microbatches, p.global_batch, p.gpus_per_node);
  o += fmt::format("predicted: {{iteration_seconds: {:.9g}, bubble_fraction: {:.6g}}}\n", p.predicted_iteration_s,
                   p.predicted_bubble_fraction);
  o += fmt::format(
      "run: {{iterations: {}, warmup_iterations: {}, optimizer: {}, learning_rate: {:.9g}, seed: {}, checkpoint_every: "
      "{}, "
      "timeout_seconds: {:.9g}, threads: {}, overlap_dp: {}}}\n",
      p.run.iterations, p.run.warmup_iterations, p.run.optimizer, p.run.learning_rate, p.run.seed,
      p.run.checkpoint_every, p.run.timeout_s, p.run.threads, p.run.overlap_dp ? "true" : "false");
  o += "stages:\n";
  for (const auto& s : p.stages) {
    o += fmt::format(
        "  - {{first_layer: {}, last_layer: {}, replicas: {}, chunk: {}, predicted_compute_seconds: {:.9g}, "
        "predicted_forward_seconds: {:.9g}, predicted_backward_input_seconds: {:.9g}, "
        "predicted_backward_weight_seconds: {:.9g}, "
        "predicted_p2p_seconds: {:.9g}, predicted_dp_allreduce_seconds: {:.9g}, predicted_peak_memory_bytes: "
        "{:.9g}}}\n",
        s.first_layer, s.last_layer, s.replicas, s.chunk, s.predicted_compute_s, s.predicted_forward_s,
        s.predicted_backward_input_s, s.predicted_backward_weight_s, s.predicted_p2p_s, s.predicted_dp_allreduce_s,
        s.predicted_peak_memory_bytes);
    if (s.predicted_ep_comm_s > 0)
      o.insert(o.size() - 2, fmt::format(", predicted_ep_comm_seconds: {:.9g}", s.predicted_ep_comm_s));
  }
  o += "ranks:\n";
  for (const auto& r : p.ranks) {
    const std::string cp_rank = p.cp > 1 ? fmt::format(", cp_rank: {}", r.cp_rank) : "";
    o += fmt::format(
        "  - {{rank: {}, node: {}, local_device: {}, stage: {}, replica: {}, tp_rank: {}{}, prev: {}, next: {}}}\n",
        r.rank, r.node, r.local_device, r.stage, r.replica, r.tp_rank, cp_rank, List(r.prev), List(r.next));
  }
  o += "groups:\n" + Groups("tensor_parallel", p.tp_groups) + Groups("data_parallel", p.dp_groups) +
       Groups("pipeline", p.pp_groups) + (p.cp_groups.empty() ? "" : Groups("context_parallel", p.cp_groups)) +
       (p.ep_groups.empty() ? "" : Groups("expert_parallel", p.ep_groups)) +
       (p.edp_groups.empty() ? "" : Groups("expert_data_parallel", p.edp_groups));
  // The actions of each distinct program (docs/formats.md has the grammar).
  o += p.programs.empty() ? "programs: []\n" : "programs:\n";
  for (const auto& g : p.programs) {
    o += fmt::format("  - {{position: {}, replica: {}, actions: \"{}\"}}\n", g.position, g.replica,
                     ActionsToString(g.actions));
  }
  return o;
}

Status ParseLaunchPlan(const std::string& path, const std::string& text, LaunchPlan* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.RequireMap(root, "launch plan"));
  if (!root["ranks"].IsDefined() && !root["programs"].IsDefined()) {
    return Status::InvalidArgument(fmt::format(
        "{}: not a launch plan (no ranks or programs{}); give LAUNCH/launch.yaml written by planner codegen", path,
        root["inputs"].IsDefined() ? ": a plan.yaml? run planner codegen on it first" : ""));
  }
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(root, "",
                                      {"format_version",
                                       "model_file",
                                       "model_digest",
                                       "plan_digest",
                                       "device",
                                       "schedule",
                                       "interleave",
                                       "tp",
                                       "pp",
                                       "dp",
                                       "cp",
                                       "sequence_parallel",
                                       "ep",
                                       "etp",
                                       "dp_comm",
                                       "servers",
                                       "ps_placement",
                                       "vertical_sync",
                                       "grad_dtype",
                                       "optimizer_state",
                                       "fp8_param_gather",
                                       "config",
                                       "microbatch_size",
                                       "num_microbatches",
                                       "global_batch",
                                       "gpus_per_node",
                                       "predicted",
                                       "run",
                                       "stages",
                                       "ranks",
                                       "groups",
                                       "programs"}));
  LaunchPlan p;
  p.path = path;
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, true, "regenerate with planner codegen"));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "model_file", "model_file", &p.model_file, true));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "model_digest", "model_digest", &p.model_digest, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "plan_digest", "plan_digest", &p.plan_digest, false));
  std::string device;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "device", "device", {"cpu", "cuda"}, &device, true));
  ParseDevice(device, &p.device);
  std::string schedule;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "schedule", "schedule", ScheduleNames(), &schedule, true));
  if (!ParseSchedule(schedule, &p.schedule))
    return r.FieldError(root["schedule"], "schedule", "unknown schedule " + schedule);
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, root, "interleave", "interleave", &p.interleave, false, 1, kMaxVirtualStages));
  PLANNER_RETURN_IF_ERROR(ReadLayoutSizes(r, root, "", true, &p));
  if (p.sequence_parallel && p.tp < 2)
    return r.FieldError(root["sequence_parallel"], "sequence_parallel", "needs tp >= 2; set it false or raise tp");
  std::string dp_comm;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "dp_comm", "dp_comm", DpCommNames(), &dp_comm, false));
  if (!dp_comm.empty() && !ParseDpComm(dp_comm, &p.dp_comm))
    return r.FieldError(root["dp_comm"], "dp_comm", "unknown dp_comm " + dp_comm);
  PLANNER_RETURN_IF_ERROR(r.GetIntList(root, "servers", "servers", &p.servers, false, 0));
  std::string placement;
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(root, "ps_placement", "ps_placement", {"dedicated", "colocated"}, &placement, false));
  p.ps_colocated = placement == "colocated";
  if (p.ps_colocated && (p.dp_comm != DpComm::kParameterServer || !p.servers.empty())) {
    return r.FieldError(root["ps_placement"], "ps_placement",
                        "colocated is for dp_comm ps with servers: [] (every worker sums a shard); remove it or "
                        "regenerate with planner codegen");
  }
  if (p.dp_comm == DpComm::kParameterServer && p.servers.empty() && !p.ps_colocated) {
    return r.FieldError(
        root["dp_comm"], "servers",
        "dp_comm ps needs at least one server rank (or ps_placement: colocated); regenerate with planner codegen");
  }
  if (!DpCommUsesServers(p.dp_comm) && !p.servers.empty()) {
    return r.FieldError(root["servers"], "servers",
                        fmt::format("dp_comm {} has no servers; remove servers", DpCommName(p.dp_comm)));
  }
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "vertical_sync", "vertical_sync", &p.vertical_sync, false));
  std::string grad_dtype;
  PLANNER_RETURN_IF_ERROR(r.GetEnum(root, "grad_dtype", "grad_dtype", {"fp32", "fp16", "bf16"}, &grad_dtype, false));
  if (DType g; ParseDType(grad_dtype, &g)) p.grad_dtype = g;
  std::string optimizer_state;
  PLANNER_RETURN_IF_ERROR(
      r.GetEnum(root, "optimizer_state", "optimizer_state", OptimizerStateNameList(), &optimizer_state, false));
  if (!optimizer_state.empty()) ParseOptimizerState(optimizer_state, &p.optimizer_state);
  PLANNER_RETURN_IF_ERROR(r.GetBool(root, "fp8_param_gather", "fp8_param_gather", &p.fp8_param_gather, false));
  // FP8 parameters keep a master apart (fp32 or bf16-master), and bf16-master is theirs alone (spec/model_state.h).
  if (const std::string why = OptimizerStateFp8ParamsRefusal(p.optimizer_state, p.fp8_param_gather); !why.empty()) {
    return r.FieldError(root["optimizer_state"], "optimizer_state",
                        fmt::format("{} with fp8_param_gather {}: {}; set {} (or codegen the plan again)",
                                    optimizer_state, p.fp8_param_gather ? "true" : "false", why,
                                    p.fp8_param_gather ? "optimizer_state: fp32 or bf16-master"
                                                       : "optimizer_state: bf16 or fp8_param_gather: true"));
  }
  if (p.vertical_sync && p.schedule != Schedule::kPipeDream) {
    return r.FieldError(
        root["vertical_sync"], "vertical_sync",
        fmt::format("vertical sync needs schedule pipedream, not {}; remove it", ScheduleName(p.schedule)));
  }
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "config", "config", &p.config, false));
  PLANNER_RETURN_IF_ERROR(GetIntInRange(r, root, "global_batch", "global_batch", &p.global_batch, true, 1, kMaxBatch));
  PLANNER_RETURN_IF_ERROR(
      GetIntInRange(r, root, "gpus_per_node", "gpus_per_node", &p.gpus_per_node, false, 1, kMaxRanks));
  if (root["predicted"].IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.RequireMap(root["predicted"], "predicted"));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(root["predicted"], "iteration_seconds", "predicted.iteration_seconds",
                                        &p.predicted_iteration_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(root["predicted"], "bubble_fraction", "predicted.bubble_fraction",
                                        &p.predicted_bubble_fraction, false, 0, false));
  }
  if (root["run"].IsDefined()) {
    const YAML::Node& n = root["run"];
    PLANNER_RETURN_IF_ERROR(r.RequireMap(n, "run"));
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, "run",
                                        {"iterations", "warmup_iterations", "optimizer", "learning_rate", "seed",
                                         "checkpoint_every", "timeout_seconds", "threads", "overlap_dp"}));
    PLANNER_RETURN_IF_ERROR(
        GetIntInRange(r, n, "iterations", "run.iterations", &p.run.iterations, false, 1, kMaxIterations));
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, n, "warmup_iterations", "run.warmup_iterations", &p.run.warmup_iterations,
                                          false, 0, kMaxIterations));
    PLANNER_RETURN_IF_ERROR(r.GetEnum(n, "optimizer", "run.optimizer", {"adam", "sgd"}, &p.run.optimizer, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "learning_rate", "run.learning_rate", &p.run.learning_rate, false, 0, true));
    int64_t seed = 1;
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, "seed", "run.seed", &seed, false, 0));
    p.run.seed = static_cast<uint64_t>(seed);
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, n, "checkpoint_every", "run.checkpoint_every", &p.run.checkpoint_every,
                                          false, 0, kMaxIterations));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, "timeout_seconds", "run.timeout_seconds", &p.run.timeout_s, false, 0, true));
    if (p.run.timeout_s > kMaxTimeoutSeconds) {
      return r.FieldError(n["timeout_seconds"], "run.timeout_seconds",
                          fmt::format("must be at most {} (a week), got {}", kMaxTimeoutSeconds, p.run.timeout_s));
    }
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, n, "threads", "run.threads", &p.run.threads, false, 1, 256));
    PLANNER_RETURN_IF_ERROR(r.GetBool(n, "overlap_dp", "run.overlap_dp", &p.run.overlap_dp, false));
  }
  const YAML::Node& st = root["stages"];
  if (!st.IsDefined()) return r.FieldError(root, "stages", "missing required field");
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(st, "stages"));
  for (size_t i = 0; i < st.size(); ++i) {
    std::string f = fmt::format("stages[{}]", i);
    PLANNER_RETURN_IF_ERROR(r.RequireMap(st[i], f));
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(
        st[i], f,
        {"first_layer", "last_layer", "replicas", "chunk", "predicted_compute_seconds", "predicted_forward_seconds",
         "predicted_backward_input_seconds", "predicted_backward_weight_seconds", "predicted_p2p_seconds",
         "predicted_dp_allreduce_seconds", "predicted_peak_memory_bytes", "predicted_ep_comm_seconds"}));
    LaunchStage s;
    PLANNER_RETURN_IF_ERROR(
        GetIntInRange(r, st[i], "first_layer", f + ".first_layer", &s.first_layer, true, 0, kMaxVirtualStages));
    PLANNER_RETURN_IF_ERROR(
        GetIntInRange(r, st[i], "last_layer", f + ".last_layer", &s.last_layer, true, 0, kMaxVirtualStages));
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, st[i], "replicas", f + ".replicas", &s.replicas, true, 1, kMaxRanks));
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, st[i], "chunk", f + ".chunk", &s.chunk, false, 0, kMaxVirtualStages));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(st[i], "predicted_compute_seconds", f + ".predicted_compute_seconds",
                                        &s.predicted_compute_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(st[i], "predicted_forward_seconds", f + ".predicted_forward_seconds",
                                        &s.predicted_forward_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(st[i], "predicted_backward_input_seconds",
                                        f + ".predicted_backward_input_seconds", &s.predicted_backward_input_s, false,
                                        0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(st[i], "predicted_backward_weight_seconds",
                                        f + ".predicted_backward_weight_seconds", &s.predicted_backward_weight_s, false,
                                        0, false));
    PLANNER_RETURN_IF_ERROR(
        r.GetDouble(st[i], "predicted_p2p_seconds", f + ".predicted_p2p_seconds", &s.predicted_p2p_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(st[i], "predicted_dp_allreduce_seconds", f + ".predicted_dp_allreduce_seconds",
                                        &s.predicted_dp_allreduce_s, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(st[i], "predicted_peak_memory_bytes", f + ".predicted_peak_memory_bytes",
                                        &s.predicted_peak_memory_bytes, false, 0, false));
    PLANNER_RETURN_IF_ERROR(r.GetDouble(st[i], "predicted_ep_comm_seconds", f + ".predicted_ep_comm_seconds",
                                        &s.predicted_ep_comm_s, false, 0, false));
    for (auto [key, v] : {std::pair{"predicted_compute_seconds", s.predicted_compute_s},
                          {"predicted_forward_seconds", s.predicted_forward_s},
                          {"predicted_backward_input_seconds", s.predicted_backward_input_s},
                          {"predicted_backward_weight_seconds", s.predicted_backward_weight_s},
                          {"predicted_p2p_seconds", s.predicted_p2p_s},
                          {"predicted_dp_allreduce_seconds", s.predicted_dp_allreduce_s},
                          {"predicted_ep_comm_seconds", s.predicted_ep_comm_s}}) {
      if (v > kMaxStageSeconds)
        return r.FieldError(st[i][key], f + "." + key,
                            fmt::format("{} s is not a stage time (at most {:g} s); regenerate with planner codegen", v,
                                        kMaxStageSeconds));
    }
    if (s.last_layer < s.first_layer) return r.FieldError(st[i], f + ".last_layer", "is before first_layer");
    if (!p.stages.empty() && s.first_layer != p.stages.back().last_layer + 1 && s.chunk == p.stages.back().chunk) {
      return r.FieldError(st[i], f + ".first_layer",
                          fmt::format("stages must be contiguous: expected {}", p.stages.back().last_layer + 1));
    }
    p.stages.push_back(s);
  }
  if (p.stages.empty()) return r.FieldError(st, "stages", "a launch plan has at least one stage");
  const YAML::Node& rk = root["ranks"];
  if (!rk.IsDefined()) return r.FieldError(root, "ranks", "missing required field");
  PLANNER_RETURN_IF_ERROR(r.RequireSequence(rk, "ranks"));
  std::set<int64_t> seen;
  for (size_t i = 0; i < rk.size(); ++i) {
    std::string f = fmt::format("ranks[{}]", i);
    PLANNER_RETURN_IF_ERROR(r.RequireMap(rk[i], f));
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(
        rk[i], f, {"rank", "node", "local_device", "stage", "replica", "tp_rank", "cp_rank", "prev", "next"}));
    LaunchRank x;
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, rk[i], "rank", f + ".rank", &x.rank, true, 0, kMaxRanks));
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, rk[i], "node", f + ".node", &x.node, false, 0, kMaxRanks));
    PLANNER_RETURN_IF_ERROR(
        GetIntInRange(r, rk[i], "local_device", f + ".local_device", &x.local_device, false, 0, kMaxRanks));
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, rk[i], "stage", f + ".stage", &x.stage, true, 0, kMaxVirtualStages));
    PLANNER_RETURN_IF_ERROR(GetIntInRange(r, rk[i], "replica", f + ".replica", &x.replica, false, 0, kMaxRanks));
    PLANNER_RETURN_IF_ERROR(r.GetInt(rk[i], "tp_rank", f + ".tp_rank", &x.tp_rank, false, 0));
    PLANNER_RETURN_IF_ERROR(r.GetInt(rk[i], "cp_rank", f + ".cp_rank", &x.cp_rank, false, 0));
    PLANNER_RETURN_IF_ERROR(r.GetIntList(rk[i], "prev", f + ".prev", &x.prev, false, 0));
    PLANNER_RETURN_IF_ERROR(r.GetIntList(rk[i], "next", f + ".next", &x.next, false, 0));
    if (!seen.insert(x.rank).second)
      return r.FieldError(rk[i]["rank"], f + ".rank", fmt::format("rank {} appears twice", x.rank));
    if (x.tp_rank >= p.tp)
      return r.FieldError(rk[i]["tp_rank"], f + ".tp_rank", fmt::format("tp_rank {} >= tp {}", x.tp_rank, p.tp));
    if (x.cp_rank >= p.cp)
      return r.FieldError(rk[i]["cp_rank"], f + ".cp_rank", fmt::format("cp_rank {} >= cp {}", x.cp_rank, p.cp));
    p.ranks.push_back(x);
  }
  const int64_t n = static_cast<int64_t>(p.ranks.size());
  if (n == 0 || *seen.rbegin() != n - 1)
    return r.FieldError(rk, "ranks", fmt::format("ranks must be 0..{} each once", n - 1));
  PLANNER_RETURN_IF_ERROR(CheckRankTable(r, rk, p));
  for (const auto& x : p.ranks) {
    for (int64_t q : x.prev)
      if (q >= n)
        return r.FieldError(rk, "ranks", fmt::format("rank {} names neighbour {} that does not exist", x.rank, q));
    for (int64_t q : x.next)
      if (q >= n)
        return r.FieldError(rk, "ranks", fmt::format("rank {} names neighbour {} that does not exist", x.rank, q));
  }
  for (size_t i = 0; i < p.servers.size(); ++i) {
    if (p.servers[i] != n + static_cast<int64_t>(i)) {
      return r.FieldError(
          root["servers"], fmt::format("servers[{}]", i),
          fmt::format("server ranks follow the {} worker ranks: expected {}; regenerate with planner codegen", n,
                      n + static_cast<int64_t>(i)));
    }
  }
  std::sort(p.ranks.begin(), p.ranks.end(), [](const LaunchRank& a, const LaunchRank& b) { return a.rank < b.rank; });
  const YAML::Node& g = root["groups"];
  if (g.IsDefined()) {
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(g, "groups",
                                        {"tensor_parallel", "data_parallel", "pipeline", "context_parallel",
                                         "expert_parallel", "expert_data_parallel"}));
    auto read = [&](const char* key, std::vector<std::vector<int64_t>>* groups) -> Status {
      const YAML::Node& x = g[key];
      if (!x.IsDefined()) return Status::OK();
      std::string f = fmt::format("groups.{}", key);
      PLANNER_RETURN_IF_ERROR(r.RequireSequence(x, f));
      for (size_t i = 0; i < x.size(); ++i) {
        std::vector<int64_t> v;
        std::string fi = fmt::format("{}[{}]", f, i);
        if (!x[i].IsSequence()) return r.FieldError(x[i], fi, "must be a list of ranks");
        for (size_t k = 0; k < x[i].size(); ++k) {
          int64_t q = 0;
          PLANNER_RETURN_IF_ERROR(r.AsInt(x[i][k], fi, &q, 0));
          if (q >= n) return r.FieldError(x[i][k], fi, fmt::format("rank {} does not exist ({} ranks)", q, n));
          v.push_back(q);
        }
        groups->push_back(std::move(v));
      }
      return Status::OK();
    };
    PLANNER_RETURN_IF_ERROR(read("tensor_parallel", &p.tp_groups));
    PLANNER_RETURN_IF_ERROR(read("data_parallel", &p.dp_groups));
    PLANNER_RETURN_IF_ERROR(read("pipeline", &p.pp_groups));
    PLANNER_RETURN_IF_ERROR(read("context_parallel", &p.cp_groups));
    PLANNER_RETURN_IF_ERROR(read("expert_parallel", &p.ep_groups));
    PLANNER_RETURN_IF_ERROR(read("expert_data_parallel", &p.edp_groups));
  }
  if (p.ep < 1 || p.etp < 1)
    return r.FieldError(root["ep"], "ep", fmt::format("ep {} and etp {} must be >= 1", p.ep, p.etp));
  PLANNER_RETURN_IF_ERROR(CheckGroups(r, root, p));
  if (p.ep > 1 && (p.ep_groups.empty() || p.edp_groups.empty())) {
    return r.FieldError(
        root["ep"], "ep",
        "ep > 1 needs groups.expert_parallel and groups.expert_data_parallel; regenerate with planner codegen");
  }
  for (const auto& eg : p.ep_groups) {
    if (static_cast<int64_t>(eg.size()) != p.ep)
      return r.FieldError(root["groups"], "groups.expert_parallel",
                          fmt::format("a group of {} ranks, not ep = {}", eg.size(), p.ep));
  }
  PLANNER_RETURN_IF_ERROR(CheckGroupsAgainstGenerator(r, root, p));
  PLANNER_RETURN_IF_ERROR(ReadPrograms(r, root, &p));
  // Checked where launch.yaml is read: a hand-edited program is refused here, naming the action
  // that breaks it, rather than hanging the job or training on wrong gradients.
  Status checked = CheckPrograms(p);
  if (!checked.ok()) return r.FieldError(root["programs"], "programs", checked.message());
  *out = std::move(p);
  return Status::OK();
}

Status LoadLaunchPlan(const std::string& path, LaunchPlan* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text));
  return ParseLaunchPlan(path, text, out);
}

}  // namespace planner
