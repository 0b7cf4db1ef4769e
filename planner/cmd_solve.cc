// planner solve --gpus N[,N...] [--model M | --profile P] [--cluster C] [--mode auto|pipedream] [-o plan.yaml] [--json]
// One size prints the best plan; a list prints a scaling table, one row per size (docs/formats.md).
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "common/units.h"
#include "dp_solver/pipedream_plan.h"
#include "dp_solver/search.h"
#include "planner/commands.h"
#include "planner/html_report.h"
#include "planner/output_guard.h"
#include "planner/predict_plan.h"
#include "planner/render.h"
#include "planner/solve_flags.h"
#include "spec/calibration.h"
#include "spec/cluster_spec.h"
#include "spec/engine_spec.h"
#include "spec/kernel_table.h"
#include "spec/kinds.h"
#include "spec/model_spec.h"
#include "spec/profile.h"

namespace planner {

namespace {

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
    if (it->is_regular_file(type_ec) && name.size() > 13 && name.substr(name.size() - 13) == ".profile.yaml")
      found.push_back(name);
  }
  if (ec) {
    return Status::Unavailable(fmt::format(
        ".: cannot list the working directory to find a profile: {}; pass --model or --profile", ec.message()));
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) {
    *path = found[0];
    return Status::OK();
  }
  if (found.empty()) {
    return Status::InvalidArgument(
        "no model or profile given and no *.profile.yaml in this directory; pass --model configs/models/<name>.yaml or "
        "--profile <file>");
  }
  std::string list;
  for (const auto& f : found) list += (list.empty() ? "" : ", ") + f;
  return Status::InvalidArgument("several profiles in this directory (" + list + "); choose one with --profile");
}

// -o with several sizes: PATH with ".<gpus>" before its extension (plan.yaml -> plan.1024.yaml).
std::string OutputPathForSize(const std::string& path, int64_t gpus, bool several) {
  if (!several) return path;
  const std::filesystem::path p(path);
  if (!p.has_extension()) return fmt::format("{}.{}", path, gpus);
  return (p.parent_path() / fmt::format("{}.{}{}", p.stem().string(), gpus, p.extension().string())).string();
}

// What every size of a --gpus list shares: the files read, with --seq / --precision applied.
struct SolveInputs {
  ClusterSpec cluster;
  KernelTable kernels;
  bool kernel_level = false;        // a kernel table applies (else the cluster's flat efficiency)
  std::vector<EngineSpec> engines;  // the engine the plan is for first; every built-in one with --engine all
  std::string cluster_path, profile_path;
  ModelSpec model;
  Profile profile;
  std::vector<std::string> notes;  // comm curves applied, model overrides
  Calibration calibration;         // --calibration: the one that applies (path empty: none)
};

// The engines (--engine; every built-in one for `all`, the default first) and the kernel table
// (--kernels, else the cluster GPU's built-in one; none: the cluster's flat efficiency).
Status LoadEngines(const SolveArgs& a, const ClusterSpec& cluster, SolveInputs* in) {
  std::vector<std::string> names{a.engine.empty() ? std::string(DefaultEngineName()) : a.engine};
  if (a.engine == "all") names = BuiltinEngines();
  for (const auto& n : names) {
    EngineSpec e;
    PLANNER_RETURN_IF_ERROR(LoadEngineSpec(n, &e));
    if (!a.fp8_recipe.empty()) e.fp8_recipe = a.fp8_recipe;  // the recipe the FP8 GEMMs and casts are costed with
    in->engines.push_back(std::move(e));
  }
  if (a.tp_comm_overlap != "on" && a.tp_comm_overlap != "off") {
    return Status::InvalidArgument(
        fmt::format("--tp-comm-overlap: unknown value '{}'; use on or off", a.tp_comm_overlap));
  }
  CpCommType cp_comm;
  if (!ParseCpCommType(a.cp_comm_type, &cp_comm)) {
    return Status::InvalidArgument(
        fmt::format("--cp-comm-type: unknown value '{}'; use p2p or allgather", a.cp_comm_type));
  }
  if (a.kernels == "none") return Status::OK();
  if (!a.kernels.empty()) {
    Status st = LoadKernelTable(a.kernels, &in->kernels);
    if (st.code() == StatusCode::kNotFound) return Status::InvalidArgument("--kernels: " + st.message());
    PLANNER_RETURN_IF_ERROR(st);
    in->kernel_level = true;
  } else {
    in->kernel_level = BuiltinKernelTableFor(cluster.gpu_name, &in->kernels);
  }
  return Status::OK();
}

// Selective recompute as the engine runs it: its modules by default (torchtitan: op_sac), and a module set
// it does not run refused (op_sac outside torchtitan; Megatron's modules on torchtitan).
Status ApplyEngineRecompute(const EngineSpec& e, SearchOptions* o) {
  const uint32_t runs = e.RunsRecomputeModules();
  if (o->recompute_modules == 0) {
    const bool selective = o->recompute.empty() || std::find(o->recompute.begin(), o->recompute.end(),
                                                             Recompute::kSelective) != o->recompute.end();
    if (selective) o->recompute_modules = e.recompute_modules;
    return Status::OK();
  }
  if ((o->recompute_modules & ~runs) == 0) return Status::OK();
  const std::string names = fmt::format("{}", fmt::join(RecomputeModuleList(o->recompute_modules & ~runs), ","));
  if (e.recompute_modules == 0)
    return Status::InvalidArgument(
        fmt::format("--recompute-modules {}: engine {} does not run it (op_sac is torchtitan's op-level selective "
                    "checkpointing); choose Megatron's modules or --engine torchtitan",
                    names, e.name));
  return Status::InvalidArgument(
      fmt::format("--recompute-modules {}: engine {} does not run it; its selective recompute is {}; choose "
                  "--recompute-modules {} or another --engine",
                  names, e.name, fmt::join(RecomputeModuleList(e.recompute_modules), ","),
                  fmt::join(RecomputeModuleList(e.recompute_modules), ",")));
}

// "--engine A or B" naming the built-in engines whose file satisfies `runs`, else "another --engine".
std::string EnginesThat(const std::function<bool(const EngineSpec&)>& runs) {
  std::vector<std::string> names;
  for (const std::string& n : BuiltinEngines()) {
    EngineSpec e;
    if (LoadEngineSpec(n, &e).ok() && runs(e)) names.push_back(n);
  }
  if (names.empty()) return "another --engine";
  return fmt::format("--engine {}", fmt::join(names, " or "));
}

// The built-in engines that run schedule `s` (an engine file without `schedules` runs every one).
std::string EnginesRunning(Schedule s) {
  return EnginesThat([s](const EngineSpec& e) {
    return e.schedules.empty() ||
           std::find(e.schedules.begin(), e.schedules.end(), ScheduleName(s)) != e.schedules.end();
  });
}

// --moe-dispatcher against the engine and the model (MoE models only): the engine's moe_dispatchers; flex
// (DeepEP) neither pads to a capacity (Megatron-Core's TransformerConfig refuses moe_pad_expert_input_to_capacity
// with it) nor is costed with expert TP (its one all-to-all over the TP x EP group is not the alltoall
// dispatcher's per-ETP collectives): etp 1.
Status ApplyMoeDispatcher(const SolveArgs& a, const CostSource& src, bool restrict, SearchOptions* o) {
  const EngineSpec& e = *src.engine;
  const ModelSpec* m = src.model;
  if (m == nullptr || ModelExperts(m) == 0) return Status::OK();
  if (restrict &&
      std::find(e.moe_dispatchers.begin(), e.moe_dispatchers.end(), a.moe_dispatcher) == e.moe_dispatchers.end())
    return Status::InvalidArgument(
        fmt::format("--moe-dispatcher {}: engine {} does not run it (its file's moe_dispatchers); choose "
                    "--moe-dispatcher {} or another --engine",
                    a.moe_dispatcher, e.name, fmt::join(e.moe_dispatchers, ",")));
  if (!o->cost.moe_dedup) return Status::OK();  // alltoall (the flag parsed in MoeCostFlags)
  for (const auto& l : m->layers) {
    if (l.experts > 0 && l.attrs.Real("capacity_factor", 0) > 0)
      return Status::InvalidArgument(fmt::format(
          "--moe-dispatcher flex: model {} pads experts to capacity factor {} (Megatron-Core's flex dispatcher runs "
          "dropless only); use --moe-dispatcher alltoall",
          m->name, l.attrs.Real("capacity_factor", 0)));
  }
  if (std::any_of(o->etp.begin(), o->etp.end(), [](int64_t x) { return x > 1; }))
    return Status::InvalidArgument(
        "--moe-dispatcher flex: costed at expert tensor-parallel size 1 only (DeepEP dispatches once over the "
        "TP x EP group, not as the alltoall dispatcher's per-ETP collectives); use --etp 1 or --moe-dispatcher "
        "alltoall");
  o->etp = {1};
  return Status::OK();
}

// The ZeRO stages searched narrowed to `stages` (an option the engine runs at those only): all of them when none was
// forced, else the forced ones among them. False, leaving o->zero as it was for the caller's error, when none is.
bool NarrowZero(const std::vector<int64_t>& stages, SearchOptions* o) {
  if (o->zero.empty()) {
    o->zero = stages;
    return true;
  }
  std::vector<int64_t> both;
  for (int64_t z : o->zero) {
    if (std::find(stages.begin(), stages.end(), z) != stages.end()) both.push_back(z);
  }
  if (both.empty()) return false;
  o->zero = both;
  return true;
}

