// Llama-class layers of the runtime (ATTRS.md, docs/runtime.md "Llama-class layers"): grouped-query
// attention (GQA and MQA), RoPE, SwiGLU and squared-ReLU MLPs, RMSNorm, no-bias variants.
// - forward against a direct double-precision implementation written here from the definitions;
// - input and weight gradients against central finite differences;
// - RoPE's rotation: norms kept, q(m).k(n) a function of m - n only, the inverse undoes it;
// - a tp=2 GQA + SwiGLU + RMSNorm + RoPE block on two thread ranks equals one process after the
//   shards' gradients are put back in place (index maps written here from Megatron-Core's cuts);
// - kernel FLOPs and parameter counts equal the closed forms.
// Layers are built by hand (type, shapes, attrs), independent of spec/'s inference.
#include <cmath>
#include <map>
#include <mutex>

#include "profiler/layer_profiler.h"
#include "runtime/comm/communicator.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/kernels/kernel.h"
#include "tests/test_util.h"
#include "tests/runtime/layer_test_util.h"

namespace planner {
namespace {

struct Attrs {
  std::map<std::string, int64_t> ints;
  std::map<std::string, std::string> strings;
  std::map<std::string, bool> bools;
};

Layer Hand(const std::string& type, std::vector<int64_t> in, const Attrs& a) {
  Layer l;
  l.name = type;
  l.kind = KindNamed(type);
  l.in_shape = in;
  l.out_shape = in;
  l.attrs.ints = a.ints;
  l.attrs.strings = a.strings;
  l.attrs.bools = a.bools;
  return l;
}

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data()[i]) * b.data()[i];
  return s;
}

// Biases get non-zero values so that the tests see them.
std::unique_ptr<LayerKernel> Build(const Layer& l, const KernelOptions& o = {}) {
  std::unique_ptr<LayerKernel> k;
  Status s = MakeKernel(l, o, &k);
  INFO(s.ToString());
  REQUIRE(s.ok());
  int i = 0;
  for (Param* p : k->Params()) {
    if (p->name.find("bias") != std::string::npos || p->name.find("ln") != std::string::npos ||
        l.kind == LayerKind::kRmsnorm) {
      Tensor r = Random(p->value.shape(), 900 + static_cast<uint64_t>(i), 0.5f);
      for (int64_t j = 0; j < r.numel(); ++j) p->value.data()[j] += r.data()[j];
    }
    ++i;
  }
  return k;
}

// phi(x) = <f(x), r>: d phi / dx along v and d phi / dp along v_p for every parameter, central differences.
void CheckGradients(const Layer& l, const Tensor& x, double eps = 1e-2, double tol = 2e-3) {
  auto k = Build(l);
  Saved s;
  Tensor y, dx;
  REQUIRE_OK(k->Forward(x, &y, &s));
  CHECK(y.shape() == x.shape());
  Tensor r = Random(y.shape(), 11);
  k->ZeroGrads();
  REQUIRE_OK(k->BackwardInput(r, &dx, &s));
  REQUIRE_OK(k->BackwardWeight(&s));
  auto phi = [&](const Tensor& xx) {
    Saved s2;
    Tensor yy;
    REQUIRE(k->Forward(xx, &yy, &s2).ok());
    return Dot(yy, r);
  };
  Tensor v = Random(x.shape(), 21), xp = Tensor::Zeros(x.shape()), xm = Tensor::Zeros(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    xp.data()[i] = x.data()[i] + static_cast<float>(eps) * v.data()[i];
    xm.data()[i] = x.data()[i] - static_cast<float>(eps) * v.data()[i];
  }
  double num = (phi(xp) - phi(xm)) / (2 * eps), ana = Dot(dx, v);
  INFO(LayerKindName(l.kind) << " input gradient: analytic " << ana << " numeric " << num);
  CHECK(std::fabs(ana - num) <= tol * std::max(1.0, std::fabs(num)));
  for (Param* p : k->Params()) {
    Tensor vp = Random(p->value.shape(), 31);
    std::vector<float> orig = p->value.ToVector();
    auto shift = [&](double sign) {
      for (int64_t i = 0; i < p->value.numel(); ++i)
        p->value.data()[i] = orig[static_cast<size_t>(i)] + static_cast<float>(sign * eps) * vp.data()[i];
    };
    shift(1);
    double plus = phi(x);
    shift(-1);
    double minus = phi(x);
    shift(0);
    double pn = (plus - minus) / (2 * eps), pa = Dot(p->grad, vp);
    INFO(LayerKindName(l.kind) << " gradient of " << p->name << ": analytic " << pa << " numeric " << pn);
    CHECK(std::fabs(pa - pn) <= tol * std::max(1.0, std::fabs(pn)));
  }
}

