// Calibration from the user's own runs (planner calibrate; docs/calibration.md): scales of one engine's
// sustained rates per operation class (GEMM, attention, memory-bound work) on one GPU and precision,
// fitted to iterations measured on the user's cluster, with the runs they were fitted to and the
// residuals before and after. `solve --calibration FILE` multiplies the engine's sustained shares by
// the scales (kernel-level costs), or the cluster's efficiencies by the GEMM scale (the flat model).
// Plain value types.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace planner {

// The physical bounds of a calibrated share (docs/calibration.md, "Bounds"): a scale below
// kMinCalibrationScale (the run sustained under a fifth of what the tables say) is another run than the
// plan's (a data-loader stall, stragglers, another layout), and a scaled share above 1 is faster than the
// kernels' own benchmarks. Both are refused, never clamped.
constexpr double kMinCalibrationScale = 0.2;
constexpr double kMaxCalibratedShare = 1.0;
// The measurement's rounding: a share at most this far above kMaxCalibratedShare is 1. Logs print iteration
// times to 0.1 ms (Megatron-LM) or coarser, so a run that took exactly the predicted time refits a share of 1 to
// 1 +- about 1e-6 at a minute per iteration, more for shorter ones.
constexpr double kCalibratedShareRounding = 1e-4;

// One measured run: the log or record read, the plan that produced it, and the iteration seconds.
struct CalibrationRun {
  std::string source;                                // the log, metrics.csv or run directory read
  std::string format;                                // "megatron-lm", "torchtitan", "planner-run"
  std::string plan;                                  // the plan file
  std::string layout;                                // the plan's layout (Plan::ParallelString and its label)
  int64_t iterations = 0;                            // the measured iterations the median is over (after warm-up)
  double measured_s = 0, before_s = 0, after_s = 0;  // median measured; predicted before and after
  double measured_memory_GiB = 0;                    // the peak the log reports (0: none)
  double predicted_memory_GiB = 0;
};

struct Calibration {
  std::string path;       // where it was read from ("" when built in memory)
  std::string engine;     // EngineSpec::name
  std::string gpu;        // ClusterSpec::gpu_name
  std::string precision;  // "bf16", "fp16", "fp8", "fp32"
  std::string costs;      // "kernel-level" (engine shares scaled) or "flat" (the cluster's efficiencies)
  std::string fitted;     // "per-class" (the runs separate the classes), "one-scale", or "none" (traces only)
  double gemm = 1, attention = 1, memory = 1;  // scales of the engine's sustained shares
  double band_low = 0, band_high = 0;  // signed errors of predicted tokens/s after: measured s / predicted s - 1
  std::vector<CalibrationRun> runs;    // may be empty when traces gave the kernel table alone
  // The kernel table measured from PyTorch profiler traces (spec/profiler_trace.h), a file beside this one
  // ("" when no trace was given), and the traces it was measured from.
  std::string kernels;
  std::vector<std::string> traces;
  // The collectives the traces' NCCL kernels measured, a comm profile beside this one (spec/profile.h's
  // `comm:` curves, the format planner profile --comm writes; "" when the traces held none).
  std::string comm;
  // `kernels` and `comm` as paths: beside the calibration file.
  std::string KernelsPath() const;
  std::string CommPath() const;
};

// The file's text: a first line the output guard recognises, then YAML.
std::string CalibrationToYaml(const Calibration& c);
// Reads a calibration file strictly: InvalidArgument naming file, line, field and the fix; a scale
// outside [kMinCalibrationScale, 1 / the share it scales] cannot be checked here (the engine is not
// known), so only the lower bound and 10 are enforced at read; solve checks the scaled share.
Status ParseCalibration(const std::string& path, const std::string& text, Calibration* out);
Status LoadCalibration(const std::string& path, Calibration* out);
// The first line of every calibration file (the output guard recognises it).
extern const char kCalibrationHeader[];
// The first line of the kernel table calibrate measures from traces (the output guard recognises it).
extern const char kMeasuredKernelsHeader[];

}  // namespace planner
