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
#include <functional>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/shards.h"
#include "spec/layer_catalog.h"

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
      s->exact = {0};  // the dropout mask keeps fp32 (Megatron keeps a bool mask)
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

// ------------------------------------------------------------ MLA / MoE helpers (CPU)
// dst[r, d0 : d0 + w] = src[r, c0 : c0 + w] (add: +=) for n rows of row lengths lds and ldd.
void CopyCols(const float* src, int64_t lds, int64_t c0, float* dst, int64_t ldd, int64_t d0, int64_t w, int64_t n, bool add = false) {
  for (int64_t r = 0; r < n; ++r) {
    const float* s = src + r * lds + c0;
    float* d = dst + r * ldd + d0;
    if (add) {
      for (int64_t i = 0; i < w; ++i) d[i] += s[i];
    } else {
      std::memcpy(d, s, static_cast<size_t>(w) * 4);
    }
  }
}

// Column-parallel cut of a per-head weight [heads x per, in]: rank r keeps heads [r heads/t, (r+1) heads/t).
WeightSlice HeadRows(int64_t in, int64_t heads, int64_t per, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  const int64_t hl = heads / o.tp_size;
  return {in, heads * per, IndexRange(o.tp_rank * hl * per, hl * per), 0};
}
// Row-parallel cut of the output projection [hidden, heads x v]: rank r keeps its heads' columns.
WeightSlice HeadCols(int64_t hidden, int64_t heads, int64_t v, const KernelOptions& o) {
  if (o.tp_size <= 1) return {};
  return {heads * v, hidden, {}, o.tp_rank * (heads / o.tp_size) * v};
}

// ----------------------------------------------------- multi-head latent attention
// DeepSeek-V2/V3's MLA (HF modeling_deepseek_v3), causal, on [b, s, h]. q = (q_lora > 0 ? RMSNorm(x W_qa) W_qb
// : x W_q), per head [nope | rope]; kv_a = x W_kva = [c (kv_lora) | k_pe (rope)]; kv = RMSNorm(c) W_kvb, per head
// [k_nope | v]; RoPE (rotate-half) on q's rope part of every head and on k_pe, shared by the heads; K per head
// = [k_nope | k_pe]; softmax(Q K^T / sqrt(nope + rope)) V; out = concat(heads) W_o. No biases (DeepSeek-V3).
// TP (Megatron-Core): heads split (W_qb or W_q, W_kvb column-parallel by heads, W_o row-parallel); the down
// projections W_qa, W_kva and their norms replicated, their input gradients (partial over the ranks' heads)
// all-reduced before their backward, so their weight gradients are equal on every TP rank.
struct MlaDims {
  int64_t q_lora = 0, kv_lora = 0, rope = 0, nope = 0, v = 0;
};

