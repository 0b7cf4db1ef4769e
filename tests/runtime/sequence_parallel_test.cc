// Context parallelism's ring attention alone against full causal attention
// computed directly (an explicit probability matrix; its backward the
// textbook chain through the softmax, checked itself by central differences
// in double), for cp 2 and 4 on thread ranks: outputs and the gradients of
// Q, K and V. And the load-balanced chunk assignment of the tokens. With
// grouped-query attention (kv_heads 2 and 1 of 4 heads) and RoPE at the
// tokens' global positions, against the reference on K and V repeated per
// query head and rotated in double (and RoPE at local positions disagreeing).
#include <cmath>
#include <mutex>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "runtime/comm/communicator.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/ring_attention.h"
#include "runtime/sequence_parallel.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// Full causal attention over [b, s, heads, d] (contiguous, ld = heads d), in double.
struct Reference {
  int64_t b, s, heads, d;
  std::vector<double> q, k, v;
  size_t At(int64_t bi, int64_t i, int64_t h, int64_t e) const {
    return static_cast<size_t>(((bi * s + i) * heads + h) * d + e);
  }
  // Probabilities of (bi, h) row i over keys j <= i.
  std::vector<double> Probs(int64_t bi, int64_t h, int64_t i) const {
    std::vector<double> p(static_cast<size_t>(i + 1));
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += q[At(bi, i, h, e)] * k[At(bi, j, h, e)];
      p[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
      mx = std::max(mx, p[static_cast<size_t>(j)]);
    }
    for (double& x : p) sum += (x = std::exp(x - mx));
    for (double& x : p) x /= sum;
    return p;
  }
  std::vector<double> Out() const {
    std::vector<double> o(q.size(), 0.0);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < s; ++i) {
          const std::vector<double> p = Probs(bi, h, i);
          for (int64_t j = 0; j <= i; ++j)
            for (int64_t e = 0; e < d; ++e) o[At(bi, i, h, e)] += p[static_cast<size_t>(j)] * v[At(bi, j, h, e)];
        }
    return o;
  }
  // dQ, dK, dV for the output gradient dout: dV = P^T dO, dP = dO V^T, dS = P o (dP - rowsum(P o dP)).
  void Grads(const std::vector<double>& dout, std::vector<double>* dq, std::vector<double>* dk,
             std::vector<double>* dv) const {
    dq->assign(q.size(), 0.0), dk->assign(q.size(), 0.0), dv->assign(q.size(), 0.0);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < s; ++i) {
          const std::vector<double> p = Probs(bi, h, i);
          std::vector<double> dp(p.size(), 0.0);
          double row = 0;
          for (int64_t j = 0; j <= i; ++j) {
            for (int64_t e = 0; e < d; ++e) {
              dp[static_cast<size_t>(j)] += dout[At(bi, i, h, e)] * v[At(bi, j, h, e)];
              (*dv)[At(bi, j, h, e)] += p[static_cast<size_t>(j)] * dout[At(bi, i, h, e)];
            }
            row += p[static_cast<size_t>(j)] * dp[static_cast<size_t>(j)];
          }
          for (int64_t j = 0; j <= i; ++j) {
            const double ds = p[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - row) * scale;
            for (int64_t e = 0; e < d; ++e) {
              (*dq)[At(bi, i, h, e)] += ds * k[At(bi, j, h, e)];
              (*dk)[At(bi, j, h, e)] += ds * q[At(bi, i, h, e)];
            }
          }
        }
  }
};

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Reference MakeReference(int64_t b, int64_t s, int64_t heads, int64_t d, std::vector<double>* dout) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Reference r{b, s, heads, d, {}, {}, {}};
  const size_t n = static_cast<size_t>(b * s * heads * d);
  for (auto* x : {&r.q, &r.k, &r.v, dout}) {
    x->resize(n);
    for (double& y : *x) y = u(gen);
  }
  return r;
}

class CommRing final : public RingExchange {
 public:
  explicit CommRing(Communicator& c) : c_(c) {}
  Status Shift(const float* send, float* recv, int64_t n) override {
    const int r = c_.rank(), p = c_.size();
    return c_.GroupSendRecv(
        {P2POp{true, (r + 1) % p, const_cast<float*>(send), n}, P2POp{false, (r + p - 1) % p, recv, n}});
  }

