// MoE blocks, MLA and MTP modules (docs/cost_model.md section 1, "MoE, MLA, MTP"): total and
// active parameters of DeepSeek-V3, Mixtral 8x7B and Qwen3-MoE against tensor-by-tensor sums and the
// published figures; one DeepSeek-V3 MLA layer against the hand count; a small moe_block's and MLA
// layer's FLOPs against the brute-force sum of their GEMMs; the model-file errors.
#include <cmath>
#include <fstream>
#include <iterator>

#include "spec/cluster_spec.h"
#include "spec/layer_catalog.h"
#include "spec/model_spec.h"
#include "spec/plan.h"
#include "tests/spec/bundled_models.h"
#include "tests/test_util.h"

namespace planner {
namespace {

ModelSpec Load(const std::string& file) { return testing::LoadBundledModel(file); }

// Tensor-by-tensor counts of a SwiGLU MoE decoder without biases (RMSNorm, untied embeddings).
struct MoeShape {
  double layers, h, v;
  double attention;          // one layer's attention parameters
  double dense_layers, ffn;  // dense blocks and their FFN
  double experts, top_k, expert_ffn, shared_ffn;
};
double Swiglu(double h, double f) { return 3 * h * f; }
double MoeLayer(const MoeShape& m, double experts_counted) {
  return m.attention + 2 * m.h + m.experts * m.h + Swiglu(m.h, m.shared_ffn) +
         experts_counted * Swiglu(m.h, m.expert_ffn);
}
double Count(const MoeShape& m, bool active) {
  const double dense = m.attention + Swiglu(m.h, m.ffn) + 2 * m.h;
  const double moe = MoeLayer(m, active ? m.top_k : m.experts);
  return m.dense_layers * dense + (m.layers - m.dense_layers) * moe + 2 * m.v * m.h +
         m.h;  // + embedding, lm_head, final norm
}
// Standard (GQA) attention without biases: Q [h, a d], K and V [h, g d], output [a d, h].
double Gqa(double h, double a, double g, double d) { return h * a * d + 2 * h * g * d + a * d * h; }
// DeepSeek-V3's MLA, by hand: q_a [7168, 1536] + q_a_layernorm 1536, q_b [1536, 128 x 192],
// kv_a_proj_with_mqa [7168, 512 + 64] + kv_a_layernorm 512, kv_b [512, 128 x (128 + 128)], o [128 x 128, 7168].
constexpr double kDeepSeekMla =
    7168.0 * 1536 + 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 + 512 + 512.0 * 128 * 256 + 128.0 * 128 * 7168;

TEST_CASE("DeepSeek-V3 MLA layer: 187,107,328 parameters, down projections replicated over TP") {
  CHECK(kDeepSeekMla == 187107328.0);
  ModelSpec m = Load("deepseek-v3.yaml");
  const Layer& dense = m.layers[1];
  REQUIRE(dense.kind == LayerKind::kTransformerBlock);
  CHECK(dense.params == kDeepSeekMla + Swiglu(7168, 18432) + 2 * 7168);
  CHECK(dense.tp_replicated_params == 7168.0 * (1536 + 512 + 64) + 1536 + 512);
  CHECK(dense.tp_divisor == 128);
  const Layer& moe = m.layers[4];
  REQUIRE(moe.kind == LayerKind::kMoeBlock);
  CHECK(moe.params == kDeepSeekMla + 2 * 7168 + 256 * 7168.0 + Swiglu(7168, 2048) * 257);
  CHECK(moe.expert_params == 256 * Swiglu(7168, 2048));
  CHECK(moe.experts == 256);
  CHECK(moe.top_k == 8);
  CHECK(moe.tp_replicated_params == dense.tp_replicated_params + 256 * 7168.0);  // + the router
  CHECK(moe.tp_divisor == 128);                                                  // gcd(heads, shared_ffn 2048)
  CHECK(moe.moe_dispatch_bytes == 2.0 * 4096 * 8 * 7168);  // the dispatch is costed at dt (2 bytes) under fp8
  // Ring attention passes K (a x 192) and V (a x 128) per token.
  CHECK(moe.cp_kv_bytes == 2.0 * 4096 * 128 * (192 + 128));
}

TEST_CASE("MoE models: total and active parameters against tensor sums and the published figures") {
  struct Row {
    const char* file;
    MoeShape shape;
    double total, active;          // published
    double total_tol, active_tol;  // relative
  };
  const double ds_attn = kDeepSeekMla;
  const Row rows[] = {
      // Mixtral paper: 46.7B total, 12.9B active (embeddings included).
      {"mixtral-8x7b.yaml", {32, 4096, 32000, Gqa(4096, 32, 8, 128), 0, 0, 8, 2, 14336, 0}, 46.7e9, 12.9e9, 0.01, 0.01},
      // Qwen3 report: 235B total, 22B activated.
      {"qwen3-235b-a22b.yaml",
       {94, 4096, 151936, Gqa(4096, 64, 4, 128), 0, 0, 128, 8, 1536, 0},
       235e9,
       22e9,
       0.01,
       0.01},
      // Qwen3 report: 30.5B total, 3.3B activated. The tensor sum is 3.35B (embedding and lm_head
      // included, as Mixtral's 12.9B includes them): the published 3.3B is that figure cut to two digits.
      {"qwen3-30b-a3b.yaml",
       {48, 2048, 151936, Gqa(2048, 32, 4, 128), 0, 0, 128, 8, 768, 0},
       30.5e9,
       3.3e9,
       0.01,
       0.02},
      // DeepSeek-V3 report: 671B total, 37B activated. The tensor sum is 37.55B with the embedding
      // and lm_head (36.63B without the input embedding): 37B is the sum cut to two digits.
      {"deepseek-v3.yaml", {61, 7168, 129280, ds_attn, 3, 18432, 256, 8, 2048, 2048}, 671e9, 37e9, 0.01, 0.02},
  };
  for (const auto& r : rows) {
    INFO(r.file);
    ModelSpec m = Load(r.file);
    const double total = Count(r.shape, false), active = Count(r.shape, true);
    CHECK(m.TotalParams() == total);
    CHECK(m.ActiveParams() == doctest::Approx(active).epsilon(1e-12));
    CHECK(std::abs(m.TotalParams() / r.total - 1) < r.total_tol);
    CHECK(std::abs(m.ActiveParams() / r.active - 1) < r.active_tol);
  }
  // The exact sums (reported by the plan as model_parameters and model_active_parameters).
  CHECK(Load("deepseek-v3.yaml").TotalParams() == 671026404352.0);
  CHECK(Load("deepseek-v3.yaml").ActiveParams() == 37552282624.0);
  CHECK(Load("mixtral-8x7b.yaml").TotalParams() == 46702792704.0);
  CHECK(Load("mixtral-8x7b.yaml").ActiveParams() == 12879925248.0);
}

TEST_CASE("DeepSeek-V3's MTP module: counted apart, one MoE block, norms, the 2h -> h projection") {
  ModelSpec m = Load("deepseek-v3.yaml");
  REQUIRE(m.layers.size() == 1 + 61 + 1 + 3);  // embedding, blocks, mtp0, final norm, lm_head, loss
  const Layer& mtp = m.layers[62];
  CHECK(mtp.name == "mtp0");
  CHECK(mtp.kind == LayerKind::kMtp);
  CHECK(m.layers[63].kind == LayerKind::kRmsnorm);
  CHECK(mtp.out_shape == std::vector<int64_t>{4096, 7168});
  const double h = 7168, s = 4096, v = 129280;
  const Layer& block = m.layers[61];
  // hnorm, enorm, the head's norm; eh_proj [2h, h]; one MoE block as the main model's.
  CHECK(m.MtpParams() == 3 * h + 2 * h * h + block.params);
  CHECK(mtp.expert_params == block.expert_params);
  // Its FLOPs: the block's, the projection's and the shared output head's.
  CHECK(mtp.fwd_flops == block.fwd_flops + 2 * s * 2 * h * h + 2 * s * h * v);
  CHECK(mtp.bwd_weight_flops == block.bwd_weight_flops + 2 * s * 2 * h * h + 2 * s * h * v);
  CHECK(m.TotalParams() == 671026404352.0);  // unchanged by the module
  CHECK(m.MtpParams() / 1e9 == doctest::Approx(11.61).epsilon(0.001));
  // fp8: beyond its block's, the module saves eh_proj's 2h input x 1 byte; the output head's input stays
  // 2 bytes (DeepSeek-V3 3.3.1 keeps the head in BF16), as the fp32 logits and the norms' inputs.
  REQUIRE(m.dtype == DType::kFp8);  // the model file's precision
  ModelSpec bf = m;
  REQUIRE_OK(BuildGptModel(m.gpt, DType::kBf16, &bf));
  CHECK(mtp.stash_bytes - block.stash_bytes == 2 * 3 * s * h + 1 * 2 * s * h + 2 * s * h + 4 * s * v + 4 * s);
  CHECK(bf.layers[62].stash_bytes - bf.layers[61].stash_bytes ==
        2 * 3 * s * h + 2 * 2 * s * h + 2 * s * h + 4 * s * v + 4 * s);
  // One MoE block, bf16 less fp8: x (the QKV-down input), the up projections' inputs, the shared fc2
  // input and every routed copy's permuted and fc2 inputs, 1 byte each (flash: O stays 2 bytes).
  CHECK(bf.layers[61].stash_bytes - block.stash_bytes == s * (h + 1536 + 512 + 2048 + 8 * (h + 2048)));
  CHECK(m.layers[64].kind == LayerKind::kLmHead);
  CHECK(m.layers[64].stash_bytes == bf.layers[64].stash_bytes);  // the output head's input, bf16
  CHECK(m.layers[65].stash_bytes == bf.layers[65].stash_bytes);  // the loss's fp32 logits
}

TEST_CASE("h800: dgx-h100's GPU and IB, NVLink cut to DeepSeek's 160 GB/s, 2048 GPUs") {
  ClusterSpec h800, h100;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/h800.yaml"), &h800));
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-h100.yaml"), &h100));
  CHECK(h800.TotalGpus() == 2048);
  CHECK(h800.GpusPerUnit(0) == 8);
  for (DType d : {DType::kBf16, DType::kFp8}) {
    CHECK(h800.PeakFlops(d) == h100.PeakFlops(d));
    CHECK(h800.Efficiency(d) == h100.Efficiency(d));
  }
  CHECK(h800.PeakFlops(DType::kFp8) == doctest::Approx(1979e12));
  CHECK(h800.hbm_bandwidth_GBps == 3350);
  CHECK(h800.levels[0].bandwidth_GBps == 160);
  CHECK(h800.levels[1].bandwidth_GBps == h100.levels[1].bandwidth_GBps);  // 8 x 400 Gb/s per node, as DGX H100
}

TEST_CASE("plan files carry model_active_parameters and mtp_parameters (written when not 0)") {
  Plan p;
  p.model_parameters = 671026404352.0;
  p.model_active_parameters = 37552282624.0;
  p.mtp_parameters = 11610067968.0;
  const std::string text = PlanToYaml(p);
  CHECK(text.find("model_active_parameters: 3.755228262e+10\n") != std::string::npos);  // 10 significant digits
  CHECK(text.find("mtp_parameters: 1.161006797e+10\n") != std::string::npos);
  p.mtp_parameters = 0;
  CHECK(PlanToYaml(p).find("mtp_parameters") == std::string::npos);
}

TEST_CASE("the MoE dispatcher: names round-trip, plan files carry flex (alltoall is the default, not written)") {
  for (MoeDispatcher d : {MoeDispatcher::kAllToAll, MoeDispatcher::kFlex}) {
    MoeDispatcher back = d == MoeDispatcher::kFlex ? MoeDispatcher::kAllToAll : MoeDispatcher::kFlex;
    REQUIRE(ParseMoeDispatcher(MoeDispatcherName(d), &back));
    CHECK(back == d);
  }
  MoeDispatcher untouched = MoeDispatcher::kFlex;
  CHECK_FALSE(ParseMoeDispatcher("deepep", &untouched));  // a flex backend, not a dispatcher
  CHECK_FALSE(ParseMoeDispatcher("", &untouched));
  CHECK(untouched == MoeDispatcher::kFlex);
  // A plan file (the codegen tests' tiny plan) with the key added: read back as the enum, written again as flex.
  std::ifstream in(testing::SourcePath("tests/codegen/plans/tiny-gpt-pp2.plan.yaml"));
  REQUIRE(in.good());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("moe_dispatcher") == std::string::npos);  // alltoall, the default, is not written
  const size_t at = text.find("  dtype: ");
  REQUIRE(at != std::string::npos);
  text.insert(at, "  moe_dispatcher: flex\n");
  Plan p;
  REQUIRE_OK(ParsePlan("plan.yaml", text, &p));
  CHECK(p.moe_dispatcher == MoeDispatcher::kFlex);
  CHECK(PlanToYaml(p).find("moe_dispatcher: \"flex\"") != std::string::npos);
  p.moe_dispatcher = MoeDispatcher::kAllToAll;
  CHECK(PlanToYaml(p).find("moe_dispatcher") == std::string::npos);
}

// A small moe_block: s 16, h 32, 4 heads of 8, 2 KV heads, 4 experts of SwiGLU 24, top-2, shared 16.
LayerAttrs SmallMoe() {
  LayerAttrs a;
  a.ints = {{"heads", 4}, {"kv_heads", 2}, {"experts", 4}, {"top_k", 2}, {"expert_ffn", 24}, {"shared_ffn", 16}};
  a.strings = {{"act", "swiglu"}, {"norm", "rmsnorm"}, {"position", "rope"}, {"attention", "flash"}};
  a.bools = {{"bias", false}, {"dropout", false}};
  return a;
}

struct Gemm {
  double m, k, n;
  double Flops() const { return 2 * m * k * n; }
};

TEST_CASE("moe_block FLOPs equal the brute-force sum of its GEMMs; capacity pads, model FLOPs do not") {
  const double s = 16, h = 32, a = 4, g = 2, d = 8, e = 4, k = 2, fe = 24, fs = 16;
  std::vector<Gemm> weight_gemms = {{s, h, a * d}, {s, h, g * d}, {s, h, g * d}, {s, a * d, h},  // Q, K, V, output
                                    {s, h, e},                                                   // router
                                    {s, h, fs},    {s, h, fs},    {s, fs, h}};  // shared gate, up, down
  const double per_expert = s * k / e;  // balanced routing: every expert gets s k / E tokens
  for (int x = 0; x < 4; ++x) {
    for (const Gemm& gm : {Gemm{per_expert, h, fe}, Gemm{per_expert, h, fe}, Gemm{per_expert, fe, h}})
      weight_gemms.push_back(gm);
  }
  double weights = 0, experts = 0;
  for (size_t i = 0; i < weight_gemms.size(); ++i) {
    weights += weight_gemms[i].Flops();
    if (i >= 8) experts += weight_gemms[i].Flops();
  }
  double core = 0;  // causal: half of Q K^T and of P V per head
  for (int head = 0; head < 4; ++head) core += (Gemm{s, d, s}.Flops() + Gemm{s, s, d}.Flops()) / 2;
  Layer l;
  REQUIRE_OK(InferLayer("moe_block", SmallMoe(), {16, 32}, DType::kBf16, &l));
  CHECK(l.fwd_flops == weights + core);
  CHECK(l.bwd_weight_flops == weights);
  CHECK(l.bwd_input_flops == weights + 2.5 * core);
  CHECK(l.model_flops == 3 * (weights + core));
  CHECK(l.expert_fwd_flops == experts);
  CHECK(l.expert_bwd_input_flops == experts);
  CHECK(l.expert_bwd_weight_flops == experts);
  CHECK(l.attention_core_fwd_flops == core);
  CHECK(l.params == Gqa(h, a, g, d) + 2 * h + e * h + Swiglu(h, fs) + e * Swiglu(h, fe));
  CHECK(l.expert_params == e * Swiglu(h, fe));
  CHECK(l.moe_dispatch_bytes == 2 * s * k * h);
  // Routed token copies kept: permuted input, fc1 output (2 fe), fc2 input (fe).
  CHECK(l.expert_stash_bytes == 2 * s * k * (h + 3 * fe));
  CHECK(l.tp_divisor == 2);  // gcd(heads 4, kv_heads 2, shared_ffn 16)

  // Stash per tensor (docs/cost_model.md, MoE): attention (x, Q, K, V, O; the fp32 LSE), two norm
  // inputs, the fp32 routing scores, the shared MLP (input, gate/up output, down input), the routed copies.
  const double dt = 2, kept_attn = dt * s * (h + a * d + 2 * g * d + a * d) + 4 * a * s;
  const double moe_stash = 4 * s * e + dt * s * (h + 3 * fs) + dt * s * k * (h + 3 * fe);
  CHECK(l.stash_bytes == kept_attn + 2 * dt * s * h + moe_stash);
  CHECK(l.stash_bytes_selective == l.stash_bytes);  // flash: nothing s^2 to drop
  CHECK(l.stash_bytes_full == dt * s * h);
  CHECK(l.stash_bytes_tp_replicated == dt * s * h + 2 * dt * s * h + dt * s * h + 4 * s * e);
  // Memory-bound: dropout + residual twice, RoPE on Q and K, two norms, scores (fp32), SwiGLU of the
  // shared and routed MLPs, permute and unpermute.
  CHECK(l.fwd_mem_bytes == dt * 4 * s * h + dt * 2 * s * (a * d + g * d) + 2 * dt * 2 * s * h + 4 * 2 * s * e +
                               dt * 3 * s * fs + dt * (3 * s * k * fe + 2 * (s * h + s * k * h)) + dt * 4 * s * h);
  CHECK(l.bwd_mem_bytes == dt * 8 * s * h + dt * 2 * s * (a * d + g * d) + 2 * dt * 4 * s * h + 4 * 3 * s * e +
                               dt * 5 * s * fs + dt * (5 * s * k * fe + 2 * (s * h + s * k * h)) + dt * 8 * s * h);
  CHECK(l.tp_allreduces_fwd == 2);
  CHECK(l.tp_allreduce_bytes == dt * s * h);
  CHECK(l.tp_replicated_params == e * h);
  CHECK(l.tp_replicated_fwd_flops == 2 * s * h * e);

  LayerAttrs padded = SmallMoe();
  padded.reals["capacity_factor"] = 1.5;
  Layer c;
  REQUIRE_OK(InferLayer("moe_block", padded, {16, 32}, DType::kBf16, &c));
  CHECK(c.expert_fwd_flops == 1.5 * experts);
  CHECK(c.fwd_flops == weights + core + 0.5 * experts);
  CHECK(c.model_flops == l.model_flops);  // padding is not model work
  CHECK(c.params == l.params);
  CHECK(c.signature != l.signature);

  // Top-1 halves the routed work; the dense part stays.
  LayerAttrs top1 = SmallMoe();
  top1.ints["top_k"] = 1;
  Layer t1;
  REQUIRE_OK(InferLayer("moe_block", top1, {16, 32}, DType::kBf16, &t1));
  CHECK(t1.expert_fwd_flops == experts / 2);
  CHECK(t1.fwd_flops == l.fwd_flops - experts / 2);
}

TEST_CASE("fp8 moe_block: QKV input, experts' permuted and fc2 inputs, shared fc2 input at 1 byte; the MoE input dt") {
  const double s = 16, h = 32, a = 4, g = 2, d = 8, e = 4, k = 2, fe = 24, fs = 16, dt = 2;
  Layer bf, f8;
  REQUIRE_OK(InferLayer("moe_block", SmallMoe(), {16, 32}, DType::kBf16, &bf));
  REQUIRE_OK(InferLayer("moe_block", SmallMoe(), {16, 32}, DType::kFp8, &f8));
  // The MLP input (the second norm's output) stays dt: the router (bf16, DeepSeek-V3 3.3.1) reads it.
  const double kept_attn = s * h + dt * s * (a * d + 2 * g * d + a * d) + 4 * a * s;
  const double shared = dt * s * (h + 2 * fs) + s * fs, routed = s * k * (h + dt * 2 * fe + fe);
  CHECK(f8.stash_bytes == kept_attn + 2 * dt * s * h + 4 * s * e + shared + routed);
  CHECK(bf.stash_bytes - f8.stash_bytes == s * h + s * fs + s * k * (h + fe));  // GEMM-input elements x 1 byte
  CHECK(f8.expert_stash_bytes == routed);
  CHECK(f8.stash_bytes_full == bf.stash_bytes_full);
  CHECK(f8.stash_bytes_tp_replicated == s * h + 2 * dt * s * h + dt * s * h + 4 * s * e);
  auto mod = [](const Layer& l, RecomputeModule m) -> const RecomputeModuleCost& {
    return l.recompute_modules[static_cast<size_t>(m)];
  };
  CHECK(mod(f8, RecomputeModule::kMoeAct).stash_bytes == s * k * fe);
  CHECK(mod(f8, RecomputeModule::kMoeAct).expert_stash_bytes == s * k * fe);
  CHECK(mod(bf, RecomputeModule::kMoeAct).stash_bytes == dt * s * k * fe);
  CHECK(mod(f8, RecomputeModule::kLayernorm).stash_bytes == s * h + dt * s * h);
  CHECK(mod(f8, RecomputeModule::kLayernorm).stash_tp_replicated == s * h + dt * s * h);
  CHECK(mod(f8, RecomputeModule::kCoreAttn).stash_bytes == s * a * d);
  CHECK(mod(f8, RecomputeModule::kSharedExperts).stash_bytes == dt * s * 2 * fs + s * fs);
  CHECK(mod(f8, RecomputeModule::kMoe).stash_bytes == 4 * s * e + shared - dt * s * h + routed);
  CHECK(mod(f8, RecomputeModule::kMoe).stash_tp_replicated == 4 * s * e);
  CHECK(mod(f8, RecomputeModule::kMoe).expert_stash_bytes == routed);
}

TEST_CASE("MLA FLOPs: the sum of its projections' GEMMs and a core over qk dim nope + rope and v dim") {
  const double s = 32, h = 64, a = 4, ql = 24, kvl = 16, dr = 8, dn = 16, dv = 12;
  LayerAttrs attrs;
  attrs.ints = {
      {"heads", 4},      {"q_lora_rank", 24}, {"kv_lora_rank", 16}, {"qk_rope_head_dim", 8}, {"qk_nope_head_dim", 16},
      {"v_head_dim", 12}};
  attrs.strings = {{"position", "rope"}, {"attention", "unfused"}};
  attrs.bools = {{"bias", false}, {"dropout", false}};
  Layer l;
  REQUIRE_OK(InferLayer("attention", attrs, {32, 64}, DType::kBf16, &l));
  const std::vector<Gemm> gemms = {
      {s, h, ql}, {s, ql, a * (dn + dr)}, {s, h, kvl + dr}, {s, kvl, a * (dn + dv)}, {s, a * dv, h}};
  double weights = 0;
  for (const auto& g : gemms) weights += g.Flops();
  const double core = a * (Gemm{s, dn + dr, s}.Flops() + Gemm{s, s, dv}.Flops());  // unfused: the whole s^2
  CHECK(l.fwd_flops == weights + core);
  CHECK(l.bwd_weight_flops == weights);
  CHECK(l.bwd_input_flops == weights + 2 * core);
  CHECK(l.tp_replicated_fwd_flops == Gemm{s, h, ql}.Flops() + Gemm{s, h, kvl + dr}.Flops());
  // q_a_layernorm and kv_a_layernorm: RMSNorms (weight only)
  CHECK(l.params == h * ql + ql + ql * a * (dn + dr) + h * (kvl + dr) + kvl + kvl * a * (dn + dv) + a * dv * h);
  CHECK(l.tp_divisor == 4);
  CHECK(l.cp_kv_bytes == 2 * s * a * (dn + dr + dv));
  // Without query compression: q [h, a (nope + rope)], split by heads.
  attrs.ints["q_lora_rank"] = 0;
  Layer nq;
  REQUIRE_OK(InferLayer("attention", attrs, {32, 64}, DType::kBf16, &nq));
  CHECK(nq.fwd_flops == weights - Gemm{s, h, ql}.Flops() - Gemm{s, ql, a * (dn + dr)}.Flops() +
                            Gemm{s, h, a * (dn + dr)}.Flops() + core);
  CHECK(nq.tp_replicated_fwd_flops == Gemm{s, h, kvl + dr}.Flops());
  // fp8: x, the up projections' inputs (the normed latents) and (unfused) the output projection's
  // input are 1 byte; the latent norms' inputs, Q, K, V and the s^2 tensors keep 2; mla_up_proj's
  // Q, K, V stay 2-byte.
  attrs.ints["q_lora_rank"] = 24;
  Layer f8;
  REQUIRE_OK(InferLayer("attention", attrs, {32, 64}, DType::kFp8, &f8));
  CHECK(l.stash_bytes - f8.stash_bytes == s * (h + ql + kvl + a * dv));
  CHECK(l.stash_bytes_tp_replicated - f8.stash_bytes_tp_replicated == s * (h + ql + kvl));
  const size_t up = static_cast<size_t>(RecomputeModule::kMlaUpProj);
  CHECK(f8.recompute_modules[up].stash_bytes == l.recompute_modules[up].stash_bytes);
  CHECK(f8.recompute_modules[up].stash_bytes == 2 * s * a * (2 * (dn + dr) + dv));
}

TEST_CASE("layer lists: moe_block and mtp cost as the template's blocks") {
  const std::string gpt =
      "name: x\nglobal_batch: 8\ngpt:\n  layers: 3\n  hidden: 64\n  heads: 4\n  seq: 16\n  vocab: 128\n  ffn: 96\n"
      "  ffn_act: swiglu\n  norm: rmsnorm\n  position: rope\n  bias: false\n  dropout: 0\n  tie_embeddings: false\n"
      "  moe: {experts: 8, top_k: 2, expert_ffn: 32, shared_experts: 1, dense_layers: 1, router: sigmoid, "
      "capacity_factor: 1.25}\n"
      "  mla: {q_lora_rank: 32, kv_lora_rank: 16, qk_rope_head_dim: 8, qk_nope_head_dim: 16, v_head_dim: 16}\n  mtp: "
      "1\n";
  const std::string mla =
      "q_lora_rank: 32, kv_lora_rank: 16, qk_rope_head_dim: 8, qk_nope_head_dim: 16, v_head_dim: 16";
  const std::string common =
      "heads: 4, act: swiglu, norm: rmsnorm, position: rope, bias: false, dropout: false, " + mla;
  const std::string moe =
      "experts: 8, top_k: 2, expert_ffn: 32, shared_ffn: 32, router: sigmoid, capacity_factor: 1.25";
  const std::string list =
      "name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n"
      "  - {type: embedding, vocab: 128, hidden: 64, dropout: false}\n"
      "  - {type: transformer_block, ffn: 96, " +
      common +
      "}\n"
      "  - {repeat: 2, layers: [{type: moe_block, " +
      common + ", " + moe +
      "}]}\n"
      "  - {type: mtp, vocab: 128, " +
      common + ", " + moe +
      "}\n"
      "  - {type: rmsnorm}\n  - {type: lm_head, vocab: 128, tied: false}\n  - {type: loss}\n";
  ModelSpec a, b;
  REQUIRE_OK(ParseModelSpec("a.yaml", gpt, &a));
  REQUIRE_OK(ParseModelSpec("b.yaml", list, &b));
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    INFO(a.layers[i].name);
    CHECK(a.layers[i].kind == b.layers[i].kind);
    CHECK(a.layers[i].params == b.layers[i].params);
    CHECK(a.layers[i].fwd_flops == b.layers[i].fwd_flops);
    CHECK(a.layers[i].stash_bytes == b.layers[i].stash_bytes);
    CHECK(a.layers[i].expert_params == b.layers[i].expert_params);
  }
  CHECK(a.layers[1].kind == LayerKind::kTransformerBlock);
  CHECK(a.layers[2].kind == LayerKind::kMoeBlock);
  CHECK(a.layers[4].kind == LayerKind::kMtp);
  CHECK(a.TotalParams() == b.TotalParams());
  CHECK(a.ActiveParams() == b.ActiveParams());
  CHECK(a.MtpParams() == a.layers[4].params);
  CHECK(a.TotalParams() + a.MtpParams() == a.layers[0].params + a.layers[1].params + a.layers[2].params +
                                               a.layers[3].params + a.layers[4].params + a.layers[5].params +
                                               a.layers[6].params);
}

