// planner solve's flags: SolveArgs (what CLI11 reads), the one place their values are checked, and
// their translation into the search's and PipeDream's options. ValidateSolveArgs checks what needs
// no file (syntax, ranges, names, flags against each other) before any file is read;
// ApplyModelOverrides and BuildSearchOptions check the flags against the model file as they apply
// them. Each error is InvalidArgument naming the flag and the fix. Checked elsewhere: the files
// read, against each other and the cluster's size and peaks (cmd_solve.cc's LoadSolveInputs: --gpus
// beyond the cluster, --precision fp8 without an FP8 peak), and the search's options against the
// model, profile and cluster it is given (dp_solver/search.h, for every caller of the library).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "dp_solver/pipedream_dp.h"
#include "dp_solver/search.h"
#include "spec/model_spec.h"
#include "spec/plan.h"
#include "spec/profile.h"

namespace planner {

// The flags as CLI11 reads them (RegisterSolve in cmd_solve.cc); `gpus` is the one size being solved.
struct SolveArgs {
  int64_t gpus = 0;       // the size being solved (one of gpu_list)
  std::string gpus_text;  // --gpus as given: "1024" or "1024,2048,4096"
  std::vector<int64_t> gpu_list;
  std::string model, profile, cluster, mode_text = "auto", output, comm_profile, html;  // mode_text: --mode as given
  PlanMode mode = PlanMode::kAuto;  // --mode, parsed by ValidateSolveArgs
  bool json = false;
  int top = 5;
  int threads = 1;  // --threads: the search's worker threads (same plan at every count)
  int64_t global_batch = 0;
  std::vector<int64_t> tp, pp, microbatch, interleave, vp, cp, zero, ep, etp;
  double moe_imbalance = 1.0;
  std::string moe_overlap = "off";
  std::string moe_dispatcher = "alltoall";  // --moe-dispatcher alltoall|flex
  // Kernel-level costs (docs/cost_model.md section 2, "Engines"): --engine NAME|FILE|all, --kernels
  // NAME|FILE|none (empty: the cluster's GPU's built-in table), --tp-comm-overlap on|off.
  std::string engine, kernels, tp_comm_overlap = "off";  // engine empty: megatron-core, not named
  std::string fp8_recipe;                                // --fp8-recipe: replaces the engines' fp8_recipe ("": theirs)
  std::string cp_comm_type = "p2p";                      // --cp-comm-type p2p|allgather
  std::string replication, sp, precision, train_tokens_text;
  std::string pipeline_layout;
  std::vector<int64_t>
      dp_replicate;  // --dp-replicate (HSDP); empty: the search's defaults  // Megatron's --pipeline-model-parallel-layout (spec/pipeline_layout.h); empty: none
  std::string overlap_grad_reduce = "on", overlap_param_gather = "on";
  std::string grad_dtype;
  std::string optimizer_state;    // --optimizer-state fp32|fp32-remainders|bf16-moments|bf16|bf16-master (empty: fp32)
  bool fp8_param_gather = false;  // --fp8-param-gather: FP8 weights alone (Megatron --fp8-param-gather)
  std::vector<std::string> calibrations;  // --calibration FILE...: planner calibrate's files (the matching one applies)
  int64_t seq = 0;
  double train_tokens = 0;
  std::vector<std::string> schedules, recompute, recompute_modules, dp_comm;
  int64_t ps_servers = -1;
  std::string ps_placement;
  bool dp_overlap = false, p2p_overlap = false, no_scatter_gather = false;
  double bytes_per_param = 0;
  // PipeDream mode.
  std::vector<int64_t> pd_machines;
  std::vector<double> pd_bandwidths;
  double memory_bytes = 0;
  bool straight = false, fewer = false, memory_constraint = false;
  bool vertical_sync = false;
  bool force = false;  // -o may replace a file the planner did not write (planner/output_guard.h)
  double acr = 1;
};

// The flags' checks that need no file, in the order they are reported; fills gpu_list (from
// --gpus) and train_tokens (from --train-tokens). `memory_bytes_given`: --memory-bytes was passed.
Status ValidateSolveArgs(SolveArgs* a, bool memory_bytes_given);

// --precision and --seq: a gpt: template is rebuilt at the new dtype / sequence length (name, path,
// digest and global batch kept, a note in *notes); an explicit layer list is refused.
Status ApplyModelOverrides(const SolveArgs& a, ModelSpec* model, std::vector<std::string>* notes);

// The auto search's options for a.gpus GPUs, the flags checked against `model` (read when --model
// was given) as they are applied; `profile` gives the global batch when there is no model.
Status BuildSearchOptions(const SolveArgs& a, const ModelSpec& model, const Profile& profile, SearchOptions* o);

// PipeDream's options: --pd-machines with its --pd-bandwidths (machines empty: the cluster's
// levels), the optimizer's flags and --memory-bytes (16e9 when not given).
PipeDreamOptions PipeDreamOptionsOf(const SolveArgs& a);

// A forced --cp / --ep / --zero / --sp value the plan does not carry is said in a note, never hidden.
void NoteUnappliedFlags(const SolveArgs& a, Plan* plan);

}  // namespace planner