class Mla final : public LayerKernel {
 public:
  Mla(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, int64_t heads, double theta, const MlaDims& m, const KernelOptions& o)
      : ops_(ops), s_(seq), h_(hidden), hl_(heads / o.tp_size), m_(m), dq_(m.nope + m.rope), theta_(theta), causal_(o.causal), group_(o.tp_group),
        kva_(ops, name + ".kv_a", hidden, m.kv_lora + m.rope, false, seq, o.seed * 43 + 3),
        kvnorm_(ops, name + ".kv_norm", {seq, m.kv_lora}, true),
        kvb_(ops, name + ".kv_b", m.kv_lora, hl_ * (m.nope + m.v), false, seq, o.seed * 43 + 4, HeadRows(m.kv_lora, heads, m.nope + m.v, o)),
        out_(ops, name + ".out", hl_ * m.v, hidden, false, seq, o.seed * 43 + 5, HeadCols(hidden, heads, m.v, o)) {
    if (m.q_lora > 0) {
      qa_ = std::make_unique<Linear>(ops, name + ".q_a", hidden, m.q_lora, false, seq, o.seed * 43 + 1);
      qnorm_ = MakeNorm(ops, name + ".q_norm", {seq, m.q_lora}, true);
      q_ = std::make_unique<Linear>(ops, name + ".q_b", m.q_lora, hl_ * dq_, false, seq, o.seed * 43 + 2, HeadRows(m.q_lora, heads, dq_, o));
    } else {
      q_ = std::make_unique<Linear>(ops, name + ".q", hidden, hl_ * dq_, false, seq, o.seed * 43 + 2, HeadRows(hidden, heads, dq_, o));
    }
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("mla", *ops_, x, {s_, h_}, &b));
    const int64_t n = b * s_, kr = m_.kv_lora, lda = kr + m_.rope, w = m_.nope + m_.v;
    sv->children.assign(7, Saved{});
    Tensor q, kva, cn, kv;
    PLANNER_RETURN_IF_ERROR(QueryForward(x, &q, sv));
    PLANNER_RETURN_IF_ERROR(kva_.Forward(x, &kva, &sv->children[3]));
    Tensor c = ops_->Alloc({b, s_, kr}), kpe = ops_->Alloc({n, m_.rope});
    CopyCols(kva.data(), lda, 0, c.data(), kr, 0, kr, n);
    CopyCols(kva.data(), lda, kr, kpe.data(), m_.rope, 0, m_.rope, n);
    PLANNER_RETURN_IF_ERROR(kvnorm_.Forward(c, &cn, &sv->children[4]));
    PLANNER_RETURN_IF_ERROR(kvb_.Forward(cn, &kv, &sv->children[5]));
    PLANNER_RETURN_IF_ERROR(ops_->Rope(kpe.data(), n, m_.rope, s_, 0, 1, m_.rope, theta_, false));
    PLANNER_RETURN_IF_ERROR(RotateQ(&q, n, false));
    Tensor k = ops_->Alloc({n, hl_ * dq_}), v = ops_->Alloc({n, hl_ * m_.v});
    for (int64_t hd = 0; hd < hl_; ++hd) {
      CopyCols(kv.data(), hl_ * w, hd * w, k.data(), hl_ * dq_, hd * dq_, m_.nope, n);
      CopyCols(kpe.data(), m_.rope, 0, k.data(), hl_ * dq_, hd * dq_ + m_.nope, m_.rope, n);
      CopyCols(kv.data(), hl_ * w, hd * w + m_.nope, v.data(), hl_ * m_.v, hd * m_.v, m_.v, n);
    }
    Tensor probs = ops_->Alloc({b, hl_, s_, s_}), o = ops_->Alloc({b, s_, hl_ * m_.v});
    PLANNER_RETURN_IF_ERROR(CoreForward(q, k, v, &probs, &o, b));
    PLANNER_RETURN_IF_ERROR(out_.Forward(o, y, &sv->children[6]));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, y));  // row-parallel output projection
    sv->t = {q, k, v, probs};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 4 || sv->children.size() != 7) return Status::Internal("mla: backward without forward");
    const Tensor &q = sv->t[0], &k = sv->t[1], &v = sv->t[2];
    const int64_t b = q.dim(0), n = b * s_;
    Tensor dout;
    PLANNER_RETURN_IF_ERROR(out_.BackwardInput(dy, &dout, &sv->children[6]));
    Tensor dq = ops_->Alloc(q.shape()), dk = ops_->Alloc(k.shape()), dv = ops_->Alloc(v.shape());
    PLANNER_RETURN_IF_ERROR(CoreBackward(q, k, v, sv->t[3], dout, &dq, &dk, &dv, b));
    PLANNER_RETURN_IF_ERROR(RotateQ(&dq, n, true));
    Tensor dx_kv, dx_q;
    PLANNER_RETURN_IF_ERROR(KvBackward(dk, dv, b, &dx_kv, sv));
    PLANNER_RETURN_IF_ERROR(QueryBackward(dq, &dx_q, sv));
    *dx = ops_->Alloc(dx_kv.shape());
    PLANNER_RETURN_IF_ERROR(ops_->Add(dx_kv.data(), dx_q.data(), dx->data(), dx->numel()));
    sv->t.clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 7) return Status::Internal("mla: backward-weight before backward-input");
    LayerKernel* parts[7] = {qa_.get(), qnorm_.get(), q_.get(), &kva_, &kvnorm_, &kvb_, &out_};
    for (int i = 0; i < 7; ++i) {
      if (parts[i]) PLANNER_RETURN_IF_ERROR(parts[i]->BackwardWeight(&sv->children[static_cast<size_t>(i)]));
    }
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    if (qa_) return JoinParams({qa_.get(), qnorm_.get(), q_.get(), &kva_, &kvnorm_, &kvb_, &out_});
    return JoinParams({q_.get(), &kva_, &kvnorm_, &kvb_, &out_});
  }
  KernelFlops Flops(int64_t b) const override {
    KernelFlops a = SumFlops({q_.get(), &kva_, &kvb_, &out_}, b);
    if (qa_) {
      KernelFlops f = qa_->Flops(b);
      a.forward += f.forward, a.backward_input += f.backward_input, a.backward_weight += f.backward_weight;
    }
    const double ss = static_cast<double>(b) * static_cast<double>(s_) * static_cast<double>(s_) * static_cast<double>(hl_);
    const double core = 2.0 * ss * static_cast<double>(dq_ + m_.v);  // Q K^T and P V
    return {a.forward + core, a.backward_input + 2 * core, a.backward_weight};
  }

 private:
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(dq_)); }
  // Per-head GEMM batched over the local heads: operand i's head j starts j * stride in.
  GemmArgs Heads(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t sa, int64_t ldb, int64_t sb, int64_t ldc, int64_t sc,
                 float alpha = 1.0f) const {
    GemmArgs g;
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.alpha = alpha;
    g.batch = hl_, g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
    return g;
  }
  Status RotateQ(Tensor* q, int64_t n, bool inverse) {
    for (int64_t hd = 0; hd < hl_; ++hd) {
      PLANNER_RETURN_IF_ERROR(ops_->Rope(q->data() + hd * dq_ + m_.nope, n, hl_ * dq_, s_, 0, 1, m_.rope, theta_, inverse));
    }
    return Status::OK();
  }
  Status QueryForward(const Tensor& x, Tensor* q, Saved* sv) {
    if (!qa_) return q_->Forward(x, q, &sv->children[2]);
    Tensor qa, qan;
    PLANNER_RETURN_IF_ERROR(qa_->Forward(x, &qa, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(qnorm_->Forward(qa, &qan, &sv->children[1]));
    return q_->Forward(qan, q, &sv->children[2]);
  }
  Status QueryBackward(const Tensor& dq, Tensor* dx, Saved* sv) {
    if (!qa_) {
      PLANNER_RETURN_IF_ERROR(q_->BackwardInput(dq, dx, &sv->children[2]));
      return AllReduceSum(group_, dx);  // column-parallel W_q
    }
    Tensor dqan, dqa;
    PLANNER_RETURN_IF_ERROR(q_->BackwardInput(dq, &dqan, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, &dqan));  // the replicated q_a path sees every head's gradient
    PLANNER_RETURN_IF_ERROR(qnorm_->BackwardInput(dqan, &dqa, &sv->children[1]));
    return qa_->BackwardInput(dqa, dx, &sv->children[0]);
  }
  // dK, dV per head -> d kv_a = [d c | d k_pe] (k_pe's gradient summed over the heads, rotated back) -> dx.
  Status KvBackward(const Tensor& dk, const Tensor& dv, int64_t b, Tensor* dx, Saved* sv) {
    const int64_t n = b * s_, kr = m_.kv_lora, lda = kr + m_.rope, w = m_.nope + m_.v;
    Tensor dkv = ops_->Alloc({b, s_, hl_ * w}), g = ops_->Zeros({n, lda});
    for (int64_t hd = 0; hd < hl_; ++hd) {
      CopyCols(dk.data(), hl_ * dq_, hd * dq_, dkv.data(), hl_ * w, hd * w, m_.nope, n);
      CopyCols(dv.data(), hl_ * m_.v, hd * m_.v, dkv.data(), hl_ * w, hd * w + m_.nope, m_.v, n);
      CopyCols(dk.data(), hl_ * dq_, hd * dq_ + m_.nope, g.data(), lda, kr, m_.rope, n, true);
    }
    Tensor dcn, dc;
    PLANNER_RETURN_IF_ERROR(kvb_.BackwardInput(dkv, &dcn, &sv->children[5]));
    CopyCols(dcn.data(), kr, 0, g.data(), lda, 0, kr, n);
    PLANNER_RETURN_IF_ERROR(AllReduceSum(group_, &g));  // partial over the TP ranks' heads
    Tensor dcn_full = ops_->Alloc({b, s_, kr}), dkva = ops_->Alloc({b, s_, lda});
    CopyCols(g.data(), lda, 0, dcn_full.data(), kr, 0, kr, n);
    PLANNER_RETURN_IF_ERROR(kvnorm_.BackwardInput(dcn_full, &dc, &sv->children[4]));
    PLANNER_RETURN_IF_ERROR(ops_->Rope(g.data() + kr, n, lda, s_, 0, 1, m_.rope, theta_, true));
    CopyCols(dc.data(), kr, 0, dkva.data(), lda, 0, kr, n);
    CopyCols(g.data(), lda, kr, dkva.data(), lda, kr, m_.rope, n);
    return kva_.BackwardInput(dkva, dx, &sv->children[3]);
  }
  Status CoreForward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor* probs, Tensor* o, int64_t b) {
    const int64_t ss = s_ * s_, lq = hl_ * dq_, lv = hl_ * m_.v;
    for (int64_t bi = 0; bi < b; ++bi) {
      float* p = probs->data() + bi * hl_ * ss;
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(false, true, s_, s_, dq_, lq, dq_, lq, dq_, s_, ss, Scale()), q.data() + bi * s_ * lq,
                                         k.data() + bi * s_ * lq, p));  // S = Q K^T / sqrt(dq)
      PLANNER_RETURN_IF_ERROR(ops_->SoftmaxRows(p, hl_ * s_, s_, causal_));
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(false, false, s_, m_.v, s_, s_, ss, lv, m_.v, lv, m_.v), p, v.data() + bi * s_ * lv,
                                         o->data() + bi * s_ * lv));  // O = P V
    }
    return Status::OK();
  }
  Status CoreBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& dout, Tensor* dq, Tensor* dk, Tensor* dv,
                      int64_t b) {
    const int64_t ss = s_ * s_, lq = hl_ * dq_, lv = hl_ * m_.v;
    Tensor dp = ops_->Scratch({hl_, ss});
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* p = probs.data() + bi * hl_ * ss;
      const float* dob = dout.data() + bi * s_ * lv;
      const float *qb = q.data() + bi * s_ * lq, *kb = k.data() + bi * s_ * lq, *vb = v.data() + bi * s_ * lv;
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(true, false, s_, m_.v, s_, s_, ss, lv, m_.v, lv, m_.v), p, dob, dv->data() + bi * s_ * lv));  // dV = P^T dO
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(false, true, s_, s_, m_.v, lv, m_.v, lv, m_.v, s_, ss), dob, vb, dp.data()));  // dP = dO V^T
      PLANNER_RETURN_IF_ERROR(ops_->SoftmaxBackwardRows(p, dp.data(), hl_ * s_, s_, Scale()));
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(false, false, s_, dq_, s_, s_, ss, lq, dq_, lq, dq_), dp.data(), kb, dq->data() + bi * s_ * lq));  // dQ = dS K
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(true, false, s_, dq_, s_, s_, ss, lq, dq_, lq, dq_), dp.data(), qb, dk->data() + bi * s_ * lq));  // dK = dS^T Q
    }
    return Status::OK();
  }
  DeviceOps* ops_;
  int64_t s_, h_, hl_;
  MlaDims m_;
  int64_t dq_;
  double theta_;
  bool causal_;
  TpGroup* group_;
  std::unique_ptr<Linear> qa_;
  std::unique_ptr<LayerKernel> qnorm_;
  std::unique_ptr<Linear> q_;
  Linear kva_;
  Norm kvnorm_;
  Linear kvb_, out_;
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
  MlaDims mla;                              // kv_lora > 0: multi-head latent attention (DeepSeek-V2/V3)
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

