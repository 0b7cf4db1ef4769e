#include "runtime/sequence_parallel.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/timing.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/ring_attention.h"
#include "runtime/kernels/shards.h"
#include "runtime/transfers.h"

namespace planner {

namespace {

// Runs the collective `f`, logged under `kind` with `bytes`.
template <typename F>
Status Timed(const SeqParallel& sp, int kind, int64_t bytes, F f) {
  const double t0 = MonotonicSeconds();
  Status s = f();
  if (sp.log) sp.log(kind, bytes, MonotonicSeconds() - t0);
  return s;
}

// [b, n, w] of every rank of the TP group -> [b, size x n, w] (rank r's tokens at [r n, (r + 1) n)).
Status GatherSeq(const SeqParallel& sp, const Tensor& x, Tensor* y) {
  Communicator* c = sp.tp_comm;
  const int64_t t = c->size(), b = x.dim(0), n = x.dim(1), w = x.numel() / (b * n);
  Tensor all = Tensor::Zeros({t * x.numel()});
  PLANNER_RETURN_IF_ERROR(Timed(sp, TransferLog::kSpAllGather, t * x.numel() * 4,
                                [&] { return c->AllGather(x.data(), all.data(), x.numel()); }));
  *y = Tensor::Zeros({b, t * n, w});
  for (int64_t r = 0; r < t; ++r)
    for (int64_t s = 0; s < b; ++s)
      std::memcpy(y->data() + (s * t * n + r * n) * w, all.data() + (r * b + s) * n * w,
                  static_cast<size_t>(n * w) * 4);
  return Status::OK();
}

// [b, size x n, w] partial sums -> this rank's [b, n, w] block of their sum over the TP group.
Status ReduceScatterSeq(const SeqParallel& sp, const Tensor& x, Tensor* y) {
  Communicator* c = sp.tp_comm;
  const int64_t t = c->size(), b = x.dim(0), n = x.dim(1) / t, w = x.numel() / (b * t * n);
  Tensor blocks = Tensor::Zeros({x.numel()});
  for (int64_t r = 0; r < t; ++r)
    for (int64_t s = 0; s < b; ++s)
      std::memcpy(blocks.data() + (r * b + s) * n * w, x.data() + (s * t * n + r * n) * w,
                  static_cast<size_t>(n * w) * 4);
  *y = Tensor::Zeros({b, n, w});
  return Timed(sp, TransferLog::kSpReduceScatter, x.numel() * 4,
               [&] { return c->ReduceScatter(blocks.data(), y->data(), b * n * w, ReduceOp::kSum); });
}

void AddInto(const Tensor& a, Tensor* y) {
  for (int64_t i = 0; i < y->numel(); ++i) y->data()[i] += a.data()[i];
}

// `layer` with its token dimension cut to `tokens` (input and output) and another name / kind.
Layer SubLayer(const Layer& l, LayerKind kind, const std::string& name, std::vector<int64_t> in,
               std::vector<int64_t> out) {
  Layer s = l;
  s.kind = kind;
  s.name = name;
  s.in_shape = std::move(in);
  s.out_shape = std::move(out);
  return s;
}

class CpRing final : public RingExchange {
 public:
  explicit CpRing(const SeqParallel& sp) : sp_(sp) {}
  Status Shift(const float* send, float* recv, int64_t n) override {
    Communicator* c = sp_.cp_comm;
    const int r = c->rank(), p = c->size();
    return Timed(sp_, TransferLog::kCpRingShift, n * 4, [&] {
      return c->GroupSendRecv(
          {P2POp{true, (r + 1) % p, const_cast<float*>(send), n}, P2POp{false, (r + p - 1) % p, recv, n}});
    });
  }

 private:
  SeqParallel sp_;
};

// A kernel around another on the rank's tokens: the SP / CP wrappers below add collectives around
// the inner kernel's passes; its parameters, FLOPs and aux loss are the inner kernel's.
class SeqWrapper : public LayerKernel {
 public:
  SeqWrapper(std::unique_ptr<LayerKernel> inner, const SeqParallel& sp) : inner_(std::move(inner)), sp_(sp) {}
  std::vector<Param*> Params() override { return inner_->Params(); }
  KernelFlops Flops(int64_t b) const override { return inner_->Flops(b); }
  double TakeAuxLoss() override { return inner_->TakeAuxLoss(); }

