#include "runtime/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <sstream>

#include <fmt/format.h>

#include "common/log.h"
#include "common/timing.h"
#include "common/units.h"
#include "runtime/kernels/kernel.h"
#include "dp_solver/schedule_sim.h"
#include "runtime/comm/nccl_comm.h"
#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/optimizer.h"
#include "runtime/transfers.h"

namespace planner {

namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}


// A TP group over a Communicator, for the kernels' all-reduces; each call timed into `log`
// under the iteration of the microbatch being computed, numbered in call order (the ranks of a
// TP group make the same calls in the same order).
class CommTpGroup final : public TpGroup {
 public:
  CommTpGroup(Communicator* c, std::vector<TransferLog::TpAllReduce>* log) : c_(c), log_(log) {}
  void SetIteration(int64_t it) { iteration_ = it; }
  Status AllReduceSum(float* d, int64_t n) override { return Timed(d, n, ReduceOp::kSum); }
  Status AllReduceMax(float* d, int64_t n) override { return Timed(d, n, ReduceOp::kMax); }

 private:
  Status Timed(float* d, int64_t n, ReduceOp op) {
    const double t0 = MonotonicSeconds();
    Status s = c_->AllReduce(d, n, op);
    log_->push_back({iteration_, seq_++, n * 4, MonotonicSeconds() - t0});
    return s;
  }
  Communicator* c_;
  std::vector<TransferLog::TpAllReduce>* log_;
  int64_t iteration_ = 0, seq_ = 0;
};

struct TraceEvent {
  std::string name;
  double start_s, dur_s;
  int tid;
};

// Host values into a tensor of either device.
void Upload(const std::vector<float>& v, Tensor* t) {
  if (t->device() == Device::kCpu) std::copy(v.begin(), v.end(), t->data());
  else CudaCopyToDevice(t->data(), v.data(), static_cast<int64_t>(v.size()) * 4);
}

// Receive buffers reused once nothing else holds them (a freshly allocated buffer costs page
// faults while MPI copies into it).
class BufferPool {
 public:
  Tensor Get(const std::vector<int64_t>& shape, Device dev) {
    for (auto& t : pool_) {
      if (t.use_count() == 1 && t.shape() == shape && t.device() == dev) return t;
    }
    pool_.push_back(AllocateTensor(shape, dev));
    return pool_.back();
  }

 private:
  std::vector<Tensor> pool_;
};

// Finds the group (from launch.yaml) holding `rank`; -1 if none.
int64_t GroupOf(const std::vector<std::vector<int64_t>>& groups, int64_t rank) {
  for (size_t g = 0; g < groups.size(); ++g) {
    if (std::find(groups[g].begin(), groups[g].end(), rank) != groups[g].end()) return static_cast<int64_t>(g);
  }
  return -1;
}

}  // namespace

void TeacherSample(const ModelSpec& m, uint64_t seed, int64_t index, std::vector<float>* input, std::vector<float>* targets) {
  const Layer& first = m.layers.front();
  const Layer& last = m.layers.back();
  const int64_t classes = last.in_shape.back();
  const int64_t rows = Product(last.in_shape) / classes;
  input->clear();
  targets->clear();
  const uint64_t base = Mix(seed * 0x100000001B3ull + static_cast<uint64_t>(index));
  if (first.type == "embedding") {
    // A fixed "teacher" Markov chain: the next token is (5 t + 3) mod V with
    // probability 0.9, else uniform. Targets are the next tokens.
    const int64_t seq = first.in_shape[0], vocab = first.attrs.Int("vocab", 2);
    std::vector<int64_t> tok(static_cast<size_t>(seq + 1));
    tok[0] = static_cast<int64_t>(Mix(base) % static_cast<uint64_t>(vocab));
    for (int64_t i = 1; i <= seq; ++i) {
      uint64_t h = Mix(base + static_cast<uint64_t>(i));
      tok[static_cast<size_t>(i)] = Unit(h) < 0.9 ? (5 * tok[static_cast<size_t>(i - 1)] + 3) % vocab
                                                  : static_cast<int64_t>(Mix(h) % static_cast<uint64_t>(vocab));
    }
    for (int64_t i = 0; i < seq; ++i) input->push_back(static_cast<float>(tok[static_cast<size_t>(i)]));
    for (int64_t r = 0; r < rows; ++r) targets->push_back(static_cast<float>(tok[static_cast<size_t>(std::min(r + 1, seq))] % classes));
    return;
  }
  // Features in [-1, 1]; the teacher is a fixed random linear map to the
  // classes, the label its argmax (per loss row).
  const int64_t n = Product(first.in_shape);
  for (int64_t i = 0; i < n; ++i) input->push_back(static_cast<float>(2 * Unit(Mix(base + static_cast<uint64_t>(i))) - 1));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    double best_v = -1e300;
    for (int64_t c = 0; c < classes; ++c) {
      double v = 0;
      for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 64)) {
        double w = 2 * Unit(Mix(seed ^ (0xABCDEFull + static_cast<uint64_t>((r * classes + c) * n + i)))) - 1;
        v += w * (*input)[static_cast<size_t>(i)];
      }
      if (v > best_v) {
        best_v = v;
        best = c;
      }
    }
    targets->push_back(static_cast<float>(best));
  }
}

LaunchPlan SingleProcessPlan(const LaunchPlan& L, const ModelSpec& model) {
  LaunchPlan s = L;
  s.schedule = Schedule::kGpipe;
  s.interleave = 1;
  s.tp = s.pp = s.dp = 1;
  s.config.assign(1, '1');  // not = "1": GCC 12 -O3 warns -Wrestrict (false positive) on that assignment here
  s.num_microbatches = L.global_batch / L.microbatch_size;
  s.stages = {LaunchStage{0, static_cast<int64_t>(model.layers.size()) - 1, 1, 0, 0}};
  s.ranks = {LaunchRank{}};
  s.tp_groups = {{0}};
  s.dp_groups = {{0}};
  s.pp_groups = {{0}};
  return s;
}

