#include "profiler/comm_profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "common/progress.h"
#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/tensor.h"

namespace planner {

namespace {

// Deterministic inputs whose sums are exact in float: small integers.
float Value(int rank, int64_t i) { return static_cast<float>((rank + 1) + (i % 7)); }

// Keeps this core busy for `seconds` on a chain of multiply-adds held in registers: compute that
// touches no memory, so what it changes is the time away from communication, not the caches.
void ComputeInRegisters(double seconds) {
  if (!(seconds > 0)) return;
  const auto t0 = std::chrono::steady_clock::now();
  float x[16];
  for (int l = 0; l < 16; ++l) x[l] = 1.0f + static_cast<float>(l);
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int k = 0; k < 4096; ++k) {
      for (float& v : x) v = v * 0.9999f + 0.0001f;
    }
  }
  volatile float sink = x[0] + x[15];
  (void)sink;
}

// One collective's buffers on group `g`: host vectors `a` (input, in place) and `b` (output), and
// their device twins for NCCL groups (host copies for filling and checking).
class CollectiveBuffers {
 public:
  CollectiveBuffers(Communicator& g, const std::string& c, int64_t count) : g_(g), c_(c), count_(count) {
    const size_t n = static_cast<size_t>(g.size()), k = static_cast<size_t>(count);
    on_device_ = g.backend() == "nccl";
    if (c == "all_reduce" || c == "broadcast") a_.resize(k);
    else if (c == "all_gather") {
      a_.resize(k);
      b_.resize(k * n);
    } else if (c == "reduce_scatter") {
      a_.resize(k * n);
      b_.resize(k);
    } else if (c == "all_to_all") {
      a_.resize(k * n);
      b_.resize(k * n);
    } else {
      a_.resize(k);
      b_.resize(k);
    }
    if (on_device_) {
      da_ = AllocateTensor({static_cast<int64_t>(a_.size())}, Device::kCuda);
      if (!b_.empty()) db_ = AllocateTensor({static_cast<int64_t>(b_.size())}, Device::kCuda);
      scalar_ = AllocateTensor({1}, Device::kCuda);
    }
  }
  // The inputs: Value(rank, i).
  void Fill() {
    for (size_t i = 0; i < a_.size(); ++i) a_[i] = Value(g_.rank(), static_cast<int64_t>(i));
    if (on_device_) CudaCopyToDevice(da_.data(), a_.data(), static_cast<int64_t>(a_.size()) * 4);
  }
  // The buffer was produced, then pushed out by other work (cold timing).
  void Touch() {
    if (!on_device_) std::fill(a_.begin(), a_.end(), 1.0f);
  }
  Status Once() {
    const int n = g_.size(), r = g_.rank();
    float* pa = on_device_ ? da_.data() : a_.data();
    float* pb = on_device_ ? (b_.empty() ? nullptr : db_.data()) : b_.data();
    if (c_ == "all_reduce") return g_.AllReduce(pa, count_, ReduceOp::kSum);
    if (c_ == "all_gather") return g_.AllGather(pa, pb, count_);
    if (c_ == "reduce_scatter") return g_.ReduceScatter(pa, pb, count_, ReduceOp::kSum);
    if (c_ == "broadcast") return g_.Broadcast(pa, count_, 0);
    if (c_ == "all_to_all") return g_.AllToAll(pa, pb, count_);
    return g_.GroupSendRecv({{true, (r + 1) % n, pa, count_}, {false, (r + n - 1) % n, pb, count_}});
  }
  // A scalar reduction over the group on the backend's memory.
  Status Reduce(float v, ReduceOp op, float* result) {
    if (!on_device_) {
      PLANNER_RETURN_IF_ERROR(g_.AllReduce(&v, 1, op));
      *result = v;
      return Status::OK();
    }
    CudaCopyToDevice(scalar_.data(), &v, 4);
    PLANNER_RETURN_IF_ERROR(g_.AllReduce(scalar_.data(), 1, op));
    CudaCopyToHost(result, scalar_.data(), 4);
    return Status::OK();
  }
  // Elements of the last operation's result that differ from the closed form.
  int64_t Wrong() {
    if (on_device_) {
      CudaCopyToHost(a_.data(), da_.data(), static_cast<int64_t>(a_.size()) * 4);
      if (!b_.empty()) CudaCopyToHost(b_.data(), db_.data(), static_cast<int64_t>(b_.size()) * 4);
    }
    const int n = g_.size(), r = g_.rank();
    int64_t bad = 0;
    const double sum_ranks = n * (n + 1) / 2.0;
    for (int64_t i = 0; i < count_; ++i) {
      double want, got;
      if (c_ == "all_reduce") {
        want = sum_ranks + n * (i % 7);
        got = a_[static_cast<size_t>(i)];
      } else if (c_ == "broadcast") {
        want = Value(0, i);
        got = a_[static_cast<size_t>(i)];
      } else if (c_ == "reduce_scatter") {
        want = sum_ranks + n * ((r * count_ + i) % 7);
        got = b_[static_cast<size_t>(i)];
      } else if (c_ == "send_recv") {
        want = Value((r + n - 1) % n, i);
        got = b_[static_cast<size_t>(i)];
      } else if (c_ == "all_to_all") {  // block q: rank q's block for me
        for (int q = 0; q < n; ++q) bad += b_[static_cast<size_t>(q * count_ + i)] != Value(q, r * count_ + i);
        continue;
      } else {
        for (int q = 0; q < n; ++q) bad += b_[static_cast<size_t>(q * count_ + i)] != Value(q, i);
        continue;
      }
      bad += got != want;
    }
    return bad;
  }

