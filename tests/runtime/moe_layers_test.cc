// MoE and MLA layers of the runtime (MOE.md, docs/runtime.md "MoE and MLA layers"):
// - the MoE feed-forward (router, top-k, route groups, SwiGLU experts, shared expert, aux loss) and MLA
//   against double-precision implementations written here from the definitions (DeepSeek-V3 / Mixtral /
//   Switch Transformer), and the reference with the groups ignored disagreeing (so the check can fail);
// - input and every parameter's gradient against central differences of those references (aux loss included);
// - ties go to the lower expert index (closed form);
// - expert parallelism (ep 2 on thread ranks, each with its own microbatch), tp 2 with the EP group on the TP
//   ranks, and an MLA moe_block under ep 2 x tp 2 equal one process;
// - capacity_factor > 0, ep not dividing the experts, top_k > experts are refused naming the layer.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>

#include "runtime/comm/communicator.h"
#include "runtime/kernels/kernel.h"
#include "runtime/rank_comms.h"
#include "spec/layer_catalog.h"
#include "tests/test_util.h"
#include "tests/runtime/layer_test_util.h"

namespace planner {
namespace {

using Vec = std::vector<double>;
using Weights = std::map<std::string, Vec>;

Layer MoeLayer(const std::string& type, int64_t s, int64_t h, std::map<std::string, int64_t> ints,
               std::map<std::string, std::string> strings = {}, double aux = 0) {
  Layer l;
  l.name = type;
  l.kind = KindNamed(type);
  l.in_shape = {s, h};
  l.out_shape = {s, h};
  l.attrs.ints = std::move(ints);
  l.attrs.strings = std::move(strings);
  l.attrs.strings.emplace("act", "swiglu");
  l.attrs.strings.emplace("norm", "rmsnorm");
  l.attrs.bools["bias"] = false;
  if (aux > 0) l.attrs.reals["aux_loss"] = aux;
  return l;
}

Vec ToD(const Tensor& t) {
  std::vector<float> v = t.ToVector();
  return Vec(v.begin(), v.end());
}
double Dot(const Vec& a, const Vec& b) { return std::inner_product(a.begin(), a.end(), b.begin(), 0.0); }
double RelErr(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double e = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(a[i] - b[i])), m = std::max(m, std::fabs(b[i]));
  return m > 0 ? e / m : e;
}

std::unique_ptr<LayerKernel> Make(const Layer& l, const KernelOptions& o = {}) {
  std::unique_ptr<LayerKernel> k;
  Status s = MakeKernel(l, o, &k);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return k;
}
Weights WeightsOf(LayerKernel& k) {
  Weights w;
  for (Param* p : k.Params()) w[p->name] = ToD(p->value);
  return w;
}

// y [n, out] = x [n, in] W^T (W [out, in]).
Vec Lin(const Vec& x, int64_t n, int64_t in, const Vec& W, int64_t out) {
  Vec y(static_cast<size_t>(n * out), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i)
        y[static_cast<size_t>(r * out + o)] += x[static_cast<size_t>(r * in + i)] * W[static_cast<size_t>(o * in + i)];
  return y;
}
Vec SwiGluMlp(const Vec& x, int64_t n, int64_t h, const Vec& fc1, const Vec& fc2, int64_t f) {
  Vec z = Lin(x, n, h, fc1, 2 * f), a(static_cast<size_t>(n * f));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < f; ++j) {
      double g = z[static_cast<size_t>(r * 2 * f + j)], u = z[static_cast<size_t>(r * 2 * f + f + j)];
      a[static_cast<size_t>(r * f + j)] = g / (1 + std::exp(-g)) * u;
    }
  return Lin(a, n, f, fc2, h);
}

// ------------------------------------------------------------------ MoE reference
struct MoeRef {
  int64_t E = 4, k = 2, f = 12, fs = 0, groups = 0, limit = 0;
  bool sigmoid = false;
  double coef = 0;
};