// ------------------------------------------------------------------- MoE
// One routed expert: fc1 (SwiGLU: [2 f, h], gate then up) -> activation -> fc2 on any number of token rows
// [rows, h], on the EP rank that holds it; with expert tensor parallelism (o.tp_size > 1) this rank's cut of
// it as the dense MLP's (fc1 column-parallel, fc2 row-parallel: its output is a partial sum over the TP group).
class ExpertMlp final : public LayerKernel {
 public:
  ExpertMlp(DeviceOps* ops, const std::string& name, int64_t hidden, int64_t ffn, bool gated, Activation act, bool bias, uint64_t seed,
            const KernelOptions& o)
      : ops_(ops), f_(ffn / o.tp_size), gated_(gated), act_(act),
        fc1_(ops, name + ".fc1", hidden, (gated ? 2 : 1) * f_, bias, 1, seed * 37 + 1, gated ? GatedFc1Shard(hidden, ffn, o) : Fc1Shard(hidden, ffn, o)),
        fc2_(ops, name + ".fc2", f_, hidden, bias && o.tp_rank == 0, 1, seed * 37 + 2, Fc2Shard(hidden, ffn, o)) {
    for (Param* p : Params()) p->expert = true;
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    const int64_t rows = x.dim(0);
    sv->children.assign(2, Saved{});
    Tensor a, g = ops_->Alloc({rows, f_});
    PLANNER_RETURN_IF_ERROR(fc1_.Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(gated_ ? ops_->SwiGluForward(a.data(), g.data(), rows, f_) : ops_->ActivationForward(act_, a.data(), g.data(), a.numel()));
    sv->t = {a};
    return fc2_.Forward(g, y, &sv->children[1]);
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 1 || sv->children.size() != 2) return Status::Internal("expert: backward without forward");
    const Tensor& a = sv->t[0];
    Tensor dg, da = ops_->Alloc(a.shape());
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardInput(dy, &dg, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(gated_ ? ops_->SwiGluBackward(a.data(), dg.data(), da.data(), a.dim(0), f_)
                                   : ops_->ActivationBackward(act_, a.data(), dg.data(), da.data(), a.numel()));
    sv->t.clear();
    return fc1_.BackwardInput(da, dx, &sv->children[0]);
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 2) return Status::Internal("expert: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(fc1_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardWeight(&sv->children[1]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({&fc1_, &fc2_}); }
  KernelFlops Flops(int64_t rows) const override { return SumFlops({&fc1_, &fc2_}, rows); }  // rows: tokens routed to it

 private:
  DeviceOps* ops_;
  int64_t f_;
  bool gated_;
  Activation act_;
  Linear fc1_, fc2_;
};

struct MoeConfig {
  int64_t experts = 2, top_k = 1, expert_ffn = 0, shared_ffn = 0, groups = 0, group_limit = 0;
  bool sigmoid = false;   // router: sigmoid scores (DeepSeek-V3), else softmax (Mixtral)
  double aux_loss = 0;    // coefficient of the Switch-style load-balancing loss (0: none)
};

// The top_k experts of one token by score (ties: the lower index); with route groups (DeepSeek-V3's node-limited
// routing) only among the best group_limit groups, a group's score being the sum of its two best scores.
void SelectExperts(const float* sc, const MoeConfig& m, int64_t* sel) {
  const int64_t E = m.experts;
  std::vector<int64_t> idx;
  std::vector<char> allowed(static_cast<size_t>(E), 1);
  if (m.groups > 0 && m.group_limit < m.groups) {
    const int64_t per = E / m.groups;
    std::vector<std::pair<double, int64_t>> gs;
    for (int64_t g = 0; g < m.groups; ++g) {
      std::vector<float> v(sc + g * per, sc + (g + 1) * per);
      std::sort(v.begin(), v.end(), std::greater<float>());
      gs.push_back({-(static_cast<double>(v[0]) + (per > 1 ? static_cast<double>(v[1]) : 0.0)), g});
    }
    std::sort(gs.begin(), gs.end());  // best first, ties: the lower group
    std::fill(allowed.begin(), allowed.end(), 0);
    for (int64_t i = 0; i < m.group_limit; ++i) std::fill_n(allowed.begin() + gs[static_cast<size_t>(i)].second * per, per, 1);
  }
  for (int64_t e = 0; e < E; ++e) {
    if (allowed[static_cast<size_t>(e)]) idx.push_back(e);
  }
  std::partial_sort(idx.begin(), idx.begin() + m.top_k, idx.end(), [&](int64_t a, int64_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); });
  std::copy(idx.begin(), idx.begin() + m.top_k, sel);
}

// Routing of n tokens from the router's logits [n, E]: scores (softmax over the experts, or sigmoid), each token's
// selection (expert ids as floats) and gate weights, the selected scores normalised to sum 1 (softmax router: the
// softmax over the selected logits, Mixtral; sigmoid router: DeepSeek-V3's normalised top-k).
void Route(const float* logits, int64_t n, const MoeConfig& m, float* scores, float* self, float* w) {
  const int64_t E = m.experts, k = m.top_k;
  std::vector<int64_t> sel(static_cast<size_t>(k));
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * E;
    float* s = scores + t * E;
    if (m.sigmoid) {
      for (int64_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      const float mx = *std::max_element(l, l + E);
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += (s[e] = std::exp(l[e] - mx));
      for (int64_t e = 0; e < E; ++e) s[e] = static_cast<float>(s[e] / z);
    }
    SelectExperts(s, m, sel.data());
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += s[sel[static_cast<size_t>(j)]];
    for (int64_t j = 0; j < k; ++j) {
      self[t * k + j] = static_cast<float>(sel[static_cast<size_t>(j)]);
      w[t * k + j] = static_cast<float>(s[sel[static_cast<size_t>(j)]] / sum);
    }
  }
}

// Each token's probability of each expert in the load-balancing loss: the softmax, or the sigmoid scores
// normalised to sum 1 (as Megatron-Core).
double AuxProb(const float* s, int64_t e, int64_t E, bool sigmoid) {
  if (!sigmoid) return s[e];
  double z = 0;
  for (int64_t i = 0; i < E; ++i) z += s[i];
  return s[e] / z;
}

// Switch Transformer's load-balancing loss over the N tokens of a microbatch (n here; N = n x the ranks sharing
// the sequence under SP, whose statistics are summed): coef E sum_i f_i P_i, f_i the share of the N k routes that
// chose expert i, P_i the mean over the tokens of AuxProb. Fills f (E values) and returns the loss.
Status AuxLoss(const float* scores, const float* sel, int64_t n, const MoeConfig& m, TpGroup* token_group, int64_t group_size, float* f,
               double* loss) {
  const int64_t E = m.experts, k = m.top_k;
  std::vector<float> stats(static_cast<size_t>(2 * E), 0.0f);  // route counts, probability sums
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) stats[static_cast<size_t>(sel[t * k + j])] += 1.0f;
    for (int64_t e = 0; e < E; ++e) stats[static_cast<size_t>(E + e)] += static_cast<float>(AuxProb(scores + t * E, e, E, m.sigmoid));
  }
  if (token_group != nullptr) PLANNER_RETURN_IF_ERROR(token_group->AllReduceSum(stats.data(), 2 * E));
  const double N = static_cast<double>(n * group_size);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    f[e] = static_cast<float>(stats[static_cast<size_t>(e)] / (N * static_cast<double>(k)));
    sum += static_cast<double>(f[e]) * stats[static_cast<size_t>(E + e)] / N;
  }
  *loss = m.aux_loss * static_cast<double>(E) * sum;
  return Status::OK();
}

