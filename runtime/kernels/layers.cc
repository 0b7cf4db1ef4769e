// Every layer type, written once over the leaf operations of device_ops.h:
// MakeKernel builds the same classes on the CPU and on CUDA, each holding its
// device's DeviceOps. A layer checks its inputs, allocates its outputs and
// what its backward keeps (Saved), composes the operations, and calls the
// TpGroup for a tensor-parallel shard's all-reduces. Derivations of every
// backward are in docs/profiler.md (the Llama-class layers': docs/runtime.md);
// tests/runtime/kernels_test.cc and llama_layers_test.cc check each against
// finite differences, kernels_gpu_test.cc CUDA against the CPU.
#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/shards.h"

namespace planner {

namespace {

int64_t Product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t d : v) n *= d;
  return n;
}

std::vector<int64_t> WithBatch(int64_t b, const std::vector<int64_t>& shape) {
  std::vector<int64_t> s = {b};
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

// x must be [b, shape...]; returns b.
Status CheckShape(const char* what, const Tensor& x, const std::vector<int64_t>& shape, int64_t* b) {
  if (x.empty() || x.rank() != static_cast<int>(shape.size()) + 1 ||
      !std::equal(shape.begin(), shape.end(), x.shape().begin() + 1)) {
    std::string want = "[b";
    for (int64_t d : shape) want += ", " + std::to_string(d);
    return Status::InvalidArgument(fmt::format("{}: input is {}, expected {}]", what, x.empty() ? "empty" : x.ShapeString(), want));
  }
  *b = x.dim(0);
  return Status::OK();
}
Status CheckDevice(const char* what, const DeviceOps& ops, const Tensor& x) {
  if (x.device() == ops.device()) return Status::OK();
  return Status::InvalidArgument(fmt::format("{}: input is on the {}, the kernel on the {}", what, DeviceName(x.device()), DeviceName(ops.device())));
}
// ... and on the kernel's device.
Status CheckInput(const char* what, const DeviceOps& ops, const Tensor& x, const std::vector<int64_t>& shape, int64_t* b) {
  PLANNER_RETURN_IF_ERROR(CheckShape(what, x, shape, b));
  return CheckDevice(what, ops, x);
}

// A parameter with the given host values (moved to the device) and a zero gradient.
Param MakeParam(const DeviceOps& ops, const std::string& name, const Tensor& host) {
  Param p;
  p.name = name;
  p.value = ops.Upload(host);
  p.grad = ops.Zeros(host.shape());
  return p;
}
Param FilledParam(const DeviceOps& ops, const std::string& name, const std::vector<int64_t>& shape, float value) {
  Tensor host = Tensor::Zeros(shape);
  if (value != 0.0f) std::fill(host.data(), host.data() + host.numel(), value);
  return MakeParam(ops, name, host);
}
Param UniformParam(const DeviceOps& ops, const std::string& name, const std::vector<int64_t>& shape, uint64_t seed, float scale) {
  Tensor host = Tensor::Zeros(shape);
  FillUniform(&host, seed, scale);
  return MakeParam(ops, name, host);
}

Status AllReduceSum(TpGroup* group, Tensor* t) { return group ? group->AllReduceSum(t->data(), t->numel()) : Status::OK(); }

// ---------------------------------------------------------------- linear
// y = x W^T + b over the last dimension; W is [out, in].
class Linear final : public LayerKernel {
 public:
  Linear(DeviceOps* ops, const std::string& name, int64_t in, int64_t out, bool bias, int64_t tokens_per_sample, uint64_t seed,
         const WeightSlice& slice = {})
      : ops_(ops), in_(in), out_(out), tokens_(tokens_per_sample), w_(MakeParam(*ops, name + ".weight", LinearWeight(out, in, seed, slice))) {
    w_.tp_sharded = slice.cut();
    if (bias) {
      b_ = FilledParam(*ops, name + ".bias", {out}, 0.0f);
      b_.tp_sharded = slice.cut() && out != slice.full_out;  // column-parallel bias is sharded; row-parallel lives on rank 0
    }
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    if (x.empty() || x.dim(-1) != in_) return Status::InvalidArgument(fmt::format("linear: input {} does not end in {}", x.ShapeString(), in_));
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
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
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
  Status BackwardWeight(Saved* s) override {
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
  std::vector<Param*> Params() override {
    if (b_.value.empty()) return {&w_};
    return {&w_, &b_};
  }
  KernelFlops Flops(int64_t b) const override {
    double f = 2.0 * static_cast<double>(b * tokens_) * static_cast<double>(in_) * static_cast<double>(out_);
    return {f, f, f};
  }

 private:
  DeviceOps* ops_;
  int64_t in_, out_, tokens_;
  Param w_, b_;
};

// ------------------------------------------------------------ elementwise
class Elementwise final : public LayerKernel {
 public:
  enum Kind { kRelu, kGelu, kDropout, kRelu2 };
  Elementwise(DeviceOps* ops, Kind k, std::vector<int64_t> shape, double p, uint64_t seed)
      : ops_(ops), kind_(k), shape_(std::move(shape)), p_(p), seed_(seed) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
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
      return Status::OK();
    }
    PLANNER_RETURN_IF_ERROR(ops_->ActivationForward(Act(), x.data(), y->data(), n));
    s->t = {kind_ == kRelu ? *y : x};  // what the derivative needs: ReLU's sign, GeLU's and squared ReLU's input
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1 || dy.numel() != s->t[0].numel()) return Status::Internal(fmt::format("{}: backward without a matching forward", Name()));
    const Tensor& z = s->t[0];
    *dx = ops_->Alloc(z.shape());
    if (kind_ == kDropout) PLANNER_RETURN_IF_ERROR(ops_->Multiply(dy.data(), z.data(), dx->data(), z.numel()));
    else PLANNER_RETURN_IF_ERROR(ops_->ActivationBackward(Act(), z.data(), dy.data(), dx->data(), z.numel()));
    s->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  const char* Name() const { return kind_ == kRelu ? "relu" : (kind_ == kGelu ? "gelu" : (kind_ == kRelu2 ? "relu2" : "dropout")); }
  Activation Act() const { return kind_ == kRelu ? Activation::kRelu : (kind_ == kRelu2 ? Activation::kRelu2 : Activation::kGelu); }
  DeviceOps* ops_;
  Kind kind_;
  std::vector<int64_t> shape_;
  double p_;
  uint64_t seed_, calls_ = 0;
};

// ------------------------------------------------------ layernorm / rmsnorm
// Over the last dimension. LayerNorm: y = (x - mean) / sqrt(var + eps) o gamma + beta (GPT);
// RMSNorm: y = x / sqrt(mean(x^2) + eps) o weight (Llama's norm; weight only). Both keep the
// normalised input and 1 / rms per row for backward, and differ only in the device ops they call.
class Norm final : public LayerKernel {
 public:
  Norm(DeviceOps* ops, const std::string& name, std::vector<int64_t> shape, bool rms)
      : ops_(ops), rms_(rms), shape_(std::move(shape)), h_(shape_.back()),
        g_(FilledParam(*ops, name + (rms ? ".weight" : ".gamma"), {h_}, 1.0f)),
        b_(rms ? Param{} : FilledParam(*ops, name + ".beta", {h_}, 0.0f)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput(Name(), *ops_, x, shape_, &b));
    const int64_t n = x.numel() / h_;
    *y = ops_->Alloc(x.shape());
    Tensor xhat = ops_->Alloc({n, h_}), rstd = ops_->Alloc({n});
    PLANNER_RETURN_IF_ERROR(rms_ ? ops_->RmsNormForward(x.data(), g_.value.data(), y->data(), xhat.data(), rstd.data(), n, h_)
                                 : ops_->LayerNormForward(x.data(), g_.value.data(), b_.value.data(), y->data(), xhat.data(), rstd.data(), n, h_));
    s->t = {xhat, rstd};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 2) return Status::Internal(std::string(Name()) + ": backward without forward");
    const Tensor& xhat = s->t[0];
    const int64_t n = xhat.dim(0);
    if (dy.numel() != n * h_) return Status::InvalidArgument(std::string(Name()) + ": gradient shape does not match the output");
    *dx = ops_->Alloc(dy.shape());
    PLANNER_RETURN_IF_ERROR(rms_ ? ops_->RmsNormBackward(dy.data(), g_.value.data(), xhat.data(), s->t[1].data(), dx->data(), n, h_)
                                 : ops_->LayerNormBackward(dy.data(), g_.value.data(), xhat.data(), s->t[1].data(), dx->data(), n, h_));
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 3) return Status::Internal(std::string(Name()) + ": backward-weight before backward-input");
    const int64_t n = s->t[0].dim(0);
    PLANNER_RETURN_IF_ERROR(rms_ ? ops_->RmsNormParamGrads(s->t[2].data(), s->t[0].data(), g_.grad.data(), n, h_)
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

std::unique_ptr<LayerKernel> MakeNorm(DeviceOps* ops, const std::string& name, std::vector<int64_t> shape, bool rms) {
  return std::make_unique<Norm>(ops, name, std::move(shape), rms);
}

// -------------------------------------------------------------- embedding
// Token ids (floats) [b, s] -> [b, s, h]; vocabulary-parallel over TP ranks:
// rank r holds rows [r V/t, (r+1) V/t), positions live on rank 0, and the sum
// over ranks is all-reduced.
class Embedding final : public LayerKernel {
 public:
  Embedding(DeviceOps* ops, const std::string& name, int64_t seq, int64_t vocab, int64_t hidden, int64_t positions, const KernelOptions& o)
      : ops_(ops), seq_(seq), vocab_(vocab), h_(hidden), local_(vocab / o.tp_size), start_(o.tp_rank * (vocab / o.tp_size)),
        use_pos_(positions > 0 && o.tp_rank == 0), group_(o.tp_group),
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
    PLANNER_RETURN_IF_ERROR(ops_->EmbeddingForward(ids.data(), w_.value.data(), use_pos_ ? p_.value.data() : nullptr, y->data(), b * seq_, seq_, h_,
                                                   start_, local_));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, y));
    s->t = {ids};
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
    PLANNER_RETURN_IF_ERROR(ops_->EmbeddingBackward(ids.data(), s->t[1].data(), w_.grad.data(), use_pos_ ? p_.grad.data() : nullptr, ids.numel(),
                                                    seq_, h_, start_, local_));
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
      if (!(tf >= 0) || static_cast<int64_t>(tf) >= vocab_) return Status::InvalidArgument(fmt::format("embedding: token id {} outside [0, {})", tf, vocab_));
    }
    return Status::OK();
  }
  DeviceOps* ops_;
  int64_t seq_, vocab_, h_, local_, start_;
  bool use_pos_;
  TpGroup* group_;
  Param w_, p_;
};

