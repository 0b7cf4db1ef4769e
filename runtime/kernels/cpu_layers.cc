// CPU layer kernels with Eigen (row-major float32). Derivations of every
// backward are in docs/profiler.md (runtime/kernels); tests/runtime/kernels_test.cc checks each
// against finite differences.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <Eigen/Core>
#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/shards.h"

namespace planner {

namespace {

using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRM = Eigen::Map<RM>;
using CMapRM = Eigen::Map<const RM>;
using Strided = Eigen::Map<RM, 0, Eigen::OuterStride<>>;
using CStrided = Eigen::Map<const RM, 0, Eigen::OuterStride<>>;

int g_threads = 1;

MapRM Mat(Tensor& t, int64_t rows, int64_t cols) { return MapRM(t.data(), rows, cols); }
CMapRM Mat(const Tensor& t, int64_t rows, int64_t cols) { return CMapRM(t.data(), rows, cols); }

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
Status CheckInput(const char* what, const Tensor& x, const std::vector<int64_t>& shape, int64_t* b) {
  if (x.empty() || x.rank() != static_cast<int>(shape.size()) + 1 ||
      !std::equal(shape.begin(), shape.end(), x.shape().begin() + 1)) {
    std::string want = "[b";
    for (int64_t d : shape) want += ", " + std::to_string(d);
    return Status::InvalidArgument(fmt::format("{}: input is {}, expected {}]", what, x.empty() ? "empty" : x.ShapeString(), want));
  }
  *b = x.dim(0);
  return Status::OK();
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Param MakeParam(const std::string& name, const std::vector<int64_t>& shape) {
  Param p;
  p.name = name;
  p.value = Tensor::Zeros(shape);
  p.grad = Tensor::Zeros(shape);
  return p;
}

// ---------------------------------------------------------------- linear
// y = x W^T + b over the last dimension; W is [out, in].
class Linear final : public LayerKernel {
 public:
  Linear(std::string name, int64_t in, int64_t out, bool bias, int64_t tokens_per_sample, uint64_t seed, const WeightSlice& slice = {})
      : in_(in), out_(out), tokens_(tokens_per_sample), w_(MakeParam(name + ".weight", {out, in})) {
    w_.value = LinearWeight(out, in, seed, slice);
    w_.tp_sharded = slice.cut();
    if (bias) {
      b_ = MakeParam(name + ".bias", {out});
      b_.tp_sharded = slice.cut() && out != slice.full_out;  // column-parallel bias is sharded; row-parallel lives on rank 0
    }
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    if (x.empty() || x.dim(-1) != in_) return Status::InvalidArgument(fmt::format("linear: input {} does not end in {}", x.ShapeString(), in_));
    const int64_t n = x.numel() / in_;
    std::vector<int64_t> shape = x.shape();
    shape.back() = out_;
    *y = AllocateTensor(shape, Device::kCpu);
    auto Y = Mat(*y, n, out_);
    Y.noalias() = Mat(x, n, in_) * Mat(w_.value, out_, in_).transpose();
    if (!b_.value.empty()) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b_.value.data(), out_);
    s->t = {x};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1) return Status::Internal("linear: backward without forward");
    const Tensor& x = s->t[0];
    const int64_t n = x.numel() / in_;
    if (dy.numel() != n * out_) return Status::InvalidArgument("linear: gradient shape does not match the output");
    *dx = AllocateTensor(x.shape(), Device::kCpu);
    Mat(*dx, n, in_).noalias() = Mat(dy, n, out_) * Mat(w_.value, out_, in_);
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("linear: backward-weight before backward-input");
    const Tensor& x = s->t[0];
    const Tensor& dy = s->t[1];
    const int64_t n = x.numel() / in_;
    Mat(w_.grad, out_, in_).noalias() += Mat(dy, n, out_).transpose() * Mat(x, n, in_);
    if (!b_.value.empty()) Eigen::Map<Eigen::RowVectorXf>(b_.grad.data(), out_) += Mat(dy, n, out_).colwise().sum();
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
  int64_t in_, out_, tokens_;
  Param w_, b_;
};

// ------------------------------------------------------------ elementwise
class Elementwise final : public LayerKernel {
 public:
  enum Kind { kRelu, kGelu, kDropout };
  Elementwise(Kind k, std::vector<int64_t> shape, double p, uint64_t seed) : kind_(k), shape_(std::move(shape)), p_(p), seed_(seed) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput(Name(), x, shape_, &b));
    *y = AllocateTensor(x.shape(), Device::kCpu);
    const int64_t n = x.numel();
    const float* xi = x.data();
    float* yo = y->data();
    if (kind_ == kRelu) {
      for (int64_t i = 0; i < n; ++i) yo[i] = xi[i] > 0 ? xi[i] : 0.0f;
      s->t = {*y};
    } else if (kind_ == kGelu) {
      // Vectorised (Eigen's SIMD tanh): the scalar loop cost more than the block's GEMMs.
      Eigen::Map<const Eigen::ArrayXf> v(xi, n);
      Eigen::Map<Eigen::ArrayXf>(yo, n) = 0.5f * v * (1.0f + (kC * (v + 0.044715f * v.cube())).tanh());
      s->t = {x};
    } else {
      Tensor mask = AllocateTensor(x.shape(), Device::kCpu);
      const float keep = static_cast<float>(1.0 - p_), scale = keep > 0 ? 1.0f / keep : 0.0f;
      const uint64_t base = SplitMix(seed_ ^ (++calls_ * 0x632BE59BD9B4E019ull));
      for (int64_t i = 0; i < n; ++i) {
        double u = static_cast<double>(SplitMix(base + static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
        mask.data()[i] = u >= p_ ? scale : 0.0f;
        yo[i] = xi[i] * mask.data()[i];
      }
      s->t = {mask};
    }
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 1 || dy.numel() != s->t[0].numel()) return Status::Internal(fmt::format("{}: backward without a matching forward", Name()));
    const Tensor& z = s->t[0];
    *dx = AllocateTensor(z.shape(), Device::kCpu);
    const int64_t n = z.numel();
    const float* g = dy.data();
    const float* zi = z.data();
    float* o = dx->data();
    if (kind_ == kRelu) {
      for (int64_t i = 0; i < n; ++i) o[i] = zi[i] > 0 ? g[i] : 0.0f;
    } else if (kind_ == kGelu) {
      Eigen::Map<const Eigen::ArrayXf> v(zi, n), gg(g, n);
      Eigen::ArrayXf t = (kC * (v + 0.044715f * v.cube())).tanh();
      Eigen::Map<Eigen::ArrayXf>(o, n) = gg * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t.square()) * (kC * (1.0f + 3 * 0.044715f * v.square())));
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = g[i] * zi[i];
    }
    s->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  const char* Name() const { return kind_ == kRelu ? "relu" : (kind_ == kGelu ? "gelu" : "dropout"); }
  static constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  Kind kind_;
  std::vector<int64_t> shape_;
  double p_;
  uint64_t seed_, calls_ = 0;
};

