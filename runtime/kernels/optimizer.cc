#include "runtime/kernels/optimizer.h"

#include <cmath>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"

namespace planner {

Status Optimizer::Step(const std::vector<Param*>& params) {
  if (m_.empty()) {
    for (Param* p : params) {
      m_.emplace_back(static_cast<size_t>(p->value.numel()), 0.0f);
      v_.emplace_back(c_.kind == OptimizerConfig::kAdam ? static_cast<size_t>(p->value.numel()) : 0, 0.0f);
    }
  }
  if (m_.size() != params.size()) return Status::Internal("optimizer stepped with a different parameter list");
  ++t_;
  const double bc1 = 1 - std::pow(c_.beta1, static_cast<double>(t_)), bc2 = 1 - std::pow(c_.beta2, static_cast<double>(t_));
  for (size_t k = 0; k < params.size(); ++k) {
    Param* p = params[k];
    if (p->value.device() == Device::kCuda) {
      // Moments on the device, updated by one kernel per parameter.
      if (dev_m_.size() <= k) {
        dev_m_.resize(params.size());
        dev_v_.resize(params.size());
      }
      if (dev_m_[k].empty()) {
        dev_m_[k] = Tensor::Zeros(p->value.shape(), Device::kCuda);
        dev_v_[k] = Tensor::Zeros(p->value.shape(), Device::kCuda);
      }
      CudaOptimizerStep(c_.kind == OptimizerConfig::kSgd ? 0 : 1, p->value.data(), p->grad.data(), dev_m_[k].data(), dev_v_[k].data(),
                        p->value.numel(), static_cast<float>(c_.lr), static_cast<float>(c_.momentum), static_cast<float>(c_.beta1),
                        static_cast<float>(c_.beta2), static_cast<float>(c_.eps), static_cast<float>(c_.weight_decay),
                        static_cast<float>(bc1), static_cast<float>(bc2));
      continue;
    }
    float* w = p->value.data();
    const float* g = p->grad.data();
    auto& m = m_[k];
    const int64_t n = p->value.numel();
    if (static_cast<int64_t>(m.size()) != n) return Status::Internal(fmt::format("optimizer: parameter {} changed size", p->name));
    if (c_.kind == OptimizerConfig::kSgd) {
      for (int64_t i = 0; i < n; ++i) {
        size_t iu = static_cast<size_t>(i);
        m[iu] = static_cast<float>(c_.momentum * m[iu] + g[i]);
        w[i] -= static_cast<float>(c_.lr * m[iu]);
      }
    } else {
      auto& v = v_[k];
      for (int64_t i = 0; i < n; ++i) {
        size_t iu = static_cast<size_t>(i);
        m[iu] = static_cast<float>(c_.beta1 * m[iu] + (1 - c_.beta1) * g[i]);
        v[iu] = static_cast<float>(c_.beta2 * v[iu] + (1 - c_.beta2) * g[i] * g[i]);
        double mh = m[iu] / bc1, vh = v[iu] / bc2;
        w[i] -= static_cast<float>(c_.lr * (mh / (std::sqrt(vh) + c_.eps) + c_.weight_decay * w[i]));
      }
    }
  }
  return Status::OK();
}

std::vector<float> Optimizer::State() const {
  std::vector<float> s;
  for (size_t k = 0; k < m_.size(); ++k) {
    s.insert(s.end(), m_[k].begin(), m_[k].end());
    s.insert(s.end(), v_[k].begin(), v_[k].end());
  }
  s.push_back(static_cast<float>(t_));
  return s;
}

Status Optimizer::SetState(const std::vector<float>& s, const std::vector<Param*>& params) {
  m_.clear();
  v_.clear();
  size_t pos = 0;
  for (Param* p : params) {
    size_t n = static_cast<size_t>(p->value.numel()), nv = c_.kind == OptimizerConfig::kAdam ? n : 0;
    if (pos + n + nv >= s.size() + (params.empty() ? 1 : 0) && pos + n + nv > s.size() - 1) {
      return Status::InvalidArgument("optimizer state does not match the parameters");
    }
    m_.emplace_back(s.begin() + static_cast<long>(pos), s.begin() + static_cast<long>(pos + n));
    v_.emplace_back(s.begin() + static_cast<long>(pos + n), s.begin() + static_cast<long>(pos + n + nv));
    pos += n + nv;
  }
  if (pos + 1 != s.size()) return Status::InvalidArgument("optimizer state does not match the parameters");
  t_ = static_cast<int64_t>(s.back());
  return Status::OK();
}

}  // namespace planner
