// The runtime: every rank builds its stage from launch.yaml with
// runtime/kernels and runs its program for real: forward and backward
// microbatches in the schedule's order, activations and gradients to its
// pipeline neighbours, the data-parallel gradient all-reduce of its replica
// group, the optimizer step. Training data is synthetic and deterministic (a
// fixed teacher, runtime/teacher.h), identical for any partition of the
// model, so a synchronous plan's gradients equal one process's. Writes
// runs/<id>/ (metrics, per-rank trace, report against the prediction).
// RunLaunch puts the parts together: runtime/stage.h (layers and weights),
// interpreter.h (the program), dp_reducer.h, weight_stash.h, checkpoint.h,
// run_record.h and run_report.h. docs/runtime.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/run_record.h"
#include "runtime/summation_service.h"
#include "runtime/teacher.h"
#include "runtime/weight_stash.h"
#include "spec/launch_plan.h"
#include "spec/model_spec.h"
#include "spec/program.h"

namespace planner {

struct RunOptions {
  std::string run_dir;            // where this run writes (created by rank 0)
  int64_t iterations = 0;         // 0: the launch plan's
  bool dump_gradients = false;    // the first optimizer step's gradients: grads/<layer>.<param>.bin, grad_norm.txt
  bool keep_gradients = false;    // the same in RunSummary (tests)
  int64_t checkpoint_every = -1;  // -1: the launch plan's; 0: never
  std::string resume_from;        // a run directory whose ckpt/ to continue from
  double initial_loss_scale = 0;  // fp16: the loss scaler's first scale; 0: LossScaler's default
  bool quiet = false;
  // Communication only: the schedule's transfers and all-reduces with their real sizes and
  // order, every layer replaced by an output of zeros (no compute, no optimizer, no loss), to
  // measure the runtime's transfer path without the compute that contends with it.
  bool comm_only = false;
  // Tests: rank `rank`'s program (spec/program.h), covering `iterations` iterations (PipeDream's;
  // one for the synchronous schedules), instead of the one the launch's schedule gives.
  std::function<Status(const LaunchPlan& launch, int64_t rank, int64_t iterations, std::vector<Action>* out)> program;
};

struct RunSummary {
  std::vector<double> loss;             // per iteration (mean over the global batch)
  std::vector<double> iteration_s;      // per iteration, max over ranks
  double median_iteration_s = 0;        // after warm-up
  double measured_bubble_fraction = 0;  // 1 - sum(compute) / (ranks x iteration), medians
  // With dump_gradients or keep_gradients, from a run that starts at iteration 0: this rank's
  // gradients as the run's first optimizer step applies them (after the data-parallel reduce;
  // kept only with keep_gradients), and the model's global gradient norm (every rank).
  std::vector<NamedGradient> gradients;
  double gradient_norm = 0;
  StashCounts stash;        // PipeDream: summed over ranks
  VersionSummary versions;  // PipeDream: the stages' weight versions per minibatch (vertical_sync.txt)
  std::vector<VersionRecord> version_records;  // PipeDream: this rank's, one per (microbatch, stage) it ran
  SyncTraffic dp_traffic;  // dp_comm ps / byteps: this rank's data bytes in the gradient syncs (servers too)
  bool server = false;     // this rank was a summation server (no stage, no losses)
};

// The run's precision is the launch directory's model file's (`precision:`; codegen writes the plan's
// there, so the plan and its run agree). Refused here, before any communication: a 16-bit precision
// with weight stashing (PipeDream, vertical sync), NotSupported naming the fix. fp8 runs everywhere:
// bf16 storage, FP8 GEMMs (cuBLASLt on CUDA, emulated e4m3 quantisation on CPU ranks).
// docs/runtime.md, "Running in the plan's precision".
Status CheckRunPrecision(const LaunchPlan& launch, const ModelSpec& model);

// Runs on `world` (its size must equal the plan's ranks plus its summation servers; a server
// rank serves the workers' gradient syncs until they are done: runtime/summation_service.h).
Status RunLaunch(const LaunchPlan& launch, const ModelSpec& model, Communicator& world, const RunOptions& options,
                 RunSummary* out);

// The same training in one process: the whole model as one stage, the global
// batch as consecutive microbatches (the reference of the gradient tests).
LaunchPlan SingleProcessPlan(const LaunchPlan& launch, const ModelSpec& model);

}  // namespace planner