// y = sum_j w_j expert_{e_j}(x) + shared(x) per token; returns coef E sum_i f_i P_i.
double RefMoe(const MoeRef& c, const Vec& x, int64_t n, int64_t h, const Weights& w, const std::string& nm, Vec* y) {
  Vec logits = Lin(x, n, h, w.at(nm + ".router.weight"), c.E);
  *y = c.fs > 0 ? SwiGluMlp(x, n, h, w.at(nm + ".shared.fc1.weight"), w.at(nm + ".shared.fc2.weight"), c.fs)
                : Vec(static_cast<size_t>(n * h), 0.0);
  Vec fcount(static_cast<size_t>(c.E), 0.0), P(static_cast<size_t>(c.E), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    Vec s(static_cast<size_t>(c.E));
    double z = 0, mx = *std::max_element(logits.begin() + t * c.E, logits.begin() + (t + 1) * c.E);
    for (int64_t e = 0; e < c.E; ++e) {
      double l = logits[static_cast<size_t>(t * c.E + e)];
      s[static_cast<size_t>(e)] = c.sigmoid ? 1 / (1 + std::exp(-l)) : std::exp(l - mx);
      z += s[static_cast<size_t>(e)];
    }
    if (!c.sigmoid)
      for (double& v : s) v /= z;
    std::vector<int64_t> cand;
    std::vector<int64_t> order(static_cast<size_t>(c.groups > 0 ? c.groups : 1));
    std::iota(order.begin(), order.end(), 0);
    const int64_t per = c.groups > 0 ? c.E / c.groups : c.E;
    auto gscore = [&](int64_t g) {
      Vec v(s.begin() + g * per, s.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      return v[0] + (per > 1 ? v[1] : 0);
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return gscore(a) > gscore(b); });
    const int64_t keep = c.groups > 0 ? c.limit : 1;
    for (int64_t i = 0; i < keep; ++i)
      for (int64_t e = order[static_cast<size_t>(i)] * per; e < (order[static_cast<size_t>(i)] + 1) * per; ++e)
        cand.push_back(e);
    std::sort(cand.begin(), cand.end());
    std::stable_sort(cand.begin(), cand.end(),
                     [&](int64_t a, int64_t b) { return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)]; });
    double ssel = 0;
    for (int64_t j = 0; j < c.k; ++j) ssel += s[static_cast<size_t>(cand[static_cast<size_t>(j)])];
    Vec xt(x.begin() + t * h, x.begin() + (t + 1) * h);
    for (int64_t j = 0; j < c.k; ++j) {
      const int64_t e = cand[static_cast<size_t>(j)];
      const std::string en = nm + ".experts." + std::to_string(e);
      Vec ye = SwiGluMlp(xt, 1, h, w.at(en + ".fc1.weight"), w.at(en + ".fc2.weight"), c.f);
      for (int64_t i = 0; i < h; ++i)
        (*y)[static_cast<size_t>(t * h + i)] += s[static_cast<size_t>(e)] / ssel * ye[static_cast<size_t>(i)];
      fcount[static_cast<size_t>(e)] += 1.0 / static_cast<double>(n * c.k);
    }
    double zs = c.sigmoid ? std::accumulate(s.begin(), s.end(), 0.0) : 1.0;
    for (int64_t e = 0; e < c.E; ++e)
      P[static_cast<size_t>(e)] += s[static_cast<size_t>(e)] / zs / static_cast<double>(n);
  }
  return c.coef * static_cast<double>(c.E) * Dot(fcount, P);
}

Layer LayerOf(const MoeRef& c, int64_t s, int64_t h, const std::string& type = "moe") {
  std::map<std::string, int64_t> ints = {{"experts", c.E},
                                         {"top_k", c.k},
                                         {"expert_ffn", c.f},
                                         {"shared_ffn", c.fs},
                                         {"route_groups", c.groups},
                                         {"route_group_limit", c.limit},
                                         {"heads", 2}};
  return MoeLayer(type, s, h, ints, {{"router", c.sigmoid ? "sigmoid" : "softmax"}}, c.coef);
}