// -------------------------------------------------------------- layernorm
class LayerNorm final : public LayerKernel {
 public:
  LayerNorm(std::string name, std::vector<int64_t> shape)
      : shape_(std::move(shape)), h_(shape_.back()), g_(MakeParam(name + ".gamma", {h_})), b_(MakeParam(name + ".beta", {h_})) {
    std::fill(g_.value.data(), g_.value.data() + h_, 1.0f);
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("layernorm", x, shape_, &b));
    const int64_t n = x.numel() / h_;
    *y = AllocateTensor(x.shape(), Device::kCpu);
    Tensor xhat = AllocateTensor({n, h_}, Device::kCpu), rstd = AllocateTensor({n}, Device::kCpu);
    auto X = Mat(x, n, h_);
    auto XH = Mat(xhat, n, h_);
    auto Y = Mat(*y, n, h_);
    Eigen::Map<const Eigen::RowVectorXf> gamma(g_.value.data(), h_), beta(b_.value.data(), h_);
    for (int64_t r = 0; r < n; ++r) {
      float mean = X.row(r).mean();
      float var = (X.row(r).array() - mean).square().mean();
      float rs = 1.0f / std::sqrt(var + kEps);
      rstd.data()[r] = rs;
      XH.row(r) = (X.row(r).array() - mean) * rs;
      Y.row(r) = XH.row(r).cwiseProduct(gamma) + beta;
    }
    s->t = {xhat, rstd};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (s->t.size() != 2) return Status::Internal("layernorm: backward without forward");
    const Tensor& xhat = s->t[0];
    const int64_t n = xhat.dim(0);
    if (dy.numel() != n * h_) return Status::InvalidArgument("layernorm: gradient shape does not match the output");
    std::vector<int64_t> shape = dy.shape();
    *dx = AllocateTensor(shape, Device::kCpu);
    auto XH = Mat(xhat, n, h_);
    auto DY = Mat(dy, n, h_);
    auto DX = Mat(*dx, n, h_);
    Eigen::Map<const Eigen::RowVectorXf> gamma(g_.value.data(), h_);
    Eigen::RowVectorXf g(h_);
    for (int64_t r = 0; r < n; ++r) {
      g = DY.row(r).cwiseProduct(gamma);
      float m1 = g.mean(), m2 = g.cwiseProduct(XH.row(r)).mean();
      DX.row(r) = s->t[1].data()[r] * (g.array() - m1 - XH.row(r).array() * m2);
    }
    s->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* s) override {
    if (s->t.size() != 3) return Status::Internal("layernorm: backward-weight before backward-input");
    const int64_t n = s->t[0].dim(0);
    auto XH = Mat(s->t[0], n, h_);
    auto DY = Mat(s->t[2], n, h_);
    Eigen::Map<Eigen::RowVectorXf>(g_.grad.data(), h_) += DY.cwiseProduct(XH).colwise().sum();
    Eigen::Map<Eigen::RowVectorXf>(b_.grad.data(), h_) += DY.colwise().sum();
    s->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return {&g_, &b_}; }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  static constexpr float kEps = 1e-5f;
  std::vector<int64_t> shape_;
  int64_t h_;
  Param g_, b_;
};