TEST_CASE("bad MoE and MLA input: one message with file, line, field and fix") {
  const std::string head =
      "name: x\nglobal_batch: 8\ngpt:\n  layers: 2\n  hidden: 64\n  heads: 4\n  seq: 16\n  vocab: 128\n";
  struct Case {
    std::string text;
    const char* expect;
  };
  const Case cases[] = {
      {head + "  moe: {experts: 4,\n    top_k: 6, expert_ffn: 32}\n",
       "m.yaml:10: field 'gpt.moe.top_k': top_k (6) is larger than experts (4); set top_k: 4 or less"},
      {head + "  moe: {experts: 4, top_k: 2, expert_ffn: 32,\n    capacity_factor: -1}\n",
       "m.yaml:10: field 'gpt.moe.capacity_factor': -1 is below 0; set capacity_factor: 0 (dropless)"},
      {head + "  moe: {experts: 4, top_k: 2}\n",
       "m.yaml:9: field 'gpt.moe.expert_ffn': missing: the MoE block needs its expert size; add 'expert_ffn:"},
      {head + "  moe: {experts: 1, top_k: 1, expert_ffn: 32}\n",
       "field 'gpt.moe.experts': experts (1) must be at least 2 (one expert is a dense MLP); set experts: 2 or more"},
      {head + "  moe: {experts: 8, top_k: 2, expert_ffn: 32, route_groups: 3, route_group_limit: 2}\n",
       "field 'gpt.moe.route_groups': route_groups (3) must divide experts (8)"},
      {head + "  moe: {experts: 8, top_k: 2, expert_ffn: 32, route_groups: 4, route_group_limit: 5}\n",
       "field 'gpt.moe.route_group_limit': route_group_limit (5) must be between 1 and route_groups (4)"},
      {head + "  mla: {kv_lora_rank: 0, qk_rope_head_dim: 8, qk_nope_head_dim: 16, v_head_dim: 16}\n",
       "m.yaml:9: field 'gpt.mla.kv_lora_rank': 0 is below 1"},
      {head + "  mla: {kv_lora_rank: 16, qk_rope_head_dim: 7, qk_nope_head_dim: 16, v_head_dim: 16}\n",
       "field 'gpt.mla.qk_rope_head_dim': 7 is odd: RoPE rotates pairs; set qk_rope_head_dim to an even size"},
      {head + "  moe: {experts: 4, top_k: 2, expert_fn: 32}\n",
       "field 'gpt.moe.expert_fn': unknown key 'expert_fn', did you mean 'expert_ffn'?"},
      {"name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: embedding, vocab: 128, hidden: 64}\n"
       "  - {type: moe_block, heads: 4, experts: 4, top_k: 5, expert_ffn: 32}\n",
       "m.yaml:6: field 'layers[1]' (moe_block): top_k (5) must be between 1 and experts (4); set top_k: 4 or less"},
      {"name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: embedding, vocab: 128, hidden: 64}\n"
       "  - {type: moe_block, heads: 4, experts: 4, top_k: 2}\n",
       "m.yaml:6: field 'layers[1].expert_ffn': missing required field"},
      {"name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: embedding, vocab: 128, hidden: 64}\n"
       "  - {type: moe_block, heads: 4, experts: 4, top_k: 2, expert_ffn: 32, capacity_factor: -0.5}\n",
       "m.yaml:6: field 'layers[1]' (moe_block): capacity_factor (-0.5) is below 0; set capacity_factor: 0 (dropless)"},
      {"name: x\nglobal_batch: 8\ninput: [16]\nlayers:\n  - {type: embedding, vocab: 128, hidden: 64}\n"
       "  - {type: attention, heads: 4, kv_lora_rank: 16, qk_rope_head_dim: 5, qk_nope_head_dim: 8, v_head_dim: 8}\n",
       "m.yaml:6: field 'layers[1]' (attention): qk_rope_head_dim (5) must be even and at least 2"},
  };
  for (const auto& c : cases) {
    ModelSpec m;
    Status s = ParseModelSpec("m.yaml", c.text, &m);
    INFO(c.text);
    INFO(s.message());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find(c.expect) != std::string::npos);
  }
}

