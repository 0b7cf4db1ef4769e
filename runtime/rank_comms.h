// A rank's communicators: the world (host scalars: losses, times, the
// summary), the pipe that carries activations and gradients (the world, or
// NCCL on GPU ranks), its tensor- and data-parallel groups from launch.yaml,
// and its clock's offset to rank 0's. docs/runtime.md ("The executor's parts").
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/kernels/kernel.h"
#include "runtime/transfers.h"
#include "spec/launch_plan.h"

namespace planner {

struct RankComms {
  Communicator* world = nullptr;
  Communicator* pipe = nullptr;                    // the world, or `nccl`
  std::unique_ptr<Communicator> nccl, tp, dp, cp;  // cp: launch.yaml's context_parallel group (cp > 1)
  std::unique_ptr<Communicator> ep, edp;           // expert_parallel and expert_data_parallel groups (ep > 1)
  // Trace and transfer times go on rank 0's clock (the ranks of one node share theirs; other nodes' differ).
  double clock_offset_s = 0, clock_error_s = 0;
};

// GPU ranks take their local device and NCCL (bootstrapped over the world); every rank splits
// its TP and DP groups (all in the same order), starts the peer watch (from here on a rank that
// exits is a lost rank) and estimates its clock offset. Collective.
// `job`: the whole job's world when it holds summation servers beside the workers' `world`
// (the peer watch covers every process of the job); null: `world`.
Status OpenRankComms(const LaunchPlan& launch, Device device, Communicator& world, RankComms* out,
                     Communicator* job = nullptr);

// A TP group over a Communicator, for the kernels' all-reduces; each call timed into `log`
// under the iteration of the microbatch being computed, numbered in call order (the ranks of a
// TP group make the same calls in the same order).
class CommTpGroup final : public TpGroup {
 public:
  CommTpGroup(Communicator* c, std::vector<TransferLog::TpAllReduce>* log) : c_(c), log_(log) {}
  void SetIteration(int64_t it) { iteration_ = it; }
  Status AllReduceSum(float* d, int64_t n) override { return Timed(d, n, ReduceOp::kSum); }
  Status AllReduceMax(float* d, int64_t n) override { return Timed(d, n, ReduceOp::kMax); }
  // Logs another collective made inside a layer (runtime/sequence_parallel.h), numbered with the rest.
  void Log(int kind, int64_t bytes, double seconds) { log_->push_back({iteration_, seq_++, bytes, seconds, kind}); }

 private:
  Status Timed(float* d, int64_t n, ReduceOp op);
  Communicator* c_;
  std::vector<TransferLog::TpAllReduce>* log_;
  int64_t iteration_ = 0, seq_ = 0;
};

// The EP group of the MoE layers over a Communicator: AllToAllV (MOE.md's signature), each call timed into
// `log` (seconds per call, summed per iteration by the run report) when one is given.
class CommExpertGroup final : public ExpertGroup {
 public:
  explicit CommExpertGroup(Communicator* c, std::vector<double>* log = nullptr) : c_(c), log_(log) {}
  Status AllToAllV(const float* send, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                   float* recv, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs) override;

 private:
  Communicator* c_;
  std::vector<double>* log_;
};

}  // namespace planner
