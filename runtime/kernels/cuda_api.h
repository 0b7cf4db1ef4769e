// The few CUDA runtime calls the rest of the code needs, behind plain C++
// declarations. When Meson finds CUDA they are implemented by cuda_api.cu inside
// the CUDA module libplanner_cuda.so (common/cuda_module.h), which cuda_loader.cc
// loads on the first call that needs it; without the module or the CUDA libraries
// the loader answers as the stub does, naming what is missing. Without CUDA,
// cuda_stub.cc (every call then reports "built without CUDA").
// No CUDA header leaks out of this file's implementations.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace planner {

enum class DType;  // spec/layer.h

// Number of usable CUDA devices; 0 with *why set ("no CUDA device: ..."
// or "built without CUDA", or why the CUDA module did not load) when there is none.
// The first call loads the CUDA module. Never throws.
int CudaDeviceCount(std::string* why);
// "NVIDIA H100 80GB HBM3, driver 13.0, CUDA runtime 13.0, cuBLAS 13.1, cuDNN 9.19.0, NCCL 2.28.9".
std::string CudaDescribeDevice(int device);
// Whether the build has CUDA (the CUDA module may still be missing: CudaDeviceCount says why).
bool CudaBuilt();
// The device's compute capability as major * 10 + minor (90: Hopper, 89: Ada, 80: A100); 0 when
// there is no such device or the build has no CUDA.
int CudaComputeCapability(int device);
// Whether the device runs FP8 (e4m3) tensor-core GEMMs through cuBLASLt: compute capability >= 8.9.
bool CudaSupportsFp8(int device);
// The device's name as the driver reports it ("NVIDIA H100 80GB HBM3"); "" without one.
std::string CudaDeviceName(int device);

// Memory (throw std::runtime_error on failure).
void* CudaMalloc(int64_t bytes);
void CudaFree(void* ptr);
void CudaMemset(void* ptr, int value, int64_t bytes);
void CudaCopyToHost(void* dst, const void* src, int64_t bytes);
void CudaCopyToDevice(void* dst, const void* src, int64_t bytes);
void CudaSynchronize();
void CudaSetDevice(int device);

// One optimizer update of n parameters on the device (kind 0: SGD with momentum buffer m;
// 1: Adam with moments m, v and bias corrections bc1, bc2). Throws without CUDA.
void CudaOptimizerStep(int kind, float* w, const float* g, float* m, float* v, int64_t n, float lr, float momentum,
                       float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2);

// n elements at src (dtype `from`) converted into dst (dtype `to`) on the device: fp32 <-> bf16 / fp16
// with round to nearest even (cuda_bf16.h / cuda_fp16.h intrinsics, bit-identical to common/half.h),
// 16-bit <-> 16-bit through fp32, the same dtype a copy. Waits for the kernel. Unavailable without
// CUDA; InvalidArgument for fp8 (never a storage dtype).
Status CudaConvert(const void* src, DType from, void* dst, DType to, int64_t n);

// Event timing of a callable on the current stream, in seconds.
class CudaTimer {
 public:
  CudaTimer();
  ~CudaTimer();
  void Start();
  double StopSeconds();  // waits for the stop event
 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace planner