// --optimizer-state against the engine, whatever the cost level (the default engine's file too): a state it does
// not keep is an input error; one it keeps at fewer ZeRO stages (Megatron-Core's precision-aware optimizer runs under
// the distributed optimizer only) narrows the stages searched, the forced ones included (an empty intersection is
// an error). Runs after the engine's own `zero`, so a stage it never runs is refused with that reason first.
Status ApplyOptimizerState(const EngineSpec& e, SearchOptions* o) {
  const OptimizerState s = o->cost.optimizer_state;
  if (s == OptimizerState::kFp32) return Status::OK();
  const std::vector<int64_t>* stages = e.OptimizerStateZero(s);
  if (stages == nullptr) {
    std::vector<std::string> keeps;  // those the plan's FP8 parameters (or their absence) allow
    for (const auto& kv : e.optimizer_states)
      if (OptimizerStateFp8ParamsRefusal(kv.first, o->cost.fp8_params).empty())
        keeps.emplace_back(OptimizerStateName(kv.first));
    return Status::InvalidArgument(
        fmt::format("--optimizer-state {}: engine {} does not keep it ({}); choose --optimizer-state {} or {}",
                    OptimizerStateName(s), e.name,
                    e.optimizer_states_reason.empty() ? "its file's optimizer_states" : e.optimizer_states_reason,
                    keeps.empty() ? "fp32" : fmt::format("{}", fmt::join(keeps, "|")),
                    EnginesThat([s](const EngineSpec& x) { return x.OptimizerStateZero(s) != nullptr; })));
  }
  if (!NarrowZero(*stages, o))
    return Status::InvalidArgument(fmt::format(
        "--optimizer-state {} with --zero {}: engine {} keeps it at ZeRO-{} only; choose --zero {} or "
        "--optimizer-state fp32",
        OptimizerStateName(s), fmt::join(o->zero, ","), e.name, fmt::join(*stages, "/"), fmt::join(*stages, ",")));
  return Status::OK();
}

// --fp8-param-gather against the engine: one that keeps no FP8 parameters is an input error; the ZeRO stages it
// keeps them at narrow the search (Megatron-Core: the distributed optimizer or FSDP), the forced ones included.
Status ApplyFp8ParamGather(const EngineSpec& e, SearchOptions* o) {
  if (!o->cost.fp8_params) return Status::OK();
  // PipeDream's per-stage replication keeps a whole optimizer per replica (ZeRO-0): no sharded master to hold.
  const bool pipedream_only =
      !o->replication.empty() || o->vertical_sync ||
      (!o->schedules.empty() &&
       std::all_of(o->schedules.begin(), o->schedules.end(), [](Schedule s) { return s == Schedule::kPipeDream; }));
  if (pipedream_only)
    return Status::InvalidArgument(
        "--fp8-param-gather with the pipedream schedule (--replication, --vertical-sync): per-stage replication "
        "keeps every replica's optimizer whole (ZeRO-0), and FP8 parameters need the fp32 master sharded; drop one "
        "of them");
  const std::vector<int64_t>& stages = e.fp8_param_gather;
  if (stages.empty())
    return Status::InvalidArgument(
        fmt::format("--fp8-param-gather: engine {} does not keep FP8 parameters ({}); drop the flag or use {}", e.name,
                    e.fp8_param_gather_reason.empty() ? "its file has no fp8_param_gather" : e.fp8_param_gather_reason,
                    EnginesThat([](const EngineSpec& x) { return !x.fp8_param_gather.empty(); })));
  if (!NarrowZero(stages, o))
    return Status::InvalidArgument(fmt::format(
        "--fp8-param-gather with --zero {}: engine {} keeps FP8 parameters at ZeRO-{} only (the distributed optimizer "
        "or FSDP hold the fp32 master); choose --zero {} or drop --fp8-param-gather",
        fmt::join(o->zero, ","), e.name, fmt::join(stages, "/"), fmt::join(stages, ",")));
  return Status::OK();
}

// Sliding-window attention under context parallelism: Transformer Engine runs it with the all-gather (or all-to-all)
// exchange only (attention/dot_product_attention/context_parallel.py asserts "Context parallelism does not support
// sliding window attention with cp_comm_type=..."): with p2p the search keeps cp 1, and a forced cp > 1 is an error.
Status ApplySlidingWindowCp(const SolveArgs& a, const CostSource& src, SearchOptions* o) {
  if (o->cost.cp_comm == CpCommType::kAllGather || src.model == nullptr) return Status::OK();
  const Layer* w = src.model->FirstWindowedLayer();
  if (w == nullptr) return Status::OK();
  if (o->cp.empty()) o->cp = {1};
  const auto& runs = src.engine->cp_comm_types;
  const bool allgather = std::find(runs.begin(), runs.end(), "allgather") != runs.end();
  for (int64_t c : o->cp) {
    if (c > 1)
      return Status::InvalidArgument(fmt::format(
          "--cp {}: layer {} attends through a sliding window of {} keys, which Transformer Engine runs under context "
          "parallelism with the all-gather exchange only, not --cp-comm-type {}; {}",
          c, w->name, w->attention_window, a.cp_comm_type,
          allgather ? "add --cp-comm-type allgather or use --cp 1"
                    : fmt::format("engine {} has no all-gather exchange: use --cp 1 or --engine megatron-core",
                                  src.engine->name)));
  }
  return Status::OK();
}

// What the engine changes in the search: the ZeRO stages and schedules it runs (a forced one it does not
// run is an input error naming the reason), and with a kernel table its overlap behaviour and memory.
Status ApplyEngine(const SolveArgs& a, const CostSource& src, SearchOptions* o) {
  const EngineSpec& e = *src.engine;
  // What the engine runs restricts the search when it was named or the costs are kernel-level; the
  // flat model with the default engine searches what it always did (CPU clusters, GPUs without a table).
  const bool restrict = !a.engine.empty() || KernelLevel(src);
  if (restrict && !e.zero.empty()) {
    if (o->zero.empty()) o->zero = e.zero;
    for (int64_t z : o->zero) {
      if (std::find(e.zero.begin(), e.zero.end(), z) == e.zero.end())
        return Status::InvalidArgument(
            fmt::format("--zero {}: engine {} does not run ZeRO-{} ({}); choose --zero {} or "
                        "another --engine",
                        z, e.name, z, e.zero_reason, fmt::join(e.zero, ",")));
    }
  }
  PLANNER_RETURN_IF_ERROR(ApplyOptimizerState(e, o));
  PLANNER_RETURN_IF_ERROR(ApplyFp8ParamGather(e, o));
  if (restrict && !e.schedules.empty()) {
    std::vector<Schedule> runs;
    for (const auto& name : e.schedules) {
      Schedule s;
      if (ParseSchedule(name, &s)) runs.push_back(s);
    }
    if (o->schedules.empty()) o->schedules = runs;
    for (Schedule s : o->schedules) {
      if (std::find(runs.begin(), runs.end(), s) == runs.end())
        return Status::InvalidArgument(fmt::format("--schedule {}: engine {} does not run it; choose one of {} or {}",
                                                   ScheduleName(s), e.name, fmt::join(e.schedules, ", "),
                                                   EnginesRunning(s)));
    }
  }
  ParseCpCommType(a.cp_comm_type, &o->cost.cp_comm);  // checked in LoadEngines
  // Only a layout with cp > 1 exchanges anything: cp forced to 1 (or a cp 1 winner costed on every engine) is not refused.
  const bool cp_only_1 = !o->cp.empty() && std::all_of(o->cp.begin(), o->cp.end(), [](int64_t c) { return c == 1; });
  if (restrict && !cp_only_1 &&
      std::find(e.cp_comm_types.begin(), e.cp_comm_types.end(), a.cp_comm_type) == e.cp_comm_types.end())
    return Status::InvalidArgument(
        fmt::format("--cp-comm-type {}: engine {} does not run it ({}); choose --cp-comm-type {} or another --engine",
                    a.cp_comm_type, e.name, e.cp_comm_reason.empty() ? "its file's cp_comm_types" : e.cp_comm_reason,
                    fmt::join(e.cp_comm_types, ",")));
  PLANNER_RETURN_IF_ERROR(ApplySlidingWindowCp(a, src, o));
  PLANNER_RETURN_IF_ERROR(ApplyMoeDispatcher(a, src, restrict, o));
  // EP overlap: an engine whose file gives no share of the all-to-all it hides has none (under --engine all it is
  // listed as unable to run the winner's layout with the option on).
  const bool ep_only_1 = !o->ep.empty() && std::all_of(o->ep.begin(), o->ep.end(), [](int64_t x) { return x == 1; });
  if (restrict && o->cost.moe_overlap && ModelExperts(src.model) > 0 && !ep_only_1 && !(e.moe_a2a_hidden > 0))
    return Status::InvalidArgument(
        fmt::format("--moe-overlap on: engine {} does not overlap the expert all-to-all with compute (its file has no "
                    "overlap.moe_a2a_hidden); use --moe-overlap off or {}",
                    e.name, EnginesThat([](const EngineSpec& x) { return x.moe_a2a_hidden > 0; })));
  if (restrict) PLANNER_RETURN_IF_ERROR(ApplyEngineRecompute(e, o));
  if (restrict) o->cost.fsdp_with_pp = e.fsdp_with_pp;
  if (restrict) {
    for (int64_t z : e.hsdp) o->hsdp_zero |= 1u << z;
  }
  const bool hybrid_forced =
      !o->dp_replicate.empty() && std::find(o->dp_replicate.begin(), o->dp_replicate.end(), 1) == o->dp_replicate.end();
  if (hybrid_forced && o->hsdp_zero != 0 && !o->zero.empty() &&
      std::none_of(o->zero.begin(), o->zero.end(), [&](int64_t z) { return z >= 1 && (o->hsdp_zero >> z & 1u); }))
    return Status::InvalidArgument(fmt::format(
        "--dp-replicate with --zero {}: engine {} shards hierarchically only ZeRO-{}; choose --zero {} or another "
        "--engine",
        fmt::join(o->zero, ","), e.name, fmt::join(e.hsdp, "/"), fmt::join(e.hsdp, ",")));
  if (!o->dp_replicate.empty() && o->hsdp_zero == 0 &&
      std::any_of(o->dp_replicate.begin(), o->dp_replicate.end(), [](int64_t r) { return r > 1; }))
    return Status::InvalidArgument(fmt::format(
        "--dp-replicate: engine {} shards no ZeRO stage hierarchically{}; drop the flag or choose another --engine",
        e.name, restrict ? "" : " in the flat model (name --engine, or use a GPU with a kernel table)"));
  if (!KernelLevel(src)) return Status::OK();
  o->cost.overlap_grad_reduce = o->cost.overlap_grad_reduce && e.grad_reduce_overlap;
  o->cost.overlap_grad_reduce_pp = e.grad_reduce_overlap_pp;
  o->cost.overlap_param_prefetch = o->cost.overlap_param_prefetch && e.param_prefetch_overlap;
  o->cost.overlap_param_gather = o->cost.overlap_param_gather && e.param_gather_overlap;
  o->cost.compute_slowdown = e.compute_slowdown;
  o->cost.tp_comm_overlap = a.tp_comm_overlap == "on";
  return Status::OK();
}