struct Pass {
  Vec y, dx;
  std::map<std::string, Vec> grads;
  std::map<std::string, bool> expert, sharded;
};
// Forward, backward with dy, backward-weight of each (x, dy) pair in turn (microbatches); y, dx of the last.
Pass RunPasses(LayerKernel& k, const std::vector<std::pair<Tensor, Tensor>>& mbs) {
  Pass p;
  k.ZeroGrads();
  for (const auto& [x, dy] : mbs) {
    Saved sv;
    Tensor y, dx;
    REQUIRE_OK(k.Forward(x, &y, &sv));
    REQUIRE_OK(k.BackwardInput(dy, &dx, &sv));
    REQUIRE_OK(k.BackwardWeight(&sv));
    Vec yy = ToD(y), dd = ToD(dx);
    p.y.insert(p.y.end(), yy.begin(), yy.end());
    p.dx.insert(p.dx.end(), dd.begin(), dd.end());
  }
  for (Param* q : k.Params())
    p.grads[q->name] = ToD(q->grad), p.expert[q->name] = q->expert, p.sharded[q->name] = q->tp_sharded;
  return p;
}

TEST_CASE("moe: the forward equals a double-precision reference (softmax top-2 + shared; sigmoid with route groups)") {
  const int64_t s = 4, h = 8, b = 2, n = b * s;
  MoeRef soft{4, 2, 12, 16, 0, 0, false, 0};
  MoeRef grouped{8, 2, 6, 0, 4, 2, true, 0.01};
  for (const MoeRef& c : {soft, grouped}) {
    KernelOptions o;
    o.seed = 3;
    auto k = Make(LayerOf(c, s, h), o);
    Tensor x = Random({b, s, h}, 7), y;
    Saved sv;
    REQUIRE_OK(k->Forward(x, &y, &sv));
    Vec ref;
    RefMoe(c, ToD(x), n, h, WeightsOf(*k), "moe", &ref);
    INFO("experts " << c.E << " groups " << c.groups);
    CHECK(RelErr(ToD(y), ref) < 1e-5);
    if (c.groups > 0) {  // without the node limit some token picks another expert
      MoeRef free = c;
      free.groups = 0;
      Vec other;
      RefMoe(free, ToD(x), n, h, WeightsOf(*k), "moe", &other);
      CHECK(RelErr(other, ref) > 1e-2);
    }
  }
}

