#include "profiler/layer_profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "common/log.h"
#include "common/progress.h"
#include "common/units.h"
#include "planner_config.h"
#include "runtime/comm/nccl_comm.h"
#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/mixed_precision.h"

namespace planner {

namespace {

PassStats Stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto q = [&](double f) { return v[static_cast<size_t>(std::lround(f * static_cast<double>(v.size() - 1)))]; };
  PassStats s;
  s.min_s = v.front();
  s.p10_s = q(0.1);
  s.p90_s = q(0.9);
  size_t n = v.size();
  s.median_s = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

// Standard error of the median ~ 1.2533 sigma / sqrt(n), sigma from the IQR.
double RelError(std::vector<double> v) {
  if (v.size() < 4) return 1;
  std::sort(v.begin(), v.end());
  double iqr = v[v.size() * 3 / 4] - v[v.size() / 4];
  double med = v[v.size() / 2];
  return med > 0 ? 1.2533 * (iqr / 1.349) / std::sqrt(static_cast<double>(v.size())) / med : 1;
}

// Random input for the layer's first dimension of work: token ids for
// embeddings, N(0,1)-ish values otherwise.
Tensor MakeInput(const Layer& l, int64_t b, uint64_t seed) {
  std::vector<int64_t> shape = {b};
  shape.insert(shape.end(), l.in_shape.begin(), l.in_shape.end());
  Tensor x = Tensor::Zeros(shape);
  if (l.kind == LayerKind::kEmbedding) {
    int64_t vocab = l.attrs.Int("vocab", 1);
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data()[i] =
          static_cast<float>((seed * 2654435761u + static_cast<uint64_t>(i) * 40503u) % static_cast<uint64_t>(vocab));
  } else {
    FillUniform(&x, seed, 1.7f);
  }
  return x;
}

class Clock {
 public:
  explicit Clock(Device d) : cuda_(d == Device::kCuda) {
    if (cuda_) timer_ = std::make_unique<CudaTimer>();
  }
  void Start() {
    if (cuda_) timer_->Start();
    else t0_ = std::chrono::steady_clock::now();
  }
  double Stop() {
    if (cuda_) return timer_->StopSeconds();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  bool cuda_;
  std::chrono::steady_clock::time_point t0_;
  std::unique_ptr<CudaTimer> timer_;
};

std::string Today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string DescribeHost(Device device, int threads) {
  if (device == Device::kCuda) return CudaDescribeDevice(0) + ", " + NcclVersion();
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    const size_t start = colon == std::string::npos ? std::string::npos : line.find_first_not_of(" \t", colon + 1);
    if (line.rfind("model name", 0) == 0 && start != std::string::npos) {
      model = line.substr(start);
      break;
    }
  }
  return fmt::format("{} ({} thread{}, Eigen CPU kernels)", model, threads, threads == 1 ? "" : "s");
}

namespace {

// `copies` instances of the layer (a TP shard for tp > 1), seeded apart, storing weights and
// activations in `storage` as a run of that precision does (mixed_precision.h; fp32: unwrapped).
Status MakeKernels(const Layer& layer, int64_t tp, Device device, DType storage, int copies,
                   std::vector<std::unique_ptr<LayerKernel>>* kernels) {
  kernels->resize(static_cast<size_t>(std::max(1, copies)));
  for (size_t c = 0; c < kernels->size(); ++c) {
    KernelOptions ko;
    ko.device = device;
    ko.tp_size = tp;
    ko.tp_rank = 0;
    ko.seed = 1234 + c;
    PLANNER_RETURN_IF_ERROR(MakeKernel(layer, ko, &(*kernels)[c]));
    PLANNER_RETURN_IF_ERROR(WrapMixedPrecision(storage, layer.kind == LayerKind::kLoss, &(*kernels)[c]));
  }
  return Status::OK();
}

// The layer's input at microbatch b (the TP shard of the loss sees V / t logits), in the storage
// dtype but for token ids (exact: fp32); a loss gets its targets.
Tensor PrepareInput(const Layer& layer, int64_t b, int64_t tp, Device device, DType storage,
                    const std::vector<std::unique_ptr<LayerKernel>>& kernels) {
  Layer in_layer = layer;
  if (layer.kind == LayerKind::kLoss && tp > 1) in_layer.in_shape.back() /= tp;
  Tensor x = MakeInput(in_layer, b, 7).To(device);
  if (storage != DType::kFp32 && layer.kind != LayerKind::kEmbedding) x = x.Converted(storage);
  if (layer.kind == LayerKind::kLoss) {
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < layer.in_shape.size(); ++i) rows *= layer.in_shape[i];
    Tensor t = Tensor::Zeros({b * rows});
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(i % (layer.in_shape.back() / tp));
    for (auto& kc : kernels) kc->SetTargets(t.To(device));
  }
  return x;
}

using Deadline = decltype(std::chrono::steady_clock::now() + std::chrono::duration<double>(1.0));

struct PassTimes {
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;
  double total_s() const { return forward_s + backward_input_s + backward_weight_s; }
};

// One forward, backward-input and backward-weight pass of `k`, each timed; `dy` (the output
// gradient) is made on the first pass and reused.
Status TimePass(LayerKernel* k, const Tensor& x, Device device, Clock* clock, Tensor* dy, PassTimes* out) {
  // dy comes in y's dtype: the storage dtype between layers, fp32 after the loss.
  Saved s;
  Tensor y, dx;
  clock->Start();
  PLANNER_RETURN_IF_ERROR(k->Forward(x, &y, &s));
  out->forward_s = clock->Stop();
  if (dy->empty()) {
    Tensor host = Tensor::Zeros(y.shape());
    FillUniform(&host, 99, 1.0f);
    *dy = host.To(device);
    if (y.dtype() != DType::kFp32) *dy = dy->Converted(y.dtype());
  }
  clock->Start();
  PLANNER_RETURN_IF_ERROR(k->BackwardInput(*dy, &dx, &s));
  out->backward_input_s = clock->Stop();
  clock->Start();
  PLANNER_RETURN_IF_ERROR(k->BackwardWeight(&s));
  out->backward_weight_s = clock->Stop();
  return Status::OK();
}

// The timed repetitions of one point: F, B, W and B + W per repetition.
struct Repetitions {
  std::vector<double> f, bi, bw, bb;
  void Add(const PassTimes& t) {
    f.push_back(t.forward_s);
    bi.push_back(t.backward_input_s);
    bw.push_back(t.backward_weight_s);
    bb.push_back(t.backward_input_s + t.backward_weight_s);
  }
  // Stable after the minimum, or out of budget after the floor (large layers).
  bool Done(const LayerProfileOptions& o, Deadline deadline) const {
    const int n = static_cast<int>(f.size());
    std::vector<double> total(f.size());
    for (size_t i = 0; i < f.size(); ++i) total[i] = f[i] + bb[i];
    if (n >= o.min_repetitions && RelError(total) < o.target_rel_error) return true;
    return n >= std::min(o.budget_floor, o.min_repetitions) && std::chrono::steady_clock::now() > deadline;
  }
};

}  // namespace

Status TimeLayer(const Layer& layer, int64_t b, int64_t tp, const LayerProfileOptions& round_options, LayerTiming* out,
                 int copies, LayerSamples* samples, const LayerProfileOptions* whole, bool* used_whole) {
  const LayerProfileOptions* cur = &round_options;  // switches to `whole` for a slow layer (below)
  const Device device = round_options.device;
  // `copies` instances used round robin: their weights rotate through the
  // caches as the model's equal layers do in a real pass.
  std::vector<std::unique_ptr<LayerKernel>> kernels;
  const DType storage = StorageDType(round_options.precision);
  PLANNER_RETURN_IF_ERROR(MakeKernels(layer, tp, device, storage, copies, &kernels));
  const Tensor x = PrepareInput(layer, b, tp, device, storage, kernels);
  Clock clock(device);
  Repetitions reps;
  Tensor dy;
  Deadline deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cur->budget_s);
  if (used_whole) *used_whole = false;
  ResetPeakMemory(device);
  const int64_t base = GetMemoryStats(device).current_bytes;
  // Warm-up: o.warmup passes, and every rotating instance once while warming stays cheap (its first
  // pass touches fresh weight and gradient pages; for a layer whose passes take 10s of ms that cost
  // is a small share of a pass and the median absorbs it).
  constexpr double kCheapWarmupSeconds = 0.02;
  int warm = 0;
  double warm_s = 0;
  for (int rep = 0; static_cast<int>(reps.f.size()) < cur->max_repetitions; ++rep) {
    if (Interrupted()) return Status::Unavailable("interrupted");
    PassTimes t;
    PLANNER_RETURN_IF_ERROR(
        TimePass(kernels[static_cast<size_t>(rep) % kernels.size()].get(), x, device, &clock, &dy, &t));
    // A pass longer than 1/20 of a round's budget: rounds would mostly repeat warm-ups and kernel
    // set-up, and 20 such passes already span a burst of noise, so this point is timed whole now.
    if (rep == 0 && whole != nullptr && t.total_s() > cur->budget_s / 20) {
      cur = whole;
      deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cur->budget_s);
      if (used_whole) *used_whole = true;
    }
    if (warm < cur->warmup || (warm < static_cast<int>(kernels.size()) && warm_s < kCheapWarmupSeconds)) {
      ++warm;
      warm_s += t.total_s();
      continue;
    }
    reps.Add(t);
    if (reps.Done(*cur, deadline)) break;
  }
  out->forward = Stats(reps.f);
  out->backward_input = Stats(reps.bi);
  out->backward_weight = Stats(reps.bw);
  out->backward = Stats(reps.bb);
  out->repetitions = static_cast<int>(reps.f.size());
  if (samples) {
    samples->forward_s.insert(samples->forward_s.end(), reps.f.begin(), reps.f.end());
    samples->backward_input_s.insert(samples->backward_input_s.end(), reps.bi.begin(), reps.bi.end());
    samples->backward_weight_s.insert(samples->backward_weight_s.end(), reps.bw.begin(), reps.bw.end());
  }
  out->peak_memory_bytes = static_cast<double>(GetMemoryStats(device).peak_bytes - base);
  out->flops = kernels.front()->Flops(b);
  return Status::OK();
}

