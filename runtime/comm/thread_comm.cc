// In-process backend: ranks are threads sharing a World; collectives meet
// at generation-counted barriers (two per collective: post, then done
// reading). A rank that fails marks the world so the others stop waiting.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "runtime/comm/communicator.h"

namespace planner {

namespace {

struct World {
  explicit World(int n)
      : size(n),
        in(static_cast<size_t>(n)),
        ints(static_cast<size_t>(2 * n)),
        counts(static_cast<size_t>(n)),
        displs(static_cast<size_t>(n)) {}
  int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  std::string failed;  // non-empty: a rank gave up
  std::vector<const float*> in;
  std::vector<int> ints;
  std::vector<const std::vector<int64_t>*> counts, displs;  // all-to-all: each rank's send counts and displacements
  std::map<std::pair<int, int>, std::deque<std::vector<float>>> box;
  std::map<std::tuple<int, int, int64_t>, std::deque<std::vector<float>>> tagged;
  std::map<std::pair<int64_t, int>, std::shared_ptr<World>> children;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(std::shared_ptr<World> w, int rank, double timeout) : w_(std::move(w)), rank_(rank) {
    timeout_s_ = timeout;
  }
  int rank() const override { return rank_; }
  int size() const override { return w_->size; }
  std::string backend() const override { return "threads"; }

  Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    PLANNER_RETURN_IF_ERROR(Post(data, "all-reduce"));
    std::vector<float> acc(w_->in[0], w_->in[0] + count);
    for (int r = 1; r < size(); ++r) {
      const float* x = w_->in[static_cast<size_t>(r)];
      for (int64_t i = 0; i < count; ++i)
        acc[static_cast<size_t>(i)] =
            op == ReduceOp::kSum ? acc[static_cast<size_t>(i)] + x[i] : std::max(acc[static_cast<size_t>(i)], x[i]);
    }
    PLANNER_RETURN_IF_ERROR(Meet("all-reduce"));
    std::memcpy(data, acc.data(), static_cast<size_t>(count) * 4);
    return Status::OK();
  }
  Status AllGather(const float* send, float* recv, int64_t count) override {
    PLANNER_RETURN_IF_ERROR(Post(send, "all-gather"));
    for (int r = 0; r < size(); ++r)
      std::memcpy(recv + r * count, w_->in[static_cast<size_t>(r)], static_cast<size_t>(count) * 4);
    return Meet("all-gather");
  }
  Status ReduceScatter(const float* send, float* recv, int64_t count, ReduceOp op) override {
    PLANNER_RETURN_IF_ERROR(Post(send, "reduce-scatter"));
    for (int64_t i = 0; i < count; ++i) {
      float v = w_->in[0][rank_ * count + i];
      for (int r = 1; r < size(); ++r) {
        float x = w_->in[static_cast<size_t>(r)][rank_ * count + i];
        v = op == ReduceOp::kSum ? v + x : std::max(v, x);
      }
      recv[i] = v;
    }
    return Meet("reduce-scatter");
  }
  Status Broadcast(float* data, int64_t count, int root) override {
    PLANNER_RETURN_IF_ERROR(Post(data, "broadcast"));
    std::vector<float> copy(w_->in[static_cast<size_t>(root)], w_->in[static_cast<size_t>(root)] + count);
    PLANNER_RETURN_IF_ERROR(Meet("broadcast"));
    if (rank_ != root) std::memcpy(data, copy.data(), static_cast<size_t>(count) * 4);
    return Status::OK();
  }
  // Each rank posts its send buffer, counts and displacements, then copies its block out of
  // every peer's buffer; a count that differs from the peer's is CommError (after the ranks met).
  Status AllToAllV(const float* send, const std::vector<int64_t>& send_counts, const std::vector<int64_t>& send_displs,
                   float* recv, const std::vector<int64_t>& recv_counts,
                   const std::vector<int64_t>& recv_displs) override {
    PLANNER_RETURN_IF_ERROR(CheckAllToAllV(size(), send_counts, send_displs, recv_counts, recv_displs));
    w_->counts[static_cast<size_t>(rank_)] = &send_counts;
    w_->displs[static_cast<size_t>(rank_)] = &send_displs;
    PLANNER_RETURN_IF_ERROR(Post(send, "all-to-all"));
    std::string mismatch;
    for (int j = 0; j < size(); ++j) {
      const size_t q = static_cast<size_t>(j), me = static_cast<size_t>(rank_);
      const int64_t sent = (*w_->counts[q])[me];
      if (sent != recv_counts[q]) {
        if (mismatch.empty())
          mismatch = fmt::format("all-to-all: rank {} sends {} floats to rank {}, which expects {}", j, sent, rank_,
                                 recv_counts[q]);
        continue;
      }
      if (sent > 0) std::memcpy(recv + recv_displs[q], w_->in[q] + (*w_->displs[q])[me], static_cast<size_t>(sent) * 4);
    }
    PLANNER_RETURN_IF_ERROR(Meet("all-to-all"));
    if (!mismatch.empty()) return Status::CommError(mismatch);
    return Status::OK();
  }
  Status GroupSendRecv(const std::vector<P2POp>& ops) override {
    std::unique_lock<std::mutex> lk(w_->mu);
    for (const auto& o : ops) {
      if (o.peer < 0 || o.peer >= size())
        return Status::InvalidArgument(fmt::format("send/recv peer {} outside [0, {})", o.peer, size()));
      if (o.send) w_->box[{rank_, o.peer}].emplace_back(o.data, o.data + o.count);
    }
    w_->cv.notify_all();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    for (const auto& o : ops) {
      if (o.send) continue;
      auto& q = w_->box[{o.peer, rank_}];
      while (q.empty()) {
        if (!w_->failed.empty()) return Status::CommError(w_->failed);
        if (w_->cv.wait_until(lk, deadline) == std::cv_status::timeout && q.empty()) {
          return Status::CommError(
              fmt::format("recv from rank {} on rank {} timed out after {:.0f} s", o.peer, rank_, timeout_s_));
        }
      }
      if (static_cast<int64_t>(q.front().size()) != o.count) {
        return Status::CommError(
            fmt::format("rank {} sent {} floats but rank {} expected {}", o.peer, q.front().size(), rank_, o.count));
      }
      std::memcpy(o.data, q.front().data(), static_cast<size_t>(o.count) * 4);
      q.pop_front();
    }
    return Status::OK();
  }
  Status Barrier() override { return Meet("barrier"); }
  Status Send(const float* data, int64_t count, int peer, int64_t tag) override {
    if (peer < 0 || peer >= size())
      return Status::InvalidArgument(fmt::format("send peer {} outside [0, {})", peer, size()));
    if (tag < 0) return Status::InvalidArgument(fmt::format("send tag {} is negative", tag));
    std::lock_guard<std::mutex> lk(w_->mu);
    w_->tagged[{rank_, peer, tag}].emplace_back(data, data + count);
    w_->cv.notify_all();
    return Status::OK();
  }
  Status Recv(float* data, int64_t count, int peer, int64_t tag) override {
    if (peer < 0 || peer >= size())
      return Status::InvalidArgument(fmt::format("recv peer {} outside [0, {})", peer, size()));
    if (tag < 0) return Status::InvalidArgument(fmt::format("recv tag {} is negative", tag));
    std::unique_lock<std::mutex> lk(w_->mu);
    auto& q = w_->tagged[{peer, rank_, tag}];
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    while (q.empty()) {
      if (!w_->failed.empty()) return Status::CommError(w_->failed);
      if (w_->cv.wait_until(lk, deadline) == std::cv_status::timeout && q.empty()) {
        return Status::CommError(
            fmt::format("recv from rank {} on rank {} timed out after {:.0f} s", peer, rank_, timeout_s_));
      }
    }
    if (static_cast<int64_t>(q.front().size()) != count) {
      return Status::CommError(
          fmt::format("rank {} sent {} floats but rank {} expected {}", peer, q.front().size(), rank_, count));
    }
    std::memcpy(data, q.front().data(), static_cast<size_t>(count) * 4);
    q.pop_front();
    return Status::OK();
  }
  Status FlushSends() override { return Status::OK(); }  // sends are copied at once
  Status Split(int color, int key, std::unique_ptr<Communicator>* out) override {
    const int64_t call = splits_++;
    w_->ints[static_cast<size_t>(2 * rank_)] = color;
    w_->ints[static_cast<size_t>(2 * rank_ + 1)] = key;
    PLANNER_RETURN_IF_ERROR(Meet("split"));
    std::vector<std::pair<int, int>> members;  // (key, rank) of my color
    for (int r = 0; r < size(); ++r) {
      if (w_->ints[static_cast<size_t>(2 * r)] == color)
        members.push_back({w_->ints[static_cast<size_t>(2 * r + 1)], r});
    }
    std::sort(members.begin(), members.end());
    int my = static_cast<int>(std::find(members.begin(), members.end(), std::make_pair(key, rank_)) - members.begin());
    std::shared_ptr<World> child;
    {
      std::lock_guard<std::mutex> lk(w_->mu);
      auto& slot = w_->children[{call, color}];
      if (!slot) slot = std::make_shared<World>(static_cast<int>(members.size()));
      child = slot;
    }
    PLANNER_RETURN_IF_ERROR(Meet("split"));
    *out = std::make_unique<ThreadComm>(child, my, timeout_s_);
    return Status::OK();
  }
  void Fail(const std::string& why) {
    std::lock_guard<std::mutex> lk(w_->mu);
    if (w_->failed.empty()) w_->failed = why;
    w_->cv.notify_all();
  }