TEST_CASE("moe: ties go to the lower expert index, each weighted 1 / k (closed form with a zero router)") {
  const int64_t s = 3, h = 8;
  MoeRef c{4, 2, 6, 0, 0, 0, false, 0};
  auto k = Make(LayerOf(c, s, h));
  for (Param* p : k->Params()) {
    if (p->name == "moe.router.weight") std::fill(p->value.data(), p->value.data() + p->value.numel(), 0.0f);
  }
  Tensor x = Random({1, s, h}, 9), y;
  Saved sv;
  REQUIRE_OK(k->Forward(x, &y, &sv));
  const Weights w = WeightsOf(*k);
  Vec e0 = SwiGluMlp(ToD(x), s, h, w.at("moe.experts.0.fc1.weight"), w.at("moe.experts.0.fc2.weight"), 6);
  Vec e1 = SwiGluMlp(ToD(x), s, h, w.at("moe.experts.1.fc1.weight"), w.at("moe.experts.1.fc2.weight"), 6);
  Vec want(e0.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * (e0[i] + e1[i]);
  CHECK(RelErr(ToD(y), want) < 1e-5);
}

TEST_CASE(
    "moe: input, router, expert and shared gradients with the aux loss equal central differences of the reference") {
  const int64_t s = 4, h = 8, b = 2, n = b * s;
  const double scale = 0.5, eps = 1e-6;
  for (bool sigmoid : {false, true}) {
    MoeRef c{
        sigmoid ? 6 : 4, 2,       6,  10, sigmoid ? 2 : 0,
        sigmoid ? 1 : 0, sigmoid, 2.0};  // 16 routes cannot balance over 6 experts (balanced ones zero the aux gradient)
    KernelOptions o;
    o.seed = 11;
    o.aux_loss_scale = scale;
    auto k = Make(LayerOf(c, s, h), o);
    Tensor x = Random({b, s, h}, 13), g = Random({b, s, h}, 14);
    Pass p = RunPasses(*k, {{x, g}});
    Weights w = WeightsOf(*k);
    const Vec gd = ToD(g);
    Vec y0;
    const double aux0 = RefMoe(c, ToD(x), n, h, w, "moe", &y0);  // the forward's aux loss, once
    CHECK(std::fabs(k->TakeAuxLoss() - aux0) < 1e-6 * std::max(1.0, aux0));
    CHECK(k->TakeAuxLoss() == 0.0);
    auto J = [&](const Vec& xx, const Weights& ww) {
      Vec y;
      double aux = RefMoe(c, xx, n, h, ww, "moe", &y);
      return Dot(y, gd) + scale * aux;
    };
    Vec x0 = ToD(x), v = ToD(Random({b, s, h}, 15)), xp = x0, xm = x0;
    for (size_t i = 0; i < x0.size(); ++i) xp[i] += eps * v[i], xm[i] -= eps * v[i];
    const double num = (J(xp, w) - J(xm, w)) / (2 * eps);
    INFO("sigmoid " << sigmoid << " dx: analytic " << Dot(p.dx, v) << " numeric " << num);
    CHECK(std::fabs(Dot(p.dx, v) - num) < 1e-4 * std::max(1.0, std::fabs(num)));
    for (auto& [name, grad] : p.grads) {
      Vec vp = ToD(Random({static_cast<int64_t>(grad.size())}, 17));
      Weights wp = w, wm = w;
      for (size_t i = 0; i < vp.size(); ++i) wp[name][i] += eps * vp[i], wm[name][i] -= eps * vp[i];
      const double pn = (J(x0, wp) - J(x0, wm)) / (2 * eps);
      INFO(name << ": analytic " << Dot(grad, vp) << " numeric " << pn);
      CHECK(std::fabs(Dot(grad, vp) - pn) < 1e-4 * std::max(1.0, std::fabs(pn)));
      if (name == "moe.router.weight") {  // the aux loss's share of it is 10 x the tolerance or more
        MoeRef noaux = c;
        noaux.coef = 0;
        Vec y1, y2;
        RefMoe(noaux, x0, n, h, wp, "moe", &y1);
        RefMoe(noaux, x0, n, h, wm, "moe", &y2);
        const double without = (Dot(y1, gd) - Dot(y2, gd)) / (2 * eps);
        CHECK(std::fabs(pn - without) > 1e-3 * std::max(1.0, std::fabs(pn)));
      }
    }
  }
}

// ---------------------------------------------------------------- parallel
class ThreadTp final : public TpGroup {
 public:
  explicit ThreadTp(Communicator* c) : c_(c) {}
  Status AllReduceSum(float* d, int64_t n) override { return c_->AllReduce(d, n, ReduceOp::kSum); }
  Status AllReduceMax(float* d, int64_t n) override { return c_->AllReduce(d, n, ReduceOp::kMax); }

 private:
  Communicator* c_;
};

// Two thread ranks holding E / 2 experts each. ep only: rank r runs microbatch r; with tp: both run microbatch
// 0 as TP ranks whose TP group is their EP group (Megatron's folding with etp 1, ep = t). One process runs the
// microbatches in turn. Outputs, input gradients, each expert's gradient (on its rank) and the other gradients
// (summed over the ranks; TP-sharded ones by their squared norm) agree.
void CheckTwoRanks(const Layer& l, bool tp) {
  const int64_t s = l.in_shape[0], h = l.in_shape[1];
  KernelOptions one;
  one.seed = 21;
  one.aux_loss_scale = 0.25;
  std::vector<std::pair<Tensor, Tensor>> mbs = {{Random({2, s, h}, 31), Random({2, s, h}, 32)},
                                                {Random({2, s, h}, 33), Random({2, s, h}, 34)}};
  if (tp) mbs.resize(1);
  auto k1 = Make(l, one);
  const Pass full = RunPasses(*k1, mbs);
  std::vector<Pass> rank(2);
  std::mutex mu;
  CHECK_OK(RunThreadRanks(2, [&](Communicator& c) -> Status {
    CommExpertGroup ep(&c);
    ThreadTp tg(&c);
    KernelOptions o = one;
    o.ep_size = 2, o.ep_rank = c.rank(), o.ep_group = &ep;
    if (tp) o.tp_size = 2, o.tp_rank = c.rank(), o.tp_group = &tg;
    std::unique_ptr<LayerKernel> k;
    PLANNER_RETURN_IF_ERROR(MakeKernel(l, o, &k));
    Pass p = RunPasses(*k, {mbs[tp ? 0 : static_cast<size_t>(c.rank())]});
    std::lock_guard<std::mutex> lock(mu);
    rank[static_cast<size_t>(c.rank())] = std::move(p);
    return Status::OK();
  }));
  const size_t half = full.y.size() / (tp ? 1 : 2);
  for (size_t r = 0; r < 2; ++r) {
    const size_t off = tp ? 0 : r * half;
    CHECK(RelErr(rank[r].y,
                 Vec(full.y.begin() + static_cast<long>(off), full.y.begin() + static_cast<long>(off + half))) < 1e-5);
    CHECK(RelErr(rank[r].dx, Vec(full.dx.begin() + static_cast<long>(off),
                                 full.dx.begin() + static_cast<long>(off + half))) < 1e-5);
  }
  int experts_seen = 0;
  for (const auto& [name, g] : full.grads) {
    INFO(name);
    if (full.expert.at(name)) {
      const size_t owner = rank[0].grads.count(name) ? 0 : 1;
      REQUIRE(rank[owner].grads.count(name) == 1);
      CHECK(rank[1 - owner].grads.count(name) == 0);
      CHECK(RelErr(rank[owner].grads.at(name), g) < 1e-5);
      ++experts_seen;
    } else if (rank[0].sharded.at(name)) {
      const double a =
          Dot(rank[0].grads.at(name), rank[0].grads.at(name)) + Dot(rank[1].grads.at(name), rank[1].grads.at(name));
      CHECK(std::fabs(a - Dot(g, g)) < 1e-5 * Dot(g, g));
    } else {
      Vec sum = rank[0].grads.at(name);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = tp ? sum[i] : sum[i] + rank[1].grads.at(name)[i];
      CHECK(RelErr(sum, g) < 1e-5);
      if (tp) CHECK(RelErr(rank[1].grads.at(name), g) < 1e-5);  // replicated over TP: equal on both
    }
  }
  CHECK(experts_seen > 0);
}

TEST_CASE("moe: ep 2 (each rank its microbatch) and tp 2 with ep 2 equal one process") {
  MoeRef c{4, 2, 6, 8, 0, 0, false, 0.1};
  SUBCASE("ep 2") { CheckTwoRanks(LayerOf(c, 4, 8), false); }
  SUBCASE("tp 2 x ep 2") { CheckTwoRanks(LayerOf(c, 4, 8), true); }
  SUBCASE("sigmoid router with route groups, ep 2") {
    MoeRef g{8, 3, 6, 0, 4, 2, true, 0.05};
    CheckTwoRanks(LayerOf(g, 4, 8), false);
  }
}

// ------------------------------------------------------------------ MLA reference
struct MlaRef {
  int64_t H = 2, qr = 0, kr = 6, dr = 4, dn = 4, dv = 6;
};
Vec Rms(const Vec& x, int64_t n, int64_t d, const Vec& w) {
  Vec y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i)
      ms += x[static_cast<size_t>(r * d + i)] * x[static_cast<size_t>(r * d + i)] / static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i)
      y[static_cast<size_t>(r * d + i)] =
          x[static_cast<size_t>(r * d + i)] / std::sqrt(ms + 1e-5) * w[static_cast<size_t>(i)];
  }
  return y;
}
// Rotate-half RoPE of d values at position pos (theta 10000).
Vec Rope(Vec v, int64_t pos) {
  const int64_t d = static_cast<int64_t>(v.size());
  for (int64_t j = 0; j < d / 2; ++j) {
    const double a =
        static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(d));
    const double x0 = v[static_cast<size_t>(j)], x1 = v[static_cast<size_t>(j + d / 2)];
    v[static_cast<size_t>(j)] = x0 * std::cos(a) - x1 * std::sin(a);
    v[static_cast<size_t>(j + d / 2)] = x1 * std::cos(a) + x0 * std::sin(a);
  }
  return v;
}
Vec Slice(const Vec& v, int64_t at, int64_t n) { return Vec(v.begin() + at, v.begin() + at + n); }