namespace {

// The model's distinct layer signatures, in first-seen order.
struct Signatures {
  std::vector<size_t> first_of;   // per signature: its first layer
  std::vector<size_t> layer_sig;  // per layer: its signature
  std::vector<int> copies;        // per signature: how many layers share it
};

Signatures DistinctSignatures(const ModelSpec& m) {
  Signatures s;
  std::map<std::string, size_t> sig_index;
  s.layer_sig.resize(m.layers.size());
  for (size_t i = 0; i < m.layers.size(); ++i) {
    auto [it, fresh] = sig_index.emplace(m.layers[i].signature, s.first_of.size());
    if (fresh) s.first_of.push_back(i);
    s.layer_sig[i] = it->second;
  }
  s.copies.assign(s.first_of.size(), 0);
  for (size_t i = 0; i < m.layers.size(); ++i) ++s.copies[s.layer_sig[i]];
  return s;
}

struct Point {
  int64_t b, tp;
};

struct Measured {  // one (signature, point) over the rounds
  LayerSamples samples;
  double peak_memory_bytes = 0;
  KernelFlops flops;
  bool whole = false;  // timed whole in round 0
};

// One round's share of the options: 1/rounds of the repetitions and budget. The stop rule's
// target relative error is per round; sqrt(rounds) looser, so the pooled median meets o's.
LayerProfileOptions PerRound(const LayerProfileOptions& o, int rounds) {
  LayerProfileOptions r = o;
  r.min_repetitions = std::max(1, (o.min_repetitions + rounds - 1) / rounds);
  r.max_repetitions = std::max(r.min_repetitions, (o.max_repetitions + rounds - 1) / rounds);
  r.budget_s = o.budget_s / rounds;
  r.budget_floor = std::max(1, (o.budget_floor + rounds - 1) / rounds);
  r.target_rel_error = o.target_rel_error * std::sqrt(static_cast<double>(rounds));
  return r;
}

// Every point of every signature timed in o.rounds passes over all points; the samples are
// pooled in measured[sig][point].
Status TimeAllPoints(const ModelSpec& m, const LayerProfileOptions& o, const Signatures& sigs,
                     const std::vector<Point>& points, std::vector<std::vector<Measured>>* measured) {
  const int rounds = std::max(1, o.rounds);
  const LayerProfileOptions per_round = PerRound(o, rounds);
  measured->assign(sigs.first_of.size(), std::vector<Measured>(points.size()));
  Progress progress("profile", static_cast<int>(sigs.first_of.size() * points.size()) * rounds);
  int step = 0;
  for (int round = 0; round < rounds; ++round) {
    for (size_t s = 0; s < sigs.first_of.size(); ++s) {
      const Layer& l = m.layers[sigs.first_of[s]];
      for (size_t pi = 0; pi < points.size(); ++pi) {
        const Point& pt = points[pi];
        Measured& me = (*measured)[s][pi];
        if (o.progress)
          progress.Update(step, fmt::format("{} b={} tp={} (round {} of {})", LayerKindName(l.kind), pt.b, pt.tp,
                                            round + 1, rounds));
        ++step;
        if (o.sync) PLANNER_RETURN_IF_ERROR(o.sync());  // on every rank for every point, skipped or not
        if (me.whole) continue;
        // A layer that is not sharded runs whole on every TP rank.
        const int64_t kernel_tp = l.tp_shardable ? pt.tp : 1;
        LayerTiming lt;
        Status st = TimeLayer(l, pt.b, kernel_tp, per_round, &lt, std::min(sigs.copies[s], o.max_copies), &me.samples,
                              rounds > 1 && round == 0 ? &o : nullptr, &me.whole);
        if (!st.ok()) {
          if (Interrupted()) return Status::Unavailable("interrupted by Ctrl-C; no profile written");
          return st.WithContext(
              fmt::format("layer '{}' ({}) at microbatch {} tp {}", l.name, LayerKindName(l.kind), pt.b, pt.tp));
        }
        me.peak_memory_bytes = std::max(me.peak_memory_bytes, lt.peak_memory_bytes);
        me.flops = lt.flops;
      }
    }
  }
  progress.Done();
  return Status::OK();
}

// A point's profile entry from its pooled samples.
ProfileTiming PooledTiming(const Measured& me, const Point& pt) {
  const LayerSamples& ls = me.samples;
  std::vector<double> bb(ls.forward_s.size());
  for (size_t i = 0; i < bb.size(); ++i) bb[i] = ls.backward_input_s[i] + ls.backward_weight_s[i];
  const PassStats f = Stats(ls.forward_s), bi = Stats(ls.backward_input_s), bw = Stats(ls.backward_weight_s),
                  b = Stats(bb);
  ProfileTiming t;
  t.microbatch = pt.b;
  t.tp = pt.tp;
  t.forward_s = f.median_s;
  t.backward_input_s = bi.median_s;
  t.backward_weight_s = bw.median_s;
  t.backward_s = b.median_s;
  t.forward_spread_s = f.p90_s - f.p10_s;
  t.backward_spread_s = b.p90_s - b.p10_s;
  t.forward_min_s = f.min_s;
  t.backward_input_min_s = bi.min_s;
  t.backward_weight_min_s = bw.min_s;
  t.repetitions = static_cast<int>(ls.forward_s.size());
  t.peak_memory_bytes = me.peak_memory_bytes;
  const KernelFlops& fl = me.flops;
  const double sec = t.forward_s + t.backward_s;
  t.achieved_gflops = sec > 0 ? (fl.forward + fl.backward_input + fl.backward_weight) / sec / 1e9 : 0;
  return t;
}

// Bytes of one element as the profiled kernels store weights and activations: the storage dtype of
// the precision (fp32 runs fp32; bf16 and fp8 runs bf16; fp16 runs fp16).
double KernelElementBytes(DType precision) { return DTypeBytes(StorageDType(precision)); }

// The profile's layer entry for model layer i; sizes in the kernels' storage dtype at the reference microbatch.
ProfileLayer ProfileLayerOf(const ModelSpec& m, size_t i, double bref, DType precision,
                            std::vector<ProfileTiming> timings) {
  const Layer& l = m.layers[i];
  ProfileLayer pl;
  pl.name = l.name;
  pl.type = LayerKindName(l.kind);
  pl.desc = l.signature;
  if (i > 0) pl.inputs = {m.layers[i - 1].name};
  pl.params_bytes = KernelElementBytes(precision) * l.params;
  const double scale = KernelElementBytes(precision) / DTypeBytes(m.dtype);
  pl.output_bytes = bref * (l.kind == LayerKind::kLoss ? 4.0 : l.out_bytes * scale);
  pl.stash_bytes = bref * l.stash_bytes * scale;
  pl.tp_allreduces = l.tp_allreduces_fwd;
  pl.tp_allreduce_bytes = bref * l.tp_allreduce_bytes * scale;
  pl.timings = std::move(timings);
  return pl;
}

}  // namespace

