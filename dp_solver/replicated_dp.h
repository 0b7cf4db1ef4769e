// Per-stage replication in the joint search (PipeDream's "2-1-1" family),
// flat and topology-aware: a min-max dynamic program over (layers placed,
// workers used) that picks contiguous stages, a replica count per stage, and
// places stages on consecutive workers, so each stage's gradient all-reduce
// and each boundary's send are costed on the topology levels its ranks really
// span. A worker is one tensor-parallel group of t GPUs. The objective is
// PipeDream's: the steady-state seconds per microbatch of the slowest stage
// (its compute plus weight all-reduce over its replicas, divided by them) or
// of the slowest boundary. docs/cost_model.md section 8. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "dp_solver/cost_model.h"
#include "spec/cluster_spec.h"
#include "spec/dp_comm.h"

namespace planner {

struct ReplicatedOptions {
  int64_t workers = 1;                // tensor-parallel groups available (all are used)
  int64_t tp = 1;                     // GPUs per worker (consecutive ranks)
  int64_t worker_unit = 1;            // replicas and offsets move in units of this many workers
  double grad_bytes_per_param = 2;    // all-reduced gradient bytes per parameter
  double state_bytes_per_param = 18;  // weights + gradients + optimizer state
  double weight_bytes_per_param = 2;  // one stashed weight version
  // The optimizer step's fp32 copy of a 16-bit gradient buffer (StateBytes::step_grad_copy): PipeDream
  // steps after every microbatch while other microbatches' activations are alive, so it adds to the peak.
  double step_copy_bytes_per_param = 0;
  double usable_bytes = 0;                // per GPU; 0: no memory constraint
  bool p2p_overlap = true;                // PipeDream: boundaries are their own pipeline resource
  bool scatter_gather = true;             // boundary bytes / tp when tp > 1
  double optimizer_bytes_per_param = 30;  // HBM traffic of one optimizer step (after every microbatch)
  double trainable = 1;                   // share of the parameters that train (LoRA): the ones held in versions
  std::vector<int64_t> forced;  // non-empty: exactly these replicas per stage (workers); the DP picks boundaries only
  bool vertical_sync = false;   // weight versions of vertical sync (spec/weight_versions.h), not of stashing alone
  // How a stage's replicas synchronise gradients (dp_solver/dp_comm_cost.h); PipeDream's all-reduce is hier.
  DpComm dp_comm = DpComm::kHierAllReduce;
  int64_t servers = 0;        // CPU machines of ps / byteps
  bool ps_colocated = false;  // ps with a server on every GPU machine (k = 0 for ps; DpServersFor)
};

struct ReplicatedStage {
  int64_t first = 0, end = 0;  // layers [first, end)
  int64_t offset = 0;          // first worker
  int64_t replicas = 1;
  double compute_s = 0;         // forward + backward of one microbatch on one replica
  double allreduce_s = 0;       // weight-gradient all-reduce over the replicas (per microbatch)
  double send_s = 0;            // boundary to the next stage: activation + gradient, one microbatch
  double seconds = 0;           // steady-state seconds per microbatch charged to the stage
  int64_t in_flight = 1;        // microbatches held by one replica
  int64_t weight_versions = 1;  // weight versions it holds: in_flight (stashing), more with vertical sync
  double peak_memory_bytes = 0;
};

struct ReplicatedResult {
  double bottleneck_s = 0;  // the objective: max over stages and boundaries
  std::vector<ReplicatedStage> stages;
};

// The cost of one stage [a, e) on `replicas` workers starting at worker
// `offset` (the in-flight count uses the workers from `offset` to the end);
// offset and replicas must be multiples of options.worker_unit.
// Cost() returns false when the stage does not fit in memory. The all-reduce
// and send times of every (offset, replicas) are precomputed (affine in
// bytes). Shared by the DP and its brute-force test.
class ReplicatedCoster {
 public:
  ReplicatedCoster(const CostTable& table, const ClusterSpec& cluster, const ReplicatedOptions& options);
  bool Cost(int64_t a, int64_t e, int64_t offset, int64_t replicas, ReplicatedStage* out) const;

 private:
  void PrecomputeCommunication(const ClusterSpec& cluster);  // ar_* and p2p_* per (offset, replicas)
  void BuildMaxOutTable();                                   // max_out_
  double MaxOutBytes(int64_t a, int64_t e) const;            // layers [a, e), e > a
  size_t Index(int64_t offset, int64_t r) const {
    return static_cast<size_t>((offset / unit_) * (units_ + 1) + r / unit_);
  }
  const CostTable& table_;
  ReplicatedOptions o_;
  std::vector<double> ar_alpha_, ar_beta_, p2p_alpha_, p2p_beta_;
  std::vector<std::vector<double>> max_out_;
  double hbm_ = 0;
  int64_t unit_ = 1, units_ = 1;
};

// Infeasible when no split fits in memory.
Status SolveReplicated(const CostTable& table, const ClusterSpec& cluster, const ReplicatedOptions& o,
                       ReplicatedResult* out);

}  // namespace planner
