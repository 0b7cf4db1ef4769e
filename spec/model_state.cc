#include "spec/model_state.h"

#include "spec/model_spec.h"

namespace planner {

StateBytes ModelStateBytes(const ModelSpec* model, std::optional<DType> grad_dtype_opt, double bytes_per_param) {
  const bool mixed = model == nullptr || model->dtype != DType::kFp32;
  StateBytes sb;
  sb.weight = model ? DTypeBytes(model->dtype) : 4.0;
  sb.optimizer = mixed ? 12.0 : 8.0;
  // Gradients in the engine's buffer dtype: fp32 for bf16 / fp8 / fp32, fp16 for fp16 (Megatron's
  // defaults, DefaultGradDType), or --grad-dtype's; accumulated and reduced in it.
  const DType grad_dtype = model ? grad_dtype_opt.value_or(DefaultGradDType(model->dtype)) : DType::kFp16;
  sb.grad = model ? DTypeBytes(grad_dtype) : 2.0;
  if (model != nullptr) sb.grad_dtype = grad_dtype;
  sb.total = bytes_per_param > 0 ? bytes_per_param : sb.weight + sb.grad + sb.optimizer;
  if (model != nullptr && model->dtype == DType::kFp8) sb.fp8_weight_copy = 2;  // TE's FP8 weight + transpose
  sb.grad_comm = model ? sb.grad : 4.0;
  // An explicit --bytes-per-param is the whole model state as the user counts it: no transient added.
  if (model != nullptr && mixed && grad_dtype != DType::kFp32 && !(bytes_per_param > 0)) sb.step_grad_copy = 4;
  return sb;
}

double StateBytesPerParam(const StateBytes& sb, int64_t z, int64_t d) {
  const double beta = sb.total, w = sb.weight, os = sb.optimizer;
  double g = beta - w - os;
  double dd = static_cast<double>(d);
  const double fp8 = sb.fp8_weight_copy;
  switch (z) {
    case 0: return beta + fp8;
    case 1: return w + fp8 + g + os / dd;
    case 2: return w + fp8 + (g + os) / dd;
    default: return (beta + fp8) / dd;
  }
}

}  // namespace planner
