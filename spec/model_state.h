// Model-state bytes per parameter as the engines keep them: weights, the gradient buffer (its dtype
// and the fp16 step's fp32 copy), optimizer states and Transformer Engine's FP8 weight copies, and
// their share per GPU at each ZeRO stage (docs/cost_model.md section 5). Used by the cost model and
// by the run report, which compares the plan's figure with the measured one. Plain value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/dtype.h"

namespace planner {

struct ModelSpec;

// How the optimizer keeps Adam's state per parameter beside 16-bit weights (solve --optimizer-state; plan.yaml
// `optimizer_state`; docs/cost_model.md section 5):
//   kFp32            fp32 master weights and fp32 moments, 12 B (Megatron-Core's default, torchtitan, DeepSpeed);
//   kFp32Remainders  the master's low 16 bits beside the bf16 weight (its high 16 bits) and fp32 moments, 10 B:
//                    Transformer Engine FusedAdam's store_param_remainders (Megatron --use-precision-aware-optimizer),
//                    Apex DistributedFusedAdam as NeMo 1.x runs it with bf16 weights;
//   kBf16Moments     remainders and bf16 moments, 6 B (Megatron --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16);
//   kBf16            bf16 moments and no master copy (the bf16 weights updated in place), 4 B: NeMo 1.x
//                    `optim.dtype: bf16` (Apex DistributedFusedAdam with store_params false);
//   kBf16Master      a bf16 master copy and bf16 moments, 6 B, beside FP8 parameters only: NeMo 1.x `optim.dtype:
//                    bf16` with `fp8_params` (NeMo megatron_base_model.py forces Apex's store_params there: FP8
//                    weights cannot be updated in place, so the master is kept in the state's dtype).
enum class OptimizerState { kFp32, kFp32Remainders, kBf16Moments, kBf16, kBf16Master };
const char* OptimizerStateName(OptimizerState s);
bool ParseOptimizerState(const std::string& text, OptimizerState* out);
// Every name, in OptimizerState order (the readers' enum choices).
const std::vector<std::string>& OptimizerStateNameList();
// "fp32, fp32-remainders, bf16-moments, bf16 or bf16-master": every name, as messages list them.
std::string OptimizerStateNames();
// Optimizer-state bytes per parameter of a mixed-precision model (12, 10, 6, 4, 6).
double OptimizerStateBytes(OptimizerState s);
// HBM bytes the optimizer step moves per parameter: the fp32 gradient read, the state read and written, the
// 16-bit weight written and, where the weight is the master's high half or the master itself, read too (30, 28, 20,
// 16, 18: bf16-master reads its own master; Apex runs it as two passes of about 17 B).
double OptimizerStepTrafficPerParam(OptimizerState s);
// Why a model trained in `model` cannot keep state `s` (empty: it can). Every state but fp32 keeps 16-bit weights
// updated through bf16: remainders are the low half of an fp32 whose high half is the bf16 weight, so fp16
// weights (and fp32 models, which keep no master) take fp32 only.
std::string OptimizerStateRefusal(DType model, OptimizerState s);
// Why FP8 parameters (on: --fp8-param-gather / plan fp8_param_gather) cannot go with state `s` (empty: they can).
// FP8 parameters keep a master apart from the weights: fp32 (Megatron-Core, Apex with fp32 state) or bf16-master
// (Apex with bf16 state); the remainder states complete a bf16 weight they do not have, and bf16 has no master.
// bf16-master is FP8 parameters' only: with bf16 weights Apex's bf16 state keeps none (bf16).
std::string OptimizerStateFp8ParamsRefusal(OptimizerState s, bool fp8_params);

// Model-state bytes per parameter (weights w, optimizer states os, all of
// them beta; gradients beta - w - os) and the memory budget per GPU.
struct StateBytes {
  double weight = 2, optimizer = 12, total = 18;
  OptimizerState optimizer_state = OptimizerState::kFp32;  // how `optimizer` is kept (12 B: kFp32)
  // The gradient buffer's dtype; none without a model (a profile alone: the old 18-byte default's figures).
  std::optional<DType> grad_dtype;
  double grad = 4;  // gradient buffer bytes per parameter (fp32, or the 16-bit dtype: --grad-dtype)
  // A 16-bit gradient buffer is cast to fp32 for the optimizer step (Megatron's Float16Optimizer
  // _copy_model_grads_to_main_grads: main_param.grad = main_grad.float(), freed by zero_grad):
  // 4 bytes per parameter of the (sharded) optimizer state, while the activations are freed.
  double step_grad_copy = 0;
  double fp8_weight_copy = 0;  // fp8: Transformer Engine's FP8 weight and its transpose, kept beside the bf16 weight
  // FP8 parameters (--fp8-param-gather, KeepFp8Params): `weight` is the FP8 weight as the GEMMs read it, no copy.
  bool fp8_params = false;
  double param_gather = 2;  // bytes per parameter a parameter all-gather moves (the weight's; FP8 parameters' data)
  double grad_comm = 2;     // bytes per gradient element reduced over data parallelism: the gradient buffer's
                            // (grad: 4 for bf16 / fp8 / fp32, 2 for fp16 by default; --grad-dtype)
  // The share of the parameters that train (LoRA: the adapters'; ModelSpec::TrainableParams / TotalParams). grad,
  // optimizer, total, grad_comm and step_grad_copy above are per parameter of the whole model, this share included:
  // a frozen weight holds `weight` (and its FP8 copy) alone.
  double trainable = 1;
  double usable = 0;
};
// The model state of `model` (nullptr: a profile alone, the 18-byte default) with the gradient buffer
// in `grad_dtype` (none: DefaultGradDType), the optimizer's state kept as `optimizer_state` (a mixed-precision
// model's; an fp32 model keeps its 8 B of moments) and, when bytes_per_param > 0, that total as the user counts
// it (--bytes-per-param: no step copy added). `usable` is left 0 for the caller.
StateBytes ModelStateBytes(const ModelSpec* model, std::optional<DType> grad_dtype, double bytes_per_param,
                           OptimizerState optimizer_state = OptimizerState::kFp32);
// FP8 parameters (Megatron --fp8-param-gather; docs/cost_model.md section 5): an FP8 model's weights held as
// `weight_bytes` per parameter (the FP8 data, and its transpose or block scales where the GPU's GEMMs need them:
// the kernel table's recipe) with no bf16 copy beside them and no cached FP8 copy, gathered as `gather_bytes`.
// The fp32 master stays in the optimizer state. With a total the user counts (--bytes-per-param) the total stays:
// the FP8 weight is part of it, what is left of it the gradients' and the optimizer's.
void KeepFp8Params(double weight_bytes, double gather_bytes, bool user_total, StateBytes* sb);
// Per parameter on one GPU at ZeRO stage z sharded over d ranks (ZeRO section 3; Megatron's
// distributed-optimizer table for z = 1: 6 + 12/d with bf16 params and fp32 gradients).
double StateBytesPerParam(const StateBytes& sb, int64_t zero, int64_t d);

}  // namespace planner