 private:
  Communicator& g_;
  const std::string c_;
  const int64_t count_;
  bool on_device_ = false;
  std::vector<float> a_, b_;
  Tensor da_, db_, scalar_;
};

// Seconds per operation of `iters` operations: back to back (warm), as a plain MPI loop (or
// nccl-tests) would (in-place values grow; the checked run starts again from the inputs), or
// each after `gap_s` of compute in registers and an eviction of the caches (cold).
Status TimeOperations(Communicator& g, CollectiveBuffers& buf, int iters, bool cold, double gap_s, double* seconds) {
  double local = 0;
  if (!cold) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < iters; ++k) PLANNER_RETURN_IF_ERROR(buf.Once());
    PLANNER_RETURN_IF_ERROR(g.Synchronize());
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    return Status::OK();
  }
  static std::vector<char> sweep(32u << 20);
  for (int k = 0; k < iters; ++k) {
    buf.Touch();
    ComputeInRegisters(gap_s);
    // The other work: a load and a store on every cache line of 32 MiB (this machine's L3), as
    // compute does. Not memset: for large sizes glibc's memset uses non-temporal stores that
    // bypass the caches and evict little (a 128 KiB exchange measured 19 us after a memset
    // sweep, 28 us after this one; docs/performance.md).
    for (size_t i = 0; i < sweep.size(); i += 64) sweep[i] = static_cast<char>(sweep[i] + 1);
    PLANNER_RETURN_IF_ERROR(g.Barrier());
    auto t0 = std::chrono::steady_clock::now();
    PLANNER_RETURN_IF_ERROR(buf.Once());
    PLANNER_RETURN_IF_ERROR(g.Synchronize());
    local += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  }
  *seconds = local;
  return Status::OK();
}

// Runs `iters` of one collective on group `g` and checks the last result; *seconds is the
// group's max, *wrong the group's count of wrong elements.
Status RunOne(Communicator& g, const std::string& c, int64_t count, int iters, bool cold, double gap_s, double* seconds,
              int64_t* wrong) {
  CollectiveBuffers buf(g, c, count);
  buf.Fill();
  PLANNER_RETURN_IF_ERROR(g.Barrier());
  double local = 0;
  PLANNER_RETURN_IF_ERROR(TimeOperations(g, buf, iters, cold, gap_s, &local));
  buf.Fill();
  PLANNER_RETURN_IF_ERROR(buf.Once());
  PLANNER_RETURN_IF_ERROR(g.Synchronize());
  const int64_t bad = buf.Wrong();
  float t = 0, w = 0;
  PLANNER_RETURN_IF_ERROR(buf.Reduce(static_cast<float>(std::max(local, 1e-9)), ReduceOp::kMax, &t));
  PLANNER_RETURN_IF_ERROR(buf.Reduce(static_cast<float>(bad), ReduceOp::kSum, &w));
  *seconds = t;
  *wrong = static_cast<int64_t>(w);
  return Status::OK();
}

