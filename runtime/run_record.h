// The run record: what a rank measures while it trains (a trace of compute
// and communication events, its transfers, per-iteration loss, time, compute
// and communication) and the files of runs/<id>/ built from it: metrics.csv,
// trace.rank<k>.json merged into trace.json, and with --dump-gradients the
// first optimizer step's gradients (grads/<param>.bin) and the model's global
// gradient norm (grad_norm.txt). Every file goes through common/file_writer.h.
// Trace times are a rank's monotonic clock, written on rank 0's (minus the
// clock offset), so the merged trace lines up and a send pairs with its
// receive. docs/runtime.md ("The executor's parts").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/transfers.h"
#include "spec/launch_plan.h"

namespace planner {

// The first `iterations` rows of `run_dir`/metrics.csv, read strictly: the header
// "iteration,loss,iteration_seconds", then rows numbered 1, 2, ... with a finite loss and a
// finite, non-negative time. A missing file, a garbled row or too few rows is InvalidArgument /
// NotFound (exit 2) naming the file and line: a resumed run never renumbers its iterations.
Status ReadMetrics(const std::string& run_dir, int64_t iterations, std::vector<double>* loss,
                   std::vector<double>* iteration_s);

struct TraceEvent {
  std::string name;
  double start_s = 0, dur_s = 0;
  int tid = 0;  // 0: compute, 1: communication, 2: the data-parallel reducer thread
};

// A parameter's gradient as an optimizer step applies it.
struct NamedGradient {
  std::string name;
  bool tp_sharded = false;  // each TP rank holds a different part
  std::vector<float> values;
  bool expert = false;  // a routed expert's (MoE): one EP rank holds it, every rank of its EDP group a copy
};

class RunRecord {
 public:
  void Trace(std::string name, double start_s, double dur_s, int tid) {
    trace_.push_back({std::move(name), start_s, dur_s, tid});
  }
  TransferLog& transfers() { return transfers_; }
  const TransferLog& transfers() const { return transfers_; }

  void AddIteration(double loss, double iteration_s, double compute_s, double comm_s);
  int64_t iterations() const { return static_cast<int64_t>(loss_.size()); }
  const std::vector<double>& loss() const { return loss_; }
  const std::vector<double>& iteration_s() const { return iteration_s_; }
  const std::vector<double>& compute_s() const { return compute_s_; }
  const std::vector<double>& comm_s() const { return comm_s_; }

  // A resumed run: the first `iterations` rows of `run_dir`/metrics.csv (ReadMetrics; compute
  // and communication unknown: 0).
  Status LoadMetrics(const std::string& run_dir, int64_t iterations);
  // metrics.csv: iteration, loss, seconds.
  Status WriteMetrics(const std::string& run_dir) const;
  // trace.rank<rank>.json: this rank's events, Chrome trace rows on rank 0's clock.
  Status WriteRankTrace(const std::string& run_dir, int64_t rank, double clock_offset_s) const;

 private:
  std::vector<TraceEvent> trace_;
  TransferLog transfers_;
  std::vector<double> loss_, iteration_s_, compute_s_, comm_s_;
};

// Rank 0: trace.json from every rank's trace.rank<k>.json, each rank named with its stage.
Status MergeTraces(const std::string& run_dir, const LaunchPlan& launch);

// grads/<name>.bin: each gradient as float32.
Status WriteGradients(const std::string& run_dir, const std::vector<NamedGradient>& gradients);

// The model's global gradient norm from every rank's gradients: sharded parameters summed over TP
// ranks, replicated ones once, data-parallel replicas (equal after the reduce) once. Collective.
// Expert gradients count on the ranks of EDP rank 0 (every tp rank: with etp 1 they hold different experts).
Status GlobalGradientNorm(Communicator& world, int64_t replica, int64_t tp_rank, const std::vector<NamedGradient>& mine,
                          double* norm, int64_t edp_rank = 0);

}  // namespace planner
