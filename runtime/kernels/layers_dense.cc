// The dense layers' kernels: linear, the elementwise activations and dropout, the norms, the
// embedding, the loss (the lm_head is a vocabulary-parallel Linear, composed in layers.cc) and
// flatten. Linear and Elementwise are declared in layers_internal.h: the other families hold them.
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

// ------------------------------------------------------ layernorm / rmsnorm
// Over the last dimension. LayerNorm: y = (x - mean) / sqrt(var + eps) o gamma + beta (GPT);
// RMSNorm: y = x / sqrt(mean(x^2) + eps) o weight (Llama's norm; weight only). Both keep the
// normalised input and 1 / rms per row for backward, and differ only in the device ops they call.
class Norm final : public LayerKernel {
 public:
  Norm(DeviceOps* ops, const std::string& name, std::vector<int64_t> shape, bool rms)
      : ops_(ops),
        rms_(rms),
        shape_(std::move(shape)),
        h_(shape_.back()),
        g_(FilledParam(*ops, name + (rms ? ".weight" : ".gamma"), {h_}, 1.0f)),
        b_(rms ? Param{} : FilledParam(*ops, name + ".beta", {h_}, 0.0f)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput(Name(), *ops_, x, shape_, &b));
    const int64_t n = x.numel() / h_;
    *y = ops_->Alloc(x.shape());
    Tensor xhat = ops_->Alloc({n, h_}), rstd = ops_->Alloc({n});
    PLANNER_RETURN_IF_ERROR(
        rms_ ? ops_->RmsNormForward(x.data(), g_.value.data(), y->data(), xhat.data(), rstd.data(), n, h_)
             : ops_->LayerNormForward(x.data(), g_.value.data(), b_.value.data(), y->data(), xhat.data(), rstd.data(),
                                      n, h_));
    s->t = {xhat, rstd};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 2) return Status::Internal(std::string(Name()) + ": backward without forward");
    const Tensor& xhat = s->t[0];
    const int64_t n = xhat.dim(0);
    if (dy.numel() != n * h_)
      return Status::InvalidArgument(std::string(Name()) + ": gradient shape does not match the output");
    *dx = ops_->Alloc(dy.shape());
    PLANNER_RETURN_IF_ERROR(
        rms_ ? ops_->RmsNormBackward(dy.data(), g_.value.data(), xhat.data(), s->t[1].data(), dx->data(), n, h_)
             : ops_->LayerNormBackward(dy.data(), g_.value.data(), xhat.data(), s->t[1].data(), dx->data(), n, h_));
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 3) return Status::Internal(std::string(Name()) + ": backward-weight before backward-input");
    const int64_t n = s->t[0].dim(0);
    PLANNER_RETURN_IF_ERROR(
        rms_ ? ops_->RmsNormParamGrads(s->t[2].data(), s->t[0].data(), g_.grad.data(), n, h_)
             : ops_->LayerNormParamGrads(s->t[2].data(), s->t[0].data(), g_.grad.data(), b_.grad.data(), n, h_));
    s->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return rms_ ? std::vector<Param*>{&g_} : std::vector<Param*>{&g_, &b_}; }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  const char* Name() const { return rms_ ? "rmsnorm" : "layernorm"; }
  DeviceOps* ops_;
  bool rms_;
  std::vector<int64_t> shape_;
  int64_t h_;
  Param g_, b_;  // gamma (RMSNorm: weight), beta (LayerNorm only)
};