namespace {
// The process's GEMM precision for one profile, restored after (the profiler may run inside tests).
class GemmPrecisionScope {
 public:
  explicit GemmPrecisionScope(DType p) : before_(GemmPrecision()) { SetGemmPrecision(p); }
  ~GemmPrecisionScope() { SetGemmPrecision(before_); }

 private:
  DType before_;
};
}  // namespace

Status ProfileModel(const ModelSpec& m, const LayerProfileOptions& o, Profile* out) {
  KeepFreedHostMemory();  // the runtime's host memory policy, so kernels are timed as they run
  SetCpuThreads(o.threads);
  GemmPrecisionScope precision(o.precision);
  const Signatures sigs = DistinctSignatures(m);
  std::vector<Point> points;
  for (int64_t tp : o.tps)
    for (int64_t b : o.microbatches) points.push_back({b, tp});
  std::vector<std::vector<Measured>> measured;
  PLANNER_RETURN_IF_ERROR(TimeAllPoints(m, o, sigs, points, &measured));
  // timings[sig][point], from the pooled samples
  std::vector<std::vector<ProfileTiming>> timings(sigs.first_of.size());
  for (size_t s = 0; s < sigs.first_of.size(); ++s) {
    for (size_t pi = 0; pi < points.size(); ++pi) timings[s].push_back(PooledTiming(measured[s][pi], points[pi]));
  }
  Profile p;
  p.model = m.name;
  p.dtype =
      o.precision;  // the GEMM precision timed (fp32: TF32 GEMMs on CUDA); the solver warns when the model's differs
  p.device = DescribeHost(o.device, o.threads);
  p.backend = DeviceName(o.device);
  p.tool = std::string("planner ") + PLANNER_VERSION;
  p.command = o.command;
  p.date = Today();
  p.threads = o.threads;
  p.reference_microbatch = o.microbatches.front();
  const double bref = static_cast<double>(p.reference_microbatch);
  for (size_t i = 0; i < m.layers.size(); ++i)
    p.layers.push_back(ProfileLayerOf(m, i, bref, o.precision, timings[sigs.layer_sig[i]]));
  *out = std::move(p);
  return Status::OK();
}

}  // namespace planner
