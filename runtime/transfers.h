// Measured transfers of a run against the plan's predictions: every
// pipeline message (paired send and receive, by tag) and every data-parallel
// all-reduce, gathered on rank 0 on one clock (each rank's offset to rank 0's
// monotonic clock is estimated at start), summarised in the run's report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "spec/launch_plan.h"

namespace planner {

// Offset of this rank's monotonic clock to rank 0's, in seconds (0 on rank 0):
// Cristian's method over `rounds` ping-pongs with rank 0, keeping the one of
// least round trip; its error is at most half that round trip. *error_s is
// the worst such bound over all ranks, on every rank. Collective.
Status ClockOffset(Communicator& world, int rounds, double* offset_s, double* error_s);

struct TransferLog {
  // Pipeline messages: the sender logs the post, the receiver the receive.
  struct Send {
    int64_t tag = 0, iteration = 0, stage = 0, bytes = 0;  // stage: the sender's virtual stage
    int dir = 0;                                           // 0: activation (to stage + 1), 1: gradient (to stage - 1)
    int64_t peer = 0;                                      // receiving world rank
    double post_s = 0;
  };
  struct Recv {
    int64_t tag = 0, peer = 0;  // peer: sending world rank
    double start_s = 0, end_s = 0;
  };
  // Data-parallel all-reduce of one iteration on this rank (not overlapped with backward).
  struct AllReduce {
    int64_t iteration = 0, bytes = 0;
    double start_s = 0, dur_s = 0;
  };
  // A collective inside a layer: the seq-th of its iteration on this rank (every rank of a TP or
  // CP group makes the same calls in the same order, so (iteration, seq) pairs them). Kinds: the
  // TP all-reduce, sequence parallelism's all-gather and reduce-scatter along the sequence (over
  // the TP group; bytes: the gathered tensor), context parallelism's ring shift (one send and one
  // receive of K, V and in backward dK, dV; bytes: one message) and its loss all-reduce.
  enum Kind { kTpAllReduce = 0, kSpAllGather, kSpReduceScatter, kCpRingShift, kCpAllReduce, kKinds };
  struct TpAllReduce {
    int64_t iteration = 0, seq = 0, bytes = 0;
    double dur_s = 0;
    int kind = kTpAllReduce;
  };
  std::vector<Send> sends;
  std::vector<Recv> recvs;
  std::vector<AllReduce> allreduces;
  std::vector<TpAllReduce> tp_allreduces;
};

// Gathers every rank's log (times already on rank 0's clock) and, on rank 0,
// writes the markdown section of the report (empty elsewhere): per message
// kind the median transfer time (the receive's end minus the later of the
// send's post and the receive's post) against the plan's predicted p2p time,
// and per stage the data-parallel all-reduce (per iteration the fastest rank
// of each replica group: the last to arrive waits for nobody) against the
// plan's, and per stage, kind and size the collectives inside layers (per call
// the fastest rank of the TP or CP group; measured only: the plan predicts their
// sum per layer, not each call). Iterations before `first_iteration` are left out.
Status SummariseTransfers(Communicator& world, const LaunchPlan& plan, const TransferLog& mine, int64_t first_iteration,
                          std::string* markdown);

}  // namespace planner