// Per-device operation order of the plan's schedule, from the simulator that
// predicted it (one definition of each schedule for prediction and execution):
// events of device `pos`, sorted by their simulated start.
// The plan's predicted stage times as simulator stages.
std::vector<SimStage> SimStagesOf(const LaunchPlan& L) {
  std::vector<SimStage> st;
  for (const auto& s : L.stages) {
    SimStage x;
    // Plans from older codegen carry only the total: split it 1:1:1.
    const bool split = s.predicted_forward_s + s.predicted_backward_input_s + s.predicted_backward_weight_s > 0;
    x.forward_s = split ? s.predicted_forward_s : s.predicted_compute_s / 3;
    x.backward_input_s = split ? s.predicted_backward_input_s : s.predicted_compute_s / 3;
    x.backward_weight_s = split ? s.predicted_backward_weight_s : s.predicted_compute_s / 3;
    x.send_s = s.predicted_p2p_s;
    if (x.forward_s + x.backward_input_s + x.backward_weight_s <= 0) x.forward_s = x.backward_input_s = x.backward_weight_s = 1;
    st.push_back(x);
  }
  return st;
}

// Device `device`'s compute operations of a simulated schedule, in simulated start order.
void DeviceOrder(const SimResult& r, int64_t device, std::vector<SimEvent>* out) {
  out->clear();
  for (const auto& e : r.events) {
    if (e.device == device && e.kind != 'C') out->push_back(e);
  }
  std::stable_sort(out->begin(), out->end(), [](const SimEvent& x, const SimEvent& y) { return x.start_s < y.start_s; });
}

Status ScheduleOrder(const LaunchPlan& L, int64_t pos, std::vector<SimEvent>* out) {
  SimResult r;
  PLANNER_RETURN_IF_ERROR(SimulateSchedule(L.schedule, SimStagesOf(L), L.pp, L.num_microbatches, true, &r));
  DeviceOrder(r, pos, out);
  return Status::OK();
}