// ---------------------------------------------------------------- reference implementations (double)
using Mat = std::vector<std::vector<double>>;  // [tokens][features] of one sample

Mat Sample(const Tensor& x, int64_t bi) {
  const int64_t s = x.dim(1), h = x.dim(2);
  Mat m(static_cast<size_t>(s), std::vector<double>(static_cast<size_t>(h)));
  for (int64_t t = 0; t < s; ++t)
    for (int64_t c = 0; c < h; ++c) m[t][c] = x.data()[(bi * s + t) * h + c];
  return m;
}

// y = x W^T (+ b), W [out, in] row-major.
Mat RefLinear(const Mat& x, const Param* w, const Param* b) {
  const int64_t out = w->value.dim(0), in = w->value.dim(1);
  Mat y(x.size(), std::vector<double>(static_cast<size_t>(out)));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b ? b->value.data()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += x[t][i] * w->value.data()[o * in + i];
      y[t][o] = acc;
    }
  return y;
}

Mat RefRmsNorm(const Mat& x, const Param* w) {
  Mat y = x;
  for (size_t t = 0; t < x.size(); ++t) {
    double ms = 0;
    for (double v : x[t]) ms += v * v;
    double rs = 1 / std::sqrt(ms / static_cast<double>(x[t].size()) + 1e-5);
    for (size_t c = 0; c < x[t].size(); ++c) y[t][c] = x[t][c] * rs * w->value.data()[c];
  }
  return y;
}

// Rotate-half RoPE of one head vector at position pos.
void RefRope(double* v, int64_t d, int64_t pos, double theta) {
  for (int64_t j = 0; j < d / 2; ++j) {
    double a = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(j) / static_cast<double>(d));
    double x1 = v[j], x2 = v[j + d / 2];
    v[j] = x1 * std::cos(a) - x2 * std::sin(a);
    v[j + d / 2] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// Causal GQA: qkv rows [Q (heads d) | K (kv d) | V (kv d)]; query head j reads KV group j / (heads / kv).
Mat RefAttentionCore(Mat qkv, int64_t heads, int64_t kv, int64_t d, bool rope, double theta) {
  const int64_t s = static_cast<int64_t>(qkv.size());
  if (rope) {
    for (int64_t t = 0; t < s; ++t)
      for (int64_t j = 0; j < heads + kv; ++j) RefRope(qkv[t].data() + j * d, d, t, theta);
  }
  Mat o(qkv.size(), std::vector<double>(static_cast<size_t>(heads * d), 0.0));
  for (int64_t j = 0; j < heads; ++j) {
    const int64_t g = j / (heads / kv), kc = heads * d + g * d, vc = (heads + kv) * d + g * d;
    for (int64_t t = 0; t < s; ++t) {
      std::vector<double> p(static_cast<size_t>(t + 1));
      double mx = -1e300, sum = 0;
      for (int64_t u = 0; u <= t; ++u) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += qkv[t][j * d + c] * qkv[u][kc + c];
        p[u] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, p[u]);
      }
      for (double& e : p) sum += (e = std::exp(e - mx));
      for (int64_t u = 0; u <= t; ++u)
        for (int64_t c = 0; c < d; ++c) o[t][j * d + c] += p[u] / sum * qkv[u][vc + c];
    }
  }
  return o;
}

struct Spec {
  int64_t heads, kv;
  bool rope, bias;
  std::string act;
};

Attrs AttrsOf(const Spec& c, int64_t ffn) {
  Attrs a;
  a.ints = {{"heads", c.heads}, {"kv_heads", c.kv}, {"ffn", ffn}, {"rope_theta", 10000}};
  a.strings = {{"position", c.rope ? "rope" : "learned"}, {"act", c.act}, {"norm", "rmsnorm"}};
  a.bools = {{"bias", c.bias}};
  return a;
}

