#include "spec/model_state.h"

#include <algorithm>

#include "spec/model_spec.h"

namespace planner {

const std::vector<std::string>& OptimizerStateNameList() {
  static const std::vector<std::string> kNames = {"fp32", "fp32-remainders", "bf16-moments", "bf16", "bf16-master"};
  return kNames;
}

const char* OptimizerStateName(OptimizerState s) { return OptimizerStateNameList()[static_cast<size_t>(s)].c_str(); }

bool ParseOptimizerState(const std::string& text, OptimizerState* out) {
  const std::vector<std::string>& names = OptimizerStateNameList();
  for (size_t i = 0; i < names.size(); ++i) {
    if (text == names[i]) {
      *out = static_cast<OptimizerState>(i);
      return true;
    }
  }
  return false;
}

std::string OptimizerStateNames() {
  const std::vector<std::string>& names = OptimizerStateNameList();
  std::string o;
  for (size_t i = 0; i < names.size(); ++i) o += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return o;
}

double OptimizerStateBytes(OptimizerState s) {
  switch (s) {
    case OptimizerState::kFp32: return 12;            // fp32 master 4 + exp_avg 4 + exp_avg_sq 4
    case OptimizerState::kFp32Remainders: return 10;  // int16 remainder 2 + 4 + 4
    case OptimizerState::kBf16Moments: return 6;      // int16 remainder 2 + 2 + 2
    case OptimizerState::kBf16: return 4;             // 2 + 2, no master
    case OptimizerState::kBf16Master: return 6;       // bf16 master 2 + 2 + 2 (Apex store_params, state dtype bf16)
  }
  return 12;
}

double OptimizerStepTrafficPerParam(OptimizerState s) {
  // The bf16 weight is the master's high half (remainders) or the master (bf16); bf16-master reads its own master,
  // counted in the state (Apex: the master updated in place, then a second pass casts it to the FP8 weight, 2 B read
  // and 1 written, against the 2 charged here; its bf16 gradient read is charged as 4: about 17 B run, 18 costed).
  const double weight_read = s == OptimizerState::kFp32 || s == OptimizerState::kBf16Master ? 0 : 2;
  return 4 + 2 * OptimizerStateBytes(s) + 2 + weight_read;
}

std::string OptimizerStateRefusal(DType model, OptimizerState s) {
  if (s == OptimizerState::kFp32) return "";
  if (model == DType::kFp32) return "an fp32 model keeps no master copy (its 8 B of fp32 moments); use fp32";
  if (model == DType::kFp16)
    return "it updates bf16 weights (remainders are the low half of an fp32 whose high half is the bf16 weight); an "
           "fp16 model keeps fp32; use fp32";
  return "";
}

std::string OptimizerStateFp8ParamsRefusal(OptimizerState s, bool fp8_params) {
  if (fp8_params)
    return s == OptimizerState::kFp32 || s == OptimizerState::kBf16Master
               ? ""
               : "FP8 parameters keep a master apart from the weights (no bf16 weight for remainders to complete or "
                 "to update in place)";
  return s == OptimizerState::kBf16Master
             ? "it is the bf16 master Apex keeps beside FP8 weights; bf16 weights are their own master"
             : "";
}

StateBytes ModelStateBytes(const ModelSpec* model, std::optional<DType> grad_dtype_opt, double bytes_per_param,
                           OptimizerState optimizer_state) {
  const bool mixed = model == nullptr || model->dtype != DType::kFp32;
  StateBytes sb;
  sb.weight = model ? DTypeBytes(model->dtype) : 4.0;
  if (mixed) sb.optimizer_state = optimizer_state;
  sb.optimizer = mixed ? OptimizerStateBytes(sb.optimizer_state) : 8.0;
  // Gradients in the engine's buffer dtype: fp32 for bf16 / fp8 / fp32, fp16 for fp16 (Megatron's
  // defaults, DefaultGradDType), or --grad-dtype's; accumulated and reduced in it.
  const DType grad_dtype = model ? grad_dtype_opt.value_or(DefaultGradDType(model->dtype)) : DType::kFp16;
  sb.grad = model ? DTypeBytes(grad_dtype) : 2.0;
  if (model != nullptr) sb.grad_dtype = grad_dtype;
  sb.total = bytes_per_param > 0 ? bytes_per_param : sb.weight + sb.grad + sb.optimizer;
  if (model != nullptr && model->dtype == DType::kFp8) sb.fp8_weight_copy = 2;  // TE's FP8 weight + transpose
  sb.grad_comm = model ? sb.grad : 4.0;
  sb.param_gather = sb.weight;
  // An explicit --bytes-per-param is the whole model state as the user counts it: no transient added.
  // Apex's DistributedFusedAdam with bf16 state (bf16, bf16-master) steps on the 16-bit gradient shard as it is.
  const bool apex_bf16 =
      sb.optimizer_state == OptimizerState::kBf16 || sb.optimizer_state == OptimizerState::kBf16Master;
  if (model != nullptr && mixed && grad_dtype != DType::kFp32 && !(bytes_per_param > 0) && !apex_bf16)
    sb.step_grad_copy = 4;
  // LoRA (gpt.lora): gradients and optimizer state for the adapters alone, spread evenly over every parameter (the
  // adapters sit in every block; the embedding and head stages hold a little less than this says).
  // The gradient traffic and the optimizer step follow the share whatever --bytes-per-param says of memory.
  const double all = model ? model->TotalParams() : 0;
  if (all > 0 && model->TrainableParams() < all) {
    sb.trainable = std::max(0.0, model->TrainableParams()) / all;
    sb.grad_comm *= sb.trainable;
    if (!(bytes_per_param > 0)) {
      sb.grad *= sb.trainable;
      sb.optimizer *= sb.trainable;
      sb.total = sb.weight + sb.grad + sb.optimizer;
      sb.step_grad_copy *= sb.trainable;
    }
  }
  return sb;
}

void KeepFp8Params(double weight_bytes, double gather_bytes, bool user_total, StateBytes* sb) {
  sb->fp8_params = true;
  sb->fp8_weight_copy = 0;
  sb->param_gather = gather_bytes;
  sb->weight = weight_bytes;
  if (!user_total) sb->total = sb->weight + sb->grad + sb->optimizer;
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
