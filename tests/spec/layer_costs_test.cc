// Layer costs of Llama-class transformers (GQA, SwiGLU, relu2, RMSNorm, RoPE,
// no bias, flash attention): parameters against the published counts and a
// tensor-by-tensor enumeration, FLOPs against Megatron-LM's MFU formula,
// stash and memory-bound bytes against the per-tensor sums of
// docs/cost_model.md section 1, and the model-file errors.
#include <cmath>
#include <numeric>

#include "spec/layer_catalog.h"
#include "spec/model_spec.h"
#include "spec/yaml_reader.h"
#include "tests/spec/bundled_models.h"
#include "tests/test_util.h"

namespace planner {
namespace {

ModelSpec Load(const std::string& file) { return testing::LoadBundledModel(file); }

Layer Block(int64_t s, int64_t h, const LayerAttrs& attrs, DType dtype = DType::kBf16,
            const std::string& type = "transformer_block") {
  Layer l;
  REQUIRE_OK(InferLayer(type, attrs, {s, h}, dtype, &l));
  return l;
}

LayerAttrs Attrs(int64_t heads, int64_t kv, int64_t ffn, const std::string& act, const std::string& norm,
                 const std::string& position, bool bias, const std::string& attention) {
  LayerAttrs a;
  a.ints = {{"heads", heads}, {"kv_heads", kv}, {"ffn", ffn}};
  a.strings = {{"act", act}, {"norm", norm}, {"position", position}, {"attention", attention}};
  a.bools = {{"bias", bias}};
  return a;
}

// Megatron-LM's num_floating_point_operations (megatron/training/training.py, with its 2025
// causal-mask change: half the s^2 core): 12 B s l h^2 ((1 + g/a + s/(2h)) + (f/h) x gated + V / (2 l h)),
// gated 3/2 for SwiGLU.
double MegatronMfuFlops(const GptConfig& g, double batch) {
  const double s = g.seq, h = g.hidden, l = g.layers, v = g.vocab, f = g.ffn, a = g.heads, kv = g.kv_heads;
  const double gated = g.ffn_act == "swiglu" ? 1.5 : 1.0;
  return 12 * batch * s * l * h * h * ((1 + kv / a + s / (2 * h)) + f / h * gated + v / (2 * l * h));
}

TEST_CASE("Llama 3 and Nemotron-4 model files give the published parameter counts") {
  struct Row {
    const char* file;
    double exact;
    double published;
  };
  // exact: the tensor sums (embedding V h, lm_head V h untied, per layer h (a + 2g) d + h^2 + 3 h f + 2 h, final norm h).
  const Row rows[] = {{"llama3-8b.yaml", 8030261248.0, 8.03e9},
                      {"llama3-70b.yaml", 70553706496.0, 70.55e9},
                      {"llama3.1-405b.yaml", 405853388800.0, 405.85e9},
                      // 2 h f relu2 MLP, LayerNorm (2 h per norm); the report's "341B".
                      {"nemotron-4-340b.yaml", 341029195776.0, 341e9}};
  for (const auto& r : rows) {
    INFO(r.file);
    ModelSpec m = Load(r.file);
    CHECK(m.TotalParams() == r.exact);
    CHECK(std::abs(m.TotalParams() / r.published - 1) < 0.005);
    CHECK(m.dtype == DType::kBf16);
    CHECK(m.layers[0].params == static_cast<double>(m.gpt.vocab * m.gpt.hidden));  // RoPE: no position table
    CHECK(m.layers[m.layers.size() - 2].kind == LayerKind::kLmHead);
    CHECK_FALSE(m.layers[m.layers.size() - 2].params_tied);
  }
  CHECK(Load("llama3-8b.yaml").layers[33].kind == LayerKind::kRmsnorm);
  CHECK(Load("nemotron-4-340b.yaml").layers[97].kind == LayerKind::kLayernorm);
}

TEST_CASE("GQA, SwiGLU, RMSNorm, no-bias block parameters equal the tensor-by-tensor sum") {
  const int64_t h = 64, a = 8, g = 2, f = 96, d = h / a;
  for (bool bias : {false, true}) {
    for (const char* act : {"gelu", "swiglu", "relu2"}) {
      for (const char* norm : {"layernorm", "rmsnorm"}) {
        Layer l = Block(16, h, Attrs(a, g, f, act, norm, "rope", bias, "flash"));
        const bool swiglu = std::string(act) == "swiglu";
        double want = 0;
        want += h * a * d + (bias ? a * d : 0);                    // W_q [h, a d] (+ b_q)
        want += 2 * (h * g * d + (bias ? g * d : 0));              // W_k, W_v [h, g d]
        want += a * d * h + (bias ? h : 0);                        // W_o [a d, h]
        want += (swiglu ? 2 : 1) * (h * f + (bias ? f : 0));       // fc1 (gate and up for SwiGLU)
        want += f * h + (bias ? h : 0);                            // fc2
        want += 2 * (std::string(norm) == "rmsnorm" ? h : 2 * h);  // two pre-norms
        INFO(act, " ", norm, " bias ", bias);
        CHECK(l.params == want);
      }
    }
  }
  Layer rms;
  REQUIRE_OK(InferLayer("rmsnorm", LayerAttrs{}, {16, 64}, DType::kBf16, &rms));
  Layer ln;
  REQUIRE_OK(InferLayer("layernorm", LayerAttrs{}, {16, 64}, DType::kBf16, &ln));
  CHECK(rms.params == 64);
  CHECK(ln.params == 128);
  CHECK(rms.fwd_mem_bytes == ln.fwd_mem_bytes);  // same traffic: read x, write y
  CHECK(rms.stash_bytes == ln.stash_bytes);
}

TEST_CASE("GQA attention FLOPs: QKV GEMM 2 s h (a + 2g) d; flash core causal half, backward 2.5x") {
  const double s = 256, h = 512, a = 8, g = 2, d = h / a;
  Layer flash =
      Block(256, 512, Attrs(8, 2, 1024, "swiglu", "rmsnorm", "rope", false, "flash"), DType::kBf16, "attention");
  Layer unfused =
      Block(256, 512, Attrs(8, 2, 1024, "swiglu", "rmsnorm", "rope", false, "unfused"), DType::kBf16, "attention");
  const double gemm = 2 * s * h * (a + 2 * g) * d + 2 * s * h * h;
  CHECK(unfused.fwd_flops == gemm + 4 * s * s * h);
  CHECK(unfused.bwd_input_flops == gemm + 8 * s * s * h);
  CHECK(flash.fwd_flops == gemm + 2 * s * s * h);
  CHECK(flash.bwd_input_flops - gemm == 2.5 * (flash.fwd_flops - gemm));
  CHECK(flash.bwd_weight_flops == gemm);
  CHECK(flash.attention_core_fwd_flops == 2 * s * s * h);
  CHECK(unfused.attention_core_fwd_flops == 4 * s * s * h);
  // The MFU convention: 3 x forward with the causal half of the 4 s^2 h core, whichever kernel runs.
  CHECK(flash.model_flops == 3 * (gemm + 2 * s * s * h));
  CHECK(unfused.model_flops == flash.model_flops);
  CHECK(flash.cp_kv_bytes == 2 * 2 * s * g * d);
  // Multi-head attention: the QKV GEMM is 6 s h^2 again.
  Layer mha =
      Block(256, 512, Attrs(8, 8, 1024, "gelu", "layernorm", "learned", true, "unfused"), DType::kBf16, "attention");
  CHECK(mha.fwd_flops == 8 * s * h * h + 4 * s * s * h);
}

TEST_CASE("SwiGLU and relu2 MLP FLOPs; model FLOPs of Llama 3 70B equal Megatron-LM's MFU formula") {
  const double s = 128, h = 256, f = 704;
  Layer sw = Block(128, 256, Attrs(4, 4, 704, "swiglu", "rmsnorm", "rope", false, "flash"), DType::kBf16, "mlp");
  Layer r2 = Block(128, 256, Attrs(4, 4, 704, "relu2", "rmsnorm", "rope", false, "flash"), DType::kBf16, "mlp");
  CHECK(sw.fwd_flops == 6 * s * h * f);
  CHECK(sw.bwd_flops() == 12 * s * h * f);
  CHECK(r2.fwd_flops == 4 * s * h * f);
  CHECK(sw.model_flops == 18 * s * h * f);
  CHECK(sw.tp_divisor == 704);
  for (const char* file : {"llama3-8b.yaml", "llama3-70b.yaml", "llama3.1-405b.yaml"}) {
    ModelSpec m = Load(file);
    INFO(file);
    CHECK(m.ModelFlops(m.global_batch) == doctest::Approx(MegatronMfuFlops(m.gpt, m.global_batch)).epsilon(1e-12));
    // Hardware FLOPs without recompute: above the model FLOPs by flash's backward recompute of the
    // scores, 7 s^2 h (flash as executed) - 6 s^2 h (model, causal half) per layer.
    const double s2h = static_cast<double>(m.gpt.seq) * m.gpt.seq * m.gpt.hidden;
    CHECK(m.IterationFlops(m.global_batch, false) ==
          doctest::Approx(m.ModelFlops(m.global_batch) + m.global_batch * m.gpt.layers * 1 * s2h).epsilon(1e-12));
  }
}

TEST_CASE("sliding-window attention: w s - w^2 / 2 query-key pairs under flash; unfused and w >= s as before") {
  const double s = 1024, h = 512, w = 128;
  LayerAttrs attrs = Attrs(8, 2, 1024, "swiglu", "rmsnorm", "rope", false, "flash");
  const Layer full = Block(1024, 512, attrs, DType::kBf16, "attention");
  attrs.ints["window"] = 128;
  const Layer win = Block(1024, 512, attrs, DType::kBf16, "attention");
  // Per pair 2 a (dqk + dv) = 4 h FLOPs: the causal s^2 / 2 pairs give full's 2 s^2 h.
  const double pairs = w * s - w * w / 2;
  CHECK(full.attention_core_fwd_flops == 2 * s * s * h);
  CHECK(win.attention_core_fwd_flops == 4 * h * pairs);
  CHECK(win.fwd_flops - full.fwd_flops == doctest::Approx(4 * h * pairs - 2 * s * s * h));
  CHECK(win.bwd_input_flops - full.bwd_input_flops == doctest::Approx(2.5 * (4 * h * pairs - 2 * s * s * h)));
  CHECK(win.bwd_weight_flops == full.bwd_weight_flops);
  CHECK(win.model_flops - full.model_flops == doctest::Approx(3 * (4 * h * pairs - 2 * s * s * h)));
  CHECK(win.attention_window == 128);
  CHECK(full.attention_window == 0);
  CHECK(win.stash_bytes == full.stash_bytes);  // flash keeps no s^2 tensor either way
  CHECK(win.cp_kv_bytes == full.cp_kv_bytes);  // context parallelism gathers every key (TE's all-gather)
  CHECK(win.signature != full.signature);      // a windowed block is not costed as a full one
  // A window as long as the sequence attends to everything before: the causal block.
  attrs.ints["window"] = 1024;
  const Layer wide = Block(1024, 512, attrs, DType::kBf16, "attention");
  CHECK(wide.attention_core_fwd_flops == full.attention_core_fwd_flops);
  CHECK(wide.attention_window == 0);
  // Unfused attention computes the whole s^2 and masks it: the same forward FLOPs, the window's model FLOPs.
  attrs.ints["window"] = 128;
  attrs.strings["attention"] = "unfused";
  const Layer unf = Block(1024, 512, attrs, DType::kBf16, "attention");
  CHECK(unf.attention_core_fwd_flops == 4 * s * s * h);
  CHECK(unf.model_flops == win.model_flops);
  // Windows and MLA are not modelled together.
  Layer mla;
  LayerAttrs m = attrs;
  m.strings["attention"] = "flash";
  m.ints["kv_lora_rank"] = 64;
  m.ints["q_lora_rank"] = 0;
  m.ints["qk_rope_head_dim"] = 16;
  m.ints["qk_nope_head_dim"] = 32;
  m.ints["v_head_dim"] = 32;
  const Status st = InferLayer("attention", m, {1024, 512}, DType::kBf16, &mla);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("MLA") != std::string::npos);
}

TEST_CASE("the gpt template's sliding_window and full_attention_every: Megatron's pattern, GPT-OSS's counts") {
  const ModelSpec m = Load("gpt-oss-120b.yaml");
  // 36 blocks, 1-based 2, 4, ... over the whole sequence (window_attn_skip_freq 2), the odd ones through 127 keys.
  int64_t windowed = 0;
  for (const Layer& l : m.layers) {
    if (l.kind != LayerKind::kMoeBlock) continue;
    const int64_t i = std::stoll(l.name.substr(5));
    CHECK(l.attention_window == ((i + 1) % 2 != 0 ? 127 : 0));
    windowed += l.attention_window > 0;
  }
  CHECK(windowed == 18);
  // GPT-OSS 120B's published 116.8B parameters (OpenAI's model card: 116.83B).
  CHECK(m.TotalParams() == doctest::Approx(116.83e9).epsilon(0.002));
  GptConfig g = m.gpt;
  CHECK(g.Windowed(0));
  CHECK_FALSE(g.Windowed(1));
  g.full_attention_every = 0;  // every block windowed (Mistral)
  CHECK(g.Windowed(1));
  g.full_attention_every = 6;  // Gemma 3's 5 local : 1 global
  CHECK(g.Windowed(4));
  CHECK_FALSE(g.Windowed(5));
  g.sliding_window = 0;
  CHECK_FALSE(g.Windowed(0));
}

TEST_CASE("packed samples: s (L + 1) / 2 query-key pairs within samples of L tokens; L >= s is the causal block") {
  const double s = 4096, h = 512, L = 206;
  LayerAttrs attrs = Attrs(8, 2, 1024, "swiglu", "rmsnorm", "rope", false, "flash");
  const Layer full = Block(4096, 512, attrs, DType::kBf16, "transformer_block");
  attrs.ints["packed"] = 206;
  const Layer packed = Block(4096, 512, attrs, DType::kBf16, "transformer_block");
  // Per pair 4 h FLOPs (2 a (dqk + dv), dqk = dv = h / a): the samples' sum s_i (s_i + 1) / 2 pairs.
  CHECK(packed.attention_core_fwd_flops == doctest::Approx(4 * h * s * (L + 1) / 2).epsilon(1e-12));
  CHECK(full.attention_core_fwd_flops == doctest::Approx(2 * s * s * h).epsilon(1e-12));
  CHECK(packed.bwd_input_flops - full.bwd_input_flops ==
        doctest::Approx(2.5 * (packed.attention_core_fwd_flops - full.attention_core_fwd_flops)));
  CHECK(packed.bwd_weight_flops == full.bwd_weight_flops);  // the GEMMs see every token either way
  CHECK(packed.attention_packed == 206);
  CHECK(full.attention_packed == 0);
  CHECK(packed.signature != full.signature);
  attrs.ints["packed"] = 4096;  // one sample as long as the sequence: causal attention
  const Layer one = Block(4096, 512, attrs, DType::kBf16, "transformer_block");
  CHECK(one.attention_core_fwd_flops == full.attention_core_fwd_flops);
  CHECK(one.attention_packed == 0);
}

TEST_CASE("LoRA: the base frozen (no weight-gradient GEMMs or trainable parameters), rank-r adapters on the targets") {
  const double s = 1024, h = 512, a = 8, g = 2, d = h / a, f = 1536, r = 16, dt = 2;
  const Layer base = Block(1024, 512, Attrs(8, 2, 1536, "swiglu", "rmsnorm", "rope", false, "flash"));
  Layer qkv = base, all = base;
  ApplyLora(16, LoraTargetBit(GemmRole::kQkv), DType::kBf16, &qkv);
  ApplyLora(16,
            LoraTargetBit(GemmRole::kQkv) | LoraTargetBit(GemmRole::kProj) | LoraTargetBit(GemmRole::kFc1) |
                LoraTargetBit(GemmRole::kFc2),
            DType::kBf16, &all);
  // Adapter A [in, r], B [r, out] per target: qkv h -> a d + 2 g d; proj a d -> h; fc1 h -> 2 f; fc2 f -> h.
  const double qkv_io = h + (a * d + 2 * g * d), all_io = qkv_io + (a * d + h) + (h + 2 * f) + (f + h);
  CHECK(qkv.params - base.params == r * qkv_io);
  CHECK(qkv.frozen_params == base.params);
  CHECK(all.params - base.params == r * all_io);
  // Forward and input gradient: the base's and the adapters' 2 s r (in + out); weight gradient: the adapters' alone.
  CHECK(qkv.fwd_flops - base.fwd_flops == doctest::Approx(2 * s * r * qkv_io));
  CHECK(qkv.bwd_input_flops - base.bwd_input_flops == doctest::Approx(2 * s * r * qkv_io));
  CHECK(qkv.bwd_weight_flops == doctest::Approx(2 * s * r * qkv_io));
  CHECK(all.bwd_weight_flops == doctest::Approx(2 * s * r * all_io));
  CHECK(qkv.model_flops == doctest::Approx(base.model_flops - base.bwd_weight_flops + 3 * 2 * s * r * qkv_io));
  // The base GEMMs frozen, two bf16 adapter GEMMs per target appended.
  size_t frozen = 0, adapters = 0;
  for (const GemmShape& gm : all.gemms) {
    frozen += gm.frozen;
    adapters += gm.high_precision && !gm.frozen;
  }
  CHECK(frozen == base.gemms.size());
  CHECK(adapters == 8);
  // Scale and add over each target's output forward; backward the scale's gradient and the input gradient's add.
  CHECK(qkv.fwd_mem_bytes - base.fwd_mem_bytes == doctest::Approx(dt * s * 5 * (a * d + 2 * g * d)));
  CHECK(qkv.bwd_mem_bytes - base.bwd_mem_bytes == doctest::Approx(dt * s * (2 * (a * d + 2 * g * d) + 3 * h)));
  CHECK(qkv.stash_bytes - base.stash_bytes == doctest::Approx(dt * s * r));  // A's output, for B's weight gradient
  CHECK(qkv.signature != base.signature);
}

TEST_CASE("gpt.lora: every layer frozen, adapters in every block; the trainable count; packed_length on every block") {
  ModelSpec m;
  REQUIRE_OK(ParseModelSpec("m.yaml",
                            "name: x\nglobal_batch: 8\ngpt: {layers: 4, hidden: 256, heads: 4, kv_heads: 2, ffn: 512, "
                            "ffn_act: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false, "
                            "seq: 512, vocab: 1000, packed_length: 100, lora: {rank: 8, targets: [qkv, fc2]}}\n",
                            &m));
  ModelSpec base;
  REQUIRE_OK(ParseModelSpec("b.yaml",
                            "name: x\nglobal_batch: 8\ngpt: {layers: 4, hidden: 256, heads: 4, kv_heads: 2, ffn: 512, "
                            "ffn_act: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false, "
                            "seq: 512, vocab: 1000}\n",
                            &base));
  // Per block: qkv 256 -> 256 + 2 x 128, fc2 512 -> 256, rank 8.
  const double per_block = 8.0 * ((256 + 512) + (512 + 256));
  CHECK(m.TrainableParams() == 4 * per_block);
  CHECK(m.TotalParams() == base.TotalParams() + 4 * per_block);
  CHECK(base.TrainableParams() == base.TotalParams());
  for (const Layer& l : m.layers) {
    CHECK(l.frozen_params == doctest::Approx(l.params - (IsBlock(l.kind) ? per_block : 0.0)));
    if (IsBlock(l.kind)) CHECK(l.attention_packed == 100);
    if (l.kind == LayerKind::kEmbedding) CHECK(l.bwd_mem_bytes == 0);  // a frozen table takes no gradient
    if (l.kind == LayerKind::kLmHead) CHECK(l.bwd_weight_flops == 0);
  }
  CHECK(m.gpt.lora.rank == 8);
  CHECK(m.gpt.lora.targets == (LoraTargetBit(GemmRole::kQkv) | LoraTargetBit(GemmRole::kFc2)));
  ModelSpec dflt;  // no targets: NeMo's four
  REQUIRE_OK(ParseModelSpec("d.yaml",
                            "name: x\nglobal_batch: 8\ngpt: {layers: 1, hidden: 64, heads: 4, seq: 32, vocab: 100, "
                            "lora: {rank: 4}}\n",
                            &dflt));
  CHECK(dflt.gpt.lora.targets == (LoraTargetBit(GemmRole::kQkv) | LoraTargetBit(GemmRole::kProj) |
                                  LoraTargetBit(GemmRole::kFc1) | LoraTargetBit(GemmRole::kFc2)));
}

TEST_CASE("flash attention stash: no s^2 term, Q K V O and the log-sum-exp kept; unfused keeps Korthikanti's") {
  const double s = 1024, h = 512, a = 8, g = 2, d = h / a, f = 1536, dt = 2;
  Layer fl = Block(1024, 512, Attrs(8, 2, 1536, "swiglu", "rmsnorm", "rope", false, "flash"));
  // Per tensor: attention: QKV input, Q, K, V, O (= projection input), LSE fp32, output dropout mask;
  // SwiGLU MLP: fc1 input, fc1 output [s, 2f], fc2 input, dropout mask; two norm inputs.
  const double attn = dt * (s * h + s * h + 2 * s * g * d + s * h) + 4 * a * s + s * h;
  const double mlp = dt * (s * h + 2 * s * f + s * f) + s * h;
  CHECK(fl.stash_bytes == attn + mlp + 2 * dt * s * h);
  CHECK(fl.stash_bytes_selective == fl.stash_bytes);                   // nothing s^2 to drop
  CHECK(fl.selective_recompute_flops == fl.attention_core_fwd_flops);  // the core forward re-run
  CHECK(fl.selective_recompute_mem_bytes == 0);
  CHECK(fl.stash_bytes_tp_replicated == 2 * (dt * s * h + s * h) + 2 * dt * s * h);  // QKV / fc1 inputs, masks, norms
  CHECK(fl.stash_bytes_full == dt * s * h);
  // Linear in s (the s^2 stash is gone): twice the sequence, twice the bytes.
  Layer fl2 = Block(2048, 512, Attrs(8, 2, 1536, "swiglu", "rmsnorm", "rope", false, "flash"));
  CHECK(fl2.stash_bytes == 2 * fl.stash_bytes);
  // Unfused: the softmax output and dropout output (dtype) and the mask (1 byte), a s^2 each.
  Layer un = Block(1024, 512, Attrs(8, 2, 1536, "swiglu", "rmsnorm", "rope", false, "unfused"));
  CHECK(un.stash_bytes - (fl.stash_bytes - 4 * a * s) == (2 * dt + 1) * a * s * s);
  CHECK(un.stash_bytes_selective == fl.stash_bytes - 4 * a * s);
  CHECK(un.selective_recompute_flops == 4 * s * s * h);
  CHECK(un.selective_recompute_mem_bytes == dt * 4 * a * s * s);
  CHECK(un.fwd_mem_bytes - fl.fwd_mem_bytes == dt * 4 * a * s * s);  // flash moves no s^2 through HBM
  CHECK(un.bwd_mem_bytes - fl.bwd_mem_bytes == dt * 8 * a * s * s);
}

TEST_CASE("op_sac (torchtitan's op-level SAC): keeps the input, wq, wv, w1, w2, the attention output and LSE") {
  const double s = 1024, h = 512, a = 8, g = 2, d = h / a, f = 1536, dt = 2;
  Layer l = Block(1024, 512, Attrs(8, 2, 1536, "swiglu", "rmsnorm", "rope", false, "flash"));
  const RecomputeModuleCost& op = l.recompute_modules[static_cast<size_t>(RecomputeModule::kOpSac)];
  // Forward matmuls wq [h, a d], wk [h, g d], wv [h, g d], wo [a d, h], w1 [h, f], w3 [h, f], w2 [f, h]: the
  // odd-numbered outputs (wq, wv, w1, w2) kept, wk, wo and w3 re-run.
  const double kept = dt * s * (h + a * d + g * d + f + h + a * d) + 4 * a * s;
  CHECK(op.stash_bytes == doctest::Approx(l.stash_bytes - kept));
  CHECK(op.gemm_flops == doctest::Approx(2 * s * (h * g * d + a * d * h + h * f)));
  CHECK(op.mem_bytes == l.fwd_mem_bytes);  // every memory-bound op of the forward re-run
  CHECK(op.core_flops == 0);               // the attention kernel's output is kept
  // TP-replicated: the block input and w2's row-parallel output stay whole per TP rank.
  CHECK(op.stash_tp_replicated == doctest::Approx(l.stash_bytes_tp_replicated - dt * s * 2 * h));
  // Between Megatron's selective (core_attn) and full recompute in memory.
  CHECK(l.stash_bytes - op.stash_bytes < l.stash_bytes_selective);
  CHECK(l.stash_bytes - op.stash_bytes > l.stash_bytes_full);
  // GeLU MLP (no w3): wq, wk, wv, wo, w1, w2; wq, wv, w1 kept; wk, wo, w2 re-run.
  Layer gl = Block(1024, 512, Attrs(8, 2, 1536, "gelu", "layernorm", "rope", false, "flash"));
  const RecomputeModuleCost& gop = gl.recompute_modules[static_cast<size_t>(RecomputeModule::kOpSac)];
  CHECK(gop.gemm_flops == doctest::Approx(2 * s * (h * g * d + a * d * h + f * h)));
  CHECK(gop.stash_bytes == doctest::Approx(gl.stash_bytes - dt * s * (h + a * d + g * d + f + a * d) - 4 * a * s));
  // Kept but read by no backward (a compiled graph drops it): SwiGLU's w2 output, which feeds the residual add alone;
  // GeLU's w2 is re-run, nothing unread.
  CHECK(op.unread_bytes == dt * s * h);
  CHECK(gop.unread_bytes == 0);
}

TEST_CASE("fp8 transformer_block: the GEMM-only inputs (QKV, fc1, fc2; unfused: the projection) kept at 1 byte") {
  const double s = 1024, h = 512, a = 8, g = 2, d = h / a, f = 1536, dt = 2;
  const LayerAttrs fa = Attrs(8, 2, 1536, "swiglu", "rmsnorm", "rope", false, "flash");
  const LayerAttrs ua = Attrs(8, 2, 1536, "swiglu", "rmsnorm", "rope", false, "unfused");
  Layer bf = Block(1024, 512, fa), f8 = Block(1024, 512, fa, DType::kFp8);
  Layer ubf = Block(1024, 512, ua), uf8 = Block(1024, 512, ua, DType::kFp8);
  // Flash: QKV input (the norm's output), fc1 and fc2 inputs at 1 byte; Q, K, V, O (flash's backward reads
  // O), the LSE, the norms' inputs, the fc1 output and the masks keep theirs.
  const double attn = (s * h + dt * (s * h + 2 * s * g * d + s * h)) + 4 * a * s + s * h;
  const double mlp = (s * h + dt * 2 * s * f + s * f) + s * h;
  CHECK(f8.stash_bytes == attn + mlp + 2 * dt * s * h);
  CHECK(bf.stash_bytes - f8.stash_bytes == 2 * s * h + s * f);    // GEMM-input elements x 1 byte
  CHECK(f8.stash_bytes_selective == f8.stash_bytes - s * a * d);  // core_attn: O's bf16 copy dropped
  CHECK(f8.stash_bytes_full == bf.stash_bytes_full);              // the layer input, dt
  CHECK(f8.stash_bytes_tp_replicated == 2 * (s * h + s * h) + 2 * dt * s * h);
  // Module drops, each at the bytes it was kept: core_attn under flash the bf16 O (the projection's
  // 1-byte copy stays), layernorm the QKV and fc1 inputs (1 byte each), mlp all but its input (dt).
  auto drop = [](const Layer& l, RecomputeModule m) { return l.recompute_modules[static_cast<size_t>(m)].stash_bytes; };
  CHECK(drop(bf, RecomputeModule::kCoreAttn) == 0);
  CHECK(drop(f8, RecomputeModule::kCoreAttn) == s * a * d);
  CHECK(drop(bf, RecomputeModule::kLayernorm) == dt * 2 * s * h);
  CHECK(drop(f8, RecomputeModule::kLayernorm) == 2 * s * h);
  CHECK(drop(bf, RecomputeModule::kMlp) == dt * 3 * s * f);
  CHECK(drop(f8, RecomputeModule::kMlp) == s * h + dt * 2 * s * f + s * f - dt * s * h);
  // Unfused: its backward reads the probabilities, not O: the projection input is 1 byte as well.
  CHECK(ubf.stash_bytes - uf8.stash_bytes == 3 * s * h + s * f);
  CHECK(ubf.stash_bytes_selective - uf8.stash_bytes_selective == 3 * s * h + s * f);
  CHECK(drop(uf8, RecomputeModule::kCoreAttn) == drop(ubf, RecomputeModule::kCoreAttn));  // the s^2 tensors keep dt
  // fp16 and fp32 cost as before: every kept input at dt.
  Layer h16 = Block(1024, 512, fa, DType::kFp16), f32 = Block(1024, 512, fa, DType::kFp32);
  CHECK(h16.stash_bytes == bf.stash_bytes);
  CHECK(f32.stash_bytes == 2 * (bf.stash_bytes - 2 * s * h - 4 * a * s) + 4 * a * s + 2 * s * h);
}

TEST_CASE("GPT-3 175B with flash (the default) keeps sbh 34 + 4as per block; attention: unfused keeps Korthikanti's") {
  ModelSpec flash = Load("gpt3-175b.yaml");
  ModelSpec unfused;
  std::string text;
  REQUIRE_OK(ReadTextFile(testing::SourcePath("configs/models/gpt3-175b.yaml"), &text));
  text.replace(text.find("vocab: 51200}"), 13, "vocab: 51200, attention: unfused}");
  REQUIRE_OK(ParseModelSpec("gpt3-unfused.yaml", text, &unfused));
  const double s = 2048, h = 12288, a = 96;
  const Layer& f = flash.layers[1];
  const Layer& u = unfused.layers[1];
  CHECK(f.stash_bytes == s * h * 34 + 4 * a * s);
  CHECK(f.stash_bytes_tp_replicated == s * h * 10);
  CHECK(u.stash_bytes == s * h * (34 + 5 * a * s / h));
  CHECK(u.stash_bytes_selective == s * h * 34);
  CHECK(flash.TotalParams() == unfused.TotalParams());
  CHECK(flash.ModelFlops(1536) == unfused.ModelFlops(1536));
}

TEST_CASE("memory-bound bytes of RoPE and SwiGLU") {
  const double s = 512, h = 256, g = 2, d = 32, f = 640, dt = 2;
  Layer rope = Block(512, 256, Attrs(8, 2, 640, "swiglu", "rmsnorm", "rope", false, "flash"));
  Layer learned = Block(512, 256, Attrs(8, 2, 640, "swiglu", "rmsnorm", "learned", false, "flash"));
  CHECK(rope.fwd_mem_bytes - learned.fwd_mem_bytes == dt * 2 * (s * h + s * g * d));  // read + write Q and K
  CHECK(rope.bwd_mem_bytes - learned.bwd_mem_bytes == dt * 2 * (s * h + s * g * d));
  Layer gelu = Block(512, 256, Attrs(8, 2, 640, "gelu", "rmsnorm", "learned", false, "flash"));
  CHECK(learned.fwd_mem_bytes - gelu.fwd_mem_bytes == dt * s * f);  // SwiGLU reads 2 s f, writes s f; GeLU s f and s f
  CHECK(learned.bwd_mem_bytes - gelu.bwd_mem_bytes == dt * s * f);  // 5 s f against 4 s f
}

TEST_CASE("tensor parallelism: t divides heads, kv_heads and ffn") {
  CHECK(Load("llama3-70b.yaml").layers[1].tp_divisor == 8);  // gcd(64 heads, 8 KV heads, 28672)
  CHECK(Block(64, 96, Attrs(12, 4, 384, "gelu", "layernorm", "learned", true, "flash")).tp_divisor == 4);
  CHECK(Block(64, 96, Attrs(12, 12, 384, "gelu", "layernorm", "learned", true, "flash")).tp_divisor == 12);
  CHECK(Block(64, 96, Attrs(12, 12, 384, "gelu", "layernorm", "learned", true, "flash"), DType::kBf16, "attention")
            .tp_divisor == 12);
  CHECK(Block(64, 96, Attrs(12, 1, 384, "gelu", "layernorm", "learned", true, "flash"), DType::kBf16, "attention")
            .tp_divisor == 1);  // MQA
}

Status Parse(const std::string& text, ModelSpec* m) { return ParseModelSpec("m.yaml", text, m); }

TEST_CASE("explicit layer lists take the same keys and cost the same as the template") {
  const std::string gpt =
      "name: x\nprecision: bf16\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, kv_heads: 2, ffn: 160, "
      "ffn_act: swiglu, norm: rmsnorm, position: rope, rope_theta: 500000, bias: false, tie_embeddings: false, seq: "
      "32, vocab: 100}\n";
  const std::string list =
      "name: x\nprecision: bf16\nglobal_batch: 8\ninput: [32]\nlayers:\n"
      "  - {type: embedding, vocab: 100, hidden: 64, positions: 0}\n"
      "  - repeat: 2\n    layers:\n"
      "      - {type: transformer_block, heads: 8, kv_heads: 2, ffn: 160, act: swiglu, norm: rmsnorm, position: rope, "
      "rope_theta: 500000, bias: false, attention: flash}\n"
      "  - {type: rmsnorm}\n  - {type: lm_head, vocab: 100, tied: false}\n  - {type: loss}\n";
  ModelSpec a, b;
  REQUIRE_OK(Parse(gpt, &a));
  REQUIRE_OK(Parse(list, &b));
  REQUIRE(a.layers.size() == b.layers.size());
  CHECK(a.TotalParams() == b.TotalParams());
  CHECK(a.IterationFlops(8, true) == b.IterationFlops(8, true));
  CHECK(a.ModelFlops(8) == b.ModelFlops(8));
  for (size_t i = 0; i < a.layers.size(); ++i) {
    CHECK(a.layers[i].stash_bytes == b.layers[i].stash_bytes);
    CHECK(a.layers[i].fwd_mem_bytes == b.layers[i].fwd_mem_bytes);
  }
  CHECK(a.layers[1].attrs.String("act", "") == "swiglu");
  CHECK(a.layers[1].attrs.Int("kv_heads", 0) == 2);
  CHECK(a.layers[1].attrs.Int("rope_theta", 0) == 500000);
  CHECK_FALSE(a.layers[1].attrs.Bool("bias", true));
  // The defaults: Megatron GPT (gelu, layernorm, learned positions, biases), flash attention.
  ModelSpec def;
  REQUIRE_OK(Parse("name: x\nglobal_batch: 8\ngpt: {layers: 1, hidden: 64, heads: 8, seq: 32, vocab: 100}\n", &def));
  CHECK(def.dtype == DType::kFp16);
  CHECK(def.gpt.attention == "flash");
  CHECK(def.layers[1].attrs.String("attention", "") == "flash");
  CHECK(def.layers[1].attrs.String("norm", "") == "layernorm");
  CHECK(def.layers[1].attrs.Int("kv_heads", 0) == 8);
  CHECK(def.layers[0].params == 100 * 64 + 32 * 64);      // learned positions
  CHECK(def.layers[0].fwd_mem_bytes == 2 * 3 * 32 * 64);  // gather, position add, dropout (fp16)
  CHECK(a.layers[0].fwd_mem_bytes == 2 * 2 * 32 * 64);    // RoPE: no position add (bf16)
  ModelSpec fp8;
  REQUIRE_OK(Parse(
      "name: x\nprecision: fp8\nglobal_batch: 8\ngpt: {layers: 1, hidden: 64, heads: 8, seq: 32, vocab: 100}\n", &fp8));
  CHECK(fp8.dtype == DType::kFp8);
  // fp8 GEMMs: the QKV, fc1 and fc2 inputs (s h, s h, s 4h) kept at 1 byte, the rest at 2
  CHECK(def.layers[1].stash_bytes - fp8.layers[1].stash_bytes == 32 * 64 + 32 * 64 + 32 * 256);
}

TEST_CASE("bad transformer keys: one message naming file, line, field, choices and fix") {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, kv_heads: 3, seq: 8, vocab: 10}\n",
       "m.yaml:3: field 'gpt.kv_heads': kv_heads (3) must divide heads (8); set kv_heads to a divisor of 8"},
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8,\n  ffn_act: geglu, seq: 8, vocab: 10}\n",
       "m.yaml:4: field 'gpt.ffn_act': unknown value 'geglu', did you mean 'gelu'?; choose one of: gelu, swiglu, "
       "relu2"},
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, norm: rmsnrom, seq: 8, vocab: 10}\n",
       "m.yaml:3: field 'gpt.norm': unknown value 'rmsnrom', did you mean 'rmsnorm'?; choose one of: layernorm, "
       "rmsnorm"},
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, position: alibi, seq: 8, vocab: 10}\n",
       "field 'gpt.position': unknown value 'alibi'; choose one of: learned, rope"},
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, attention: sdpa, seq: 8, vocab: 10}\n",
       "field 'gpt.attention': unknown value 'sdpa'; choose one of: flash, unfused"},
      {"name: x\ndtype: fp16\nprecision: bf16\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, seq: 8, vocab: "
       "10}\n",
       "m.yaml:3: field 'precision': 'precision' and 'dtype' name the same setting; keep 'precision' and remove "
       "'dtype'"},
      {"name: x\nprecision: fp4\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, seq: 8, vocab: 10}\n",
       "m.yaml:2: field 'precision': unknown value 'fp4', did you mean 'fp8'?; choose one of: fp32, fp16, bf16, fp8"},
      {"name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 60, heads: 20, position: rope, seq: 8, vocab: 10}\n",
       "field 'gpt.position': rope rotates pairs of the head dimension, which is odd (3)"},
      {"name: x\nglobal_batch: 8\ninput: [8]\nlayers:\n  - {type: embedding, vocab: 10, hidden: 64}\n  - {type: "
       "attention, heads: 8, kv_heads: 5}\n",
       "m.yaml:6: field 'layers[1]' (attention): kv_heads (5) must divide heads (8)"},
      {"name: x\nglobal_batch: 8\ninput: [8]\nlayers:\n  - {type: embedding, vocab: 10, hidden: 64}\n  - {type: mlp, "
       "act: silu}\n",
       "m.yaml:6: field 'layers[1].act': unknown value 'silu', did you mean 'gelu'?; choose one of: gelu, swiglu, "
       "relu2"},
      {"name: x\nglobal_batch: 8\ninput: [8]\nlayers:\n  - {type: embedding, vocab: 10, hidden: 64}\n  - {type: mlp, "
       "norm: rmsnorm}\n",
       "m.yaml:6: field 'layers[1].norm': unknown key 'norm'"},
  };
  for (const auto& c : cases) {
    ModelSpec m;
    Status s = Parse(c.text, &m);
    INFO(c.text);
    INFO(s.message());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find(c.expect) != std::string::npos);
    CHECK(s.message().find('\n') == std::string::npos);
  }
  // Layers built in code are checked too.
  Layer l;
  LayerAttrs bad = Attrs(8, 8, 64, "swiglu", "rmsnorm", "rope", false, "flash");
  bad.strings["act"] = "geglu";
  Status s = InferLayer("transformer_block", bad, {8, 64}, DType::kBf16, &l);
  CHECK(s.message() == "act 'geglu' is not one of gelu | swiglu | relu2; set act: gelu");
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