Vec RefMla(const MlaRef& c, const Vec& x, int64_t b, int64_t s, int64_t h, const Weights& w, const std::string& nm) {
  const int64_t n = b * s, dq = c.dn + c.dr, lk = c.kr + c.dr, lw = c.dn + c.dv;
  Vec q = c.qr > 0 ? Lin(Rms(Lin(x, n, h, w.at(nm + ".q_a.weight"), c.qr), n, c.qr, w.at(nm + ".q_norm.weight")), n,
                         c.qr, w.at(nm + ".q_b.weight"), c.H * dq)
                   : Lin(x, n, h, w.at(nm + ".q.weight"), c.H * dq);
  Vec kva = Lin(x, n, h, w.at(nm + ".kv_a.weight"), lk), cc(static_cast<size_t>(n * c.kr));
  for (int64_t t = 0; t < n; ++t) std::copy_n(kva.begin() + t * lk, c.kr, cc.begin() + t * c.kr);
  Vec kv = Lin(Rms(cc, n, c.kr, w.at(nm + ".kv_norm.weight")), n, c.kr, w.at(nm + ".kv_b.weight"), c.H * lw);
  Vec o(static_cast<size_t>(n * c.H * c.dv), 0.0);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hd = 0; hd < c.H; ++hd)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t ti = bi * s + i;
        Vec qn = Slice(q, ti * c.H * dq + hd * dq, c.dn), qp = Rope(Slice(q, ti * c.H * dq + hd * dq + c.dn, c.dr), i);
        Vec sc;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t tj = bi * s + j;
          Vec kn = Slice(kv, tj * c.H * lw + hd * lw, c.dn), kp = Rope(Slice(kva, tj * lk + c.kr, c.dr), j);
          sc.push_back((Dot(qn, kn) + Dot(qp, kp)) / std::sqrt(static_cast<double>(dq)));
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double& v : sc) z += (v = std::exp(v - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < c.dv; ++e)
            o[static_cast<size_t>(ti * c.H * c.dv + hd * c.dv + e)] +=
                sc[static_cast<size_t>(j)] / z * kv[static_cast<size_t>((bi * s + j) * c.H * lw + hd * lw + c.dn + e)];
      }
  return Lin(o, n, c.H * c.dv, w.at(nm + ".out.weight"), h);
}