// Params of a kernel by name suffix (nullptr when absent).
const Param* Find(LayerKernel& k, const std::string& suffix) {
  for (Param* p : k.Params()) {
    if (p->name.size() >= suffix.size() && p->name.compare(p->name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return p;
  }
  return nullptr;
}

Mat RefAttention(LayerKernel& k, const Mat& x, const Spec& c, int64_t d) {
  Mat qkv = RefLinear(x, Find(k, "qkv.weight"), Find(k, "qkv.bias"));
  return RefLinear(RefAttentionCore(qkv, c.heads, c.kv, d, c.rope, 10000), Find(k, "out.weight"), Find(k, "out.bias"));
}

Mat RefMlp(LayerKernel& k, const Mat& x, const std::string& act) {
  Mat a = RefLinear(x, Find(k, "fc1.weight"), Find(k, "fc1.bias"));
  const size_t f = act == "swiglu" ? a[0].size() / 2 : a[0].size();
  Mat g(a.size(), std::vector<double>(f));
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t c = 0; c < f; ++c) {
      double z = a[t][c];
      if (act == "swiglu") g[t][c] = z / (1 + std::exp(-z)) * a[t][f + c];
      else if (act == "relu2") g[t][c] = z > 0 ? z * z : 0;
      else g[t][c] = 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    }
  return RefLinear(g, Find(k, "fc2.weight"), Find(k, "fc2.bias"));
}

Mat Add(const Mat& a, const Mat& b) {
  Mat y = a;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t c = 0; c < a[t].size(); ++c) y[t][c] += b[t][c];
  return y;
}

// Largest |kernel - reference| over the batch, relative to the reference's largest value.
template <class Ref>
double ForwardError(LayerKernel& k, const Tensor& x, Ref ref) {
  Saved s;
  Tensor y;
  REQUIRE_OK(k.Forward(x, &y, &s));
  double err = 0, scale = 0;
  for (int64_t bi = 0; bi < x.dim(0); ++bi) {
    Mat want = ref(Sample(x, bi)), got = Sample(y, bi);
    for (size_t t = 0; t < want.size(); ++t)
      for (size_t c = 0; c < want[t].size(); ++c) {
        err = std::max(err, std::fabs(want[t][c] - got[t][c]));
        scale = std::max(scale, std::fabs(want[t][c]));
      }
  }
  REQUIRE(scale > 0);
  return err / scale;
}

TEST_CASE("GQA / MQA attention with RoPE, SwiGLU and relu2 MLPs, RMSNorm: forward == a direct double implementation") {
  const int64_t s = 6, h = 16, d = 4;
  const Tensor x = Random({2, s, h}, 3, 1.5f);
  for (Spec c : {Spec{4, 2, true, false, "swiglu"}, Spec{4, 1, true, true, "swiglu"}, Spec{4, 4, false, true, "gelu"},
                 Spec{4, 2, false, false, "relu2"}}) {
    INFO("heads " << c.heads << " kv " << c.kv << " rope " << c.rope << " bias " << c.bias << " act " << c.act);
    auto attn = Build(Hand("attention", {s, h}, AttrsOf(c, 24)));
    CHECK(ForwardError(*attn, x, [&](const Mat& m) { return RefAttention(*attn, m, c, d); }) < 1e-5);
    auto mlp = Build(Hand("mlp", {s, h}, AttrsOf(c, 24)));
    CHECK(ForwardError(*mlp, x, [&](const Mat& m) { return RefMlp(*mlp, m, c.act); }) < 1e-5);
    auto blk = Build(Hand("transformer_block", {s, h}, AttrsOf(c, 24)));
    auto ps = blk->Params();
    CHECK(ForwardError(*blk, x, [&](const Mat& m) {
            Mat r = Add(m, RefAttention(*blk, RefRmsNorm(m, ps.front()), c, d));
            return Add(r, RefMlp(*blk, RefRmsNorm(r, Find(*blk, "ln2.weight")), c.act));
          }) < 1e-5);
  }
  auto norm = Build(Hand("rmsnorm", {s, h}, {}));
  CHECK(ForwardError(*norm, x, [&](const Mat& m) { return RefRmsNorm(m, norm->Params()[0]); }) < 1e-6);
}