Status RunLaunch(const LaunchPlan& L, const ModelSpec& model, Communicator& world, const RunOptions& opt, RunSummary* out) {
  KeepFreedHostMemory();
  namespace fs = std::filesystem;
  const int64_t n = static_cast<int64_t>(L.ranks.size());
  if (world.size() != n) {
    return Status::InvalidArgument(fmt::format("{} has {} ranks but this job has {}; start it with mpirun -np {} (bash run.sh)", L.path, n,
                                               world.size(), n));
  }
  // Per-stage replication ("2-1-1", or PipeDream's schedule): microbatch j runs on replica j mod r of each stage.
  bool replicated = L.schedule == Schedule::kPipeDream;
  for (const auto& st : L.stages) replicated = replicated || st.replicas != L.dp;
  const bool async = L.schedule == Schedule::kPipeDream;
  if (opt.comm_only && async) {
    return Status::NotSupported(fmt::format("{}: schedule pipedream: --comm-only runs the synchronous schedules only (gpipe, 1f1b, interleaved, "
                                            "zb-h1); drop --comm-only, or solve with one of them and codegen again", L.path));
  }
  if (replicated && (L.interleave != 1 || (L.schedule != Schedule::k1F1B && L.schedule != Schedule::kPipeDream))) {
    return Status::NotSupported("per-stage replication runs with the 1F1B (flush) or PipeDream (asynchronous) schedule");
  }
  const Device dev = L.device == "cuda" ? Device::kCuda : Device::kCpu;
  if (model.layers.back().type != "loss") return Status::InvalidArgument("the model's last layer must be a loss to train it");
  if (!replicated && L.global_batch != L.microbatch_size * L.num_microbatches * L.dp) {
    return Status::InvalidArgument(fmt::format("{}: global_batch {} != microbatch_size {} x num_microbatches {} x dp {}", L.path, L.global_batch,
                                               L.microbatch_size, L.num_microbatches, L.dp));
  }
  const int64_t Q = static_cast<int64_t>(L.stages.size());
  const int64_t p = replicated ? Q : L.pp;
  if (Q != p * L.interleave) return Status::InvalidArgument(fmt::format("{}: {} stages for pp {} x interleave {}", L.path, Q, p, L.interleave));
  if (replicated) {
    for (const auto& st : L.stages) {
      if ((L.global_batch / L.microbatch_size) % st.replicas != 0) {
        return Status::InvalidArgument(fmt::format("{}: {} microbatches do not split evenly over a stage's {} replicas", L.path,
                                                   L.global_batch / L.microbatch_size, st.replicas));
      }
    }
  }
  SetCpuThreads(static_cast<int>(L.run.threads));
  const int64_t rank = world.rank();
  const LaunchRank& me = L.ranks[static_cast<size_t>(rank)];
  for (const auto& s : L.stages) {
    if (s.last_layer >= static_cast<int64_t>(model.layers.size())) {
      return Status::InvalidArgument(fmt::format("{}: a stage ends at layer {} but the model has {}", L.path, s.last_layer, model.layers.size()));
    }
  }
  // Communicators: this rank's TP and DP groups (every rank splits in the same order).
  std::unique_ptr<Communicator> tp_comm, dp_comm;
  // GPU ranks: one CUDA device each (the rank's local device); activations, gradients and the
  // TP / DP collectives go over NCCL (bootstrapped over the host world); host scalars over the world.
  std::unique_ptr<Communicator> nccl;
  Communicator* pipe = &world;
  if (dev == Device::kCuda) {
    std::string why;
    int count = CudaDeviceCount(&why);
    if (count == 0) return Status::Unavailable(fmt::format("{}: device cuda: {}", L.path, why));
    CudaSetDevice(static_cast<int>(me.local_device % count));
    if (n > 1) {
      PLANNER_RETURN_IF_ERROR(MakeNcclComm(&world, static_cast<int>(me.local_device % count), &nccl));
      nccl->set_timeout_seconds(L.run.timeout_s);
      pipe = nccl.get();
    }
  }
  PLANNER_RETURN_IF_ERROR(pipe->Split(static_cast<int>(GroupOf(L.tp_groups, rank)), static_cast<int>(rank), &tp_comm));
  PLANNER_RETURN_IF_ERROR(pipe->Split(static_cast<int>(GroupOf(L.dp_groups, rank)), static_cast<int>(rank), &dp_comm));
  tp_comm->set_timeout_seconds(L.run.timeout_s);
  dp_comm->set_timeout_seconds(L.run.timeout_s);
  // Every rank got here with a valid launch: from now on a rank that exits is a lost rank.
  PLANNER_RETURN_IF_ERROR(StartPeerWatch(world));
  // Trace and transfer times go on rank 0's clock (the ranks of one node share theirs; other nodes' differ).
  double clock_offset = 0, clock_error = 0;
  PLANNER_RETURN_IF_ERROR(ClockOffset(world, 8, &clock_offset, &clock_error));
  TransferLog transfers;
  CommTpGroup tp_group(tp_comm.get(), &transfers.tp_allreduces);
  // Rank of pipeline position `pos` with this rank's replica and tp rank (Megatron order).
  auto rank_at = [&](int64_t pos) { return static_cast<int>(pos * L.tp * L.dp + me.replica * L.tp + me.tp_rank); };
  // Replicated: the rank of (stage, replica, this tp rank).
  std::map<std::pair<int64_t, int64_t>, int> where;
  for (const auto& r : L.ranks) {
    if (r.tp_rank == me.tp_rank) where[{r.stage, r.replica}] = static_cast<int>(r.rank);
  }
  auto peer = [&](int64_t q, int64_t j) -> int {
    if (!replicated) return rank_at(q % p);
    return where[{q, j % L.stages[static_cast<size_t>(q)].replicas}];
  };
  // This device's virtual stages (chunks): q = chunk x p + position. Seeds depend on the layer index only.
  struct Chunk {
    int64_t q;
    std::vector<std::unique_ptr<LayerKernel>> ks;
  };
  std::vector<Chunk> chunks;
  std::vector<Param*> params;
  for (int64_t q = me.stage; q < Q; q += p) {
    Chunk c;
    c.q = q;
    const LaunchStage& st = L.stages[static_cast<size_t>(q)];
    for (int64_t i = st.first_layer; i <= st.last_layer; ++i) {
      KernelOptions ko;
      ko.device = dev;
      ko.tp_size = L.tp;
      ko.tp_rank = me.tp_rank;
      ko.tp_group = L.tp > 1 ? &tp_group : nullptr;
      ko.seed = L.run.seed * 1000003ull + static_cast<uint64_t>(i);
      std::unique_ptr<LayerKernel> k;
      PLANNER_RETURN_IF_ERROR(MakeKernel(model.layers[static_cast<size_t>(i)], ko, &k));
      for (Param* prm : k->Params()) params.push_back(prm);
      c.ks.push_back(std::move(k));
    }
    chunks.push_back(std::move(c));
  }
  auto chunk_of = [&](int64_t q) -> Chunk& { return chunks[static_cast<size_t>(q / p)]; };
  // All gradients live in one flat bucket (views), so the data-parallel all-reduce is one
  // message with no copies (as DDP's buckets).
  int64_t grad_elems = 0;
  for (Param* prm : params) grad_elems += prm->grad.numel();
  Tensor bucket = Tensor::Zeros({std::max<int64_t>(1, grad_elems)}, dev);
  {
    int64_t off = 0;
    for (Param* prm : params) {
      prm->grad = bucket.View(off, prm->grad.shape());
      off += prm->grad.numel();
    }
  }
  OptimizerConfig oc;
  oc.kind = L.run.optimizer == "sgd" ? OptimizerConfig::kSgd : OptimizerConfig::kAdam;
  oc.lr = L.run.learning_rate;
  Optimizer optimizer(oc);
  const int64_t b = L.microbatch_size, B = L.global_batch;
  const int64_t m = replicated ? B / b : L.num_microbatches;  // microbatches this rank's order covers (replicated: all, round robin)
  const bool split_w = L.schedule == Schedule::kZbH1;
  // Activation shapes at a virtual stage's input and output (TP shards of the logits).
  auto in_shape = [&](int64_t q) {
    const Layer& l = model.layers[static_cast<size_t>(L.stages[static_cast<size_t>(q)].first_layer)];
    std::vector<int64_t> shape = {b};
    shape.insert(shape.end(), l.in_shape.begin(), l.in_shape.end());
    if (l.type == "loss") shape.back() /= L.tp;
    return shape;
  };
  auto out_shape = [&](int64_t q) {
    const Layer& l = model.layers[static_cast<size_t>(L.stages[static_cast<size_t>(q)].last_layer)];
    std::vector<int64_t> shape = {b};
    shape.insert(shape.end(), l.out_shape.begin(), l.out_shape.end());
    if (l.type == "lm_head") shape.back() /= L.tp;
    return shape;
  };
  const int64_t iterations = opt.iterations > 0 ? opt.iterations : L.run.iterations;
  std::vector<SimEvent> order;
  // The simulator's round-robin order over `microbatches`; device ids go stage by stage, replica by replica.
  auto replicated_order = [&](int64_t microbatches) -> Status {
    std::vector<int64_t> reps, in_flight;
    int64_t after = 0;
    for (const auto& x : L.stages) after += x.replicas;
    int64_t device = -1, offset = 0;
    for (int64_t q = 0; q < Q; ++q) {
      const auto& x = L.stages[static_cast<size_t>(q)];
      reps.push_back(x.replicas);
      in_flight.push_back((after + x.replicas - 1) / x.replicas);  // PipeDream's NOAM
      if (q == me.stage) device = offset + me.replica;
      offset += x.replicas;
      after -= x.replicas;
    }
    SimResult r;
    PLANNER_RETURN_IF_ERROR(SimulateReplicated(SimStagesOf(L), reps, in_flight, microbatches, true, &r));
    DeviceOrder(r, device, &order);
    return Status::OK();
  };
  if (!replicated) {
    PLANNER_RETURN_IF_ERROR(ScheduleOrder(L, me.stage, &order));
  } else if (!async) {
    PLANNER_RETURN_IF_ERROR(replicated_order(m));
  }

  std::vector<double> iter_s, compute_s, comm_s;
  std::vector<double> losses;
  // Resume: parameters, optimizer state and the iteration from a checkpoint of this launch.
  int64_t start = 0;
  if (!opt.resume_from.empty()) {
    std::ifstream f(fs::path(opt.resume_from) / "ckpt" / fmt::format("rank{}.bin", rank), std::ios::binary);
    if (!f) return Status::NotFound(fmt::format("{}/ckpt/rank{}.bin: no checkpoint for this rank; run with checkpoint_every first", opt.resume_from, rank));
    int64_t header[3] = {0, 0, 0};  // iteration, parameter floats, optimizer floats
    f.read(reinterpret_cast<char*>(header), sizeof header);
    int64_t want = 0;
    for (Param* prm : params) want += prm->value.numel();
    if (!f || header[1] != want) {
      return Status::InvalidArgument(fmt::format("{}/ckpt/rank{}.bin holds {} parameters, this stage has {}; it belongs to another launch",
                                                 opt.resume_from, rank, header[1], want));
    }
    for (Param* prm : params) {
      std::vector<float> v(static_cast<size_t>(prm->value.numel()));
      f.read(reinterpret_cast<char*>(v.data()), prm->value.numel() * 4);
      Upload(v, &prm->value);
    }
    std::vector<float> state(static_cast<size_t>(header[2]));
    f.read(reinterpret_cast<char*>(state.data()), header[2] * 4);
    if (!f) return Status::InvalidArgument(fmt::format("{}/ckpt/rank{}.bin is truncated", opt.resume_from, rank));
    PLANNER_RETURN_IF_ERROR(optimizer.SetState(state, params));
    start = header[0];
    std::ifstream prev_metrics(fs::path(opt.resume_from) / "metrics.csv");
    std::string line;
    std::getline(prev_metrics, line);
    while (std::getline(prev_metrics, line) && static_cast<int64_t>(losses.size()) < start) {
      size_t a1 = line.find(','), b2 = line.find(',', a1 + 1);
      losses.push_back(std::stod(line.substr(a1 + 1, b2 - a1 - 1)));
      iter_s.push_back(std::stod(line.substr(b2 + 1)));
      compute_s.push_back(0);
      comm_s.push_back(0);
    }
  }
  const int64_t ckpt_every = opt.checkpoint_every >= 0 ? opt.checkpoint_every : L.run.checkpoint_every;
  // PipeDream runs without a flush: one order over every remaining iteration's microbatches.
  if (async && start < iterations) PLANNER_RETURN_IF_ERROR(replicated_order((iterations - start) * m));
  std::vector<TraceEvent> trace;
  BufferPool recv_pool;
  // Trace times are this rank's monotonic clock (MonotonicSeconds()); they are written on rank
  // 0's clock (minus clock_offset), so the merged trace lines up and a send can be paired with its receive.
  // Data-parallel all-reduce overlapped with backward (DDP-style): during each chunk's last
  // backward of the iteration, a layer's gradient segment of the flat bucket is all-reduced on a
  // second thread as soon as that layer's weight gradient is final, while earlier layers compute.
  const bool sync_dp = !async && (replicated ? L.stages[static_cast<size_t>(me.stage)].replicas > 1 : L.dp > 1);
  // Off by default on CPU ranks: on a machine with as many cores as ranks the reducer thread's
  // polling competes with compute (docs/performance.md measured it slower).
  const bool overlap = L.run.overlap_dp && sync_dp && grad_elems > 0 && ConcurrentCommunicatorsSafe(*dp_comm);
  std::map<int64_t, size_t> last_backward;  // chunk q -> index in `order` of its last B (or W)
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i].kind == 'W' || (order[i].kind == 'B' && !split_w)) last_backward[order[i].stage] = i;
  }
  // Bucket segment [offset, count) of each layer of each chunk.
  std::map<std::pair<int64_t, size_t>, std::pair<int64_t, int64_t>> segment;
  {
    int64_t off = 0;
    for (const auto& c : chunks) {
      for (size_t i = 0; i < c.ks.size(); ++i) {
        int64_t cnt = 0;
        for (Param* prm : c.ks[i]->Params()) cnt += prm->grad.numel();
        segment[{c.q, i}] = {off, cnt};
        off += cnt;
      }
    }
  }
  struct Reducer {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<int64_t, int64_t>> queue;
    int64_t pending = 0;
    bool stop = false;
    Status status;
    double busy_s = 0;
  } red;
  std::thread reducer;
  if (overlap) {
    reducer = std::thread([&]() {
      std::unique_lock<std::mutex> lk(red.mu);
      while (true) {
        red.cv.wait(lk, [&] { return red.stop || !red.queue.empty(); });
        if (red.queue.empty()) return;
        auto [off, cnt] = red.queue.front();
        red.queue.pop_front();
        lk.unlock();
        double a0 = MonotonicSeconds();
        Status st = cnt > 0 ? dp_comm->AllReduce(bucket.data() + off, cnt, ReduceOp::kSum) : Status::OK();
        lk.lock();
        red.busy_s += MonotonicSeconds() - a0;
        if (!st.ok() && red.status.ok()) red.status = st;
        --red.pending;
        red.cv.notify_all();
      }
    });
  }
  auto enqueue = [&](int64_t q, size_t layer) {
    auto seg = segment[{q, layer}];
    std::lock_guard<std::mutex> lk(red.mu);
    red.queue.push_back(seg);
    ++red.pending;
    red.cv.notify_all();
  };
  struct JoinAtExit {
    Reducer& r;
    std::thread& t;
    ~JoinAtExit() {
      {
        std::lock_guard<std::mutex> lk(r.mu);
        r.stop = true;
        r.cv.notify_all();
      }
      if (t.joinable()) t.join();
    }
  } join_at_exit{red, reducer};
  // PipeDream's weight stashing (asynchronous schedule): the weights a microbatch's forward used,
  // restored for its backward; checksums prove forward and backward saw one version.
  std::map<int64_t, std::vector<float>> stash;
  std::map<int64_t, double> stash_sum;
  int64_t stash_mismatch = 0, stash_stale = 0, stash_count = 0;
  auto snapshot = [&]() {
    std::vector<float> v;
    for (Param* prm : params) {
      std::vector<float> x = prm->value.ToVector();
      v.insert(v.end(), x.begin(), x.end());
    }
    return v;
  };
  auto restore = [&](const std::vector<float>& v) {
    size_t off = 0;
    for (Param* prm : params) {
      Upload(std::vector<float>(v.begin() + static_cast<long>(off), v.begin() + static_cast<long>(off + static_cast<size_t>(prm->value.numel()))),
             &prm->value);
      off += static_cast<size_t>(prm->value.numel());
    }
  };
  auto checksum = [&]() {
    double sum = 0;
    for (Param* prm : params)
    {
      std::vector<float> x = prm->value.ToVector();
      for (size_t i = 0; i < x.size(); ++i) sum += static_cast<double>(x[i]) * static_cast<double>(i % 7 + 1);
    }
    return sum;
  };
  double peak_bytes = 0;
  for (int64_t it = start; it < iterations; ++it) {
    for (auto& c : chunks)
      for (auto& k : c.ks) k->ZeroGrads();
    ResetPeakMemory(dev);
    // saved[chunk][microbatch][layer]
    std::vector<std::vector<std::vector<Saved>>> saved(chunks.size());
    // Asynchronous: this pass covers every remaining iteration (microbatch j belongs to iteration it + j / m).
    const int64_t span = async ? iterations - it : 1;
    std::vector<double> pass_loss(static_cast<size_t>(span), 0.0), pass_done(static_cast<size_t>(span), 0.0);
    for (size_t c = 0; c < chunks.size(); ++c) saved[c].assign(static_cast<size_t>(span * m), std::vector<Saved>(chunks[c].ks.size()));
    std::vector<Tensor> keep;  // sent buffers stay alive until FlushSends
    double t_compute = 0, t_comm = 0;
    const double t0 = MonotonicSeconds();
    for (size_t ev_index = 0; ev_index < order.size(); ++ev_index) {
      const SimEvent& ev = order[ev_index];
      const int64_t q = ev.stage, j = ev.microbatch;
      const bool final_backward = overlap && last_backward.count(q) && last_backward[q] == ev_index;
      Chunk& ch = chunk_of(q);
      auto& sv = saved[static_cast<size_t>(q / p)][static_cast<size_t>(j)];
      const int64_t it_j = it + j / m, jj = j % m;
      tp_group.SetIteration(it_j);  // PipeDream's pass spans iterations: label each microbatch's calls with its own
      const int64_t first_sample = replicated ? it_j * B + jj * b : it * B + (me.replica * m + j) * b;
      // Tag of the message that enters virtual stage qq (dir 0: activation) or leaves it backwards
      // (dir 1), unique in the run: the pass (its first iteration), the stage, the microbatch of the pass.
      auto tag = [&](int64_t qq, int dir) { return ((it * (Q + 1) + qq) * span * m + j) * 2 + dir; };
      // Posts one pipeline message. The call's own time counts as communication: an eager
      // transport copies the message into shared memory here (runtime/comm/mpi_comm.cc).
      auto post_send = [&](const std::string& name, const Tensor& t, int dir, int to, int64_t tg) -> Status {
        const double s0 = MonotonicSeconds();
        transfers.sends.push_back({tg, it_j, q, t.numel() * 4, dir, to, s0 - clock_offset});
        PLANNER_RETURN_IF_ERROR(pipe->Send(t.data(), t.numel(), to, tg));
        const double s1 = MonotonicSeconds();
        trace.push_back({name, s0, s1 - s0, 1});
        t_comm += s1 - s0;
        keep.push_back(t);
        return Status::OK();
      };
      if (ev.kind == 'F') {
        Tensor x;
        std::vector<float> in, tg, all_in, all_tg;
        if (q == 0 || q == Q - 1) {
          for (int64_t smp = 0; smp < b; ++smp) {
            TeacherSample(model, L.run.seed, first_sample + smp, &in, &tg);
            all_in.insert(all_in.end(), in.begin(), in.end());
            all_tg.insert(all_tg.end(), tg.begin(), tg.end());
          }
        }
        if (q == 0) {
          x = Tensor::FromVector(in_shape(q), all_in).To(dev);
        } else {
          x = recv_pool.Get(in_shape(q), dev);
          double c0 = MonotonicSeconds();
          PLANNER_RETURN_IF_ERROR(pipe->Recv(x.data(), x.numel(), peer((q - 1 + Q) % Q, j), tag(q, 0)));
          transfers.recvs.push_back({tag(q, 0), peer((q - 1 + Q) % Q, j), c0 - clock_offset, MonotonicSeconds() - clock_offset});
          t_comm += MonotonicSeconds() - c0;
          trace.push_back({fmt::format("recv F{}.{}", q, j), c0, MonotonicSeconds() - c0, 1});
        }
        if (q == Q - 1) ch.ks.back()->SetTargets(Tensor::FromVector({static_cast<int64_t>(all_tg.size())}, all_tg));
        if (async) {
          stash[j] = snapshot();
          stash_sum[j] = checksum();
        }
        double c0 = MonotonicSeconds();
        if (opt.comm_only) {
          x = Tensor::Zeros(out_shape(q), dev);  // what the stage would send, without computing it
        } else {
          for (size_t i = 0; i < ch.ks.size(); ++i) {
            Tensor y;
            PLANNER_RETURN_IF_ERROR(ch.ks[i]->Forward(x, &y, &sv[i]));
            x = y;
          }
        }
        t_compute += MonotonicSeconds() - c0;
        trace.push_back({fmt::format("F{}", j), c0, MonotonicSeconds() - c0, 0});
        if (q == Q - 1 && !opt.comm_only) {
          std::vector<float> per_sample = x.ToVector();
          for (int64_t smp = 0; smp < b; ++smp) pass_loss[static_cast<size_t>(it_j - it)] += per_sample[static_cast<size_t>(smp)];
        } else if (q < Q - 1) {
          PLANNER_RETURN_IF_ERROR(post_send(fmt::format("send F{}.{} {}B", q + 1, j, x.numel() * 4), x, 0, peer((q + 1) % Q, j), tag(q + 1, 0)));
        }
      } else if (ev.kind == 'B') {
        Tensor dy;
        if (q == Q - 1) {
          dy = Tensor::Zeros({b, 1});
          for (int64_t smp = 0; smp < b; ++smp) dy.data()[smp] = 1.0f / static_cast<float>(B);  // d(mean loss) / d(sample loss)
          dy = dy.To(dev);
        } else {
          dy = recv_pool.Get(out_shape(q), dev);
          double c0 = MonotonicSeconds();
          PLANNER_RETURN_IF_ERROR(pipe->Recv(dy.data(), dy.numel(), peer((q + 1) % Q, j), tag(q + 1, 1)));
          transfers.recvs.push_back({tag(q + 1, 1), peer((q + 1) % Q, j), c0 - clock_offset, MonotonicSeconds() - clock_offset});
          t_comm += MonotonicSeconds() - c0;
          trace.push_back({fmt::format("recv B{}.{}", q, j), c0, MonotonicSeconds() - c0, 1});
        }
        std::vector<float> latest;
        if (async) {
          // Backward on the stashed version of this microbatch's forward, then back to the latest weights.
          latest = snapshot();
          const double latest_sum = checksum();
          restore(stash[j]);
          const double used = checksum();
          ++stash_count;
          stash_mismatch += used != stash_sum[j];
          stash_stale += latest_sum != stash_sum[j];
          for (auto& k : ch.ks) k->ZeroGrads();
        }
        double c0 = MonotonicSeconds();
        if (opt.comm_only) {
          dy = q > 0 ? Tensor::Zeros(in_shape(q), dev) : Tensor();
          if (final_backward) for (size_t i = 0; i < ch.ks.size(); ++i) enqueue(q, i);
        } else {
          for (size_t i = ch.ks.size(); i-- > 0;) {
            Tensor dx;
            PLANNER_RETURN_IF_ERROR(ch.ks[i]->BackwardInput(dy, &dx, &sv[i]));
            if (!split_w) {
              PLANNER_RETURN_IF_ERROR(ch.ks[i]->BackwardWeight(&sv[i]));
              if (final_backward) enqueue(q, i);
            }
            dy = dx;
          }
        }
        t_compute += MonotonicSeconds() - c0;
        if (async) {
          // Update now (no flush): gradients of this round summed over the stage's replicas, which run in lockstep.
          restore(latest);
          stash.erase(j);
          double a0 = MonotonicSeconds();
          if (L.stages[static_cast<size_t>(q)].replicas > 1) {
            PLANNER_RETURN_IF_ERROR(dp_comm->AllReduce(bucket.data(), grad_elems, ReduceOp::kSum));
          }
          t_comm += MonotonicSeconds() - a0;
          PLANNER_RETURN_IF_ERROR(optimizer.Step(params));
        }
        trace.push_back({fmt::format("B{}", j), c0, MonotonicSeconds() - c0, 0});
        if (q == 0 && jj == m - 1) pass_done[static_cast<size_t>(it_j - it)] = MonotonicSeconds() - t0;
        if (q > 0) {
          PLANNER_RETURN_IF_ERROR(post_send(fmt::format("send B{}.{} {}B", q - 1, j, dy.numel() * 4), dy, 1, peer((q - 1 + Q) % Q, j), tag(q, 1)));
        }
      } else {  // 'W': the weight gradients ZB-H1 deferred
        double c0 = MonotonicSeconds();
        for (size_t i = ch.ks.size(); i-- > 0;) {
          if (!opt.comm_only) PLANNER_RETURN_IF_ERROR(ch.ks[i]->BackwardWeight(&sv[i]));
          if (final_backward) enqueue(q, i);
        }
        t_compute += MonotonicSeconds() - c0;
        trace.push_back({fmt::format("W{}", j), c0, MonotonicSeconds() - c0, 0});
      }
    }
    double c0 = MonotonicSeconds();
    PLANNER_RETURN_IF_ERROR(pipe->FlushSends());
    // One flat bucket (as DDP's), so the gradients travel as one large message.
    if (overlap) {
      // Wait for the segments still in flight (the exposed part of the all-reduce).
      std::unique_lock<std::mutex> lk(red.mu);
      red.cv.wait(lk, [&] { return red.pending == 0; });
      PLANNER_RETURN_IF_ERROR(red.status);
    } else if (sync_dp && grad_elems > 0) {
      const double a0 = MonotonicSeconds();
      PLANNER_RETURN_IF_ERROR(dp_comm->AllReduce(bucket.data(), grad_elems, ReduceOp::kSum));
      transfers.allreduces.push_back({it, grad_elems * 4, a0 - clock_offset, MonotonicSeconds() - a0});
    }
    t_comm += MonotonicSeconds() - c0;
    trace.push_back({overlap ? "dp all-reduce (exposed wait)" : "dp all-reduce", c0, MonotonicSeconds() - c0, 1});
    if (overlap) {
      std::lock_guard<std::mutex> lk(red.mu);
      trace.push_back({"dp all-reduce busy", c0, red.busy_s, 2});  // summed segment time on the reducer thread
      red.busy_s = 0;
    }
    if (it == 0 && opt.dump_gradients && me.replica == 0 && me.tp_rank == 0) {
      fs::create_directories(fs::path(opt.run_dir) / "grads");
      for (Param* prm : params) {
        std::ofstream f(fs::path(opt.run_dir) / "grads" / (prm->name + ".bin"), std::ios::binary);
        std::vector<float> g = prm->grad.ToVector();
        f.write(reinterpret_cast<const char*>(g.data()), prm->grad.numel() * 4);
      }
    }
    if (it == 0 && opt.dump_gradients) {
      // The model's global gradient norm: sharded parameters summed over TP ranks, replicated ones once,
      // data-parallel replicas (equal after the all-reduce) once.
      double sq = 0;
      if (me.replica == 0) {
        for (Param* prm : params) {
          if (!prm->tp_sharded && me.tp_rank != 0) continue;
          std::vector<float> g = prm->grad.ToVector();
          for (float x : g) sq += static_cast<double>(x) * x;
        }
      }
      float sqf = static_cast<float>(sq);
      PLANNER_RETURN_IF_ERROR(world.AllReduce(&sqf, 1, ReduceOp::kSum));
      if (rank == 0) {
        std::ofstream f(fs::path(opt.run_dir) / "grad_norm.txt");
        f << fmt::format("{:.9e}\n", std::sqrt(static_cast<double>(sqf)));
      }
    }
    c0 = MonotonicSeconds();
    if (!async && !opt.comm_only) PLANNER_RETURN_IF_ERROR(optimizer.Step(params));
    t_compute += MonotonicSeconds() - c0;
    // Mean loss of the global batch: last-stage, tp-rank-0 ranks contribute their sum.
    if (async) {
      // Per iteration of the pass: losses summed over ranks, the time stage 0 finished the
      // iteration's last backward (max over ranks), and the pass's compute / communication spread evenly.
      std::vector<float> lf(pass_loss.begin(), pass_loss.end()), df(pass_done.begin(), pass_done.end());
      if (me.tp_rank != 0) std::fill(lf.begin(), lf.end(), 0.0f);
      PLANNER_RETURN_IF_ERROR(world.AllReduce(lf.data(), span, ReduceOp::kSum));
      PLANNER_RETURN_IF_ERROR(world.AllReduce(df.data(), span, ReduceOp::kMax));
      for (int64_t k = 0; k < span; ++k) {
        losses.push_back(lf[static_cast<size_t>(k)] / static_cast<double>(B));
        iter_s.push_back(df[static_cast<size_t>(k)] - (k > 0 ? df[static_cast<size_t>(k - 1)] : 0.0f));
        compute_s.push_back(t_compute / static_cast<double>(span));
        comm_s.push_back(t_comm / static_cast<double>(span));
        if (rank == 0 && !opt.quiet) LogNote(fmt::format("iteration {}: loss {:.5f}, {}", it + k + 1, losses.back(), FormatSeconds(iter_s.back())));
      }
      it += span - 1;
      peak_bytes = std::max(peak_bytes, static_cast<double>(GetMemoryStats(dev).peak_bytes));
    } else {
      float lsum = me.tp_rank == 0 ? static_cast<float>(pass_loss[0]) : 0.0f;
      PLANNER_RETURN_IF_ERROR(world.AllReduce(&lsum, 1, ReduceOp::kSum));
      float it_time = static_cast<float>(MonotonicSeconds() - t0);
      PLANNER_RETURN_IF_ERROR(world.AllReduce(&it_time, 1, ReduceOp::kMax));
      losses.push_back(lsum / static_cast<double>(B));
      iter_s.push_back(it_time);
      compute_s.push_back(t_compute);
      comm_s.push_back(t_comm);
      peak_bytes = std::max(peak_bytes, static_cast<double>(GetMemoryStats(dev).peak_bytes));
      if (rank == 0 && !opt.quiet) LogNote(fmt::format("iteration {}: loss {:.5f}, {}", it + 1, losses.back(), FormatSeconds(it_time)));
    }
    if (ckpt_every > 0 && ((it + 1) % ckpt_every == 0 || async)) {
      fs::create_directories(fs::path(opt.run_dir) / "ckpt");
      std::vector<float> state = optimizer.State();
      int64_t want = 0;
      for (Param* prm : params) want += prm->value.numel();
      int64_t header[3] = {it + 1, want, static_cast<int64_t>(state.size())};
      const fs::path final_path = fs::path(opt.run_dir) / "ckpt" / fmt::format("rank{}.bin", rank);
      const fs::path tmp = final_path.string() + ".tmp";
      {
        std::ofstream f(tmp, std::ios::binary);
        f.write(reinterpret_cast<const char*>(header), sizeof header);
        for (Param* prm : params) {
          std::vector<float> v = prm->value.ToVector();
          f.write(reinterpret_cast<const char*>(v.data()), prm->value.numel() * 4);
        }
        f.write(reinterpret_cast<const char*>(state.data()), static_cast<std::streamsize>(state.size() * 4));
        if (!f) return Status::Unavailable(fmt::format("{}: cannot write the checkpoint", tmp.string()));
      }
      fs::rename(tmp, final_path);
      if (rank == 0) {
        std::ofstream mcsv(fs::path(opt.run_dir) / "metrics.csv");
        mcsv << "iteration,loss,iteration_seconds\n";
        for (size_t i = 0; i < losses.size(); ++i) mcsv << fmt::format("{},{:.6f},{:.6f}\n", i + 1, losses[i], iter_s[i]);
      }
    }
  }
  if (async) {
    float counts[3] = {static_cast<float>(stash_count), static_cast<float>(stash_mismatch), static_cast<float>(stash_stale)};
    PLANNER_RETURN_IF_ERROR(world.AllReduce(counts, 3, ReduceOp::kSum));
    if (rank == 0) {
      std::ofstream f(fs::path(opt.run_dir) / "weight_stashing.txt");
      f << fmt::format("backward passes {}\nforward/backward on different weight versions {}\nbackward passes whose latest weights were newer than their stash {}\n",
                       counts[0], counts[1], counts[2]);
    }
  }
  // Summary over the iterations after warm-up.
  const size_t warm = static_cast<size_t>(std::min<int64_t>(L.run.warmup_iterations, std::max<int64_t>(0, iterations - 1)));
  auto tail = [&](const std::vector<double>& v) { return std::vector<double>(v.begin() + static_cast<long>(warm), v.end()); };
  const double it_med = Median(tail(iter_s)), comp_med = Median(tail(compute_s)), comm_med = Median(tail(comm_s));
  // Per-rank figures to everyone: compute, comm, peak memory.
  // Memory: the allocator's peak (parameters, gradients, the optimizer's moments, activations,
  // workspaces), on the rank's device.
  std::vector<float> mine = {static_cast<float>(comp_med), static_cast<float>(comm_med), static_cast<float>(peak_bytes / kGiB)};
  std::vector<float> all(static_cast<size_t>(3 * n));
  PLANNER_RETURN_IF_ERROR(world.AllGather(mine.data(), all.data(), 3));
  double busy = 0;
  for (int64_t r = 0; r < n; ++r) busy += all[static_cast<size_t>(3 * r)];
  RunSummary sum;
  sum.loss = losses;
  sum.iteration_s = iter_s;
  sum.median_iteration_s = it_med;
  sum.measured_bubble_fraction = it_med > 0 ? std::max(0.0, 1.0 - busy / (static_cast<double>(n) * it_med)) : 0;
  // Files: per-rank trace; rank 0 merges and writes metrics and the report.
  {
    std::ofstream f(fs::path(opt.run_dir) / fmt::format("trace.rank{}.json", rank));
    for (size_t i = 0; i < trace.size(); ++i) {
      f << fmt::format("{}{{\"name\": \"{}\", \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.1f}, \"dur\": {:.1f}}}\n", i ? "," : "",
                       trace[i].name, rank, trace[i].tid, (trace[i].start_s - clock_offset) * 1e6, trace[i].dur_s * 1e6);
    }
  }
  std::string transfers_md;
  PLANNER_RETURN_IF_ERROR(SummariseTransfers(world, L, transfers, static_cast<int64_t>(warm), &transfers_md));
  // Stop watching peers between two barriers: past the second one a rank may exit normally.
  PLANNER_RETURN_IF_ERROR(world.Barrier());
  EndPeerWatch();
  PLANNER_RETURN_IF_ERROR(world.Barrier());
  if (rank == 0) {
    std::ofstream t(fs::path(opt.run_dir) / "trace.json");
    t << "{\"traceEvents\": [\n";
    bool any = false;
    for (int64_t r = 0; r < n; ++r) {
      std::ifstream in(fs::path(opt.run_dir) / fmt::format("trace.rank{}.json", r));
      std::stringstream ss;
      ss << in.rdbuf();
      if (ss.str().empty()) continue;
      t << (any ? "," : "") << ss.str();
      any = true;
      t << fmt::format(",{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, \"args\": {{\"name\": \"rank {} (stage {})\"}}}}\n", r, r,
                       L.ranks[static_cast<size_t>(r)].stage);
    }
    t << "]}\n";
    std::ofstream mcsv(fs::path(opt.run_dir) / "metrics.csv");
    mcsv << "iteration,loss,iteration_seconds\n";
    for (size_t i = 0; i < losses.size(); ++i) mcsv << fmt::format("{},{:.6f},{:.6f}\n", i + 1, losses[i], iter_s[i]);
    std::string rep = fmt::format("# Run of {} on {} ranks (tp-pp-dp {}-{}-{}, {}, b={} x m={})\n\n", model.name, n, L.tp, L.pp, L.dp, ScheduleName(L.schedule), b, m);
    rep += fmt::format("| figure | measured (median of {} iterations after {} warm-up) | predicted |\n|---|---|---|\n", iter_s.size() - warm, warm);
    rep += fmt::format("| iteration | {} | {} |\n", FormatSeconds(it_med), FormatSeconds(L.predicted_iteration_s));
    rep += fmt::format("| bubble fraction | {:.1f}% | {:.1f}% |\n", 100 * sum.measured_bubble_fraction, 100 * L.predicted_bubble_fraction);
    if (opt.comm_only) {
      rep += "| loss | n/a: communication only (`--comm-only`: zeros instead of every layer, no optimizer) | |\n\n";
    } else {
      rep += fmt::format("| loss first -> last | {:.4f} -> {:.4f} | falls |\n\n", losses.front(), losses.back());
    }
    rep += "Memory: measured = the allocator's peak on the rank's device (parameters, gradients, optimizer state, "
           "activations, workspaces); predicted = the plan's, in the plan's dtype and bytes per parameter (the CPU kernels compute in fp32).\n\n";
    rep += "| rank | stage | compute per iteration | communication | idle | predicted compute (m x stage) | peak memory | predicted memory |\n"
           "|---|---|---|---|---|---|---|---|\n";
    for (int64_t r = 0; r < n; ++r) {
      double c = all[static_cast<size_t>(3 * r)], cm = all[static_cast<size_t>(3 * r + 1)];
      double rs_pred = 0, mem_pred = 0;  // the rank's chunks
      for (int64_t q = L.ranks[static_cast<size_t>(r)].stage; q < static_cast<int64_t>(L.stages.size()); q += p) {
        rs_pred += L.stages[static_cast<size_t>(q)].predicted_compute_s;
        mem_pred = std::max(mem_pred, L.stages[static_cast<size_t>(q)].predicted_peak_memory_bytes);
      }
      rep += fmt::format("| {} | {} | {} | {} | {} | {} | {:.4f} GiB | {:.4f} GiB |\n", r, L.ranks[static_cast<size_t>(r)].stage, FormatSeconds(c),
                         FormatSeconds(cm), FormatSeconds(std::max(0.0, it_med - c - cm)),
                         FormatSeconds(rs_pred * static_cast<double>(m)), all[static_cast<size_t>(3 * r + 2)], mem_pred / kGiB);
    }
    if (!transfers_md.empty()) {
      rep += "\n" + transfers_md;
      if (n > 1) rep += fmt::format("(Clock offsets to rank 0 estimated within {} at start.)\n\nTransport: {}.\n", FormatSeconds(clock_error), pipe->transport());
    }
    std::ofstream rf(fs::path(opt.run_dir) / "report.md");
    rf << rep;
  }
  if (out) *out = std::move(sum);
  return Status::OK();
}

}  // namespace planner
