#include "runtime/kernels/mixed_precision.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"

namespace planner {

DType StorageDType(DType run) { return run == DType::kFp8 ? DType::kBf16 : run; }

namespace {

// Tensors that share storage (a Saved entry that is the layer's input, or another entry) are
// recognised by their element address, shape and dtype, so each is converted once.
using AliasKey = std::pair<const void*, std::pair<std::vector<int64_t>, DType>>;
AliasKey KeyOf(const Tensor& t) { return {t.raw(), {t.shape(), t.dtype()}}; }

// What a Saved tree holds, converted: 16-bit entries to fp32 scratch (decode, for a pass) or fp32
// entries to `to` (encode, after a pass), exact entries and empty tensors kept. `known` maps
// tensors already converted (the pass's input and output) to their converted copy.
void ConvertSaved(Saved* s, DType to, bool scratch, std::map<AliasKey, Tensor>* known) {
  for (size_t i = 0; i < s->t.size(); ++i) {
    Tensor& t = s->t[i];
    if (t.empty() || t.dtype() == to || s->IsExact(i)) continue;
    auto it = known->find(KeyOf(t));
    if (it != known->end()) {
      t = it->second;
      continue;
    }
    Tensor c = scratch ? t.ConvertedScratch(to) : t.Converted(to);
    known->emplace(KeyOf(t), c);
    t = std::move(c);
  }
  for (Saved& c : s->children) ConvertSaved(&c, to, scratch, known);
}

class MixedPrecisionKernel : public LayerKernel {
 public:
  MixedPrecisionKernel(DType storage, bool loss_layer, std::unique_ptr<LayerKernel> inner)
      : storage_(storage), loss_layer_(loss_layer), inner_(std::move(inner)) {
    for (Param* p : inner_->Params()) {
      Param q = *p;  // name, flags, and the fp32 gradient (shared storage)
      q.master = p->value;
      q.value = p->value.Converted(storage_);
      params_.push_back(std::move(q));
      inner_params_.push_back(p);
    }
    for (Param* p : inner_params_) p->value = Tensor();  // the master lives in params_; working copies per pass
  }

  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    WorkingWeights w(this);
    Tensor x32 = Decode(x);
    Tensor y32;
    PLANNER_RETURN_IF_ERROR(inner_->Forward(x32, &y32, sv));
    if (loss_layer_) {
      *y = y32;
      return Status::OK();
    }
    *y = y32.dtype() == storage_ ? y32 : y32.Converted(storage_);
    std::map<AliasKey, Tensor> known;
    if (x.dtype() == storage_ && !x.empty()) known.emplace(KeyOf(x32), x);  // the input is stored already
    known.emplace(KeyOf(y32), *y);
    ConvertSaved(sv, storage_, false, &known);
    return Status::OK();
  }

  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    WorkingWeights w(this);
    Decoded d;
    if (!loss_layer_) DecodeInto(sv, &d);
    Tensor dx32, dy32 = Decode(dy);
    PLANNER_RETURN_IF_ERROR(inner_->BackwardInput(dy32, &dx32, sv));
    *dx = dx32.empty() || dx32.dtype() == storage_ ? dx32 : dx32.Converted(storage_);
    if (loss_layer_) return Status::OK();
    if (dy.dtype() == storage_) d.back.emplace(KeyOf(dy32), dy);  // W's copy of dy: the caller's
    if (!dx32.empty()) d.back.emplace(KeyOf(dx32), *dx);
    ConvertSaved(sv, storage_, false, &d.back);
    return Status::OK();
  }

  Status BackwardWeight(Saved* sv) override {
    WorkingWeights w(this);
    Decoded d;
    if (!loss_layer_) DecodeInto(sv, &d);
    return inner_->BackwardWeight(sv);
  }

  std::vector<Param*> Params() override {
    std::vector<Param*> out;
    for (Param& p : params_) out.push_back(&p);
    return out;
  }
  void SetTargets(const Tensor& targets) override { inner_->SetTargets(targets); }
  KernelFlops Flops(int64_t b) const override { return inner_->Flops(b); }
  double TakeAuxLoss() override { return inner_->TakeAuxLoss(); }

 private:
  // The inner kernel's weights for one pass: fp32 decodes of the stored values (uncounted scratch,
  // the role of a GEMM's cast workspace), dropped when the pass returns.
  struct WorkingWeights {
    explicit WorkingWeights(MixedPrecisionKernel* k) : k_(k) {
      for (size_t i = 0; i < k_->params_.size(); ++i) {
        Param& p = k_->params_[i];
        k_->inner_params_[i]->value =
            p.value.dtype() == DType::kFp32 ? p.value : p.value.ConvertedScratch(DType::kFp32);
        k_->inner_params_[i]->grad = p.grad;  // a caller may have replaced the gradient tensor
      }
    }
    ~WorkingWeights() {
      for (Param* p : k_->inner_params_) p->value = Tensor();
    }
    MixedPrecisionKernel* k_;
  };