// dlogits [n, E] (accumulated) from the gate weights' gradient dw [n, k] and, with aux_scale > 0, the scaled
// load-balancing loss (dL/dP_ti = coef E f_i / N, through the softmax or the normalised sigmoid).
void RouterGrad(const float* scores, const float* sel, const float* w, const float* dw, int64_t n, const MoeConfig& m, double aux_scale,
                const float* f, double N, float* dlogits) {
  const int64_t E = m.experts, k = m.top_k;
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* s = scores + t * E;
    float* dl = dlogits + t * E;
    double wdw = 0, ssum = 0;
    for (int64_t j = 0; j < k; ++j) wdw += static_cast<double>(w[t * k + j]) * dw[t * k + j], ssum += s[static_cast<int64_t>(sel[t * k + j])];
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = static_cast<int64_t>(sel[t * k + j]);
      const double g = dw[t * k + j] - wdw;  // d(normalised weight) -> d(selected score) x S
      dl[e] += static_cast<float>(m.sigmoid ? g / ssum * s[e] * (1.0 - s[e]) : w[t * k + j] * g);
    }
    if (aux_scale <= 0) continue;
    double pdp = 0, z = 0;
    for (int64_t e = 0; e < E; ++e) {
      dp[static_cast<size_t>(e)] = aux_scale * m.aux_loss * static_cast<double>(E) * f[e] / N;
      pdp += AuxProb(s, e, E, m.sigmoid) * dp[static_cast<size_t>(e)];
      z += s[e];
    }
    for (int64_t e = 0; e < E; ++e) {
      const double g = dp[static_cast<size_t>(e)] - pdp;
      dl[e] += static_cast<float>(m.sigmoid ? g / z * s[e] * (1.0 - s[e]) : s[e] * g);
    }
  }
}

// The exchange of rows between the EP ranks: rank j gets send_rows[j] rows of `width` floats (consecutive, by
// destination) and this rank recv_rows[j] from rank j (by source). Without a group (ep 1) a copy.
Status ExchangeRows(ExpertGroup* g, const float* send, const std::vector<int64_t>& send_rows, float* recv, const std::vector<int64_t>& recv_rows,
                    int64_t width) {
  std::vector<int64_t> sc, sd, rc, rd;
  int64_t so = 0, ro = 0;
  for (size_t j = 0; j < send_rows.size(); ++j) {
    sc.push_back(send_rows[j] * width), sd.push_back(so), so += sc.back();
    rc.push_back(recv_rows[j] * width), rd.push_back(ro), ro += rc.back();
  }
  if (g == nullptr) {
    if (so > 0) std::memcpy(recv, send, static_cast<size_t>(so) * 4);
    return Status::OK();
  }
  return g->AllToAllV(send, sc, sd, recv, rc, rd);
}

