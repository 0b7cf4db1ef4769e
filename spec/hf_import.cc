#include "spec/hf_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "spec/yaml_reader.h"

namespace planner {

namespace {

enum class Family {
  kLlama,
  kMistral,
  kQwen2,
  kQwen3,
  kGpt2,
  kNeoX,
  kNemotron,
  kMixtral,
  kQwen3Moe,
  kDeepSeekV3,
  kGptOss
};

struct Arch {
  const char* name;
  Family family;
  bool tie_default;  // transformers' default tie_word_embeddings for the architecture
};

const Arch kArchs[] = {
    {"LlamaForCausalLM", Family::kLlama, false},       {"MistralForCausalLM", Family::kMistral, false},
    {"Qwen2ForCausalLM", Family::kQwen2, false},       {"Qwen3ForCausalLM", Family::kQwen3, false},
    {"GPT2LMHeadModel", Family::kGpt2, true},          {"GPTNeoXForCausalLM", Family::kNeoX, false},
    {"NemotronForCausalLM", Family::kNemotron, false}, {"MixtralForCausalLM", Family::kMixtral, false},
    {"Qwen3MoeForCausalLM", Family::kQwen3Moe, false}, {"DeepseekV3ForCausalLM", Family::kDeepSeekV3, false},
    {"GptOssForCausalLM", Family::kGptOss, false},
};

bool IsMoe(Family fam) {
  return fam == Family::kMixtral || fam == Family::kQwen3Moe || fam == Family::kDeepSeekV3 || fam == Family::kGptOss;
}

constexpr int64_t kDefaultSeqCap = 4096;
constexpr double kDefaultBatchTokens = 4194304;  // 2^22 tokens: Llama 2's and Llama 3's 4M-token batch

// Typed access to the config's top-level fields, with errors naming the file, line and field.
struct Fields {
  const YamlReader& r;
  const YAML::Node& root;
  std::string arch;

