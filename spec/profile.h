// Profile: measured per-layer costs that the solver uses instead of the
// analytic ones. Written by `planner profile` and `planner import pipedream`;
// format in docs/formats.md. Layers form a DAG through `inputs` (a chain when
// every layer takes the previous one). Times are seconds per microbatch of
// the given size; bytes are per microbatch of `reference_microbatch`.
// Plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "spec/dtype.h"

namespace planner {

struct ProfileTiming {
  int64_t microbatch = 1;
  int64_t tp = 1;
  double forward_s = 0;
  double backward_s = 0;         // backward-input + backward-weight
  double backward_input_s = -1;  // -1: not measured separately
  double backward_weight_s = -1;
  double forward_spread_s = 0;   // p90 - p10 of the timed repetitions
  double backward_spread_s = 0;  // same, of backward-input + backward-weight
  // Measured by `planner profile` (0 when absent, e.g. imported profiles).
  double forward_min_s = 0, backward_input_min_s = 0, backward_weight_min_s = 0;
  int64_t repetitions = 0;
  double peak_memory_bytes = 0;  // allocator peak during one step of the layer
  double achieved_gflops = 0;    // kernel FLOPs (F + B + W) / (forward + backward) time
};

// A measured collective on one group size and topology level, with its
// alpha-beta fit: time(bytes) = alpha + bytes / algbw_asymptotic, and the
// bus bandwidth as nccl-tests defines it (cost-model-facts.md section 3).
struct CommCurve {
  std::string collective;  // all_reduce | all_gather | reduce_scatter | broadcast | send_recv | all_to_all
  std::string level;       // topology level the group spans ("node", "cluster")
  int64_t group_size = 2;
  std::string backend;  // mpi | nccl
  bool cold = false;    // measured with caches evicted before each operation
  double gap_s = 0;     // cold only: seconds each rank computed (registers only) before each operation's eviction
  double alpha_s = 0;
  double busbw_GBps =
      0;  // asymptotic bus bandwidth of the fit (decimal GB/s); 0: no usable fit (ignored by the solver)
  std::vector<std::pair<double, double>> points;  // (bytes, seconds)
};

// busbw / algbw for a collective on n ranks (nccl-tests PERFORMANCE.md).
double BusBandwidthFactor(const std::string& collective, int n);
// Weighted least squares of time = alpha + bytes * beta over the points
// (weights 1/time^2: relative error, so small and large sizes both count).
void FitAlphaBeta(const std::vector<std::pair<double, double>>& points, double* alpha_s, double* beta_s_per_byte);

struct ProfileLayer {
  std::string name;
  std::string desc;                 // module description (PipeDream: the PyTorch repr)
  std::string type;                 // layer type when profiled from a model file
  int64_t tp_allreduces = 0;        // TP all-reduces per pass (added by the solver from comm curves)
  double tp_allreduce_bytes = 0;    // bytes of one, at reference_microbatch
  std::vector<std::string> inputs;  // producer layer names; empty for a source
  double params_bytes = 0;
  double output_bytes = 0;  // at reference_microbatch
  double stash_bytes = 0;   // at reference_microbatch (PipeDream: = output_bytes)
  std::vector<ProfileTiming> timings;
};

struct Profile {
  std::string path;
  std::string digest;
  std::string model;
  DType dtype = DType::kFp32;  // the GEMM precision the layers were timed in (`dtype:`)
  std::string device;          // where it was measured
  std::string backend;         // "cuda", "cpu", "pipedream-import"
  std::string tool;            // tool and version that wrote it
  std::string command;         // command line that produced it
  std::string date;
  int64_t threads = 0;
  int64_t reference_microbatch = 1;
  std::vector<ProfileLayer> layers;
  std::vector<CommCurve> comm;

  // Which measured conditions a use wants (docs/cost_model.md section 3).
  enum class Conditions {
    kCold,          // cold before warm; among cold curves the shortest gap (pipeline sends)
    kAfterCompute,  // cold before warm; the longest gap (a gradient all-reduce after a backward)
    kWarm,          // warm before cold (a tensor-parallel all-reduce of the output just computed)
  };
  // The curve of the largest group on that level under those conditions.
  const CommCurve* FindComm(const std::string& collective, const std::string& level,
                            Conditions want = Conditions::kCold) const;

  // Index of layer `name`, or -1.
  int FindLayer(const std::string& name) const;
  // The timing of layer i at (microbatch, tp): exact match, else linear
  // scaling from the closest measured microbatch at that tp. Returns false
  // when the layer has no timing at that tp.
  bool TimingAt(size_t i, int64_t microbatch, int64_t tp, ProfileTiming* out) const;
};

Status LoadProfile(const std::string& path, Profile* out);
Status ParseProfile(const std::string& path, const std::string& text, Profile* out);
// YAML text of a profile (round-trips through ParseProfile).
std::string ProfileToYaml(const Profile& profile);
// A cycle of the layers' input edges (iterative depth-first search, so deep graphs cannot overflow
// the stack): {u, v} with v listing u as an input and u already on the search's path; nullopt for a
// DAG. `index` maps every input name to its layer's position (the caller has checked they all exist).
// The profile reader and the PipeDream importer both refuse a cycle through it, each citing its own file.
std::optional<std::pair<size_t, size_t>> FindInputCycle(const std::vector<ProfileLayer>& layers,
                                                        const std::map<std::string, size_t>& index);

}  // namespace planner
