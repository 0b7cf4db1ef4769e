// report.md of a run: measured against predicted iteration time and bubble
// fraction, the loss, per rank compute / communication / idle / peak memory
// against the plan's, then the transfer table (runtime/transfers.h) and the
// transport. Pure: returns the text. docs/runtime.md ("The executor's parts").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/launch_layout.h"
#include "runtime/summation_service.h"
#include "spec/launch_plan.h"

namespace planner {

struct RankFigures {
  double compute_s = 0, comm_s = 0;  // medians per iteration after warm-up
  double peak_gib = 0;               // the allocator's peak on the rank's device
  // Model state the rank holds at the run's end, counted from its tensors' real element sizes: weights,
  // gradients, fp32 masters (mixed precision) and the optimizer's fp32 moments; and its parameters.
  double state_bytes = 0, params = 0, weight_bytes = 0;  // weight_bytes: the weights alone
};

// The MoE layers' all-to-alls of one rank: medians per iteration after warm-up.
struct AllToAllFigures {
  double calls = 0, seconds = 0;
};

struct ReportInputs {
  std::string model_name;
  LaunchLayout layout;
  std::vector<double> loss;  // per iteration
  int64_t warmup = 0;        // iterations left out of the medians
  double median_iteration_s = 0, bubble_fraction = 0;
  std::vector<RankFigures> ranks;
  std::vector<AllToAllFigures> a2a;  // per rank, when the launch has ep > 1
  std::string transfers_md;          // SummariseTransfers' section
  bool comm_only = false;
  double clock_error_s = 0;
  std::string transport;
  std::string precision = "fp32";  // the run's (the launch model file's `precision:`)
  double plan_bytes_per_param =
      0;  // the plan's model-state bytes per parameter (spec/model_state.h StateBytesPerParam, ZeRO-0)
  std::string
      state_note;  // the plan's 16-bit gradients or optimizer state against the runtime's fp32 ones (empty: they agree)
  std::string loss_scaling;             // fp16: the loss scaler's skipped steps and scale (empty otherwise)
  std::vector<SyncTraffic> dp_traffic;  // dp_comm ps / byteps: per job rank (servers after the workers), bytes per sync
};

std::string RunReportMarkdown(const LaunchPlan& launch, const ReportInputs& in);

}  // namespace planner