// An engine's calibration band for `precision` (its file's `band`; for a model with routed experts its `band_moe`
// where it has one), none when it has no band for it.
std::optional<PlanBand> EngineBandOf(const EngineSpec& e, const std::string& precision, bool moe) {
  const EngineBand* b = e.BandFor(precision, moe);
  if (b == nullptr) return std::nullopt;
  const bool moe_band = b != e.BandFor(precision, false);  // band_moe served it
  return PlanBand{fmt::format("{} {}{}", e.name, precision, moe_band ? " MoE" : ""), b->low, b->high, b->runs,
                  b->checks};
}

// One engine's line of --engine all, its band's tokens/s/GPU range beside the figure.
std::string EngineLine(const std::string& engine, const PlanPredicted& p, const std::optional<PlanBand>& band) {
  const std::string range = band ? fmt::format(" (band {:.1f}..{:.1f}, {})", band->RateLow(p.tokens_per_second_per_gpu),
                                               band->RateHigh(p.tokens_per_second_per_gpu), band->basis)
                                 : " (no band)";
  return fmt::format(
      "  engine {:<18} iteration {:.3f} s | tokens/s/GPU {:.1f}{} | MFU {:.1f}% | peak memory {:.2f} GiB", engine,
      p.iteration_s, p.tokens_per_second_per_gpu, range, 100 * p.mfu, p.peak_memory_bytes / kGiB);
}

// One engine's figures of --engine all: its note line and its plan.yaml record (predicted.engines).
void AddEngine(const std::string& engine, const PlanPredicted& x, const std::optional<PlanBand>& band, Plan* plan) {
  plan->notes.push_back(EngineLine(engine, x, band));
  plan->predicted.engines.push_back(
      PlanEngine{engine, x.iteration_s, x.tokens_per_second_per_gpu, x.mfu, x.peak_memory_bytes, "", band});
}

// Options that cost exactly layout `l` (sizes, microbatch, schedule, recompute, SP, ZeRO) and keep one plan.
void ForceLayout(const ParallelLayout& l, SearchOptions* f) {
  f->tp = {l.tp};
  f->pp = {l.pp};
  f->cp = {l.cp};
  f->ep = {l.ep};
  f->etp = {l.etp};
  f->microbatch = {l.microbatch_size};
  f->schedules = {l.schedule};
  f->interleave = l.schedule == Schedule::kInterleaved ? std::vector<int64_t>{l.interleave} : std::vector<int64_t>{};
  f->recompute = {l.recompute};
  f->recompute_block = l.recompute_num_layers > 0 ? 1 : 0;
  f->recompute_modules = l.recompute == Recompute::kSelective ? l.recompute_modules : 0;
  f->sequence_parallel = {l.sequence_parallel ? 1 : 0};
  f->zero = {static_cast<int64_t>(l.zero_stage)};
  f->dp_replicate = {l.dp_replicate};
  f->top_k = 1;
}

// The plan's calibration band (docs/cost_model.md section 2, "Bands"): its engine's for the precision
// solved with, kernel-level analytic costs only (the flat efficiency and measured profiles have none).
void SetBand(const SolveInputs& in, const CostSource& src, Plan* plan) {
  if (src.profile != nullptr || plan->schedule == Schedule::kPipeDream) return;
  const Calibration& c = in.calibration;
  if (!c.path.empty() && c.runs.size() >= 3) {  // the user's own runs' residuals (docs/calibration.md)
    plan->predicted.band = PlanBand{fmt::format("calibration {}", Printable(c.path)), c.band_low, c.band_high,
                                    static_cast<int64_t>(c.runs.size())};
    return;
  }
  if (!KernelLevel(src)) return;
  const EngineSpec& e = *src.engine;
  const std::string precision = DTypeName(in.model.dtype);
  const bool moe = ModelExperts(&in.model) > 0;
  plan->predicted.band = EngineBandOf(e, precision, moe);
  if (moe && plan->predicted.band && e.BandFor(precision, true) == e.BandFor(precision, false))
    plan->notes.push_back(fmt::format(
        "band: no MoE run on engine {} at {} backs it (no band_moe): its dense runs' band, though MoE runs fell "
        "further on megatron-core (docs/performance.md, \"MoE runs by experts per GPU\")",
        e.name, precision));
  if (!plan->predicted.band)
    plan->notes.push_back(fmt::format(
        "no band: engine {} has no calibration band for {} (docs/cost_model.md \"Bands\")", e.name, precision));
}

// What a fine-tuning model's plan costs beyond pretraining: LoRA's frozen base and adapters (gpt.lora), samples packed
// into each sequence (gpt.packed_length).
void FineTuningNotes(const ModelSpec& m, Plan* plan) {
  if (!m.is_gpt) return;
  const GptConfig& g = m.gpt;
  if (g.lora.rank > 0) {
    const double all = m.TotalParams(), trained = m.TrainableParams();
    plan->notes.push_back(fmt::format(
        "LoRA rank {}: {:.4g}M of {:.4g}B parameters train ({:.3f}%); the base weights are frozen: no weight-gradient "
        "GEMMs, gradients or optimizer state for them, the adapters' GEMMs in bf16 (docs/cost_model.md \"LoRA\"); "
        "the Megatron-Bridge export runs it (codegen --export megatron-bridge; no other export trains adapters)",
        g.lora.rank, trained / 1e6, all / 1e9, 100 * trained / all));
  }
  if (g.packed_length > 0 && g.packed_length < g.seq)
    plan->notes.push_back(fmt::format(
        "packed samples: attention within samples of {} tokens (length-weighted mean) in each {}-token sequence, "
        "at the attention kernel's rate at that length (an assumption; docs/cost_model.md \"Packed samples\"); "
        "micro-batch 1 unless --microbatch says otherwise (NeMo and Megatron-Bridge train packed data so)",
        g.packed_length, g.seq));
}

// The assumption an MoE plan's expert block rests on: the engine's host launches (its moe_host), wherever they cost.
void MoeHostNote(const SolveInputs& in, const CostSource& src, Plan* plan) {
  if (src.profile != nullptr || src.engine == nullptr || ModelExperts(&in.model) <= 0) return;
  const EngineSpec& e = *src.engine;
  const std::array<double, 2> host = e.MoeHostSecondsPerExpert(in.model.dtype);
  if (!(host[0] + host[1] > 0)) return;
  const double scale = in.cluster.host_op_scale;
  plan->notes.push_back(fmt::format(
      "MoE expert block: the host's launches ({:.3g} / {:.3g} us per local expert per layer-microbatch, forward / "
      "backward, at {:.3g} us each: engine {}'s moe_host{}) wait where the GPU's work is shorter{} (docs/cost_model.md "
      "\"The MoE expert block's host time\")",
      scale * host[0] * 1e6, scale * host[1] * 1e6, scale * e.moe_host_launch_s * 1e6, e.name,
      scale != 1 ? fmt::format(" x cluster {}'s host_op_scale {:.3g}", in.cluster.name, scale) : std::string(),
      e.name == "megatron-core"
          ? "; 8.8 us is an eager PyTorch op measured on an H200's host, Transformer Engine's C++ "
            "launches assumed to cost as much"
          : ""));
}

// The winner's lead over the runner-up with every overlap off (DP buckets, parameter gathers, TP, CP,
// p2p and MoE communication exposed, no compute slowdown): how much of the lead rests on what the
// overlaps are assumed to hide; and how many runners-up the band cannot tell from the winner.
void CostLead(const CostSource& src, const SearchOptions& o, Plan* plan) {
  if (plan->runners_up.empty() || src.profile != nullptr || plan->schedule == Schedule::kPipeDream) return;
  const PlanSummary& r = plan->runners_up.front();
  if (r.schedule == Schedule::kPipeDream) return;
  SearchOptions bare = o;
  bare.cost.overlap_grad_reduce = bare.cost.overlap_param_gather = bare.cost.overlap_param_prefetch = false;
  bare.cost.dp_overlap = false;
  bare.cost.p2p_overlap = bare.cost.moe_overlap = bare.cost.tp_comm_overlap = bare.cost.cp_overlap = false;
  bare.cost.compute_slowdown = 0;
  PlanLead lead;
  lead.runner_up_s = r.iteration_s;
  // A time counterfactual of layouts that fit: re-solved with overlaps off, a layout's balanced partition
  // (costed with its communication exposed) may move and overgrow the memory; the memory is not re-checked.
  ClusterSpec cluster = *src.cluster;
  cluster.memory_GiB = cluster.usable_memory_GiB = 1e9;
  CostSource roomy = src;
  roomy.cluster = &cluster;
  for (auto [layout, out] : {std::pair<const ParallelLayout*, double*>{plan, &lead.chosen_no_overlap_s},
                             {&r, &lead.runner_up_no_overlap_s}}) {
    SearchOptions f = bare;
    ForceLayout(*layout, &f);
    Plan p;
    if (!SolveAuto(roomy, f, &p, nullptr).ok()) return;
    *out = p.predicted.iteration_s;
  }
  const double t = plan->predicted.iteration_s;
  if (plan->predicted.band) {
    for (const PlanSummary& s : plan->runners_up)
      lead.runners_up_within_band += plan->predicted.band->Overlaps(t, s.iteration_s);
  }
  plan->predicted.lead = lead;
}