// -------------------------------------------------------------- embedding
// Token ids (floats) [b, s] -> [b, s, h]; vocabulary-parallel over TP ranks:
// rank r holds rows [r V/t, (r+1) V/t) and the sum over ranks is all-reduced.
class Embedding final : public LayerKernel {
 public:
  Embedding(std::string name, int64_t seq, int64_t vocab, int64_t hidden, int64_t positions, const KernelOptions& o)
      : seq_(seq), vocab_(vocab), h_(hidden), local_(vocab / o.tp_size), start_(o.tp_rank * (vocab / o.tp_size)),
        use_pos_(positions > 0 && o.tp_rank == 0), group_(o.tp_group), w_(MakeParam(name + ".word", {local_, hidden})) {
    w_.value = EmbeddingRows(vocab, hidden, o.seed, start_, local_);
    w_.tp_sharded = o.tp_size > 1;
    if (positions > 0) {
      p_ = MakeParam(name + ".position", {positions, hidden});
      FillUniform(&p_.value, o.seed + 17, 0.02f * std::sqrt(3.0f));
      p_.tp_sharded = o.tp_size > 1;  // used (and its gradient non-zero) on TP rank 0 only
    }
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("embedding", x, {seq_}, &b));
    *y = Tensor::Zeros({b, seq_, h_});
    auto Y = Mat(*y, b * seq_, h_);
    auto W = Mat(w_.value, local_, h_);
    for (int64_t r = 0; r < b * seq_; ++r) {
      float tf = x.data()[r];
      int64_t tok = static_cast<int64_t>(tf);
      if (!(tf >= 0) || tok >= vocab_) return Status::InvalidArgument(fmt::format("embedding: token id {} outside [0, {})", tf, vocab_));
      if (tok >= start_ && tok < start_ + local_) Y.row(r) = W.row(tok - start_);
      if (use_pos_) Y.row(r) += Mat(p_.value, p_.value.dim(0), h_).row(r % seq_);
    }
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(y->data(), y->numel()));
    s->t = {x};
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
    const Tensor& x = s->t[0];
    const int64_t rows = x.numel();
    auto DY = Mat(s->t[1], rows, h_);
    auto GW = Mat(w_.grad, local_, h_);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t tok = static_cast<int64_t>(x.data()[r]);
      if (tok >= start_ && tok < start_ + local_) GW.row(tok - start_) += DY.row(r);
      if (use_pos_) Mat(p_.grad, p_.grad.dim(0), h_).row(r % seq_) += DY.row(r);
    }
    s->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    if (p_.value.empty()) return {&w_};
    return {&w_, &p_};
  }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  int64_t seq_, vocab_, h_, local_, start_;
  bool use_pos_;
  TpGroup* group_;
  Param w_, p_;
};