 private:
  Communicator& c_;
};

TEST_CASE("the reference attention's gradients match central differences (double)") {
  std::vector<double> dout;
  Reference r = MakeReference(1, 6, 2, 3, &dout);
  std::vector<double> dq, dk, dv;
  r.Grads(dout, &dq, &dk, &dv);
  for (auto [x, g] : {std::pair{&r.q, &dq}, std::pair{&r.k, &dk}, std::pair{&r.v, &dv}}) {
    for (size_t i = 0; i < x->size(); i += 5) {
      const double keep = (*x)[i], h = 1e-6;
      (*x)[i] = keep + h;
      const double up = Dot(r.Out(), dout);
      (*x)[i] = keep - h;
      const double down = Dot(r.Out(), dout);
      (*x)[i] = keep;
      CHECK(std::abs((up - down) / (2 * h) - (*g)[i]) < 1e-7);
    }
  }
}

TEST_CASE("CP tokens: rank i holds chunks i and 2cp-1-i (causal load balancing)") {
  CHECK(CpTokenPositions(8, 2, 0) == std::vector<int64_t>{0, 1, 6, 7});
  CHECK(CpTokenPositions(8, 2, 1) == std::vector<int64_t>{2, 3, 4, 5});
  CHECK(CpTokenPositions(8, 4, 3) == std::vector<int64_t>{3, 4});
  // Each rank's causal work (query-key pairs at or below the diagonal) is the same.
  for (int64_t cp : {2, 4}) {
    std::vector<int64_t> work;
    for (int64_t r = 0; r < cp; ++r) {
      int64_t w = 0;
      for (int64_t p : CpTokenPositions(32, cp, r)) w += p + 1;
      work.push_back(w);
    }
    for (int64_t w : work) CHECK(w == work[0]);
  }
}

void CheckRing(int64_t cp) {
  const int64_t b = 2, s = 16, heads = 2, d = 4, hd = heads * d, n = s / cp;
  std::vector<double> dout;
  const Reference r = MakeReference(b, s, heads, d, &dout);
  const std::vector<double> o_ref = r.Out();
  std::vector<double> dq_ref, dk_ref, dv_ref;
  r.Grads(dout, &dq_ref, &dk_ref, &dv_ref);
  std::vector<double> worst(4, 0.0), scale(4, 0.0);  // o, dq, dk, dv: max abs error and max abs value
  std::mutex mu;
  REQUIRE_OK(RunThreadRanks(static_cast<int>(cp), [&](Communicator& c) -> Status {
    const std::vector<int64_t> pos = CpTokenPositions(s, cp, c.rank());
    // Local q, k, v as one QKV row per token (ld = 3 hd) and dout [b, n, hd].
    std::vector<float> qkv(static_cast<size_t>(b * n * 3 * hd)), dl(static_cast<size_t>(b * n * hd));
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t x = 0; x < hd; ++x) {
          const size_t g = static_cast<size_t>((bi * s + pos[static_cast<size_t>(i)]) * hd + x),
                       row = static_cast<size_t>((bi * n + i) * 3 * hd + x);
          qkv[row] = static_cast<float>(r.q[g]), qkv[row + hd] = static_cast<float>(r.k[g]),
          qkv[row + 2 * hd] = static_cast<float>(r.v[g]);
          dl[static_cast<size_t>((bi * n + i) * hd + x)] = static_cast<float>(dout[g]);
        }
    RingAttentionDims dims;
    dims.batch = b, dims.seq = s, dims.heads = heads, dims.head_dim = d, dims.cp = cp, dims.cp_rank = c.rank();
    CommRing ring(c);
    std::vector<float> o(dl.size()), lse(static_cast<size_t>(b * heads * n)), g(qkv.size());
    const float* q = qkv.data();
    PLANNER_RETURN_IF_ERROR(RingAttentionForward(dims, &ring, q, q + hd, q + 2 * hd, 3 * hd, o.data(), lse.data()));
    PLANNER_RETURN_IF_ERROR(RingAttentionBackward(dims, &ring, q, q + hd, q + 2 * hd, 3 * hd, o.data(), lse.data(),
                                                  dl.data(), g.data(), g.data() + hd, g.data() + 2 * hd));
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t x = 0; x < hd; ++x) {
          const size_t gi = static_cast<size_t>((bi * s + pos[static_cast<size_t>(i)]) * hd + x),
                       row = static_cast<size_t>((bi * n + i) * 3 * hd + x);
          const double got[4] = {o[static_cast<size_t>((bi * n + i) * hd + x)], g[row], g[row + hd], g[row + 2 * hd]};
          const double want[4] = {o_ref[gi], dq_ref[gi], dk_ref[gi], dv_ref[gi]};
          for (int k = 0; k < 4; ++k) {
            worst[static_cast<size_t>(k)] = std::max(worst[static_cast<size_t>(k)], std::abs(got[k] - want[k]));
            scale[static_cast<size_t>(k)] = std::max(scale[static_cast<size_t>(k)], std::abs(want[k]));
          }
        }
    return Status::OK();
  }));
  MESSAGE(fmt::format("cp {}: max |error| / max |value|: out {:.1e}, dq {:.1e}, dk {:.1e}, dv {:.1e}", cp,
                      worst[0] / scale[0], worst[1] / scale[1], worst[2] / scale[2], worst[3] / scale[3]));
  // float32 sums of at most s = 16 terms of size ~1 against double: a few ulps (1.2e-7) each.
  for (int k = 0; k < 4; ++k) CHECK(worst[static_cast<size_t>(k)] < 2e-5 * scale[static_cast<size_t>(k)]);
}