// -------------------------------------------------------------- attention
// What a transformer's attention and MLP are made of (docs/runtime.md, "Llama-class layers").
struct TransformerConfig {
  int64_t heads = 1, kv_heads = 1, ffn = 0;
  bool bias = true;                         // QKV, output, fc1, fc2 biases (Megatron GPT); Llama: none
  bool rope = false;                        // rotary embedding on Q and K
  double rope_theta = 10000;
  Elementwise::Kind act = Elementwise::kGelu;  // kGelu or kRelu2; swiglu: gated
  bool gated = false;                       // SwiGLU: fc1 [2 ffn, h] = gate and up halves
  bool rms = false;                         // the block's norms: RMSNorm (else LayerNorm)
};

// Causal self-attention on [b, s, h] with grouped-query heads (kv_heads = heads: multi-head; 1:
// multi-query), split over TP ranks: QKV column-parallel (each rank its heads / t query heads and
// kv_heads / t KV groups), output projection row-parallel. QKV rows: [Q (nl d) | K (kvl d) | V (kvl d)];
// local query head j = g G + i uses KV group g (G = heads / kv_heads). Per sample, for each i < G one
// GEMM batched over the groups: S = Q K^T / sqrt(d), P = softmax(S), O = P V. RoPE rotates Q and K
// in place before the scores, and their gradients back after.
class Attention final : public LayerKernel {
 public:
  Attention(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c, const KernelOptions& o)
      : ops_(ops), s_(seq), h_(hidden), nl_(c.heads / o.tp_size), kvl_(c.kv_heads / o.tp_size), grp_(c.heads / c.kv_heads), d_(hidden / c.heads),
        hl_(nl_ * d_), kvc_(kvl_ * d_), ld_(hl_ + 2 * kvc_), rope_(c.rope), theta_(c.rope_theta), causal_(o.causal), group_(o.tp_group),
        qkv_(ops, name + ".qkv", hidden, ld_, c.bias, seq, o.seed * 31 + 1, QkvShard(hidden, c.heads, c.kv_heads, o)),
        out_(ops, name + ".out", hl_, hidden, c.bias && o.tp_rank == 0, seq, o.seed * 31 + 2, AttnOutShard(hidden, c.heads, o)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("attention", *ops_, x, {s_, h_}, &b));
    sv->children.assign(2, Saved{});
    Tensor qkv;
    PLANNER_RETURN_IF_ERROR(qkv_.Forward(x, &qkv, &sv->children[0]));
    if (rope_) PLANNER_RETURN_IF_ERROR(RotateQk(&qkv, b, false));
    Tensor probs = ops_->Alloc({b, nl_, s_, s_}), o = ops_->Alloc({b, s_, hl_});
    const int64_t ss = s_ * s_;
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* q = qkv.data() + bi * s_ * ld_;
      float* p = probs.data() + bi * nl_ * ss;
      for (int64_t i = 0; i < grp_; ++i) {  // S = Q K^T, head i of every group
        PLANNER_RETURN_IF_ERROR(ops_->Gemm(HeadGemm(false, true, s_, s_, d_, {ld_, grp_ * d_}, {ld_, d_}, {s_, grp_ * ss}, Scale()), q + i * d_,
                                           q + hl_, p + i * ss));
      }
      PLANNER_RETURN_IF_ERROR(ops_->SoftmaxRows(p, nl_ * s_, s_, causal_));
      for (int64_t i = 0; i < grp_; ++i) {  // O = P V
        PLANNER_RETURN_IF_ERROR(ops_->Gemm(HeadGemm(false, false, s_, d_, s_, {s_, grp_ * ss}, {ld_, d_}, {hl_, grp_ * d_}), p + i * ss,
                                           q + hl_ + kvc_, o.data() + bi * s_ * hl_ + i * d_));
      }
    }
    PLANNER_RETURN_IF_ERROR(out_.Forward(o, y, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, y));  // row-parallel output projection: partial sums
    sv->t = {qkv, probs};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2 || sv->children.size() != 2) return Status::Internal("attention: backward without forward");
    const Tensor& qkv = sv->t[0];
    const int64_t b = qkv.dim(0);
    Tensor dout;
    PLANNER_RETURN_IF_ERROR(out_.BackwardInput(dy, &dout, &sv->children[1]));
    Tensor dqkv = ops_->Alloc(qkv.shape());
    PLANNER_RETURN_IF_ERROR(CoreBackward(qkv, sv->t[1], dout, &dqkv, b));
    if (rope_) PLANNER_RETURN_IF_ERROR(RotateQk(&dqkv, b, true));
    PLANNER_RETURN_IF_ERROR(qkv_.BackwardInput(dqkv, dx, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, dx));  // column-parallel QKV: partial input gradients
    sv->t.clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 2) return Status::Internal("attention: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(qkv_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(out_.BackwardWeight(&sv->children[1]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({&qkv_, &out_}); }
  KernelFlops Flops(int64_t b) const override {
    KernelFlops a = SumFlops({&qkv_, &out_}, b);
    double core = 2.0 * static_cast<double>(b) * static_cast<double>(s_) * static_cast<double>(s_) * static_cast<double>(hl_);
    return {a.forward + 2 * core, a.backward_input + 4 * core, a.backward_weight};
  }

 private:
  struct Operand {
    int64_t ld, stride;  // row length; distance between consecutive groups' blocks
  };
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(d_)); }
  // One GEMM per local KV group (batch kvl): operand i's group g starts g * stride in.
  GemmArgs HeadGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, Operand a, Operand bb, Operand c, float alpha = 1.0f,
                    float beta = 0.0f) const {
    GemmArgs g;
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.lda = a.ld, g.ldb = bb.ld, g.ldc = c.ld, g.alpha = alpha, g.beta = beta;
    g.batch = kvl_, g.stride_a = a.stride, g.stride_b = bb.stride, g.stride_c = c.stride;
    return g;
  }
  // RoPE on the Q and K blocks of every row of a QKV-shaped tensor (inverse: their gradients).
  Status RotateQk(Tensor* t, int64_t b, bool inverse) {
    PLANNER_RETURN_IF_ERROR(ops_->Rope(t->data(), b * s_, ld_, s_, 0, nl_, d_, theta_, inverse));
    return ops_->Rope(t->data() + hl_, b * s_, ld_, s_, 0, kvl_, d_, theta_, inverse);
  }
  // dQ, dK, dV of every sample into dqkv from dO (dout); a group's dK and dV sum over its G heads.
  Status CoreBackward(const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor* dqkv, int64_t b) {
    const int64_t ss = (s_ * s_ + 15) / 16 * 16, pp = s_ * s_;  // a head's dP, 64-byte aligned
    Tensor dp = ops_->Scratch({nl_, ss});
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* q = qkv.data() + bi * s_ * ld_;
      float* dq = dqkv->data() + bi * s_ * ld_;
      const float* p = probs.data() + bi * nl_ * pp;
      const float* dob = dout.data() + bi * s_ * hl_;
      for (int64_t i = 0; i < grp_; ++i) {
        const float acc = i == 0 ? 0.0f : 1.0f;
        PLANNER_RETURN_IF_ERROR(ops_->Gemm(HeadGemm(true, false, s_, d_, s_, {s_, grp_ * pp}, {hl_, grp_ * d_}, {ld_, d_}, 1.0f, acc), p + i * pp,
                                           dob + i * d_, dq + hl_ + kvc_));  // dV += P^T dO
        PLANNER_RETURN_IF_ERROR(ops_->Gemm(HeadGemm(false, true, s_, s_, d_, {hl_, grp_ * d_}, {ld_, d_}, {s_, grp_ * ss}), dob + i * d_,
                                           q + hl_ + kvc_, dp.data() + i * ss));  // dP = dO V^T
      }
      if (ss == pp) {
        PLANNER_RETURN_IF_ERROR(ops_->SoftmaxBackwardRows(p, dp.data(), nl_ * s_, s_, Scale()));
      } else {
        for (int64_t j = 0; j < nl_; ++j) PLANNER_RETURN_IF_ERROR(ops_->SoftmaxBackwardRows(p + j * pp, dp.data() + j * ss, s_, s_, Scale()));
      }
      for (int64_t i = 0; i < grp_; ++i) {
        const float acc = i == 0 ? 0.0f : 1.0f;
        PLANNER_RETURN_IF_ERROR(ops_->Gemm(HeadGemm(false, false, s_, d_, s_, {s_, grp_ * ss}, {ld_, d_}, {ld_, grp_ * d_}), dp.data() + i * ss,
                                           q + hl_, dq + i * d_));  // dQ = dS K
        PLANNER_RETURN_IF_ERROR(ops_->Gemm(HeadGemm(true, false, s_, d_, s_, {s_, grp_ * ss}, {ld_, grp_ * d_}, {ld_, d_}, 1.0f, acc),
                                           dp.data() + i * ss, q + i * d_, dq + hl_));  // dK += dS^T Q
      }
    }
    return Status::OK();
  }
  DeviceOps* ops_;
  int64_t s_, h_, nl_, kvl_, grp_, d_, hl_, kvc_, ld_;
  bool rope_;
  double theta_;
  bool causal_;
  TpGroup* group_;
  Linear qkv_, out_;
};