// The MoE feed-forward of a moe_block on [b, s, h] (its input already normalised): router logits x W_r^T
// (W_r [E, h], replicated), Route(), each token's output sum_j w_j expert_{e_j}(x) plus the shared expert MLP
// (width shared_ffn, a tensor-parallel Mlp) on every token. Dropless, deterministic.
// Tensor parallelism without SP: every TP rank routes all tokens (the same router, the same selection) but
// dispatches only its share [tp_rank n / t, (tp_rank + 1) n / t); the routed outputs (and in backward, the
// input and gate-weight gradients) are all-reduced over the TP group from their zero-padded shares.
// Expert parallelism: this rank holds experts [e0, e0 + E / ep); the routes of its tokens go to the rank
// holding their expert as rows [local expert id | x] (AllToAllV, sorted by destination, then token and
// slot), come back as expert outputs (AllToAllV) and are combined here; backward sends the output gradients
// and receives the input gradients the same way. Saved: scores, selection, weights, the returned expert
// outputs (send order), the received rows' local expert ids, and the send / receive row counts.
class MoeFfn final : public LayerKernel {
 public:
  MoeFfn(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c, const MoeConfig& m, const KernelOptions& o)
      : ops_(ops), s_(seq), h_(hidden), m_(m), el_(m.experts / o.ep_size), e0_(o.ep_rank * el_), ep_(o.ep_size), t_(o.tp_size), tp_rank_(o.tp_rank),
        split_(o.etp > 1 ? 1 : o.tp_size),
        aux_scale_(m.aux_loss > 0 ? o.aux_loss_scale : 0.0), tp_group_(o.tp_group), ep_group_(o.ep_group), token_group_(o.token_group),
        token_size_(o.token_group ? o.token_group_size : 1),
        router_(ops, name + ".router", hidden, m.experts, false, seq, o.seed * 47 + 1) {
    if (m.shared_ffn > 0) {
      TransformerConfig sc = c;
      sc.ffn = m.shared_ffn;
      KernelOptions so = o;
      so.seed = o.seed * 47 + 2;
      shared_ = std::make_unique<Mlp>(ops, name + ".shared", seq, hidden, sc, so);
    }
    const Activation act = c.act == Elementwise::kRelu2 ? Activation::kRelu2 : Activation::kGelu;
    KernelOptions eo = o;  // expert tensor parallelism: the experts cut over the TP group (etp = t), else whole
    if (o.etp <= 1) eo.tp_size = 1, eo.tp_rank = 0;
    for (int64_t e = e0_; e < e0_ + el_; ++e) {
      experts_.push_back(std::make_unique<ExpertMlp>(ops, fmt::format("{}.experts.{}", name, e), hidden, m.expert_ffn, c.gated, act, c.bias,
                                                     o.seed * 47 + 100 + static_cast<uint64_t>(e), eo));
    }
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("moe", *ops_, x, {s_, h_}, &b));
    const int64_t n = b * s_, k = m_.top_k;
    sv->children.assign(static_cast<size_t>(2 + el_), Saved{});
    Tensor logits;
    PLANNER_RETURN_IF_ERROR(router_.Forward(x, &logits, &sv->children[0]));
    Tensor scores = ops_->Alloc({n, m_.experts}), sel = ops_->Alloc({n, k}), w = ops_->Alloc({n, k});
    Route(logits.data(), n, m_, scores.data(), sel.data(), w.data());
    Tensor f = ops_->Zeros({m_.experts});  // the aux loss's route shares (global over the token group)
    double aux = 0;
    if (aux_scale_ > 0) PLANNER_RETURN_IF_ERROR(AuxLoss(scores.data(), sel.data(), n, m_, token_group_, token_size_, f.data(), &aux));
    aux_sum_ += aux;
    sv->t = {scores, sel, w, f};
    sv->exact = {1, 3};  // routing: the selected experts and their route counts
    PLANNER_RETURN_IF_ERROR(RoutedForward(x, b, y, sv));
    if (!shared_) return Status::OK();
    Tensor ys;
    PLANNER_RETURN_IF_ERROR(shared_->Forward(x, &ys, &sv->children[1]));
    return ops_->Add(y->data(), ys.data(), y->data(), y->numel());
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 6) return Status::Internal("moe: backward without forward");
    const Tensor &scores = sv->t[0], &sel = sv->t[1], &w = sv->t[2];
    const int64_t n = scores.dim(0), b = n / s_;
    Tensor dw = ops_->Zeros({n, m_.top_k});
    PLANNER_RETURN_IF_ERROR(RoutedBackward(dy, b, &dw, dx, sv));
    Tensor dlogits = ops_->Zeros({n, m_.experts}), dxr;
    RouterGrad(scores.data(), sel.data(), w.data(), dw.data(), n, m_, aux_scale_, sv->t[3].data(), static_cast<double>(n * token_size_), dlogits.data());
    PLANNER_RETURN_IF_ERROR(router_.BackwardInput(dlogits, &dxr, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(ops_->Add(dx->data(), dxr.data(), dx->data(), dx->numel()));
    if (shared_) {
      Tensor dxs;
      PLANNER_RETURN_IF_ERROR(shared_->BackwardInput(dy, &dxs, &sv->children[1]));
      PLANNER_RETURN_IF_ERROR(ops_->Add(dx->data(), dxs.data(), dx->data(), dx->numel()));
    }
    sv->t.clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != static_cast<size_t>(2 + el_)) return Status::Internal("moe: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(router_.BackwardWeight(&sv->children[0]));
    if (shared_) PLANNER_RETURN_IF_ERROR(shared_->BackwardWeight(&sv->children[1]));
    for (int64_t e = 0; e < el_; ++e) {
      Saved& es = sv->children[static_cast<size_t>(2 + e)];
      if (!es.children.empty()) PLANNER_RETURN_IF_ERROR(experts_[static_cast<size_t>(e)]->BackwardWeight(&es));  // no tokens: no gradient
    }
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    std::vector<Param*> ps = router_.Params();
    if (shared_) for (Param* p : shared_->Params()) ps.push_back(p);
    for (auto& e : experts_) for (Param* p : e->Params()) ps.push_back(p);
    return ps;
  }
  // Router, shared expert, and the routed experts at their balanced load: this rank's share of the tokens, top_k each.
  KernelFlops Flops(int64_t b) const override {
    KernelFlops f = router_.Flops(b);
    auto add = [&f](const KernelFlops& g) { f.forward += g.forward, f.backward_input += g.backward_input, f.backward_weight += g.backward_weight; };
    if (shared_) add(shared_->Flops(b));
    if (!experts_.empty()) add(experts_[0]->Flops(b * s_ / split_ * m_.top_k));
    return f;
  }
  double TakeAuxLoss() override { return std::exchange(aux_sum_, 0.0); }

 private:
  // The send order of this rank's routes: route (token - t0) k + j -> its row, and the rows per destination.
  void PlanSend(const float* sel, int64_t t0, int64_t nl, std::vector<int64_t>* route_row, std::vector<int64_t>* send_rows) const {
    const int64_t k = m_.top_k;
    route_row->assign(static_cast<size_t>(nl * k), 0);
    send_rows->assign(static_cast<size_t>(ep_), 0);
    int64_t row = 0;
    for (int64_t r = 0; r < ep_; ++r) {
      for (int64_t i = 0; i < nl * k; ++i) {
        if (static_cast<int64_t>(sel[t0 * k + i]) / el_ != r) continue;
        (*route_row)[static_cast<size_t>(i)] = row++;
        ++(*send_rows)[static_cast<size_t>(r)];
      }
    }
  }
  // Rows per source rank: the counts exchanged first (one float to each rank).
  Status RecvCounts(const std::vector<int64_t>& send_rows, std::vector<int64_t>* recv_rows) {
    std::vector<float> s(send_rows.begin(), send_rows.end()), r(static_cast<size_t>(ep_));
    const std::vector<int64_t> ones(static_cast<size_t>(ep_), 1);
    PLANNER_RETURN_IF_ERROR(ExchangeRows(ep_group_, s.data(), ones, r.data(), ones, 1));
    recv_rows->assign(r.begin(), r.end());
    return Status::OK();
  }
  int64_t Total(const std::vector<int64_t>& v) const { return std::accumulate(v.begin(), v.end(), int64_t{0}); }
  Status RoutedForward(const Tensor& x, int64_t b, Tensor* y, Saved* sv);
  Status RoutedBackward(const Tensor& dy, int64_t b, Tensor* dw, Tensor* dx, Saved* sv);
  Status ExpertsPass(bool forward, const float* in, int64_t width, const std::vector<int64_t>& ids, Tensor* out, Saved* sv);

  DeviceOps* ops_;
  int64_t s_, h_;
  MoeConfig m_;
  int64_t el_, e0_, ep_, t_, tp_rank_;
  int64_t split_;  // TP ranks sharing the tokens' dispatch (t without expert TP; 1 with it: every rank sends all, experts cut)
  double aux_scale_;
  TpGroup* tp_group_;
  ExpertGroup* ep_group_;
  TpGroup* token_group_;  // SP: the ranks sharing the microbatch's sequence (the aux loss's statistics are summed over it)
  int64_t token_size_;
  Linear router_;
  std::unique_ptr<Mlp> shared_;
  std::vector<std::unique_ptr<ExpertMlp>> experts_;
  double aux_sum_ = 0;  // the aux losses of the forwards since the last TakeAuxLoss
};

