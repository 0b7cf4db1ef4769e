// CUDA runtime entry points (see cuda_api.h), built into the CUDA module libplanner_cuda.so and reached
// through the table at the end (cuda_module_api.h; cuda_loader.cc is the caller). Runtime API only: never
// the driver API (toolchain.md: linking -lcuda breaks start-up without a driver).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/cuda_module_api.h"
#include "runtime/kernels/device_ops.h"
#include "spec/layer.h"

namespace planner {

namespace {
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

int CudaDeviceCount(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why)
      *why = std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "the driver reports none");
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

int CudaComputeCapability(int device) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

bool CudaSupportsFp8(int device) { return CudaComputeCapability(device) >= 89; }

std::string CudaDeviceName(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return p.name;
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
         std::to_string(p.totalGlobalMem >> 20) + " MiB, driver " + std::to_string(drv / 1000) + "." +
         std::to_string(drv % 1000 / 10) + ", CUDA runtime " + std::to_string(rt / 1000) + "." +
         std::to_string(rt % 1000 / 10) + ", cuBLAS " + std::to_string(cub_major) + "." + std::to_string(cub_minor) +
         ", cuDNN " + std::to_string(dnn / 10000) + "." + std::to_string(dnn / 100 % 100) + "." +
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
void CudaSetDevice(int device) { Check(cudaSetDevice(device), "cudaSetDevice"); }

namespace {
__global__ void OptimizerKernel(int kind, float* w, const float* g, float* m, float* v, int64_t n, float lr,
                                float momentum, float b1, float b2, float eps, float wd, float bc1, float bc2) {
  int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  if (kind == 0) {
    m[i] = momentum * m[i] + g[i];
    w[i] -= lr * m[i];
    return;
  }
  m[i] = b1 * m[i] + (1 - b1) * g[i];
  v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
  float mh = m[i] / bc1, vh = v[i] / bc2;
  w[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * w[i]);
}
}  // namespace

void CudaOptimizerStep(int kind, float* w, const float* g, float* m, float* v, int64_t n, float lr, float momentum,
                       float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2) {
  OptimizerKernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(kind, w, g, m, v, n, lr, momentum, beta1, beta2, eps,
                                                                   weight_decay, bc1, bc2);
  Check(cudaGetLastError(), "optimizer kernel");
}

namespace {

void TimerCreate(void** start, void** stop) {
  cudaEvent_t a, b;
  Check(cudaEventCreate(&a), "cudaEventCreate");
  Check(cudaEventCreate(&b), "cudaEventCreate");
  *start = a;
  *stop = b;
}
void TimerDestroy(void* start, void* stop) {
  cudaEventDestroy(static_cast<cudaEvent_t>(start));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop));
}
void TimerRecord(void* event) { Check(cudaEventRecord(static_cast<cudaEvent_t>(event)), "cudaEventRecord"); }
double TimerElapsedSeconds(void* start, void* stop) {
  Check(cudaEventRecord(static_cast<cudaEvent_t>(stop)), "cudaEventRecord");
  Check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)), "cudaEventSynchronize");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)),
        "cudaEventElapsedTime");
  return ms * 1e-3;
}

}  // namespace

namespace {

// Element codes of the conversion kernel: 0 fp32, 1 bf16, 2 fp16.
__device__ float LoadAsFloat(const void* p, int code, int64_t i) {
  if (code == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (code == 2) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

__global__ void ConvertKernel(const void* src, int from, void* dst, int to, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float f = LoadAsFloat(src, from, i);
    if (to == 1) static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(f);
    else if (to == 2) static_cast<__half*>(dst)[i] = __float2half_rn(f);
    else static_cast<float*>(dst)[i] = f;
  }
}

int ConvertCode(DType d) { return d == DType::kBf16 ? 1 : d == DType::kFp16 ? 2 : 0; }

}  // namespace

Status CudaConvert(const void* src, DType from, void* dst, DType to, int64_t n) {
  if (from == DType::kFp8 || to == DType::kFp8)
    return Status::InvalidArgument("CudaConvert: fp8 is not a storage dtype");
  if (n <= 0) return Status::OK();
  if (from == to) {
    cudaError_t e =
        cudaMemcpy(dst, src, static_cast<size_t>(n) * (from == DType::kFp32 ? 4u : 2u), cudaMemcpyDeviceToDevice);
    if (e != cudaSuccess) return Status::Unavailable(std::string("CudaConvert: cudaMemcpy: ") + cudaGetErrorString(e));
    return Status::OK();
  }
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  ConvertKernel<<<static_cast<unsigned>(blocks), threads>>>(src, ConvertCode(from), dst, ConvertCode(to), n);
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return Status::Unavailable(std::string("CudaConvert: ") + cudaGetErrorString(e));
  return Status::OK();
}

}  // namespace planner

extern "C" __attribute__((visibility("default"))) const planner::PlannerCudaApi* planner_cuda_api_v1() {
  using namespace planner;
  static const PlannerCudaApi api = {
      kPlannerCudaApiVersion,
      sizeof(PlannerCudaApi),
      CudaDeviceCount,
      CudaDescribeDevice,
      CudaComputeCapability,
      CudaDeviceName,
      CudaMalloc,
      CudaFree,
      CudaMemset,
      CudaCopyToHost,
      CudaCopyToDevice,
      CudaSynchronize,
      CudaSetDevice,
      CudaOptimizerStep,
      CudaConvert,
      TimerCreate,
      TimerDestroy,
      TimerRecord,
      TimerElapsedSeconds,
      CudaOps,
  };
  return &api;
}