// -------------------------------------------------------------------- mlp
// fc1 (column-parallel, ffn / t) -> GeLU or squared ReLU -> fc2 (row-parallel); SwiGLU: fc1 gives
// [gate | up] (2 ffn / t, each rank its matching columns of both) and a = silu(gate) o up.
class Mlp final : public LayerKernel {
 public:
  Mlp(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c, const KernelOptions& o)
      : ops_(ops), s_(seq), h_(hidden), fl_(c.ffn / o.tp_size), gated_(c.gated), group_(o.tp_group),
        fc1_(ops, name + ".fc1", hidden, (c.gated ? 2 : 1) * fl_, c.bias, seq, o.seed * 37 + 1,
             c.gated ? GatedFc1Shard(hidden, c.ffn, o) : Fc1Shard(hidden, c.ffn, o)),
        act_(ops, c.act, {seq, fl_}, 0, 0),
        fc2_(ops, name + ".fc2", fl_, hidden, c.bias && o.tp_rank == 0, seq, o.seed * 37 + 2, Fc2Shard(hidden, c.ffn, o)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("mlp", *ops_, x, {s_, h_}, &b));
    sv->children.assign(3, Saved{});
    Tensor a, g;
    PLANNER_RETURN_IF_ERROR(fc1_.Forward(x, &a, &sv->children[0]));
    if (gated_) {
      g = ops_->Alloc({b, s_, fl_});
      PLANNER_RETURN_IF_ERROR(ops_->SwiGluForward(a.data(), g.data(), b * s_, fl_));
      sv->children[1].t = {a};
    } else {
      PLANNER_RETURN_IF_ERROR(act_.Forward(a, &g, &sv->children[1]));
    }
    PLANNER_RETURN_IF_ERROR(fc2_.Forward(g, y, &sv->children[2]));
    return AllReduceSum(group_, y);  // row-parallel fc2: partial sums
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 3) return Status::Internal("mlp: backward without forward");
    Tensor dg, da;
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardInput(dy, &dg, &sv->children[2]));
    if (gated_) {
      if (sv->children[1].t.size() != 1) return Status::Internal("mlp: backward without forward");
      const Tensor& gu = sv->children[1].t[0];
      da = ops_->Alloc(gu.shape());
      PLANNER_RETURN_IF_ERROR(ops_->SwiGluBackward(gu.data(), dg.data(), da.data(), gu.numel() / (2 * fl_), fl_));
      sv->children[1].Clear();
    } else {
      PLANNER_RETURN_IF_ERROR(act_.BackwardInput(dg, &da, &sv->children[1]));
    }
    PLANNER_RETURN_IF_ERROR(fc1_.BackwardInput(da, dx, &sv->children[0]));
    return AllReduceSum(group_, dx);  // column-parallel fc1: partial input gradients
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 3) return Status::Internal("mlp: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(fc1_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardWeight(&sv->children[2]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({&fc1_, &fc2_}); }
  KernelFlops Flops(int64_t b) const override { return SumFlops({&fc1_, &fc2_}, b); }

 private:
  DeviceOps* ops_;
  int64_t s_, h_, fl_;
  bool gated_;
  TpGroup* group_;
  Linear fc1_;
  Elementwise act_;
  Linear fc2_;
};