// --engine all: the chosen layout costed again on every engine, forced (sizes, microbatch, schedule,
// recompute, ZeRO), one note per engine: its iteration time, tokens/s/GPU, MFU and peak memory, or
// why it cannot run the layout.
void CompareEngines(const SolveArgs& a, const SolveInputs& in, const CostSource& src, const SearchOptions& o,
                    Plan* plan) {
  if (in.engines.size() < 2 || src.profile != nullptr || plan->schedule == Schedule::kPipeDream) return;
  plan->notes.push_back(fmt::format("the chosen layout on every engine ({}):",
                                    KernelLevel(src) ? "kernel-level costs, docs/cost_model.md \"Engines\""
                                                     : "no kernel table: the engines differ only in what they run"));
  for (const EngineSpec& e : in.engines) {
    if (&e == src.engine) {  // the plan's own engine: its figures and band are the plan's
      const std::optional<PlanBand> band = plan->predicted.band;
      AddEngine(e.name, plan->predicted, band, plan);  // x aliases plan->predicted: read before the push
      continue;
    }
    CostSource s = src;
    s.engine = &e;
    SearchOptions f = o;
    ForceLayout(*plan, &f);
    // Selective recompute as this engine runs it when it does not run the plan's modules (torchtitan: op_sac).
    const uint32_t runs = e.RunsRecomputeModules();
    if (plan->recompute == Recompute::kSelective && (f.recompute_modules & ~runs) != 0) f.recompute_modules = 0;
    Plan p;
    SearchStats stats;
    Status st = ApplyEngine(a, s, &f);
    if (st.ok()) st = SolveAuto(s, f, &p, &stats);
    if (!st.ok()) {
      plan->notes.push_back(fmt::format("  engine {:<18} cannot run it: {}", e.name, st.message()));
      plan->predicted.engines.push_back(PlanEngine{e.name, 0, 0, 0, 0, std::string(st.message()), std::nullopt});
      continue;
    }
    // The engine's own band (the plan's calibration file, if any, is for the plan's engine; flat costs have none).
    AddEngine(e.name, p.predicted,
              KernelLevel(s) ? EngineBandOf(e, DTypeName(in.model.dtype), ModelExperts(&in.model) > 0) : std::nullopt,
              plan);
  }
}

// What the caching allocator reserves at an allocated peak (kernel-level costs: the engine's fragmentation).
// It never passes the GPU's memory: the allocator frees its unused cache and retries before it fails.
// 0 when not estimated (no fragmentation figure, no peak).
double ReservedBytes(double allocated_bytes, double fragmentation, double gpu_memory_GiB) {
  if (!(fragmentation > 0) || !(allocated_bytes > 0)) return 0;
  const double reserved = allocated_bytes / (1 - fragmentation);
  return gpu_memory_GiB > 0 ? std::min(reserved, gpu_memory_GiB * kGiB) : reserved;
}

// The plan's reserved estimate, with a note saying what it is and that memory is checked on the allocated peak; and
// when the estimate passes the usable memory, that the plan runs at the allocator's edge.
void NoteReserved(double fragmentation, double gpu_memory_GiB, double usable_GiB, Plan* plan) {
  const double allocated = plan->predicted.peak_memory_bytes;
  plan->predicted.peak_reserved_bytes = ReservedBytes(allocated, fragmentation, gpu_memory_GiB);
  if (!(plan->predicted.peak_reserved_bytes > 0)) return;
  const bool capped = plan->predicted.peak_reserved_bytes < allocated / (1 - fragmentation);
  const bool edge = usable_GiB > 0 && allocated / (1 - fragmentation) > usable_GiB * kGiB;
  plan->notes.push_back(fmt::format(
      "memory: peak {:.2f} GiB allocated; PyTorch's caching allocator reserves about {:.2f} GiB at {:.0f}% "
      "fragmentation{} (the engine's allocator_fragmentation; what nvidia-smi and torchtitan's log show); the fit is "
      "checked on the allocated peak against the usable memory{}",
      plan->predicted.peak_memory_bytes / kGiB, plan->predicted.peak_reserved_bytes / kGiB, 100 * fragmentation,
      capped ? fmt::format(", at most the GPU's {:g} GiB (it frees its cache before it fails)", gpu_memory_GiB)
             : std::string(),
      edge
          ? fmt::format("; at the allocator's edge: its estimate passes the usable {:g} GiB, so near the peak it frees "
                        "its cache and retries (slower steps: num_alloc_retries in torch.cuda.memory_stats), and a "
                        "run more fragmented than the engine's figure fails (an assumption: GMLake's average); "
                        "a smaller microbatch or recompute keeps a margin",
                        usable_GiB)
          : std::string()));
}

// One size: the search (or PipeDream's optimizer), then the plan's provenance and figures.
// What the search did: the candidates it considered and simulated, those timed by the closed form.
std::string SearchNote(const SearchStats& s) {
  if (s.closed_form > 0)
    return fmt::format("searched {} candidates, simulated {} ({} of them by the closed form: uniform stages)",
                       s.considered, s.simulated, s.closed_form);
  return fmt::format("searched {} candidates, simulated {}", s.considered, s.simulated);
}

// What an analytic prediction rests on beyond the layout (engine, kernel table, the options it was costed with),
// recorded so that a re-costing (planner calibrate) and codegen follow it.
void RecordCostInputs(const SolveArgs& a, const SolveInputs& in, Plan* plan) {
  plan->engine = in.engines.front().name;
  plan->engine_file = in.engines.front().path.rfind("builtin:", 0) == 0 ? "" : in.engines.front().path;
  if (plan->cp > 1) ParseCpCommType(a.cp_comm_type, &plan->cp_comm_type);
  // The FP8 recipe kernel-level costs assumed (the engine's, or --fp8-recipe); on the flat efficiency, the one asked
  // for (not costed: the exports still run it).
  if (in.model.dtype == DType::kFp8) plan->fp8_recipe = in.kernel_level ? in.engines.front().fp8_recipe : a.fp8_recipe;
  // Recorded where it was costed: kernel-level costs, an engine that hides a share, TP with sequence parallelism.
  plan->tp_comm_overlap = in.kernel_level && a.tp_comm_overlap == "on" &&
                          in.engines.front().tp_comm_overlap_hidden > 0 && plan->sequence_parallel && plan->tp > 1;
  // A built-in table by its name; a file (--kernels FILE, a calibration's measured table) by its path, so that
  // the plan can be costed again (planner calibrate's PlanPredictor).
  plan->kernels = !in.kernel_level ? "" : in.kernels.path.rfind("builtin:", 0) == 0 ? in.kernels.name : in.kernels.path;
  plan->attention_kernel = in.kernel_level ? AttentionKernel(in.kernels, in.engines.front()) : "";
  NoteReserved(in.kernel_level ? in.engines.front().allocator_fragmentation : 0, in.cluster.memory_GiB,
               in.cluster.usable_memory_GiB, plan);
}

Status SolveSize(const SolveArgs& a, const SolveInputs& in, Plan* plan) {
  if (a.mode == PlanMode::kPipeDream) {
    PLANNER_RETURN_IF_ERROR(BuildPipeDreamPlan(in.profile, in.cluster, a.gpus, PipeDreamOptionsOf(a), plan));
  } else {
    CostSource src;
    src.cluster = &in.cluster;
    src.model = a.model.empty() ? nullptr : &in.model;
    src.profile = in.profile_path.empty() ? nullptr : &in.profile;
    src.kernels = in.kernel_level ? &in.kernels : nullptr;
    src.engine = &in.engines.front();
    SearchOptions o;
    PLANNER_RETURN_IF_ERROR(BuildSearchOptions(a, in.model, in.profile, &o));
    PLANNER_RETURN_IF_ERROR(ApplyEngine(a, src, &o));
    SearchStats stats;
    PLANNER_RETURN_IF_ERROR(SolveAuto(src, o, plan, &stats));
    SetBand(in, src, plan);  // before CompareEngines: the plan's own engine's line shows it
    MoeHostNote(in, src, plan);
    if (src.model != nullptr) FineTuningNotes(in.model, plan);
    CompareEngines(a, in, src, o, plan);
    if (!a.pipeline_layout.empty())
      plan->notes.push_back(fmt::format(
          "stages as --pipeline-model-parallel-layout {} places the layers (Megatron's chunk order: chunk q on "
          "pipeline rank q % pp)",
          a.pipeline_layout));
    CostLead(src, o, plan);
    plan->notes.push_back(SearchNote(stats));
    const bool gpt = src.model != nullptr && src.model->is_gpt;
    if (!gpt && a.schedules.empty() && CostSourceLayers(src) > kMaxReplicatedLayers) {
      plan->notes.push_back(
          fmt::format("PipeDream's per-stage replication was not searched: {} layers is more than the {} its DP is run "
                      "for (docs/formats.md, \"Limits\")",
                      CostSourceLayers(src), kMaxReplicatedLayers));
    }
    NoteUnappliedFlags(a, plan);
  }
  if (a.vertical_sync) {
    if (plan->schedule != Schedule::kPipeDream)
      return Status::Internal("--vertical-sync: the search returned a synchronous plan for --schedule pipedream");
    plan->vertical_sync = true;
    if (a.mode == PlanMode::kPipeDream)
      plan->notes.push_back(
          "vertical sync: PipeDream mode keeps PipeDream's own memory check (--memory-constraint: one weight version "
          "per in-flight minibatch); "
          "the extra versions vertical sync holds at later stages are not in it (docs/cost_model.md)");
  }
  for (const auto& n : in.notes) plan->notes.push_back(n);
  plan->gpus = a.gpus;
  plan->cluster_name = in.cluster.name;
  plan->cluster_path = in.cluster_path;
  plan->cluster_digest = in.cluster.digest;
  plan->usable_memory_bytes =
      plan->usable_memory_bytes > 0 ? plan->usable_memory_bytes : in.cluster.UsableMemoryBytes();
  if (!a.model.empty()) {
    plan->model_name = in.model.name;
    plan->model_path = a.model;
    plan->model_digest = in.model.digest;
    plan->dtype = in.model.dtype;
    if (in.model.is_gpt) plan->seq = in.model.gpt.seq;
  } else {
    plan->model_name = in.profile.model;
    plan->dtype = in.profile.dtype;
  }
  plan->profile_path = in.profile_path;
  plan->profile_digest = in.profile_path.empty() ? "" : in.profile.digest;
  plan->cost_source = in.profile_path.empty() ? CostSourceKind::kAnalytic : CostSourceKind::kProfile;
  plan->calibration = in.calibration.path;
  if (a.mode != PlanMode::kPipeDream && in.profile_path.empty()) RecordCostInputs(a, in, plan);
  return Status::OK();
}

