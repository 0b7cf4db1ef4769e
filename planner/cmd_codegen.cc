// planner codegen PLAN -o DIR: launch.yaml, run.sh, slurm.sbatch, megatron.args, deepspeed/, torch_pipelining.py
#include <filesystem>

#include <fmt/format.h>

#include "codegen/codegen.h"
#include "common/digest.h"
#include "common/log.h"
#include "planner/commands.h"
#include "spec/cluster_spec.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

struct CodegenArgs {
  std::string plan, output = "launch", device = "cpu", optimizer = "adam", planner_path;
  int64_t iterations = 20, warmup = 2, threads = 1, gpus_per_node = 0, checkpoint_every = 0, seed = 1;
  double lr = 1e-3, timeout_s = 60;
  bool overlap_dp = false;
};

// The model file named by the plan: as written, else next to the plan.
std::string ResolveModel(const std::string& plan_path, const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;  // a path that cannot be examined counts as absent; reading it later names the error
  if (model_path.empty() || fs::exists(model_path, ec)) return model_path;
  fs::path alt = fs::path(plan_path).parent_path() / model_path;
  return fs::exists(alt, ec) ? alt.string() : model_path;
}

// Ranks per node from the plan's cluster file where it is still to be found
// (a broken one is an error), else 8 with a note.
Status PlanGpusPerNode(const std::string& plan_path, const Plan& plan, int64_t* out) {
  const std::string cp = ResolveModel(plan_path, plan.cluster_path);
  std::error_code ec;
  if (!cp.empty() && std::filesystem::exists(cp, ec)) {
    ClusterSpec c;
    PLANNER_RETURN_IF_ERROR(LoadClusterSpec(cp, &c));
    *out = c.levels[0].size;
    return Status::OK();
  }
  *out = 8;
  LogNote(fmt::format("8 ranks per node: the plan's cluster file '{}' is not here; choose with --gpus-per-node", plan.cluster_path));
  return Status::OK();
}

}  // namespace

Runner RegisterCodegen(CLI::App& app, const std::string& self) {
  auto* cmd = app.add_subcommand("codegen", "turn a plan into a launch directory (ranks, scripts, Megatron/DeepSpeed/torch settings)");
  auto a = std::make_shared<CodegenArgs>();
  cmd->add_option("plan", a->plan, "plan.yaml from planner solve")->required();
  cmd->add_option("-o,--output", a->output, "launch directory to write (default: launch)");
  cmd->add_option("--device", a->device, "what planner run executes on: cpu or cuda");
  cmd->add_option("--iterations", a->iterations, "training iterations of planner run")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", a->warmup, "iterations left out of the timing summary")->check(CLI::Range(0, 1000));
  cmd->add_option("--threads", a->threads, "CPU threads per rank")->check(CLI::Range(1, 256));
  cmd->add_option("--optimizer", a->optimizer, "adam or sgd");
  cmd->add_option("--lr", a->lr, "learning rate")->check(CLI::PositiveNumber);
  cmd->add_option("--seed", a->seed, "seed of parameters and data")->check(CLI::NonNegativeNumber);
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "write a checkpoint every N iterations (0: never)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--timeout", a->timeout_s, "seconds before a stuck collective ends the run")->check(CLI::PositiveNumber);
  cmd->add_flag("--overlap-dp", a->overlap_dp, "all-reduce gradients on a second thread while the last backward runs (needs spare cores)");
  cmd->add_option("--planner-path", a->planner_path, "executable the scripts launch (default: this planner)");
  cmd->add_option("--gpus-per-node", a->gpus_per_node, "ranks per node (default: the plan's cluster, first topology level)")->check(CLI::PositiveNumber);
  return [a, self]() -> Status {
    if (a->device != "cpu" && a->device != "cuda") return Status::InvalidArgument(fmt::format("--device: unknown value '{}'; use cpu or cuda", a->device));
    if (a->optimizer != "adam" && a->optimizer != "sgd") return Status::InvalidArgument(fmt::format("--optimizer: unknown value '{}'; use adam or sgd", a->optimizer));
    Plan plan;
    PLANNER_RETURN_IF_ERROR(LoadPlan(a->plan, &plan));
    std::string model_path = ResolveModel(a->plan, plan.model_path);
    if (model_path.empty()) {
      return Status::InvalidArgument(fmt::format("{}: the plan names no model file (solved from a profile only); solve with --model to run it", a->plan));
    }
    std::string model_text;
    PLANNER_RETURN_IF_ERROR(ReadTextFile(model_path, &model_text));
    ModelSpec model;
    PLANNER_RETURN_IF_ERROR(ParseModelSpec(model_path, model_text, &model));
    if (!plan.model_digest.empty() && plan.model_digest != model.digest) {
      return Status::InvalidArgument(fmt::format("{} changed since {} was solved (digest {} vs {}); solve again", model_path, a->plan, model.digest, plan.model_digest));
    }
    CodegenOptions o;
    o.device = a->device;
    o.planner_path = a->planner_path.empty() ? self : a->planner_path;
    o.run.iterations = a->iterations;
    o.run.warmup_iterations = a->warmup;
    o.run.threads = a->threads;
    o.run.optimizer = a->optimizer;
    o.run.learning_rate = a->lr;
    o.run.seed = static_cast<uint64_t>(a->seed);
    o.run.checkpoint_every = a->checkpoint_every;
    o.run.timeout_s = a->timeout_s;
    o.run.overlap_dp = a->overlap_dp;
    o.gpus_per_node = a->gpus_per_node;
    if (o.gpus_per_node == 0) PLANNER_RETURN_IF_ERROR(PlanGpusPerNode(a->plan, plan, &o.gpus_per_node));
    LaunchPlan L;
    PLANNER_RETURN_IF_ERROR(BuildLaunchPlan(plan, model.digest, o, &L));
    std::string plan_text;
    PLANNER_RETURN_IF_ERROR(ReadTextFile(a->plan, &plan_text));
    L.plan_digest = DigestHex(plan_text);
    std::vector<std::pair<std::string, std::string>> files;
    std::vector<std::string> notes;
    PLANNER_RETURN_IF_ERROR(GenerateLaunchFiles(plan, model, L, o, &files, &notes));
    files.emplace_back("model.yaml", model_text);
    namespace fs = std::filesystem;
    PLANNER_RETURN_IF_ERROR(MakeDirectories(a->output));
    PLANNER_RETURN_IF_ERROR(MakeDirectories((fs::path(a->output) / "deepspeed").string()));
    for (const auto& [name, text] : files) {
      const bool script = name.size() > 3 && name.substr(name.size() - 3) == ".sh";
      PLANNER_RETURN_IF_ERROR(WriteFileAtomic((fs::path(a->output) / name).string(), text, script ? 0755 : 0644));
    }
    for (const auto& n : notes) LogNote(n);
    LogNote(fmt::format("wrote {}/: {} ranks ({} per node), {} programs (checked deadlock-free), {} files; run it with: bash {}/run.sh",
                        a->output, L.ranks.size(), L.gpus_per_node, L.programs.size(), files.size(), a->output));
    return Status::OK();
  };
}

}  // namespace planner