// -------------------------------------------------------------- embedding
// Token ids (floats) [b, s] -> [b, s, h]; vocabulary-parallel over TP ranks:
// rank r holds rows [r V/t, (r+1) V/t), positions live on rank 0, and the sum
// over ranks is all-reduced.
class Embedding final : public LayerKernel {
 public:
  Embedding(DeviceOps* ops, const std::string& name, int64_t seq, int64_t vocab, int64_t hidden, int64_t positions,
            const KernelOptions& o)
      : ops_(ops),
        seq_(seq),
        vocab_(vocab),
        h_(hidden),
        local_(vocab / o.tp_size),
        start_(o.tp_rank * (vocab / o.tp_size)),
        use_pos_(positions > 0 && o.tp_rank == 0),
        group_(o.tp_group),
        w_(MakeParam(*ops, name + ".word", EmbeddingRows(vocab, hidden, o.seed, start_, local_))) {
    w_.tp_sharded = o.tp_size > 1;
    if (positions > 0) {
      p_ = UniformParam(*ops, name + ".position", {positions, hidden}, o.seed + 17, 0.02f * std::sqrt(3.0f));
      p_.tp_sharded = o.tp_size > 1;  // used (and its gradient non-zero) on TP rank 0 only
    }
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckShape("embedding", x, {seq_}, &b));  // ids may come from the host
    PLANNER_RETURN_IF_ERROR(CheckIds(x));
    const Tensor ids = ops_->Upload(x);
    *y = ops_->Zeros({b, seq_, h_});
    PLANNER_RETURN_IF_ERROR(ops_->EmbeddingForward(ids.data(), w_.value.data(), use_pos_ ? p_.value.data() : nullptr,
                                                   y->data(), b * seq_, seq_, h_, start_, local_));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, y));
    s->t = {ids};
    s->exact = {0};  // token ids
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("embedding: backward without forward");
    *dx = Tensor();  // token ids have no gradient
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("embedding: backward-weight before backward-input");
    const Tensor& ids = s->t[0];
    PLANNER_RETURN_IF_ERROR(ops_->EmbeddingBackward(ids.data(), s->t[1].data(), w_.grad.data(),
                                                    use_pos_ ? p_.grad.data() : nullptr, ids.numel(), seq_, h_, start_,
                                                    local_));
    s->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    if (p_.value.empty()) return {&w_};
    return {&w_, &p_};
  }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  Status CheckIds(const Tensor& x) const {
    std::vector<float> copy;
    const float* ids = x.data();
    if (x.device() != Device::kCpu) {
      copy = x.ToVector();
      ids = copy.data();
    }
    for (int64_t r = 0; r < x.numel(); ++r) {
      float tf = ids[r];
      if (!(tf >= 0) || static_cast<int64_t>(tf) >= vocab_)
        return Status::InvalidArgument(fmt::format("embedding: token id {} outside [0, {})", tf, vocab_));
    }
    return Status::OK();
  }
  DeviceOps* ops_;
  int64_t seq_, vocab_, h_, local_, start_;
  bool use_pos_;
  TpGroup* group_;
  Param w_, p_;
};

// ------------------------------------------------------------------- loss
// Softmax cross-entropy over the last dimension (vocabulary-parallel: each
// rank holds V / t logits of every row; max, sum and the target logit are
// all-reduced). Output [b, 1]: each sample's mean loss over its rows.
class Loss final : public LayerKernel {
 public:
  Loss(DeviceOps* ops, std::vector<int64_t> shape, const KernelOptions& o)
      : ops_(ops),
        shape_(std::move(shape)),
        v_(shape_.back()),
        rows_(Product(shape_) / v_),
        start_(o.tp_rank * v_),
        group_(o.tp_group) {}
  void SetTargets(const Tensor& targets) override { targets_ = ops_->Upload(targets); }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("loss", *ops_, x, shape_, &b));
    const int64_t n = b * rows_;
    if (targets_.numel() != n) {
      return Status::InvalidArgument(
          fmt::format("loss: {} targets for {} rows; set one class id per row", targets_.numel(), n));
    }
    Tensor probs = ops_->Alloc({n, v_});
    Tensor mx = ops_->Scratch({n}), sum = ops_->Scratch({n}), tl = ops_->Scratch({n});
    PLANNER_RETURN_IF_ERROR(ops_->CrossEntropyMax(x.data(), targets_.data(), mx.data(), tl.data(), n, v_, start_));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceMax(mx.data(), n));
    PLANNER_RETURN_IF_ERROR(ops_->CrossEntropyExp(x.data(), mx.data(), probs.data(), sum.data(), n, v_));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, &sum));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, &tl));
    *y = ops_->Zeros({b, 1});
    PLANNER_RETURN_IF_ERROR(
        ops_->CrossEntropyFinish(probs.data(), sum.data(), mx.data(), tl.data(), y->data(), n, v_, rows_));
    sv->t = {probs, targets_};
    sv->exact = {1};  // class ids
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("loss: backward without forward");
    const Tensor& probs = sv->t[0];
    const int64_t n = probs.dim(0), b = n / rows_;
    if (dy.numel() != b) return Status::InvalidArgument("loss: the gradient needs one value per sample");
    *dx = ops_->Alloc(WithBatch(b, shape_));
    PLANNER_RETURN_IF_ERROR(
        ops_->CrossEntropyBackward(probs.data(), sv->t[1].data(), dy.data(), dx->data(), n, v_, rows_, start_));
    sv->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  DeviceOps* ops_;
  std::vector<int64_t> shape_;
  int64_t v_, rows_, start_;
  TpGroup* group_;
  Tensor targets_;
};