TEST_CASE("GQA: the reference with the KV groups swapped disagrees with the kernel (the forward check can fail)") {
  const int64_t s = 5, h = 16, d = 4;
  Spec c{4, 2, false, false, "gelu"};
  auto attn = Build(Hand("attention", {s, h}, AttrsOf(c, 16)));
  const Tensor x = Random({1, s, h}, 4);
  auto wrong = [&](const Mat& m) {
    Mat qkv = RefLinear(m, Find(*attn, "qkv.weight"), nullptr);
    Mat swapped = qkv;  // heads 0, 1 read group 1 and heads 2, 3 group 0
    for (auto& row : swapped)
      for (int64_t cc = 0; cc < d; ++cc) {
        std::swap(row[static_cast<size_t>(4 * d + cc)], row[static_cast<size_t>(5 * d + cc)]);
        std::swap(row[static_cast<size_t>(6 * d + cc)], row[static_cast<size_t>(7 * d + cc)]);
      }
    return RefLinear(RefAttentionCore(swapped, 4, 2, d, false, 10000), Find(*attn, "out.weight"), nullptr);
  };
  CHECK(ForwardError(*attn, x, wrong) > 1e-2);
  CHECK(ForwardError(*attn, x, [&](const Mat& m) { return RefAttention(*attn, m, c, d); }) < 1e-5);
}

TEST_CASE("GQA (kv 2, kv 1), RoPE, SwiGLU, relu2, RMSNorm, no-bias: backward == finite differences") {
  const int64_t s = 6, h = 16;
  const Tensor x = Random({2, s, h}, 5);
  for (Spec c :
       {Spec{4, 2, true, false, "swiglu"}, Spec{4, 1, true, true, "relu2"}, Spec{4, 2, false, true, "swiglu"}}) {
    INFO("heads " << c.heads << " kv " << c.kv << " rope " << c.rope << " bias " << c.bias << " act " << c.act);
    // relu(z)^2 has a kink in its second derivative at 0: smaller steps keep the differences' error small.
    const double eps = c.act == "relu2" ? 1e-3 : 1e-2;
    CheckGradients(Hand("attention", {s, h}, AttrsOf(c, 24)), x, eps);
    CheckGradients(Hand("mlp", {s, h}, AttrsOf(c, 24)), x, eps);
    CheckGradients(Hand("transformer_block", {s, h}, AttrsOf(c, 24)), x, eps);
  }
  CheckGradients(Hand("rmsnorm", {s, h}, {}), Random({2, s, h}, 6, 2.0f));
}

