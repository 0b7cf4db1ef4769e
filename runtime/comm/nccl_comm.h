// NCCL backend (GPU ranks): buffers are device pointers of the current CUDA
// device. The ncclUniqueId goes from rank 0 to every rank over a bootstrap
// communicator (MPI, as nccl-tests does; none for a single rank). Every
// operation is enqueued on the communicator's stream and then polled until
// it finishes, its asynchronous error is checked, and past the timeout the
// communicator is aborted (ncclCommAbort) and CommError returned.
// With NCCL, nccl_comm.cc is in the CUDA module libplanner_cuda.so and nccl_loader.cc
// loads it on first use; without NCCL, nccl_stub.cc.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace planner {

// Whether the build has NCCL (the CUDA module may still be missing: MakeNcclComm says why).
bool NcclBuilt();
// "NCCL 2.28.9" (the library's version), or "no NCCL".
std::string NcclVersion();
// `bootstrap`: the job's host communicator (nullptr: a single rank). `device`: CUDA device index.
Status MakeNcclComm(Communicator* bootstrap, int device, std::unique_ptr<Communicator>* out);

}  // namespace planner
