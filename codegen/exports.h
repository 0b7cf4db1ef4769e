// Internal to codegen/: one writer per export target, and the table of the targets (export_table.cc).
// Each writer appends (relative path, contents) to *files, and to *notes what its target cannot take;
// a plan a target cannot run gets a refusal file (the reason) instead of the target's files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codegen/codegen.h"

namespace planner::codegen_internal {

using Files = std::vector<std::pair<std::string, std::string>>;
using Notes = std::vector<std::string>;

// What every writer of the table is given.
struct ExportInput {
  const Plan& plan;
  const ModelSpec& model;
  const LaunchPlan& launch;
  const CodegenOptions& options;
};

// One export target, a row of Exports(): the --export list (ExportTargets, ParseExportList), the files a
// target owns (ExportOwnsFile: what a new codegen of it replaces) and the dispatch (GenerateLaunchFiles) all
// read it. Adding a target is adding a row (HACKING.md, "How to add an export").
struct ExportTarget {
  const char* name;                // its --export name
  std::vector<std::string> owned;  // launch-directory paths it owns: each a prefix of a relative path
  void (*write)(const ExportInput& in, Files* files, Notes* notes);  // appends its files or its refusal
  // The built-in engines (configs/engines) whose costs describe how the target runs the plan; empty: the
  // planner's own runtime (mpirun, Slurm). A plan costed on another built-in engine gets EngineNote's note.
  std::vector<std::string> engines;
};
// The table, in writing order (export_table.cc).
const std::vector<ExportTarget>& Exports();

// template.cc
// A template of codegen/templates/ (embedded at build time: codegen/embedded_templates.h) filled in: its
// lines between "# ---- planner template begins ----" and "# ---- planner template ends ----" (from the
// start, to the end, where a marker is missing), each PLAN_<name> replaced by values' entry for name; a
// line holding only indentation and one placeholder stands for whole lines: the value (each line ending
// in a newline; "" for none) replaces it, indentation included. A placeholder without a value, or a value
// no placeholder uses, is a bug in the writer: reported on stderr, then abort().
using TemplateValues = std::vector<std::pair<std::string, std::string>>;  // (placeholder name without PLAN_, value)
std::string FillTemplate(std::string_view text, const TemplateValues& values);

// codegen's note when the plan was costed on a built-in engine other than the ones that run the targets written
// (`written`: their rows of Exports()): the prediction is not theirs; each target with the figure `solve --engine
// all` stored in the plan (predicted.engines) for its first engine, or the command that prices it. "" when every
// target written runs on the plan's engine, or when the plan's engine is no built-in (a user's file, plan.engine_file,
// even one named like a built-in: nothing says which target it describes) or the plan has no kernel-level costs.
std::string EngineNote(const Plan& plan, const std::vector<const ExportTarget*>& written);

// The note of a target that keeps fp32 master weights and Adam moments (12 B per parameter) where the plan keeps
// less (plan.optimizer_state), "" where the plan keeps fp32 (export_table.cc).
std::string Fp32OptimizerNote(const Plan& plan, const std::string& target);
// The note a target that keeps bf16 weights writes for a plan with FP8 parameters (plan.fp8_param_gather), "" for
// one without (export_table.cc).
std::string Bf16WeightsNote(const Plan& plan, const std::string& target);

inline std::string Join(const std::vector<int64_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// scripts.cc
std::string ServersNote(const LaunchPlan& L);
// slurm.sbatch's job and step shape: every rank (workers, then summation servers) is one task,
// task i on node i / gpus_per_node of the allocation, as launch.yaml places it.
struct SlurmLayout {
  int64_t tasks = 0;                // srun --ntasks and #SBATCH --ntasks
  int64_t nodes = 0;                // #SBATCH --nodes
  int64_t tasks_per_node = 0;       // #SBATCH --ntasks-per-node: the most tasks a node runs
  int64_t cpus_per_task = 1;        // #SBATCH and srun --cpus-per-task
  int64_t gpus_per_node = 0;        // #SBATCH --gpus-per-node (0: CPU ranks)
  std::vector<int64_t> node_tasks;  // tasks on node k, in node order (srun's host list)
  std::string mpi;                  // srun --mpi plugin
};
SlurmLayout PlanSlurmLayout(const LaunchPlan& L, const CodegenOptions& o);
// The first rule of Slurm's (and launch.yaml's) the layout breaks, "" when none (docs/exports.md).
std::string CheckSlurmLayout(const LaunchPlan& L, const SlurmLayout& s);

void AddRunScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files);
void AddSlurmScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files,
                    std::vector<std::string>* notes);