std::string PrecisionWithPeak(const ClusterSpec& c) {
  for (const char* d : {"bf16", "fp16", "fp32", "fp8"}) {
    if (c.peak_tflops.count(d) > 0) return d;
  }
  return "<one of the cluster's precisions>";
}

// A model in a precision the cluster has no peak for would cost nothing per FLOP or be refused by
// every candidate ("no configuration divides the problem"): said here, naming what the file has.
// A layer profile's times need no peak (only the MFU does, and the plan says why it has none).
Status CheckClusterPeak(const SolveArgs& a, const SolveInputs& in) {
  if (a.model.empty() || !in.profile_path.empty() || in.cluster.PeakFlops(in.model.dtype) > 0) return Status::OK();
  std::string have;
  for (const auto& [k, v] : in.cluster.peak_tflops) have += (have.empty() ? "" : ", ") + k;
  const char* dtype = DTypeName(in.model.dtype);
  return Status::InvalidArgument(fmt::format(
      "{}: cluster '{}' ({}) has no {} peak (gpu.peak_tflops gives {}) for model {} in {}; add gpu.peak_tflops.{} "
      "to the cluster or pass --precision {}",
      in.cluster_path, in.cluster.name, in.cluster.gpu_name, dtype, have.empty() ? "none" : have, in.model.name, dtype,
      dtype, PrecisionWithPeak(in.cluster)));
}

// A layer profile measured in another precision than a gpt: template model's, without --precision:
// the model is planned in the profile's precision (its times are that precision's), and a note says so.
SolveArgs WithProfilePrecision(const SolveArgs& a, const SolveInputs& in) {
  if (!a.precision.empty() || a.model.empty() || in.profile_path.empty() || !in.model.is_gpt ||
      in.profile.layers.empty() || in.profile.dtype == in.model.dtype) {
    return a;
  }
  SolveArgs b = a;
  b.precision = DTypeName(in.profile.dtype);
  return b;
}

// Reads the cluster, model and profile files and checks them against each other and the flags.
// The shares a calibration's scales multiply (docs/calibration.md): kernel-level costs, the engine's sustained
// GEMM / attention / memory shares; the flat model, the cluster's efficiency for `dtype` (attention is costed
// as GEMMs there) and its HBM efficiency.
CostScales RateShares(bool kernel_level, const EngineSpec& e, const ClusterSpec& c, DType dtype) {
  if (kernel_level) return CostScales{e.SustainedGemm(dtype), e.sustained_attention, e.sustained_memory};
  return CostScales{c.Efficiency(dtype), c.Efficiency(dtype), c.hbm_efficiency};
}

// Multiplies those shares by `k` (the flat model: every precision's efficiency by k.gemm, HBM by k.memory).
void ScaleRates(const CostScales& k, bool kernel_level, EngineSpec* e, ClusterSpec* c) {
  if (kernel_level) {
    e->sustained_gemm *= k.gemm;
    if (e->sustained_gemm_fp8 > 0) e->sustained_gemm_fp8 *= k.gemm;
    e->sustained_attention *= k.attention;
    e->sustained_memory *= k.memory;
    return;
  }
  c->efficiency *= k.gemm;
  for (auto& [dtype, eff] : c->efficiency_by_dtype) eff *= k.gemm;
  c->hbm_efficiency *= k.memory;
}

// --calibration: the file for this solve's engine, GPU, precision and cost kind, its scales applied to the
// engine's sustained shares (kernel-level) or the cluster's efficiencies (flat), checked against the
// physical bounds. InvalidArgument naming the file and the fix when none matches or two do.
Status ApplyCalibrations(const SolveArgs& a, SolveInputs* in) {
  if (a.calibrations.empty()) return Status::OK();
  if (!a.profile.empty())
    return Status::InvalidArgument("--calibration: a measured profile's times are not scaled; plan with --model");
  EngineSpec& e = in->engines.front();
  const std::string precision = DTypeName(in->model.dtype), costs = in->kernel_level ? "kernel-level" : "flat";
  std::string seen;
  for (const std::string& path : a.calibrations) {
    Calibration c;
    PLANNER_RETURN_IF_ERROR(LoadCalibration(path, &c));
    const bool fits =
        c.engine == e.name && c.gpu == in->cluster.gpu_name && c.precision == precision && c.costs == costs;
    if (!fits) {
      seen += fmt::format("{}{}: engine {} on {} in {} ({})", seen.empty() ? "" : "; ", path, c.engine, c.gpu,
                          c.precision, c.costs);
      continue;
    }
    if (!in->calibration.path.empty())
      return Status::InvalidArgument(fmt::format(
          "--calibration {} and {}: both calibrate engine {} on {} in {}; give one (calibrate their runs together)",
          in->calibration.path, path, e.name, c.gpu, precision));
    in->calibration = std::move(c);
  }
  if (in->calibration.path.empty())
    return Status::InvalidArgument(fmt::format(
        "--calibration: none is for this solve's engine {} on {} in {} ({} costs): {}; calibrate runs of this engine, "
        "GPU and precision, or drop --calibration",
        e.name, in->cluster.gpu_name, precision, costs, seen));
  const Calibration& c = in->calibration;
  const CostScales share = RateShares(in->kernel_level, e, in->cluster, in->model.dtype);
  const double shares[3] = {share.gemm, share.attention, share.memory}, scales[3] = {c.gemm, c.attention, c.memory};
  const char* names[3] = {"gemm", "attention", "memory"};
  for (int k = 0; k < 3; ++k) {
    if (shares[k] * scales[k] > kMaxCalibratedShare + kCalibratedShareRounding)
      return Status::InvalidArgument(fmt::format(
          "--calibration {}: scale.{} {} puts the sustained share at {:.3f}, above 1 (faster than the kernels' "
          "benchmarks); the engine or kernel table changed since it was fitted: calibrate again",
          c.path, names[k], scales[k], shares[k] * scales[k]));
  }
  if (!c.kernels.empty()) {  // the kernel table measured from the user's traces replaces the published one
    KernelTable measured;
    PLANNER_RETURN_IF_ERROR(LoadKernelTable(c.KernelsPath(), &measured).WithContext("--calibration " + c.path));
    in->notes.push_back(fmt::format("kernel table {} measured from {} trace(s) ({}) replaces the published {}",
                                    c.KernelsPath(), c.traces.size(), fmt::join(c.traces, ", "),
                                    in->kernel_level ? in->kernels.name : std::string("flat efficiency")));
    in->kernels = std::move(measured);
    in->kernel_level = true;
  }
  ScaleRates(CostScales{c.gemm, c.attention, c.memory}, in->kernel_level, &e, &in->cluster);
  in->notes.push_back(fmt::format(
      "calibrated with {} (engine {} on {} in {}, fitted {} from {} run(s) of your cluster): gemm x{:.3f}, attention "
      "x{:.3f}, memory-bound x{:.3f}; residuals after {:+.1f}% .. {:+.1f}%{}",
      c.path, c.engine, c.gpu, c.precision, c.fitted, c.runs.size(), c.gemm, c.attention, c.memory, 100 * c.band_low,
      100 * c.band_high, in->engines.size() > 1 ? fmt::format(" (--engine all: only {} is calibrated)", e.name) : ""));
  return Status::OK();
}

// --fp8-recipe scales FP8 GEMMs: refused for a model planned in another precision.
Status CheckFp8Recipe(const SolveArgs& a, const ModelSpec& model) {
  if (a.fp8_recipe.empty() || model.dtype == DType::kFp8) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("--fp8-recipe {}: model {} is planned in {}, and a recipe scales FP8 GEMMs only; add --precision fp8 "
                  "or drop --fp8-recipe",
                  a.fp8_recipe, model.name, DTypeName(model.dtype)));
}

