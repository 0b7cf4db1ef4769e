// Mixed-precision training (docs/runtime.md "Mixed precision"), as Megatron-LM / PyTorch AMP-O2 run
// it: model weights stored in the run's 16-bit dtype with fp32 master weights that the optimizer
// steps, fp32 gradients, and the activations, activation gradients and Saved state of every layer in
// the 16-bit dtype, except exact data (Saved::exact) and the loss layer (fp32 cross-entropy).
// Compute stays fp32: a wrapped kernel decodes its weights, inputs and Saved into fp32 working
// copies (uncounted scratch, freed before the pass returns) and runs the fp32 kernel on them.
// fp16 runs add dynamic loss scaling (LossScaler, UnscaleAndCheck).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/kernels/kernel.h"
#include "spec/layer.h"

namespace planner {

// The dtype a run of precision `run` stores weights and activations in: fp32 -> fp32, bf16 -> bf16,
// fp16 -> fp16, fp8 -> bf16 (FP8 is a GEMM precision only).
DType StorageDType(DType run);

// Wraps *k so that it stores in `storage` (kBf16 or kFp16): Params() then report value in
// `storage`, master fp32 (the kernel's initial weights) and grad fp32; Forward takes x in any dtype
// and returns y in `storage` (a loss layer's y stays fp32); BackwardInput returns dx in `storage`;
// the Saved holds `storage` tensors except its exact entries (a loss layer's Saved stays fp32).
// Entries of one Saved that share storage are converted once. kFp32: a no-op (*k untouched).
// kFp8: InvalidArgument (pass StorageDType(run)).
Status WrapMixedPrecision(DType storage, bool loss_layer, std::unique_ptr<LayerKernel>* k);

// Dynamic loss scaling for fp16 (Megatron's DynamicGradScaler): the loss gradient is multiplied by
// scale() before backward; Update(found_inf) after the gradients are unscaled and checked. An
// overflow skips the step and, after `hysteresis` consecutive overflows, halves the scale (never
// below 1); growth_interval clean steps in a row double it. Thread-compatible.
class LossScaler {
 public:
  explicit LossScaler(double initial = 65536, int growth_interval = 1000, int hysteresis = 2);
  double scale() const { return scale_; }
  // true: apply this step's update; false: skip it (the gradients overflowed).
  bool Update(bool found_inf);
  int64_t skipped() const { return skipped_; }
  // Checkpoints: {scale, clean steps, overflows left before the next halving} (the scale as fp32:
  // exact for the default and every power-of-two initial scale, Megatron's 2^32 among them). The
  // skipped count is the job's own (the report counts this job's steps). SetState refuses anything
  // but three finite values in range.
  std::vector<float> State() const;
  Status SetState(const std::vector<float>& state);

 private:
  double scale_;
  int growth_interval_, hysteresis_;
  int clean_ = 0;  // clean steps since the last overflow or growth
  int tolerance_;  // overflows left before the scale halves
  int64_t skipped_ = 0;
};

// Multiplies every parameter's fp32 gradient by inv_scale and returns whether any gradient element
// is inf or NaN (after the multiply). CPU loop or one CUDA pass per parameter.
bool UnscaleAndCheck(const std::vector<Param*>& params, double inv_scale);

}  // namespace planner