// Each local expert on its received rows (in arrival order): forward reads [id | x] rows of width h + 1, backward
// the output gradients (width h); results scattered back to the rows' positions in `out` [R, h].
Status MoeFfn::ExpertsPass(bool forward, const float* in, int64_t width, const std::vector<int64_t>& ids, Tensor* out, Saved* sv) {
  const int64_t R = static_cast<int64_t>(ids.size()), off = width - h_;
  *out = ops_->Alloc({std::max<int64_t>(R, 1), h_});
  for (int64_t e = 0; e < el_; ++e) {
    std::vector<int64_t> rows;
    for (int64_t i = 0; i < R; ++i) {
      if (ids[static_cast<size_t>(i)] == e) rows.push_back(i);
    }
    if (rows.empty()) continue;
    const int64_t cnt = static_cast<int64_t>(rows.size());
    Tensor xin = ops_->Alloc({cnt, h_}), yout;
    for (int64_t i = 0; i < cnt; ++i) std::memcpy(xin.data() + i * h_, in + rows[static_cast<size_t>(i)] * width + off, static_cast<size_t>(h_) * 4);
    Saved& es = sv->children[static_cast<size_t>(2 + e)];
    LayerKernel* ex = experts_[static_cast<size_t>(e)].get();
    PLANNER_RETURN_IF_ERROR(forward ? ex->Forward(xin, &yout, &es) : ex->BackwardInput(xin, &yout, &es));
    for (int64_t i = 0; i < cnt; ++i) std::memcpy(out->data() + rows[static_cast<size_t>(i)] * h_, yout.data() + i * h_, static_cast<size_t>(h_) * 4);
  }
  return Status::OK();
}

Status MoeFfn::RoutedForward(const Tensor& x, int64_t b, Tensor* y, Saved* sv) {
  const int64_t n = b * s_, k = m_.top_k, nl = n / split_, t0 = split_ > 1 ? tp_rank_ * nl : 0;
  const float *sel = sv->t[1].data(), *w = sv->t[2].data();
  std::vector<int64_t> route_row, send_rows, recv_rows;
  PlanSend(sel, t0, nl, &route_row, &send_rows);
  PLANNER_RETURN_IF_ERROR(RecvCounts(send_rows, &recv_rows));
  const int64_t S = nl * k, R = Total(recv_rows);
  Tensor send = ops_->Alloc({std::max<int64_t>(S, 1), h_ + 1}), recv = ops_->Alloc({std::max<int64_t>(R, 1), h_ + 1});
  for (int64_t i = 0; i < S; ++i) {
    float* row = send.data() + route_row[static_cast<size_t>(i)] * (h_ + 1);
    row[0] = static_cast<float>(static_cast<int64_t>(sel[t0 * k + i]) % el_);
    std::memcpy(row + 1, x.data() + (t0 + i / k) * h_, static_cast<size_t>(h_) * 4);
  }
  PLANNER_RETURN_IF_ERROR(ExchangeRows(ep_group_, send.data(), send_rows, recv.data(), recv_rows, h_ + 1));
  std::vector<int64_t> ids(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) ids[static_cast<size_t>(i)] = static_cast<int64_t>(recv.data()[i * (h_ + 1)]);
  Tensor out_recv, out_send = ops_->Alloc({std::max<int64_t>(S, 1), h_});
  PLANNER_RETURN_IF_ERROR(ExpertsPass(true, recv.data(), h_ + 1, ids, &out_recv, sv));
  PLANNER_RETURN_IF_ERROR(ExchangeRows(ep_group_, out_recv.data(), recv_rows, out_send.data(), send_rows, h_));
  *y = ops_->Zeros({b, s_, h_});
  for (int64_t i = 0; i < S; ++i) {
    const float* o = out_send.data() + route_row[static_cast<size_t>(i)] * h_;
    float* yt = y->data() + (t0 + i / k) * h_;
    const float wi = w[t0 * k + i];
    for (int64_t c = 0; c < h_; ++c) yt[c] += wi * o[c];
  }
  if (t_ > 1) PLANNER_RETURN_IF_ERROR(AllReduceSum(tp_group_, y));  // each TP rank's share of the tokens
  Tensor meta = ops_->Alloc({1 + R + ep_});  // [R | the received rows' expert ids | rows received per source]
  meta.data()[0] = static_cast<float>(R);
  for (int64_t i = 0; i < R; ++i) meta.data()[1 + i] = static_cast<float>(ids[static_cast<size_t>(i)]);
  for (int64_t r = 0; r < ep_; ++r) meta.data()[1 + R + r] = static_cast<float>(recv_rows[static_cast<size_t>(r)]);
  sv->t.push_back(out_send);
  sv->exact.push_back(sv->t.size());  // row counts and expert ids
  sv->t.push_back(meta);
  return Status::OK();
}

Status MoeFfn::RoutedBackward(const Tensor& dy, int64_t b, Tensor* dw, Tensor* dx, Saved* sv) {
  const float *sel = sv->t[1].data(), *w = sv->t[2].data(), *out_send = sv->t[4].data(), *meta = sv->t[5].data();
  const int64_t n = b * s_, k = m_.top_k, nl = n / split_, t0 = split_ > 1 ? tp_rank_ * nl : 0, S = nl * k, R = static_cast<int64_t>(meta[0]);
  std::vector<int64_t> route_row, send_rows, recv_rows(meta + 1 + R, meta + 1 + R + ep_), ids(meta + 1, meta + 1 + R);
  PlanSend(sel, t0, nl, &route_row, &send_rows);
  Tensor dsend = ops_->Alloc({std::max<int64_t>(S, 1), h_}), drecv = ops_->Alloc({std::max<int64_t>(R, 1), h_});
  for (int64_t i = 0; i < S; ++i) {
    const int64_t row = route_row[static_cast<size_t>(i)];
    const float* g = dy.data() + (t0 + i / k) * h_;
    const float* o = out_send + row * h_;
    float* d = dsend.data() + row * h_;
    double dot = 0;
    for (int64_t c = 0; c < h_; ++c) d[c] = w[t0 * k + i] * g[c], dot += static_cast<double>(g[c]) * o[c];
    dw->data()[t0 * k + i] = static_cast<float>(dot);
  }
  if (t_ > 1) PLANNER_RETURN_IF_ERROR(AllReduceSum(tp_group_, dw));
  PLANNER_RETURN_IF_ERROR(ExchangeRows(ep_group_, dsend.data(), send_rows, drecv.data(), recv_rows, h_));
  Tensor din_recv, din_send = ops_->Alloc({std::max<int64_t>(S, 1), h_});
  PLANNER_RETURN_IF_ERROR(ExpertsPass(false, drecv.data(), h_, ids, &din_recv, sv));
  PLANNER_RETURN_IF_ERROR(ExchangeRows(ep_group_, din_recv.data(), recv_rows, din_send.data(), send_rows, h_));
  *dx = ops_->Zeros({b, s_, h_});
  for (int64_t i = 0; i < S; ++i) CopyCols(din_send.data() + route_row[static_cast<size_t>(i)] * h_, h_, 0, dx->data() + (t0 + i / k) * h_, h_, 0, h_, 1, true);
  if (t_ > 1) PLANNER_RETURN_IF_ERROR(AllReduceSum(tp_group_, dx));
  return Status::OK();
}

