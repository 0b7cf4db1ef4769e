// The transformer layers' kernels: GQA attention and multi-head latent attention (MLA), the dense
// MLP and the pre-norm transformer block (whose feed-forward is the MLP or layers_moe.cc's MoE).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/layers_internal.h"
#include "spec/layer_catalog.h"

namespace planner::kernels_internal {

namespace {

// ----------------------------------------------------- multi-head latent attention
// DeepSeek-V2/V3's MLA (HF modeling_deepseek_v3), causal, on [b, s, h]. q = (q_lora > 0 ? RMSNorm(x W_qa) W_qb
// : x W_q), per head [nope | rope]; kv_a = x W_kva = [c (kv_lora) | k_pe (rope)]; kv = RMSNorm(c) W_kvb, per head
// [k_nope | v]; RoPE (rotate-half) on q's rope part of every head and on k_pe, shared by the heads; K per head
// = [k_nope | k_pe]; softmax(Q K^T / sqrt(nope + rope)) V; out = concat(heads) W_o. No biases (DeepSeek-V3).
// TP (Megatron-Core): heads split (W_qb or W_q, W_kvb column-parallel by heads, W_o row-parallel); the down
// projections W_qa, W_kva and their norms replicated, their input gradients (partial over the ranks' heads)
// all-reduced before their backward, so their weight gradients are equal on every TP rank.
class Mla final : public LayerKernel {
 public:
  Mla(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, int64_t heads, double theta,
      const MlaDims& m, const KernelOptions& o)
      : ops_(ops),
        s_(seq),
        h_(hidden),
        hl_(heads / o.tp_size),
        m_(m),
        dq_(m.nope + m.rope),
        theta_(theta),
        causal_(o.causal),
        group_(o.tp_group),
        kva_(ops, name + ".kv_a", hidden, m.kv_lora + m.rope, false, seq, o.seed * 43 + 3),
        kvnorm_(MakeNorm(ops, name + ".kv_norm", {seq, m.kv_lora}, true)),
        kvb_(ops, name + ".kv_b", m.kv_lora, hl_ * (m.nope + m.v), false, seq, o.seed * 43 + 4,
             HeadRows(m.kv_lora, heads, m.nope + m.v, o)),
        out_(ops, name + ".out", hl_ * m.v, hidden, false, seq, o.seed * 43 + 5, HeadCols(hidden, heads, m.v, o)) {
    if (m.q_lora > 0) {
      qa_ = std::make_unique<Linear>(ops, name + ".q_a", hidden, m.q_lora, false, seq, o.seed * 43 + 1);
      qnorm_ = MakeNorm(ops, name + ".q_norm", {seq, m.q_lora}, true);
      q_ = std::make_unique<Linear>(ops, name + ".q_b", m.q_lora, hl_ * dq_, false, seq, o.seed * 43 + 2,
                                    HeadRows(m.q_lora, heads, dq_, o));
    } else {
      q_ = std::make_unique<Linear>(ops, name + ".q", hidden, hl_ * dq_, false, seq, o.seed * 43 + 2,
                                    HeadRows(hidden, heads, dq_, o));
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
    PLANNER_RETURN_IF_ERROR(kvnorm_->Forward(c, &cn, &sv->children[4]));
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
    LayerKernel* parts[7] = {qa_.get(), qnorm_.get(), q_.get(), &kva_, kvnorm_.get(), &kvb_, &out_};
    for (int i = 0; i < 7; ++i) {
      if (parts[i]) PLANNER_RETURN_IF_ERROR(parts[i]->BackwardWeight(&sv->children[static_cast<size_t>(i)]));
    }
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    if (qa_) return JoinParams({qa_.get(), qnorm_.get(), q_.get(), &kva_, kvnorm_.get(), &kvb_, &out_});
    return JoinParams({q_.get(), &kva_, kvnorm_.get(), &kvb_, &out_});
  }
  KernelFlops Flops(int64_t b) const override {
    KernelFlops a = SumFlops({q_.get(), &kva_, &kvb_, &out_}, b);
    if (qa_) {
      KernelFlops f = qa_->Flops(b);
      a.forward += f.forward, a.backward_input += f.backward_input, a.backward_weight += f.backward_weight;
    }
    const double ss =
        static_cast<double>(b) * static_cast<double>(s_) * static_cast<double>(s_) * static_cast<double>(hl_);
    const double core = 2.0 * ss * static_cast<double>(dq_ + m_.v);  // Q K^T and P V
    return {a.forward + core, a.backward_input + 2 * core, a.backward_weight};
  }

 private:
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(dq_)); }
  // Per-head GEMM batched over the local heads: operand i's head j starts j * stride in.
  GemmArgs Heads(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t sa, int64_t ldb, int64_t sb,
                 int64_t ldc, int64_t sc, float alpha = 1.0f) const {
    GemmArgs g;
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.alpha = alpha;
    g.batch = hl_, g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
    return g;
  }
  Status RotateQ(Tensor* q, int64_t n, bool inverse) {
    for (int64_t hd = 0; hd < hl_; ++hd) {
      PLANNER_RETURN_IF_ERROR(
          ops_->Rope(q->data() + hd * dq_ + m_.nope, n, hl_ * dq_, s_, 0, 1, m_.rope, theta_, inverse));
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
    PLANNER_RETURN_IF_ERROR(kvnorm_->BackwardInput(dcn_full, &dc, &sv->children[4]));
    PLANNER_RETURN_IF_ERROR(ops_->Rope(g.data() + kr, n, lda, s_, 0, 1, m_.rope, theta_, true));
    CopyCols(dc.data(), kr, 0, dkva.data(), lda, 0, kr, n);
    CopyCols(g.data(), lda, kr, dkva.data(), lda, kr, m_.rope, n);
    return kva_.BackwardInput(dkva, dx, &sv->children[3]);
  }
  Status CoreForward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor* probs, Tensor* o, int64_t b) {
    const int64_t ss = s_ * s_, lq = hl_ * dq_, lv = hl_ * m_.v;
    for (int64_t bi = 0; bi < b; ++bi) {
      float* p = probs->data() + bi * hl_ * ss;
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(false, true, s_, s_, dq_, lq, dq_, lq, dq_, s_, ss, Scale()),
                                         q.data() + bi * s_ * lq, k.data() + bi * s_ * lq, p));  // S = Q K^T / sqrt(dq)
      PLANNER_RETURN_IF_ERROR(ops_->SoftmaxRows(p, hl_ * s_, s_, causal_));
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(false, false, s_, m_.v, s_, s_, ss, lv, m_.v, lv, m_.v), p,
                                         v.data() + bi * s_ * lv,
                                         o->data() + bi * s_ * lv));  // O = P V
    }
    return Status::OK();
  }
  Status CoreBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs, const Tensor& dout,
                      Tensor* dq, Tensor* dk, Tensor* dv, int64_t b) {
    const int64_t ss = s_ * s_, lq = hl_ * dq_, lv = hl_ * m_.v;
    Tensor dp = ops_->Scratch({hl_, ss});
    for (int64_t bi = 0; bi < b; ++bi) {
      const float* p = probs.data() + bi * hl_ * ss;
      const float* dob = dout.data() + bi * s_ * lv;
      const float *qb = q.data() + bi * s_ * lq, *kb = k.data() + bi * s_ * lq, *vb = v.data() + bi * s_ * lv;
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(true, false, s_, m_.v, s_, s_, ss, lv, m_.v, lv, m_.v), p, dob,
                                         dv->data() + bi * s_ * lv));  // dV = P^T dO
      PLANNER_RETURN_IF_ERROR(
          ops_->Gemm(Heads(false, true, s_, s_, m_.v, lv, m_.v, lv, m_.v, s_, ss), dob, vb, dp.data()));  // dP = dO V^T
      PLANNER_RETURN_IF_ERROR(ops_->SoftmaxBackwardRows(p, dp.data(), hl_ * s_, s_, Scale()));
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(false, false, s_, dq_, s_, s_, ss, lq, dq_, lq, dq_), dp.data(), kb,
                                         dq->data() + bi * s_ * lq));  // dQ = dS K
      PLANNER_RETURN_IF_ERROR(ops_->Gemm(Heads(true, false, s_, dq_, s_, s_, ss, lq, dq_, lq, dq_), dp.data(), qb,
                                         dk->data() + bi * s_ * lq));  // dK = dS^T Q
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
  std::unique_ptr<LayerKernel> kvnorm_;  // MakeNorm: RMSNorm
  Linear kvb_, out_;
};