Status LoadSolveInputs(const SolveArgs& a, SolveInputs* in) {
  in->profile_path = a.profile;
  if (a.model.empty() && in->profile_path.empty()) {
    PLANNER_RETURN_IF_ERROR(DiscoverProfile(&in->profile_path));
    LogNote("using profile " + in->profile_path + " (the only *.profile.yaml here)");
  }
  in->cluster_path = a.cluster;
  if (in->cluster_path.empty()) {
    in->cluster_path = DefaultCluster();
    LogNote("using cluster " + in->cluster_path + " (default; choose with --cluster)");
  }
  ClusterSpec& cluster = in->cluster;
  PLANNER_RETURN_IF_ERROR(LoadClusterSpec(in->cluster_path, &cluster));
  PLANNER_RETURN_IF_ERROR(LoadEngines(a, cluster, in));
  const std::string& profile_path = in->profile_path;
  if (!a.model.empty()) PLANNER_RETURN_IF_ERROR(LoadModelSpec(a.model, &in->model));
  if (!profile_path.empty()) PLANNER_RETURN_IF_ERROR(LoadProfile(profile_path, &in->profile));
  const Profile& profile = in->profile;
  const ModelSpec& model = in->model;
  if (!profile_path.empty() && profile.layers.empty()) {
    return Status::InvalidArgument(
        fmt::format("{} holds only collective curves; pass it as --comm-profile and give --model or a layer profile",
                    profile_path));
  }
  const SolveArgs eff = WithProfilePrecision(a, *in);
  if (eff.precision != a.precision) {
    in->notes.push_back(fmt::format(
        "model {} planned in {}, the precision {} was measured in (the model file says {}; --precision {} plans "
        "in that with these times)",
        model.name, eff.precision, profile_path, DTypeName(model.dtype), DTypeName(model.dtype)));
  }
  PLANNER_RETURN_IF_ERROR(ApplyModelOverrides(eff, &in->model, &in->notes));
  PLANNER_RETURN_IF_ERROR(CheckFp8Recipe(a, in->model));
  if (in->kernel_level && a.kernels.empty() && !a.model.empty() && in->kernels.Gemm(model.dtype) == nullptr) {
    in->kernel_level = false;  // the GPU's built-in table has no figures for this precision: the flat model
    in->notes.push_back(fmt::format("kernel table {} has no {} GEMM figures: costed at the cluster's flat efficiency",
                                    in->kernels.name, DTypeName(model.dtype)));
  }
  if (in->kernel_level && a.profile.empty()) {
    in->notes.push_back(fmt::format(
        "kernel-level costs: kernel table {} ({}) x engine {} ({}); the cluster's flat efficiency is not used "
        "(--kernels none uses it)",
        in->kernels.name, in->kernels.path, in->engines.front().name, in->engines.front().path));
  }
  if (!a.precision.empty() && profile_path.empty() && model.dtype == DType::kFp8 &&
      cluster.peak_tflops.count("fp8") == 0) {
    return Status::InvalidArgument(
        fmt::format("--precision fp8: {}: cluster '{}' ({}) has no FP8 peak; add gpu.peak_tflops.fp8 to it or choose "
                    "--precision bf16",
                    in->cluster_path, cluster.name, cluster.gpu_name));
  }
  PLANNER_RETURN_IF_ERROR(CheckClusterPeak(a, *in));
  PLANNER_RETURN_IF_ERROR(ApplyCalibrations(a, in));
  if (in->kernel_level && a.profile.empty() && cluster.power_cap_W > 0) {
    const KernelTable& k = in->kernels;
    in->notes.push_back(
        k.power_watts.empty()
            ? fmt::format("power cap {} W ({}) not modelled: kernel table {} has no power_clock (a measured table runs "
                          "at the power its trace ran at)",
                          cluster.power_cap_W, in->cluster_path, k.name)
            : fmt::format("power cap {} W ({}): GEMMs and attention at {:.3f} of the {} W clock (kernel table {} "
                          "power_clock; assumption: the SM clock scales compute-bound kernels, the memory clock is "
                          "kept; docs/cost_model.md \"Power caps\")",
                          cluster.power_cap_W, in->cluster_path, k.ClockUnderCap(cluster.power_cap_W),
                          k.power_watts.back(), k.name));
  }
  const std::string traced_comm = in->calibration.CommPath();
  if (!a.comm_profile.empty()) {
    Profile comm;
    PLANNER_RETURN_IF_ERROR(LoadProfile(a.comm_profile, &comm));
    if (comm.comm.empty())
      return Status::InvalidArgument(a.comm_profile +
                                     " has no collective curves; make one with mpirun -np 2 planner profile --comm");
    ApplyCommCurves(comm, a.comm_profile, &cluster, &in->notes);
    if (!traced_comm.empty())
      in->notes.push_back(fmt::format("--comm-profile {} is used, not the collectives {} measured from traces",
                                      a.comm_profile, traced_comm));
  } else if (!traced_comm.empty()) {  // the collectives of the user's own traces (planner calibrate)
    Profile comm;
    PLANNER_RETURN_IF_ERROR(LoadProfile(traced_comm, &comm).WithContext("--calibration " + in->calibration.path));
    in->notes.push_back(
        fmt::format("collectives measured from {} trace(s) ({}) replace the cluster file's figures "
                    "for the levels they cover",
                    in->calibration.traces.size(), traced_comm));
    ApplyCommCurves(comm, traced_comm, &cluster, &in->notes);
  } else if (!profile.comm.empty()) {
    ApplyCommCurves(profile, profile_path, &cluster, &in->notes);
  }
  for (int64_t n : a.gpu_list) {
    if (n > cluster.TotalGpus()) {
      return Status::InvalidArgument(
          fmt::format("--gpus {}: {} holds {} GPUs; lower --gpus or enlarge the cluster's topology", n,
                      in->cluster_path, cluster.TotalGpus()));
    }
  }
  if (a.mode == PlanMode::kPipeDream) {
    if (profile_path.empty())
      return Status::InvalidArgument("pipedream mode needs --profile (e.g. from planner import pipedream)");
    return Status::OK();
  }
  if (!profile_path.empty() && !a.model.empty() && profile.layers.size() != model.layers.size()) {
    return Status::InvalidArgument(fmt::format("{} has {} layers but {} has {}; profile this model or drop one of them",
                                               profile_path, profile.layers.size(), a.model, model.layers.size()));
  }
  if (!profile_path.empty() && !a.model.empty() && profile.dtype != model.dtype) {
    LogWarning(fmt::format("{} was measured in {} but the model trains in {}; the times may not transfer", profile_path,
                           DTypeName(profile.dtype), DTypeName(model.dtype)));
  }
  const bool cpu_profile = profile.backend == "cpu", cpu_cluster = cluster.gpu_name.rfind("cpu", 0) == 0;
  if (!profile_path.empty() && !profile.device.empty() && profile.device.find(cluster.gpu_name) == std::string::npos &&
      !(cpu_profile && cpu_cluster)) {
    LogWarning(fmt::format("{} was measured on '{}', not on the cluster's {}; its times are used as they are",
                           profile_path, profile.device, cluster.gpu_name));
  }
  return Status::OK();
}

// A plan's file path given relative to the plan (a launch copied elsewhere), else as written.
std::string BesidePlan(const std::string& plan_path, const std::string& path) {
  std::error_code ec;
  if (path.empty() || std::filesystem::exists(path, ec)) return path;
  const std::filesystem::path alt = std::filesystem::path(plan_path).parent_path() / path;
  return std::filesystem::exists(alt, ec) ? alt.string() : path;
}

}  // namespace

struct PlanPredictor::Impl {
  SolveArgs a;
  SolveInputs in;
  Plan plan;
  SearchOptions o;
};

PlanPredictor::PlanPredictor() : impl_(std::make_unique<Impl>()) {}
PlanPredictor::~PlanPredictor() = default;

Status PlanPredictor::Init(const std::string& plan_path, const Plan& plan) {
  Impl& m = *impl_;
  if (plan.mode != PlanMode::kAuto || plan.schedule == Schedule::kPipeDream)
    return Status::InvalidArgument(fmt::format(
        "{}: a PipeDream plan is costed from its profile's measured times; calibrate plans of `planner solve` (mode "
        "auto, a synchronous schedule)",
        plan_path));
  if (!plan.profile_path.empty() || plan.model_path.empty())
    return Status::InvalidArgument(fmt::format(
        "{}: planned from a measured profile ({}); its times are already measured: calibrate plans solved with --model",
        plan_path, plan.profile_path));
  SolveArgs& a = m.a;
  a.gpus = plan.gpus;
  a.gpus_text = std::to_string(plan.gpus);
  a.gpu_list = {plan.gpus};
  a.model = BesidePlan(plan_path, plan.model_path);
  a.cluster = BesidePlan(plan_path, plan.cluster_path);
  a.engine = plan.engine_file.empty() ? plan.engine : BesidePlan(plan_path, plan.engine_file);
  a.cp_comm_type = CpCommTypeName(plan.cp_comm_type);
  a.moe_dispatcher = MoeDispatcherName(plan.moe_dispatcher);
  a.moe_overlap = plan.moe_overlap ? "on" : "off";  // an older plan's note read as the input (ParsePlan)
  a.moe_imbalance = plan.moe_imbalance;
  a.tp_comm_overlap = plan.tp_comm_overlap ? "on" : "off";
  a.fp8_recipe = plan.fp8_recipe;
  const std::vector<std::string> builtin = BuiltinKernelTables();
  a.kernels = plan.kernels.empty() ? "none"
              : std::find(builtin.begin(), builtin.end(), plan.kernels) != builtin.end()
                  ? plan.kernels
                  : BesidePlan(plan_path, plan.kernels);  // a file: where the plan was solved, else beside it
  if (plan.dtype) a.precision = DTypeName(*plan.dtype);
  a.seq = plan.seq;
  a.global_batch = plan.global_batch;
  if (plan.grad_dtype) a.grad_dtype = DTypeName(*plan.grad_dtype);
  if (plan.optimizer_state != OptimizerState::kFp32) a.optimizer_state = OptimizerStateName(plan.optimizer_state);
  a.fp8_param_gather = plan.fp8_param_gather;
  a.p2p_overlap = plan.p2p_overlap;
  a.dp_comm = {DpCommName(plan.dp_comm)};
  PLANNER_RETURN_IF_ERROR(LoadSolveInputs(a, &m.in).WithContext(fmt::format("the inputs of {}", plan_path)));
  if (m.in.model.digest != plan.model_digest)
    return Status::InvalidArgument(fmt::format(
        "{}: {} changed since the plan was solved (digest {}, the plan says {}); solve again or restore the model file",
        plan_path, a.model, m.in.model.digest, plan.model_digest));
  CostSource src;
  src.cluster = &m.in.cluster;
  src.model = &m.in.model;
  src.kernels = m.in.kernel_level ? &m.in.kernels : nullptr;
  src.engine = &m.in.engines.front();
  PLANNER_RETURN_IF_ERROR(BuildSearchOptions(a, m.in.model, m.in.profile, &m.o));
  PLANNER_RETURN_IF_ERROR(ApplyEngine(a, src, &m.o));
  ForceLayout(plan, &m.o);
  m.o.recompute_modules = plan.recompute == Recompute::kSelective ? plan.recompute_modules : 0;
  m.plan = plan;
  PlanPredicted check;
  return Predict(CostScales{}, &check);
}

