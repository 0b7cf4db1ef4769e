// CUDA runtime entry points (see cuda_api.h). Runtime API only: never the
// driver API (toolchain.md: linking -lcuda breaks start-up without a driver).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

#include "runtime/kernels/cuda_api.h"

namespace planner {

namespace {
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

bool CudaBuilt() { return true; }

int CudaDeviceCount(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string CudaDescribeDevice(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return "unknown CUDA device";
  }
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  int cub_major = 0, cub_minor = 0;
  cublasGetProperty(MAJOR_VERSION, &cub_major);
  cublasGetProperty(MINOR_VERSION, &cub_minor);
  size_t dnn = cudnnGetVersion();
  return std::string(p.name) + ", " + std::to_string(p.multiProcessorCount) + " SMs, " +
         std::to_string(p.totalGlobalMem >> 20) + " MiB, driver " + std::to_string(drv / 1000) + "." + std::to_string(drv % 1000 / 10) +
         ", CUDA runtime " + std::to_string(rt / 1000) + "." + std::to_string(rt % 1000 / 10) + ", cuBLAS " + std::to_string(cub_major) +
         "." + std::to_string(cub_minor) + ", cuDNN " + std::to_string(dnn / 10000) + "." + std::to_string(dnn / 100 % 100) + "." +
         std::to_string(dnn % 100);
}

void* CudaMalloc(int64_t bytes) {
  void* p = nullptr;
  Check(cudaMalloc(&p, static_cast<size_t>(bytes)), "cudaMalloc");
  return p;
}
void CudaFree(void* p) { cudaFree(p); }
void CudaMemset(void* p, int v, int64_t bytes) { Check(cudaMemset(p, v, static_cast<size_t>(bytes)), "cudaMemset"); }
void CudaCopyToHost(void* dst, const void* src, int64_t bytes) {
  Check(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}
void CudaCopyToDevice(void* dst, const void* src, int64_t bytes) {
  Check(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
void CudaSynchronize() { Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

CudaTimer::CudaTimer() {
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "cudaEventCreate");
  Check(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}
CudaTimer::~CudaTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void CudaTimer::Start() { Check(cudaEventRecord(static_cast<cudaEvent_t>(start_)), "cudaEventRecord"); }
double CudaTimer::StopSeconds() {
  Check(cudaEventRecord(static_cast<cudaEvent_t>(stop_)), "cudaEventRecord");
  Check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)), "cudaEventElapsedTime");
  return ms * 1e-3;
}

}  // namespace planner
