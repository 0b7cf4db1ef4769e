// Layer profiling: times the runtime's own kernels (runtime/kernels) for
// every distinct layer signature of a model at each microbatch size and TP
// degree: warm-up, then repetitions until the median is stable or the
// budget runs out; CUDA events on GPUs, a monotonic clock on CPUs. Writes a
// Profile (spec/profile.h) whose layers follow the model's. docs/profiler.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/kernels/kernel.h"
#include "spec/model_spec.h"
#include "spec/profile.h"

namespace planner {

struct LayerProfileOptions {
  Device device = Device::kCpu;
  // The GEMM precision the layers are timed in (device_ops.h SetGemmPrecision; set for the profile's
  // duration and restored after), recorded as the profile's dtype.
  DType precision = DType::kFp32;
  int threads = 1;
  std::vector<int64_t> microbatches = {1};
  std::vector<int64_t> tps = {1};
  int warmup = 2;
  int min_repetitions = 20;
  int max_repetitions = 200;
  double budget_s = 2.0;           // per (signature, microbatch, tp) once min_repetitions are done
  int budget_floor = 5;            // timed repetitions at least before the budget may end a point
  double target_rel_error = 0.01;  // stop when the median's standard error / median is below this
  bool progress = true;
  int max_copies = 16;  // a signature shared by k layers is timed on min(k, this) instances in turn
  // ProfileModel times every point in `rounds` passes over all points, each with
  // 1/rounds of the repetitions and budget, and pools the samples: a burst of
  // host noise (or a peer rank still starting) lands in one round of one point
  // and the pooled median outvotes it. A point whose pass takes over 1/20 of a
  // round's budget is timed whole in the first round (TimeLayer's `whole`).
  int rounds = 3;
  // Called before every point of every round: under mpirun the ranks meet at a
  // barrier, so each point is timed while the other ranks time the same one.
  std::function<Status()> sync;
  std::string command;  // recorded in the profile
};

struct PassStats {
  double median_s = 0, min_s = 0, p10_s = 0, p90_s = 0;
};

struct LayerSamples {
  std::vector<double> forward_s, backward_input_s, backward_weight_s;  // one per timed repetition
};

struct LayerTiming {
  PassStats forward, backward_input, backward_weight, backward;  // backward = B + W per repetition
  int repetitions = 0;
  double peak_memory_bytes = 0;
  KernelFlops flops;
};

// Times one layer at (microbatch, tp) (a TP shard for tp > 1, its
// all-reduces left to the collective profile) on `copies` instances used in
// turn, so the weights of a signature shared by many layers rotate through
// the caches as in a real pass.
// `samples`, when given, receives every timed repetition (appended). With
// `whole`, a layer whose first pass takes over 1/20 of options.budget_s is
// timed with `whole`'s repetitions and budget instead (*used_whole = true):
// ProfileModel's first round passes its whole-profile settings so that slow
// layers are timed once rather than in rounds.
Status TimeLayer(const Layer& layer, int64_t microbatch, int64_t tp, const LayerProfileOptions& options,
                 LayerTiming* out, int copies = 1, LayerSamples* samples = nullptr,
                 const LayerProfileOptions* whole = nullptr, bool* used_whole = nullptr);

// Profiles every distinct signature of the model per (microbatch, tp), in
// options.rounds interleaved rounds.
// Returns Unavailable ("exit 130" path) when interrupted by Ctrl-C.
Status ProfileModel(const ModelSpec& model, const LayerProfileOptions& options, Profile* out);

// Where we run: "AMD EPYC 7B13 (2 threads)", or the CUDA device line.
std::string DescribeHost(Device device, int threads);

}  // namespace planner