TEST_CASE("RoPE: the rotation keeps norms, q(m).k(n) depends on m - n only, the inverse undoes it") {
  const int64_t d = 8, seq = 12, heads = 2, ld = heads * d;
  DeviceOps* ops = CpuOps();
  Tensor q = Random({1, ld}, 7), k = Random({1, ld}, 8);
  Tensor qs = Tensor::Zeros({seq, ld}), ks = Tensor::Zeros({seq, ld});
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t c = 0; c < ld; ++c) {
      qs.data()[t * ld + c] = q.data()[c];
      ks.data()[t * ld + c] = k.data()[c];
    }
  const std::vector<float> orig = qs.ToVector();
  REQUIRE_OK(ops->Rope(qs.data(), seq, ld, seq, 0, heads, d, 10000, false));
  REQUIRE_OK(ops->Rope(ks.data(), seq, ld, seq, 0, heads, d, 10000, false));
  auto dot = [&](const Tensor& a, int64_t m, const Tensor& b, int64_t n, int64_t head) {
    double acc = 0;
    for (int64_t c = 0; c < d; ++c)
      acc += static_cast<double>(a.data()[m * ld + head * d + c]) * b.data()[n * ld + head * d + c];
    return acc;
  };
  for (int64_t head = 0; head < heads; ++head) {
    for (int64_t m = 0; m < seq; ++m) {
      CHECK(dot(qs, m, qs, m, head) == doctest::Approx(dot(q, 0, q, 0, head)).epsilon(1e-5));  // norm kept
      for (int64_t n = 0; n < seq; ++n) {
        const int64_t m0 = m - std::min(m, n), n0 = n - std::min(m, n);  // the same offset, shifted to start at 0
        CHECK(dot(qs, m, ks, n, head) == doctest::Approx(dot(qs, m0, ks, n0, head)).epsilon(1e-4));
      }
    }
    CHECK(dot(qs, 3, ks, 3, head) ==
          doctest::Approx(dot(q, 0, k, 0, head)).epsilon(1e-5));  // same position: no rotation left
  }
  // The positions matter (else the above would hold trivially).
  CHECK(std::fabs(dot(qs, 0, ks, 5, 0) - dot(qs, 0, ks, 1, 0)) > 1e-3);
  // Closed form at position 1, j = 0: angle 1 radian.
  CHECK(qs.data()[1 * ld + 0] ==
        doctest::Approx(q.data()[0] * std::cos(1.0) - q.data()[d / 2] * std::sin(1.0)).epsilon(1e-6));
  // j = 1: angle theta^(-2/8) = 0.1 radian at position 1.
  CHECK(qs.data()[1 * ld + 1] ==
        doctest::Approx(q.data()[1] * std::cos(0.1) - q.data()[1 + d / 2] * std::sin(0.1)).epsilon(1e-6));
  // Position offset pos0: rows are tokens pos0, pos0 + 1, ...
  Tensor tail = Tensor::Zeros({2, ld});
  for (int64_t c = 0; c < 2 * ld; ++c) tail.data()[c] = orig[static_cast<size_t>(c)];
  REQUIRE_OK(ops->Rope(tail.data(), 2, ld, 2, 7, heads, d, 10000, false));
  for (int64_t c = 0; c < 2 * ld; ++c) CHECK(tail.data()[c] == doctest::Approx(qs.data()[7 * ld + c]).epsilon(1e-6));
  REQUIRE_OK(ops->Rope(qs.data(), seq, ld, seq, 0, heads, d, 10000, true));
  for (int64_t i = 0; i < qs.numel(); ++i)
    CHECK(qs.data()[i] == doctest::Approx(orig[static_cast<size_t>(i)]).epsilon(1e-5));
}

// ---------------------------------------------------------------- tensor parallelism
class ThreadTp final : public TpGroup {
 public:
  explicit ThreadTp(Communicator* c) : c_(c) {}
  Status AllReduceSum(float* d, int64_t n) override { return c_->AllReduce(d, n, ReduceOp::kSum); }
  Status AllReduceMax(float* d, int64_t n) override { return c_->AllReduce(d, n, ReduceOp::kMax); }

 private:
  Communicator* c_;
};

struct PassResult {
  std::vector<float> y, dx;
  std::vector<std::string> names;
  std::vector<Tensor> values, grads;
};

PassResult RunBlock(const Layer& l, const KernelOptions& o, const Tensor& x, const Tensor& dy) {
  std::unique_ptr<LayerKernel> k;
  Status st = MakeKernel(l, o, &k);
  REQUIRE(st.ok());
  PassResult r;
  Saved s;
  Tensor y, dx;
  REQUIRE(k->Forward(x, &y, &s).ok());
  REQUIRE(k->BackwardInput(dy, &dx, &s).ok());
  REQUIRE(k->BackwardWeight(&s).ok());
  r.y = y.ToVector();
  r.dx = dx.ToVector();
  for (Param* p : k->Params()) {
    r.names.push_back(p->name);
    r.values.push_back(p->value);
    r.grads.push_back(p->grad);
  }
  return r;
}

double RelMaxError(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0 ? err / scale : err;
}

