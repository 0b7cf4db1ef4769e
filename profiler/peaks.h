// Published dense tensor-core peaks of the GPUs the profiler reports achieved
// GEMM rates against (docs/profiler.md "Peaks" lists each figure's datasheet).
// Dense: without 2:4 structured sparsity (NVIDIA's headline figures with
// sparsity are twice these). fp32 GEMMs run on TF32 tensor cores (cuBLAS with
// CUBLAS_TF32_TENSOR_OP_MATH), so their peak is the TF32 one.
#pragma once

#include <string>

#include "spec/layer.h"

namespace planner {

struct DevicePeak {
  double tflops = 0;   // 0: no published figure known for this device and precision
  std::string source;  // the datasheet, or why there is none
};

// By the driver's device name ("NVIDIA H100 80GB HBM3") and compute capability (90); only devices whose
// name and capability both match a row of the table get a figure.
DevicePeak PublishedGpuPeak(const std::string& device_name, int compute_capability, DType precision);

}  // namespace planner
