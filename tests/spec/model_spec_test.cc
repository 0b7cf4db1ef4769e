// Model files: Megatron's parameter and FLOP equations, shapes, and errors.
#include <cmath>

#include "spec/cluster_spec.h"
#include "spec/model_spec.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// Megatron-LM GPT; `attention` "unfused" is the attention Megatron SC'21 and Korthikanti et al. costed.
ModelSpec Gpt(int64_t l, int64_t h, int64_t a, const std::string& attention = "flash") {
  GptConfig g;
  g.layers = l;
  g.hidden = h;
  g.heads = a;
  g.seq = 2048;
  g.vocab = 51200;
  g.attention = attention;
  ModelSpec m;
  REQUIRE_OK(BuildGptModel(g, DType::kFp16, &m));
  return m;
}

TEST_CASE("GPT template reproduces Megatron-LM Table 1 parameter counts") {
  struct Row {
    int64_t a, h, l;
    double billions;
  };
  const Row rows[] = {{24, 2304, 24, 1.7},      {32, 3072, 30, 3.6},     {32, 4096, 36, 7.5},
                      {48, 6144, 40, 18.4},     {64, 8192, 48, 39.1},    {80, 10240, 60, 76.1},
                      {96, 12288, 80, 145.6},   {128, 16384, 96, 310.1}, {128, 20480, 105, 529.6},
                      {160, 25600, 128, 1008.0}};
  for (const auto& r : rows) {
    ModelSpec m = Gpt(r.l, r.h, r.a);
    // Eq. (2) counts no final layernorm (2h parameters); everything else matches exactly.
    double eq2 = MegatronParamCount(m.gpt);
    CHECK(m.TotalParams() - 2.0 * static_cast<double>(r.h) == doctest::Approx(eq2).epsilon(1e-12));
    CHECK(std::round(m.TotalParams() / 1e8) / 10 == doctest::Approx(r.billions));
  }
}

TEST_CASE("GPT FLOPs per iteration equal Megatron eq. (3) and Korthikanti eq. (7)") {
  // Unfused attention (what the equations count): the hardware FLOPs are the equations'.
  ModelSpec m = Gpt(96, 12288, 96, "unfused");
  const double batch = 1536;
  CHECK(m.IterationFlops(batch, /*full_recompute=*/true) ==
        doctest::Approx(MegatronFlopsPerIteration(m.gpt, batch)).epsilon(1e-12));
  CHECK(m.IterationFlops(batch, /*full_recompute=*/false) ==
        doctest::Approx(ModelFlopsPerIteration(m.gpt, batch)).epsilon(1e-12));
  // Model FLOPs (the MFU numerator) count the causal half of the s^2 core (Megatron-LM's
  // formula since 2025): eq. (7) less 6 s^2 h per layer, 72 B s l h^2 (1 + s/(12h) + V/(12 l h)).
  const double s = 2048, h = 12288, l = 96;
  CHECK(m.ModelFlops(batch) == doctest::Approx(CausalModelFlopsPerIteration(m.gpt, batch)).epsilon(1e-12));
  CHECK(m.ModelFlops(batch) ==
        doctest::Approx(ModelFlopsPerIteration(m.gpt, batch) - batch * l * 6 * s * s * h).epsilon(1e-12));
  // Flash (the default): the same model FLOPs; the hardware count differs by the attention core
  // only: causal forward 2 s^2 h instead of 4 s^2 h, backward 2.5 x that (5 s^2 h) instead of 8 s^2 h.
  ModelSpec f = Gpt(96, 12288, 96);
  CHECK(f.ModelFlops(batch) == doctest::Approx(CausalModelFlopsPerIteration(f.gpt, batch)).epsilon(1e-12));
  CHECK(f.IterationFlops(batch, false) ==
        doctest::Approx(ModelFlopsPerIteration(f.gpt, batch) - batch * l * (12 - 7) * s * s * h).epsilon(1e-12));
}

TEST_CASE("transformer block stash matches Korthikanti's sbh(34 + 5as/h) in fp16") {
  ModelSpec m = Gpt(2, 4096, 32, "unfused");  // Korthikanti's Table 2 is Megatron's unfused softmax
  const Layer& b = m.layers[1];
  REQUIRE(b.kind == LayerKind::kTransformerBlock);
  double s = 2048, h = 4096, a = 32;
  CHECK(b.stash_bytes == doctest::Approx(s * h * (34 + 5 * a * s / h)));
  CHECK(b.stash_bytes_selective == doctest::Approx(s * h * 34));
  CHECK(b.stash_bytes_tp_replicated == doctest::Approx(s * h * 10));
  CHECK(b.stash_bytes_full == doctest::Approx(2 * s * h));
  CHECK(b.bwd_flops() == doctest::Approx(2 * b.fwd_flops));
}

TEST_CASE("explicit layer lists infer shapes through repeat blocks") {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/vgg16.yaml"), &m));
  CHECK(m.layers.size() == 40);
  CHECK(m.TotalParams() == doctest::Approx(138357544));  // torchvision's VGG-16
  CHECK(m.layers[31].out_shape == std::vector<int64_t>{25088});
  ModelSpec r;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/resnet50.yaml"), &r));
  CHECK(r.layers.back().kind == LayerKind::kLoss);
  CHECK(r.layers[r.layers.size() - 3].out_shape == std::vector<int64_t>{2048});
}