// -------------------------------------------------------------- attention
// Multi-head causal self-attention on [b, s, h], heads split over TP ranks:
// QKV column-parallel (3 h / t outputs), output projection row-parallel.
class Attention final : public LayerKernel {
 public:
  Attention(std::string name, int64_t seq, int64_t hidden, int64_t heads, const KernelOptions& o)
      : s_(seq), h_(hidden), nl_(heads / o.tp_size), d_(hidden / heads), hl_(nl_ * d_), causal_(o.causal), group_(o.tp_group),
        qkv_(name + ".qkv", hidden, 3 * nl_ * d_, true, seq, o.seed * 31 + 1, QkvShard(hidden, heads, o)),
        out_(name + ".out", nl_ * d_, hidden, o.tp_rank == 0, seq, o.seed * 31 + 2,
             AttnOutShard(hidden, heads, o)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("attention", x, {s_, h_}, &b));
    sv->children.assign(2, Saved{});
    Tensor qkv;
    PLANNER_RETURN_IF_ERROR(qkv_.Forward(x, &qkv, &sv->children[0]));
    Tensor probs = AllocateTensor({b, nl_, s_, s_}, Device::kCpu), o = AllocateTensor({b, s_, hl_}, Device::kCpu);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    const int64_t ld = 3 * hl_;
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* base = qkv.data() + bi * s_ * ld;
      for (int64_t j = 0; j < nl_; ++j) {
        CStrided Q(base + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        CStrided K(base + hl_ + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        CStrided V(base + 2 * hl_ + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        MapRM P(probs.data() + (bi * nl_ + j) * s_ * s_, s_, s_);
        P.noalias() = (Q * K.transpose()) * scale;
        for (int64_t r = 0; r < s_; ++r) {
          int64_t valid = causal_ ? r + 1 : s_;
          float mx = P.row(r).head(valid).maxCoeff();
          P.row(r).head(valid) = (P.row(r).head(valid).array() - mx).exp();
          P.row(r).head(valid) /= P.row(r).head(valid).sum();
          if (valid < s_) P.row(r).tail(s_ - valid).setZero();
        }
        Strided O(o.data() + bi * s_ * hl_ + j * d_, s_, d_, Eigen::OuterStride<>(hl_));
        O.noalias() = P * V;
      }
    }
    PLANNER_RETURN_IF_ERROR(out_.Forward(o, y, &sv->children[1]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(y->data(), y->numel()));
    sv->t = {qkv, probs};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2 || sv->children.size() != 2) return Status::Internal("attention: backward without forward");
    const Tensor& qkv = sv->t[0];
    const Tensor& probs = sv->t[1];
    const int64_t b = qkv.dim(0);
    Tensor dout;
    PLANNER_RETURN_IF_ERROR(out_.BackwardInput(dy, &dout, &sv->children[1]));
    Tensor dqkv = AllocateTensor(qkv.shape(), Device::kCpu);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    const int64_t ld = 3 * hl_;
    RM dP(s_, s_);
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* base = qkv.data() + bi * s_ * ld;
      float* dbase = dqkv.data() + bi * s_ * ld;
      for (int64_t j = 0; j < nl_; ++j) {
        CStrided Q(base + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        CStrided K(base + hl_ + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        CStrided V(base + 2 * hl_ + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        CMapRM P(probs.data() + (bi * nl_ + j) * s_ * s_, s_, s_);
        CStrided dO(dout.data() + bi * s_ * hl_ + j * d_, s_, d_, Eigen::OuterStride<>(hl_));
        Strided dQ(dbase + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        Strided dK(dbase + hl_ + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        Strided dV(dbase + 2 * hl_ + j * d_, s_, d_, Eigen::OuterStride<>(ld));
        dV.noalias() = P.transpose() * dO;
        dP.noalias() = dO * V.transpose();
        // Softmax backward: dS = P o (dP - rowsum(dP o P)), then the 1/sqrt(d) scale.
        Eigen::VectorXf dot = (dP.cwiseProduct(P)).rowwise().sum();
        dP = (P.array() * (dP.colwise() - dot).array()) * scale;
        dQ.noalias() = dP * K;
        dK.noalias() = dP.transpose() * Q;
      }
    }
    PLANNER_RETURN_IF_ERROR(qkv_.BackwardInput(dqkv, dx, &sv->children[0]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(dx->data(), dx->numel()));
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
  int64_t s_, h_, nl_, d_, hl_;
  bool causal_;
  TpGroup* group_;
  Linear qkv_, out_;
};

// -------------------------------------------------------------------- mlp
// fc1 (column-parallel, ffn / t) -> GeLU -> fc2 (row-parallel).
class Mlp final : public LayerKernel {
 public:
  Mlp(std::string name, int64_t seq, int64_t hidden, int64_t ffn, const KernelOptions& o)
      : s_(seq), h_(hidden), group_(o.tp_group),
        fc1_(name + ".fc1", hidden, ffn / o.tp_size, true, seq, o.seed * 37 + 1,
             Fc1Shard(hidden, ffn, o)),
        act_(Elementwise::kGelu, {seq, ffn / o.tp_size}, 0, 0),
        fc2_(name + ".fc2", ffn / o.tp_size, hidden, o.tp_rank == 0, seq, o.seed * 37 + 2,
             Fc2Shard(hidden, ffn, o)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("mlp", x, {s_, h_}, &b));
    sv->children.assign(3, Saved{});
    Tensor a, g;
    PLANNER_RETURN_IF_ERROR(fc1_.Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(act_.Forward(a, &g, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(fc2_.Forward(g, y, &sv->children[2]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(y->data(), y->numel()));
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 3) return Status::Internal("mlp: backward without forward");
    Tensor dg, da;
    PLANNER_RETURN_IF_ERROR(fc2_.BackwardInput(dy, &dg, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(act_.BackwardInput(dg, &da, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(fc1_.BackwardInput(da, dx, &sv->children[0]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(dx->data(), dx->numel()));
    return Status::OK();
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
  int64_t s_, h_;
  TpGroup* group_;
  Linear fc1_;
  Elementwise act_;
  Linear fc2_;
};

// ------------------------------------------------------- transformer block
// Pre-LN GPT block: y = r + mlp(ln2(r)), r = x + attn(ln1(x)).
class TransformerBlock final : public LayerKernel {
 public:
  TransformerBlock(std::string name, int64_t seq, int64_t hidden, int64_t heads, int64_t ffn, const KernelOptions& o)
      : s_(seq), h_(hidden), ln1_(name + ".ln1", {seq, hidden}), attn_(name + ".attn", seq, hidden, heads, o),
        ln2_(name + ".ln2", {seq, hidden}), mlp_(name + ".mlp", seq, hidden, ffn, o) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("transformer_block", x, {s_, h_}, &b));
    sv->children.assign(4, Saved{});
    Tensor a, u, c, v;
    PLANNER_RETURN_IF_ERROR(ln1_.Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(attn_.Forward(a, &u, &sv->children[1]));
    Tensor r = AllocateTensor(x.shape(), Device::kCpu);
    Mat(r, 1, r.numel()) = Mat(x, 1, x.numel()) + Mat(u, 1, u.numel());
    PLANNER_RETURN_IF_ERROR(ln2_.Forward(r, &c, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(mlp_.Forward(c, &v, &sv->children[3]));
    *y = AllocateTensor(x.shape(), Device::kCpu);
    Mat(*y, 1, y->numel()) = Mat(r, 1, r.numel()) + Mat(v, 1, v.numel());
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward without forward");
    Tensor dc, dr, da, dxa;
    PLANNER_RETURN_IF_ERROR(mlp_.BackwardInput(dy, &dc, &sv->children[3]));
    PLANNER_RETURN_IF_ERROR(ln2_.BackwardInput(dc, &dr, &sv->children[2]));
    Mat(dr, 1, dr.numel()) += Mat(dy, 1, dy.numel());
    PLANNER_RETURN_IF_ERROR(attn_.BackwardInput(dr, &da, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln1_.BackwardInput(da, &dxa, &sv->children[0]));
    Mat(dxa, 1, dxa.numel()) += Mat(dr, 1, dr.numel());
    *dx = dxa;
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(ln1_.BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(attn_.BackwardWeight(&sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln2_.BackwardWeight(&sv->children[2]));
    PLANNER_RETURN_IF_ERROR(mlp_.BackwardWeight(&sv->children[3]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({&ln1_, &attn_, &ln2_, &mlp_}); }
  KernelFlops Flops(int64_t b) const override { return SumFlops({&attn_, &mlp_}, b); }

 private:
  int64_t s_, h_;
  LayerNorm ln1_;
  Attention attn_;
  LayerNorm ln2_;
  Mlp mlp_;
};

// ------------------------------------------------------------------- loss
// Softmax cross-entropy over the last dimension (vocabulary-parallel: each
// rank holds V / t logits of every row; max, sum and the target logit are
// all-reduced). Output [b, 1]: each sample's mean loss over its rows.
class Loss final : public LayerKernel {
 public:
  Loss(std::vector<int64_t> shape, const KernelOptions& o)
      : shape_(std::move(shape)), v_(shape_.back()), rows_(Product(shape_) / v_), start_(o.tp_rank * v_), group_(o.tp_group) {}
  void SetTargets(const Tensor& targets) override { targets_ = targets; }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("loss", x, shape_, &b));
    const int64_t n = b * rows_;
    if (targets_.numel() != n) {
      return Status::InvalidArgument(fmt::format("loss: {} targets for {} rows; set one class id per row", targets_.numel(), n));
    }
    auto X = Mat(x, n, v_);
    Tensor probs = AllocateTensor({n, v_}, Device::kCpu);
    auto P = Mat(probs, n, v_);
    std::vector<float> mx(static_cast<size_t>(n)), sum(static_cast<size_t>(n)), tl(static_cast<size_t>(n), 0.0f);
    for (int64_t r = 0; r < n; ++r) mx[static_cast<size_t>(r)] = X.row(r).maxCoeff();
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceMax(mx.data(), n));
    for (int64_t r = 0; r < n; ++r) {
      P.row(r) = (X.row(r).array() - mx[static_cast<size_t>(r)]).exp();
      sum[static_cast<size_t>(r)] = P.row(r).sum();
      int64_t t = static_cast<int64_t>(targets_.data()[r]) - start_;
      if (t >= 0 && t < v_) tl[static_cast<size_t>(r)] = X(r, t);
    }
    if (group_) {
      PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(sum.data(), n));
      PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(tl.data(), n));
    }
    *y = Tensor::Zeros({b, 1});
    for (int64_t r = 0; r < n; ++r) {
      size_t ru = static_cast<size_t>(r);
      P.row(r) /= sum[ru];
      y->data()[r / rows_] += (std::log(sum[ru]) + mx[ru] - tl[ru]) / static_cast<float>(rows_);
    }
    sv->t = {probs, targets_};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("loss: backward without forward");
    const Tensor& probs = sv->t[0];
    const int64_t n = probs.dim(0), b = n / rows_;
    if (dy.numel() != b) return Status::InvalidArgument("loss: the gradient needs one value per sample");
    *dx = AllocateTensor(WithBatch(b, shape_), Device::kCpu);
    auto DX = Mat(*dx, n, v_);
    DX = Mat(probs, n, v_);
    for (int64_t r = 0; r < n; ++r) {
      int64_t t = static_cast<int64_t>(sv->t[1].data()[r]) - start_;
      if (t >= 0 && t < v_) DX(r, t) -= 1.0f;
      DX.row(r) *= dy.data()[r / rows_] / static_cast<float>(rows_);
    }
    sv->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  std::vector<int64_t> shape_;
  int64_t v_, rows_, start_;
  TpGroup* group_;
  Tensor targets_;
};

// ----------------------------------------------------------------- conv2d
class Conv2d final : public LayerKernel {
 public:
  Conv2d(std::string name, std::vector<int64_t> in, int64_t cout, int64_t k, int64_t stride, int64_t pad, bool bias, uint64_t seed)
      : in_(std::move(in)), cout_(cout), k_(k), st_(stride), pad_(pad),
        ho_((in_[1] + 2 * pad - k) / stride + 1), wo_((in_[2] + 2 * pad - k) / stride + 1), ckk_(in_[0] * k * k),
        w_(MakeParam(name + ".weight", {cout, in_[0], k, k})) {
    FillUniform(&w_.value, seed, 1.0f / std::sqrt(static_cast<float>(ckk_)));
    if (bias) b_ = MakeParam(name + ".bias", {cout});
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("conv2d", x, in_, &b));
    const int64_t hw = ho_ * wo_;
    Tensor cols = AllocateTensor({b, ckk_, hw}, Device::kCpu);
    *y = AllocateTensor({b, cout_, ho_, wo_}, Device::kCpu);
    for (int64_t bi = 0; bi < b; ++bi) {
      Im2Col(x.data() + bi * Product(in_), cols.data() + bi * ckk_ * hw);
      MapRM Y(y->data() + bi * cout_ * hw, cout_, hw);
      Y.noalias() = Mat(w_.value, cout_, ckk_) * CMapRM(cols.data() + bi * ckk_ * hw, ckk_, hw);
      if (!b_.value.empty()) Y.colwise() += Eigen::Map<const Eigen::VectorXf>(b_.value.data(), cout_);
    }
    sv->t = {cols};
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 1) return Status::Internal("conv2d: backward without forward");
    const int64_t b = sv->t[0].dim(0), hw = ho_ * wo_;
    if (dy.numel() != b * cout_ * hw) return Status::InvalidArgument("conv2d: gradient shape does not match the output");
    *dx = Tensor::Zeros(WithBatch(b, in_));
    RM dcol(ckk_, hw);
    for (int64_t bi = 0; bi < b; ++bi) {
      dcol.noalias() = Mat(w_.value, cout_, ckk_).transpose() * CMapRM(dy.data() + bi * cout_ * hw, cout_, hw);
      Col2Im(dcol.data(), dx->data() + bi * Product(in_));
    }
    sv->t.push_back(dy);
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("conv2d: backward-weight before backward-input");
    const int64_t b = sv->t[0].dim(0), hw = ho_ * wo_;
    auto GW = Mat(w_.grad, cout_, ckk_);
    for (int64_t bi = 0; bi < b; ++bi) {
      CMapRM DY(sv->t[1].data() + bi * cout_ * hw, cout_, hw);
      GW.noalias() += DY * CMapRM(sv->t[0].data() + bi * ckk_ * hw, ckk_, hw).transpose();
      if (!b_.value.empty()) Eigen::Map<Eigen::VectorXf>(b_.grad.data(), cout_) += DY.rowwise().sum();
    }
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    if (b_.value.empty()) return {&w_};
    return {&w_, &b_};
  }
  KernelFlops Flops(int64_t b) const override {
    double f = 2.0 * static_cast<double>(b) * static_cast<double>(cout_) * static_cast<double>(ckk_) * static_cast<double>(ho_ * wo_);
    return {f, f, f};
  }

 private:
  void Im2Col(const float* x, float* col) const {
    const int64_t H = in_[1], W = in_[2], hw = ho_ * wo_;
    for (int64_t c = 0; c < in_[0]; ++c)
      for (int64_t ki = 0; ki < k_; ++ki)
        for (int64_t kj = 0; kj < k_; ++kj) {
          float* row = col + ((c * k_ + ki) * k_ + kj) * hw;
          for (int64_t oi = 0; oi < ho_; ++oi) {
            int64_t ii = oi * st_ - pad_ + ki;
            for (int64_t oj = 0; oj < wo_; ++oj) {
              int64_t jj = oj * st_ - pad_ + kj;
              row[oi * wo_ + oj] = (ii >= 0 && ii < H && jj >= 0 && jj < W) ? x[(c * H + ii) * W + jj] : 0.0f;
            }
          }
        }
  }
  void Col2Im(const float* col, float* dx) const {
    const int64_t H = in_[1], W = in_[2], hw = ho_ * wo_;
    for (int64_t c = 0; c < in_[0]; ++c)
      for (int64_t ki = 0; ki < k_; ++ki)
        for (int64_t kj = 0; kj < k_; ++kj) {
          const float* row = col + ((c * k_ + ki) * k_ + kj) * hw;
          for (int64_t oi = 0; oi < ho_; ++oi) {
            int64_t ii = oi * st_ - pad_ + ki;
            if (ii < 0 || ii >= H) continue;
            for (int64_t oj = 0; oj < wo_; ++oj) {
              int64_t jj = oj * st_ - pad_ + kj;
              if (jj >= 0 && jj < W) dx[(c * H + ii) * W + jj] += row[oi * wo_ + oj];
            }
          }
        }
  }
  std::vector<int64_t> in_;
  int64_t cout_, k_, st_, pad_, ho_, wo_, ckk_;
  Param w_, b_;
};

// ------------------------------------------------------------------ pools
class Pool final : public LayerKernel {
 public:
  Pool(bool max, std::vector<int64_t> in, int64_t k, int64_t stride, int64_t pad)
      : max_(max), in_(std::move(in)), k_(k), st_(stride), pad_(pad),
        ho_((in_[1] + 2 * pad - k) / stride + 1), wo_((in_[2] + 2 * pad - k) / stride + 1) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput(max_ ? "maxpool" : "avgpool", x, in_, &b));
    const int64_t C = in_[0], H = in_[1], W = in_[2];
    *y = AllocateTensor({b, C, ho_, wo_}, Device::kCpu);
    Tensor arg = max_ ? AllocateTensor({b, C, ho_, wo_}, Device::kCpu) : Tensor();
    for (int64_t bc = 0; bc < b * C; ++bc) {
      const float* xi = x.data() + bc * H * W;
      for (int64_t oi = 0; oi < ho_; ++oi)
        for (int64_t oj = 0; oj < wo_; ++oj) {
          float best = -std::numeric_limits<float>::infinity(), acc = 0;
          int64_t where = -1;
          for (int64_t ki = 0; ki < k_; ++ki)
            for (int64_t kj = 0; kj < k_; ++kj) {
              int64_t ii = oi * st_ - pad_ + ki, jj = oj * st_ - pad_ + kj;
              if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
              float v = xi[ii * W + jj];
              acc += v;
              if (v > best) {
                best = v;
                where = ii * W + jj;
              }
            }
          int64_t o = (bc * ho_ + oi) * wo_ + oj;
          if (max_) {
            y->data()[o] = where >= 0 ? best : 0.0f;
            arg.data()[o] = static_cast<float>(where);
          } else {
            y->data()[o] = acc / static_cast<float>(k_ * k_);  // padding counts (count_include_pad)
          }
        }
    }
    sv->t = {arg};
    sv->t.push_back(Tensor::Zeros({b}));  // remembers b
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 2) return Status::Internal("pool: backward without forward");
    const int64_t b = sv->t[1].dim(0), C = in_[0], H = in_[1], W = in_[2];
    if (dy.numel() != b * C * ho_ * wo_) return Status::InvalidArgument("pool: gradient shape does not match the output");
    *dx = Tensor::Zeros(WithBatch(b, in_));
    for (int64_t bc = 0; bc < b * C; ++bc) {
      float* d = dx->data() + bc * H * W;
      for (int64_t oi = 0; oi < ho_; ++oi)
        for (int64_t oj = 0; oj < wo_; ++oj) {
          int64_t o = (bc * ho_ + oi) * wo_ + oj;
          if (max_) {
            int64_t where = static_cast<int64_t>(sv->t[0].data()[o]);
            if (where >= 0) d[where] += dy.data()[o];
            continue;
          }
          float g = dy.data()[o] / static_cast<float>(k_ * k_);
          for (int64_t ki = 0; ki < k_; ++ki)
            for (int64_t kj = 0; kj < k_; ++kj) {
              int64_t ii = oi * st_ - pad_ + ki, jj = oj * st_ - pad_ + kj;
              if (ii >= 0 && ii < H && jj >= 0 && jj < W) d[ii * W + jj] += g;
            }
        }
    }
    sv->Clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved*) override { return Status::OK(); }
  KernelFlops Flops(int64_t) const override { return {}; }

 private:
  bool max_;
  std::vector<int64_t> in_;
  int64_t k_, st_, pad_, ho_, wo_;
};

class Flatten final : public LayerKernel {
 public:
  explicit Flatten(std::vector<int64_t> in) : in_(std::move(in)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    int64_t b = 0;
    PLANNER_RETURN_IF_ERROR(CheckInput("flatten", x, in_, &b));
    *y = x.Reshaped({b, Product(in_)});
    sv->t = {Tensor::Zeros({b})};
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
  std::vector<int64_t> in_;
};

}  // namespace

void SetCpuThreads(int threads) {
  g_threads = std::max(1, threads);
  Eigen::setNbThreads(g_threads);
}
int CpuThreads() { return g_threads; }

void FillUniform(Tensor* t, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    double u = static_cast<double>(SplitMix(seed * 0x9E3779B97F4A7C15ull + i) >> 11) * 0x1.0p-53;
    v[i] = static_cast<float>((2 * u - 1) * scale);
  }
  if (t->device() == Device::kCpu) std::memcpy(t->data(), v.data(), v.size() * 4);
  else *t = Tensor::FromVector(t->shape(), v);  // CUDA kernels copy parameters in themselves
}

void LayerKernel::ZeroGrads() {
  for (Param* p : Params()) {
    if (p->grad.device() == Device::kCpu) std::memset(p->grad.data(), 0, static_cast<size_t>(p->grad.numel()) * 4);
    else CudaMemset(p->grad.data(), 0, p->grad.numel() * 4);
  }
}

Status MakeCpuKernel(const Layer& l, const KernelOptions& o, std::unique_ptr<LayerKernel>* out) {
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
    *out = std::make_unique<Linear>(l.name, in.back(), l.out_shape.back(), a.Bool("bias", true), tokens, o.seed);
  } else if (ty == "relu" || ty == "gelu" || ty == "dropout") {
    auto kind = ty == "relu" ? Elementwise::kRelu : (ty == "gelu" ? Elementwise::kGelu : Elementwise::kDropout);
    *out = std::make_unique<Elementwise>(kind, in, a.probability, o.seed);
  } else if (ty == "layernorm") {
    *out = std::make_unique<LayerNorm>(l.name, in);
  } else if (ty == "embedding") {
    int64_t vocab = a.Int("vocab", 0);
    PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
    *out = std::make_unique<Embedding>(l.name, in[0], vocab, a.Int("hidden", 0), a.Int("positions", 0), o);
  } else if (ty == "attention" || ty == "mlp" || ty == "transformer_block") {
    int64_t heads = a.Int("heads", 1), ffn = a.Int("ffn", 4 * in[1]);
    if (ty != "mlp") PLANNER_RETURN_IF_ERROR(divides(heads, "heads"));
    if (ty != "attention") PLANNER_RETURN_IF_ERROR(divides(ffn, "ffn"));
    if (ty == "attention") *out = std::make_unique<Attention>(l.name, in[0], in[1], heads, o);
    else if (ty == "mlp") *out = std::make_unique<Mlp>(l.name, in[0], in[1], ffn, o);
    else *out = std::make_unique<TransformerBlock>(l.name, in[0], in[1], heads, ffn, o);
  } else if (ty == "lm_head") {
    int64_t vocab = a.Int("vocab", 0);
    PLANNER_RETURN_IF_ERROR(divides(vocab, "vocab"));
    // Logits [b, s, V / t] = x W^T (vocabulary-parallel, no bias).
    *out = std::make_unique<VocabParallelHead>(
        std::make_unique<Linear>(l.name, in[1], vocab / t, false, in[0], o.seed * 41 + 1, VocabShard(in[1], vocab, o)), o.tp_group);
  } else if (ty == "loss") {
    std::vector<int64_t> shard = in;
    PLANNER_RETURN_IF_ERROR(divides(in.back(), "classes"));
    shard.back() /= t;
    *out = std::make_unique<Loss>(shard, o);
  } else if (ty == "conv2d") {
    *out = std::make_unique<Conv2d>(l.name, in, l.out_shape[0], a.Int("kernel", 3), a.Int("stride", 1), a.Int("padding", 0),
                                    a.Bool("bias", true), o.seed);
  } else if (ty == "maxpool" || ty == "avgpool") {
    int64_t k = a.Int("kernel", 2);
    *out = std::make_unique<Pool>(ty == "maxpool", in, k, a.Int("stride", k), a.Int("padding", 0));
  } else if (ty == "flatten") {
    *out = std::make_unique<Flatten>(in);
  } else {
    return Status::NotSupported(fmt::format("layer '{}': no CPU kernel for type '{}'", l.name, ty));
  }
  return Status::OK();
}

}  // namespace planner
