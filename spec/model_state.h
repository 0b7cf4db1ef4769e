// Model-state bytes per parameter as the engines keep them: weights, the gradient buffer (its dtype
// and the fp16 step's fp32 copy), optimizer states and Transformer Engine's FP8 weight copies, and
// their share per GPU at each ZeRO stage (docs/cost_model.md section 5). Used by the cost model and
// by the run report, which compares the plan's figure with the measured one. Plain value types.
#pragma once

#include <cstdint>
#include <optional>

#include "spec/dtype.h"

namespace planner {

struct ModelSpec;

// Model-state bytes per parameter (weights w, optimizer states os, all of
// them beta; gradients beta - w - os) and the memory budget per GPU.
struct StateBytes {
  double weight = 2, optimizer = 12, total = 18;
  // The gradient buffer's dtype; none without a model (a profile alone: the old 18-byte default's figures).
  std::optional<DType> grad_dtype;
  double grad = 4;  // gradient buffer bytes per parameter (fp32, or the 16-bit dtype: --grad-dtype)
  // A 16-bit gradient buffer is cast to fp32 for the optimizer step (Megatron's Float16Optimizer
  // _copy_model_grads_to_main_grads: main_param.grad = main_grad.float(), freed by zero_grad):
  // 4 bytes per parameter of the (sharded) optimizer state, while the activations are freed.
  double step_grad_copy = 0;
  double fp8_weight_copy = 0;  // fp8: Transformer Engine's FP8 weight and its transpose, kept beside the bf16 weight
  double grad_comm = 2;        // bytes per gradient element reduced over data parallelism: the gradient buffer's
                               // (grad: 4 for bf16 / fp8 / fp32, 2 for fp16 by default; --grad-dtype)
  double usable = 0;
};
// The model state of `model` (nullptr: a profile alone, the 18-byte default) with the gradient buffer
// in `grad_dtype` (none: DefaultGradDType) and, when bytes_per_param > 0, that total as the user counts
// it (--bytes-per-param: no step copy added). `usable` is left 0 for the caller.
StateBytes ModelStateBytes(const ModelSpec* model, std::optional<DType> grad_dtype, double bytes_per_param);
// Per parameter on one GPU at ZeRO stage z sharded over d ranks (ZeRO section 3; Megatron's
// distributed-optimizer table for z = 1: 6 + 12/d with bf16 params and fp32 gradients).
double StateBytesPerParam(const StateBytes& sb, int64_t zero, int64_t d);

}  // namespace planner
