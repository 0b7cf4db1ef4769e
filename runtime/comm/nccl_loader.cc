// The NCCL backend in a build with NCCL: the implementation (nccl_comm.cc) lives in the CUDA module
// libplanner_cuda.so, which this file loads on first use (common/cuda_module.h) and calls through its
// table (nccl_module_api.h). Without the module or its libraries it answers as nccl_stub.cc does, with
// the reason naming what is missing.
#include "common/cuda_module.h"
#include "runtime/comm/nccl_comm.h"
#include "runtime/comm/nccl_module_api.h"

namespace planner {

namespace {

struct Table {
  const PlannerNcclApi* api = nullptr;
  std::string error;  // why api is nullptr
};

Table LoadTable() {
  Table t;
  void* entry = CudaModuleSymbol("planner_nccl_api_v1", &t.error);
  if (entry == nullptr) return t;
  const PlannerNcclApi* api = reinterpret_cast<const PlannerNcclApi* (*)()>(entry)();
  if (api == nullptr || api->version != kPlannerNcclApiVersion || api->size != sizeof(PlannerNcclApi)) {
    t.error = "the CUDA module's NCCL table does not match this planner (built from another version?); rebuild it";
    return t;
  }
  t.api = api;
  return t;
}

const PlannerNcclApi* Api(std::string* why = nullptr) {
  static const Table table = LoadTable();
  if (table.api == nullptr && why != nullptr) *why = table.error;
  return table.api;
}

}  // namespace

bool NcclBuilt() { return true; }
std::string NcclVersion() {
  const PlannerNcclApi* api = Api();
  return api != nullptr ? api->version_string() : "no NCCL";
}
Status MakeNcclComm(Communicator* bootstrap, int device, std::unique_ptr<Communicator>* out) {
  std::string why;
  const PlannerNcclApi* api = Api(&why);
  if (api == nullptr) return Status::Unavailable("NCCL backend unavailable: " + why);
  return api->make_comm(bootstrap, device, out);
}

}  // namespace planner