// ---------------------------------------------------------------- flatten
class Flatten final : public LayerKernel {
 public:
  Flatten(DeviceOps* ops, std::vector<int64_t> in) : ops_(ops), in_(std::move(in)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("flatten", *ops_, x, in_, &b));
    *y = x.Reshaped({b, Product(in_)});
    sv->t = {Tensor::Zeros({b})};  // remembers b
    sv->exact = {0};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 1) return Status::Internal("flatten: backward without forward");
    *dx = dy.Reshaped(WithBatch(sv->t[0].dim(0), in_));
    sv->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  DeviceOps* ops_;
  std::vector<int64_t> in_;
};

}  // namespace

Linear::Linear(DeviceOps* ops, const std::string& name, int64_t in, int64_t out, bool bias, int64_t tokens_per_sample,
               uint64_t seed, const WeightSlice& slice)
    : ops_(ops),
      in_(in),
      out_(out),
      tokens_(tokens_per_sample),
      w_(MakeParam(*ops, name + ".weight", LinearWeight(out, in, seed, slice))) {
  w_.tp_sharded = slice.cut();
  if (bias) {
    b_ = FilledParam(*ops, name + ".bias", {out}, 0.0f);
    b_.tp_sharded =
        slice.cut() && out != slice.full_out;  // column-parallel bias is sharded; row-parallel lives on rank 0
  }
}

Status Linear::Forward(const Tensor& x, Tensor* y, Saved* s) {
  if (x.empty() || x.dim(-1) != in_)
    return Status::InvalidArgument(fmt::format("linear: input {} does not end in {}", x.ShapeString(), in_));
  PLANNER_RETURN_IF_ERROR(CheckDevice("linear", *ops_, x));
  const int64_t n = x.numel() / in_;
  std::vector<int64_t> shape = x.shape();
  shape.back() = out_;
  *y = ops_->Alloc(shape);
  GemmArgs g;  // Y = X W^T
  g.tb = true;
  g.m = n, g.n = out_, g.k = in_, g.lda = in_, g.ldb = in_, g.ldc = out_;
  PLANNER_RETURN_IF_ERROR(ops_->Gemm(g, x.data(), w_.value.data(), y->data()));
  if (!b_.value.empty()) PLANNER_RETURN_IF_ERROR(ops_->AddBiasRows(y->data(), b_.value.data(), n, out_));
  s->t = {x};
  return Status::OK();
}

Status Linear::BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) {
  if (s->t.size() != 1) return Status::Internal("linear: backward without forward");
  const Tensor& x = s->t[0];
  const int64_t n = x.numel() / in_;
  if (dy.numel() != n * out_) return Status::InvalidArgument("linear: gradient shape does not match the output");
  *dx = ops_->Alloc(x.shape());
  GemmArgs g;  // dX = dY W
  g.m = n, g.n = in_, g.k = out_, g.lda = out_, g.ldb = in_, g.ldc = in_;
  PLANNER_RETURN_IF_ERROR(ops_->Gemm(g, dy.data(), w_.value.data(), dx->data()));
  s->t.push_back(dy);
  return Status::OK();
}