 protected:
  std::unique_ptr<LayerKernel> inner_;
  SeqParallel sp_;
};

// A norm on the rank's tokens; under SP its weight gradients (partial over the TP group's
// tokens) are all-reduced over the group: what this microbatch added, so accumulation stays exact.
// Also wraps the other kernels with replicated weights on the rank's tokens (an MoE layer's router,
// MLA's down projections and their norms): the parameters neither TP-sharded nor an expert's.
class SeqNorm final : public SeqWrapper {
 public:
  SeqNorm(std::unique_ptr<LayerKernel> inner, const SeqParallel& sp) : SeqWrapper(std::move(inner), sp) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override { return inner_->Forward(x, y, s); }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override { return inner_->BackwardInput(dy, dx, s); }
  Status BackwardWeight(Saved* s) override {
    if (!sp_.sp) return inner_->BackwardWeight(s);
    std::vector<std::vector<float>> before;
    std::vector<Param*> summed;
    for (Param* p : inner_->Params()) {
      if (!p->tp_sharded && !p->expert) summed.push_back(p), before.push_back(p->grad.ToVector());
    }
    PLANNER_RETURN_IF_ERROR(inner_->BackwardWeight(s));
    size_t i = 0;
    for (Param* p : summed) {
      const std::vector<float>& b = before[i++];
      std::vector<float> delta(b.size());
      for (size_t k = 0; k < b.size(); ++k) delta[k] = p->grad.data()[k] - b[k];
      const int64_t n = static_cast<int64_t>(delta.size());
      PLANNER_RETURN_IF_ERROR(Timed(sp_, TransferLog::kTpAllReduce, n * 4,
                                    [&] { return sp_.tp_comm->AllReduce(delta.data(), n, ReduceOp::kSum); }));
      for (size_t k = 0; k < b.size(); ++k) p->grad.data()[k] = b[k] + delta[k];
    }
    return Status::OK();
  }
};

// The vocabulary-parallel embedding on the rank's tokens: ids of the CP chunks are looked up at
// their global positions (the inner kernel sees the whole sequence, other tokens id 0 with a zero
// gradient); the TP partial sums are all-reduced, or reduce-scattered along the sequence (SP).
class SeqEmbedding final : public SeqWrapper {
 public:
  SeqEmbedding(std::unique_ptr<LayerKernel> inner, const SeqParallel& sp, TpGroup* tp_group, int64_t seq)
      : SeqWrapper(std::move(inner), sp), group_(tp_group), seq_(seq), pos_(CpTokenPositions(seq, sp.cp, sp.cp_rank)) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    const int64_t b = x.dim(0), n = static_cast<int64_t>(pos_.size());
    if (x.numel() != b * n)
      return Status::InvalidArgument(fmt::format("embedding: {} token ids per sample, expected {}", x.numel() / b, n));
    Tensor ids = Tensor::Zeros({b, seq_}), full;
    for (int64_t s0 = 0; s0 < b; ++s0)
      for (int64_t i = 0; i < n; ++i) ids.data()[s0 * seq_ + pos_[static_cast<size_t>(i)]] = x.data()[s0 * n + i];
    s->children.assign(1, Saved{});
    PLANNER_RETURN_IF_ERROR(inner_->Forward(ids, &full, &s->children[0]));
    const int64_t h = full.dim(2);
    Tensor mine = Tensor::Zeros({b, n, h});
    for (int64_t s0 = 0; s0 < b; ++s0)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(mine.data() + (s0 * n + i) * h, full.data() + (s0 * seq_ + pos_[static_cast<size_t>(i)]) * h,
                    static_cast<size_t>(h) * 4);
    if (sp_.sp) return ReduceScatterSeq(sp_, mine, y);
    *y = mine;
    return group_ ? group_->AllReduceSum(y->data(), y->numel()) : Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    Tensor g = dy;
    if (sp_.sp) PLANNER_RETURN_IF_ERROR(GatherSeq(sp_, dy, &g));
    const int64_t b = g.dim(0), n = g.dim(1), h = g.dim(2);
    Tensor full = Tensor::Zeros({b, seq_, h});
    for (int64_t s0 = 0; s0 < b; ++s0)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(full.data() + (s0 * seq_ + pos_[static_cast<size_t>(i)]) * h, g.data() + (s0 * n + i) * h,
                    static_cast<size_t>(h) * 4);
    return inner_->BackwardInput(full, dx, &s->children[0]);
  }
  Status BackwardWeight(Saved* s) override { return inner_->BackwardWeight(&s->children[0]); }