Layer MlaLayer(const MlaRef& c, int64_t s, int64_t h, const std::string& type = "attention") {
  return MoeLayer(type, s, h,
                  {{"heads", c.H},
                   {"q_lora_rank", c.qr},
                   {"kv_lora_rank", c.kr},
                   {"qk_rope_head_dim", c.dr},
                   {"qk_nope_head_dim", c.dn},
                   {"v_head_dim", c.dv},
                   {"experts", 4},
                   {"top_k", 2},
                   {"expert_ffn", 6},
                   {"shared_ffn", 8}},
                  {{"position", "rope"}});
}

TEST_CASE("mla: the forward and every gradient equal a double-precision reference and its central differences") {
  const int64_t b = 2, s = 5, h = 8;
  const double eps = 1e-6;
  for (int64_t qr : {0, 5}) {
    MlaRef c{2, qr, 6, 4, 4, 6};
    KernelOptions o;
    o.seed = 9;
    auto k = Make(MlaLayer(c, s, h), o);
    Tensor x = Random({b, s, h}, 51), g = Random({b, s, h}, 52);
    Pass p = RunPasses(*k, {{x, g}});
    Weights w = WeightsOf(*k);
    const Vec x0 = ToD(x), gd = ToD(g);
    INFO("q_lora_rank " << qr);
    CHECK(RelErr(p.y, RefMla(c, x0, b, s, h, w, "attention")) < 1e-5);
    MlaRef wrong = c;  // the check can fail: the rope and nope parts of the query swapped
    wrong.dn = c.dr, wrong.dr = c.dn;
    if (wrong.dn != c.dn) CHECK(RelErr(RefMla(wrong, x0, b, s, h, w, "attention"), p.y) > 1e-3);
    auto J = [&](const Vec& xx, const Weights& ww) { return Dot(RefMla(c, xx, b, s, h, ww, "attention"), gd); };
    Vec v = ToD(Random({b, s, h}, 53)), xp = x0, xm = x0;
    for (size_t i = 0; i < v.size(); ++i) xp[i] += eps * v[i], xm[i] -= eps * v[i];
    const double num = (J(xp, w) - J(xm, w)) / (2 * eps);
    CHECK(std::fabs(Dot(p.dx, v) - num) < 1e-4 * std::max(1.0, std::fabs(num)));
    CHECK(p.grads.size() == (qr > 0 ? 7u : 5u));
    for (auto& [name, grad] : p.grads) {
      Vec vp = ToD(Random({static_cast<int64_t>(grad.size())}, 54));
      Weights wp = w, wm = w;
      for (size_t i = 0; i < vp.size(); ++i) wp[name][i] += eps * vp[i], wm[name][i] -= eps * vp[i];
      const double pn = (J(x0, wp) - J(x0, wm)) / (2 * eps);
      INFO(name << ": analytic " << Dot(grad, vp) << " numeric " << pn);
      CHECK(std::fabs(Dot(grad, vp) - pn) < 1e-4 * std::max(1.0, std::fabs(pn)));
    }
  }
}