Status Linear::BackwardWeight(Saved* s) {
  if (s->t.size() != 2) return Status::Internal("linear: backward-weight before backward-input");
  const Tensor& x = s->t[0];
  const Tensor& dy = s->t[1];
  const int64_t n = x.numel() / in_;
  GemmArgs g;  // dW += dY^T X
  g.ta = true;
  g.m = out_, g.n = in_, g.k = n, g.lda = out_, g.ldb = in_, g.ldc = in_, g.beta = 1.0f;
  PLANNER_RETURN_IF_ERROR(ops_->Gemm(g, dy.data(), x.data(), w_.grad.data()));
  if (!b_.value.empty()) PLANNER_RETURN_IF_ERROR(ops_->SumRowsInto(dy.data(), b_.grad.data(), n, out_));
  s->Clear();
  return Status::OK();
}

std::vector<Param*> Linear::Params() {
  if (b_.value.empty()) return {&w_};
  return {&w_, &b_};
}

KernelFlops Linear::Flops(int64_t b) const {
  double f = 2.0 * static_cast<double>(b * tokens_) * static_cast<double>(in_) * static_cast<double>(out_);
  return {f, f, f};
}

Elementwise::Elementwise(DeviceOps* ops, Kind k, std::vector<int64_t> shape, double p, uint64_t seed)
    : ops_(ops), kind_(k), shape_(std::move(shape)), p_(p), seed_(seed) {}

Status Elementwise::Forward(const Tensor& x, Tensor* y, Saved* s) {
  int64_t b = 0;
  PLANNER_RETURN_IF_ERROR(CheckInput(Name(), *ops_, x, shape_, &b));
  *y = ops_->Alloc(x.shape());
  const int64_t n = x.numel();
  if (kind_ == kDropout) {
    Tensor mask = ops_->Alloc(x.shape());
    const float keep = static_cast<float>(1.0 - p_), scale = keep > 0 ? 1.0f / keep : 0.0f;
    const uint64_t base = SplitMix(seed_ ^ (++calls_ * 0x632BE59BD9B4E019ull));
    PLANNER_RETURN_IF_ERROR(ops_->Dropout(x.data(), y->data(), mask.data(), n, base, p_, scale));
    s->t = {mask};
    s->exact = {0};  // the dropout mask keeps fp32 (Megatron keeps a bool mask)
    return Status::OK();
  }
  PLANNER_RETURN_IF_ERROR(ops_->ActivationForward(Act(), x.data(), y->data(), n));
  s->t = {kind_ == kRelu ? *y : x};  // what the derivative needs: ReLU's sign, GeLU's and squared ReLU's input
  return Status::OK();
}

Status Elementwise::BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) {
  if (s->t.size() != 1 || dy.numel() != s->t[0].numel())
    return Status::Internal(fmt::format("{}: backward without a matching forward", Name()));
  const Tensor& z = s->t[0];
  *dx = ops_->Alloc(z.shape());
  if (kind_ == kDropout) PLANNER_RETURN_IF_ERROR(ops_->Multiply(dy.data(), z.data(), dx->data(), z.numel()));
  else PLANNER_RETURN_IF_ERROR(ops_->ActivationBackward(Act(), z.data(), dy.data(), dx->data(), z.numel()));
  s->Clear();
  return Status::OK();
}

std::unique_ptr<LayerKernel> MakeNorm(DeviceOps* ops, const std::string& name, std::vector<int64_t> shape, bool rms) {
  return std::make_unique<Norm>(ops, name, std::move(shape), rms);
}

std::unique_ptr<LayerKernel> MakeEmbedding(DeviceOps* ops, const std::string& name, int64_t seq, int64_t vocab,
                                           int64_t hidden, int64_t positions, const KernelOptions& o) {
  return std::make_unique<Embedding>(ops, name, seq, vocab, hidden, positions, o);
}

std::unique_ptr<LayerKernel> MakeLoss(DeviceOps* ops, std::vector<int64_t> shape, const KernelOptions& o) {
  return std::make_unique<Loss>(ops, std::move(shape), o);
}

std::unique_ptr<LayerKernel> MakeFlatten(DeviceOps* ops, std::vector<int64_t> in) {
  return std::make_unique<Flatten>(ops, std::move(in));
}

}  // namespace planner::kernels_internal