// (group size, level): powers of two within a node, then across nodes.
struct GroupSpec {
  int size;
  std::string level;
};

std::vector<GroupSpec> GroupSpecs(int local_size, int nodes) {
  std::vector<GroupSpec> specs;
  for (int g = 2; g <= local_size; g *= 2) specs.push_back({g, "node"});
  if (local_size > 1 && (local_size & (local_size - 1)) != 0) specs.push_back({local_size, "node"});
  if (nodes > 1) {
    for (int g = 2; g <= nodes; g *= 2) specs.push_back({g, "cluster"});
  }
  return specs;
}

void PrintTableHeader(const std::function<void(const std::string&)>& print, const std::string& c, const GroupSpec& spec,
                      const std::string& backend, const CommProfileOptions& o) {
  print(fmt::format("# {} on {} ranks, level {} ({}, {} caches{})", c, spec.size, spec.level, backend,
                    o.cold ? "cold" : "warm",
                    o.gap_s > 0 ? fmt::format(", {:.3g} ms of compute before each", o.gap_s * 1e3) : std::string()));
  print(fmt::format("# {:>12} {:>12} {:>6} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6}", "size", "count", "type", "redop",
                    "root", "time", "algbw", "busbw", "#wrong"));
  print(fmt::format("# {:>12} {:>12} {:>6} {:>6} {:>6} {:>10} {:>8} {:>8} {:>6}", "(B)", "(elements)", "", "", "",
                    "(us)", "(GB/s)", "(GB/s)", ""));
}

// One size of one collective on group `g`: a warm-up run, the timed run, and rank 0's row
// broadcast to every rank. Sets *skipped when the size holds no whole element per rank.
Status MeasureSize(Communicator& g, Communicator& host, const std::string& c, const GroupSpec& spec, int64_t bytes,
                   const CommProfileOptions& o, CommRow* row, bool* skipped) {
  // nccl-tests' size is the total buffer: per-rank count = size / n for the gathers and scatters,
  // and for the all-to-all the count per peer (size: what each rank sends in all).
  const bool split = c == "all_gather" || c == "reduce_scatter" || c == "all_to_all";
  const int64_t count = bytes / 4 / (split ? spec.size : 1);
  *skipped = count < 1;
  if (*skipped) return Status::OK();
  const int64_t real_bytes = count * 4 * (split ? spec.size : 1);
  const int iters =
      static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / std::max<int64_t>(real_bytes, 1), 3, o.iterations));
  double secs = 0, warm = 0;
  int64_t wrong = 0, w0 = 0;
  PLANNER_RETURN_IF_ERROR(RunOne(g, c, count, o.warmup, false, 0, &warm, &w0));
  PLANNER_RETURN_IF_ERROR(RunOne(g, c, count, iters, o.cold, o.gap_s, &secs, &wrong));
  // Rank 0's group reports; the time is the max over the group.
  float shared[3] = {static_cast<float>(secs), static_cast<float>(wrong), 0};
  PLANNER_RETURN_IF_ERROR(host.Broadcast(shared, 3, 0));
  row->collective = c;
  row->level = spec.level;
  row->group_size = spec.size;
  row->bytes = real_bytes;
  row->count = split ? count * spec.size : count;
  row->time_s = shared[0];
  row->algbw_GBps = static_cast<double>(real_bytes) / row->time_s / 1e9;
  row->busbw_GBps = row->algbw_GBps * BusBandwidthFactor(c, spec.size);
  row->wrong = static_cast<int64_t>(shared[1]);
  return Status::OK();
}