Status PlanPredictor::Predict(const CostScales& k, PlanPredicted* out) const {
  const Impl& m = *impl_;
  EngineSpec engine = m.in.engines.front();
  ClusterSpec cluster = m.in.cluster;
  ScaleRates(k, m.in.kernel_level, &engine, &cluster);
  CostSource src;
  src.cluster = &cluster;
  src.model = &m.in.model;
  src.kernels = m.in.kernel_level ? &m.in.kernels : nullptr;
  src.engine = &engine;
  Plan p;
  PLANNER_RETURN_IF_ERROR(SolveAuto(src, m.o, &p, nullptr));
  if (p.ParallelString() != m.plan.ParallelString())
    return Status::Internal(
        fmt::format("the forced layout {} came back as {}", m.plan.ParallelString(), p.ParallelString()));
  *out = p.predicted;
  // The reserved estimate, as solve writes it (a torchtitan log reports reserved memory).
  out->peak_reserved_bytes =
      ReservedBytes(out->peak_memory_bytes, m.in.kernel_level ? engine.allocator_fragmentation : 0, cluster.memory_GiB);
  return Status::OK();
}

bool PlanPredictor::kernel_level() const { return impl_->in.kernel_level; }
const KernelTable* PlanPredictor::kernels() const { return impl_->in.kernel_level ? &impl_->in.kernels : nullptr; }
const std::map<std::string, double>& PlanPredictor::peaks() const { return impl_->in.cluster.peak_tflops; }
void PlanPredictor::UseKernels(const KernelTable& table) {
  impl_->in.kernels = table;
  impl_->in.kernel_level = true;
}
int64_t PlanPredictor::gpus_per_node() const { return impl_->in.cluster.GpusPerUnit(0); }
void PlanPredictor::UseComm(const Profile& comm, const std::string& path) {
  ApplyCommCurves(comm, path, &impl_->in.cluster, &impl_->in.notes);
}
const std::string& PlanPredictor::engine() const { return impl_->in.engines.front().name; }
const std::string& PlanPredictor::gpu() const { return impl_->in.cluster.gpu_name; }
CostScales PlanPredictor::base() const {
  const Impl& m = *impl_;
  return RateShares(m.in.kernel_level, m.in.engines.front(), m.in.cluster, m.in.model.dtype);
}

