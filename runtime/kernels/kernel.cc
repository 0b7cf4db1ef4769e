#include "runtime/kernels/kernel.h"

namespace planner {

std::vector<Param*> JoinParams(std::initializer_list<LayerKernel*> parts) {
  std::vector<Param*> all;
  for (LayerKernel* k : parts) {
    auto p = k->Params();
    all.insert(all.end(), p.begin(), p.end());
  }
  return all;
}

KernelFlops SumFlops(std::initializer_list<const LayerKernel*> parts, int64_t b) {
  KernelFlops sum;
  for (const LayerKernel* k : parts) {
    KernelFlops f = k->Flops(b);
    sum.forward += f.forward;
    sum.backward_input += f.backward_input;
    sum.backward_weight += f.backward_weight;
  }
  return sum;
}

}  // namespace planner
