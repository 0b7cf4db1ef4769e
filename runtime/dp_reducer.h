// The data-parallel gradient reduce of a stage's replica group, on the
// stage's flat gradient bucket. Synchronous: AllReduce(segment) returns when
// it is done. Overlapped (DDP-style, `codegen --overlap-dp`): during a
// chunk's last backward before a reduce, each layer's segment is queued as
// soon as its weight gradient is final and a second thread all-reduces the
// queue while earlier layers compute; Wait() returns when the queue is empty.
// Off by default on CPU ranks: on a machine with as many cores as ranks the
// reducer thread competes with compute (docs/performance.md).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/stage.h"
#include "runtime/summation_service.h"

namespace planner {

class DataParallelReducer {
 public:
  // `dp`: the replica group; `bucket`: the stage's gradient bucket. `overlap` starts the thread.
  // `service` (dp_comm ps / byteps): sums through the summation service instead of dp's AllReduce
  // (never overlapped). The all-reduce family is dp's AllReduce (MPI_Allreduce picks its algorithm).
  DataParallelReducer(Communicator* dp, float* bucket, bool overlap, SummationClient* service = nullptr);
  ~DataParallelReducer();  // stops and joins the thread
  DataParallelReducer(const DataParallelReducer&) = delete;
  DataParallelReducer& operator=(const DataParallelReducer&) = delete;

  bool overlapped() const { return overlap_; }
  int group_size() const { return dp_->size(); }
  // Synchronous: sums `segment` over the group in place.
  Status AllReduce(BucketSegment segment);
  // Overlapped: queues `segment` (its gradient is final).
  void Enqueue(BucketSegment segment);
  // Overlapped: waits for every queued segment; the first error of the thread.
  Status Wait();
  // Seconds the thread spent in all-reduces since the last call.
  double TakeBusySeconds();

 private:
  void Loop();

  Communicator* dp_;
  SummationClient* service_;
  float* bucket_;
  bool overlap_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<BucketSegment> queue_;
  int64_t pending_ = 0;
  bool stop_ = false;
  Status status_;
  double busy_s_ = 0;
  std::thread thread_;
};

}  // namespace planner