TEST_CASE("tp=2: a GQA + SwiGLU + RMSNorm + RoPE block (no bias) equals one process once the shards are put back") {
  const int64_t s = 6, h = 16, heads = 4, ffn = 24, d = h / heads, t = 2;
  for (int64_t kv : {2, 4}) {
    INFO("kv_heads " << kv);
    const Layer l = Hand("transformer_block", {s, h}, AttrsOf(Spec{heads, kv, true, false, "swiglu"}, ffn));
    const Tensor x = Random({2, s, h}, 41), dy = Random({2, s, h}, 42);
    KernelOptions one;
    one.seed = 5;
    const PassResult full = RunBlock(l, one, x, dy);
    std::vector<PassResult> shard(static_cast<size_t>(t));
    std::mutex mu;
    CHECK_OK(RunThreadRanks(static_cast<int>(t), [&](Communicator& c) -> Status {
      ThreadTp g(&c);
      KernelOptions o = one;
      o.tp_size = t, o.tp_rank = c.rank(), o.tp_group = &g;
      PassResult r = RunBlock(l, o, x, dy);
      std::lock_guard<std::mutex> lock(mu);
      shard[static_cast<size_t>(c.rank())] = std::move(r);
      return Status::OK();
    }));
    // Where a shard's element (rank r, row i, column j) sits in the full weight (Megatron-Core's cuts).
    const int64_t nl = heads / t, kvl = kv / t, fl = ffn / t;
    auto place = [&](const std::string& name, int64_t r, int64_t i, int64_t j, int64_t* gi, int64_t* gj) {
      *gi = i, *gj = j;
      if (name.ends_with("qkv.weight")) {
        if (i < nl * d) *gi = r * nl * d + i;                                       // its query heads
        else if (i < (nl + kvl) * d) *gi = heads * d + r * kvl * d + (i - nl * d);  // its K groups
        else *gi = (heads + kv) * d + r * kvl * d + (i - (nl + kvl) * d);           // its V groups
      } else if (name.ends_with("out.weight")) {
        *gj = r * nl * d + j;
      } else if (name.ends_with("fc1.weight")) {
        *gi = i < fl ? r * fl + i : ffn + r * fl + (i - fl);  // its gate rows, then the matching up rows
      } else if (name.ends_with("fc2.weight")) {
        *gj = r * fl + j;
      }
    };
    for (const PassResult& r : shard) {
      CHECK(RelMaxError(r.y, full.y) < 1e-5);
      CHECK(RelMaxError(r.dx, full.dx) < 1e-5);
      REQUIRE(r.names == full.names);
    }
    for (size_t p = 0; p < full.names.size(); ++p) {
      INFO(full.names[p]);
      const Tensor& fv = full.values[p];
      const int64_t cols = fv.dim(-1), rows = fv.numel() / cols;
      std::vector<float> value(static_cast<size_t>(fv.numel())), grad(value.size());
      std::vector<int> hits(value.size(), 0);
      const bool sharded = full.names[p].find(".ln") == std::string::npos;
      for (int64_t r = 0; r < (sharded ? t : 1); ++r) {
        const Tensor& sv = shard[static_cast<size_t>(r)].values[p];
        const Tensor& sg = shard[static_cast<size_t>(r)].grads[p];
        const int64_t sc = sv.dim(-1), sr = sv.numel() / sc;
        for (int64_t i = 0; i < sr; ++i)
          for (int64_t j = 0; j < sc; ++j) {
            int64_t gi = 0, gj = 0;
            place(full.names[p], r, i, j, &gi, &gj);
            REQUIRE((gi < rows && gj < cols));
            const size_t at = static_cast<size_t>(gi * cols + gj);
            value[at] = sv.data()[i * sc + j];
            grad[at] = sg.data()[i * sc + j];
            ++hits[at];
          }
      }
      for (int hcount : hits) CHECK(hcount == 1);  // the shards tile the weight
      CHECK(value == full.values[p].ToVector());   // shards are slices of the one-process weight
      CHECK(RelMaxError(grad, full.grads[p].ToVector()) < 1e-5);
      // Replicated norm weights: every rank holds the whole gradient.
      if (!sharded) CHECK(RelMaxError(shard[1].grads[p].ToVector(), full.grads[p].ToVector()) < 1e-5);
    }
  }
  // MQA under tp=2: one KV group cannot be split (Megatron-Core requires t | num_query_groups).
  KernelOptions o;
  o.tp_size = 2;
  std::unique_ptr<LayerKernel> k;
  Status st = MakeKernel(Hand("attention", {s, h}, AttrsOf(Spec{heads, 1, true, false, "swiglu"}, ffn)), o, &k);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("does not divide its kv_heads (1)") != std::string::npos);
}