Runner RegisterSolve(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "solve", "choose stages, replication, TP/CP/PP/DP, microbatching, schedule, recompute and ZeRO");
  auto a = std::make_shared<SolveArgs>();
  cmd->add_option("--gpus", a->gpus_text,
                  "GPUs to plan for; a list (1024,2048,4096) solves each size and prints a scaling table")
      ->required();
  cmd->add_option("--model", a->model, "model.yaml (analytic costs)");
  cmd->add_option("--profile", a->profile, "measured profile (planner profile / planner import)");
  cmd->add_option("--cluster", a->cluster, "cluster.yaml (default: configs/clusters/dgx-a100.yaml)");
  cmd->add_option(
      "--comm-profile", a->comm_profile,
      "measured collectives (planner profile --comm) replacing the cluster file's figures for the levels they cover");
  cmd->add_option("--mode", a->mode_text, "auto (joint TP/PP/DP search) or pipedream (PipeDream's optimizer, exactly)");
  cmd->add_option("-o,--output", a->output,
                  "write the best plan to this YAML file; with a --gpus list, one plan per size with the size before "
                  "the extension (p.yaml: p.1024.yaml, p.2048.yaml)");
  cmd->add_flag(
      "--json", a->json,
      "print the plan as JSON on stdout instead of the table (a --gpus list: a JSON array, one plan per size)");
  cmd->add_option("--top", a->top, "plans to rank (best plus runners-up)")->check(CLI::Range(1, 100));
  cmd->add_option("--calibration", a->calibrations,
                  "planner calibrate's file(s): the one for this engine, GPU and precision scales its rates "
                  "(docs/calibration.md)")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--threads", a->threads,
                  "threads that evaluate and simulate candidates (default 1); the plan, runners-up and notes are the "
                  "same at every count")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--global-batch", a->global_batch, "samples per iteration (default: the model's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq", a->seq, "sequence length (tokens per sample) replacing a gpt: model's seq")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
      "--precision", a->precision,
      "bf16, fp16, fp8 or fp32, replacing a gpt: model's dtype (fp8 needs the cluster's gpu.peak_tflops.fp8)");
  cmd->add_option("--train-tokens", a->train_tokens_text,
                  "tokens to train on (suffixes K M B T: 300B, 15T): adds days and GPU-hours");
  cmd->add_option("--tp", a->tp, "tensor-parallel degrees to try")->delimiter(',');
  cmd->add_option("--pp", a->pp, "pipeline depths to try")->delimiter(',');
  cmd->add_option("--cp", a->cp,
                  "context-parallel sizes to try (2 x cp must divide the sequence; tp x cp x pp must divide --gpus)")
      ->delimiter(',');
  cmd->add_option("--ep", a->ep,
                  "expert-parallel sizes to try (MoE models; each divides the experts; ep x etp divides tp x cp x dp; "
                  "default: every divisor of the experts)")
      ->delimiter(',');
  cmd->add_option("--etp", a->etp,
                  "expert tensor-parallel sizes to try (MoE models; default: 1 and tp, Megatron's default being tp)")
      ->delimiter(',');
  cmd->add_option("--moe-imbalance", a->moe_imbalance,
                  "busiest expert-parallel rank's routed tokens over the mean, dropless routing (default 1: balanced; "
                  "set the measured ratio)");
  cmd->add_option("--moe-overlap", a->moe_overlap,
                  "on: the MoE all-to-all partly hidden behind compute as the engine's EP overlap hides it (Megatron "
                  "--overlap-moe-expert-parallel-comm; megatron-core: 37%, measured), searched only on the layouts it "
                  "runs on (pp 1 or interleaved, no full recompute); off (default): exposed");
  cmd->add_option("--moe-dispatcher", a->moe_dispatcher,
                  "MoE token dispatch: alltoall (default; one copy per routed expert, Megatron "
                  "--moe-token-dispatcher-type alltoall) or flex (one copy per node a token reaches, forwarded there: "
                  "DeepEP, Megatron --moe-token-dispatcher-type flex)");
  cmd->add_option("--sp", a->sp, "sequence parallelism with tp > 1: on, off or both (default: the search's)");
  cmd->add_option("--engine", a->engine,
                  "the engine the plan is costed for: megatron-core (default), torchtitan, torchtitan-compile, "
                  "deepspeed, an engine file, or all (the chosen layout on every engine side by side)");
  cmd->add_option(
      "--kernels", a->kernels,
      "kernel table (per-operation-class rates): a built-in name (h100, a100, b200, gb200), a file, or none (the "
      "cluster's flat efficiency); default: the cluster GPU's built-in table");
  cmd->add_option("--fp8-recipe", a->fp8_recipe,
                  "FP8 plans: the scaling recipe, replacing the engine's (delayed, current, tensorwise, rowwise, "
                  "blockwise, mxfp8; Megatron --fp8-recipe: current runs as tensorwise); the kernel table must list it")
      ->check(CLI::IsMember(Fp8RecipeNames()));
  cmd->add_option("--tp-comm-overlap", a->tp_comm_overlap,
                  "on: TP collectives overlapped with the GEMMs as the engine does it (Megatron --tp-comm-overlap, "
                  "torchtitan async TP), off (default)");
  cmd->add_option("--cp-comm-type", a->cp_comm_type,
                  "context parallelism's KV exchange (Megatron --cp-comm-type): p2p, the ring (default), or allgather "
                  "(K, V all-gathered once per layer, exposed, one attention kernel per query chunk: Llama 3's CP)");
  cmd->add_option("--zero", a->zero,
                  "ZeRO stages to try: 0,1,2,3 (1 is Megatron's distributed optimizer, 3 FSDP; default all)")
      ->delimiter(',');
  cmd->add_option("--microbatch", a->microbatch, "microbatch sizes to try")->delimiter(',');
  cmd->add_option("--interleave", a->interleave,
                  "interleaved schedule: chunks per device v to try (default: every v with pp x v dividing the layers)")
      ->delimiter(',');
  cmd->add_option("--pipeline-model-parallel-layout", a->pipeline_layout,
                  "Megatron's layout forced: chunks of E (embedding), t (decoder layer), m (MTP), L (loss) "
                  "separated by '|', (...)*n and x*n repeat; pp x vp chunks, chunk q on rank q % pp (needs one --pp)");
  cmd->add_option("--dp-replicate", a->dp_replicate,
                  "HSDP replicate degrees to try (the ZeRO state sharded over dp x cp / r, replicated r times; "
                  "torchtitan data_parallel_replicate_degree, Megatron --num-distributed-optimizer-instances); "
                  "default: 1 and the degree keeping a shard group in one node, where the engine shards so")
      ->delimiter(',');
  cmd->add_option("--vp", a->vp,
                  "Megatron's virtual pipeline size: --interleave's values, and without --schedule the interleaved "
                  "schedule only")
      ->delimiter(',');
  cmd->add_option("--replication", a->replication,
                  "evaluate this per-stage replication only, e.g. 2-1-1 (TP groups per stage; PipeDream schedule)");
  cmd->add_option("--schedule", a->schedules,
                  "schedules to try: gpipe,1f1b,interleaved,zb-h1,pipedream (asynchronous, per-stage "
                  "replication),dualpipev (V-shaped, 2 chunks per rank)")
      ->delimiter(',');
  cmd->add_option("--recompute-modules", a->recompute_modules,
                  "selective recompute's modules (Megatron --recompute-modules): "
                  "core_attn,layernorm,mla_up_proj,moe_act,mlp,moe,shared_experts; default core_attn, and on MLA / MoE "
                  "models DeepSeek-V3's core_attn,layernorm,mla_up_proj,moe_act tried when core_attn leaves only full "
                  "recompute fitting")
      ->delimiter(',');
  cmd->add_option("--recompute", a->recompute,
                  "recompute modes to try: none,selective,full,block (block: the first N blocks of each chunk, N the "
                  "smallest that fits)")
      ->delimiter(',');
  cmd->add_option("--dp-comm", a->dp_comm,
                  "data-parallel gradient sync architectures to choose from: "
                  "allreduce-ring,allreduce-tree,allreduce-hier,ps,byteps "
                  "(default: every one the cluster can run: the three all-reduces, and ps,byteps when the cluster "
                  "declares cpu_machines; each is compared in the output)")
      ->delimiter(',');
  cmd->add_option("--ps-servers", a->ps_servers,
                  "CPU machines ps / byteps sum on (default: all the cluster's cpu_machines; ps needs at least 1)");
  cmd->add_option(
      "--ps-placement", a->ps_placement,
      "where ps's servers run: dedicated (on --ps-servers CPU machines; the default) or colocated "
      "(a server on every GPU machine, the model sharded over them; needs ps among --dp-comm's architectures)");
  cmd->add_flag("--dp-overlap", a->dp_overlap, "overlap the gradient all-reduce with backward");
  cmd->add_option("--overlap-grad-reduce", a->overlap_grad_reduce,
                  "on (default; Megatron --overlap-grad-reduce: bucketed, behind the last backward) or off (the whole "
                  "gradient reduction exposed)");
  cmd->add_option("--overlap-param-gather", a->overlap_param_gather,
                  "on (default; Megatron --overlap-param-gather: behind the first forward) or off (exposed)");
  cmd->add_flag("--p2p-overlap", a->p2p_overlap, "hide pipeline sends behind compute");
  cmd->add_flag("--no-scatter-gather", a->no_scatter_gather, "send whole activations between stages when tp > 1");
  cmd->add_option(
      "--bytes-per-param", a->bytes_per_param,
      "model-state bytes per parameter (default: weights + gradients + optimizer: 18 bf16 / fp8, 16 fp16 / fp32, less "
      "with --grad-dtype or --optimizer-state)");
  cmd->add_option("--grad-dtype", a->grad_dtype,
                  "gradient buffer dtype, accumulated over microbatches and reduced in it: fp32, or the model's 16-bit "
                  "dtype (default Megatron's: "
                  "fp16 for fp16 models, fp32 otherwise; fp32 with fp16 is --accumulate-allreduce-grads-in-fp32, bf16 "
                  "is --grad-reduce-in-bf16)");
  cmd->add_option("--optimizer-state", a->optimizer_state,
                  "how the optimizer keeps Adam's state beside 16-bit weights: fp32 (default; fp32 master and moments, "
                  "12 B/param), fp32-remainders (10 B: the master's low 16 bits beside the bf16 weight; Megatron "
                  "--use-precision-aware-optimizer, NeMo's distributed_fused_adam), bf16-moments (6 B: plus "
                  "--exp-avg-dtype/--exp-avg-sq-dtype bf16), bf16 (4 B: bf16 moments, no master; NeMo optim.dtype "
                  "bf16) or bf16-master (6 B: a bf16 master and moments beside FP8 parameters; NeMo optim.dtype bf16 "
                  "with fp8_params); the engine's file lists what it runs");
  cmd->add_flag(
      "--fp8-param-gather", a->fp8_param_gather,
      "FP8 models: keep the weights in FP8 alone (no bf16 copy; the fp32 master in the sharded optimizer) and "
      "all-gather them in FP8 (Megatron --fp8-param-gather, Megatron-Bridge and NeMo 2's FP8 presets); "
      "searches ZeRO-1 / 3 only");
  cmd->add_option("--pd-machines", a->pd_machines, "pipedream mode: machines per level, innermost first (-n)")
      ->delimiter(',');
  cmd->add_option("--pd-bandwidths", a->pd_bandwidths, "pipedream mode: bytes/s per level (-b)")->delimiter(',');
  CLI::Option* memory_opt =
      cmd->add_option("--memory-bytes", a->memory_bytes, "pipedream mode: memory per machine (-s, default 16e9)");
  cmd->add_flag("--memory-constraint", a->memory_constraint, "pipedream mode: --use_memory_constraint");
  cmd->add_flag("--straight", a->straight, "pipedream mode: --straight_pipeline");
  cmd->add_flag("--fewer-machines", a->fewer, "pipedream mode: --use_fewer_machines");
  cmd->add_flag("--vertical-sync", a->vertical_sync,
                "PipeDream's vertical sync: every stage runs a minibatch on the input stage's weight version (with "
                "--schedule pipedream or --mode pipedream)");
  cmd->add_option("--activation-compression-ratio", a->acr,
                  "pipedream mode: count activation transfers divided by this (0: ignore them; default 1)");
  cmd->add_option("--html", a->html,
                  "also write one self-contained HTML page: the plan (configuration, memory per stage, timeline, "
                  "communication, runners-up), with a --gpus list the scaling table and every size's plan");
  cmd->add_flag("--force", a->force, "let -o / --html replace a file the planner did not write");
  return [a, memory_opt]() -> Status {
    PLANNER_RETURN_IF_ERROR(ValidateSolveArgs(a.get(), memory_opt->count() > 0));
    if (!a->output.empty()) {  // before any work: a user's file at an output path is kept (exit 2)
      for (int64_t n : a->gpu_list)
        PLANNER_RETURN_IF_ERROR(CheckReplaceable("-o", OutputPathForSize(a->output, n, a->gpu_list.size() > 1),
                                                 OutputKind::kPlan, a->force));
    }
    if (!a->html.empty()) PLANNER_RETURN_IF_ERROR(CheckReplaceable("--html", a->html, OutputKind::kHtml, a->force));
    SolveInputs in;
    PLANNER_RETURN_IF_ERROR(LoadSolveInputs(*a, &in));
    const bool several = a->gpu_list.size() > 1;
    std::vector<ScalingRow> rows;
    for (int64_t n : a->gpu_list) {
      SolveArgs one = *a;
      one.gpus = n;
      ScalingRow row;
      row.gpus = n;
      Status s = SolveSize(one, in, &row.plan);
      if (!s.ok() && (!several || s.code() != StatusCode::kInfeasible)) return s;
      if (!s.ok()) row.error = s.message();
      rows.push_back(std::move(row));
    }
    if (several && std::none_of(rows.begin(), rows.end(), [](const ScalingRow& r) { return r.error.empty(); })) {
      return Status::Infeasible(
          fmt::format("no size of --gpus {} has a plan; --gpus {}: {}", a->gpus_text, rows[0].gpus, rows[0].error));
    }
    if (!a->output.empty()) {
      for (const auto& r : rows) {
        if (!r.error.empty()) continue;
        const std::string path = OutputPathForSize(a->output, r.gpus, several);
        PLANNER_RETURN_IF_ERROR(WriteFileAtomic(path, PlanToYaml(r.plan)));
        LogNote("wrote " + path);
      }
    }
    if (!a->html.empty()) {  // one page: the plan, or with a --gpus list the scaling table and every size's plan
      std::vector<Plan> plans;
      for (const auto& r : rows)
        if (r.error.empty()) plans.push_back(r.plan);
      std::string page;
      const std::string title = fmt::format("planner solve: {} on --gpus {} x {}", plans.front().model_name,
                                            a->gpus_text, plans.front().cluster_name);
      PLANNER_RETURN_IF_ERROR(several ? RenderPlansHtml(plans, title, a->train_tokens, &page)
                                      : RenderPlanHtml(plans.front(), title, &page));
      PLANNER_RETURN_IF_ERROR(WriteFileAtomic(a->html, page));
      LogNote("wrote " + a->html);
    }
    std::string text;
    if (a->json) {
      for (const auto& r : rows) {
        if (r.error.empty()) text += (text.empty() ? "" : ",\n") + PlanToJson(r.plan);
      }
      if (several) text = "[\n" + text + "]\n";
    } else if (several) {
      text = RenderScalingTable(rows, a->train_tokens);
    } else {
      const Plan& plan = rows[0].plan;
      text = RenderPlanSummary(plan) + (a->train_tokens > 0 ? RenderTrainingTime(plan, a->train_tokens) : "") + "\n" +
             RenderStageTable(plan);
      const std::string comm = RenderCommunication(plan);
      if (!comm.empty()) text += "\n" + comm;
      const std::string dp_table = RenderDpCommTable(plan);
      if (!dp_table.empty()) text += "\n" + dp_table;
      std::string runners = RenderRunnersUp(plan);
      if (!runners.empty()) text += "\nrunners-up:\n" + runners;
      for (const auto& n : plan.notes) text += "note: " + n + "\n";
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::OK();
  };
}

}  // namespace planner