  bool Has(const std::string& key) const { return root[key].IsDefined() && !root[key].IsNull(); }
  Status Missing(const std::string& key) const {
    return r.FieldError(root, key,
                        fmt::format("missing; every {} config.json has it: add it, or check that this is the "
                                    "model's Hugging Face config.json",
                                    arch));
  }
  Status Int(const std::string& key, int64_t* out) const {
    if (!Has(key)) return Missing(key);
    return Bounded(key, out);
  }
  Status OptInt(const std::string& key, int64_t* out) const { return Has(key) ? Bounded(key, out) : Status::OK(); }
  // A size: 1 .. 2^24, the bound model.yaml has (docs/formats.md, "Limits").
  Status Bounded(const std::string& key, int64_t* out) const {
    int64_t v = 0;
    PLANNER_RETURN_IF_ERROR(r.AsInt(root[key], key, &v, 1));
    if (v > kMaxSize)
      return r.FieldError(
          root[key], key,
          fmt::format("{} is more than the largest size this planner reads ({}); check the value", v, kMaxSize));
    *out = v;
    return Status::OK();
  }
  static constexpr int64_t kMaxSize = int64_t{1} << 24;
  Status OptDouble(const std::string& key, double* out) const {
    return Has(key) ? r.AsDouble(root[key], key, out, 0.0, true) : Status::OK();
  }
  // A probability: 0 allowed.
  Status OptProbability(const std::string& key, double* out) const {
    return Has(key) ? r.AsDouble(root[key], key, out, 0.0, false) : Status::OK();
  }
  Status OptBool(const std::string& key, bool* out) const {
    return Has(key) ? r.GetBool(root, key, key, out, false) : Status::OK();
  }
  Status OptString(const std::string& key, std::string* out) const {
    return Has(key) ? r.GetString(root, key, key, out, false) : Status::OK();
  }
  Status Error(const std::string& key, const std::string& message) const {
    return r.FieldError(Has(key) ? root[key] : root, key, message);
  }
};

std::string ArchList() {
  std::string list;
  for (const auto& a : kArchs) list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

Status ReadArch(const Fields& f, const Arch** out) {
  const YAML::Node& n = f.root["architectures"];
  if (!n.IsDefined() || n.IsNull()) return f.Missing("architectures");
  std::string name;
  if (n.IsSequence() && n.size() > 0 && n[0].IsScalar()) name = n[0].Scalar();
  else if (n.IsScalar()) name = n.Scalar();
  else return f.Error("architectures", "must be a list of one class name, e.g. [\"LlamaForCausalLM\"]");
  for (const auto& a : kArchs) {
    if (name == a.name) {
      *out = &a;
      return Status::OK();
    }
  }
  return f.Error("architectures", fmt::format("'{}' is not supported; planner import hf reads {}; "
                                              "write a gpt: model file by hand for others (docs/formats.md)",
                                              name, ArchList()));
}

// The shape fields: GPT-2's own names, everyone else's the Llama names.
Status ReadShape(const Fields& f, Family fam, GptConfig* g, int64_t* max_positions) {
  if (fam == Family::kGpt2) {
    PLANNER_RETURN_IF_ERROR(f.Int("n_embd", &g->hidden));
    PLANNER_RETURN_IF_ERROR(f.Int("n_layer", &g->layers));
    PLANNER_RETURN_IF_ERROR(f.Int("n_head", &g->heads));
    PLANNER_RETURN_IF_ERROR(f.Int("n_positions", max_positions));
    PLANNER_RETURN_IF_ERROR(f.OptInt("n_inner", &g->ffn));  // null: 4 n_embd
    PLANNER_RETURN_IF_ERROR(f.Int("vocab_size", &g->vocab));
    g->kv_heads = g->heads;
    return Status::OK();
  }
  PLANNER_RETURN_IF_ERROR(f.Int("hidden_size", &g->hidden));
  PLANNER_RETURN_IF_ERROR(f.Int("num_hidden_layers", &g->layers));
  if (g->layers > 100000)
    return f.Error("num_hidden_layers", fmt::format("{} layers; a model has at most 100000", g->layers));
  PLANNER_RETURN_IF_ERROR(f.Int("num_attention_heads", &g->heads));
  PLANNER_RETURN_IF_ERROR(f.Int("intermediate_size", &g->ffn));
  PLANNER_RETURN_IF_ERROR(f.Int("vocab_size", &g->vocab));
  PLANNER_RETURN_IF_ERROR(f.Int("max_position_embeddings", max_positions));
  g->kv_heads = g->heads;  // transformers' default (None: multi-head attention)
  if (fam != Family::kNeoX) PLANNER_RETURN_IF_ERROR(f.OptInt("num_key_value_heads", &g->kv_heads));
  if (fam == Family::kGptOss) {  // attention heads x head_dim wide (64 x 64 = 4096 at h 2880), not h
    PLANNER_RETURN_IF_ERROR(f.Int("head_dim", &g->head_dim));
    if (g->heads % g->kv_heads != 0)
      return f.Error("num_key_value_heads",
                     fmt::format("{} does not divide num_attention_heads {}", g->kv_heads, g->heads));
    return Status::OK();
  }
  if (g->hidden % g->heads != 0) {
    return f.Error("num_attention_heads", fmt::format("{} does not divide hidden_size {}", g->heads, g->hidden));
  }
  if (g->heads % g->kv_heads != 0) {
    return f.Error("num_key_value_heads", fmt::format("{} does not divide num_attention_heads {}; the config is not a "
                                                      "valid grouped-query model",
                                                      g->kv_heads, g->heads));
  }
  int64_t head_dim = g->hidden / g->heads;
  if (fam == Family::kDeepSeekV3) return Status::OK();  // MLA: the head dims are qk_nope + qk_rope and v_head_dim
  PLANNER_RETURN_IF_ERROR(f.OptInt("head_dim", &head_dim));
  if (fam == Family::kQwen3Moe && head_dim != g->hidden / g->heads) {
    g->head_dim = head_dim;  // Qwen3's attention is heads x head_dim wide, not hidden
    return Status::OK();
  }
  if (head_dim != g->hidden / g->heads) {
    return f.Error("head_dim",
                   fmt::format("{} differs from hidden_size / num_attention_heads = {}; the planner's attention "
                               "has head dim hidden / heads (Q and the output projection h x h), so this "
                               "model cannot be costed; not imported",
                               head_dim, g->hidden / g->heads));
  }
  return Status::OK();
}

// The activation: gated SiLU (SwiGLU) for the Llama family, relu2 for Nemotron, GeLU for GPT-2 and NeoX.
Status ReadActivation(const Fields& f, Family fam, GptConfig* g) {
  const bool gpt2 = fam == Family::kGpt2;
  const std::string key = gpt2 ? "activation_function" : "hidden_act";
  std::string act = gpt2 ? "gelu_new" : (fam == Family::kNeoX ? "gelu" : (fam == Family::kNemotron ? "relu2" : "silu"));
  PLANNER_RETURN_IF_ERROR(f.OptString(key, &act));
  const bool gelu = act == "gelu" || act == "gelu_new" || act == "gelu_fast" || act == "gelu_pytorch_tanh";
  if (fam == Family::kGpt2 || fam == Family::kNeoX) {
    if (!gelu)
      return f.Error(
          key,
          fmt::format(
              "'{}' is not supported for {}; the planner costs gelu (gelu, gelu_new, gelu_fast, gelu_pytorch_tanh)",
              act, f.arch));
    g->ffn_act = "gelu";
  } else if (fam == Family::kNemotron) {
    if (act != "relu2")
      return f.Error(key,
                     fmt::format("'{}' is not supported for {}; the planner costs relu2 (squared ReLU)", act, f.arch));
    g->ffn_act = "relu2";
  } else {
    if (act != "silu" && act != "swish") {
      return f.Error(
          key,
          fmt::format("'{}' is not supported for {}: its gated MLP is costed as SwiGLU, hidden_act silu", act, f.arch));
    }
    g->ffn_act = "swiglu";
  }
  return Status::OK();
}

// Norm, position, biases, RoPE base and partial rotary.
Status ReadLayerChoices(const Fields& f, Family fam, GptConfig* g, std::vector<std::string>* notes) {
  const bool llama_like =
      fam == Family::kLlama || fam == Family::kMistral || fam == Family::kQwen2 || fam == Family::kQwen3 || IsMoe(fam);
  g->norm = llama_like ? "rmsnorm" : "layernorm";
  g->position = fam == Family::kGpt2 ? "learned" : "rope";
  double theta = 10000;
  PLANNER_RETURN_IF_ERROR(
      f.OptDouble(fam == Family::kNeoX && !f.Has("rope_theta") ? "rotary_emb_base" : "rope_theta", &theta));
  g->rope_theta = std::max<int64_t>(1, std::llround(theta));
  if (fam == Family::kGpt2 || fam == Family::kNeoX) {
    g->bias = true;
  } else if (fam == Family::kGptOss) {  // biases on the attention linears (attention_bias) and every expert's
    PLANNER_RETURN_IF_ERROR(f.OptBool("attention_bias", &g->bias));
    notes->push_back(
        "GPT-OSS's attention sinks (a learned logit per head), the router's bias and the clamped SwiGLU (swiglu_limit) "
        "are costed as plain attention, router and SwiGLU");
  } else {
    bool attention_bias = false, mlp_bias = false;
    PLANNER_RETURN_IF_ERROR(f.OptBool("attention_bias", &attention_bias));
    PLANNER_RETURN_IF_ERROR(f.OptBool("mlp_bias", &mlp_bias));
    g->bias = attention_bias && mlp_bias;
    if (attention_bias != mlp_bias) {
      notes->push_back(
          fmt::format("attention_bias {} and mlp_bias {} differ; the template's bias covers both, so bias: false "
                      "leaves the {} biases out",
                      attention_bias, mlp_bias, attention_bias ? "attention" : "MLP"));
    }
  }
  const double d = static_cast<double>(g->head_dim > 0 ? g->head_dim : g->hidden / g->heads);
  const double l = static_cast<double>(g->layers);
  if (fam == Family::kQwen2) {
    notes->push_back(
        fmt::format("Qwen2's q/k/v biases ({:.0f} parameters) are left out: the template's bias covers QKV, projection "
                    "and MLP together",
                    l * (g->heads + 2 * g->kv_heads) * d));
  }
  if (fam == Family::kQwen3 || fam == Family::kQwen3Moe) {
    notes->push_back(fmt::format(
        "Qwen3's q_norm and k_norm (RMSNorm over the head dim, {:.0f} parameters) are left out", l * 2 * d));
  }
  double rotary = 1.0;
  if (fam == Family::kNeoX) {
    rotary = 0.25;
    PLANNER_RETURN_IF_ERROR(f.OptDouble("rotary_pct", &rotary));
  }
  if (fam == Family::kNemotron) {
    rotary = 0.5;
    PLANNER_RETURN_IF_ERROR(f.OptDouble("partial_rotary_factor", &rotary));
  }
  if (rotary < 1.0) {
    notes->push_back(fmt::format(
        "partial rotary: RoPE on {:g}% of the head dim; costed over the whole head dim (a memory-bound term)",
        100 * rotary));
  }
  if (fam == Family::kNeoX) {
    bool parallel = true;
    PLANNER_RETURN_IF_ERROR(f.OptBool("use_parallel_residual", &parallel));
    if (parallel)
      notes->push_back(
          "use_parallel_residual: attention and MLP read the same input; the parameters and FLOPs are a sequential "
          "block's");
  }
  if (fam == Family::kNemotron) notes->push_back("Nemotron's LayerNorm1p is costed as a LayerNorm (weight and bias)");
  return Status::OK();
}

Status ReadDtype(const Fields& f, DType* dtype, std::vector<std::string>* notes) {
  const std::string key = f.Has("torch_dtype") ? "torch_dtype" : "dtype";
  if (!f.Has(key)) {
    *dtype = DType::kBf16;
    notes->push_back("the config names no torch_dtype: precision bf16");
    return Status::OK();
  }
  std::string value;
  PLANNER_RETURN_IF_ERROR(f.OptString(key, &value));
  if (value == "bfloat16") *dtype = DType::kBf16;
  else if (value == "float16") *dtype = DType::kFp16;
  else if (value == "float32") *dtype = DType::kFp32;
  else return f.Error(key, fmt::format("'{}' is not one of bfloat16, float16, float32", value));
  return Status::OK();
}

// The training run: --seq within the model's positions, --global-batch.
Status ChooseRun(const Fields& f, Family fam, int64_t max_positions, const HfImportOptions& o, HfImport* out) {
  const std::string limit_key = fam == Family::kGpt2 ? "n_positions" : "max_position_embeddings";
  if (o.seq > max_positions) {
    return Status::InvalidArgument(
        fmt::format("--seq {}: above {} {} of {}; the model has no positions past it: use --seq {} or less", o.seq,
                    limit_key, max_positions, f.r.Where(f.root[limit_key]), max_positions));
  }
  out->gpt.seq = o.seq > 0 ? o.seq : std::min(max_positions, kDefaultSeqCap);
  if (o.seq <= 0) {
    out->notes.push_back(
        fmt::format("seq {}: no --seq given, min({} {}, {}); the training length is the run's choice, pass --seq",
                    out->gpt.seq, limit_key, max_positions, kDefaultSeqCap));
  }
  out->global_batch = o.global_batch > 0
                          ? o.global_batch
                          : std::max<int64_t>(1, std::llround(kDefaultBatchTokens / static_cast<double>(out->gpt.seq)));
  if (o.global_batch <= 0) {
    out->notes.push_back(
        fmt::format("global_batch {}: no --global-batch given, 2^22 tokens (4M, Llama 2 and 3's batch) / seq {}",
                    out->global_batch, out->gpt.seq));
  }
  if (fam == Family::kGpt2 && out->gpt.seq < max_positions) {
    out->notes.push_back(
        fmt::format("the position table holds seq {} rows (the config has {}): parameters count {} fewer", out->gpt.seq,
                    max_positions, (max_positions - out->gpt.seq) * out->gpt.hidden));
  }
  return Status::OK();
}

// The full-attention period of a layer_types list ("sliding_attention" / "full_attention" per layer, one per layer):
// 0 when every layer slides, N when exactly layers N, 2N, ... (1-based) are full, kNoneSlides when every layer is
// full, -1 when the pattern is none of them.
constexpr int64_t kNoneSlides = -2;
int64_t FullAttentionPeriod(const YAML::Node& types, int64_t layers) {
  if (static_cast<int64_t>(types.size()) != layers) return -1;
  std::vector<int64_t> full;
  for (size_t i = 0; i < types.size(); ++i) {
    if (!types[i].IsScalar()) return -1;
    const std::string t = types[i].Scalar();
    if (t == "full_attention") full.push_back(static_cast<int64_t>(i) + 1);
    else if (t != "sliding_attention") return -1;
  }
  if (full.empty()) return 0;
  if (static_cast<int64_t>(full.size()) == layers) return kNoneSlides;
  const int64_t n = full[0];
  if (n < 2) return -1;
  for (size_t k = 0; k < full.size(); ++k) {
    if (full[k] != n * static_cast<int64_t>(k + 1)) return -1;
  }
  return static_cast<int64_t>(types.size()) / n == static_cast<int64_t>(full.size()) ? n : -1;
}

// Sliding-window attention: Hugging Face's sliding_window W (the query and the W - 1 keys before it) as the
// template's window of W - 1 keys before each query (Megatron --window-size W-1,0, as Megatron-Bridge maps GPT-OSS),
// on every layer, or on the layers layer_types marks sliding when they are Megatron's pattern (every N-th full).
// Qwen2 / Qwen3's max_window_layers (the layers from it up slide) and other patterns are costed as full attention.
// Written whatever seq is: a window covering the sequence costs as causal attention, and a later solve --seq
// longer than it costs the window.
void ImportSlidingWindow(const Fields& f, HfImport* out) {
  if (!f.Has("sliding_window")) return;
  bool used = true;
  (void)f.OptBool("use_sliding_window", &used);
  int64_t window = 0;
  if (!used || !f.r.AsInt(f.root["sliding_window"], "sliding_window", &window, 1).ok()) return;
  int64_t period = 0;
  if (f.Has("layer_types") && f.root["layer_types"].IsSequence()) {
    period = FullAttentionPeriod(f.root["layer_types"], out->gpt.layers);
  } else if (f.Has("max_window_layers")) {  // Qwen2 / Qwen3: the first max_window_layers layers attend fully
    int64_t from = 0;
    if (!f.r.AsInt(f.root["max_window_layers"], "max_window_layers", &from, 0).ok()) return;
    if (from >= out->gpt.layers) return;  // no layer slides
    if (from > 0) period = -1;
  }
  if (period == kNoneSlides) return;
  if (window < 2) {
    out->notes.push_back(fmt::format(
        "sliding_window {}: each query would attend to itself alone; costed as full causal attention", window));
    return;
  }
  if (period < 0) {
    out->notes.push_back(fmt::format(
        "sliding_window {}: its layers' pattern is not Megatron's (every N-th layer full): costed as full causal "
        "attention",
        window));
    return;
  }
  out->gpt.sliding_window = window - 1;
  out->gpt.full_attention_every = period;
  out->notes.push_back(
      period > 0
          ? fmt::format("sliding_window {}: layers attend to the {} keys before each query, layers {}, {}, ... "
                        "(1-based) to the whole sequence",
                        window, window - 1, period, 2 * period)
          : fmt::format("sliding_window {}: every layer attends to the {} keys before each query", window, window - 1));
}

void OtherNotes(const Fields& f, HfImport* out) {
  ImportSlidingWindow(f, out);
  if (f.Has("rope_scaling")) out->notes.push_back("rope_scaling changes the RoPE frequencies, not the costs");
  if (out->gpt.vocab % 128 != 0) {
    out->notes.push_back(
        fmt::format("vocab {} is not a multiple of 128: tensor parallelism needs tp to divide it (Megatron pads it "
                    "with --make-vocab-size-divisible-by 128 to {})",
                    out->gpt.vocab, (out->gpt.vocab + 127) / 128 * 128));
  }
}

// Qwen3-MoE's layer pattern: MoE everywhere but an optional leading run of dense layers.
Status ReadQwen3MoeLayers(const Fields& f, GptConfig* g) {
  int64_t step = 1;
  PLANNER_RETURN_IF_ERROR(f.OptInt("decoder_sparse_step", &step));
  if (step != 1) {
    return f.Error("decoder_sparse_step",
                   fmt::format("{}: every {}th block is MoE, the others dense; the planner's template has "
                               "dense blocks only before the first MoE block (moe.dense_layers): not imported",
                               step, step));
  }
  const YAML::Node& only = f.root["mlp_only_layers"];
  if (!f.Has("mlp_only_layers")) return Status::OK();
  if (!only.IsSequence()) return f.Error("mlp_only_layers", "must be a list of layer indices, e.g. []");
  for (size_t i = 0; i < only.size(); ++i) {
    int64_t index = -1;
    PLANNER_RETURN_IF_ERROR(f.r.AsInt(only[i], fmt::format("mlp_only_layers[{}]", i), &index, 0));
    if (index != static_cast<int64_t>(i)) {
      return f.Error("mlp_only_layers",
                     fmt::format("dense layer {} is not part of a leading run 0, 1, ...; the planner's template has "
                                 "dense blocks only before the first MoE block (moe.dense_layers): not imported",
                                 index));
    }
  }
  g->moe.dense_layers = static_cast<int64_t>(only.size());
  return Status::OK();
}

// DeepSeek-V3's MLA, dense prefix, shared experts, node-limited routing and MTP modules.
Status ReadDeepSeek(const Fields& f, HfImport* imp) {
  GptConfig* g = &imp->gpt;
  MoeConfig& m = g->moe;
  int64_t freq = 1;
  PLANNER_RETURN_IF_ERROR(f.OptInt("moe_layer_freq", &freq));
  if (freq != 1) {
    return f.Error("moe_layer_freq",
                   fmt::format("{}: MoE every {}th block; the planner's template has dense blocks only before the "
                               "first MoE block (first_k_dense_replace): not imported",
                               freq, freq));
  }
  PLANNER_RETURN_IF_ERROR(f.Int("n_routed_experts", &m.experts));
  PLANNER_RETURN_IF_ERROR(f.Int("moe_intermediate_size", &m.expert_ffn));
  if (f.Has("n_shared_experts"))
    PLANNER_RETURN_IF_ERROR(f.r.AsInt(f.root["n_shared_experts"], "n_shared_experts", &m.shared_experts, 0));
  if (f.Has("first_k_dense_replace")) {
    PLANNER_RETURN_IF_ERROR(f.r.AsInt(f.root["first_k_dense_replace"], "first_k_dense_replace", &m.dense_layers, 0));
  }
  if (f.Has("n_group") || f.Has("topk_group")) {
    PLANNER_RETURN_IF_ERROR(f.Int("n_group", &m.route_groups));
    PLANNER_RETURN_IF_ERROR(f.Int("topk_group", &m.route_group_limit));
    if (m.route_groups == 1) m.route_groups = m.route_group_limit = 0;  // one group: no node limit
  }
  std::string scoring = "softmax";
  PLANNER_RETURN_IF_ERROR(f.OptString("scoring_func", &scoring));
  if (scoring != "softmax" && scoring != "sigmoid") {
    return f.Error("scoring_func",
                   fmt::format("'{}' is not softmax or sigmoid, the routers the planner costs", scoring));
  }
  m.router = scoring;
  PLANNER_RETURN_IF_ERROR(f.OptProbability("aux_loss_alpha", &m.aux_loss));
  MlaConfig& a = g->mla;
  if (f.Has("q_lora_rank")) PLANNER_RETURN_IF_ERROR(f.r.AsInt(f.root["q_lora_rank"], "q_lora_rank", &a.q_lora_rank, 0));
  PLANNER_RETURN_IF_ERROR(f.Int("kv_lora_rank", &a.kv_lora_rank));
  PLANNER_RETURN_IF_ERROR(f.Int("qk_rope_head_dim", &a.qk_rope_head_dim));
  PLANNER_RETURN_IF_ERROR(f.Int("qk_nope_head_dim", &a.qk_nope_head_dim));
  PLANNER_RETURN_IF_ERROR(f.Int("v_head_dim", &a.v_head_dim));
  if (a.qk_rope_head_dim % 2 != 0)
    return f.Error("qk_rope_head_dim",
                   fmt::format("{} is odd: RoPE rotates pairs; not a valid MLA config", a.qk_rope_head_dim));
  if (f.Has("num_nextn_predict_layers")) {
    PLANNER_RETURN_IF_ERROR(f.r.AsInt(f.root["num_nextn_predict_layers"], "num_nextn_predict_layers", &g->mtp, 0));
  }
  if (f.Has("quantization_config")) {
    imp->notes.push_back(
        "quantization_config: the released weights are quantized; precision follows torch_dtype: set precision: fp8 "
        "for FP8 training (DeepSeek-V3's)");
  }
  imp->notes.push_back(
      "routed_scaling_factor, topk_method and norm_topk_prob change the routing weights, not the costs");
  return Status::OK();
}

// The MoE fields of Mixtral, Qwen3-MoE and DeepSeek-V3 (docs/formats.md, "planner import hf").
Status ReadMoe(const Fields& f, Family fam, HfImport* imp) {
  MoeConfig& m = imp->gpt.moe;
  if (fam == Family::kDeepSeekV3) PLANNER_RETURN_IF_ERROR(ReadDeepSeek(f, imp));
  if (fam == Family::kMixtral || fam == Family::kGptOss) {
    PLANNER_RETURN_IF_ERROR(f.Int("num_local_experts", &m.experts));
    m.expert_ffn = imp->gpt.ffn;  // Mixtral's and GPT-OSS's intermediate_size is one expert's
  }
  if (fam == Family::kQwen3Moe) {
    PLANNER_RETURN_IF_ERROR(f.Int("num_experts", &m.experts));
    PLANNER_RETURN_IF_ERROR(f.Int("moe_intermediate_size", &m.expert_ffn));
    PLANNER_RETURN_IF_ERROR(ReadQwen3MoeLayers(f, &imp->gpt));
  }
  PLANNER_RETURN_IF_ERROR(f.Int("num_experts_per_tok", &m.top_k));
  if (fam != Family::kDeepSeekV3) PLANNER_RETURN_IF_ERROR(f.OptProbability("router_aux_loss_coef", &m.aux_loss));
  const std::string experts_key = fam == Family::kMixtral || fam == Family::kGptOss
                                      ? "num_local_experts"
                                      : (fam == Family::kQwen3Moe ? "num_experts" : "n_routed_experts");
  if (m.experts < 2)
    return f.Error(experts_key,
                   fmt::format("{} expert: a dense model; import it as its dense architecture", m.experts));
  if (m.top_k > m.experts) {
    return f.Error("num_experts_per_tok", fmt::format("{} is more than the {} experts ({}); not a valid config",
                                                      m.top_k, m.experts, experts_key));
  }
  if (m.dense_layers > imp->gpt.layers) {
    return f.Error(fam == Family::kDeepSeekV3 ? "first_k_dense_replace" : "mlp_only_layers",
                   fmt::format("{} dense layers of {}; not a valid config", m.dense_layers, imp->gpt.layers));
  }
  if (m.route_groups > 0 && (m.experts % m.route_groups != 0 || m.route_group_limit > m.route_groups)) {
    return f.Error(
        "n_group",
        fmt::format("n_group {} with topk_group {} does not split the {} experts into groups; not a valid config",
                    m.route_groups, m.route_group_limit, m.experts));
  }
  return Status::OK();
}

Status ImportUnguarded(const std::string& path, const std::string& text, const HfImportOptions& o, HfImport* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.RequireMap(root, "(top level)"));
  Fields f{r, root, "Hugging Face"};
  const Arch* arch = nullptr;
  PLANNER_RETURN_IF_ERROR(ReadArch(f, &arch));
  f.arch = arch->name;
  HfImport imp;
  imp.architecture = arch->name;
  imp.gpt.attention = "flash";
  PLANNER_RETURN_IF_ERROR(ReadShape(f, arch->family, &imp.gpt, &imp.max_positions));
  PLANNER_RETURN_IF_ERROR(ReadActivation(f, arch->family, &imp.gpt));
  PLANNER_RETURN_IF_ERROR(ReadLayerChoices(f, arch->family, &imp.gpt, &imp.notes));
  if (IsMoe(arch->family)) PLANNER_RETURN_IF_ERROR(ReadMoe(f, arch->family, &imp));
  // Dropout: the largest probability the config names (GPT-2's resid/attn/embd_pdrop 0.1; Llama-class
  // configs' attention_dropout 0.0); none named: 0, as modern pretraining runs.
  imp.gpt.dropout = 0;
  for (const char* key :
       {"hidden_dropout", "attention_dropout", "resid_pdrop", "attn_pdrop", "embd_pdrop", "hidden_dropout_prob"}) {
    double p = 0;
    PLANNER_RETURN_IF_ERROR(f.OptProbability(key, &p));
    if (p >= 0 && p < 1) imp.gpt.dropout = std::max(imp.gpt.dropout, p);
  }
  imp.gpt.tie_embeddings = arch->tie_default;
  PLANNER_RETURN_IF_ERROR(f.OptBool("tie_word_embeddings", &imp.gpt.tie_embeddings));
  PLANNER_RETURN_IF_ERROR(ReadDtype(f, &imp.dtype, &imp.notes));
  PLANNER_RETURN_IF_ERROR(ChooseRun(f, arch->family, imp.max_positions, o, &imp));
  OtherNotes(f, &imp);
  imp.name = o.name.empty() ? "imported" : o.name;
  // The template must build (the same checks a model file gets).
  ModelSpec check;
  check.path = path;
  PLANNER_RETURN_IF_ERROR(BuildGptModel(imp.gpt, imp.dtype, &check));
  *out = std::move(imp);
  return Status::OK();
}

}  // namespace

const std::vector<std::string>& HfArchitectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& a : kArchs) v.emplace_back(a.name);
    return v;
  }();
  return names;
}