 private:
  TpGroup* group_;
  int64_t seq_;
  std::vector<int64_t> pos_;
};

// A Linear from runtime/kernels carrying the single-process weight's TP cut (the cut Attention
// uses: same seed, same slice), so that the CP attention's parameters equal the block's.
Status CutLinear(const Layer& base, const std::string& name, int64_t in, int64_t out, bool bias, uint64_t seed,
                 const WeightSlice& slice, bool sharded_bias, const KernelOptions& o, std::unique_ptr<LayerKernel>* k) {
  Layer l = SubLayer(base, LayerKind::kLinear, name, {1, in}, {1, out});
  l.attrs.bools["bias"] = bias;
  KernelOptions lo = o;
  lo.tp_group = nullptr;
  PLANNER_RETURN_IF_ERROR(MakeKernel(l, lo, k));
  const Tensor w = LinearWeight(out, in, seed, slice);
  std::vector<Param*> ps = (*k)->Params();
  std::copy(w.data(), w.data() + w.numel(), ps[0]->value.data());
  ps[0]->tp_sharded = slice.cut();
  if (bias) ps[1]->tp_sharded = sharded_bias && slice.cut();
  return Status::OK();
}

// The attention attributes (ATTRS.md) the CP attention reads, checked as runtime/kernels checks
// them for the whole-sequence attention.
struct CpAttnConfig {
  int64_t heads = 1, kv_heads = 1;
  bool bias = true, rope = false;
  double theta = 10000;
};
Status ReadCpAttn(const Layer& l, int64_t hidden, int64_t tp, CpAttnConfig* c) {
  const LayerAttrs& a = l.attrs;
  c->heads = a.Int("heads", 1);
  c->kv_heads = a.Int("kv_heads", 0) == 0 ? c->heads : a.Int("kv_heads", 0);
  c->bias = a.Bool("bias", true);
  c->theta = static_cast<double>(a.Int("rope_theta", 10000));
  const std::string pos = a.String("position", "learned");
  c->rope = pos == "rope";
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("layer '{}': {}", l.name, what));
  };
  if (pos != "learned" && pos != "rope") return bad(fmt::format("position '{}' is not learned or rope", pos));
  if (c->heads < 1 || c->kv_heads < 1 || hidden % c->heads != 0 || c->heads % c->kv_heads != 0) {
    return bad(fmt::format("heads ({}) must divide the hidden size {} and kv_heads ({}) must divide heads", c->heads,
                           hidden, c->kv_heads));
  }
  if (c->rope && (hidden / c->heads) % 2 != 0)
    return bad(fmt::format("rope needs an even head dimension, not {}", hidden / c->heads));
  if (c->heads % tp != 0 || c->kv_heads % tp != 0) {
    return bad(fmt::format("tensor-parallel degree {} does not divide its heads ({}) and kv_heads ({})", tp, c->heads,
                           c->kv_heads));
  }
  return Status::OK();
}

