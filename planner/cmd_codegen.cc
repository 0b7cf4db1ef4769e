// planner codegen PLAN -o DIR: launch.yaml, run.sh, slurm.sbatch, megatron.args, deepspeed/, torch_pipelining.py
#include <algorithm>
#include <filesystem>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/codegen.h"
#include "codegen/output_dir.h"
#include "common/digest.h"
#include "common/log.h"
#include "planner/commands.h"
#include "spec/cluster_spec.h"
#include "spec/input_limits.h"
#include "spec/yaml_reader.h"

namespace planner {

namespace {

struct CodegenArgs {
  std::string plan, output = "launch", device = "cpu", optimizer = "adam", planner_path, exports = "all",
                    slurm_mpi = "pmix";
  int64_t iterations = 20, warmup = 2, threads = 1, gpus_per_node = 0, checkpoint_every = 0, seed = 1;
  double lr = 1e-3, timeout_s = 60;
  bool overlap_dp = false, force = false;
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
// The sequence length and precision the plan was solved with (`solve --seq / --precision`,
// plan.yaml inputs.seq / inputs.dtype) where they differ from the model file's: the gpt:
// template is rebuilt with them and the launch directory's model.yaml (what `planner run`
// reads) is the file with its `seq:` and `precision:` / `dtype:` values replaced, checked to read
// back as the rebuilt model, so megatron.args (--seq-length, --fp8-format, ...) and the run are
// the plan's. A layer list cannot take them (solve refuses that too).
Status ApplyPlanOverrides(const std::string& plan_path, const Plan& plan, ModelSpec* model, std::string* model_text) {
  const DType dtype = plan.dtype.value_or(model->dtype);
  const bool seq_differs = model->is_gpt && plan.seq > 0 && plan.seq != model->gpt.seq;
  if (!seq_differs && dtype == model->dtype) return Status::OK();
  if (!model->is_gpt) {
    return Status::InvalidArgument(fmt::format(
        "{}: field 'inputs.dtype': {} but {} is an explicit layer list of dtype {}; set its dtype: and solve again",
        plan_path, DTypeName(dtype), model->path, DTypeName(model->dtype)));
  }
  std::string text = *model_text;
  // Replaces the value (group 2) of the first match of `re` with `value`.
  auto replace_first = [&text](const std::regex& re, const std::string& value) {
    std::smatch mt;
    if (!std::regex_search(text, mt, re)) return false;
    text = text.substr(0, static_cast<size_t>(mt.position(2))) + value +
           text.substr(static_cast<size_t>(mt.position(2) + mt.length(2)));
    return true;
  };
  if (seq_differs) replace_first(std::regex(R"((\bseq:[ \t]*)([0-9]+))"), std::to_string(plan.seq));
  if (dtype != model->dtype &&
      !replace_first(std::regex(R"(((?:^|\n)(?:dtype|precision):[ \t]*)([A-Za-z0-9]+))"), DTypeName(dtype))) {
    text = std::string("precision: ") + DTypeName(dtype) + "\n" + text;
  }
  ModelSpec m;
  Status st = ParseModelSpec(model->path, text, &m);
  if (!st.ok() || !m.is_gpt || m.gpt.seq != (seq_differs ? plan.seq : model->gpt.seq) || m.dtype != dtype ||
      m.layers.size() != model->layers.size()) {
    return Status::InvalidArgument(
        fmt::format("{}: solved with seq {} and precision {}, but {} could not be rewritten to them{}; edit its seq: "
                    "and precision: and solve again",
                    plan_path, seq_differs ? plan.seq : model->gpt.seq, DTypeName(dtype), model->path,
                    st.ok() ? "" : " (" + st.message() + ")"));
  }
  LogNote(
      fmt::format("codegen: {} with the plan's seq {} and precision {} (the file has {} and {}); the launch "
                  "directory's model.yaml has them",
                  model->path, m.gpt.seq, DTypeName(dtype), model->gpt.seq, DTypeName(model->dtype)));
  *model = std::move(m);
  *model_text = std::move(text);
  return Status::OK();
}

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
  LogNote(fmt::format("8 ranks per node: the plan's cluster file '{}' is not here; choose with --gpus-per-node",
                      plan.cluster_path));
  return Status::OK();
}

// The programs list every (stage, microbatch) of an iteration, and PipeDream's every one of the whole
// run: bounded (docs/formats.md, "Limits") so that a huge batch or --iterations cannot make codegen
// run for minutes and write gigabytes. The factors are bounded where the plan is read.
Status CheckProgramSize(const std::string& plan_path, const Plan& plan, int64_t iterations) {
  const bool async = plan.schedule == Schedule::kPipeDream;
  bool replicated = async;
  for (const auto& s : plan.stages) replicated = replicated || s.replicas != plan.dp;
  const int64_t microbatches = replicated ? plan.global_batch / plan.microbatch_size : plan.num_microbatches;
  int64_t slots = 0;
  if (CheckedProduct({microbatches, static_cast<int64_t>(plan.stages.size()), async ? iterations : 1}, &slots) &&
      slots <= kMaxProgramSlots) {
    return Status::OK();
  }
  return Status::InvalidArgument(fmt::format(
      "{}: {} microbatches x {} stages{} is more than the {} (stage, microbatch) actions a launch directory's programs "
      "may list; lower the batch{}",
      plan_path, microbatches, plan.stages.size(),
      async ? fmt::format(" x {} iterations (the pipedream program covers the run)", iterations) : "", kMaxProgramSlots,
      async ? " or --iterations" : " or raise microbatch_size"));
}

}  // namespace

Runner RegisterCodegen(CLI::App& app, const std::string& self) {
  auto* cmd = app.add_subcommand(
      "codegen", "turn a plan into a launch directory (ranks, scripts, Megatron/DeepSpeed/torch settings)");
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
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "write a checkpoint every N iterations (0: never)")
      ->check(CLI::Range(int64_t{0}, kMaxIterations));
  cmd->add_option("--timeout", a->timeout_s, "seconds before a stuck collective ends the run (at most a week)")
      ->check(CLI::PositiveNumber & CLI::Range(0.0, kMaxTimeoutSeconds));
  cmd->add_flag("--overlap-dp", a->overlap_dp,
                "all-reduce gradients on a second thread while the last backward runs (needs spare cores)");
  cmd->add_option("--planner-path", a->planner_path, "executable the scripts launch (default: this planner)");
  cmd->add_option("--export", a->exports,
                  fmt::format("targets written besides launch.yaml, comma-separated: {} (default: all)",
                              fmt::join(ExportTargets(), ", ")));
  cmd->add_option("--slurm-mpi", a->slurm_mpi,
                  "srun's MPI plugin in slurm.sbatch: pmix (default), pmix_vN, pmi2, none, cray_shasta");
  cmd->add_flag(
      "--force", a->force,
      "overwrite files in the directory that codegen did not write (or that changed since); see docs/hardening.md");
  cmd->add_option("--gpus-per-node", a->gpus_per_node,
                  "ranks per node (default: the plan's cluster, first topology level)")
      ->check(CLI::PositiveNumber);
  return [a, self]() -> Status {
    Device device;
    if (!ParseDevice(a->device, &device))
      return Status::InvalidArgument(fmt::format("--device: unknown value '{}'; use cpu or cuda", a->device));
    if (!ValidSlurmMpi(a->slurm_mpi)) {
      return Status::InvalidArgument(
          fmt::format("--slurm-mpi: unknown value '{}'; use pmix, pmix_vN, pmi2, none or cray_shasta (srun --mpi=list)",
                      a->slurm_mpi));
    }
    if (a->optimizer != "adam" && a->optimizer != "sgd")
      return Status::InvalidArgument(fmt::format("--optimizer: unknown value '{}'; use adam or sgd", a->optimizer));
    CodegenOptions o;
    PLANNER_RETURN_IF_ERROR(ParseExportList(a->exports, &o.exports));
    Plan plan;
    PLANNER_RETURN_IF_ERROR(LoadPlan(a->plan, &plan));
    std::string model_path = ResolveModel(a->plan, plan.model_path);
    if (model_path.empty()) {
      return Status::InvalidArgument(fmt::format(
          "{}: the plan names no model file (solved from a profile only); solve with --model to run it", a->plan));
    }
    std::string model_text;
    PLANNER_RETURN_IF_ERROR(ReadTextFile(model_path, &model_text));
    ModelSpec model;
    PLANNER_RETURN_IF_ERROR(ParseModelSpec(model_path, model_text, &model));
    if (!plan.model_digest.empty() && plan.model_digest != model.digest) {
      return Status::InvalidArgument(fmt::format("{} changed since {} was solved (digest {} vs {}); solve again",
                                                 model_path, a->plan, model.digest, plan.model_digest));
    }
    // LoRA: only Megatron-Bridge's export trains adapters; every other target (Megatron-LM's pretrain_gpt.py,
    // torchtitan, DeepSpeed, torch pipelining, planner run) trains every weight, which would be another run.
    if (model.is_gpt && model.gpt.lora.rank > 0 && o.exports != std::vector<std::string>{"megatron-bridge"})
      return Status::NotSupported(fmt::format(
          "{}:{}: field 'gpt.lora': the plan is LoRA fine-tuning (rank {}), which only the megatron-bridge export "
          "runs (Megatron-LM's pretrain_gpt.py, torchtitan, DeepSpeed, torch pipelining and planner run train every "
          "weight); write it with --export megatron-bridge, or remove gpt.lora and solve again",
          model_path, model.gpt.lora.line, model.gpt.lora.rank));
    PLANNER_RETURN_IF_ERROR(ApplyPlanOverrides(a->plan, plan, &model, &model_text));
    // The stages against the model they index (the plan reader checked them against each other).
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const auto& s : plan.stages) ranges.emplace_back(s.first_layer, s.last_layer);
    PLANNER_RETURN_IF_ERROR(CheckLayerCover(a->plan, ranges, static_cast<int64_t>(model.layers.size()), model_path));
    PLANNER_RETURN_IF_ERROR(CheckProgramSize(a->plan, plan, a->iterations));
    o.device = device;
    o.planner_path = a->planner_path.empty() ? self : a->planner_path;
    o.launch_dir = std::filesystem::absolute(a->output).lexically_normal().string();
    if (o.launch_dir.size() > 1 && o.launch_dir.back() == '/') o.launch_dir.pop_back();
    o.slurm_mpi = a->slurm_mpi;
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
    PLANNER_RETURN_IF_ERROR(WriteOwnedFiles(a->output, files, o.exports, a->force, &notes));
    for (const auto& n : notes) LogNote(n);
    const bool run_sh = std::any_of(files.begin(), files.end(), [](const auto& f) { return f.first == "run.sh"; });
    LogNote(fmt::format("wrote {}/: {} ranks ({} per node), {} programs (checked deadlock-free), {} files{}", a->output,
                        L.ranks.size(), L.gpus_per_node, L.programs.size(), files.size(),
                        run_sh ? fmt::format("; run it with: bash {}/run.sh", a->output) : std::string()));
    return Status::OK();
  };
}

}  // namespace planner
