// The mixture-of-experts kernels: the routed experts, the router (top-k, route groups, the load-
// balancing loss), the expert-parallel exchange and MoeFfn, a moe_block's feed-forward.
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

// ------------------------------------------------------------------- MoE
// One routed expert: fc1 (SwiGLU: [2 f, h], gate then up) -> activation -> fc2 on any number of token rows
// [rows, h], on the EP rank that holds it; with expert tensor parallelism (o.tp_size > 1) this rank's cut of
// it as the dense MLP's (fc1 column-parallel, fc2 row-parallel: its output is a partial sum over the TP group).
class ExpertMlp final : public LayerKernel {
 public:
  ExpertMlp(DeviceOps* ops, const std::string& name, int64_t hidden, int64_t ffn, bool gated, Activation act, bool bias,
            uint64_t seed, const KernelOptions& o)
      : ops_(ops),
        f_(ffn / o.tp_size),
        gated_(gated),
        act_(act),
        fc1_(ops, name + ".fc1", hidden, (gated ? 2 : 1) * f_, bias, 1, seed * 37 + 1,
             gated ? GatedFc1Shard(hidden, ffn, o) : Fc1Shard(hidden, ffn, o)),
        fc2_(ops, name + ".fc2", f_, hidden, bias && o.tp_rank == 0, 1, seed * 37 + 2, Fc2Shard(hidden, ffn, o)) {
    for (Param* p : Params()) p->expert = true;
  }
  Status Forward(const Tensor& x, Tensor* y, Saved* sv) override {
    const int64_t rows = x.dim(0);
    sv->children.assign(2, Saved{});
    Tensor a, g = ops_->Alloc({rows, f_});
    PLANNER_RETURN_IF_ERROR(fc1_.Forward(x, &a, &sv->children[0]));
    PLANNER_RETURN_IF_ERROR(gated_ ? ops_->SwiGluForward(a.data(), g.data(), rows, f_)
                                   : ops_->ActivationForward(act_, a.data(), g.data(), a.numel()));
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
  KernelFlops Flops(int64_t rows) const override {
    return SumFlops({&fc1_, &fc2_}, rows);
  }  // rows: tokens routed to it

 private:
  DeviceOps* ops_;
  int64_t f_;
  bool gated_;
  Activation act_;
  Linear fc1_, fc2_;
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
    for (int64_t i = 0; i < m.group_limit; ++i)
      std::fill_n(allowed.begin() + gs[static_cast<size_t>(i)].second * per, per, 1);
  }
  for (int64_t e = 0; e < E; ++e) {
    if (allowed[static_cast<size_t>(e)]) idx.push_back(e);
  }
  std::partial_sort(idx.begin(), idx.begin() + m.top_k, idx.end(),
                    [&](int64_t a, int64_t b) { return sc[a] > sc[b] || (sc[a] == sc[b] && a < b); });
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
Status AuxLoss(const float* scores, const float* sel, int64_t n, const MoeConfig& m, TpGroup* token_group,
               int64_t group_size, float* f, double* loss) {
  const int64_t E = m.experts, k = m.top_k;
  std::vector<float> stats(static_cast<size_t>(2 * E), 0.0f);  // route counts, probability sums
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) stats[static_cast<size_t>(sel[t * k + j])] += 1.0f;
    for (int64_t e = 0; e < E; ++e)
      stats[static_cast<size_t>(E + e)] += static_cast<float>(AuxProb(scores + t * E, e, E, m.sigmoid));
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
void RouterGrad(const float* scores, const float* sel, const float* w, const float* dw, int64_t n, const MoeConfig& m,
                double aux_scale, const float* f, double N, float* dlogits) {
  const int64_t E = m.experts, k = m.top_k;
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* s = scores + t * E;
    float* dl = dlogits + t * E;
    double wdw = 0, ssum = 0;
    for (int64_t j = 0; j < k; ++j)
      wdw += static_cast<double>(w[t * k + j]) * dw[t * k + j], ssum += s[static_cast<int64_t>(sel[t * k + j])];
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
Status ExchangeRows(ExpertGroup* g, const float* send, const std::vector<int64_t>& send_rows, float* recv,
                    const std::vector<int64_t>& recv_rows, int64_t width) {
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
  MoeFfn(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden, const TransformerConfig& c,
         const MoeConfig& m, const KernelOptions& o)
      : ops_(ops),
        s_(seq),
        h_(hidden),
        m_(m),
        el_(m.experts / o.ep_size),
        e0_(o.ep_rank * el_),
        ep_(o.ep_size),
        t_(o.tp_size),
        tp_rank_(o.tp_rank),
        split_(o.etp > 1 ? 1 : o.tp_size),
        aux_scale_(m.aux_loss > 0 ? o.aux_loss_scale : 0.0),
        tp_group_(o.tp_group),
        ep_group_(o.ep_group),
        token_group_(o.token_group),
        token_size_(o.token_group ? o.token_group_size : 1),
        router_(ops, name + ".router", hidden, m.experts, false, seq, o.seed * 47 + 1) {
    if (m.shared_ffn > 0) {
      TransformerConfig sc = c;
      sc.ffn = m.shared_ffn;
      KernelOptions so = o;
      so.seed = o.seed * 47 + 2;
      shared_ = MakeMlp(ops, name + ".shared", seq, hidden, sc, so);
    }
    const Activation act = c.act == Elementwise::kRelu2 ? Activation::kRelu2 : Activation::kGelu;
    KernelOptions eo = o;  // expert tensor parallelism: the experts cut over the TP group (etp = t), else whole
    if (o.etp <= 1) eo.tp_size = 1, eo.tp_rank = 0;
    for (int64_t e = e0_; e < e0_ + el_; ++e) {
      experts_.push_back(std::make_unique<ExpertMlp>(ops, fmt::format("{}.experts.{}", name, e), hidden, m.expert_ffn,
                                                     c.gated, act, c.bias, o.seed * 47 + 100 + static_cast<uint64_t>(e),
                                                     eo));
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
    if (aux_scale_ > 0)
      PLANNER_RETURN_IF_ERROR(AuxLoss(scores.data(), sel.data(), n, m_, token_group_, token_size_, f.data(), &aux));
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
    RouterGrad(scores.data(), sel.data(), w.data(), dw.data(), n, m_, aux_scale_, sv->t[3].data(),
               static_cast<double>(n * token_size_), dlogits.data());
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
    if (sv->children.size() != static_cast<size_t>(2 + el_))
      return Status::Internal("moe: backward-weight before backward-input");
    PLANNER_RETURN_IF_ERROR(router_.BackwardWeight(&sv->children[0]));
    if (shared_) PLANNER_RETURN_IF_ERROR(shared_->BackwardWeight(&sv->children[1]));
    for (int64_t e = 0; e < el_; ++e) {
      Saved& es = sv->children[static_cast<size_t>(2 + e)];
      if (!es.children.empty())
        PLANNER_RETURN_IF_ERROR(experts_[static_cast<size_t>(e)]->BackwardWeight(&es));  // no tokens: no gradient
    }
    sv->Clear();
    return Status::OK();
  }
  std::vector<Param*> Params() override {
    std::vector<Param*> ps = router_.Params();
    if (shared_)
      for (Param* p : shared_->Params()) ps.push_back(p);
    for (auto& e : experts_)
      for (Param* p : e->Params()) ps.push_back(p);
    return ps;
  }
  // Router, shared expert, and the routed experts at their balanced load: this rank's share of the tokens, top_k each.
  KernelFlops Flops(int64_t b) const override {
    KernelFlops f = router_.Flops(b);
    auto add = [&f](const KernelFlops& g) {
      f.forward += g.forward, f.backward_input += g.backward_input, f.backward_weight += g.backward_weight;
    };
    if (shared_) add(shared_->Flops(b));
    if (!experts_.empty()) add(experts_[0]->Flops(b * s_ / split_ * m_.top_k));
    return f;
  }
  double TakeAuxLoss() override { return std::exchange(aux_sum_, 0.0); }

 private:
  // The send order of this rank's routes: route (token - t0) k + j -> its row, and the rows per destination.
  void PlanSend(const float* sel, int64_t t0, int64_t nl, std::vector<int64_t>* route_row,
                std::vector<int64_t>* send_rows) const {
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
  Status ExpertsPass(bool forward, const float* in, int64_t width, const std::vector<int64_t>& ids, Tensor* out,
                     Saved* sv);

  DeviceOps* ops_;
  int64_t s_, h_;
  MoeConfig m_;
  int64_t el_, e0_, ep_, t_, tp_rank_;
  int64_t
      split_;  // TP ranks sharing the tokens' dispatch (t without expert TP; 1 with it: every rank sends all, experts cut)
  double aux_scale_;
  TpGroup* tp_group_;
  ExpertGroup* ep_group_;
  TpGroup*
      token_group_;  // SP: the ranks sharing the microbatch's sequence (the aux loss's statistics are summed over it)
  int64_t token_size_;
  Linear router_;
  std::unique_ptr<LayerKernel> shared_;  // MakeMlp: the shared experts' dense MLP
  std::vector<std::unique_ptr<ExpertMlp>> experts_;
  double aux_sum_ = 0;  // the aux losses of the forwards since the last TakeAuxLoss
};

// Each local expert on its received rows (in arrival order): forward reads [id | x] rows of width h + 1, backward
// the output gradients (width h); results scattered back to the rows' positions in `out` [R, h].
Status MoeFfn::ExpertsPass(bool forward, const float* in, int64_t width, const std::vector<int64_t>& ids, Tensor* out,
                           Saved* sv) {
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
    for (int64_t i = 0; i < cnt; ++i)
      std::memcpy(xin.data() + i * h_, in + rows[static_cast<size_t>(i)] * width + off, static_cast<size_t>(h_) * 4);
    Saved& es = sv->children[static_cast<size_t>(2 + e)];
    LayerKernel* ex = experts_[static_cast<size_t>(e)].get();
    PLANNER_RETURN_IF_ERROR(forward ? ex->Forward(xin, &yout, &es) : ex->BackwardInput(xin, &yout, &es));
    for (int64_t i = 0; i < cnt; ++i)
      std::memcpy(out->data() + rows[static_cast<size_t>(i)] * h_, yout.data() + i * h_, static_cast<size_t>(h_) * 4);
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
  const int64_t n = b * s_, k = m_.top_k, nl = n / split_, t0 = split_ > 1 ? tp_rank_ * nl : 0, S = nl * k,
                R = static_cast<int64_t>(meta[0]);
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
  for (int64_t i = 0; i < S; ++i)
    CopyCols(din_send.data() + route_row[static_cast<size_t>(i)] * h_, h_, 0, dx->data() + (t0 + i / k) * h_, h_, 0, h_,
             1, true);
  if (t_ > 1) PLANNER_RETURN_IF_ERROR(AllReduceSum(tp_group_, dx));
  return Status::OK();
}

}  // namespace

std::unique_ptr<LayerKernel> MakeMoeFfn(DeviceOps* ops, const std::string& name, int64_t seq, int64_t hidden,
                                        const TransformerConfig& c, const MoeConfig& m, const KernelOptions& o) {
  return std::make_unique<MoeFfn>(ops, name, seq, hidden, c, m, o);
}

Status ReadMoeConfig(const Layer& l, const KernelOptions& o, MoeConfig* m) {
  const LayerAttrs& a = l.attrs;
  m->experts = a.Int("experts", 0), m->top_k = a.Int("top_k", 1), m->expert_ffn = a.Int("expert_ffn", 0),
  m->shared_ffn = a.Int("shared_ffn", 0);
  m->groups = a.Int("route_groups", 0), m->group_limit = a.Int("route_group_limit", 0),
  m->aux_loss = a.Real("aux_loss", 0.0);
  const std::string router = a.String("router", "softmax");
  const double capacity = a.Real("capacity_factor", 0.0);
  m->sigmoid = router == "sigmoid";
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("layer '{}': {}", l.name, what));
  };
  if (m->experts < 2 || m->top_k < 1 || m->top_k > m->experts)
    return bad(fmt::format("needs experts >= 2 and 1 <= top_k <= experts (got {} and {})", m->experts, m->top_k));
  if (m->expert_ffn < 1 || m->shared_ffn < 0)
    return bad(fmt::format("needs expert_ffn >= 1 and shared_ffn >= 0 (got {} and {})", m->expert_ffn, m->shared_ffn));
  if (router != "softmax" && router != "sigmoid")
    return bad(fmt::format("router '{}' is not softmax or sigmoid", router));
  if (capacity != 0)
    return bad(fmt::format("capacity_factor {} is not 0: the runtime runs dropless MoE only (set capacity_factor: 0)",
                           capacity));
  if (m->aux_loss < 0) return bad(fmt::format("aux_loss {} is negative", m->aux_loss));
  if (m->groups > 0 && (m->experts % m->groups != 0 || m->group_limit < 1 || m->group_limit > m->groups ||
                        m->group_limit * (m->experts / m->groups) < m->top_k)) {
    return bad(fmt::format(
        "route_groups {} must divide the {} experts and route_group_limit {} keep at least top_k {} of them", m->groups,
        m->experts, m->group_limit, m->top_k));
  }
  if (o.ep_size < 1 || m->experts % o.ep_size != 0 || o.ep_rank < 0 || o.ep_rank >= o.ep_size ||
      (o.ep_size > 1 && o.ep_group == nullptr)) {
    return bad(
        fmt::format("expert-parallel rank {} of {} does not fit its {} experts (ep must divide them and have a group)",
                    o.ep_rank, o.ep_size, m->experts));
  }
  const int64_t seq = l.in_shape.empty() ? 0 : l.in_shape[0];
  if (o.etp > 1 && (o.etp != o.tp_size || m->expert_ffn % o.etp != 0)) {
    return bad(fmt::format("expert tensor parallelism etp {} must equal tp {} and divide expert_ffn {}", o.etp,
                           o.tp_size, m->expert_ffn));
  }
  if (o.tp_size > 1 && (seq % o.tp_size != 0 || m->shared_ffn % o.tp_size != 0)) {
    return bad(fmt::format("tensor-parallel degree {} must divide the sequence {} and shared_ffn {}", o.tp_size, seq,
                           m->shared_ffn));
  }
  return Status::OK();
}

}  // namespace planner::kernels_internal