Status ImportHfConfig(const std::string& path, const std::string& text, const HfImportOptions& o, HfImport* out) {
  return CatchYamlErrors(path, [&] { return ImportUnguarded(path, text, o, out); });
}

Status ImportHfConfigFile(const std::string& path, const HfImportOptions& o, HfImport* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text, kMaxConfigFileBytes));
  return ImportHfConfig(path, text, o, out);
}

namespace {
// A YAML scalar: plain when it is a simple name, else double-quoted with escapes.
std::string YamlScalar(const std::string& text) {
  bool plain = !text.empty() && std::isalpha(static_cast<unsigned char>(text[0]));
  for (char c : text)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  return plain ? text : YamlQuoted(text);
}
}  // namespace

std::string HfModelYaml(const HfImport& m, const std::string& source_path) {
  const GptConfig& g = m.gpt;
  std::string o =
      fmt::format("# {}: imported by `planner import hf` from {} ({}).\n", m.name, source_path, m.architecture);
  o += "# seq and global_batch describe the training run, which a config.json does not; max_position_embeddings\n";
  o += fmt::format("# ({}) is the model's limit, not the training length.\n", m.max_positions);
  for (const auto& n : m.notes) o += "# note: " + n + "\n";
  o += "format_version: 1\n";
  o += fmt::format("name: {}\n", YamlScalar(m.name));
  o += fmt::format("precision: {}\n", DTypeName(m.dtype));
  o += fmt::format("global_batch: {}\n", m.global_batch);
  o += "gpt:\n";
  o +=
      fmt::format("  layers: {}\n  hidden: {}\n  heads: {}\n  kv_heads: {}\n", g.layers, g.hidden, g.heads, g.kv_heads);
  o += fmt::format("  ffn: {}\n  ffn_act: {}\n  norm: {}\n  position: {}\n", g.ffn > 0 ? g.ffn : 4 * g.hidden,
                   g.ffn_act, g.norm, g.position);
  if (g.position == "rope") o += fmt::format("  rope_theta: {}\n", g.rope_theta);
  o += fmt::format("  bias: {}\n  tie_embeddings: {}\n  attention: {}\n  dropout: {}\n", g.bias, g.tie_embeddings,
                   g.attention, g.dropout);
  o += fmt::format("  seq: {}\n  vocab: {}\n", g.seq, g.vocab);
  if (g.head_dim > 0) o += fmt::format("  head_dim: {}\n", g.head_dim);
  if (g.sliding_window > 0) o += fmt::format("  sliding_window: {}\n", g.sliding_window);
  if (g.full_attention_every > 0) o += fmt::format("  full_attention_every: {}\n", g.full_attention_every);
  const MoeConfig& moe = g.moe;
  if (moe.experts > 0) {
    o += fmt::format(
        "  moe: {{experts: {}, top_k: {}, expert_ffn: {}, shared_experts: {}, dense_layers: {}, router: {}, aux_loss: "
        "{}",
        moe.experts, moe.top_k, moe.expert_ffn, moe.shared_experts, moe.dense_layers, moe.router, moe.aux_loss);
    if (moe.route_groups > 0)
      o += fmt::format(", route_groups: {}, route_group_limit: {}", moe.route_groups, moe.route_group_limit);
    o += "}\n";
  }
  const MlaConfig& a = g.mla;
  if (a.kv_lora_rank > 0) {
    o += fmt::format(
        "  mla: {{q_lora_rank: {}, kv_lora_rank: {}, qk_rope_head_dim: {}, qk_nope_head_dim: {}, v_head_dim: {}}}\n",
        a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim, a.qk_nope_head_dim, a.v_head_dim);
  }
  if (g.mtp > 0) o += fmt::format("  mtp: {}\n", g.mtp);
  return o;
}

}  // namespace planner
