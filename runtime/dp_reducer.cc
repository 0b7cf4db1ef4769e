#include "runtime/dp_reducer.h"

#include "common/timing.h"

namespace planner {

DataParallelReducer::DataParallelReducer(Communicator* dp, float* bucket, bool overlap, SummationClient* service)
    : dp_(dp), service_(service), bucket_(bucket), overlap_(overlap && service == nullptr) {
  if (overlap_) thread_ = std::thread([this] { Loop(); });
}

DataParallelReducer::~DataParallelReducer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

Status DataParallelReducer::AllReduce(BucketSegment s) {
  if (s.count <= 0) return Status::OK();
  if (service_ != nullptr) return service_->Reduce(bucket_ + s.offset, s.count);
  return dp_->AllReduce(bucket_ + s.offset, s.count, ReduceOp::kSum);
}

void DataParallelReducer::Enqueue(BucketSegment s) {
  std::lock_guard<std::mutex> lk(mu_);
  queue_.push_back(s);
  ++pending_;
  cv_.notify_all();
}

Status DataParallelReducer::Wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return pending_ == 0; });
  return status_;
}

double DataParallelReducer::TakeBusySeconds() {
  std::lock_guard<std::mutex> lk(mu_);
  const double b = busy_s_;
  busy_s_ = 0;
  return b;
}

void DataParallelReducer::Loop() {
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    const BucketSegment s = queue_.front();
    queue_.pop_front();
    lk.unlock();
    const double a0 = MonotonicSeconds();
    Status st = AllReduce(s);
    lk.lock();
    busy_s_ += MonotonicSeconds() - a0;
    if (!st.ok() && status_.ok()) status_ = st;
    --pending_;
    cv_.notify_all();
  }
}

}  // namespace planner
