// planner profile MODEL [--device cpu|cuda|auto] [--precision fp32|bf16|fp16|fp8] [--cluster FILE] [--threads N]
//                       [--microbatch-sizes 1,2] [--tp 1,2] [-o FILE]
// planner profile --comm [--max-bytes 16MiB] [-o FILE]            (under mpirun / srun, two or more ranks)
#include <cstdio>
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "common/edit_distance.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/units.h"
#include "dp_solver/cost_model.h"
#include "planner/commands.h"
#include "planner/output_guard.h"
#include "profiler/comm_profiler.h"
#include "runtime/comm/nccl_comm.h"
#include "profiler/layer_profiler.h"
#include "profiler/peaks.h"
#include "runtime/kernels/cuda_api.h"
#include "spec/cluster_spec.h"
#include "spec/model_spec.h"

namespace planner {

namespace {

struct ProfileArgs {
  std::string model, output, device = "auto";
  std::string precision, cluster;  // --precision (default: the model's), --cluster (the peak to compare with)
  int threads = 1;
  std::vector<int64_t> microbatches, tps;
  double budget_s = 2.0;
  int min_reps = 20, warmup = 2, rounds = 3;
  bool comm = false;
  bool force = false;  // -o may replace a file the planner did not write
  std::string max_bytes = "16M", min_bytes = "8";
  int iterations = 20;
  std::vector<std::string> collectives;
  double timeout_s = 120;
  std::vector<std::string> caches;  // --cache: one set of curves per mode (default warm)
  std::vector<int> gaps_ms;         // --gap-ms: one set of curves per gap
};

std::string CommandLine(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

Status RunComm(const ProfileArgs& a, const std::string& cmdline) {
  if (!a.model.empty())
    return Status::InvalidArgument("--comm profiles collectives only; profile the model's layers in a separate run");
  PLANNER_RETURN_IF_ERROR(
      CheckReplaceable("-o", a.output.empty() ? "comm.profile.yaml" : a.output, OutputKind::kProfile, a.force));
  const std::vector<std::string> caches = a.caches.empty() ? std::vector<std::string>{"warm"} : a.caches;
  for (const auto& c : caches) {
    if (c != "warm" && c != "cold")
      return Status::InvalidArgument(fmt::format("--cache: unknown value '{}'; use warm, cold or warm,cold", c));
  }
  const bool any_cold = std::find(caches.begin(), caches.end(), "cold") != caches.end();
  for (int g : a.gaps_ms) {
    if (g > 0 && !any_cold)
      return Status::InvalidArgument("--gap-ms applies to cold-cache timing only; add --cache cold");
  }
  // The sizes are checked before MPI starts: a bad flag is a usage error on any launch.
  auto lo = ParseByteSize(a.min_bytes), hi = ParseByteSize(a.max_bytes);
  if (!lo || !hi)
    return Status::InvalidArgument(
        "--min-bytes / --max-bytes: sizes like 8, 64K, 16M (binary suffixes, as nccl-tests -b / -e)");
  if (*lo < 1 || *hi > (uint64_t{1} << 34) || *lo > *hi) {
    return Status::InvalidArgument(
        fmt::format("--min-bytes {} / --max-bytes {}: need 1 B <= min <= max <= 16G", a.min_bytes, a.max_bytes));
  }
  if (!LaunchedUnderMpi()) {
    return Status::InvalidArgument(
        MpiBuilt() ? "--comm needs two or more ranks: mpirun -np 2 build/planner/planner profile --comm"
                   : "--comm needs MPI, and this build has none; install libopenmpi-dev and rebuild");
  }
  std::unique_ptr<Communicator> world;
  PLANNER_RETURN_IF_ERROR(MakeMpiWorld(&world));
  world->set_timeout_seconds(a.timeout_s);
  CommProfileOptions o;
  o.min_bytes = static_cast<int64_t>(*lo);
  o.max_bytes = static_cast<int64_t>(*hi);
  o.iterations = a.iterations;
  if (!a.collectives.empty()) o.collectives = a.collectives;
  for (const auto& c : o.collectives) {
    if (c != "all_reduce" && c != "all_gather" && c != "reduce_scatter" && c != "broadcast" && c != "send_recv" &&
        c != "all_to_all") {
      return Status::InvalidArgument("--collectives: unknown '" + c +
                                     "'; use all_reduce, all_gather, reduce_scatter, broadcast, send_recv, all_to_all");
    }
  }
  // GPU ranks: NCCL over the MPI bootstrap (one GPU per node-local rank); CPU ranks: MPI.
  std::unique_ptr<Communicator> nccl;
  std::string why;
  const bool want_gpu = a.device == "cuda" || (a.device == "auto" && CudaDeviceCount(&why) > 0 && NcclBuilt());
  if (want_gpu) {
    int local_rank = 0, local_size = 1, nodes = 1;
    PLANNER_RETURN_IF_ERROR(MpiNodeLayout(*world, &local_rank, &local_size, &nodes));
    PLANNER_RETURN_IF_ERROR(MakeNcclComm(world.get(), local_rank, &nccl));
    nccl->set_timeout_seconds(a.timeout_s);
  } else if (a.device != "cpu" && a.device != "auto") {
    return Status::InvalidArgument(fmt::format("--device: unknown value '{}'; use cpu, cuda or auto", a.device));
  }
  std::vector<CommRow> rows;
  Profile p;
  const bool root = world->rank() == 0;
  auto print = [&](const std::string& line) {
    if (root) std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  print("# transport: " + (nccl ? nccl->transport() : world->transport()));
  // One set of curves per cache mode, and per gap for cold ones.
  for (const auto& cache : caches) {
    o.cold = cache == "cold";
    for (int g : !o.cold || a.gaps_ms.empty() ? std::vector<int>{0} : a.gaps_ms) {
      o.gap_s = static_cast<double>(g) / 1000.0;  // written shortest: 5 ms as 0.005
      if (nccl) PLANNER_RETURN_IF_ERROR(ProfileCollectives(*nccl, o, &rows, &p.comm, print, world.get()));
      else PLANNER_RETURN_IF_ERROR(ProfileCollectives(*world, o, &rows, &p.comm, print));
    }
  }
  if (!root) return Status::OK();
  int64_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  p.model = "";
  p.device = (nccl ? DescribeHost(Device::kCuda, 1) : DescribeHost(Device::kCpu, 1)) +
             fmt::format(", {} ranks", world->size());
  p.backend = nccl ? "nccl" : world->backend();
  p.tool = "planner profile --comm over " + (nccl ? nccl->transport() : world->transport());
  p.command = cmdline;
  std::string out = a.output.empty() ? "comm.profile.yaml" : a.output;
  PLANNER_RETURN_IF_ERROR(WriteFileAtomic(out, ProfileToYaml(p)));
  LogNote(
      fmt::format("wrote {}: {} curves, {} measurements, {} wrong results", out, p.comm.size(), rows.size(), wrong));
  if (wrong > 0)
    return Status::CommError(fmt::format("{} collective results were wrong; the communicator is broken", wrong));
  return Status::OK();
}

// The precision to time in: --precision, else the model file's; FP8 on CUDA needs a device that has it.
Status ChoosePrecision(const ProfileArgs& a, const ModelSpec& model, Device device, DType* out) {
  *out = model.dtype;
  if (!a.precision.empty() && !ParseDType(a.precision, out)) {
    return Status::InvalidArgument(fmt::format("--precision: unknown value '{}'{}; use fp32, bf16, fp16 or fp8",
                                               a.precision, DidYouMean(a.precision, {"bf16", "fp16", "fp8", "fp32"})));
  }
  if (*out == DType::kFp8 && device == Device::kCuda && !CudaSupportsFp8(0)) {
    const int cc = CudaComputeCapability(0);
    return Status::NotSupported(fmt::format(
        "{}fp8: {} (compute capability {}.{}) has no FP8 tensor cores (8.9 or newer: Ada, Hopper); "
        "profile with --precision bf16",
        a.precision.empty() ? a.model + ": precision " : "--precision ", CudaDeviceName(0), cc / 10, cc % 10));
  }
  return Status::OK();
}

// The dense peak the GEMM-bound layers are compared with: --cluster's gpu.peak_tflops for the precision
// (tf32 first for fp32 on CUDA), else the published table for a CUDA device; a CPU has none of its own.
Status ChoosePeak(const ProfileArgs& a, Device device, DType precision, DevicePeak* out) {
  if (!a.cluster.empty()) {
    ClusterSpec c;
    PLANNER_RETURN_IF_ERROR(LoadClusterSpec(a.cluster, &c));
    const auto tf32 = c.peak_tflops.find("tf32");
    const bool use_tf32 = precision == DType::kFp32 && device == Device::kCuda && tf32 != c.peak_tflops.end();
    out->tflops = use_tf32 ? tf32->second : c.PeakFlops(precision) / 1e12;
    out->source = out->tflops > 0
                      ? fmt::format("{} gpu.peak_tflops.{}", a.cluster, use_tf32 ? "tf32" : DTypeName(precision))
                      : fmt::format("{} has no gpu.peak_tflops.{}", a.cluster, DTypeName(precision));
    return Status::OK();
  }
  if (device == Device::kCuda) {
    *out = PublishedGpuPeak(CudaDeviceName(0), CudaComputeCapability(0), precision);
  } else {
    *out = {0,
            "no published peak for this CPU; pass --cluster with its gpu.peak_tflops (e.g. "
            "configs/clusters/local-cpu.yaml)"};
  }
  return Status::OK();
}

// Each GEMM-bound layer's (matrix FLOPs in the spec) achieved rate against the peak, per point.
void PrintGemmRates(const ModelSpec& model, const Profile& p, DType precision, const DevicePeak& peak) {
  if (peak.tflops > 0) {
    std::printf("\nGEMM-bound layers in %s against the dense %s peak of %.1f TFLOP/s (%s):\n", DTypeName(precision),
                DTypeName(precision), peak.tflops, peak.source.c_str());
  } else {
    std::printf("\nGEMM-bound layers in %s: achieved rates only; no peak known (%s)\n", DTypeName(precision),
                peak.source.c_str());
  }
  std::printf("%-22s %6s %4s %12s %10s\n", "layer type", "b", "tp", "TFLOP/s", "% of peak");
  std::vector<std::string> printed;
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& l = model.layers[i];
    if (l.fwd_flops <= 0 || std::find(printed.begin(), printed.end(), l.signature) != printed.end()) continue;
    printed.push_back(l.signature);
    for (const auto& t : p.layers[i].timings) {
      const double tflops = t.achieved_gflops / 1e3;
      const std::string pct = peak.tflops > 0 ? fmt::format("{:.1f}", 100 * tflops / peak.tflops) : "-";
      std::printf("%-22s %6lld %4lld %12.2f %10s\n", LayerKindName(l.kind), static_cast<long long>(t.microbatch),
                  static_cast<long long>(t.tp), tflops, pct.c_str());
    }
  }
}

}  // namespace

Runner RegisterProfile(CLI::App& app, int argc, char** argv) {
  auto* cmd =
      app.add_subcommand("profile", "time every layer's kernels, or the collectives (--comm), and write a profile");
  auto a = std::make_shared<ProfileArgs>();
  cmd->add_option("model", a->model, "model.yaml to profile");
  cmd->add_option("-o,--output", a->output,
                  "profile to write (default: <model name>.profile.yaml, comm.profile.yaml with --comm)");
  cmd->add_option("--device", a->device, "cpu, cuda or auto (CUDA when a device is present)");
  cmd->add_option("--precision", a->precision,
                  "fp32, bf16, fp16 or fp8: the GEMM precision to time in (default: the model file's precision)");
  cmd->add_option(
      "--cluster", a->cluster,
      "cluster.yaml whose gpu.peak_tflops the GEMM rates are compared with (default: the published table for a GPU)");
  cmd->add_option("--threads", a->threads, "CPU threads of the kernels")->check(CLI::Range(1, 256));
  cmd->add_option("--microbatch-sizes", a->microbatches,
                  "microbatch sizes to time (the first is the profile's reference)")
      ->delimiter(',');
  cmd->add_option("--tp", a->tps, "tensor-parallel degrees to time (shards)")->delimiter(',');
  cmd->add_option("--budget-seconds", a->budget_s,
                  "time budget per layer and point once the minimum repetitions are done")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--min-repetitions", a->min_reps, "timed repetitions at least")->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", a->warmup, "untimed repetitions first")->check(CLI::Range(0, 1000));
  cmd->add_option("--rounds", a->rounds,
                  "passes over all points, each with 1/rounds of the repetitions; samples pooled (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--comm", a->comm, "profile collectives (run under mpirun / srun with two or more ranks)");
  cmd->add_flag("--force", a->force, "let -o replace a file the planner did not write");
  cmd->add_option("--min-bytes", a->min_bytes, "--comm: smallest size (default 8)");
  cmd->add_option("--max-bytes", a->max_bytes, "--comm: largest size (default 16M)");
  cmd->add_option("--iterations", a->iterations, "--comm: timed iterations per size")->check(CLI::Range(1, 100000));
  cmd->add_option("--collectives", a->collectives,
                  "--comm: subset of all_reduce,all_gather,reduce_scatter,broadcast,send_recv,all_to_all")
      ->delimiter(',');
  cmd->add_option("--timeout", a->timeout_s, "--comm: seconds before a stuck collective is an error")
      ->check(CLI::PositiveNumber);
  cmd->add_option(
         "--cache", a->caches,
         "--comm: warm (back to back, as nccl-tests), cold (caches evicted before each operation, as after a training "
         "step's "
         "compute) or warm,cold (both: the solver times tensor-parallel all-reduces on warm curves, the rest on cold)")
      ->delimiter(',');
  cmd->add_option("--gap-ms", a->gaps_ms,
                  "--comm --cache cold: milliseconds of compute (in registers) before each operation's eviction, as a "
                  "backward before its "
                  "gradient all-reduce; a list (0,20) takes the curves once per gap (default 0)")
      ->delimiter(',')
      ->check(CLI::Range(0, 10000));
  const std::string cmdline = CommandLine(argc, argv);
  return [a, cmdline]() -> Status {
    InstallInterruptHandler();
    if (a->comm) return RunComm(*a, cmdline);
    if (a->model.empty())
      return Status::InvalidArgument(
          "profile: give a model file (planner profile configs/models/tiny-gpt.yaml) or --comm");
    LayerProfileOptions o;
    if (a->device == "cpu") {
      o.device = Device::kCpu;
    } else if (a->device == "cuda" || a->device == "auto") {
      std::string why;
      int n = CudaDeviceCount(&why);
      if (n > 0) {
        o.device = Device::kCuda;
      } else if (a->device == "cuda") {
        return Status::Unavailable(fmt::format("--device cuda: {}; use --device cpu", why));
      } else {
        o.device = Device::kCpu;
        LogNote(fmt::format("--device auto: {}; profiling on the CPU", why));
      }
    } else {
      return Status::InvalidArgument(fmt::format("--device: unknown value '{}'; use cpu, cuda or auto", a->device));
    }
    ModelSpec model;
    PLANNER_RETURN_IF_ERROR(LoadModelSpec(a->model, &model));
    PLANNER_RETURN_IF_ERROR(CheckReplaceable("-o", a->output.empty() ? model.name + ".profile.yaml" : a->output,
                                             OutputKind::kProfile, a->force));
    PLANNER_RETURN_IF_ERROR(ChoosePrecision(*a, model, o.device, &o.precision));
    DevicePeak peak;
    PLANNER_RETURN_IF_ERROR(ChoosePeak(*a, o.device, o.precision, &peak));
    o.threads = a->threads;
    o.microbatches = a->microbatches.empty() ? std::vector<int64_t>{1} : a->microbatches;
    o.tps = a->tps.empty() ? std::vector<int64_t>{1} : a->tps;
    for (int64_t b : o.microbatches) {
      if (b < 1 || b > 65536)
        return Status::InvalidArgument(fmt::format("--microbatch-sizes {}: sizes must be between 1 and 65536", b));
    }
    for (int64_t t : o.tps) {
      if (t < 1 || t > 1024)
        return Status::InvalidArgument(fmt::format("--tp {}: degrees must be between 1 and 1024", t));
      if (!TpDegreeValid(model, t)) {
        return Status::InvalidArgument(fmt::format(
            "--tp {}: it does not divide the heads / ffn / vocabulary of {}; choose a divisor", t, a->model));
      }
    }
    o.budget_s = a->budget_s;
    o.min_repetitions = a->min_reps;
    o.warmup = a->warmup;
    o.rounds = a->rounds;
    o.command = cmdline;
    // Under mpirun every rank profiles at the same time (the conditions of a
    // multi-rank run on shared cores and memory); rank 0 writes the file.
    std::unique_ptr<Communicator> world;
    if (LaunchedUnderMpi()) {
      PLANNER_RETURN_IF_ERROR(MakeMpiWorld(&world));
      if (world->rank() != 0) o.progress = false;
      o.sync = [&world] { return world->Barrier(); };
    }
    Profile p;
    Status s = ProfileModel(model, o, &p);
    if (!s.ok()) return Interrupted() ? Status::Unavailable("interrupted by Ctrl-C; no profile written") : s;
    if (world) {
      PLANNER_RETURN_IF_ERROR(world->Barrier());
      if (world->rank() != 0) return Status::OK();
      p.device += fmt::format(", {} ranks profiling at once", world->size());
    }
    std::string out = a->output.empty() ? model.name + ".profile.yaml" : a->output;
    PLANNER_RETURN_IF_ERROR(WriteFileAtomic(out, ProfileToYaml(p)));
    std::printf("%-22s %6s %4s %12s %12s %12s %10s %8s\n", "layer type", "b", "tp", "fwd (ms)", "bwd-in (ms)",
                "bwd-w (ms)", "GFLOP/s", "reps");
    std::vector<std::string> printed;
    for (size_t i = 0; i < p.layers.size(); ++i) {
      const auto& l = model.layers[i];
      if (std::find(printed.begin(), printed.end(), l.signature) != printed.end()) continue;
      printed.push_back(l.signature);
      for (const auto& t : p.layers[i].timings) {
        std::printf("%-22s %6lld %4lld %12.4f %12.4f %12.4f %10.2f %8lld\n", LayerKindName(l.kind),
                    static_cast<long long>(t.microbatch), static_cast<long long>(t.tp), t.forward_s * 1e3,
                    t.backward_input_s * 1e3, t.backward_weight_s * 1e3, t.achieved_gflops,
                    static_cast<long long>(t.repetitions));
      }
    }
    PrintGemmRates(model, p, o.precision, peak);
    LogNote(fmt::format("wrote {}: {} layers, {} distinct signatures timed in {} on {}", out, p.layers.size(),
                        printed.size(), DTypeName(p.dtype), p.device));
    return Status::OK();
  };
}

}  // namespace planner