// Causal self-attention on the CP rank's tokens: QKV (column-parallel; GQA: each TP rank its
// heads / t query heads and kv_heads / t KV groups), RoPE on Q and K at the tokens' global
// positions, ring attention over the CP group, output projection (row-parallel); the TP
// all-reduces unless SP does them outside.
class CpAttention final : public LayerKernel {
 public:
  Status Init(const Layer& l, const KernelOptions& o, const SeqParallel& sp, int64_t seq, int64_t hidden) {
    CpAttnConfig c;
    PLANNER_RETURN_IF_ERROR(ReadCpAttn(l, hidden, sp.tp, &c));
    ring_ = std::make_unique<CpRing>(sp);
    group_ = sp.sp ? nullptr : o.tp_group;
    dims_.seq = seq, dims_.heads = c.heads / sp.tp, dims_.kv_heads = c.kv_heads / sp.tp,
    dims_.head_dim = hidden / c.heads;
    dims_.cp = sp.cp, dims_.cp_rank = sp.cp_rank, dims_.causal = o.causal;
    rope_ = c.rope, theta_ = c.theta;
    hl_ = dims_.heads * dims_.head_dim, kvc_ = dims_.kv_heads * dims_.head_dim, ld_ = hl_ + 2 * kvc_;
    PLANNER_RETURN_IF_ERROR(CutLinear(l, l.name + ".qkv", hidden, ld_, c.bias, o.seed * 31 + 1,
                                      QkvShard(hidden, c.heads, c.kv_heads, o), true, o, &qkv_));
    return CutLinear(l, l.name + ".out", hl_, hidden, c.bias && o.tp_rank == 0, o.seed * 31 + 2,
                     AttnOutShard(hidden, c.heads, o), false, o, &out_);
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    sv->children.assign(2, Saved{});
    Tensor qkv;
    PLANNER_RETURN_IF_ERROR(qkv_->Forward(x, &qkv, &sv->children[0]));
    RingAttentionDims d = dims_;
    d.batch = x.dim(0);
    PLANNER_RETURN_IF_ERROR(RotateQk(&qkv, d.batch, false));
    Tensor o = Tensor::Zeros({d.batch, d.tokens(), hl_}), lse = Tensor::Zeros({d.batch, d.heads, d.tokens()});
    const float* q = qkv.data();
    PLANNER_RETURN_IF_ERROR(
        RingAttentionForward(d, ring_.get(), q, q + hl_, q + hl_ + kvc_, ld_, o.data(), lse.data()));
    PLANNER_RETURN_IF_ERROR(out_->Forward(o, y, &sv->children[1]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(y->data(), y->numel()));
    sv->t = {qkv, o, lse};
    sv->exact = {
        2};  // the softmax log-sum-exp stays fp32 (FlashAttention keeps softmax_lse fp32: its rounding would scale every probability)
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->t.size() != 3) return Status::Internal("cp attention: backward without forward");
    Tensor dout;
    PLANNER_RETURN_IF_ERROR(out_->BackwardInput(dy, &dout, &sv->children[1]));
    const Tensor& qkv = sv->t[0];
    RingAttentionDims d = dims_;
    d.batch = qkv.dim(0);
    Tensor dqkv = Tensor::Zeros(qkv.shape());
    const float* q = qkv.data();
    float* g = dqkv.data();
    PLANNER_RETURN_IF_ERROR(RingAttentionBackward(d, ring_.get(), q, q + hl_, q + hl_ + kvc_, ld_, sv->t[1].data(),
                                                  sv->t[2].data(), dout.data(), g, g + hl_, g + hl_ + kvc_));
    PLANNER_RETURN_IF_ERROR(RotateQk(&dqkv, d.batch, true));
    PLANNER_RETURN_IF_ERROR(qkv_->BackwardInput(dqkv, dx, &sv->children[0]));
    if (group_) PLANNER_RETURN_IF_ERROR(group_->AllReduceSum(dx->data(), dx->numel()));
    sv->t.clear();
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    PLANNER_RETURN_IF_ERROR(qkv_->BackwardWeight(&sv->children[0]));
    PLANNER_RETURN_IF_ERROR(out_->BackwardWeight(&sv->children[1]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override { return JoinParams({qkv_.get(), out_.get()}); }
  KernelFlops Flops(int64_t b) const override {
    KernelFlops a = SumFlops({qkv_.get(), out_.get()}, b);
    const double core = 2.0 * static_cast<double>(b) * static_cast<double>(dims_.tokens()) *
                        static_cast<double>(dims_.seq) * static_cast<double>(hl_) / 2;
    return {a.forward + 2 * core, a.backward_input + 4 * core, a.backward_weight};
  }

 private:
  // RoPE on the Q and K columns of QKV-shaped rows (inverse: their gradients), each of the rank's two
  // chunks at its global first position (CpTokenPositions).
  Status RotateQk(Tensor* t, int64_t b, bool inverse) {
    if (!rope_) return Status::OK();
    DeviceOps* ops = OpsFor(Device::kCpu);
    const int64_t n = dims_.tokens(), c = n / 2;
    const std::vector<int64_t> pos = CpTokenPositions(dims_.seq, dims_.cp, dims_.cp_rank);
    for (int64_t s = 0; s < b; ++s)
      for (int64_t k = 0; k < 2; ++k) {
        float* rows = t->data() + (s * n + k * c) * ld_;
        const int64_t p0 = pos[static_cast<size_t>(k * c)];
        PLANNER_RETURN_IF_ERROR(ops->Rope(rows, c, ld_, c, p0, dims_.heads, dims_.head_dim, theta_, inverse));
        PLANNER_RETURN_IF_ERROR(ops->Rope(rows + hl_, c, ld_, c, p0, dims_.kv_heads, dims_.head_dim, theta_, inverse));
      }
    return Status::OK();
  }
  std::unique_ptr<CpRing> ring_;
  TpGroup* group_ = nullptr;
  RingAttentionDims dims_;
  bool rope_ = false;
  double theta_ = 10000;
  int64_t hl_ = 0, kvc_ = 0, ld_ = 0;
  std::unique_ptr<LayerKernel> qkv_, out_;
};

// A TP group's sum over the SP communicator (an MoE layer's aux-loss statistics), logged as a TP all-reduce.
class SeqSum final : public TpGroup {
 public:
  explicit SeqSum(const SeqParallel& sp) : sp_(sp) {}
  Status AllReduceSum(float* d, int64_t n) override {
    return Timed(sp_, TransferLog::kTpAllReduce, n * 4, [&] { return sp_.tp_comm->AllReduce(d, n, ReduceOp::kSum); });
  }
  Status AllReduceMax(float* d, int64_t n) override { return sp_.tp_comm->AllReduce(d, n, ReduceOp::kMax); }

 private:
  SeqParallel sp_;
};

// A region entered with an all-gather along the sequence and left with a reduce-scatter (SP),
// around a kernel built without its TP all-reduces; without SP the kernel as is.
Status EnterRegion(const SeqParallel& sp, LayerKernel* k, const Tensor& x, Tensor* y, Saved* s) {
  if (!sp.sp) return k->Forward(x, y, s);
  Tensor full, partial;
  PLANNER_RETURN_IF_ERROR(GatherSeq(sp, x, &full));
  PLANNER_RETURN_IF_ERROR(k->Forward(full, &partial, s));
  return ReduceScatterSeq(sp, partial, y);
}
Status LeaveRegionBackward(const SeqParallel& sp, LayerKernel* k, const Tensor& dy, Tensor* dx, Saved* s) {
  if (!sp.sp) return k->BackwardInput(dy, dx, s);
  Tensor full, partial;
  PLANNER_RETURN_IF_ERROR(GatherSeq(sp, dy, &full));
  PLANNER_RETURN_IF_ERROR(k->BackwardInput(full, &partial, s));
  return ReduceScatterSeq(sp, partial, dx);
}

// The MoE feed-forward of a moe_block under SP: the routed part on the rank's own tokens (dispatched over the EP
// group; no TP split, the sequence is split already; the aux loss's statistics summed over the TP group; the
// router's gradient, partial over the group's tokens, summed like a norm's) plus the shared expert as a TP region.
class SeqMoe final : public LayerKernel {
 public:
  Status Init(const Layer& l, const KernelOptions& o, const SeqParallel& sp, int64_t n) {
    sp_ = sp;
    if (o.etp > 1)
      return Status::NotSupported(
          fmt::format("layer '{}': expert tensor parallelism (etp {}) runs without sequence parallelism on CPU ranks",
                      l.name, o.etp));
    sum_ = std::make_unique<SeqSum>(sp);
    const int64_t h = l.in_shape[1], shared = l.attrs.Int("shared_ffn", 0);
    KernelOptions ko = o;  // the routed experts: whole on their EP rank, on this rank's tokens
    ko.tp_size = 1, ko.tp_rank = 0, ko.tp_group = nullptr, ko.token_group = sp.sp ? sum_.get() : nullptr,
    ko.token_group_size = sp.sp ? sp.tp : 1;
    Layer routed = SubLayer(l, LayerKind::kMoe, l.name + ".moe", {n, h}, {n, h});
    routed.attrs.ints["shared_ffn"] = 0;
    std::unique_ptr<LayerKernel> k;
    PLANNER_RETURN_IF_ERROR(MakeKernel(routed, ko, &k));
    routed_ = std::make_unique<SeqNorm>(std::move(k), sp);
    if (shared == 0) return Status::OK();
    KernelOptions so = o;  // the shared expert: a TP-sharded MLP (seeded as the one-process kernel's)
    if (sp.sp) so.tp_group = nullptr;
    so.seed = o.seed * 47 + 2;
    Layer sl = SubLayer(l, LayerKind::kMlp, l.name + ".moe.shared", {l.in_shape[0], h}, {l.in_shape[0], h});
    sl.attrs.ints["ffn"] = shared;
    return MakeKernel(sl, so, &shared_);
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    sv->children.assign(2, Saved{});
    PLANNER_RETURN_IF_ERROR(routed_->Forward(x, y, &sv->children[0]));
    if (!shared_) return Status::OK();
    Tensor ys;
    PLANNER_RETURN_IF_ERROR(EnterRegion(sp_, shared_.get(), x, &ys, &sv->children[1]));
    AddInto(ys, y);
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 2) return Status::Internal("moe: backward without forward");
    PLANNER_RETURN_IF_ERROR(routed_->BackwardInput(dy, dx, &sv->children[0]));
    if (!shared_) return Status::OK();
    Tensor dxs;
    PLANNER_RETURN_IF_ERROR(LeaveRegionBackward(sp_, shared_.get(), dy, &dxs, &sv->children[1]));
    AddInto(dxs, dx);
    return Status::OK();
  }
  Status BackwardWeight(Saved* sv) override {
    if (sv->children.size() != 2) return Status::Internal("moe: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(routed_->BackwardWeight(&sv->children[0]));
    if (shared_) PLANNER_RETURN_IF_ERROR(shared_->BackwardWeight(&sv->children[1]));
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    return shared_ ? JoinParams({routed_.get(), shared_.get()}) : routed_->Params();
  }
  KernelFlops Flops(int64_t b) const override {
    return shared_ ? SumFlops({routed_.get(), shared_.get()}, b) : routed_->Flops(b);
  }
  double TakeAuxLoss() override { return routed_->TakeAuxLoss(); }

 private:
  SeqParallel sp_;
  std::unique_ptr<SeqSum> sum_;
  std::unique_ptr<LayerKernel> routed_, shared_;
};

// Pre-norm block (y = r + mlp(norm2(r)), r = x + attn(norm1(x))) on the rank's tokens: GPT's
// (LayerNorm, multi-head, GeLU, biases) or Llama-class (RMSNorm, GQA, RoPE, SwiGLU or relu2, no
// biases); the MLP and, without CP, the attention are runtime/kernels' own on the gathered tokens.
class SeqBlock final : public PreNormBlockKernel {
 public:
  Status Init(const Layer& l, const KernelOptions& o, const SeqParallel& sp) {
    sp_ = sp;
    const int64_t s = l.in_shape[0], h = l.in_shape[1], n_cp = s / sp.cp, n = n_cp / (sp.sp ? sp.tp : 1);
    KernelOptions ro = o;  // the regions' kernels: TP all-reduces inside unless SP replaces them
    if (sp.sp) ro.tp_group = nullptr;
    std::unique_ptr<LayerKernel> k;
    const std::string norm = l.attrs.String("norm", "layernorm");  // the block's pre-norms: layernorm or rmsnorm
    if (norm != "layernorm" && norm != "rmsnorm")
      return Status::InvalidArgument(fmt::format("layer '{}': norm '{}' is not layernorm or rmsnorm", l.name, norm));
    const LayerKind norm_kind = norm == "rmsnorm" ? LayerKind::kRmsnorm : LayerKind::kLayernorm;
    PLANNER_RETURN_IF_ERROR(MakeKernel(SubLayer(l, norm_kind, l.name + ".ln1", {n, h}, {n, h}), o, &k));
    ln1_ = std::make_unique<SeqNorm>(std::move(k), sp);
    PLANNER_RETURN_IF_ERROR(MakeKernel(SubLayer(l, norm_kind, l.name + ".ln2", {n, h}, {n, h}), o, &k));
    ln2_ = std::make_unique<SeqNorm>(std::move(k), sp);
    moe_ = l.kind == LayerKind::kMoeBlock;
    if (moe_) {
      auto moe = std::make_unique<SeqMoe>();
      PLANNER_RETURN_IF_ERROR(moe->Init(l, o, sp, n));
      mlp_ = std::move(moe);
    } else {
      PLANNER_RETURN_IF_ERROR(
          MakeKernel(SubLayer(l, LayerKind::kMlp, l.name + ".mlp", {n_cp, h}, {n_cp, h}), ro, &mlp_));
    }
    if (sp.cp == 1 &&
        l.attrs.Int("kv_lora_rank", 0) > 0) {  // MLA: its replicated down projections see the rank's heads only
      PLANNER_RETURN_IF_ERROR(MakeKernel(SubLayer(l, LayerKind::kAttention, l.name + ".attn", {s, h}, {s, h}), ro, &k));
      attn_ = std::make_unique<SeqNorm>(std::move(k), sp);
      return Status::OK();
    }
    if (sp.cp == 1) return MakeKernel(SubLayer(l, LayerKind::kAttention, l.name + ".attn", {s, h}, {s, h}), ro, &attn_);
    auto a = std::make_unique<CpAttention>();
    PLANNER_RETURN_IF_ERROR(
        a->Init(SubLayer(l, LayerKind::kAttention, l.name + ".attn", {n_cp, h}, {n_cp, h}), ro, sp, s, h));
    attn_ = std::move(a);
    return Status::OK();
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    sv->children.assign(4, Saved{});
    Tensor a, u, c, v;
    PLANNER_RETURN_IF_ERROR(ln1_->Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(EnterRegion(sp_, attn_.get(), a, &u, &sv->children[1]));
    AddInto(x, &u);  // r = x + attn
    PLANNER_RETURN_IF_ERROR(ln2_->Forward(u, &c, &sv->children[2]));
    PLANNER_RETURN_IF_ERROR(moe_ ? mlp_->Forward(c, &v, &sv->children[3])
                                 : EnterRegion(sp_, mlp_.get(), c, &v, &sv->children[3]));  // SeqMoe: its own regions
    AddInto(u, &v);
    *y = v;
    return Status::OK();
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* sv) override {
    if (sv->children.size() != 4) return Status::Internal("transformer_block: backward without forward");
    Tensor dc, dr, da, dxa;
    PLANNER_RETURN_IF_ERROR(moe_ ? mlp_->BackwardInput(dy, &dc, &sv->children[3])
                                 : LeaveRegionBackward(sp_, mlp_.get(), dy, &dc, &sv->children[3]));
    PLANNER_RETURN_IF_ERROR(ln2_->BackwardInput(dc, &dr, &sv->children[2]));
    AddInto(dy, &dr);
    PLANNER_RETURN_IF_ERROR(LeaveRegionBackward(sp_, attn_.get(), dr, &da, &sv->children[1]));
    PLANNER_RETURN_IF_ERROR(ln1_->BackwardInput(da, &dxa, &sv->children[0]));
    AddInto(dr, &dxa);
    *dx = dxa;
    return Status::OK();
  }

 private:
  SeqParallel sp_;
  bool moe_ = false;  // mlp_ is a SeqMoe
};

// The vocabulary projection entered with an all-gather along the sequence (SP): logits of the
// CP rank's tokens; its input gradient (partial over TP) reduce-scattered back.
class SeqHead final : public SeqWrapper {
 public:
  SeqHead(std::unique_ptr<LayerKernel> inner, const SeqParallel& sp) : SeqWrapper(std::move(inner), sp) {}
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    if (!sp_.sp) return inner_->Forward(x, y, s);
    Tensor full;
    PLANNER_RETURN_IF_ERROR(GatherSeq(sp_, x, &full));
    return inner_->Forward(full, y, s);
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    if (!sp_.sp) return inner_->BackwardInput(dy, dx, s);
    Tensor partial;
    PLANNER_RETURN_IF_ERROR(inner_->BackwardInput(dy, &partial, s));
    return ReduceScatterSeq(sp_, partial, dx);
  }
  Status BackwardWeight(Saved* s) override { return inner_->BackwardWeight(s); }
};

// The loss of the CP group's tokens: each rank's per-sample mean over its tokens / cp, summed
// over the group (so every CP rank holds the sample's loss); backward scales by 1 / cp.
class CpLoss final : public SeqWrapper {
 public:
  CpLoss(std::unique_ptr<LayerKernel> inner, const SeqParallel& sp) : SeqWrapper(std::move(inner), sp) {}
  void SetTargets(const Tensor& t) override { inner_->SetTargets(t); }
  Status Forward(const Tensor& x, Tensor* y, Saved* s) override {
    PLANNER_RETURN_IF_ERROR(inner_->Forward(x, y, s));
    for (int64_t i = 0; i < y->numel(); ++i) y->data()[i] /= static_cast<float>(sp_.cp);
    return Timed(sp_, TransferLog::kCpAllReduce, y->numel() * 4,
                 [&] { return sp_.cp_comm->AllReduce(y->data(), y->numel(), ReduceOp::kSum); });
  }
  Status BackwardInput(const Tensor& dy, Tensor* dx, Saved* s) override {
    Tensor g = Tensor::Zeros(dy.shape());
    for (int64_t i = 0; i < g.numel(); ++i) g.data()[i] = dy.data()[i] / static_cast<float>(sp_.cp);
    return inner_->BackwardInput(g, dx, s);
  }
  Status BackwardWeight(Saved* s) override { return inner_->BackwardWeight(s); }
};

// `layer` with its token dimensions cut to this rank's share.
Layer LocalLayer(const Layer& l, const SeqParallel& sp) {
  Layer s = l;
  s.in_shape[0] /= SeqDivisor(l, true, sp);
  if (s.out_shape.size() > 1) s.out_shape[0] /= SeqDivisor(l, false, sp);
  return s;
}

}  // namespace

Status CheckSeqParallelLaunch(const std::string& path, Device device, int64_t tp, int64_t cp, bool sp,
                              const Layer& first) {
  if (cp <= 1 && !sp) return Status::OK();
  if (device != Device::kCpu)
    return Status::NotSupported(
        fmt::format("{}: cp / sequence_parallel run on CPU ranks only; codegen with --device cpu", path));
  if (first.kind != LayerKind::kEmbedding || first.in_shape.size() != 1) {
    return Status::InvalidArgument(fmt::format(
        "{}: cp / sequence_parallel need a GPT model (token ids into an embedding); this model starts with '{}'", path,
        LayerKindName(first.kind)));
  }
  const int64_t s = first.in_shape[0], split = std::max<int64_t>(2 * cp, cp * (sp ? tp : 1));
  if (cp > 1 && s % (2 * cp) != 0) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'cp': {} does not split the sequence of {} tokens into 2 x cp = {} chunks (causal load "
                    "balancing); choose cp with 2 cp dividing {}",
                    path, cp, s, 2 * cp, s));
  }
  if (s % split != 0 || s % (cp * (sp ? tp : 1)) != 0) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'sequence_parallel': {} tokens do not split over cp {} x tp {}; choose tp dividing {}",
                    path, s, cp, tp, s / cp));
  }
  return Status::OK();
}