 private:
  Status Post(const float* p, const char* what) {
    w_->in[static_cast<size_t>(rank_)] = p;
    return Meet(what);
  }
  Status Meet(const char* what) {
    std::unique_lock<std::mutex> lk(w_->mu);
    if (!w_->failed.empty()) return Status::CommError(w_->failed);
    int64_t gen = w_->generation;
    if (++w_->arrived == w_->size) {
      w_->arrived = 0;
      ++w_->generation;
      w_->cv.notify_all();
      return Status::OK();
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    while (w_->generation == gen) {
      if (!w_->failed.empty()) return Status::CommError(w_->failed);
      if (w_->cv.wait_until(lk, deadline) == std::cv_status::timeout && w_->generation == gen) {
        return Status::CommError(fmt::format("{} on rank {} of {} timed out after {:.0f} s waiting for the other ranks",
                                             what, rank_, w_->size, timeout_s_));
      }
    }
    return Status::OK();
  }
  std::shared_ptr<World> w_;
  int rank_;
  int64_t splits_ = 0;
};

}  // namespace

Status RunThreadRanks(int n, const std::function<Status(Communicator&)>& run, double timeout_s) {
  if (n < 1) return Status::InvalidArgument("need at least one rank");
  auto world = std::make_shared<World>(n);
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r]() {
      ThreadComm c(world, r, timeout_s);
      // An exception must not end the process from a thread (std::terminate): it fails this rank.
      try {
        results[static_cast<size_t>(r)] = run(c);
      } catch (const std::exception& e) {
        results[static_cast<size_t>(r)] = StatusFromException(e);
      } catch (...) {
        results[static_cast<size_t>(r)] = Status::Internal("internal error: an exception of unknown type");
      }
      if (!results[static_cast<size_t>(r)].ok())
        c.Fail(fmt::format("rank {} failed: {}", r, results[static_cast<size_t>(r)].message()));
    });
  }
  for (auto& t : threads) t.join();
  // The root cause first: a rank's own failure before the others' CommErrors about it.
  for (const auto& s : results) {
    if (!s.ok() && s.code() != StatusCode::kCommError) return s;
  }
  for (const auto& s : results) {
    if (!s.ok()) return s;
  }
  return Status::OK();
}

}  // namespace planner
