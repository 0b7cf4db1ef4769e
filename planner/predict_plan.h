// A plan predicted again (planner calibrate's model of a measured run; planner/cmd_calibrate.cc): the
// plan's inputs (model, cluster, engine, kernel table, precision, sequence, global batch) read once,
// its layout forced, then costed with the operation classes' rates scaled: the engine's sustained
// shares under kernel-level costs, the cluster's efficiencies (GEMM and HBM, by the GEMM scale) in the
// flat model. Implemented in cmd_solve.cc, beside the solve it repeats.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "common/status.h"
#include "spec/kernel_table.h"
#include "spec/profile.h"
#include "spec/plan.h"

namespace planner {

struct CostScales {
  double gemm = 1, attention = 1, memory = 1;
};

class PlanPredictor {
 public:
  PlanPredictor();
  ~PlanPredictor();
  // `plan_path` locates the plan's model and cluster files when they were given relative to it.
  // InvalidArgument for a plan calibrate cannot re-cost (measured profiles, PipeDream mode).
  Status Init(const std::string& plan_path, const Plan& plan);
  Status Predict(const CostScales& scales, PlanPredicted* out) const;
  bool kernel_level() const;
  const std::string& engine() const;  // the engine's name
  const std::string& gpu() const;     // the cluster's GPU
  // The shares the scales multiply (kernel-level: the engine's sustained gemm / attention / memory;
  // flat: the cluster's efficiency for the precision, and its HBM efficiency for memory).
  CostScales base() const;
  // The kernel table the plan is costed with (nullptr: the flat model), the cluster's peaks (TFLOP/s by
  // precision name); UseKernels replaces the table (a measured one) for the predictions after it.
  const KernelTable* kernels() const;
  const std::map<std::string, double>& peaks() const;
  void UseKernels(const KernelTable& table);
  // The cluster's GPUs per node (level 0), and measured collectives replacing its levels' figures for the
  // predictions after it (ApplyCommCurves, as solve --comm-profile).
  int64_t gpus_per_node() const;
  void UseComm(const Profile& comm, const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace planner
