// planner solve --gpus N [--model M | --profile P] [--cluster C] [--mode auto|pipedream] [-o plan.yaml] [--json]
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "common/edit_distance.h"
#include "common/log.h"
#include "common/units.h"
#include "dp_solver/pipedream_dp.h"
#include "dp_solver/search.h"
#include "planner/commands.h"
#include "planner/render.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "spec/profile.h"

namespace planner {

namespace {

struct SolveArgs {
  int64_t gpus = 0;
  std::string model, profile, cluster, mode = "auto", output, comm_profile;
  bool json = false;
  int top = 5;
  int64_t global_batch = 0;
  std::vector<int64_t> tp, pp, microbatch, interleave;
  std::string replication;
  std::vector<std::string> schedules, recompute;
  bool dp_overlap = false, p2p_overlap = false, no_scatter_gather = false;
  double bytes_per_param = 0;
  // PipeDream mode.
  std::vector<int64_t> pd_machines;
  std::vector<double> pd_bandwidths;
  double memory_bytes = 0;
  bool straight = false, fewer = false, memory_constraint = false;
  double acr = 1;
};

std::string DefaultCluster() {
  std::error_code ec;  // one that cannot be examined is not used; the source tree's then
  if (std::filesystem::exists("configs/clusters/dgx-a100.yaml", ec)) return "configs/clusters/dgx-a100.yaml";
  return std::string(PLANNER_SOURCE_DIR) + "/configs/clusters/dgx-a100.yaml";
}

// With neither --model nor --profile: the one *.profile.yaml in the working directory.
Status DiscoverProfile(std::string* path) {
  std::vector<std::string> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(".", ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    std::error_code type_ec;  // an entry that cannot be examined is no profile
    if (it->is_regular_file(type_ec) && name.size() > 13 && name.substr(name.size() - 13) == ".profile.yaml") found.push_back(name);
  }
  if (ec) {
    return Status::Unavailable(fmt::format(".: cannot list the working directory to find a profile: {}; pass --model or --profile", ec.message()));
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) {
    *path = found[0];
    return Status::OK();
  }
  if (found.empty()) {
    return Status::InvalidArgument("no model or profile given and no *.profile.yaml in this directory; pass --model configs/models/<name>.yaml or --profile <file>");
  }
  std::string list;
  for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
  return Status::InvalidArgument("several profiles in this directory (" + list + "); choose one with --profile");
}

template <typename T>
Status ParseList(const std::vector<std::string>& in, bool (*parse)(std::string_view, T*), const std::vector<std::string>& names,
                 const char* flag, std::vector<T>* out) {
  for (const auto& s : in) {
    T v;
    if (!parse(s, &v)) return Status::InvalidArgument(fmt::format("{}: unknown value '{}'{}", flag, s, DidYouMean(s, names)));
    out->push_back(v);
  }
  return Status::OK();
}

Status SolvePipeDreamMode(const SolveArgs& a, const Profile& profile, const ClusterSpec& cluster, Plan* plan) {
  PipeDreamOptions o;
  if (!a.pd_machines.empty()) {
    o.machines = a.pd_machines;
    o.bandwidths = a.pd_bandwidths;
    if (o.bandwidths.size() != o.machines.size()) {
      return Status::InvalidArgument("--pd-bandwidths needs one value (bytes/s) per --pd-machines level");
    }
  } else {
    // From the cluster: whole levels, innermost first, until they hold --gpus.
    int64_t left = a.gpus;
    for (const auto& l : cluster.levels) {
      if (left <= 1) break;
      int64_t take = std::min(left, l.size);
      if (left % take != 0) return Status::InvalidArgument(fmt::format("--gpus {} does not fill whole '{}' units of {}; pass --pd-machines", a.gpus, l.name, l.size));
      o.machines.push_back(take);
      o.bandwidths.push_back(l.bandwidth_GBps * 1e9);
      left /= take;
    }
    if (o.machines.empty()) { o.machines = {1}; o.bandwidths = {cluster.levels[0].bandwidth_GBps * 1e9}; }
  }
  o.straight_pipeline = a.straight;
  o.use_fewer_machines = a.fewer;
  o.use_memory_constraint = a.memory_constraint;
  o.memory_bytes = a.memory_bytes > 0 ? a.memory_bytes : 16e9;
  o.activation_compression_ratio = a.acr;
  PipeDreamResult r;
  PLANNER_RETURN_IF_ERROR(SolvePipeDream(profile, o, &r));
  plan->mode = "pipedream";
  plan->config = r.config;
  plan->gpus_used = r.machines_used;
  plan->pp = static_cast<int64_t>(r.stages.size());
  plan->tp = 1;
  plan->dp = 1;
  plan->schedule = Schedule::kPipeDream;
  plan->microbatch_size = profile.reference_microbatch;
  plan->num_microbatches = 1;
  plan->global_batch = profile.reference_microbatch;
  int64_t offset = 0;
  for (const auto& s : r.stages) {
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
    ps.device_offset = offset;
    for (int64_t k = 0; k < s.replicas; ++k) ps.devices.push_back(offset + k);
    offset += s.replicas;
    // PipeDream's cost: seconds per minibatch of the stage, split by the profile's fwd/bwd ratio.
    double f = 0, bwd = 0;
    for (const auto& name : s.layers) {
      const auto& t = profile.layers[static_cast<size_t>(profile.FindLayer(name))].timings[0];
      f += t.forward_s;
      bwd += t.backward_s;
    }
    ps.forward_s = f / static_cast<double>(s.replicas);
    ps.backward_input_s = bwd / 2 / static_cast<double>(s.replicas);
    ps.backward_weight_s = bwd / 2 / static_cast<double>(s.replicas);
    plan->stages.push_back(std::move(ps));
  }
  plan->predicted.iteration_s = r.objective_s;
  plan->predicted.pipeline_s = r.objective_s;
  plan->predicted.samples_per_second = static_cast<double>(profile.reference_microbatch) / r.objective_s;
  plan->notes.push_back(fmt::format("PipeDream objective: {:.10g} s per minibatch of {} ({} antichain states); single machine {:.6g} s, PipeDream's data-parallel baseline {:.6g} s",
                                    r.objective_s, profile.reference_microbatch, r.num_states, r.single_machine_s, r.data_parallel_s));
  std::string levels;
  for (size_t i = 0; i < o.machines.size(); ++i) levels += fmt::format("{}{} x {:.4g} B/s", i ? ", " : "", o.machines[i], o.bandwidths[i]);
  plan->notes.push_back("levels (innermost first): " + levels);
  return Status::OK();
}

}  // namespace

Runner RegisterSolve(CLI::App& app) {
  auto* cmd = app.add_subcommand("solve", "choose stages, replication, TP/PP/DP, microbatching and schedule");
  auto a = std::make_shared<SolveArgs>();
  cmd->add_option("--gpus", a->gpus, "number of GPUs to plan for")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--model", a->model, "model.yaml (analytic costs)");
  cmd->add_option("--profile", a->profile, "measured profile (planner profile / planner import)");
  cmd->add_option("--cluster", a->cluster, "cluster.yaml (default: configs/clusters/dgx-a100.yaml)");
  cmd->add_option("--comm-profile", a->comm_profile, "measured collectives (planner profile --comm) replacing the cluster file's figures for the levels they cover");
  cmd->add_option("--mode", a->mode, "auto (joint TP/PP/DP search) or pipedream (PipeDream's optimizer, exactly)");
  cmd->add_option("-o,--output", a->output, "write the best plan to this YAML file");
  cmd->add_flag("--json", a->json, "print the plan as JSON on stdout instead of the table");
  cmd->add_option("--top", a->top, "plans to rank (best plus runners-up)")->check(CLI::Range(1, 100));
  cmd->add_option("--global-batch", a->global_batch, "samples per iteration (default: the model's)")->check(CLI::PositiveNumber);
  cmd->add_option("--tp", a->tp, "tensor-parallel degrees to try")->delimiter(',');
  cmd->add_option("--pp", a->pp, "pipeline depths to try")->delimiter(',');
  cmd->add_option("--microbatch", a->microbatch, "microbatch sizes to try")->delimiter(',');
  cmd->add_option("--interleave", a->interleave, "interleaved schedule: chunks per device v to try (default: every v with pp x v dividing the layers)")->delimiter(',');
  cmd->add_option("--replication", a->replication, "evaluate this per-stage replication only, e.g. 2-1-1 (TP groups per stage; PipeDream schedule)");
  cmd->add_option("--schedule", a->schedules, "schedules to try: gpipe,1f1b,interleaved,zb-h1,pipedream (asynchronous, per-stage replication)")->delimiter(',');
  cmd->add_option("--recompute", a->recompute, "recompute modes to try: none,selective,full")->delimiter(',');
  cmd->add_flag("--dp-overlap", a->dp_overlap, "overlap the gradient all-reduce with backward");
  cmd->add_flag("--p2p-overlap", a->p2p_overlap, "hide pipeline sends behind compute");
  cmd->add_flag("--no-scatter-gather", a->no_scatter_gather, "send whole activations between stages when tp > 1");
  cmd->add_option("--bytes-per-param", a->bytes_per_param, "model-state bytes per parameter (default 18 mixed, 16 fp32)");
  cmd->add_option("--pd-machines", a->pd_machines, "pipedream mode: machines per level, innermost first (-n)")->delimiter(',');
  cmd->add_option("--pd-bandwidths", a->pd_bandwidths, "pipedream mode: bytes/s per level (-b)")->delimiter(',');
  cmd->add_option("--memory-bytes", a->memory_bytes, "pipedream mode: memory per machine (-s, default 16e9)");
  cmd->add_flag("--memory-constraint", a->memory_constraint, "pipedream mode: --use_memory_constraint");
  cmd->add_flag("--straight", a->straight, "pipedream mode: --straight_pipeline");
  cmd->add_flag("--fewer-machines", a->fewer, "pipedream mode: --use_fewer_machines");
  cmd->add_option("--activation-compression-ratio", a->acr, "pipedream mode: count activation transfers divided by this (0: ignore them; default 1)");
  return [a]() -> Status {
    if (a->mode != "auto" && a->mode != "pipedream") {
      return Status::InvalidArgument(fmt::format("--mode: unknown value '{}'{}; use auto or pipedream", a->mode, DidYouMean(a->mode, {"auto", "pipedream"})));
    }
    if (!a->model.empty() && !a->profile.empty() && a->mode == "pipedream") {
      return Status::InvalidArgument("pipedream mode reads a profile; drop --model");
    }
    std::string profile_path = a->profile;
    if (a->model.empty() && profile_path.empty()) {
      PLANNER_RETURN_IF_ERROR(DiscoverProfile(&profile_path));
      LogNote("using profile " + profile_path + " (the only *.profile.yaml here)");
    }
    std::string cluster_path = a->cluster;
    if (cluster_path.empty()) {
      cluster_path = DefaultCluster();
      LogNote("using cluster " + cluster_path + " (default; choose with --cluster)");
    }
    ClusterSpec cluster;
    PLANNER_RETURN_IF_ERROR(LoadClusterSpec(cluster_path, &cluster));
    ModelSpec model;
    Profile profile;
    if (!a->model.empty()) PLANNER_RETURN_IF_ERROR(LoadModelSpec(a->model, &model));
    if (!profile_path.empty()) PLANNER_RETURN_IF_ERROR(LoadProfile(profile_path, &profile));
    if (!profile_path.empty() && profile.layers.empty()) {
      return Status::InvalidArgument(fmt::format("{} holds only collective curves; pass it as --comm-profile and give --model or a layer profile", profile_path));
    }
    std::vector<std::string> comm_notes;
    if (!a->comm_profile.empty()) {
      Profile comm;
      PLANNER_RETURN_IF_ERROR(LoadProfile(a->comm_profile, &comm));
      if (comm.comm.empty()) return Status::InvalidArgument(a->comm_profile + " has no collective curves; make one with mpirun -np 2 planner profile --comm");
      ApplyCommCurves(comm, a->comm_profile, &cluster, &comm_notes);
    } else if (!profile.comm.empty()) {
      ApplyCommCurves(profile, profile_path, &cluster, &comm_notes);
    }
    if (a->gpus > cluster.TotalGpus()) {
      return Status::InvalidArgument(fmt::format("--gpus {}: {} holds {} GPUs; lower --gpus or enlarge the cluster's topology", a->gpus, cluster_path, cluster.TotalGpus()));
    }
    Plan plan;
    if (a->mode == "pipedream") {
      if (profile_path.empty()) return Status::InvalidArgument("pipedream mode needs --profile (e.g. from planner import pipedream)");
      PLANNER_RETURN_IF_ERROR(SolvePipeDreamMode(*a, profile, cluster, &plan));
    } else {
      if (!profile_path.empty() && !a->model.empty()) {
        if (profile.layers.size() != model.layers.size()) {
          return Status::InvalidArgument(fmt::format("{} has {} layers but {} has {}; profile this model or drop one of them",
                                                     profile_path, profile.layers.size(), a->model, model.layers.size()));
        }
      }
      if (!profile_path.empty() && !a->model.empty() && profile.dtype != DTypeName(model.dtype)) {
        LogWarning(fmt::format("{} was measured in {} but the model trains in {}; the times may not transfer", profile_path, profile.dtype, DTypeName(model.dtype)));
      }
      const bool cpu_profile = profile.backend == "cpu", cpu_cluster = cluster.gpu_name.rfind("cpu", 0) == 0;
      if (!profile_path.empty() && !profile.device.empty() && profile.device.find(cluster.gpu_name) == std::string::npos &&
          !(cpu_profile && cpu_cluster)) {
        LogWarning(fmt::format("{} was measured on '{}', not on the cluster's {}; its times are used as they are", profile_path, profile.device, cluster.gpu_name));
      }
      CostSource src;
      src.cluster = &cluster;
      src.model = a->model.empty() ? nullptr : &model;
      src.profile = profile_path.empty() ? nullptr : &profile;
      SearchOptions o;
      o.gpus = a->gpus;
      o.global_batch = a->global_batch;
      if (o.global_batch == 0 && src.model == nullptr) o.global_batch = profile.reference_microbatch * a->gpus;
      o.top_k = a->top;
      o.tp = a->tp;
      o.pp = a->pp;
      o.microbatch = a->microbatch;
      o.interleave = a->interleave;
      for (int64_t v : a->interleave) {
        if (v < 2) return Status::InvalidArgument(fmt::format("--interleave {}: chunks per device start at 2 (v = 1 is the 1f1b schedule)", v));
        const int64_t blocks = src.model != nullptr && src.model->is_gpt ? src.model->gpt.layers : 0;
        for (int64_t p : a->pp) {
          if (blocks > 0 && p >= 1 && blocks % (p * v) != 0) {
            return Status::InvalidArgument(fmt::format("--interleave {} with --pp {}: pp x v must divide the {} layers of {}", v, p, blocks, a->model));
          }
        }
      }
      if (!a->replication.empty()) {
        std::string cur;
        for (char ch : a->replication + "-") {
          if (ch == '-') {
            if (cur.empty() || cur.size() > 6 || cur.find_first_not_of("0123456789") != std::string::npos || std::stoll(cur) < 1) {
              return Status::InvalidArgument(fmt::format("--replication '{}': use positive counts joined by '-', e.g. 2-1-1", a->replication));
            }
            o.replication.push_back(std::stoll(cur));
            cur.clear();
          } else {
            cur += ch;
          }
        }
      }
      std::vector<std::string> snames = {"gpipe", "1f1b", "interleaved", "zb-h1", "pipedream"};
      PLANNER_RETURN_IF_ERROR(ParseList<Schedule>(a->schedules, ParseSchedule, snames, "--schedule", &o.schedules));
      PLANNER_RETURN_IF_ERROR(ParseList<Recompute>(a->recompute, ParseRecompute, {"none", "selective", "full"}, "--recompute", &o.recompute));
      o.cost.dp_overlap = a->dp_overlap;
      o.cost.p2p_overlap = a->p2p_overlap;
      o.cost.scatter_gather = !a->no_scatter_gather;
      o.cost.bytes_per_param = a->bytes_per_param;
      if (src.model == nullptr && o.tp.empty()) o.tp = {1};
      PLANNER_RETURN_IF_ERROR(SolveAuto(src, o, &plan));
      plan.notes.push_back(fmt::format("searched {} candidates, simulated {}", o.considered, o.simulated));
      for (auto& n : comm_notes) plan.notes.push_back(std::move(n));
    }
    plan.gpus = a->gpus;
    plan.cluster_name = cluster.name;
    plan.cluster_path = cluster_path;
    plan.cluster_digest = cluster.digest;
    plan.usable_memory_bytes = plan.usable_memory_bytes > 0 ? plan.usable_memory_bytes : cluster.UsableMemoryBytes();
    if (!a->model.empty()) {
      plan.model_name = model.name;
      plan.model_path = a->model;
      plan.model_digest = model.digest;
      plan.dtype = DTypeName(model.dtype);
    } else {
      plan.model_name = profile.model;
      plan.dtype = profile.dtype;
    }
    plan.profile_path = profile_path;
    plan.profile_digest = profile_path.empty() ? "" : profile.digest;
    plan.cost_source = profile_path.empty() ? "analytic" : "profile";
    if (!a->output.empty()) {
      PLANNER_RETURN_IF_ERROR(WriteFileAtomic(a->output, PlanToYaml(plan)));
      LogNote("wrote " + a->output);
    }
    std::string text;
    if (a->json) {
      text = PlanToJson(plan);
    } else {
      text = RenderPlanSummary(plan) + "\n" + RenderStageTable(plan);
      std::string runners = RenderRunnersUp(plan);
      if (!runners.empty()) text += "\nrunners-up:\n" + runners;
      for (const auto& n : plan.notes) text += "note: " + n + "\n";
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::OK();
  };
}

}  // namespace planner
