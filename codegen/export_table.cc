// The export targets as one table (Exports()): the --export names and their order, the files each
// target owns in a launch directory, and the writer GenerateLaunchFiles calls. docs/exports.md.
#include "codegen/codegen.h"
#include "codegen/exports.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/edit_distance.h"
#include "spec/engine_spec.h"

namespace planner {
namespace codegen_internal {
std::string Fp32OptimizerNote(const Plan& plan, const std::string& target) {
  if (plan.optimizer_state == OptimizerState::kFp32) return "";
  return fmt::format(
      "{}: the optimizer keeps fp32 master weights and moments (12 B per parameter), not the plan's {} ({:g} B): {:g} "
      "B per parameter more (sharded as the plan's ZeRO stage shards the optimizer state); solve with "
      "--optimizer-state fp32 to plan what it runs",
      target, OptimizerStateName(plan.optimizer_state), OptimizerStateBytes(plan.optimizer_state),
      OptimizerStateBytes(OptimizerState::kFp32) - OptimizerStateBytes(plan.optimizer_state));
}

std::string Bf16WeightsNote(const Plan& plan, const std::string& target) {
  if (!plan.fp8_param_gather) return "";
  return fmt::format(
      "{}: keeps bf16 weights and casts them to FP8 per use, not the plan's FP8 parameters (Megatron "
      "--fp8-param-gather): more weight memory per GPU than planned and parameter gathers in bf16; solve without "
      "--fp8-param-gather to plan what it runs",
      target);
}

std::string EngineNote(const Plan& plan, const std::vector<const ExportTarget*>& written) {
  const std::vector<std::string> builtin = BuiltinEngines();
  const auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  if (plan.kernels.empty() || !plan.engine_file.empty() || !has(builtin, plan.engine)) return "";
  const auto figure = [](double tokens_per_s, double iteration_s) {  // tokens: 0 for a model without a sequence
    return (tokens_per_s > 0 ? fmt::format("{:.1f} tokens/s/GPU, ", tokens_per_s) : "") +
           fmt::format("{:.3f} s per iteration", iteration_s);
  };
  std::vector<std::string> others;
  bool uncosted = false;  // a target's engine without a figure in the plan
  for (const ExportTarget* t : written) {
    if (t->engines.empty() || has(t->engines, plan.engine)) continue;
    const std::string& e = t->engines.front();
    const auto it = std::find_if(plan.predicted.engines.begin(), plan.predicted.engines.end(),
                                 [&](const PlanEngine& p) { return p.engine == e; });
    std::string costed = "not costed";
    uncosted = uncosted || it == plan.predicted.engines.end();
    if (it != plan.predicted.engines.end())  // the refusal's first clause: solve --engine all prints the rest
      costed = it->error.empty() ? figure(it->tokens_per_second_per_gpu, it->iteration_s)
                                 : "cannot run the layout: " + it->error.substr(0, it->error.find_first_of("(;"));
    while (!costed.empty() && costed.back() == ' ') costed.pop_back();
    others.push_back(fmt::format("{} (engine {}: {})", t->name, e, costed));
  }
  if (others.empty()) return "";
  return fmt::format(
      "engine: the plan's prediction ({}) is {}'s; the other exports run the layout on their own engines, with their "
      "own kernels, overlaps and memory: {}{}",
      figure(plan.predicted.tokens_per_second_per_gpu, plan.predicted.iteration_s), plan.engine,
      fmt::join(others, ", "),
      !uncosted ? " (solve --engine all, stored in the plan)"
                : "; solve with --engine all (the layout on every engine) for their figures (docs/cost_model.md, "
                  "\"Engines\")");
}

// In writing order; owned: path prefixes relative to the launch directory (a target's .refused file included).
const std::vector<ExportTarget>& Exports() {
  static const std::vector<ExportTarget> kExports = {
      {"mpirun",
       {"run.sh"},
       [](const ExportInput& in, Files* f, Notes*) { AddRunScript(in.model, in.launch, in.options, f); },
       {}},
      {"slurm",
       {"slurm.sbatch"},
       [](const ExportInput& in, Files* f, Notes* n) { AddSlurmScript(in.model, in.launch, in.options, f, n); },
       {}},
      {"megatron",
       {"megatron."},
       [](const ExportInput& in, Files* f, Notes* n) { AddMegatronArgs(in.plan, in.model, in.launch, f, n); },
       {"megatron-core"}},
      {"megatron-bridge",
       {"megatron_bridge."},
       [](const ExportInput& in, Files* f, Notes* n) { AddMegatronBridge(in.plan, in.model, in.launch, f, n); },
       {"megatron-core"}},
      {"deepspeed",
       {"deepspeed/"},
       [](const ExportInput& in, Files* f, Notes* n) { AddDeepSpeedFiles(in.plan, in.model, in.launch, f, n); },
       {"deepspeed"}},
      {"torchtitan",
       {"torchtitan"},
       [](const ExportInput& in, Files* f, Notes* n) { AddTorchtitan(in.plan, in.model, in.launch, in.options, f, n); },
       {"torchtitan", "torchtitan-compile"}},
      {"torch-pipelining",
       {"torch_pipelining."},
       [](const ExportInput& in, Files* f, Notes* n) { AddTorchPipelining(in.plan, in.model, in.launch, f, n); },
       // eager PyTorch modules and SDPA, no FSDP2 or compile: the torchtitan engine file's kernels and overlaps
       {"torchtitan"}},
  };
  return kExports;
}

}  // namespace codegen_internal

const std::vector<std::string>& ExportTargets() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& e : codegen_internal::Exports()) names.emplace_back(e.name);
    return names;
  }();
  return kNames;
}

