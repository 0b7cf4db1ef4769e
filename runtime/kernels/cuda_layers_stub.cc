// Without CUDA there are no CUDA kernels.
#include "runtime/kernels/kernel.h"

namespace planner {

Status MakeCudaKernel(const Layer&, const KernelOptions&, std::unique_ptr<LayerKernel>*) {
  return Status::Unavailable("built without CUDA; rebuild with -Dcuda=enabled on a machine with the CUDA toolkit");
}

}  // namespace planner
