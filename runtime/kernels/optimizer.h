// Parameter updates: SGD (with momentum) and Adam (Kingma & Ba, with
// bias correction; decoupled weight decay as AdamW when weight_decay > 0).
// State lives in the optimizer, keyed by the parameter's position in the
// list it is stepped with (the same list every step). CPU tensors.
#pragma once

#include <vector>

#include "common/status.h"
#include "runtime/kernels/kernel.h"

namespace planner {

struct OptimizerConfig {
  enum Kind { kSgd, kAdam } kind = kAdam;
  double lr = 1e-3;
  double momentum = 0;        // SGD
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;  // Adam
};

class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig c) : c_(c) {}
  // One update of every parameter from its gradient; gradients are left as they are.
  Status Step(const std::vector<Param*>& params);
  int64_t steps() const { return t_; }
  // Flat state for checkpoints (moments, then the step count).
  std::vector<float> State() const;
  Status SetState(const std::vector<float>& state, const std::vector<Param*>& params);

 private:
  OptimizerConfig c_;
  int64_t t_ = 0;
  std::vector<std::vector<float>> m_, v_;
  std::vector<Tensor> dev_m_, dev_v_;  // CUDA parameters' moments (State() covers host parameters only)
};

}  // namespace planner