const std::vector<std::string>& ExportSubdirectories() {
  static const std::vector<std::string> kDirs = [] {
    std::vector<std::string> dirs = {""};
    for (const auto& e : codegen_internal::Exports()) {
      for (const std::string& p : e.owned) {
        const size_t slash = p.rfind('/');
        if (slash == std::string::npos) continue;
        if (std::find(dirs.begin(), dirs.end(), p.substr(0, slash)) == dirs.end()) dirs.push_back(p.substr(0, slash));
      }
    }
    return dirs;
  }();
  return kDirs;
}

bool ExportOwnsFile(const std::string& target, const std::string& path) {
  for (const auto& e : codegen_internal::Exports()) {
    if (target != e.name) continue;
    return std::any_of(e.owned.begin(), e.owned.end(), [&path](const std::string& p) { return path.rfind(p, 0) == 0; });
  }
  return false;
}

Status ParseExportList(const std::string& list, std::vector<std::string>* out) {
  const std::vector<std::string>& all = ExportTargets();
  out->clear();
  if (list == "all") {
    *out = all;
    return Status::OK();
  }
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string name = list.substr(start, end - start);
    if (name.empty()) {
      return Status::InvalidArgument(fmt::format(
          "--export: an empty target name in '{}'; give {} (comma-separated) or all", list, fmt::join(all, ", ")));
    }
    if (name == "all")
      return Status::InvalidArgument("--export: 'all' stands alone; give --export all or a list of targets");
    if (std::find(all.begin(), all.end(), name) == all.end()) {
      const std::string hint = DidYouMean(name, all);  // ", did you mean 'x'?" or ""
      return Status::InvalidArgument(
          fmt::format("--export: unknown target '{}'{}; choose from {} (comma-separated) or all", name,
                      hint.empty() ? "" : " (" + hint.substr(2) + ")", fmt::join(all, ", ")));
    }
    if (std::find(out->begin(), out->end(), name) != out->end()) {
      return Status::InvalidArgument(fmt::format("--export: '{}' listed twice; name each target once", name));
    }
    out->push_back(name);
    start = end + 1;
  }
  return Status::OK();
}

}  // namespace planner