Status Parse(const std::string& text, ModelSpec* m) { return ParseModelSpec("m.yaml", text, m); }

TEST_CASE("bad model files give one message with file, line, field and fix") {
  ModelSpec m;
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hiden: 64, heads: 2, seq: 8, vocab: 10}\n",
       "m.yaml:3: field 'gpt.hiden': unknown key 'hiden', did you mean 'hidden'?"},
      {"name: x\nglobal_batch: 8\nbatch: 3\ngpt: {layers: 2, hidden: 64, heads: 2, seq: 8, vocab: 10}\n",
       "m.yaml:3: field 'batch': unknown key 'batch'"},
      {"name: x\nglobal_batch: eight\ngpt: {layers: 2, hidden: 64, heads: 2, seq: 8, vocab: 10}\n",
       "m.yaml:2: field 'global_batch': must be an integer, got 'eight'"},
      {"name: x\nglobal_batch: 0\ngpt: {layers: 2, hidden: 64, heads: 2, seq: 8, vocab: 10}\n",
       "m.yaml:2: field 'global_batch': must be at least 1, got 0"},
      {"name: x\nglobal_batch: 8\ngpt: {layers: -2, hidden: 64, heads: 2, seq: 8, vocab: 10}\n",
       "field 'gpt.layers': must be at least 1, got -2"},
      {"name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: linear, out_features: 8}\n  - {type: linear, "
       "in_features: 9, out_features: 4}\n",
       "m.yaml:6: field 'layers[1]' (linear): in_features is 9 but the input is [8]"},
      {"name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: lineer, out_features: 8}\n",
       "m.yaml:5: field 'layers[0].type': unknown layer type 'lineer', did you mean 'linear'?"},
      {"name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: conv2d, out_channels: 8, kernel: 3}\n",
       "conv2d needs a [channels, height, width] input, got [16]"},
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 3, seq: 8, vocab: 10}\n",
       "heads (3) must divide hidden (64)"},
      {"name: x\nglobal_batch: [8\n", "m.yaml:3:1: YAML syntax error"},
      {"name: x\nglobal_batch: 8\n", "give exactly one of 'gpt:'"},
  };
  for (const auto& c : cases) {
    Status s = Parse(c.text, &m);
    INFO(c.text);
    INFO(s.message());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find(c.expect) != std::string::npos);
  }
  Status missing = LoadModelSpec("/nonexistent/model.yaml", &m);
  CHECK(missing.code() == StatusCode::kNotFound);
  CHECK(missing.message().find("/nonexistent/model.yaml: cannot open file") != std::string::npos);
}

TEST_CASE("cluster files: totals, peaks and errors") {
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &c));
  CHECK(c.TotalGpus() == 4480);  // Selene: 560 DGX A100 nodes
  CHECK(c.PeakFlops(DType::kBf16) == doctest::Approx(312e12));
  Status s = ParseClusterSpec("c.yaml",
                              "name: c\ngpu: {name: g, peak_tflops: {fp16: 1}, memory_GiB: -1, hbm_bandwidth_GBps: "
                              "1}\ntopology: [{name: n, size: 8, bandwidth_GBps: 1}]\n",
                              &c);
  CHECK(s.message().find("c.yaml:2: field 'gpu.memory_GiB': must be greater than 0") != std::string::npos);
  s = ParseClusterSpec("c.yaml",
                       "name: c\ngpu: {name: g, peak_tflops: {fp16: 1}, memory_GiB: 8, hbm_bandwidth_GBps: "
                       "1}\ntopology: [{name: n, size: 8, bandwith_GBps: 1}]\n",
                       &c);
  CHECK(s.message().find("did you mean 'bandwidth_GBps'?") != std::string::npos);
}

// Fuzz-style robustness: every truncation and byte flip of the bundled files
// either parses or fails with InvalidArgument; never a crash (ASan/UBSan in CI's sanitizer run).
TEST_CASE("truncated and corrupted model files never crash the reader") {
  std::string text =
      "name: x\nglobal_batch: 8\ninput: [3, 32, 32]\nlayers:\n  - {type: conv2d, out_channels: 8, kernel: 3, padding: "
      "1}\n  - repeat: 2\n    layers:\n      - {type: relu}\n      - {type: maxpool, kernel: 2}\n  - {type: flatten}\n "
      " - {type: linear, out_features: 10}\n  - {type: loss}\n";
  ModelSpec m;
  REQUIRE_OK(Parse(text, &m));
  for (size_t n = 0; n < text.size(); ++n) {
    Status s = Parse(text.substr(0, n), &m);
    CHECK((s.ok() || s.code() == StatusCode::kInvalidArgument));
  }
  const char flips[] = {'-', '0', ':', '[', '}', 'x', ' ', '9'};
  for (size_t i = 0; i < text.size(); i += 3) {
    for (char f : flips) {
      std::string t = text;
      t[i] = f;
      Status s = Parse(t, &m);
      CHECK((s.ok() || s.code() == StatusCode::kInvalidArgument));
    }
  }
}

}  // namespace
}  // namespace planner