int64_t SeqDivisor(const Layer& l, bool input, const SeqParallel& sp) {
  const int64_t hidden = sp.cp * (sp.sp ? sp.tp : 1);
  if (l.kind == LayerKind::kEmbedding) return input ? sp.cp : hidden;
  if (l.kind == LayerKind::kLmHead) return input ? hidden : sp.cp;
  if (l.kind == LayerKind::kLoss) return input ? sp.cp : 1;
  return hidden;
}

std::vector<float> CpSliceTokens(const std::vector<float>& rows, int64_t seq, int64_t cp, int64_t cp_rank) {
  if (cp <= 1) return rows;
  const std::vector<int64_t> pos = CpTokenPositions(seq, cp, cp_rank);
  std::vector<float> out;
  for (size_t s = 0; s + static_cast<size_t>(seq) <= rows.size(); s += static_cast<size_t>(seq))
    for (int64_t p : pos) out.push_back(rows[s + static_cast<size_t>(p)]);
  return out;
}

Status MakeSeqParallelKernel(const Layer& l, const KernelOptions& o, const SeqParallel& sp,
                             std::unique_ptr<LayerKernel>* out) {
  if (o.device != Device::kCpu)
    return Status::NotSupported("sequence and context parallelism run on CPU ranks only (codegen --device cpu)");
  const int64_t s = l.in_shape.empty() ? 0 : l.in_shape[0];
  if (sp.cp > 1 && l.kind == LayerKind::kEmbedding && s % (2 * sp.cp) != 0) {
    return Status::InvalidArgument(
        fmt::format("layer '{}': cp {} needs the sequence ({}) to split into 2 x cp = {} chunks; choose cp dividing {}",
                    l.name, sp.cp, s, 2 * sp.cp, s / 2));
  }
  if (s % (sp.cp * (sp.sp ? sp.tp : 1)) != 0) {
    return Status::InvalidArgument(
        fmt::format("layer '{}': {} tokens do not split over cp {} x sp {}", l.name, s, sp.cp, sp.sp ? sp.tp : 1));
  }
  KernelOptions ro = o;
  if (sp.sp) ro.tp_group = nullptr;
  std::unique_ptr<LayerKernel> k;
  switch (l.kind) {
    case LayerKind::kEmbedding: {
      KernelOptions eo = o;  // partial sums over the whole sequence; SeqEmbedding reduces the rank's tokens only
      eo.tp_group = nullptr;
      PLANNER_RETURN_IF_ERROR(MakeKernel(l, eo, &k));
      *out = std::make_unique<SeqEmbedding>(std::move(k), sp, sp.sp ? nullptr : o.tp_group, s);
      return Status::OK();
    }
    case LayerKind::kTransformerBlock:
    case LayerKind::kMoeBlock: {
      if (sp.cp > 1 && (l.kind == LayerKind::kMoeBlock || l.attrs.Int("kv_lora_rank", 0) > 0)) {
        return Status::NotSupported(fmt::format(
            "layer '{}': MoE and MLA blocks run without context parallelism on CPU ranks; solve with cp 1", l.name));
      }
      auto b = std::make_unique<SeqBlock>();
      PLANNER_RETURN_IF_ERROR(b->Init(l, o, sp));
      *out = std::move(b);
      return Status::OK();
    }
    case LayerKind::kLayernorm:
    case LayerKind::kRmsnorm:
      PLANNER_RETURN_IF_ERROR(MakeKernel(LocalLayer(l, sp), o, &k));
      *out = std::make_unique<SeqNorm>(std::move(k), sp);
      return Status::OK();
    case LayerKind::kDropout: return MakeKernel(LocalLayer(l, sp), o, out);
    case LayerKind::kLmHead: {
      Layer h = LocalLayer(l, sp);
      h.in_shape[0] = h.out_shape[0];  // the projection sees the CP rank's tokens (gathered under SP)
      PLANNER_RETURN_IF_ERROR(MakeKernel(h, ro, &k));
      *out = std::make_unique<SeqHead>(std::move(k), sp);
      return Status::OK();
    }
    case LayerKind::kLoss:
      PLANNER_RETURN_IF_ERROR(MakeKernel(LocalLayer(l, sp), o, &k));
      if (sp.cp == 1) *out = std::move(k);
      else *out = std::make_unique<CpLoss>(std::move(k), sp);
      return Status::OK();
    case LayerKind::kLinear:
    case LayerKind::kConv2d:
    case LayerKind::kRelu:
    case LayerKind::kGelu:
    case LayerKind::kMaxpool:
    case LayerKind::kAvgpool:
    case LayerKind::kFlatten:
    case LayerKind::kAttention:
    case LayerKind::kMlp:
    case LayerKind::kMtp:
    case LayerKind::kMoe: break;
  }
  return Status::NotSupported(
      fmt::format("layer '{}': type '{}' has no sequence- or context-parallel kernel "
                  "(embedding, transformer_block, moe_block, layernorm, rmsnorm, dropout, "
                  "lm_head and loss have); use transformer_block layers or cp 1 and "
                  "sequence_parallel false",
                  l.name, LayerKindName(l.kind)));
}

}  // namespace planner