// Dropout off (Llama-class pretraining): the block keeps no 1-byte masks (the attention output's and
// the MLP's, s h each); unfused attention keeps its softmax output alone (no dropout output, no mask,
// (dt + 1) a s^2 less); the embedding no mask (s h). FLOPs and parameters do not change.
TEST_CASE("dropout: 0 drops exactly the masks and the attention dropout's output") {
  const int64_t s = 512, h = 256, a = 8;
  const double dt = 2, sd = s, hd = h, ad = a;
  for (const char* attention : {"flash", "unfused"}) {
    LayerAttrs on = Attrs(a, 2, 1024, "swiglu", "rmsnorm", "rope", false, attention);
    LayerAttrs off = on;
    off.bools["dropout"] = false;
    const Layer x = Block(s, h, on), y = Block(s, h, off);
    const bool flash = std::string(attention) == "flash";
    const double want = 2 * sd * hd + (flash ? 0 : (dt + 1) * ad * sd * sd);
    CHECK(x.stash_bytes - y.stash_bytes == doctest::Approx(want).epsilon(1e-12));
    CHECK(x.stash_bytes_tp_replicated - y.stash_bytes_tp_replicated == doctest::Approx(2 * sd * hd).epsilon(1e-12));
    CHECK(x.fwd_flops == y.fwd_flops);
    CHECK(x.params == y.params);
  }
  LayerAttrs emb;
  emb.ints = {{"vocab", 1000}, {"hidden", h}, {"positions", 0}};
  Layer e1, e0;
  REQUIRE_OK(InferLayer("embedding", emb, {s}, DType::kBf16, &e1));
  emb.bools["dropout"] = false;
  REQUIRE_OK(InferLayer("embedding", emb, {s}, DType::kBf16, &e0));
  CHECK(e1.stash_bytes - e0.stash_bytes == doctest::Approx(sd * hd));
  // The template: gpt.dropout 0 reaches every block and the embedding; 1 is refused.
  ModelSpec m;
  const std::string text =
      "format_version: 1\nname: d\nglobal_batch: 8\ngpt: {layers: 2, hidden: 256, heads: 8, seq: 512, vocab: 1000, "
      "dropout: 0}\n";
  REQUIRE_OK(ParseModelSpec("d.yaml", text, &m));
  CHECK(m.gpt.dropout == 0);
  CHECK(m.layers[0].attrs.Bool("dropout", true) == false);
  CHECK(m.layers[1].attrs.Bool("dropout", true) == false);
  Status bad = ParseModelSpec("d.yaml",
                              "format_version: 1\nname: d\nglobal_batch: 8\ngpt: {layers: 2, hidden: 256, heads: 8, "
                              "seq: 512, vocab: 1000, dropout: 1}\n",
                              &m);
  CHECK(bad.message().find("d.yaml:4: field 'gpt.dropout': must be below 1") != std::string::npos);
}

}  // namespace
}  // namespace planner
