// Without NCCL: say so.
#include "runtime/comm/nccl_comm.h"

namespace planner {

bool NcclBuilt() { return false; }
std::string NcclVersion() { return "no NCCL"; }
Status MakeNcclComm(Communicator*, int, std::unique_ptr<Communicator>*) {
  return Status::Unavailable("built without NCCL; rebuild on a machine with CUDA and NCCL (meson option nccl)");
}

}  // namespace planner
