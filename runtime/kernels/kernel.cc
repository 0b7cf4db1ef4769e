#include "runtime/kernels/kernel.h"

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"

namespace planner {

Status MakeCpuKernel(const Layer& layer, const KernelOptions& options, std::unique_ptr<LayerKernel>* out);
Status MakeCudaKernel(const Layer& layer, const KernelOptions& options, std::unique_ptr<LayerKernel>* out);

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

Status MakeKernel(const Layer& layer, const KernelOptions& options, std::unique_ptr<LayerKernel>* out) {
  if (options.tp_size < 1 || options.tp_rank < 0 || options.tp_rank >= options.tp_size) {
    return Status::InvalidArgument(fmt::format("tensor-parallel rank {} of {} is not valid", options.tp_rank, options.tp_size));
  }
  if (options.device == Device::kCpu) return MakeCpuKernel(layer, options, out);
  std::string why;
  if (CudaDeviceCount(&why) == 0) return Status::Unavailable(why);
  return MakeCudaKernel(layer, options, out);
}

}  // namespace planner