// Every size of collective `c` on group `g`: the rows and the fitted curve.
Status ProfileCurve(Communicator& world, Communicator& g, Communicator& host, const std::string& c,
                    const GroupSpec& spec, const CommProfileOptions& o,
                    const std::function<void(const std::string&)>& print, std::vector<CommRow>* rows,
                    CommCurve* curve) {
  const bool reporter = world.rank() == 0;
  if (reporter) PrintTableHeader(print, c, spec, world.backend(), o);
  curve->collective = c;
  curve->level = spec.level;
  curve->group_size = spec.size;
  curve->backend = world.backend();
  curve->cold = o.cold;
  curve->gap_s = o.gap_s;  // 0 unless cold (checked by the caller)
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
    if (Interrupted()) return Status::Unavailable("interrupted by Ctrl-C; no profile written");
    CommRow row;
    bool skipped = false;
    PLANNER_RETURN_IF_ERROR(MeasureSize(g, host, c, spec, bytes, o, &row, &skipped));
    if (skipped) continue;
    if (reporter) {
      const bool reduces = c == "all_reduce" || c == "reduce_scatter";
      print(fmt::format("  {:>12} {:>12} {:>6} {:>6} {:>6} {:>10.2f} {:>8.3f} {:>8.3f} {:>6}", row.bytes, row.count,
                        "float", reduces ? "sum" : "none", c == "broadcast" ? "0" : "-1", row.time_s * 1e6,
                        row.algbw_GBps, row.busbw_GBps, row.wrong));
    }
    curve->points.emplace_back(static_cast<double>(row.bytes), row.time_s);
    rows->push_back(row);
  }
  double beta = 0;
  FitAlphaBeta(curve->points, &curve->alpha_s, &beta);
  curve->busbw_GBps = beta > 0 ? BusBandwidthFactor(c, spec.size) / beta / 1e9 : 0;
  if (reporter)
    print(fmt::format("# fit: alpha {:.2f} us, asymptotic busbw {:.3f} GB/s", curve->alpha_s * 1e6, curve->busbw_GBps));
  return Status::OK();
}

}  // namespace

Status ProfileCollectives(Communicator& world, const CommProfileOptions& o, std::vector<CommRow>* rows,
                          std::vector<CommCurve>* curves, const std::function<void(const std::string&)>& print,
                          Communicator* host) {
  const int n = world.size();
  if (n < 2)
    return Status::InvalidArgument("collective profiling needs two or more ranks: mpirun -np 2 planner profile --comm");
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes)
    return Status::InvalidArgument("--min-bytes must be at least 4 and at most --max-bytes");
  if (!(o.gap_s >= 0)) return Status::InvalidArgument("--gap-ms must be 0 or more");
  if (o.gap_s > 0 && !o.cold)
    return Status::InvalidArgument("--gap-ms applies to cold-cache timing only; add --cache cold");
  Communicator& host_comm = host ? *host : world;
  int local_rank = 0, local_size = n, nodes = 1;
  PLANNER_RETURN_IF_ERROR(MpiNodeLayout(host_comm, &local_rank, &local_size, &nodes));
  for (const auto& spec : GroupSpecs(local_size, nodes)) {
    // Node level: consecutive ranks of one node; cluster level: one rank per node (same local rank).
    const int color =
        spec.level == "node" ? world.rank() / spec.size : local_rank * 100000 + (world.rank() / local_size) / spec.size;
    std::unique_ptr<Communicator> g;
    PLANNER_RETURN_IF_ERROR(world.Split(color, world.rank(), &g));
    g->set_timeout_seconds(world.timeout_seconds());
    for (const auto& c : o.collectives) {
      CommCurve curve;
      PLANNER_RETURN_IF_ERROR(ProfileCurve(world, *g, host_comm, c, spec, o, print, rows, &curve));
      curves->push_back(std::move(curve));
    }
  }
  return Status::OK();
}

}  // namespace planner