  static Tensor Decode(const Tensor& t) {
    return t.empty() || t.dtype() == DType::kFp32 ? t : t.ConvertedScratch(DType::kFp32);
  }
  // The Saved's 16-bit entries decoded in place; returns each decoded copy's key -> the stored
  // tensor it came from, and keeps the copies alive, so the encode after the pass hands back the
  // stored tensors themselves (no new copy; the input stays shared with the caller's).
  struct Decoded {
    std::map<AliasKey, Tensor> back;
    std::vector<Tensor> alive;  // a freed copy's address could be reused by an unrelated tensor
  };
  static void DecodeInto(Saved* sv, Decoded* d) {
    for (size_t i = 0; i < sv->t.size(); ++i) {
      Tensor& t = sv->t[i];
      if (t.empty() || t.dtype() == DType::kFp32) continue;
      Tensor c = t.ConvertedScratch(DType::kFp32);
      d->back.emplace(KeyOf(c), t);
      d->alive.push_back(c);
      t = std::move(c);
    }
    for (Saved& c : sv->children) DecodeInto(&c, d);
  }

  DType storage_;
  bool loss_layer_;
  std::unique_ptr<LayerKernel> inner_;
  std::vector<Param> params_;
  std::vector<Param*> inner_params_;
};

}  // namespace

Status WrapMixedPrecision(DType storage, bool loss_layer, std::unique_ptr<LayerKernel>* k) {
  if (storage == DType::kFp32) return Status::OK();
  if (storage == DType::kFp8)
    return Status::InvalidArgument("WrapMixedPrecision: fp8 is not a storage dtype (store bf16: StorageDType(fp8))");
  if (*k == nullptr) return Status::InvalidArgument("WrapMixedPrecision: no kernel");
  *k = std::make_unique<MixedPrecisionKernel>(storage, loss_layer, std::move(*k));
  return Status::OK();
}

LossScaler::LossScaler(double initial, int growth_interval, int hysteresis)
    : scale_(initial),
      growth_interval_(std::max(1, growth_interval)),
      hysteresis_(std::max(1, hysteresis)),
      tolerance_(hysteresis_) {}

std::vector<float> LossScaler::State() const {
  return {static_cast<float>(scale_), static_cast<float>(clean_), static_cast<float>(tolerance_)};
}

Status LossScaler::SetState(const std::vector<float>& s) {
  const bool ok = s.size() == 3 && std::isfinite(s[0]) && s[0] >= 1 && s[1] >= 0 &&
                  s[1] < static_cast<float>(growth_interval_) && s[2] >= 0 && s[2] <= static_cast<float>(hysteresis_) &&
                  s[1] == std::floor(s[1]) && s[2] == std::floor(s[2]);
  if (!ok)
    return Status::InvalidArgument(
        "the loss scaler's state is not {scale >= 1, clean steps, overflows left}: the checkpoint is damaged");
  scale_ = s[0], clean_ = static_cast<int>(s[1]), tolerance_ = static_cast<int>(s[2]);
  return Status::OK();
}

bool LossScaler::Update(bool found_inf) {
  if (found_inf) {
    ++skipped_;
    clean_ = 0;
    // As Megatron: the tolerance is restored only by growth, so once spent (0, never below: it is
    // checkpointed as the overflows left) every overflow halves.
    tolerance_ = std::max(0, tolerance_ - 1);
    if (tolerance_ == 0) scale_ = std::max(1.0, scale_ / 2);
    return false;
  }
  if (++clean_ >= growth_interval_) {
    scale_ *= 2;
    clean_ = 0;
    tolerance_ = hysteresis_;  // Megatron resets the hysteresis when the scale grows
  }
  return true;
}

bool UnscaleAndCheck(const std::vector<Param*>& params, double inv_scale) {
  const float inv = static_cast<float>(inv_scale);
  bool found = false;
  for (Param* p : params) {
    const int64_t n = p->grad.numel();
    if (n == 0) continue;
    if (p->grad.device() == Device::kCpu) {
      float* g = p->grad.data();
      for (int64_t i = 0; i < n; ++i) {
        g[i] *= inv;
        found |= !std::isfinite(g[i]);
      }
      continue;
    }
    // CUDA gradients: through the host (one copy each way per parameter; once per step).
    std::vector<float> g = p->grad.ToVector();
    for (float& v : g) {
      v *= inv;
      found |= !std::isfinite(v);
    }
    CudaCopyToDevice(p->grad.raw(), g.data(), n * 4);
  }
  return found;
}

}  // namespace planner
