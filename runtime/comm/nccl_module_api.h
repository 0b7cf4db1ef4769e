// The function table the CUDA module (libplanner_cuda.so, common/cuda_module.h) exports for
// nccl_comm.h when the build has NCCL: nccl_comm.cc fills it, nccl_loader.cc calls through it. A change
// of any member's type or order is a new version: bump kPlannerNcclApiVersion and the entry point's name.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace planner {

inline constexpr int kPlannerNcclApiVersion = 1;

struct PlannerNcclApi {
  int version;       // kPlannerNcclApiVersion
  std::size_t size;  // sizeof(PlannerNcclApi)
  std::string (*version_string)();
  Status (*make_comm)(Communicator* bootstrap, int device, std::unique_ptr<Communicator>* out);
};

}  // namespace planner

// The module's entry point (a static table; never nullptr).
extern "C" const planner::PlannerNcclApi* planner_nccl_api_v1();