// megatron.cc
const Layer* MlaLayer(const ModelSpec& model);
// What Megatron-LM's rules are checked against: the launch's world size (worker ranks), the plan's
// dp, its chunks per pipeline rank and its decoder blocks per chunk (model order).
struct MegatronCheck {
  int64_t world = 1, dp = 1, interleave = 1;
  std::vector<int64_t> blocks = {};
};
// The first of Megatron-LM's rules (validate_args, TransformerConfig, the pipeline layout's
// validate_layer_layout, the microbatch calculator) that the megatron.args text `args` breaks for
// the plan `c`, or "" (docs/exports.md, "Megatron-LM", lists them).
std::string MegatronRuleViolation(const std::string& args, const MegatronCheck& c);
void AddMegatronArgs(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files,
                     std::vector<std::string>* notes);
// What the megatron export decides, shared with the Megatron-Bridge export (megatron_bridge.cc), which translates
// megatron.args: why Megatron cannot express or run the plan ("" when it can), the flags, and what the rules check.
std::string MegatronInexpressible(const Plan& plan, const ModelSpec& model, const LaunchPlan& L);
std::string MegatronRefusal(const Plan& plan, const ModelSpec& model, const LaunchPlan& L);
std::string MegatronFlags(const Plan& plan, const ModelSpec& model, const LaunchPlan& L,
                          std::vector<std::string>* notes);
MegatronCheck MegatronCheckOf(const ModelSpec& model, const LaunchPlan& L);
// How Megatron-Core runs a schedule it has no flag for ("" for the ones it has).
std::string MegatronScheduleNote(const LaunchPlan& L);

// megatron_bridge.cc
void AddMegatronBridge(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files,
                       std::vector<std::string>* notes);

// deepspeed.cc
// What DeepSpeed is given: the topology, the batch settings, ZeRO, precision, the stage boundaries.
struct DeepSpeedCheck {
  int64_t world = 1, pp = 1, tp = 1, dp = 1;
  int64_t train_batch = 0, micro_batch = 1, grad_accum = 1;  // train_batch 0: not written (AutoTP)
  int64_t zero_stage = 0, autotp = 0, num_layers = 0;
  bool fp16 = false, bf16 = false;
  std::string
      grad_accum_dtype;  // data_types.grad_accum_dtype ("": not written, DeepSpeed's default: the model's dtype)
  std::vector<int64_t> parts = {};
};
// The first of DeepSpeed's rules (DeepSpeedConfig's batch assertion, PipeModelDataParallelTopology's
// world, PipelineEngine's ZeRO limit, PipelineModule's parts) that `c` breaks, or "".
std::string DeepSpeedRuleViolation(const DeepSpeedCheck& c);
std::vector<int64_t> DeepSpeedParts(const ModelSpec& model, const LaunchPlan& L);
void AddDeepSpeedFiles(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files,
                       std::vector<std::string>* notes);

// torch_pipelining.cc
// The torch.distributed.pipelining class the plan runs with (Schedule1F1B, ScheduleGPipe, ...).
std::string TorchScheduleClass(const LaunchPlan& L);
// The first torch.distributed.pipelining rule the plan breaks with schedule class `cls` ("" when none).
std::string TorchPipeliningRuleViolation(const ModelSpec& model, const LaunchPlan& L, const std::string& cls);
void AddTorchPipelining(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files,
                        std::vector<std::string>* notes);

// torchtitan.cc
// What torchtitan is given: the parallel degrees, the batch, the pipeline's model parts (FQNs).
struct TorchtitanCheck {
  int64_t world = 1, dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, pp = 1;
  int64_t local_batch = 1, global_batch = 1, microbatch = 1;
  bool single_stage = true, v_style = false;
  int64_t heads = 1, kv_heads = 1, seq = 0;
  std::vector<std::vector<std::string>> parts = {};
};
// The first of torchtitan's rules (ParallelDims, pipeline_parallel.py's stage and batch checks, the
// trainer's batch, TP and CP divisibility) that `c` breaks, or "".
std::string TorchtitanRuleViolation(const TorchtitanCheck& c);
void AddTorchtitan(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files,
                   std::vector<std::string>* notes);

}  // namespace planner::codegen_internal