TEST_CASE("mla: tp 2 (heads split, down projections replicated) equals one process once the shards are put back") {
  const int64_t b = 2, s = 4, h = 8, t = 2;
  MlaRef c{4, 5, 6, 4, 4, 6};
  const Layer l = MlaLayer(c, s, h);
  KernelOptions one;
  one.seed = 5;
  Tensor x = Random({b, s, h}, 61), dy = Random({b, s, h}, 62);
  auto k1 = Make(l, one);
  const Pass full = RunPasses(*k1, {{x, dy}});
  std::vector<Pass> rank(2);
  std::mutex mu;
  CHECK_OK(RunThreadRanks(2, [&](Communicator& cm) -> Status {
    ThreadTp tg(&cm);
    KernelOptions o = one;
    o.tp_size = t, o.tp_rank = cm.rank(), o.tp_group = &tg;
    std::unique_ptr<LayerKernel> k;
    PLANNER_RETURN_IF_ERROR(MakeKernel(l, o, &k));
    Pass p = RunPasses(*k, {{x, dy}});
    std::lock_guard<std::mutex> lock(mu);
    rank[static_cast<size_t>(cm.rank())] = std::move(p);
    return Status::OK();
  }));
  for (const Pass& r : rank) CHECK(RelErr(r.y, full.y) < 1e-5);
  for (const Pass& r : rank) CHECK(RelErr(r.dx, full.dx) < 1e-5);
  for (const auto& [name, g] : full.grads) {
    INFO(name);
    const Vec &g0 = rank[0].grads.at(name), &g1 = rank[1].grads.at(name);
    Vec put(g.size());
    if (name.ends_with("out.weight")) {  // columns [r H/t dv, (r+1) H/t dv) of each row
      const int64_t cols = c.H * c.dv, half = cols / t;
      for (int64_t row = 0; row < h; ++row)
        for (int64_t j = 0; j < cols; ++j)
          put[static_cast<size_t>(row * cols + j)] = (j < half ? g0 : g1)[static_cast<size_t>(row * half + j % half)];
    } else if (rank[0].sharded.at(name)) {  // q_b, kv_b: rank r's heads are consecutive rows
      put = g0;
      put.insert(put.end(), g1.begin(), g1.end());
      put.resize(g.size() == put.size() ? put.size() : 0);
    } else {
      CHECK(RelErr(g1, g0) < 1e-6);  // replicated: the same on both ranks
      put = g0;
    }
    CHECK(RelErr(put, g) < 1e-5);
  }
}

