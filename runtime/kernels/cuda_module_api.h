// The function table the CUDA module (libplanner_cuda.so, common/cuda_module.h) exports for
// cuda_api.h and CudaOps(): cuda_api.cu fills it, cuda_loader.cc calls through it. A change of
// any member's type or order is a new version: bump kPlannerCudaApiVersion and the entry point's name.
// The module resolves the planner's own symbols (Tensor, Status, ...) from the executable, which is
// linked with -rdynamic (export_dynamic), so there is one copy of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace planner {

enum class DType;  // spec/layer.h
class DeviceOps;   // runtime/kernels/device_ops.h

inline constexpr int kPlannerCudaApiVersion = 1;

struct PlannerCudaApi {
  int version;       // kPlannerCudaApiVersion
  std::size_t size;  // sizeof(PlannerCudaApi)
  int (*device_count)(std::string* why);
  std::string (*describe_device)(int device);
  int (*compute_capability)(int device);
  std::string (*device_name)(int device);
  void* (*malloc)(int64_t bytes);
  void (*free)(void* ptr);
  void (*memset)(void* ptr, int value, int64_t bytes);
  void (*copy_to_host)(void* dst, const void* src, int64_t bytes);
  void (*copy_to_device)(void* dst, const void* src, int64_t bytes);
  void (*synchronize)();
  void (*set_device)(int device);
  void (*optimizer_step)(int kind, float* w, const float* g, float* m, float* v, int64_t n, float lr, float momentum,
                         float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2);
  Status (*convert)(const void* src, DType from, void* dst, DType to, int64_t n);
  void (*timer_create)(void** start, void** stop);  // two events
  void (*timer_destroy)(void* start, void* stop);
  void (*timer_record)(void* event);
  double (*timer_elapsed_seconds)(void* start, void* stop);  // records stop, waits for it
  DeviceOps* (*ops)();
};

}  // namespace planner

// The module's entry point (a static table; never nullptr).
extern "C" const planner::PlannerCudaApi* planner_cuda_api_v1();
