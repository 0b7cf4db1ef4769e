// Plan -> LaunchPlan (ranks and communicator groups, Megatron's rank order
// tp fastest, then data parallel, then pipeline) and the launch artifacts:
// run.sh (mpirun), slurm.sbatch (srun), megatron.args, deepspeed/ (config and
// partition), torch_pipelining.py. Pure: returns file contents; the CLI
// writes them. docs/runtime.md (planner codegen).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "spec/launch_plan.h"
#include "spec/model_spec.h"
#include "spec/plan.h"

namespace planner {

struct CodegenOptions {
  int64_t gpus_per_node = 8;             // from the cluster's first level
  Device device = Device::kCpu;          // what `planner run` executes on
  std::string planner_path = "planner";  // executable run.sh launches
  std::string launch_dir;                // absolute launch directory slurm.sbatch runs ("": the submit directory)
  std::string slurm_mpi = "pmix";        // srun --mpi plugin of slurm.sbatch
  LaunchRun run;
  std::vector<std::string> exports;  // targets to write besides launch.yaml (ExportTargets()); empty: all
};

// The export targets, in the order codegen writes them: mpirun (run.sh), slurm (slurm.sbatch),
// megatron, deepspeed, torchtitan, torch-pipelining (the names of codegen/export_table.cc's table).
// docs/exports.md.
const std::vector<std::string>& ExportTargets();
// The folders of a launch directory that export targets own files in, relative to it: "" (the
// directory itself) and each folder of an owned path (deepspeed).
const std::vector<std::string>& ExportSubdirectories();

// Whether a launch directory's file (relative path) belongs to an export target: what a new
// codegen of that target replaces (a refused target leaves none of its old files behind).
bool ExportOwnsFile(const std::string& target, const std::string& relative_path);

// A comma-separated --export list ("all" or names of ExportTargets()) into *out; an unknown or
// repeated name is InvalidArgument naming the choices.
Status ParseExportList(const std::string& list, std::vector<std::string>* out);
// srun --mpi plugin names slurm.sbatch may use (`srun --mpi=list`: none, pmi2, pmix, pmix_vN, cray_shasta).
bool ValidSlurmMpi(const std::string& name);

// Also each rank's program (dp_solver/programs.h), proved deadlock-free: a plan whose
// programs fail the check is refused (Internal, naming the stuck ranks).
Status BuildLaunchPlan(const Plan& plan, const std::string& model_digest, const CodegenOptions& options,
                       LaunchPlan* out);

// Megatron-LM's --pipeline-model-parallel-layout of the stages, given in model order: per stage E
// (embedding), t (transformer block, dense or MoE), m (MTP module), L (loss) in layer order, stages
// joined by '|', written out in full (no '*', so the flag survives the shell's word splitting and
// globbing). Megatron places virtual stage q on pipeline rank q mod pp (its looped placement);
// megatron/core/transformer/pipeline_parallel_layer_layout.py parses it.
std::string MegatronPipelineLayout(const ModelSpec& model, const std::vector<LaunchStage>& stages);

// (relative path, contents) of every artifact, launch.yaml first. Notes
// (e.g. what an export cannot express) are appended to *notes.
Status GenerateLaunchFiles(const Plan& plan, const ModelSpec& model, const LaunchPlan& launch,
                           const CodegenOptions& options, std::vector<std::pair<std::string, std::string>>* files,
                           std::vector<std::string>* notes);

}  // namespace planner