// ---------------------------------------------------------------- FLOPs and parameters
TEST_CASE(
    "kernel FLOPs and parameters equal the closed forms for GQA, SwiGLU, relu2 and RMSNorm (and 1/t per TP shard)") {
  const double s = 16, h = 64, heads = 8, kv = 2, d = h / heads, ffn = 96, b = 3;
  const double qkv = 2 * s * h * (heads + 2 * kv) * d, out = 2 * s * heads * d * h,
               core = 2 * s * s * heads * d;  // core: Q K^T, and P V
  const double swiglu = 2 * s * h * (2 * ffn) + 2 * s * ffn * h, relu2 = 2 * 2 * s * h * ffn;
  struct Case {
    std::string type, act;
    bool bias;
    double fwd, bwd_in, bwd_w, params;
  };
  const double attn_params = h * (heads + 2 * kv) * d + heads * d * h;
  const std::vector<Case> cases = {
      {"attention", "swiglu", false, qkv + out + 2 * core, qkv + out + 4 * core, qkv + out, attn_params},
      {"attention", "swiglu", true, qkv + out + 2 * core, qkv + out + 4 * core, qkv + out,
       attn_params + (heads + 2 * kv) * d + h},
      {"mlp", "swiglu", false, swiglu, swiglu, swiglu, 3 * h * ffn},
      {"mlp", "swiglu", true, swiglu, swiglu, swiglu, 3 * h * ffn + 2 * ffn + h},
      {"mlp", "relu2", true, relu2, relu2, relu2, 2 * h * ffn + ffn + h},
      {"transformer_block", "swiglu", false, qkv + out + 2 * core + swiglu, qkv + out + 4 * core + swiglu,
       qkv + out + swiglu, attn_params + 3 * h * ffn + 2 * h},
      {"rmsnorm", "", false, 0, 0, 0, h}};
  for (const Case& c : cases) {
    INFO(c.type << " " << c.act << " bias " << c.bias);
    const Layer l = Hand(c.type, {16, 64}, AttrsOf(Spec{8, 2, true, c.bias, c.act}, 96));
    std::unique_ptr<LayerKernel> k;
    REQUIRE_OK(MakeKernel(l, {}, &k));
    KernelFlops f = k->Flops(3);
    CHECK(f.forward == doctest::Approx(b * c.fwd));
    CHECK(f.backward_input == doctest::Approx(b * c.bwd_in));
    CHECK(f.backward_weight == doctest::Approx(b * c.bwd_w));
    double params = 0;
    for (Param* p : k->Params()) params += static_cast<double>(p->value.numel());
    CHECK(params == doctest::Approx(c.params));
    if (c.type == "rmsnorm") continue;
    KernelOptions o;
    o.tp_size = 2, o.tp_rank = 1;
    std::unique_ptr<LayerKernel> half;
    REQUIRE_OK(MakeKernel(l, o, &half));
    CHECK(half->Flops(3).forward == doctest::Approx(b * c.fwd / 2));
    CHECK(half->Flops(3).backward_input == doctest::Approx(b * c.bwd_in / 2));
  }
}

TEST_CASE("the profiler times the Llama-class layers like the others (whole and as tp 2 shards), with their FLOPs") {
  LayerProfileOptions o;
  o.warmup = 1, o.min_repetitions = 2, o.max_repetitions = 3, o.budget_s = 0.05, o.budget_floor = 2, o.progress = false;
  const double s = 16, h = 32, heads = 4, kv = 2, d = h / heads, ffn = 48;
  const double fwd = 2 * s * h * (heads + 2 * kv) * d + 2 * s * h * h + 4 * s * s * h +
                     6 * s * h * ffn;  // block: QKV, proj, core, SwiGLU
  for (int64_t tp : {1, 2}) {
    INFO("tp " << tp);
    LayerTiming t;
    REQUIRE_OK(
        TimeLayer(Hand("transformer_block", {16, 32}, AttrsOf(Spec{4, 2, true, false, "swiglu"}, 48)), 2, tp, o, &t));
    CHECK(t.forward.median_s > 0);
    CHECK(t.backward.median_s > 0);
    CHECK(t.repetitions >= 2);
    CHECK(t.flops.forward == doctest::Approx(2 * fwd / static_cast<double>(tp)));
    CHECK(t.peak_memory_bytes > 0);
  }
  LayerTiming n;
  REQUIRE_OK(TimeLayer(Hand("rmsnorm", {16, 32}, {}), 2, 1, o, &n));
  CHECK(n.forward.median_s > 0);
  CHECK(n.flops.forward == 0);
}

}  // namespace
}  // namespace planner