TEST_CASE("ring attention on cp 2 equals full causal attention (output, dq, dk, dv)") { CheckRing(2); }
TEST_CASE("ring attention on cp 4 equals full causal attention (output, dq, dk, dv)") { CheckRing(4); }
TEST_CASE("ring attention on cp 1 (no ring) equals full causal attention") { CheckRing(1); }

TEST_CASE("ring attention refuses a sequence that does not split into 2 cp chunks") {
  RingAttentionDims d;
  d.seq = 6, d.cp = 2;
  std::vector<float> x(1024);
  Status s = RingAttentionForward(d, nullptr, x.data(), x.data(), x.data(), 1, x.data(), x.data());
  CHECK(!s.ok());
  CHECK(s.message().find("2 x cp = 4 chunks") != std::string::npos);
}

// RoPE (rotate-half, theta 10000) in double on rows of `heads` heads of d at token `pos` (inverse:
// the opposite angle).
void RopeDouble(double* x, int64_t heads, int64_t d, int64_t pos, bool inverse) {
  const int64_t half = d / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < half; ++j) {
      const double a =
          static_cast<double>(pos) * std::pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(d));
      const double c = std::cos(a), sn = inverse ? -std::sin(a) : std::sin(a);
      double* v = x + h * d;
      const double x1 = v[j], x2 = v[j + half];
      v[j] = x1 * c - x2 * sn, v[j + half] = x2 * c + x1 * sn;
    }
}