// ------------------------------------------------------- transformer block
// Pre-norm block (LayerNorm for GPT, RMSNorm for Llama): y = r + mlp(norm2(r)), r = x + attn(norm1(x)).
class TransformerBlock final : public LayerKernel {
 public:
  TransformerBlock(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c, const KernelOptions& o)
      : ops_(ops), s_(seq), h_(hidden), ln1_(MakeNorm(ops, name + ".ln1", {seq, hidden}, c.rms)), attn_(ops, name + ".attn", seq, hidden, c, o),
        ln2_(MakeNorm(ops, name + ".ln2", {seq, hidden}, c.rms)), mlp_(ops, name + ".mlp", seq, hidden, c, o) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("transformer_block", *ops_, x, {s_, h_}, &b));
    sv->children.assign(4, Saved{});
    Tensor a, u, c, v;
    PLANNER_RETURN_IF_ERROR(ln1_->Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(attn_.Forward(a, &u, &sv->children[1]));
    Tensor r = ops_->Alloc(x.shape());
    PLANNER_RETURN_IF_ERROR(ops_->Add(x.data(), u.data(), r.data(), r.numel()));
    PLANNER_RETURN_IF_ERROR(ln2_->Forward(r, &c, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(mlp_.Forward(c, &v, &sv->children[3]));
    *y = ops_->Alloc(x.shape());
    return ops_->Add(r.data(), v.data(), y->data(), y->numel());
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward without forward");
    Tensor dc, dr, da, dxa;
    PLANNER_RETURN_IF_ERROR(mlp_.BackwardInput(dy, &dc, &sv->children[3]));
    PLANNER_RETURN_IF_ERROR(ln2_->BackwardInput(dc, &dr, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(ops_->Add(dr.data(), dy.data(), dr.data(), dr.numel()));
    PLANNER_RETURN_IF_ERROR(attn_.BackwardInput(dr, &da, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln1_->BackwardInput(da, &dxa, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(ops_->Add(dxa.data(), dr.data(), dxa.data(), dxa.numel()));
    *dx = dxa;
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(ln1_->BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(attn_.BackwardWeight(&sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln2_->BackwardWeight(&sv->children[2]));
    PLANNER_RETURN_IF_ERROR(mlp_.BackwardWeight(&sv->children[3]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({ln1_.get(), &attn_, ln2_.get(), &mlp_}); }
  KernelFlops Flops(int64_t b) const override { return SumFlops({&attn_, &mlp_}, b); }

 private:
  DeviceOps* ops_;
  int64_t s_, h_;
  std::unique_ptr<LayerKernel> ln1_;
  Attention attn_;
  std::unique_ptr<LayerKernel> ln2_;
  Mlp mlp_;
};

// The attributes of an attention, mlp or transformer_block layer (ATTRS.md's names and defaults),
// checked against the TP degree t.
Status ReadTransformerConfig(const Layer& l, int64_t t, TransformerConfig* c) {
  const LayerAttrs& a = l.attrs;
  const int64_t hidden = l.in_shape.size() == 2 ? l.in_shape[1] : 0;
  c->heads = a.Int("heads", 1);
  c->kv_heads = a.Int("kv_heads", 0) == 0 ? c->heads : a.Int("kv_heads", 0);  // absent or 0: multi-head
  c->ffn = a.Int("ffn", 4 * hidden);
  c->bias = a.Bool("bias", true);
  c->rope_theta = static_cast<double>(a.Int("rope_theta", 10000));
  const std::string act = a.String("act", "gelu"), norm = a.String("norm", "layernorm"), pos = a.String("position", "learned");
  auto bad = [&](const std::string& what) { return Status::InvalidArgument(fmt::format("layer '{}': {}", l.name, what)); };
  if (hidden == 0 || c->heads < 1 || c->kv_heads < 1 || c->ffn < 1) return bad("needs a [sequence, hidden] input and positive heads, kv_heads, ffn");
  if (act != "gelu" && act != "swiglu" && act != "relu2") return bad(fmt::format("act '{}' is not gelu, swiglu or relu2", act));
  if (norm != "layernorm" && norm != "rmsnorm") return bad(fmt::format("norm '{}' is not layernorm or rmsnorm", norm));
  if (pos != "learned" && pos != "rope") return bad(fmt::format("position '{}' is not learned or rope", pos));
  c->gated = act == "swiglu";
  c->act = act == "relu2" ? Elementwise::kRelu2 : Elementwise::kGelu;
  c->rms = norm == "rmsnorm";
  c->rope = pos == "rope";
  const bool attn = l.type != "mlp", mlp = l.type != "attention";
  if (attn && (hidden % c->heads != 0 || c->heads % c->kv_heads != 0)) {
    return bad(fmt::format("heads ({}) must divide the hidden size {} and kv_heads ({}) must divide heads", c->heads, hidden, c->kv_heads));
  }
  if (attn && c->rope && (hidden / c->heads) % 2 != 0) return bad(fmt::format("rope needs an even head dimension, not {}", hidden / c->heads));
  auto divides = [&](int64_t what, const char* name) -> Status {
    if (t > 1 && what % t != 0) return bad(fmt::format("tensor-parallel degree {} does not divide its {} ({})", t, name, what));
    return Status::OK();
  };
  if (attn) PLANNER_RETURN_IF_ERROR(divides(c->heads, "heads"));
  if (attn) PLANNER_RETURN_IF_ERROR(divides(c->kv_heads, "kv_heads"));
  if (mlp) PLANNER_RETURN_IF_ERROR(divides(c->ffn, "ffn"));
  return Status::OK();
}

// ------------------------------------------------------------------- loss
// Softmax cross-entropy over the last dimension (vocabulary-parallel: each
// rank holds V / t logits of every row; max, sum and the target logit are
// all-reduced). Output [b, 1]: each sample's mean loss over its rows.
class Loss final : public LayerKernel {
 public:
  Loss(DeviceOps* ops, std::vector<int64_t> shape, const KernelOptions& o)
      : ops_(ops), shape_(std::move(shape)), v_(shape_.back()), rows_(Product(shape_) / v_), start_(o.tp_rank * v_), group_(o.tp_group) {}
  void SetTargets(const Tensor& targets) override { targets_ = ops_->Upload(targets); }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("loss", *ops_, x, shape_, &b));
    const int64_t n = b * rows_;
    if (targets_.numel() != n) {
      return Status::InvalidArgument(fmt::format("loss: {} targets for {} rows; set one class id per row", targets_.numel(), n));
    }
    Tensor probs = ops_->Alloc({n, v_});
    Tensor mx = ops_->Scratch({n}), sum = ops_->Scratch({n}), tl = ops_->Scratch({n});
    PLANNER_RETURN_IF_ERROR(ops_->CrossEntropyMax(x.data(), targets_.data(), mx.data(), tl.data(), n, v_, start_));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceMax(mx.data(), n));
    PLANNER_RETURN_IF_ERROR(ops_->CrossEntropyExp(x.data(), mx.data(), probs.data(), sum.data(), n, v_));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, &sum));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, &tl));
    *y = ops_->Zeros({b, 1});
    PLANNER_RETURN_IF_ERROR(ops_->CrossEntropyFinish(probs.data(), sum.data(), mx.data(), tl.data(), y->data(), n, v_, rows_));
    sv->t = {probs, targets_};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("loss: backward without forward");
    const Tensor& probs = sv->t[0];
    const int64_t n = probs.dim(0), b = n / rows_;
    if (dy.numel() != b) return Status::InvalidArgument("loss: the gradient needs one value per sample");
    *dx = ops_->Alloc(WithBatch(b, shape_));
    PLANNER_RETURN_IF_ERROR(ops_->CrossEntropyBackward(probs.data(), sv->t[1].data(), dy.data(), dx->data(), n, v_, rows_, start_));
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

// ----------------------------------------------------------------- conv2d
// NCHW cross-correlation; the device keeps what its backward needs (ConvForward).
class Conv2d final : public LayerKernel {
 public:
  Conv2d(DeviceOps* ops, const std::string& name, const std::vector<int64_t>& in, int64_t cout, int64_t k, int64_t stride, int64_t pad, bool bias,
         uint64_t seed)
      : ops_(ops), in_(in), win_{in[0], in[1], in[2], k, stride, pad}, cout_(cout), ckk_(in[0] * k * k),
        w_(UniformParam(*ops, name + ".weight", {cout, in[0], k, k}, seed, 1.0f / std::sqrt(static_cast<float>(ckk_)))) {
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
    if (dy.numel() != b * cout_ * HW()) return Status::InvalidArgument("conv2d: gradient shape does not match the output");
    PLANNER_RETURN_IF_ERROR(ops_->ConvBackwardData(win_, cout_, sv->t[0], w_.value.data(), dy.data(), dx));
    sv->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("conv2d: backward-weight before backward-input");
    const int64_t b = sv->t[0].dim(0);
    PLANNER_RETURN_IF_ERROR(ops_->ConvBackwardFilter(win_, cout_, sv->t[0], sv->t[1].data(), w_.grad.data()));
    if (!b_.value.empty()) PLANNER_RETURN_IF_ERROR(ops_->SumChannelsInto(sv->t[1].data(), b_.grad.data(), b, cout_, HW()));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    if (b_.value.empty()) return {&w_};
    return {&w_, &b_};
  }
  KernelFlops Flops(int64_t b) const override {
    double f = 2.0 * static_cast<double>(b) * static_cast<double>(cout_) * static_cast<double>(ckk_) * static_cast<double>(HW());
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
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("pool: backward without forward");
    const int64_t b = sv->t[1].dim(0);
    if (dy.numel() != b * in_[0] * win_.out_h() * win_.out_w()) return Status::InvalidArgument("pool: gradient shape does not match the output");
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

class Flatten final : public LayerKernel {
 public:
  Flatten(DeviceOps* ops, std::vector<int64_t> in) : ops_(ops), in_(std::move(in)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("flatten", *ops_, x, in_, &b));
    *y = x.Reshaped({b, Product(in_)});
    sv->t = {Tensor::Zeros({b})};  // remembers b
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

// The kernel of one layer type on ops' device (the TP degree already checked to be valid).
Status BuildKernel(const Layer& l, const KernelOptions& o, DeviceOps* ops, std::unique_ptr<LayerKernel>* out) {
  const auto& in = l.in_shape;
  const auto& a = l.attrs;
  const int64_t t = std::max<int64_t>(1, o.tp_size);
  auto divides = [&](int64_t what, const char* name) -> Status {
    if (t > 1 && (what % t != 0)) {
      return Status::InvalidArgument(fmt::format("layer '{}': tensor-parallel degree {} does not divide its {} ({})", l.name, t, name, what));
    }
    return Status::OK();
  };
  const std::string& ty = l.type;
  if (ty == "linear") {
    int64_t tokens = Product(in) / in.back();
    *out = std::make_unique<Linear>(ops, l.name, in.back(), l.out_shape.back(), a.Bool("bias", true), tokens, o.seed);
  } else if (ty == "relu" || ty == "gelu" || ty == "dropout") {
    auto kind = ty == "relu" ? Elementwise::kRelu : (ty == "gelu" ? Elementwise::kGelu : Elementwise::kDropout);
    *out = std::make_unique<Elementwise>(ops, kind, in, a.probability, o.seed);
  } else if (ty == "layernorm") {
    *out = std::make_unique<Norm>(ops, l.name, in, false);
  } else if (ty == "embedding") {
    int64_t vocab = a.Int("vocab", 0);
    PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
    *out = std::make_unique<Embedding>(ops, l.name, in[0], vocab, a.Int("hidden", 0), a.Int("positions", 0), o);
  } else if (ty == "rmsnorm") {
    *out = std::make_unique<Norm>(ops, l.name, in, true);
  } else if (ty == "attention" || ty == "mlp" || ty == "transformer_block") {
    TransformerConfig c;
    PLANNER_RETURN_IF_ERROR(ReadTransformerConfig(l, t, &c));
    if (ty == "attention") *out = std::make_unique<Attention>(ops, l.name, in[0], in[1], c, o);
    else if (ty == "mlp") *out = std::make_unique<Mlp>(ops, l.name, in[0], in[1], c, o);
    else *out = std::make_unique<TransformerBlock>(ops, l.name, in[0], in[1], c, o);
  } else if (ty == "lm_head") {
    int64_t vocab = a.Int("vocab", 0);
    PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
    // Logits [b, s, V / t] = x W^T (vocabulary-parallel, no bias).
    *out = std::make_unique<VocabParallelHead>(
        std::make_unique<Linear>(ops, l.name, in[1], vocab / t, false, in[0], o.seed * 41 + 1, VocabShard(in[1], vocab, o)), o.tp_group);
  } else if (ty == "loss") {
    std::vector<int64_t> shard = in;
    PLANNER_RETURN_IF_ERROR(divides(in.back(), "classes"));
    shard.back() /= t;
    *out = std::make_unique<Loss>(ops, shard, o);
  } else if (ty == "conv2d") {
    *out = std::make_unique<Conv2d>(ops, l.name, in, l.out_shape[0], a.Int("kernel", 3), a.Int("stride", 1), a.Int("padding", 0),
                                    a.Bool("bias", true), o.seed);
  } else if (ty == "maxpool" || ty == "avgpool") {
    int64_t k = a.Int("kernel", 2);
    *out = std::make_unique<Pool>(ops, ty == "maxpool", in, k, a.Int("stride", k), a.Int("padding", 0));
  } else if (ty == "flatten") {
    *out = std::make_unique<Flatten>(ops, in);
  } else {
    return Status::NotSupported(fmt::format("layer '{}': no kernel for type '{}'", l.name, ty));
  }
  return Status::OK();
}

}  // namespace

void FillUniform(Tensor* t, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    double u = static_cast<double>(SplitMix(seed * 0x9E3779B97F4A7C15ull + i) >> 11) * 0x1.0p-53;
    v[i] = static_cast<float>((2 * u - 1) * scale);
  }
  if (t->device() == Device::kCpu) std::memcpy(t->data(), v.data(), v.size() * 4);
  else *t = Tensor::FromVector(t->shape(), v).To(t->device());
}

void LayerKernel::ZeroGrads() {
  for (Param* p : Params()) {
    if (p->grad.device() == Device::kCpu) std::memset(p->grad.data(), 0, static_cast<size_t>(p->grad.numel()) * 4);
    else CudaMemset(p->grad.data(), 0, p->grad.numel() * 4);
  }
}

Status MakeKernel(const Layer& layer, const KernelOptions& options, std::unique_ptr<LayerKernel>* out) {
  if (options.tp_size < 1 || options.tp_rank < 0 || options.tp_rank >= options.tp_size) {
    return Status::InvalidArgument(fmt::format("tensor-parallel rank {} of {} is not valid", options.tp_rank, options.tp_size));
  }
  if (options.device != Device::kCpu) {
    std::string why;
    if (CudaDeviceCount(&why) == 0) return Status::Unavailable(why);
  }
  DeviceOps* ops = OpsFor(options.device);
  if (ops == nullptr) return Status::Unavailable("built without CUDA; rebuild with -Dcuda=enabled on a machine with the CUDA toolkit");
  try {
    return BuildKernel(layer, options, ops, out);
  } catch (const std::exception& e) {  // device allocation failures
    return Status::Internal(fmt::format("layer '{}' on the {}: {}", layer.name, DeviceName(options.device), e.what()));
  }
}

}  // namespace planner
