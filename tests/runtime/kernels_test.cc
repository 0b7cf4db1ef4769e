// CPU kernels: every backward (input and weight) against central finite
// differences, FLOPs against spec/'s analytic counts, the Saved protocol
// with several microbatches in flight, and the optimizers on closed forms.
#include <cmath>
#include <random>

#include "runtime/kernels/cuda_api.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/optimizer.h"
#include "spec/layer_catalog.h"
#include "spec/model_spec.h"
#include "tests/test_util.h"
#include "tests/runtime/layer_test_util.h"

namespace planner {
namespace {

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += static_cast<double>(a.data()[i]) * b.data()[i];
  return s;
}

struct Fd {
  double analytic, numeric;
};

// phi(x) = <f(x), r>. Checks d phi / dx along v and d phi / dp along v_p for every parameter.
void CheckGradients(const Layer& l, int64_t b, const Tensor& x, const Tensor* targets = nullptr, double eps = 1e-2,
                    double tol = 2e-3) {
  KernelOptions o;
  o.seed = 5;
  std::unique_ptr<LayerKernel> k;
  REQUIRE_OK(MakeKernel(l, o, &k));
  if (targets) k->SetTargets(*targets);
  Saved s;
  Tensor y, dx;
  REQUIRE_OK(k->Forward(x, &y, &s));
  // Output shape as spec/ infers it.
  std::vector<int64_t> want = {b};
  want.insert(want.end(), l.out_shape.begin(), l.out_shape.end());
  CHECK(y.shape() == want);
  Tensor r = Random(y.shape(), 11);
  k->ZeroGrads();
  REQUIRE_OK(k->BackwardInput(r, &dx, &s));
  REQUIRE_OK(k->BackwardWeight(&s));
  auto phi = [&](const Tensor& xx) {
    Saved s2;
    Tensor yy;
    Status st = k->Forward(xx, &yy, &s2);
    REQUIRE(st.ok());
    return Dot(yy, r);
  };
  if (!dx.empty()) {
    CHECK(dx.shape() == x.shape());
    Tensor v = Random(x.shape(), 21);
    Tensor xp = Tensor::Zeros(x.shape()), xm = Tensor::Zeros(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      xp.data()[i] = x.data()[i] + static_cast<float>(eps) * v.data()[i];
      xm.data()[i] = x.data()[i] - static_cast<float>(eps) * v.data()[i];
    }
    double num = (phi(xp) - phi(xm)) / (2 * eps), ana = Dot(dx, v);
    INFO(LayerKindName(l.kind) << " input gradient: analytic " << ana << " numeric " << num);
    CHECK(std::fabs(ana - num) <= tol * std::max(1.0, std::fabs(num)));
  }
  for (Param* p : k->Params()) {
    Tensor v = Random(p->value.shape(), 31);
    std::vector<float> orig = p->value.ToVector();
    for (int64_t i = 0; i < p->value.numel(); ++i)
      p->value.data()[i] = orig[static_cast<size_t>(i)] + static_cast<float>(eps) * v.data()[i];
    double plus = phi(x);
    for (int64_t i = 0; i < p->value.numel(); ++i)
      p->value.data()[i] = orig[static_cast<size_t>(i)] - static_cast<float>(eps) * v.data()[i];
    double minus = phi(x);
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data()[i] = orig[static_cast<size_t>(i)];
    double num = (plus - minus) / (2 * eps), ana = Dot(p->grad, v);
    INFO(LayerKindName(l.kind) << " gradient of " << p->name << ": analytic " << ana << " numeric " << num);
    CHECK(std::fabs(ana - num) <= tol * std::max(1.0, std::fabs(num)));
  }
}

LayerAttrs Ints(std::map<std::string, int64_t> m) {
  LayerAttrs a;
  a.ints = std::move(m);
  return a;
}

TEST_CASE("linear, relu, gelu, layernorm: backward == finite differences") {
  CheckGradients(MakeLayer("linear", {3, 8}, Ints({{"out_features", 5}})), 2, Random({2, 3, 8}, 1));
  CheckGradients(MakeLayer("relu", {4, 6}, {}), 2, Random({2, 4, 6}, 2), nullptr, 1e-3);
  CheckGradients(MakeLayer("gelu", {4, 6}, {}), 2, Random({2, 4, 6}, 3, 2.0f));
  CheckGradients(MakeLayer("layernorm", {3, 16}, {}), 2, Random({2, 3, 16}, 4, 2.0f));
}

TEST_CASE("attention, mlp, transformer_block: backward == finite differences") {
  CheckGradients(MakeLayer("attention", {6, 16}, Ints({{"heads", 4}})), 2, Random({2, 6, 16}, 5));
  CheckGradients(MakeLayer("mlp", {6, 16}, Ints({{"ffn", 32}})), 2, Random({2, 6, 16}, 6));
  CheckGradients(MakeLayer("transformer_block", {6, 16}, Ints({{"heads", 2}, {"ffn", 32}})), 2, Random({2, 6, 16}, 7),
                 nullptr, 2e-3);
}

TEST_CASE("embedding, lm_head, loss: backward == finite differences") {
  Tensor ids = Tensor::Zeros({2, 5});
  for (int64_t i = 0; i < 10; ++i) ids.data()[i] = static_cast<float>((i * 7) % 11);
  CheckGradients(MakeLayer("embedding", {5}, Ints({{"vocab", 11}, {"hidden", 8}, {"positions", 5}})), 2, ids);
  CheckGradients(MakeLayer("lm_head", {5, 8}, Ints({{"vocab", 11}})), 2, Random({2, 5, 8}, 8));
  Tensor targets = Tensor::Zeros({10});
  for (int64_t i = 0; i < 10; ++i) targets.data()[i] = static_cast<float>((i * 3) % 11);
  CheckGradients(MakeLayer("loss", {5, 11}, {}), 2, Random({2, 5, 11}, 9, 3.0f), &targets);
}

TEST_CASE("conv2d, maxpool, avgpool, flatten: backward == finite differences") {
  CheckGradients(
      MakeLayer("conv2d", {3, 7, 7}, Ints({{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}})), 2,
      Random({2, 3, 7, 7}, 10));
  CheckGradients(MakeLayer("maxpool", {2, 6, 6}, Ints({{"kernel", 2}, {"stride", 2}})), 2, Random({2, 2, 6, 6}, 11),
                 nullptr, 1e-3);
  CheckGradients(MakeLayer("avgpool", {2, 5, 5}, Ints({{"kernel", 3}, {"stride", 2}, {"padding", 1}})), 2,
                 Random({2, 2, 5, 5}, 12));
  CheckGradients(MakeLayer("flatten", {2, 3, 3}, {}), 2, Random({2, 2, 3, 3}, 13));
}

TEST_CASE("loss: value equals the closed-form cross-entropy") {
  Layer l = MakeLayer("loss", {2, 3}, {});
  std::unique_ptr<LayerKernel> k;
  REQUIRE_OK(MakeKernel(l, {}, &k));
  Tensor x = Tensor::FromVector({1, 2, 3}, {0, 0, 0, 1, 2, 3});
  Tensor t = Tensor::FromVector({2}, {1, 2});
  k->SetTargets(t);
  Saved s;
  Tensor y;
  REQUIRE_OK(k->Forward(x, &y, &s));
  double row0 = std::log(3.0), row1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  CHECK(y.data()[0] == doctest::Approx((row0 + row1) / 2).epsilon(1e-6));
  Tensor bad = Tensor::FromVector({3}, {0, 1, 2});
  k->SetTargets(bad);
  CHECK(k->Forward(x, &y, &s).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("dropout: output and gradient use the same mask; the kept fraction is 1 - p") {
  LayerAttrs a;
  a.probability = 0.25;
  Layer l = MakeLayer("dropout", {1000}, a);
  std::unique_ptr<LayerKernel> k;
  REQUIRE_OK(MakeKernel(l, {}, &k));
  Tensor x = Tensor::Zeros({4, 1000});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = 1.0f;
  Saved s;
  Tensor y, dx;
  REQUIRE_OK(k->Forward(x, &y, &s));
  REQUIRE_OK(k->BackwardInput(x, &dx, &s));
  int kept = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    CHECK(dx.data()[i] == y.data()[i]);  // dy = 1: dx is the mask, as is y
    kept += y.data()[i] != 0;
    if (y.data()[i] != 0) CHECK(y.data()[i] == doctest::Approx(1 / 0.75));
  }
  CHECK(kept / 4000.0 == doctest::Approx(0.75).epsilon(0.05));
}

TEST_CASE("kernel FLOPs equal spec/'s analytic counts") {
  struct Case {
    std::string type;
    std::vector<int64_t> in;
    LayerAttrs a;
  };
  std::vector<Case> cases = {
      {"linear", {7, 12}, Ints({{"out_features", 9}})},
      {"attention", {16, 32}, Ints({{"heads", 4}})},
      {"mlp", {16, 32}, Ints({{"ffn", 96}})},
      {"transformer_block", {16, 32}, Ints({{"heads", 4}, {"ffn", 128}})},
      {"lm_head", {16, 32}, Ints({{"vocab", 50}})},
      {"conv2d", {3, 9, 9}, Ints({{"out_channels", 5}, {"kernel", 3}, {"stride", 2}, {"padding", 1}})}};
  for (const auto& c : cases) {
    LayerAttrs a = c.a;
    if (c.type == "attention" || c.type == "transformer_block")
      a.strings["attention"] = "unfused";  // the CPU kernels compute all of s^2
    Layer l = MakeLayer(c.type, c.in, a);
    std::unique_ptr<LayerKernel> k;
    REQUIRE_OK(MakeKernel(l, {}, &k));
    KernelFlops f = k->Flops(3);
    INFO(c.type);
    CHECK(f.forward == doctest::Approx(3 * l.fwd_flops));
    CHECK(f.backward_input == doctest::Approx(3 * l.bwd_input_flops));
    CHECK(f.backward_weight == doctest::Approx(3 * l.bwd_weight_flops));
    double params = 0;
    for (Param* p : k->Params()) params += static_cast<double>(p->value.numel());
    CHECK(params == doctest::Approx(l.params));
    // A tensor-parallel shard does 1/t of the matrix work of the sharded layers.
    if (c.type != "linear" && c.type != "conv2d") {
      KernelOptions o;
      o.tp_size = 2;
      o.tp_rank = 1;
      std::unique_ptr<LayerKernel> shard;
      REQUIRE_OK(MakeKernel(l, o, &shard));
      CHECK(shard->Flops(3).forward == doctest::Approx(3 * l.fwd_flops / 2));
    }
  }
}

TEST_CASE("several microbatches in flight: Saved keeps each one apart") {
  Layer l = MakeLayer("transformer_block", {6, 16}, Ints({{"heads", 2}, {"ffn", 32}}));
  std::unique_ptr<LayerKernel> k;
  REQUIRE_OK(MakeKernel(l, {}, &k));
  Tensor x1 = Random({1, 6, 16}, 1), x2 = Random({1, 6, 16}, 2), dy = Random({1, 6, 16}, 3);
  // One at a time.
  Saved s;
  Tensor y, dx1, dx2;
  REQUIRE_OK(k->Forward(x1, &y, &s));
  REQUIRE_OK(k->BackwardInput(dy, &dx1, &s));
  k->ZeroGrads();
  REQUIRE_OK(k->Forward(x2, &y, &s));
  REQUIRE_OK(k->BackwardInput(dy, &dx2, &s));
  // Interleaved 1F1B-style: F1 F2 B1 B2.
  Saved a, b;
  Tensor ya, yb, da, db;
  REQUIRE_OK(k->Forward(x1, &ya, &a));
  REQUIRE_OK(k->Forward(x2, &yb, &b));
  REQUIRE_OK(k->BackwardInput(dy, &da, &a));
  REQUIRE_OK(k->BackwardInput(dy, &db, &b));
  CHECK(da.ToVector() == dx1.ToVector());
  CHECK(db.ToVector() == dx2.ToVector());
  // Backward without forward is an error, not a crash.
  Saved empty;
  Tensor d;
  CHECK(k->BackwardInput(dy, &d, &empty).code() == StatusCode::kInternal);
  CHECK_FALSE(k->Forward(Random({1, 5, 16}, 4), &y, &s).ok());  // wrong shape
}

TEST_CASE("a TP degree that does not divide the heads is an error") {
  Layer l = MakeLayer("attention", {6, 12}, Ints({{"heads", 3}}));
  KernelOptions o;
  o.tp_size = 2;
  std::unique_ptr<LayerKernel> k;
  Status s = MakeKernel(l, o, &k);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("does not divide its heads (3)") != std::string::npos);
}

TEST_CASE("--device cuda: a CUDA kernel with a GPU, a clear error without one") {
  Layer l = MakeLayer("linear", {4}, Ints({{"out_features", 4}}));
  KernelOptions o;
  o.device = Device::kCuda;
  std::unique_ptr<LayerKernel> k;
  Status s = MakeKernel(l, o, &k);
  std::string why;
  if (CudaDeviceCount(&why) > 0) {
    // A GPU host: the kernel exists, keeps its weights on the device and
    // computes what the CPU kernel with the same seed computes.
    REQUIRE_OK(s);
    REQUIRE(k != nullptr);
    REQUIRE(!k->Params().empty());
    CHECK(k->Params()[0]->value.device() == Device::kCuda);
    std::unique_ptr<LayerKernel> cpu;
    REQUIRE_OK(MakeKernel(l, KernelOptions{}, &cpu));
    const Tensor x = Random({3, 4}, 7);
    Tensor y_cpu, y_gpu;
    Saved s_cpu, s_gpu;
    REQUIRE_OK(cpu->Forward(x, &y_cpu, &s_cpu));
    REQUIRE_OK(k->Forward(x.To(Device::kCuda), &y_gpu, &s_gpu));
    CHECK(y_gpu.device() == Device::kCuda);
    const std::vector<float> a = y_cpu.ToVector(), b = y_gpu.ToVector();
    REQUIRE(a.size() == b.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
      den += static_cast<double>(a[i]) * a[i];
    }
    REQUIRE(den > 0);
    CHECK(std::sqrt(num / den) <= 5e-3);  // relative L2, TF32 GEMMs (kernels_gpu_test's tolerance)
  } else {
    INFO(why);
    CHECK(s.code() == StatusCode::kUnavailable);
    // No GPU, a build without CUDA, or (the binary run outside meson, which sets PLANNER_CUDA_MODULE) no module found.
    CHECK((s.message().find("no CUDA device") != std::string::npos ||
           s.message().find("built without CUDA") != std::string::npos ||
           s.message().find("the CUDA module") != std::string::npos));
    CHECK(s.message() == why);  // the reason CudaDeviceCount gives, word for word
  }
}

TEST_CASE("SGD and Adam follow their update rules") {
  Param p;
  p.name = "w";
  p.value = Tensor::FromVector({2}, {1.0f, -2.0f});
  p.grad = Tensor::FromVector({2}, {0.5f, -1.0f});
  OptimizerConfig sgd;
  sgd.kind = OptimizerConfig::kSgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  Optimizer o(sgd);
  REQUIRE_OK(o.Step({&p}));
  CHECK(p.value.data()[0] == doctest::Approx(1.0 - 0.1 * 0.5));
  REQUIRE_OK(o.Step({&p}));  // momentum buffer 0.9 * 0.5 + 0.5
  CHECK(p.value.data()[0] == doctest::Approx(0.95 - 0.1 * 0.95));
  Param q;
  q.value = Tensor::FromVector({1}, {3.0f});
  q.grad = Tensor::FromVector({1}, {0.2f});
  OptimizerConfig adam;
  adam.lr = 0.01;
  Optimizer a(adam);
  REQUIRE_OK(a.Step({&q}));  // first Adam step moves by lr * sign(g)
  CHECK(q.value.data()[0] == doctest::Approx(3.0 - 0.01).epsilon(1e-6));
  std::vector<float> st = a.State();
  CHECK(st.size() == 3);  // m, v, step count
  Optimizer b(adam);
  REQUIRE_OK(b.SetState(st, {&q}));
  CHECK(b.steps() == 1);
  CHECK(b.SetState({1.0f}, {&q}).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("an optimizer restored from State() continues exactly as the original (checkpoint and resume)") {
  for (auto kind : {OptimizerConfig::kSgd, OptimizerConfig::kAdam}) {
    OptimizerConfig c;
    c.kind = kind;
    c.lr = 0.05;
    c.momentum = 0.9;
    c.weight_decay = kind == OptimizerConfig::kAdam ? 0.01 : 0.0;
    auto make = [](Param* p) {
      p->value = Tensor::FromVector({3}, {0.5f, -1.0f, 2.0f});
      p->grad = Tensor::FromVector({3}, {0.0f, 0.0f, 0.0f});
    };
    // Steps [from, to) of one gradient sequence.
    auto steps = [](Optimizer& o, Param* p, int from, int to) {
      for (int step = from; step < to; ++step) {
        for (int i = 0; i < 3; ++i) p->grad.data()[i] = static_cast<float>(0.3 * (i + 1) * (step % 2 == 0 ? 1 : -0.5));
        REQUIRE_OK(o.Step({p}));
      }
    };
    Param whole, resumed, fresh;
    make(&whole);
    make(&resumed);
    make(&fresh);
    Optimizer o(c), first(c);
    steps(o, &whole, 0, 5);
    steps(first, &resumed, 0, 2);
    std::vector<float> saved = first.State();
    CHECK(saved.size() == (kind == OptimizerConfig::kAdam ? 7u : 4u));
    Optimizer second(c);
    REQUIRE_OK(second.SetState(saved, {&resumed}));
    steps(second, &resumed, 2, 5);
    CHECK(second.steps() == 5);
    for (int i = 0; i < 3; ++i) CHECK(resumed.value.data()[i] == whole.value.data()[i]);
    // A fresh optimizer (no moments) would have diverged: the state matters.
    Optimizer f1(c), f2(c);
    steps(f1, &fresh, 0, 2);
    steps(f2, &fresh, 2, 5);
    CHECK(fresh.value.data()[0] != whole.value.data()[0]);
  }
}

TEST_CASE("GPT template layers build kernels whose parameters match spec/ totals") {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/tiny-gpt.yaml"), &m));
  double kernel_params = 0;
  for (const auto& l : m.layers) {
    std::unique_ptr<LayerKernel> k;
    REQUIRE_OK(MakeKernel(l, {}, &k));
    for (Param* p : k->Params()) kernel_params += static_cast<double>(p->value.numel());
  }
  double spec_params = 0;
  for (const auto& l : m.layers) spec_params += l.params;
  CHECK(kernel_params == doctest::Approx(spec_params));
}

}  // namespace
}  // namespace planner
