// Parameter updates: SGD (with momentum) and Adam (Kingma & Ba, with
// bias correction; decoupled weight decay as AdamW when weight_decay > 0).
// State lives in the optimizer, keyed by the parameter's position in the
// list it is stepped with (the same list every step), as tensors on the
// parameter's device: host loops for CPU parameters, one CUDA kernel per
// parameter for GPU ones. State() / SetState() move the moments through the
// host for checkpoints on either device.
#pragma once

#include <vector>

#include "common/status.h"
#include "runtime/kernels/kernel.h"

namespace planner {

struct OptimizerConfig {
  enum Kind { kSgd, kAdam } kind = kAdam;
  double lr = 1e-3;
  double momentum = 0;                                              // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;  // Adam
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig c) : c_(c) {}
  // One update of every parameter from its gradient; gradients are left as they are.
  Status Step(const std::vector<Param*>& params);
  int64_t steps() const { return t_; }
  // Flat state for checkpoints: per parameter its first moment, then (Adam) its
  // second moment, then the step count. Empty moments before the first step.
  std::vector<float> State() const;
  Status SetState(const std::vector<float>& state, const std::vector<Param*>& params);
  // The bytes State() would hold (the moments' fp32 values and the step count), without copying them.
  int64_t StateBytes() const;

 private:
  OptimizerConfig c_;
  int64_t t_ = 0;
  std::vector<Tensor> m_, v_;  // on each parameter's device; v_ empty for SGD
};

}  // namespace planner
