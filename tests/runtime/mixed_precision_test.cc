// Mixed precision (runtime/kernels/mixed_precision.h, common/half.h): the 16-bit conversions against
// known bit patterns; every layer kernel wrapped in bf16 and fp16 against its fp32 kernel; the
// optimizer's fp32 masters; the bytes a wrapped kernel holds; dynamic loss scaling.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <limits>

#include "common/half.h"
#include "spec/dtype_round.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/mixed_precision.h"
#include "runtime/kernels/optimizer.h"
#include "spec/layer_catalog.h"
#include "tests/test_util.h"
#include "tests/runtime/layer_test_util.h"

namespace planner {
namespace {

TEST_CASE("half.h: bf16 and fp16 bit patterns, round to nearest even, NaN, inf, overflow, subnormals") {
  CHECK(FloatToBf16(1.0f) == 0x3f80);
  CHECK(FloatToBf16(-2.0f) == 0xc000);
  CHECK(FloatToBf16(3.14159265f) == 0x4049);                        // 0x40490fdb rounds down
  CHECK(FloatToBf16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie, even stays
  CHECK(FloatToBf16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(FloatToBf16(std::bit_cast<float>(0x3f808001u)) == 0x3f81);  // above the tie
  CHECK(FloatToBf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(FloatToBf16(std::bit_cast<float>(0x7f7fffffu)) == 0x7f80);  // FLT_MAX rounds to inf
  CHECK(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  CHECK(Bf16ToFloat(0x3f80) == 1.0f);
  CHECK(FloatToHalf(1.0f) == 0x3c00);
  CHECK(FloatToHalf(-2.0f) == 0xc000);
  CHECK(FloatToHalf(65504.0f) == 0x7bff);
  CHECK(FloatToHalf(65519.0f) == 0x7bff);
  CHECK(FloatToHalf(65520.0f) == 0x7c00);  // overflow -> inf
  CHECK(FloatToHalf(1e10f) == 0x7c00);
  CHECK(FloatToHalf(-1e10f) == 0xfc00);
  CHECK(FloatToHalf(0.1f) == 0x2e66);
  CHECK(FloatToHalf(1.0f + 1.0f / 2048) == 0x3c00);     // tie to even
  CHECK(FloatToHalf(1.0f + 3.0f / 2048) == 0x3c02);     // tie, odd rounds up
  CHECK(FloatToHalf(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(FloatToHalf(std::ldexp(1.0f, -25)) == 0x0000);  // half of it: tie to even -> 0
  CHECK(FloatToHalf(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(FloatToHalf(std::ldexp(3.0f, -24)) == 0x0003);
  CHECK(HalfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(HalfToFloat(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(HalfToFloat(0x7bff) == 65504.0f);
  CHECK(std::isinf(HalfToFloat(0x7c00)));
  CHECK(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  // Every fp16 value round-trips exactly.
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(f) && FloatToHalf(f) != h) ++bad;
  }
  CHECK(bad == 0);
  CHECK(RoundTo(DType::kFp32, 0.1f) == 0.1f);
  CHECK(RoundTo(DType::kBf16, 0.1f) == Bf16ToFloat(FloatToBf16(0.1f)));
  CHECK(RoundTo(DType::kBf16, 0.1f) != 0.1f);
}

TEST_CASE("tensors of every dtype: bytes, FromVector / ToVector, conversions, fp8 refused") {
  const std::vector<float> v = {1.0f, -0.1f, 70000.0f, 3.0f};
  for (DType d : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    Tensor t = Tensor::FromVector({2, 2}, v, d);
    CHECK(t.dtype() == d);
    CHECK(t.bytes() == 4 * DTypeBytes(d));
    std::vector<float> back = t.ToVector();
    for (size_t i = 0; i < v.size(); ++i) CHECK(back[i] == RoundTo(d, v[i]));
    Tensor c = t.Converted(DType::kFp32);
    CHECK(c.ToVector() == back);
    CHECK(t.View(2, {2}).ToVector() == std::vector<float>(back.begin() + 2, back.end()));
  }
  CHECK(std::isinf(Tensor::FromVector({4}, v, DType::kFp16).ToVector()[2]));
  const MemoryStats before = GetMemoryStats(Device::kCpu);
  {
    Tensor z = Tensor::Zeros({1000}, Device::kCpu, DType::kBf16);
    CHECK(GetMemoryStats(Device::kCpu).current_bytes - before.current_bytes == 2000);
    Tensor s = z.ConvertedScratch(DType::kFp32);
    CHECK(GetMemoryStats(Device::kCpu).current_bytes - before.current_bytes == 2000);  // scratch is uncounted
    CHECK(s.ToVector() == std::vector<float>(1000, 0.0f));
  }
  CHECK_THROWS(AllocateTensor({4}, Device::kCpu, DType::kFp8));
}

TEST_CASE("data() of a 16-bit tensor aborts the process (a kernel must never read bf16 bits as floats)") {
  Tensor t = Tensor::Zeros({4}, Device::kCpu, DType::kBf16);
  CHECK(t.raw() != nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // doctest's crash handler would report the expected abort
    if (std::freopen("/dev/null", "w", stderr) == nullptr || std::freopen("/dev/null", "w", stdout) == nullptr)
      _exit(3);
    volatile float f = t.data()[0];
    (void)f;
    _exit(0);  // not reached
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(Tensor::Zeros({4}).data() != nullptr);  // fp32: the elements
}

Layer Make(const std::string& type, std::vector<int64_t> in, std::map<std::string, int64_t> ints) {
  LayerAttrs a;
  a.ints = std::move(ints);
  return MakeLayer(type, std::move(in), a);
}

// ||a - b|| / ||b|| over the decoded values.
double RelError(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.ToVector(), y = b.ToVector();
  REQUIRE(x.size() == y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    den += static_cast<double>(y[i]) * y[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

struct Case {
  Layer layer;
  Tensor x;
  Tensor targets;  // loss layers
};

std::vector<Case> Cases() {
  Tensor ids = Tensor::Zeros({2, 5});
  for (int64_t i = 0; i < 10; ++i) ids.data()[i] = static_cast<float>((i * 7) % 11);
  Tensor targets = Tensor::Zeros({10});
  for (int64_t i = 0; i < 10; ++i) targets.data()[i] = static_cast<float>((i * 3) % 11);
  Tensor big_ids = Tensor::Zeros({2, 5});
  for (int64_t i = 0; i < 10; ++i) big_ids.data()[i] = static_cast<float>(257 + 41 * i);
  return {
      {Make("linear", {3, 8}, {{"out_features", 5}}), Random({2, 3, 8}, 1), {}},
      {Make("relu", {4, 6}, {}), Random({2, 4, 6}, 2), {}},
      {Make("gelu", {4, 6}, {}), Random({2, 4, 6}, 3, 2.0f), {}},
      {Make("layernorm", {3, 16}, {}), Random({2, 3, 16}, 4, 2.0f), {}},
      {Make("rmsnorm", {3, 16}, {}), Random({2, 3, 16}, 4, 2.0f), {}},
      {Make("attention", {6, 16}, {{"heads", 4}}), Random({2, 6, 16}, 5), {}},
      {Make("attention", {6, 16}, {{"heads", 4}, {"kv_heads", 2}}), Random({2, 6, 16}, 5), {}},
      {Make("mlp", {6, 16}, {{"ffn", 32}}), Random({2, 6, 16}, 6), {}},
      {Make("transformer_block", {6, 16}, {{"heads", 2}, {"ffn", 32}}), Random({2, 6, 16}, 7), {}},
      {Make("moe_block", {6, 16}, {{"heads", 2}, {"experts", 4}, {"top_k", 2}, {"expert_ffn", 8}}),
       Random({2, 6, 16}, 7),
       {}},
      {Make("embedding", {5}, {{"vocab", 11}, {"hidden", 8}, {"positions", 5}}), ids, {}},
      {Make("lm_head", {5, 8}, {{"vocab", 11}}), Random({2, 5, 8}, 8), {}},
      {Make("loss", {5, 11}, {}), Random({2, 5, 11}, 9, 3.0f), targets},
      {Make("conv2d", {3, 7, 7}, {{"out_channels", 4}, {"kernel", 3}, {"stride", 2}, {"padding", 1}}),
       Random({2, 3, 7, 7}, 10),
       {}},
      {Make("maxpool", {2, 6, 6}, {{"kernel", 2}, {"stride", 2}}), Random({2, 2, 6, 6}, 11), {}},
      {Make("avgpool", {2, 5, 5}, {{"kernel", 3}, {"stride", 2}, {"padding", 1}}), Random({2, 2, 5, 5}, 12), {}},
      {Make("flatten", {2, 3, 3}, {}), Random({2, 2, 3, 3}, 13), {}},
      // Exact data past 2^8 (bf16's integers stop being exact at 257): ids and argmax indices would
      // land on the wrong rows / pixels if the decorator rounded them (Saved::exact).
      {Make("embedding", {5}, {{"vocab", 700}, {"hidden", 8}, {"positions", 5}}), big_ids, {}},
      {Make("maxpool", {1, 40, 40}, {{"kernel", 2}, {"stride", 2}}), Random({2, 1, 40, 40}, 14), {}},
  };
}

struct Pass {
  Tensor y, dx;
  std::vector<Tensor> grads;
};

Pass Run(const Case& c, DType storage) {
  KernelOptions o;
  o.seed = 5;
  std::unique_ptr<LayerKernel> k;
  REQUIRE_OK(MakeKernel(c.layer, o, &k));
  const bool loss = c.layer.kind == LayerKind::kLoss;
  REQUIRE_OK(WrapMixedPrecision(storage, loss, &k));
  if (!c.targets.empty()) k->SetTargets(c.targets);
  Pass p;
  Saved s;
  const bool ids = c.layer.kind == LayerKind::kEmbedding;
  REQUIRE_OK(k->Forward(ids ? c.x : c.x.Converted(storage), &p.y, &s));
  CHECK(p.y.dtype() == (loss ? DType::kFp32 : storage));
  k->ZeroGrads();
  Tensor r = Random(p.y.shape(), 11);
  REQUIRE_OK(k->BackwardInput(r.Converted(loss ? DType::kFp32 : storage), &p.dx, &s));
  REQUIRE_OK(k->BackwardWeight(&s));
  for (Param* q : k->Params()) {
    CHECK(q->value.dtype() == storage);
    CHECK(q->grad.dtype() == DType::kFp32);
    CHECK(q->master.empty() == (storage == DType::kFp32));
    p.grads.push_back(q->grad);
  }
  return p;
}

// Tolerances (relative, in the 2-norm over a tensor): bf16 keeps 8 significant bits, so each
// rounding of a weight, input, activation or Saved tensor moves an element by up to 2^-9 = 0.2%
// (0.4% relative to the smaller neighbour); a layer chains a few such roundings and its gradients a
// few more. Measured worst over these layers: bf16 0.82% (an MoE expert's gradient), fp16 0.067%;
// the bounds, 2% and 0.2%, leave ~2.5x margin. fp16 keeps 11 bits (2^-12 = 0.024% per rounding).
TEST_CASE("every layer kernel wrapped in bf16 and fp16 agrees with its fp32 kernel within the documented tolerance") {
  for (const Case& c : Cases()) {
    Pass ref = Run(c, DType::kFp32);
    for (auto [storage, tol] : {std::pair{DType::kBf16, 2e-2}, std::pair{DType::kFp16, 2e-3}}) {
      INFO(LayerKindName(c.layer.kind) << " in " << std::string(DTypeName(storage)));
      Pass mp = Run(c, storage);
      CHECK(RelError(mp.y, ref.y) <= tol);
      CHECK(RelError(mp.y, ref.y) > 0);  // it did round: the comparison can fail
      if (!ref.dx.empty()) {
        CHECK(mp.dx.dtype() == storage);
        CHECK(RelError(mp.dx, ref.dx) <= tol);
      }
      REQUIRE(mp.grads.size() == ref.grads.size());
      for (size_t i = 0; i < ref.grads.size(); ++i) {
        CHECK(RelError(mp.grads[i], ref.grads[i]) <= tol);
      }
    }
  }
}

TEST_CASE("WrapMixedPrecision: fp32 is a no-op, fp8 is refused") {
  std::unique_ptr<LayerKernel> k;
  REQUIRE_OK(MakeKernel(Make("linear", {3, 8}, {{"out_features", 5}}), {}, &k));
  LayerKernel* raw = k.get();
  REQUIRE_OK(WrapMixedPrecision(DType::kFp32, false, &k));
  CHECK(k.get() == raw);
  CHECK(!WrapMixedPrecision(DType::kFp8, false, &k).ok());
  CHECK(StorageDType(DType::kFp8) == DType::kBf16);
  CHECK(StorageDType(DType::kFp16) == DType::kFp16);
}

TEST_CASE("optimizer: a 16-bit weight's master steps as the fp32 weight does and the weight is round(master)") {
  for (DType d : {DType::kBf16, DType::kFp16}) {
    for (OptimizerConfig::Kind kind : {OptimizerConfig::kAdam, OptimizerConfig::kSgd}) {
      OptimizerConfig c;
      c.kind = kind;
      c.lr = 0.01;
      c.momentum = 0.9;
      Param full{"w", Random({64}, 1), Tensor::Zeros({64}), {}};
      Param mixed{"w", full.value.Converted(d), Tensor::Zeros({64}), full.value.Converted(DType::kFp32)};
      Optimizer a(c), b(c);
      for (int step = 0; step < 4; ++step) {
        Tensor g = Random({64}, 10 + static_cast<uint64_t>(step));
        for (Param* p : {&full, &mixed}) std::copy(g.data(), g.data() + 64, p->grad.data());
        REQUIRE_OK(a.Step({&full}));
        REQUIRE_OK(b.Step({&mixed}));
      }
      CHECK(mixed.master.ToVector() == full.value.ToVector());  // the same fp32 arithmetic
      CHECK(mixed.value.dtype() == d);
      std::vector<float> w = mixed.value.ToVector(), m = mixed.master.ToVector();
      for (size_t i = 0; i < w.size(); ++i) CHECK(w[i] == RoundTo(d, m[i]));
    }
  }
}

int64_t LiveBytes() { return GetMemoryStats(Device::kCpu).current_bytes; }

TEST_CASE("memory: a wrapped kernel holds 2 B value + 4 B grad + 4 B master per parameter, and half the Saved bytes") {
  const Layer l = Make("transformer_block", {8, 32}, {{"heads", 4}, {"ffn", 64}});
  const int64_t before = LiveBytes();
  std::unique_ptr<LayerKernel> mp, full;
  REQUIRE_OK(MakeKernel(l, {}, &mp));
  REQUIRE_OK(WrapMixedPrecision(DType::kBf16, false, &mp));
  int64_t params = 0;
  for (Param* p : mp->Params()) params += p->value.numel();
  CHECK(LiveBytes() - before == params * (2 + 4 + 4));
  REQUIRE_OK(MakeKernel(l, {}, &full));
  Tensor x = Random({4, 8, 32}, 3), x16 = x.Converted(DType::kBf16);
  Tensor dy = Random({4, 8, 32}, 4), dy16 = dy.Converted(DType::kBf16);
  // Bytes held after the forward (the Saved and y) and after backward-input (the Saved W needs, y, dx).
  auto held = [&](LayerKernel* k, const Tensor& in, const Tensor& grad) {
    Saved s;
    Tensor y, dx;
    const int64_t at = LiveBytes();
    REQUIRE_OK(k->Forward(in, &y, &s));
    const int64_t after_f = LiveBytes() - at;
    REQUIRE_OK(k->BackwardInput(grad, &dx, &s));
    return std::pair{after_f, LiveBytes() - at};
  };
  const auto [f32, b32] = held(full.get(), x, dy);
  const auto [f16, b16] = held(mp.get(), x16, dy16);
  INFO("forward: fp32 " << f32 << " B, bf16 " << f16 << " B; backward-input: fp32 " << b32 << " B, bf16 " << b16
                        << " B");
  CHECK(f32 > 0);
  CHECK(f16 * 2 == f32);
  CHECK(b16 * 2 == b32);  // the input and dy stay shared with the caller's tensors, as in fp32
}

TEST_CASE("LossScaler: overflow skips, hysteresis 2 halves on the second, 1000 clean steps double") {
  LossScaler s;
  CHECK(s.scale() == 65536);
  CHECK(!s.Update(true));
  CHECK(s.scale() == 65536);  // the first overflow spends the hysteresis
  CHECK(!s.Update(true));
  CHECK(s.scale() == 32768);
  CHECK(!s.Update(true));
  CHECK(s.scale() == 16384);  // the tolerance is restored only by growth
  for (int i = 0; i < 999; ++i) CHECK(s.Update(false));
  CHECK(s.scale() == 16384);
  CHECK(s.Update(false));
  CHECK(s.scale() == 32768);
  CHECK(!s.Update(true));
  CHECK(s.scale() == 32768);  // hysteresis restored by the growth
  CHECK(s.skipped() == 4);
  LossScaler tiny(1, 1000, 1);
  CHECK(!tiny.Update(true));
  CHECK(tiny.scale() == 1);  // never below 1
}

TEST_CASE(
    "LossScaler: State / SetState carry the scale, the clean steps and the hysteresis left; damaged states refused") {
  LossScaler a(1e7);
  CHECK_FALSE(a.Update(true));  // spends the hysteresis
  CHECK_FALSE(a.Update(true));  // halves: 5e6
  CHECK(a.Update(false));
  const std::vector<float> st = a.State();
  REQUIRE(st.size() == 3);
  CHECK(st[0] == 5e6f);
  CHECK(st[1] == 1.0f);
  CHECK(st[2] == 0.0f);
  LossScaler b;
  REQUIRE(b.SetState(st).ok());
  CHECK(b.scale() == 5e6);
  CHECK_FALSE(b.Update(true));  // no hysteresis left: the next overflow halves at once, as it would in a
  CHECK(b.scale() == 2.5e6);
  // Overflows past the hysteresis keep "none left" (0), a state a resume accepts.
  CHECK_FALSE(b.Update(true));
  CHECK(b.scale() == 1.25e6);
  CHECK(b.State()[2] == 0.0f);
  LossScaler r;
  REQUIRE(r.SetState(b.State()).ok());
  CHECK(r.scale() == 1.25e6);
  for (const std::vector<float>& bad :
       std::vector<std::vector<float>>{{0.5f, 0, 1}, {65536, 1000, 1}, {65536, 0, 3}, {65536, 1.5f, 1}, {65536, 0}}) {
    LossScaler c;
    CHECK_FALSE(c.SetState(bad).ok());
    CHECK(c.scale() == 65536);  // untouched
  }
}

TEST_CASE("UnscaleAndCheck multiplies the gradients and finds inf / NaN") {
  Param a{"a", Tensor::Zeros({3}), Tensor::FromVector({3}, {2, 4, 8}), {}};
  Param b{"b", Tensor::Zeros({2}), Tensor::FromVector({2}, {1, 2}), {}};
  CHECK(!UnscaleAndCheck({&a, &b}, 0.5));
  CHECK(a.grad.ToVector() == std::vector<float>{1, 2, 4});
  b.grad.data()[1] = std::numeric_limits<float>::infinity();
  CHECK(UnscaleAndCheck({&a, &b}, 1.0));
  b.grad.data()[1] = std::nanf("");
  CHECK(UnscaleAndCheck({&a, &b}, 1.0));
}

}  // namespace
}  // namespace planner