// Ring attention with kv of 4 query heads' groups, RoPE applied on the ranks to Q and K at each
// chunk's global first position (local_positions: at the local token index, wrong) and its inverse
// to dQ and dK; the largest error over out, dq, dk, dv relative to the largest value.
double RingGqaRopeError(int64_t cp, int64_t kv, bool local_positions) {
  const int64_t b = 2, s = 16, heads = 4, d = 4, grp = heads / kv, n = s / cp, c = n / 2, hd = heads * d, kvd = kv * d,
                ld = hd + 2 * kvd;
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> q(static_cast<size_t>(b * s * hd)), k(static_cast<size_t>(b * s * kvd)), v(k.size()),
      dout(q.size());
  for (auto* x : {&q, &k, &v, &dout})
    for (double& y : *x) y = u(gen);
  // The reference: rotated Q, rotated K and V repeated for every query head of a group.
  Reference r{b, s, heads, d, q, std::vector<double>(q.size()), std::vector<double>(q.size())};
  for (int64_t t = 0; t < b * s; ++t) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < d; ++e) {
        r.k[static_cast<size_t>(t * hd + h * d + e)] = k[static_cast<size_t>(t * kvd + (h / grp) * d + e)];
        r.v[static_cast<size_t>(t * hd + h * d + e)] = v[static_cast<size_t>(t * kvd + (h / grp) * d + e)];
      }
    RopeDouble(r.q.data() + t * hd, heads, d, t % s, false);
    RopeDouble(r.k.data() + t * hd, heads, d, t % s, false);
  }
  const std::vector<double> o_ref = r.Out();
  std::vector<double> dq_ref, dkf, dvf, dk_ref(k.size(), 0.0), dv_ref(k.size(), 0.0);
  r.Grads(dout, &dq_ref, &dkf, &dvf);
  for (int64_t t = 0; t < b * s; ++t) {  // back to the raw Q and K; a group's gradients sum over its heads
    RopeDouble(dq_ref.data() + t * hd, heads, d, t % s, true);
    RopeDouble(dkf.data() + t * hd, heads, d, t % s, true);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t e = 0; e < d; ++e) {
        dk_ref[static_cast<size_t>(t * kvd + (h / grp) * d + e)] += dkf[static_cast<size_t>(t * hd + h * d + e)];
        dv_ref[static_cast<size_t>(t * kvd + (h / grp) * d + e)] += dvf[static_cast<size_t>(t * hd + h * d + e)];
      }
  }
  double worst = 0, scale = 0;
  std::mutex mu;
  REQUIRE_OK(RunThreadRanks(static_cast<int>(cp), [&](Communicator& comm) -> Status {
    const std::vector<int64_t> pos = CpTokenPositions(s, cp, comm.rank());
    std::vector<float> qkv(static_cast<size_t>(b * n * ld)), dl(static_cast<size_t>(b * n * hd));
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = bi * s + pos[static_cast<size_t>(i)], row = (bi * n + i) * ld;
        for (int64_t x = 0; x < hd; ++x)
          qkv[static_cast<size_t>(row + x)] = static_cast<float>(q[static_cast<size_t>(t * hd + x)]);
        for (int64_t x = 0; x < hd; ++x)
          dl[static_cast<size_t>((bi * n + i) * hd + x)] = static_cast<float>(dout[static_cast<size_t>(t * hd + x)]);
        for (int64_t x = 0; x < kvd; ++x) {
          qkv[static_cast<size_t>(row + hd + x)] = static_cast<float>(k[static_cast<size_t>(t * kvd + x)]);
          qkv[static_cast<size_t>(row + hd + kvd + x)] = static_cast<float>(v[static_cast<size_t>(t * kvd + x)]);
        }
      }
    DeviceOps* ops = OpsFor(Device::kCpu);
    auto rotate = [&](std::vector<float>* m, bool inverse) -> Status {
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t ch = 0; ch < 2; ++ch) {
          float* rows = m->data() + (bi * n + ch * c) * ld;
          const int64_t p0 = local_positions ? ch * c : pos[static_cast<size_t>(ch * c)];
          PLANNER_RETURN_IF_ERROR(ops->Rope(rows, c, ld, c, p0, heads, d, 10000, inverse));
          PLANNER_RETURN_IF_ERROR(ops->Rope(rows + hd, c, ld, c, p0, kv, d, 10000, inverse));
        }
      return Status::OK();
    };
    PLANNER_RETURN_IF_ERROR(rotate(&qkv, false));
    RingAttentionDims dims;
    dims.batch = b, dims.seq = s, dims.heads = heads, dims.kv_heads = kv, dims.head_dim = d, dims.cp = cp,
    dims.cp_rank = comm.rank();
    CommRing ring(comm);
    std::vector<float> o(dl.size()), lse(static_cast<size_t>(b * heads * n)), g(qkv.size());
    const float* x = qkv.data();
    PLANNER_RETURN_IF_ERROR(RingAttentionForward(dims, &ring, x, x + hd, x + hd + kvd, ld, o.data(), lse.data()));
    PLANNER_RETURN_IF_ERROR(RingAttentionBackward(dims, &ring, x, x + hd, x + hd + kvd, ld, o.data(), lse.data(),
                                                  dl.data(), g.data(), g.data() + hd, g.data() + hd + kvd));
    PLANNER_RETURN_IF_ERROR(rotate(&g, true));
    std::lock_guard<std::mutex> lock(mu);
    auto cmp = [&](double got, double want) {
      worst = std::max(worst, std::abs(got - want));
      scale = std::max(scale, std::abs(want));
    };
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = bi * s + pos[static_cast<size_t>(i)], row = (bi * n + i) * ld;
        for (int64_t y = 0; y < hd; ++y) {
          cmp(o[static_cast<size_t>((bi * n + i) * hd + y)], o_ref[static_cast<size_t>(t * hd + y)]);
          cmp(g[static_cast<size_t>(row + y)], dq_ref[static_cast<size_t>(t * hd + y)]);
        }
        for (int64_t y = 0; y < kvd; ++y) {
          cmp(g[static_cast<size_t>(row + hd + y)], dk_ref[static_cast<size_t>(t * kvd + y)]);
          cmp(g[static_cast<size_t>(row + hd + kvd + y)], dv_ref[static_cast<size_t>(t * kvd + y)]);
        }
      }
    return Status::OK();
  }));
  return worst / scale;
}