// ------------------------------------------------------- transformer block
// Pre-norm block (LayerNorm for GPT, RMSNorm for Llama): y = r + ffn(norm2(r)), r = x + attn(norm1(x)); attn is
// GQA attention or MLA, ffn a dense MLP (transformer_block) or the MoE feed-forward (moe_block).
class TransformerBlock final : public PreNormBlockKernel {
 public:
  TransformerBlock(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, bool rms, std::unique_ptr<LayerKernel> attn,
                   std::unique_ptr<LayerKernel> mlp)
      : ops_(ops), s_(seq), h_(hidden) {
    ln1_ = MakeNorm(ops, name + ".ln1", {seq, hidden}, rms);
    attn_ = std::move(attn);
    ln2_ = MakeNorm(ops, name + ".ln2", {seq, hidden}, rms);
    mlp_ = std::move(mlp);
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("transformer_block", *ops_, x, {s_, h_}, &b));
    sv->children.assign(4, Saved{});
    Tensor a, u, c, v;
    PLANNER_RETURN_IF_ERROR(ln1_->Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(attn_->Forward(a, &u, &sv->children[1]));
    Tensor r = ops_->Alloc(x.shape());
    PLANNER_RETURN_IF_ERROR(ops_->Add(x.data(), u.data(), r.data(), r.numel()));
    PLANNER_RETURN_IF_ERROR(ln2_->Forward(r, &c, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(mlp_->Forward(c, &v, &sv->children[3]));
    *y = ops_->Alloc(x.shape());
    return ops_->Add(r.data(), v.data(), y->data(), y->numel());
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward without forward");
    Tensor dc, dr, da, dxa;
    PLANNER_RETURN_IF_ERROR(mlp_->BackwardInput(dy, &dc, &sv->children[3]));
    PLANNER_RETURN_IF_ERROR(ln2_->BackwardInput(dc, &dr, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(ops_->Add(dr.data(), dy.data(), dr.data(), dr.numel()));
    PLANNER_RETURN_IF_ERROR(attn_->BackwardInput(dr, &da, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln1_->BackwardInput(da, &dxa, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(ops_->Add(dxa.data(), dr.data(), dxa.data(), dxa.numel()));
    *dx = dxa;
    return Status::OK();
  }

 private:
  DeviceOps* ops_;
  int64_t s_, h_;
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
  c->mla = {a.Int("q_lora_rank", 0), a.Int("kv_lora_rank", 0), a.Int("qk_rope_head_dim", 0), a.Int("qk_nope_head_dim", 0), a.Int("v_head_dim", 0)};
  const bool mla = c->mla.kv_lora > 0, attn = HasAttention(l.kind) && !mla, mlp = HasDenseMlp(l.kind);
  if (mla && (c->mla.q_lora < 0 || c->mla.rope < 2 || c->mla.rope % 2 != 0 || c->mla.nope < 1 || c->mla.v < 1)) {
    return bad(fmt::format("MLA needs q_lora_rank >= 0, an even qk_rope_head_dim >= 2 and positive qk_nope_head_dim and v_head_dim (got {}, {}, {}, {})",
                           c->mla.q_lora, c->mla.rope, c->mla.nope, c->mla.v));
  }
  if (mla && t > 1 && c->heads % t != 0) return bad(fmt::format("tensor-parallel degree {} does not divide its heads ({})", t, c->heads));
  const int64_t head_dim = a.Int("head_dim", 0);  // an attention width other than hidden (Qwen3): not in the runtime's kernels
  if (attn && head_dim > 0 && head_dim * c->heads != hidden) {
    return bad(fmt::format("head_dim {} x heads {} is not the hidden size {}: the runtime's attention uses head_dim = hidden / heads", head_dim, c->heads,
                           hidden));
  }
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


// The attributes of a moe_block (MOE.md's names and defaults), checked against the EP and TP degrees.
Status ReadMoeConfig(const Layer& l, const KernelOptions& o, MoeConfig* m) {
  const LayerAttrs& a = l.attrs;
  m->experts = a.Int("experts", 0), m->top_k = a.Int("top_k", 1), m->expert_ffn = a.Int("expert_ffn", 0), m->shared_ffn = a.Int("shared_ffn", 0);
  m->groups = a.Int("route_groups", 0), m->group_limit = a.Int("route_group_limit", 0), m->aux_loss = a.Real("aux_loss", 0.0);
  const std::string router = a.String("router", "softmax");
  const double capacity = a.Real("capacity_factor", 0.0);
  m->sigmoid = router == "sigmoid";
  auto bad = [&](const std::string& what) { return Status::InvalidArgument(fmt::format("layer '{}': {}", l.name, what)); };
  if (m->experts < 2 || m->top_k < 1 || m->top_k > m->experts) return bad(fmt::format("needs experts >= 2 and 1 <= top_k <= experts (got {} and {})", m->experts, m->top_k));
  if (m->expert_ffn < 1 || m->shared_ffn < 0) return bad(fmt::format("needs expert_ffn >= 1 and shared_ffn >= 0 (got {} and {})", m->expert_ffn, m->shared_ffn));
  if (router != "softmax" && router != "sigmoid") return bad(fmt::format("router '{}' is not softmax or sigmoid", router));
  if (capacity != 0) return bad(fmt::format("capacity_factor {} is not 0: the runtime runs dropless MoE only (set capacity_factor: 0)", capacity));
  if (m->aux_loss < 0) return bad(fmt::format("aux_loss {} is negative", m->aux_loss));
  if (m->groups > 0 && (m->experts % m->groups != 0 || m->group_limit < 1 || m->group_limit > m->groups ||
                        m->group_limit * (m->experts / m->groups) < m->top_k)) {
    return bad(fmt::format("route_groups {} must divide the {} experts and route_group_limit {} keep at least top_k {} of them", m->groups, m->experts,
                           m->group_limit, m->top_k));
  }
  if (o.ep_size < 1 || m->experts % o.ep_size != 0 || o.ep_rank < 0 || o.ep_rank >= o.ep_size || (o.ep_size > 1 && o.ep_group == nullptr)) {
    return bad(fmt::format("expert-parallel rank {} of {} does not fit its {} experts (ep must divide them and have a group)", o.ep_rank, o.ep_size, m->experts));
  }
  const int64_t seq = l.in_shape.empty() ? 0 : l.in_shape[0];
  if (o.etp > 1 && (o.etp != o.tp_size || m->expert_ffn % o.etp != 0)) {
    return bad(fmt::format("expert tensor parallelism etp {} must equal tp {} and divide expert_ffn {}", o.etp, o.tp_size, m->expert_ffn));
  }
  if (o.tp_size > 1 && (seq % o.tp_size != 0 || m->shared_ffn % o.tp_size != 0)) {
    return bad(fmt::format("tensor-parallel degree {} must divide the sequence {} and shared_ffn {}", o.tp_size, seq, m->shared_ffn));
  }
  return Status::OK();
}

std::unique_ptr<LayerKernel> MakeAttention(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c,
                                           const KernelOptions& o) {
  if (c.mla.kv_lora > 0) return std::make_unique<Mla>(ops, name, seq, hidden, c.heads, c.rope_theta, c.mla, o);
  return std::make_unique<Attention>(ops, name, seq, hidden, c, o);
}

// attention, mlp, transformer_block, moe_block and moe (MLA and MoE: CPU only).
Status BuildTransformerKernel(const Layer& l, const KernelOptions& o, DeviceOps* ops, std::unique_ptr<LayerKernel>* out) {
  const auto& in = l.in_shape;
  TransformerConfig c;
  PLANNER_RETURN_IF_ERROR(ReadTransformerConfig(l, std::max<int64_t>(1, o.tp_size), &c));
  const bool moe = l.kind == LayerKind::kMoeBlock || l.kind == LayerKind::kMoe;
  if ((c.mla.kv_lora > 0 || moe) && ops->device() != Device::kCpu) {
    const char* what = moe ? LayerKindName(l.kind) : "MLA";
    return Status::NotSupported(fmt::format("layer '{}': {} runs on CPU ranks only (not on CUDA yet)", l.name, what));
  }
  MoeConfig m;
  if (moe) PLANNER_RETURN_IF_ERROR(ReadMoeConfig(l, o, &m));
  if (l.kind == LayerKind::kAttention) {
    *out = MakeAttention(ops, l.name, in[0], in[1], c, o);
  } else if (l.kind == LayerKind::kMlp) {
    *out = std::make_unique<Mlp>(ops, l.name, in[0], in[1], c, o);
  } else if (l.kind == LayerKind::kTransformerBlock) {
    *out = std::make_unique<TransformerBlock>(ops, l.name, in[0], in[1], c.rms, MakeAttention(ops, l.name + ".attn", in[0], in[1], c, o),
                                              std::make_unique<Mlp>(ops, l.name + ".mlp", in[0], in[1], c, o));
  } else if (l.kind == LayerKind::kMoe) {  // the MoE feed-forward alone (tests, SP), as mlp is a block's dense one
    *out = std::make_unique<MoeFfn>(ops, l.name, in[0], in[1], c, m, o);
  } else {
    *out = std::make_unique<TransformerBlock>(ops, l.name, in[0], in[1], c.rms, MakeAttention(ops, l.name + ".attn", in[0], in[1], c, o),
                                              std::make_unique<MoeFfn>(ops, l.name + ".moe", in[0], in[1], c, m, o));
  }
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
    sv->exact = {1};  // class ids
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
    sv->exact = {0, 1};  // argmax indices; b
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
  switch (l.kind) {
    case LayerKind::kLinear:
      *out = std::make_unique<Linear>(ops, l.name, in.back(), l.out_shape.back(), a.Bool("bias", true),
                                      Product(in) / in.back(), o.seed);
      return Status::OK();
    case LayerKind::kRelu:
    case LayerKind::kGelu:
    case LayerKind::kDropout: {
      Elementwise::Kind op = Elementwise::kDropout;
      if (l.kind != LayerKind::kDropout) op = l.kind == LayerKind::kRelu ? Elementwise::kRelu : Elementwise::kGelu;
      *out = std::make_unique<Elementwise>(ops, op, in, a.probability, o.seed);
      return Status::OK();
    }
    case LayerKind::kLayernorm:
    case LayerKind::kRmsnorm:
      *out = std::make_unique<Norm>(ops, l.name, in, l.kind == LayerKind::kRmsnorm);
      return Status::OK();
    case LayerKind::kEmbedding: {
      const int64_t vocab = a.Int("vocab", 0);
      PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
      *out = std::make_unique<Embedding>(ops, l.name, in[0], vocab, a.Int("hidden", 0), a.Int("positions", 0), o);
      return Status::OK();
    }
    case LayerKind::kAttention:
    case LayerKind::kMlp:
    case LayerKind::kTransformerBlock:
    case LayerKind::kMoeBlock:
    case LayerKind::kMoe: return BuildTransformerKernel(l, o, ops, out);
    case LayerKind::kLmHead: {
      const int64_t vocab = a.Int("vocab", 0);
      PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
      // Logits [b, s, V / t] = x W^T (vocabulary-parallel, no bias).
      auto proj = std::make_unique<Linear>(ops, l.name, in[1], vocab / t, false, in[0], o.seed * 41 + 1,
                                           VocabShard(in[1], vocab, o));
      *out = std::make_unique<VocabParallelHead>(std::move(proj), o.tp_group);
      return Status::OK();
    }
    case LayerKind::kLoss: {
      std::vector<int64_t> shard = in;
      PLANNER_RETURN_IF_ERROR(divides(in.back(), "classes"));
      shard.back() /= t;
      *out = std::make_unique<Loss>(ops, shard, o);
      return Status::OK();
    }
    case LayerKind::kConv2d:
      *out = std::make_unique<Conv2d>(ops, l.name, in, l.out_shape[0], a.Int("kernel", 3), a.Int("stride", 1),
                                      a.Int("padding", 0), a.Bool("bias", true), o.seed);
      return Status::OK();
    case LayerKind::kMaxpool:
    case LayerKind::kAvgpool: {
      const int64_t k = a.Int("kernel", 2);
      *out = std::make_unique<Pool>(ops, l.kind == LayerKind::kMaxpool, in, k, a.Int("stride", k), a.Int("padding", 0));
      return Status::OK();
    }
    case LayerKind::kFlatten: *out = std::make_unique<Flatten>(ops, in); return Status::OK();
    case LayerKind::kMtp:
      return Status::NotSupported(fmt::format("layer '{}': multi-token prediction modules are costed, not trained, "
                                              "by the runtime; remove mtp: from the model to run it", l.name));
  }
  return Status::Internal(fmt::format("layer '{}': no kernel for its kind", l.name));  // not a LayerKind
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
