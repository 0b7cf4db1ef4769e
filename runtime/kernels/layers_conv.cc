// The convolutional layers' kernels: conv2d and max / average pooling (NCHW).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/layers_internal.h"

namespace planner::kernels_internal {

namespace {

// ----------------------------------------------------------------- conv2d
// NCHW cross-correlation; the device keeps what its backward needs (ConvForward).
class Conv2d final : public LayerKernel {
 public:
  Conv2d(DeviceOps* ops, const std::string& name, const std::vector<int64_t>& in, int64_t cout, int64_t k,
         int64_t stride, int64_t pad, bool bias, uint64_t seed)
      : ops_(ops),
        in_(in),
        win_{in[0], in[1], in[2], k, stride, pad},
        cout_(cout),
        ckk_(in[0] * k * k),
        w_(UniformParam(*ops, name + ".weight", {cout, in[0], k, k}, seed,
                        1.0f / std::sqrt(static_cast<float>(ckk_)))) {
    if (bias) b_ = FilledParam(*ops, name + ".bias", {cout}, 0.0f);
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("conv2d", *ops_, x, in_, &b));
    Tensor kept;
    *y = ops_->Alloc({b, cout_, win_.out_h(), win_.out_w()});
    PLANNER_RETURN_IF_ERROR(ops_->ConvForward(win_, cout_, x, w_.value.data(), y->data(), &kept));
    if (!b_.value.empty()) PLANNER_RETURN_IF_ERROR(ops_->AddBiasChannels(y->data(), b_.value.data(), b, cout_, HW()));
    sv->t = {kept};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 1) return Status::Internal("conv2d: backward without forward");
    const int64_t b = sv->t[0].dim(0);
    if (dy.numel() != b * cout_ * HW())
      return Status::InvalidArgument("conv2d: gradient shape does not match the output");
    PLANNER_RETURN_IF_ERROR(ops_->ConvBackwardData(win_, cout_, sv->t[0], w_.value.data(), dy.data(), dx));
    sv->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("conv2d: backward-weight before backward-input");
    const int64_t b = sv->t[0].dim(0);
    PLANNER_RETURN_IF_ERROR(ops_->ConvBackwardFilter(win_, cout_, sv->t[0], sv->t[1].data(), w_.grad.data()));
    if (!b_.value.empty())
      PLANNER_RETURN_IF_ERROR(ops_->SumChannelsInto(sv->t[1].data(), b_.grad.data(), b, cout_, HW()));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    if (b_.value.empty()) return {&w_};
    return {&w_, &b_};
  }
  KernelFlops Flops(int64_t b) const override {
    double f = 2.0 * static_cast<double>(b) * static_cast<double>(cout_) * static_cast<double>(ckk_) *
               static_cast<double>(HW());
    return {f, f, f};
  }

 private:
  int64_t HW() const { return win_.out_h() * win_.out_w(); }
  DeviceOps* ops_;
  std::vector<int64_t> in_;
  Window win_;
  int64_t cout_, ckk_;
  Param w_, b_;
};

// ------------------------------------------------------------------ pools
class Pool final : public LayerKernel {
 public:
  Pool(DeviceOps* ops, bool max, const std::vector<int64_t>& in, int64_t k, int64_t stride, int64_t pad)
      : ops_(ops), max_(max), in_(in), win_{in[0], in[1], in[2], k, stride, pad} {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput(max_ ? "maxpool" : "avgpool", *ops_, x, in_, &b));
    const std::vector<int64_t> out = {b, in_[0], win_.out_h(), win_.out_w()};
    *y = ops_->Alloc(out);
    Tensor arg = max_ ? ops_->Alloc(out) : Tensor();
    PLANNER_RETURN_IF_ERROR(ops_->PoolForward(max_, win_, b, x.data(), y->data(), max_ ? arg.data() : nullptr));
    sv->t = {arg};
    sv->t.push_back(Tensor::Zeros({b}));  // remembers b
    sv->exact = {0, 1};                   // argmax indices; b
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("pool: backward without forward");
    const int64_t b = sv->t[1].dim(0);
    if (dy.numel() != b * in_[0] * win_.out_h() * win_.out_w())
      return Status::InvalidArgument("pool: gradient shape does not match the output");
    *dx = ops_->Zeros(WithBatch(b, in_));
    PLANNER_RETURN_IF_ERROR(ops_->PoolBackward(max_, win_, b, dy.data(), max_ ? sv->t[0].data() : nullptr, dx->data()));
    sv->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  DeviceOps* ops_;
  bool max_;
  std::vector<int64_t> in_;
  Window win_;
};

}  // namespace

std::unique_ptr<LayerKernel> MakeConv2d(DeviceOps* ops, const std::string& name, const std::vector<int64_t>& in,
                                        int64_t cout, int64_t k, int64_t stride, int64_t pad, bool bias,
                                        uint64_t seed) {
  return std::make_unique<Conv2d>(ops, name, in, cout, k, stride, pad, bias, seed);
}

std::unique_ptr<LayerKernel> MakePool(DeviceOps* ops, bool max, const std::vector<int64_t>& in, int64_t k,
                                      int64_t stride, int64_t pad) {
  return std::make_unique<Pool>(ops, max, in, k, stride, pad);
}

}  // namespace planner::kernels_internal