// -------------------------------------------------------------- attention
// Causal self-attention on [b, s, h] with grouped-query heads (kv_heads = heads: multi-head; 1:
// multi-query), split over TP ranks: QKV column-parallel (each rank its heads / t query heads and
// kv_heads / t KV groups), output projection row-parallel. QKV rows: [Q (nl d) | K (kvl d) | V (kvl d)];
// local query head j = g G + i uses KV group g (G = heads / kv_heads). Per sample, for each i < G one
// GEMM batched over the groups: S = Q K^T / sqrt(d), P = softmax(S), O = P V. RoPE rotates Q and K
// in place before the scores, and their gradients back after.
class Attention final : public LayerKernel {
 public:
  Attention(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c,
            const KernelOptions& o)
      : ops_(ops),
        s_(seq),
        h_(hidden),
        nl_(c.heads / o.tp_size),
        kvl_(c.kv_heads / o.tp_size),
        grp_(c.heads / c.kv_heads),
        d_(hidden / c.heads),
        hl_(nl_ * d_),
        kvc_(kvl_ * d_),
        ld_(hl_ + 2 * kvc_),
        rope_(c.rope),
        theta_(c.rope_theta),
        causal_(o.causal),
        group_(o.tp_group),
        qkv_(ops, name + ".qkv", hidden, ld_, c.bias, seq, o.seed * 31 + 1, QkvShard(hidden, c.heads, c.kv_heads, o)),
        out_(ops, name + ".out", hl_, hidden, c.bias && o.tp_rank == 0, seq, o.seed * 31 + 2,
             AttnOutShard(hidden, c.heads, o)) {}
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
        PLANNER_RETURN_IF_ERROR(
            ops_->Gemm(HeadGemm(false, true, s_, s_, d_, {ld_, grp_ * d_}, {ld_, d_}, {s_, grp_ * ss}, Scale()),
                       q + i * d_, q + hl_, p + i * ss));
      }
      PLANNER_RETURN_IF_ERROR(ops_->SoftmaxRows(p, nl_ * s_, s_, causal_));
      for (int64_t i = 0; i < grp_; ++i) {  // O = P V
        PLANNER_RETURN_IF_ERROR(
            ops_->Gemm(HeadGemm(false, false, s_, d_, s_, {s_, grp_ * ss}, {ld_, d_}, {hl_, grp_ * d_}), p + i * ss,
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
    double core =
        2.0 * static_cast<double>(b) * static_cast<double>(s_) * static_cast<double>(s_) * static_cast<double>(hl_);
    return {a.forward + 2 * core, a.backward_input + 4 * core, a.backward_weight};
  }

 private:
  struct Operand {
    int64_t ld, stride;  // row length; distance between consecutive groups' blocks
  };
  float Scale() const { return 1.0f / std::sqrt(static_cast<float>(d_)); }
  // One GEMM per local KV group (batch kvl): operand i's group g starts g * stride in.
  GemmArgs HeadGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, Operand a, Operand bb, Operand c,
                    float alpha = 1.0f, float beta = 0.0f) const {
    GemmArgs g;
    g.ta = ta, g.tb = tb, g.m = m, g.n = n, g.k = k, g.lda = a.ld, g.ldb = bb.ld, g.ldc = c.ld, g.alpha = alpha,
    g.beta = beta;
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
        PLANNER_RETURN_IF_ERROR(
            ops_->Gemm(HeadGemm(true, false, s_, d_, s_, {s_, grp_ * pp}, {hl_, grp_ * d_}, {ld_, d_}, 1.0f, acc),
                       p + i * pp, dob + i * d_, dq + hl_ + kvc_));  // dV += P^T dO
        PLANNER_RETURN_IF_ERROR(
            ops_->Gemm(HeadGemm(false, true, s_, s_, d_, {hl_, grp_ * d_}, {ld_, d_}, {s_, grp_ * ss}), dob + i * d_,
                       q + hl_ + kvc_, dp.data() + i * ss));  // dP = dO V^T
      }
      if (ss == pp) {
        PLANNER_RETURN_IF_ERROR(ops_->SoftmaxBackwardRows(p, dp.data(), nl_ * s_, s_, Scale()));
      } else {
        for (int64_t j = 0; j < nl_; ++j)
          PLANNER_RETURN_IF_ERROR(ops_->SoftmaxBackwardRows(p + j * pp, dp.data() + j * ss, s_, s_, Scale()));
      }
      for (int64_t i = 0; i < grp_; ++i) {
        const float acc = i == 0 ? 0.0f : 1.0f;
        PLANNER_RETURN_IF_ERROR(
            ops_->Gemm(HeadGemm(false, false, s_, d_, s_, {s_, grp_ * ss}, {ld_, d_}, {ld_, grp_ * d_}),
                       dp.data() + i * ss, q + hl_, dq + i * d_));  // dQ = dS K
        PLANNER_RETURN_IF_ERROR(
            ops_->Gemm(HeadGemm(true, false, s_, d_, s_, {s_, grp_ * ss}, {ld_, grp_ * d_}, {ld_, d_}, 1.0f, acc),
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
  Mlp(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c,
      const KernelOptions& o)
      : ops_(ops),
        s_(seq),
        h_(hidden),
        fl_(c.ffn / o.tp_size),
        gated_(c.gated),
        group_(o.tp_group),
        fc1_(ops, name + ".fc1", hidden, (c.gated ? 2 : 1) * fl_, c.bias, seq, o.seed * 37 + 1,
             c.gated ? GatedFc1Shard(hidden, c.ffn, o) : Fc1Shard(hidden, c.ffn, o)),
        act_(ops, c.act, {seq, fl_}, 0, 0),
        fc2_(ops, name + ".fc2", fl_, hidden, c.bias && o.tp_rank == 0, seq, o.seed * 37 + 2,
             Fc2Shard(hidden, c.ffn, o)) {}
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
// Pre-norm block (LayerNorm for GPT, RMSNorm for Llama): y = r + ffn(norm2(r)), r = x + attn(norm1(x)); attn is
// GQA attention or MLA, ffn a dense MLP (transformer_block) or the MoE feed-forward (moe_block).
class TransformerBlock final : public PreNormBlockKernel {
 public:
  TransformerBlock(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, bool rms,
                   std::unique_ptr<LayerKernel> attn, std::unique_ptr<LayerKernel> mlp)
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

}  // namespace

std::unique_ptr<LayerKernel> MakeAttention(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                           const TransformerConfig& c, const KernelOptions& o) {
  if (c.mla.kv_lora > 0) return std::make_unique<Mla>(ops, name, seq, hidden, c.heads, c.rope_theta, c.mla, o);
  return std::make_unique<Attention>(ops, name, seq, hidden, c, o);
}

std::unique_ptr<LayerKernel> MakeMlp(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                     const TransformerConfig& c, const KernelOptions& o) {
  return std::make_unique<Mlp>(ops, name, seq, hidden, c, o);
}

std::unique_ptr<LayerKernel> MakeTransformerBlock(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                                  bool rms, std::unique_ptr<LayerKernel> attn,
                                                  std::unique_ptr<LayerKernel> mlp) {
  return std::make_unique<TransformerBlock>(ops, name, seq, hidden, rms, std::move(attn), std::move(mlp));
}

Status ReadTransformerConfig(const Layer& l, int64_t t, TransformerConfig* c) {
  const LayerAttrs& a = l.attrs;
  const int64_t hidden = l.in_shape.size() == 2 ? l.in_shape[1] : 0;
  c->heads = a.Int("heads", 1);
  c->kv_heads = a.Int("kv_heads", 0) == 0 ? c->heads : a.Int("kv_heads", 0);  // absent or 0: multi-head
  c->ffn = a.Int("ffn", 4 * hidden);
  c->bias = a.Bool("bias", true);
  c->rope_theta = static_cast<double>(a.Int("rope_theta", 10000));
  const std::string act = a.String("act", "gelu"), norm = a.String("norm", "layernorm"),
                    pos = a.String("position", "learned");
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("layer '{}': {}", l.name, what));
  };
  if (hidden == 0 || c->heads < 1 || c->kv_heads < 1 || c->ffn < 1)
    return bad("needs a [sequence, hidden] input and positive heads, kv_heads, ffn");
  if (act != "gelu" && act != "swiglu" && act != "relu2")
    return bad(fmt::format("act '{}' is not gelu, swiglu or relu2", act));
  if (norm != "layernorm" && norm != "rmsnorm") return bad(fmt::format("norm '{}' is not layernorm or rmsnorm", norm));
  if (pos != "learned" && pos != "rope") return bad(fmt::format("position '{}' is not learned or rope", pos));
  c->gated = act == "swiglu";
  c->act = act == "relu2" ? Elementwise::kRelu2 : Elementwise::kGelu;
  c->rms = norm == "rmsnorm";
  c->rope = pos == "rope";
  c->mla = {a.Int("q_lora_rank", 0), a.Int("kv_lora_rank", 0), a.Int("qk_rope_head_dim", 0),
            a.Int("qk_nope_head_dim", 0), a.Int("v_head_dim", 0)};
  const bool mla = c->mla.kv_lora > 0, attn = HasAttention(l.kind) && !mla, mlp = HasDenseMlp(l.kind);
  if (mla && (c->mla.q_lora < 0 || c->mla.rope < 2 || c->mla.rope % 2 != 0 || c->mla.nope < 1 || c->mla.v < 1)) {
    return bad(
        fmt::format("MLA needs q_lora_rank >= 0, an even qk_rope_head_dim >= 2 and positive qk_nope_head_dim and "
                    "v_head_dim (got {}, {}, {}, {})",
                    c->mla.q_lora, c->mla.rope, c->mla.nope, c->mla.v));
  }
  if (mla && t > 1 && c->heads % t != 0)
    return bad(fmt::format("tensor-parallel degree {} does not divide its heads ({})", t, c->heads));
  const int64_t head_dim =
      a.Int("head_dim", 0);  // an attention width other than hidden (Qwen3): not in the runtime's kernels
  if (attn && head_dim > 0 && head_dim * c->heads != hidden) {
    return bad(fmt::format(
        "head_dim {} x heads {} is not the hidden size {}: the runtime's attention uses head_dim = hidden / heads",
        head_dim, c->heads, hidden));
  }
  if (attn && (hidden % c->heads != 0 || c->heads % c->kv_heads != 0)) {
    return bad(fmt::format("heads ({}) must divide the hidden size {} and kv_heads ({}) must divide heads", c->heads,
                           hidden, c->kv_heads));
  }
  if (attn && c->rope && (hidden / c->heads) % 2 != 0)
    return bad(fmt::format("rope needs an even head dimension, not {}", hidden / c->heads));
  auto divides = [&](int64_t what, const char* name) -> Status {
    if (t > 1 && what % t != 0)
      return bad(fmt::format("tensor-parallel degree {} does not divide its {} ({})", t, name, what));
    return Status::OK();
  };
  if (attn) PLANNER_RETURN_IF_ERROR(divides(c->heads, "heads"));
  if (attn) PLANNER_RETURN_IF_ERROR(divides(c->kv_heads, "kv_heads"));
  if (mlp) PLANNER_RETURN_IF_ERROR(divides(c->ffn, "ffn"));
  return Status::OK();
}

}  // namespace planner::kernels_internal