TEST_CASE("truncated and corrupted MoE model files never crash the reader") {
  const std::string text =
      "name: x\nglobal_batch: 8\ngpt:\n  layers: 3\n  hidden: 64\n  heads: 4\n  seq: 16\n  vocab: 128\n  ffn_act: "
      "swiglu\n"
      "  moe: {experts: 8, top_k: 2, expert_ffn: 32, shared_experts: 1, dense_layers: 1, route_groups: 4, "
      "route_group_limit: 2,\n"
      "        capacity_factor: 1.5, aux_loss: 0.01, router: sigmoid}\n"
      "  mla: {q_lora_rank: 32, kv_lora_rank: 16, qk_rope_head_dim: 8, qk_nope_head_dim: 16, v_head_dim: 16}\n  mtp: "
      "2\n";
  ModelSpec m;
  REQUIRE_OK(ParseModelSpec("m.yaml", text, &m));
  CHECK(m.MtpParams() > 0);
  for (size_t n = 0; n < text.size(); ++n) {
    Status s = ParseModelSpec("m.yaml", text.substr(0, n), &m);
    CHECK((s.ok() || s.code() == StatusCode::kInvalidArgument));
  }
  const char flips[] = {'-', '0', ':', '[', '}', 'x', ' ', '9'};
  for (size_t i = 0; i < text.size(); i += 3) {
    for (char f : flips) {
      std::string t = text;
      t[i] = f;
      Status s = ParseModelSpec("m.yaml", t, &m);
      CHECK((s.ok() || s.code() == StatusCode::kInvalidArgument));
      if (s.ok()) CHECK(m.ActiveParams() <= m.TotalParams());
    }
  }
}

}  // namespace
}  // namespace planner
