#include "profiler/peaks.h"

#include <vector>

namespace planner {

namespace {

struct PeakRow {
  const char* name_has;    // substring of the device name
  const char* name_lacks;  // a variant with other clocks / power ("" for none)
  int compute_capability;
  double tf32, bf16, fp16, fp8;  // dense TFLOP/s; 0: not supported / not published
  const char* source;
};

// Order matters: the first row whose name and capability match.
const std::vector<PeakRow>& Table() {
  static const std::vector<PeakRow> rows = {
      {"H100 PCIe", "", 90, 378, 756, 756, 1513,
       "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (sparsity figures halved)"},
      {"H100", "NVL", 90, 494.7, 989.4, 989.4, 1978.9,
       "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (sparsity figures halved)"},
      {"H200", "NVL", 90, 494.7, 989.4, 989.4, 1978.9,
       "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column (sparsity figures halved)"},
      {"A100", "", 80, 156, 312, 312, 0, "NVIDIA A100 Tensor Core GPU datasheet (dense; A100 has no FP8)"},
  };
  return rows;
}

}  // namespace

DevicePeak PublishedGpuPeak(const std::string& name, int cc, DType precision) {
  for (const PeakRow& r : Table()) {
    if (name.find(r.name_has) == std::string::npos || r.compute_capability != cc) continue;
    if (*r.name_lacks != '\0' && name.find(r.name_lacks) != std::string::npos) continue;
    const double t = precision == DType::kFp32   ? r.tf32
                     : precision == DType::kBf16 ? r.bf16
                     : precision == DType::kFp16 ? r.fp16
                                                 : r.fp8;
    if (t <= 0) return {0, std::string(r.source) + ": no " + DTypeName(precision) + " tensor cores"};
    return {t, r.source};
  }
  return {0, "no published peak in the profiler's table for '" + name + "' (compute capability " +
                 std::to_string(cc / 10) + "." + std::to_string(cc % 10) +
                 "); pass --cluster with its gpu.peak_tflops"};
}

}  // namespace planner