TEST_CASE("moe_block with MLA: ep 2 and tp 2 x ep 2 equal one process") {
  MlaRef c{2, 0, 6, 4, 4, 6};
  SUBCASE("ep 2") { CheckTwoRanks(MlaLayer(c, 4, 8, "moe_block"), false); }
  SUBCASE("tp 2 x ep 2") { CheckTwoRanks(MlaLayer(c, 4, 8, "moe_block"), true); }
}

TEST_CASE(
    "moe: capacity_factor > 0, ep not dividing the experts, top_k > experts, an mtp layer, a head_dim other than h "
    "/ heads and a sliding window are refused") {
  MoeRef c{4, 2, 6, 0, 0, 0, false, 0};
  std::unique_ptr<LayerKernel> k;
  Layer l = LayerOf(c, 4, 8, "moe_block");
  l.name = "block3";
  l.attrs.reals["capacity_factor"] = 1.25;
  Status st = MakeKernel(l, {}, &k);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("block3") != std::string::npos);
  CHECK(st.message().find("capacity_factor") != std::string::npos);
  l.attrs.reals.erase("capacity_factor");
  KernelOptions o;
  o.ep_size = 3;
  CHECK(MakeKernel(l, o, &k).code() == StatusCode::kInvalidArgument);
  l.attrs.ints["top_k"] = 5;
  CHECK(MakeKernel(l, {}, &k).code() == StatusCode::kInvalidArgument);
  Layer mtp = LayerOf(c, 4, 8, "mtp");  // MTP modules: costed, not trained
  mtp.name = "mtp0";
  st = MakeKernel(mtp, {}, &k);
  CHECK(st.code() == StatusCode::kNotSupported);
  CHECK(st.message().find("layer 'mtp0'") != std::string::npos);
  Layer wide = LayerOf(c, 4, 8, "moe_block");  // head_dim 8 x 2 heads != hidden 8
  wide.attrs.ints["head_dim"] = 8;
  CHECK(MakeKernel(wide, {}, &k).code() == StatusCode::kInvalidArgument);
  Layer windowed = LayerOf(c, 4, 8, "moe_block");  // a sliding window shorter than the 4 tokens: costed, not trained
  windowed.name = "block1";
  windowed.attention_window = 2;
  st = MakeKernel(windowed, {}, &k);
  CHECK(st.code() == StatusCode::kNotSupported);
  CHECK(st.message().find("layer 'block1': sliding-window attention (2 keys)") != std::string::npos);
  Layer packed = LayerOf(c, 4, 8, "moe_block");  // packed samples: its attention would cross them
  packed.name = "block2";
  packed.attention_packed = 2;
  st = MakeKernel(packed, {}, &k);
  CHECK(st.code() == StatusCode::kNotSupported);
  CHECK(st.message().find("layer 'block2': packed samples (gpt.packed_length 2)") != std::string::npos);
  Layer lora;  // LoRA: the runtime would train the frozen base too
  LayerAttrs la;
  la.ints = {{"heads", 2}};
  la.strings = {{"act", "swiglu"}, {"norm", "rmsnorm"}};
  REQUIRE_OK(InferLayer("transformer_block", la, {4, 8}, DType::kFp32, &lora));
  lora.name = "block0";
  ApplyLora(2, LoraTargetBit(GemmRole::kQkv), DType::kFp32, &lora);
  st = MakeKernel(lora, {}, &k);
  CHECK(st.code() == StatusCode::kNotSupported);
  CHECK(st.message().find("layer 'block0': LoRA fine-tuning (gpt.lora)") != std::string::npos);
}

}  // namespace
}  // namespace planner
