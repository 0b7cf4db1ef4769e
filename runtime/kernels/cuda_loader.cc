// CUDA entry points in a build with CUDA: the implementations (cuda_api.cu, device_ops_cuda.cu) live in the
// CUDA module libplanner_cuda.so, linked against the CUDA runtime, cuBLAS(Lt) and cuDNN; this file loads it
// on the first call that needs it (common/cuda_module.h) and calls through its table (cuda_module_api.h).
// The executable links none of those libraries. Without the module or its libraries every call behaves as
// in cuda_stub.cc, with the reason naming what is missing and how to fix it.
#include <stdexcept>

#include "common/cuda_module.h"
#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/cuda_module_api.h"
#include "runtime/kernels/device_ops.h"

namespace planner {

namespace {

struct Table {
  const PlannerCudaApi* api = nullptr;
  std::string error;  // why api is nullptr
};

Table LoadTable() {
  Table t;
  void* entry = CudaModuleSymbol("planner_cuda_api_v1", &t.error);
  if (entry == nullptr) return t;
  const PlannerCudaApi* api = reinterpret_cast<const PlannerCudaApi* (*)()>(entry)();
  if (api == nullptr || api->version != kPlannerCudaApiVersion || api->size != sizeof(PlannerCudaApi)) {
    t.error = "the CUDA module's function table does not match this planner (built from another version?); rebuild it";
    return t;
  }
  t.api = api;
  return t;
}

// The module's table, or nullptr with *why set (loads the module on the first call).
const PlannerCudaApi* Api(std::string* why = nullptr) {
  static const Table table = LoadTable();
  if (table.api == nullptr && why != nullptr) *why = table.error;
  return table.api;
}

const PlannerCudaApi& Need() {
  std::string why;
  const PlannerCudaApi* api = Api(&why);
  if (api == nullptr) throw std::runtime_error(why);
  return *api;
}

}  // namespace

int CudaDeviceCount(std::string* why) {
  const PlannerCudaApi* api = Api(why);
  return api != nullptr ? api->device_count(why) : 0;
}
std::string CudaDescribeDevice(int device) {
  std::string why;
  const PlannerCudaApi* api = Api(&why);
  return api != nullptr ? api->describe_device(device) : "none (" + why + ")";
}
bool CudaBuilt() { return true; }
int CudaComputeCapability(int device) {
  const PlannerCudaApi* api = Api();
  return api != nullptr ? api->compute_capability(device) : 0;
}
bool CudaSupportsFp8(int device) { return CudaComputeCapability(device) >= 89; }
std::string CudaDeviceName(int device) {
  const PlannerCudaApi* api = Api();
  return api != nullptr ? api->device_name(device) : "";
}
void* CudaMalloc(int64_t bytes) { return Need().malloc(bytes); }
void CudaFree(void* ptr) {
  if (const PlannerCudaApi* api = Api()) api->free(ptr);
}
void CudaMemset(void* ptr, int value, int64_t bytes) { Need().memset(ptr, value, bytes); }
void CudaCopyToHost(void* dst, const void* src, int64_t bytes) { Need().copy_to_host(dst, src, bytes); }
void CudaCopyToDevice(void* dst, const void* src, int64_t bytes) { Need().copy_to_device(dst, src, bytes); }
void CudaSynchronize() {
  if (const PlannerCudaApi* api = Api()) api->synchronize();
}
void CudaSetDevice(int device) { Need().set_device(device); }
void CudaOptimizerStep(int kind, float* w, const float* g, float* m, float* v, int64_t n, float lr, float momentum,
                       float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2) {
  Need().optimizer_step(kind, w, g, m, v, n, lr, momentum, beta1, beta2, eps, weight_decay, bc1, bc2);
}
Status CudaConvert(const void* src, DType from, void* dst, DType to, int64_t n) {
  std::string why;
  const PlannerCudaApi* api = Api(&why);
  return api != nullptr ? api->convert(src, from, dst, to, n) : Status::Unavailable(why);
}

CudaTimer::CudaTimer() {
  if (const PlannerCudaApi* api = Api()) api->timer_create(&start_, &stop_);
}
CudaTimer::~CudaTimer() {
  if (start_ != nullptr) Api()->timer_destroy(start_, stop_);
}
void CudaTimer::Start() { Need().timer_record(start_); }
double CudaTimer::StopSeconds() { return Need().timer_elapsed_seconds(start_, stop_); }

DeviceOps* CudaOps() {
  const PlannerCudaApi* api = Api();
  return api != nullptr ? api->ops() : nullptr;
}

}  // namespace planner
