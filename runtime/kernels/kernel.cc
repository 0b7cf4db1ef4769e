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

Status PreNormBlockKernel::BackwardWeight(Saved* sv) {
  if (sv->children.size() != 4) return Status::Internal("transformer_block: backward-weight before backward-input");
  PLANNER_RETURN_IF_ERROR(ln1_->BackwardWeight(&sv->children[0]));
  PLANNER_RETURN_IF_ERROR(attn_->BackwardWeight(&sv->children[1]));
  PLANNER_RETURN_IF_ERROR(ln2_->BackwardWeight(&sv->children[2]));
  PLANNER_RETURN_IF_ERROR(mlp_->BackwardWeight(&sv->children[3]));
  sv->Clear();
  return Status::OK();
}

}  // namespace planner
