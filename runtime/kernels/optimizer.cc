#include "runtime/kernels/optimizer.h"

#include <cmath>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"

namespace planner {

Status Optimizer::Step(const std::vector<Param*>& params) {
  const bool adam = c_.kind == OptimizerConfig::kAdam;
  if (m_.empty()) {
    for (Param* p : params) {
      m_.push_back(Tensor::Zeros(p->value.shape(), p->value.device()));
      v_.push_back(adam ? Tensor::Zeros(p->value.shape(), p->value.device()) : Tensor());
    }
  }
  if (m_.size() != params.size()) return Status::Internal("optimizer stepped with a different parameter list");
  ++t_;
  const double bc1 = 1 - std::pow(c_.beta1, static_cast<double>(t_)),
               bc2 = 1 - std::pow(c_.beta2, static_cast<double>(t_));
  for (size_t k = 0; k < params.size(); ++k) {
    Param* p = params[k];
    const int64_t n = p->value.numel();
    if (m_[k].numel() != n || m_[k].device() != p->value.device()) {
      return Status::Internal(fmt::format("optimizer: parameter {} changed size or device", p->name));
    }
    // A 16-bit weight steps its fp32 master, then takes the master rounded (RNE) to its dtype.
    Tensor& target = p->master.empty() ? p->value : p->master;
    if (target.dtype() != DType::kFp32 || target.numel() != n) {
      return Status::Internal(fmt::format("optimizer: parameter {} has a {} weight and no fp32 master", p->name,
                                          DTypeName(p->value.dtype())));
    }
    float* w = target.data();
    const float* g = p->grad.data();
    float* m = m_[k].data();
    float* v = adam ? v_[k].data() : nullptr;
    if (p->value.device() == Device::kCuda) {
      CudaOptimizerStep(adam ? 1 : 0, w, g, m, v, n, static_cast<float>(c_.lr), static_cast<float>(c_.momentum),
                        static_cast<float>(c_.beta1), static_cast<float>(c_.beta2), static_cast<float>(c_.eps),
                        static_cast<float>(c_.weight_decay), static_cast<float>(bc1), static_cast<float>(bc2));
    } else if (!adam) {
      const float mu = static_cast<float>(c_.momentum), lr = static_cast<float>(c_.lr);
      for (int64_t i = 0; i < n; ++i) {
        m[i] = mu * m[i] + g[i];
        w[i] -= lr * m[i];
      }
    } else {
      // In float, as the CUDA kernel, so the loop vectorises (it was 3% of a 1-rank run in double).
      const float b1 = static_cast<float>(c_.beta1), b2 = static_cast<float>(c_.beta2), lr = static_cast<float>(c_.lr);
      const float eps = static_cast<float>(c_.eps), wd = static_cast<float>(c_.weight_decay);
      const float ib1 = static_cast<float>(1 / bc1), ib2 = static_cast<float>(1 / bc2);
      for (int64_t i = 0; i < n; ++i) {
        const float mi = b1 * m[i] + (1 - b1) * g[i];
        const float vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        w[i] -= lr * (mi * ib1 / (std::sqrt(vi * ib2) + eps) + wd * w[i]);
      }
    }
    if (!p->master.empty()) p->value = p->master.Converted(p->value.dtype());
  }
  return Status::OK();
}

std::vector<float> Optimizer::State() const {
  std::vector<float> s;
  for (size_t k = 0; k < m_.size(); ++k) {
    for (const Tensor* t : {&m_[k], &v_[k]}) {
      std::vector<float> x = t->ToVector();  // through the host for CUDA moments
      s.insert(s.end(), x.begin(), x.end());
    }
  }
  s.push_back(static_cast<float>(t_));
  return s;
}

int64_t Optimizer::StateBytes() const {
  int64_t floats = 1;  // the step count
  for (size_t k = 0; k < m_.size(); ++k) floats += m_[k].numel() + v_[k].numel();
  return 4 * floats;
}

Status Optimizer::SetState(const std::vector<float>& s, const std::vector<Param*>& params) {
  const bool adam = c_.kind == OptimizerConfig::kAdam;
  size_t need = 1;
  for (Param* p : params) need += static_cast<size_t>(p->value.numel()) * (adam ? 2 : 1);
  if (s.size() != need) {
    return Status::InvalidArgument(
        fmt::format("optimizer state holds {} values, the parameters need {}", s.size(), need));
  }
  m_.clear();
  v_.clear();
  size_t pos = 0;
  auto take = [&](const Param* p) {
    const size_t n = static_cast<size_t>(p->value.numel());
    std::vector<float> x(s.begin() + static_cast<long>(pos), s.begin() + static_cast<long>(pos + n));
    pos += n;
    return Tensor::FromVector(p->value.shape(), x).To(p->value.device());
  };
  for (Param* p : params) {
    m_.push_back(take(p));
    v_.push_back(adam ? take(p) : Tensor());
  }
  t_ = static_cast<int64_t>(s.back());
  return Status::OK();
}

}  // namespace planner