TEST_CASE(
    "ring attention with GQA / MQA and RoPE at global positions equals full causal attention; local positions do not") {
  for (int64_t cp : {1, 2, 4})
    for (int64_t kv : {2, 1}) {
      const double e = RingGqaRopeError(cp, kv, false);
      MESSAGE(fmt::format("cp {} kv_heads {} of 4: max |error| / max |value| {:.1e}", cp, kv, e));
      CHECK(e < 2e-5);
    }
  // RoPE by the local token index (what a CP rank would do by itself) is another model.
  for (int64_t cp : {2, 4}) {
    const double e = RingGqaRopeError(cp, 2, true);
    MESSAGE(fmt::format("cp {} with RoPE at local positions: {:.1e}", cp, e));
    CHECK(e > 1e-2);
  }
}

// What SP / CP still refuse: MQA under TP (Megatron-Core needs t | kv_heads, as without CP) and
// layer types without a sequence-split kernel.
TEST_CASE(
    "sequence / context parallelism refuse MQA under tp 2 and layer types they have no kernel for, naming the layer") {
  Layer blk;
  blk.kind = LayerKind::kTransformerBlock, blk.name = "block0", blk.in_shape = {32, 64}, blk.out_shape = {32, 64};
  blk.attrs.ints = {{"heads", 4}, {"kv_heads", 1}, {"ffn", 96}};
  blk.attrs.strings = {{"act", "swiglu"}, {"norm", "rmsnorm"}, {"position", "rope"}};
  blk.attrs.bools = {{"bias", false}};
  KernelOptions o;
  o.tp_size = 2, o.tp_rank = 0;
  for (bool sp : {false, true}) {
    SeqParallel p;
    p.tp = 2, p.sp = sp, p.cp = sp ? 1 : 2;
    std::unique_ptr<LayerKernel> k;
    Status st = MakeSeqParallelKernel(blk, o, p, &k);
    CHECK(!st.ok());
    CHECK(st.message().find("layer 'block0") != std::string::npos);
    CHECK(st.message().find("kv_heads (1)") != std::string::npos);
  }
  blk.attrs.ints["kv_heads"] = 2;  // GQA splits over tp 2: built
  SeqParallel p;
  p.tp = 2, p.cp = 2;
  std::unique_ptr<LayerKernel> k;
  REQUIRE_OK(MakeSeqParallelKernel(blk, o, p, &k));
  CHECK(k->Params().size() == 6);  // ln1, qkv, out, ln2, fc1, fc2: no biases
  Layer lin = blk;
  lin.kind = LayerKind::kLinear, lin.name = "proj";
  Status st = MakeSeqParallelKernel(lin, o, p, &k);
  CHECK(st.code() == StatusCode::kNotSupported);
  CHECK(st.message().find("layer 'proj': type 'linear' has no sequence- or context-parallel kernel") !=
        std::string::npos);
}

}  // namespace
}  // namespace planner
