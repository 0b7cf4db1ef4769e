// CUDA entry points when the build has no CUDA: every one says so.
#include <stdexcept>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/device_ops.h"

namespace planner {

namespace {
[[noreturn]] void NoCuda() {
  throw std::runtime_error("built without CUDA; rebuild with -Dcuda=enabled on a machine with the CUDA toolkit");
}
}  // namespace

int CudaDeviceCount(std::string* why) {
  if (why) *why = "built without CUDA (Meson did not find the CUDA toolkit)";
  return 0;
}
std::string CudaDescribeDevice(int) { return "none (built without CUDA)"; }
bool CudaBuilt() { return false; }
int CudaComputeCapability(int) { return 0; }
bool CudaSupportsFp8(int) { return false; }
std::string CudaDeviceName(int) { return ""; }
void* CudaMalloc(int64_t) { NoCuda(); }
void CudaFree(void*) {}
void CudaMemset(void*, int, int64_t) { NoCuda(); }
void CudaCopyToHost(void*, const void*, int64_t) { NoCuda(); }
void CudaCopyToDevice(void*, const void*, int64_t) { NoCuda(); }
void CudaSynchronize() {}
void CudaSetDevice(int) { NoCuda(); }
void CudaOptimizerStep(int, float*, const float*, float*, float*, int64_t, float, float, float, float, float, float,
                       float, float) {
  NoCuda();
}
CudaTimer::CudaTimer() = default;
CudaTimer::~CudaTimer() = default;
void CudaTimer::Start() { NoCuda(); }
double CudaTimer::StopSeconds() { NoCuda(); }
DeviceOps* CudaOps() { return nullptr; }
Status CudaConvert(const void*, DType, void*, DType, int64_t) {
  return Status::Unavailable("built without CUDA; rebuild with -Dcuda=enabled on a machine with the CUDA toolkit");
}

}  // namespace planner
