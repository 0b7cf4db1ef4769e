#include "spec/layer_catalog.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace planner {

namespace {
// The bytes per element of a GEMM input kept for the weight gradient: under fp8 Transformer Engine's
// Linear saves its FP8-cast input (1 byte; DeepSeek-V3 section 3.3.2 caches them in FP8 too); else dt.
double GemmInputBytes(DType dtype) { return dtype == DType::kFp8 ? 1 : DTypeBytes(dtype); }

// Choices of the transformer layers' string attributes (docs/formats.md); the first is the default.
const StringKey kActKey{"act", {"gelu", "swiglu", "relu2"}};
const StringKey kNormKey{"norm", {"layernorm", "rmsnorm"}};
const StringKey kPositionKey{"position", {"learned", "rope"}};
const StringKey kAttentionKey{"attention", {"flash", "unfused"}};
const StringKey kRouterKey{"router", {"softmax", "sigmoid"}};

std::vector<std::string> Join(std::initializer_list<std::vector<std::string>> parts) {
  std::vector<std::string> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}
// Multi-head latent attention (DeepSeek-V2/V3): kv_lora_rank > 0 turns it on.
const std::vector<std::string> kMlaKeys = {"q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                           "v_head_dim"};
const std::vector<std::string> kMoeKeys = {
    "heads",      "kv_heads",     "head_dim",          "experts",    "top_k",  "expert_ffn",
    "shared_ffn", "route_groups", "route_group_limit", "rope_theta", "window", "packed"};
const std::vector<std::string> kMoeZeroOk = {"q_lora_rank", "shared_ffn", "route_groups", "route_group_limit"};
}  // namespace

const std::vector<LayerTypeInfo>& LayerTypes() {
  static const std::vector<LayerTypeInfo> types = {
      {LayerKind::kLinear, {"in_features", "out_features"}, {"bias"}, {"out_features"}},
      {LayerKind::kConv2d,
       {"in_channels", "out_channels", "kernel", "stride", "padding"},
       {"bias"},
       {"out_channels", "kernel"}},
      {LayerKind::kRelu, {}, {}, {}},
      {LayerKind::kGelu, {}, {}, {}},
      {LayerKind::kMaxpool, {"kernel", "stride", "padding"}, {}, {"kernel"}},
      {LayerKind::kAvgpool, {"kernel", "stride", "padding"}, {}, {"kernel"}},
      {LayerKind::kFlatten, {}, {}, {}},
      {LayerKind::kDropout, {}, {}, {}, /*has_probability=*/true},
      {LayerKind::kLayernorm, {}, {}, {}},
      {LayerKind::kRmsnorm, {}, {}, {}},
      {LayerKind::kEmbedding, {"vocab", "hidden", "positions"}, {"dropout"}, {"vocab", "hidden"}},
      {LayerKind::kAttention,
       Join({{"heads", "kv_heads", "rope_theta", "head_dim", "window", "packed"}, kMlaKeys}),
       {"bias", "dropout"},
       {"heads"},
       false,
       {kPositionKey, kAttentionKey},
       {},
       {"q_lora_rank"}},
      {LayerKind::kMlp, {"ffn"}, {"bias", "dropout"}, {}, false, {kActKey}},
      {LayerKind::kTransformerBlock,
       Join({{"heads", "kv_heads", "ffn", "rope_theta", "head_dim", "window", "packed"}, kMlaKeys}),
       {"bias", "dropout"},
       {"heads"},
       false,
       {kActKey, kNormKey, kPositionKey, kAttentionKey},
       {},
       {"q_lora_rank"}},
      {LayerKind::kMoeBlock,
       Join({kMoeKeys, kMlaKeys}),
       {"bias", "dropout"},
       {"heads", "experts", "top_k", "expert_ffn"},
       false,
       {kActKey, kNormKey, kPositionKey, kAttentionKey, kRouterKey},
       {"capacity_factor", "aux_loss"},
       kMoeZeroOk},
      // One multi-token-prediction module (DeepSeek-V3): a moe_block's keys when experts is set, else a
      // transformer_block's (ffn), and the vocab of the shared output head.
      {LayerKind::kMtp,
       Join({kMoeKeys, kMlaKeys, {"ffn", "vocab"}}),
       {"bias", "dropout"},
       {"heads", "vocab"},
       false,
       {kActKey, kNormKey, kPositionKey, kAttentionKey, kRouterKey},
       {"capacity_factor", "aux_loss"},
       kMoeZeroOk},
      {LayerKind::kLmHead, {"vocab"}, {"tied"}, {"vocab"}},
      {LayerKind::kLoss, {}, {}, {}},
  };
  return types;
}

const LayerTypeInfo* FindLayerType(LayerKind kind) {
  for (const auto& t : LayerTypes()) {
    if (t.kind == kind) return &t;
  }
  return nullptr;
}

const StringKey* FindStringKey(LayerKind kind, const std::string& key) {
  const LayerTypeInfo* info = FindLayerType(kind);
  if (info == nullptr) return nullptr;
  for (const auto& k : info->string_keys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

namespace {
enum Trait : unsigned { kBlockTrait = 1, kAttentionTrait = 2, kDenseMlpTrait = 4, kNormTrait = 8, kOutputTrait = 16 };

// Every kind's traits (spec/layer_catalog.h), one case each: a new kind must state its own.
unsigned Traits(LayerKind kind) {
  switch (kind) {
    case LayerKind::kLinear:
    case LayerKind::kConv2d:
    case LayerKind::kRelu:
    case LayerKind::kGelu:
    case LayerKind::kMaxpool:
    case LayerKind::kAvgpool:
    case LayerKind::kFlatten:
    case LayerKind::kDropout:
    case LayerKind::kEmbedding: return 0;
    case LayerKind::kLayernorm:
    case LayerKind::kRmsnorm: return kNormTrait;
    case LayerKind::kAttention: return kAttentionTrait;
    case LayerKind::kMlp: return kDenseMlpTrait;
    case LayerKind::kTransformerBlock: return kBlockTrait | kAttentionTrait | kDenseMlpTrait;
    case LayerKind::kMoeBlock: return kBlockTrait | kAttentionTrait;
    case LayerKind::kMtp: return 0;  // a block inside, costed whole: counted by none of the block traits
    case LayerKind::kLmHead:
    case LayerKind::kLoss: return kOutputTrait;
    case LayerKind::kMoe: return 0;  // the runtime's MoE feed-forward alone
  }
  return 0;
}
}  // namespace

bool IsBlock(LayerKind kind) { return (Traits(kind) & kBlockTrait) != 0; }
bool HasAttention(LayerKind kind) { return (Traits(kind) & kAttentionTrait) != 0; }
bool HasDenseMlp(LayerKind kind) { return (Traits(kind) & kDenseMlpTrait) != 0; }
bool IsNorm(LayerKind kind) { return (Traits(kind) & kNormTrait) != 0; }
bool RecomputedInFull(LayerKind kind) { return (Traits(kind) & kOutputTrait) == 0; }

std::string ChoiceList(const std::vector<std::string>& choices) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : " | ") + c;
  return list;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

double Elements(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

Status ShapeError(const std::string& msg) { return Status::InvalidArgument(msg); }

// A transformer layer's dimensions and choices, resolved from its attributes
// (spec/layer.h, /docs/cost_model.md section 1): s sequence, h hidden, a query
// heads, g KV heads (groups), d head dim (h / a unless head_dim is set), f FFN
// hidden size (moe_block: one expert's). MLA (kv_lora_rank > 0): q_lora (0: no
// query compression), kv_lora, the rope and nope parts of the query/key head
// dim (dqk = nope + rope) and the value head dim dv.
struct Transformer {
  double s = 0, h = 0, a = 0, g = 0, d = 0, f = 0;
  double dqk = 0, dv = 0;  // query/key and value head dims (d and d without MLA)
  bool mla = false;
  double q_lora = 0, kv_lora = 0, rope_dim = 0, nope_dim = 0;
  std::string act, norm, position, attention;
  bool bias = true;
  bool dropout = true;  // Megatron GPT's hidden and attention dropout (1-byte masks kept for backward); false: none
  double window = 0;    // sliding-window attention: keys before each query (0: the whole causal sequence)
  // Packed samples (THD, cu_seqlens): attention runs within each sample, whose length-weighted mean (sum s_i^2 /
  // sum s_i) this is; 0, or s and more: one sample per sequence.
  double packed = 0;
  bool is_packed() const { return packed > 0 && packed < s; }
  bool flash() const { return attention == "flash"; }
  // A window that leaves keys out (one of s - 1 keys or more before each query attends to everything before it, as
  // causal attention does).
  bool windowed() const { return window > 0 && window < s - 1; }
};

// The projections of one attention layer, per token: GEMM weights (2 s FLOPs each per pass),
// parameters, what backward keeps, what RoPE rotates, the K and V ring attention passes.
struct AttnGeom {
  double weights = 0, params = 0;
  double replicated_weights = 0, replicated_params = 0;  // MLA's down projections and latent norms (not split by TP)
  double kept = 0, kept_replicated = 0;                  // elements kept for backward (no masks, no log-sum-exp)
  // Of them: the inputs kept only for an FP8 GEMM (QKV or MLA's down and up projections), the output
  // projection's input (flash's backward reads it too, as the attention output), in kept_replicated.
  double kept_gemm_in = 0, proj_in = 0, replicated_gemm_in = 0;
  double rope = 0, kv = 0, latent_norm = 0;
};

AttnGeom Geometry(const Transformer& t) {
  AttnGeom g;
  const double h = t.h, a = t.a;
  if (!t.mla) {  // Q [h, a d], K and V [h, g d], output [a d, h]
    const double q = a * t.d, kv = t.g * t.d;
    g.weights = h * (q + 2 * kv) + q * h;
    g.params = g.weights + (t.bias ? q + 2 * kv + h : 0);
    g.kept = h + q + 2 * kv + q;  // QKV input, Q, K, V, projection input
    g.kept_replicated = h;
    g.kept_gemm_in = g.replicated_gemm_in = h;
    g.proj_in = q;
    g.rope = q + kv;
    g.kv = 2 * kv;
    return g;
  }
  // DeepSeek-V3 MLA: q down [h, q_lora] + RMSNorm, q up [q_lora, a dqk] (no q_lora: q [h, a dqk]);
  // kv down [h, kv_lora + rope] + RMSNorm on kv_lora, kv up [kv_lora, a (nope + dv)]; output [a dv, h].
  const double down_cols = t.q_lora + t.kv_lora + t.rope_dim, q = a * t.dqk, kv_up = a * (t.nope_dim + t.dv);
  const double down = h * down_cols;
  const double up = (t.q_lora > 0 ? t.q_lora : h) * q + t.kv_lora * kv_up;
  g.weights = down + up + a * t.dv * h;
  const double norms = t.q_lora + t.kv_lora;  // the latent norms are RMSNorms (DeepSeek-V3, Megatron-Core MLA)
  g.replicated_weights = down;
  g.replicated_params = down + norms + (t.bias ? down_cols : 0);
  g.params = g.weights + norms + (t.bias ? down_cols + q + kv_up + h : 0);
  // x; the latent norms' inputs and the up projections' inputs; Q, K, V; the output projection's input
  g.kept = h + 2 * (t.q_lora + t.kv_lora) + 2 * q + 2 * a * t.dv;
  g.kept_replicated = h + 2 * (t.q_lora + t.kv_lora);
  g.kept_gemm_in = g.replicated_gemm_in = h + t.q_lora + t.kv_lora;  // x, the up projections' inputs
  g.proj_in = a * t.dv;
  g.rope = a * t.rope_dim + t.rope_dim;  // q_pe of every head, the shared k_pe
  g.kv = a * (t.dqk + t.dv);
  g.latent_norm = t.q_lora + t.kv_lora;
  return g;
}

// The GEMMs of Megatron-Core's SelfAttention (linear_qkv column-parallel, linear_proj row-parallel) or
// MLASelfAttention (the down projections replicated, the up projections column-parallel, the output row).
void AddAttentionGemms(const Transformer& t, Layer* l) {
  const double s = t.s, h = t.h, a = t.a;
  auto add = [l](double rows, double n, double k, GemmSplit split, GemmRole role) {
    l->gemms.push_back({rows, n, k, split});
    l->gemms.back().role = role;
  };
  if (!t.mla) {
    const double q = a * t.d, kv = t.g * t.d;
    add(s, q + 2 * kv, h, GemmSplit::kColumn, GemmRole::kQkv);
    add(s, h, q, GemmSplit::kRow, GemmRole::kProj);
    return;
  }
  add(s, t.q_lora + t.kv_lora + t.rope_dim, h, GemmSplit::kReplicated, GemmRole::kOther);
  add(s, a * t.dqk, t.q_lora > 0 ? t.q_lora : h, GemmSplit::kColumn, GemmRole::kQkv);
  add(s, a * (t.nope_dim + t.dv), t.kv_lora, GemmSplit::kColumn, GemmRole::kQkv);
  add(s, h, a * t.dv, GemmSplit::kRow, GemmRole::kProj);
}

// An MLP's fc1 (column-parallel) and fc2 (row-parallel); a routed expert's when `experts` > 0.
void AddMlpGemms(const std::string& act, double h, double f, double tokens, double experts, Layer* l) {
  const double fc1_cols = act == "swiglu" ? 2 * f : f;
  GemmShape fc1{tokens, fc1_cols, h, GemmSplit::kColumn}, fc2{tokens, h, f, GemmSplit::kRow};
  fc1.role = GemmRole::kFc1;
  fc2.role = GemmRole::kFc2;
  if (experts > 0) {
    fc1.expert = fc2.expert = true;
    fc1.count = fc2.count = experts;
  }
  l->gemms.push_back(fc1);
  l->gemms.push_back(fc2);
}

RecomputeModuleCost& Module(Layer* l, RecomputeModule m) { return l->recompute_modules[static_cast<size_t>(m)]; }

// Attention (Megatron-Core SelfAttention, or MLASelfAttention) on a [s, h] input, per sample. dt:
// bytes per element. Stash per Korthikanti et al. 2022 section 4.1, written
// per tensor so GQA (K and V of g d columns) and flash attention (no s^2
// tensor; the log-sum-exp, fp32 a s, instead) fit; the 1-byte dropout masks
// stay at 1 byte. gi: the bytes of a kept FP8-GEMM input (GemmInputBytes; the output projection's
// input stays at dt under flash, whose backward reads it, unless core_attn re-makes the core).
void AttentionCosts(const Transformer& t, double dt, double gi, Layer* l) {
  const double s = t.s, h = t.h, a = t.a;
  const AttnGeom geo = Geometry(t);
  l->params += geo.params;
  l->tp_replicated_params += geo.replicated_params;
  l->tp_replicated_fwd_flops += 2 * s * geo.replicated_weights;
  const double gemm = 2 * s * geo.weights;                  // QKV (MLA: down and up) and output projections
  const double core_full = 2 * s * s * a * (t.dqk + t.dv);  // Q K^T (2 s^2 a dqk) and scores x V (2 s^2 a dv)
  // The query-key pairs computed: causal, s^2 / 2; a sliding window of w keys, w s - w^2 / 2 (the first w queries
  // see fewer). Per pair 2 a (dqk + dv) FLOPs.
  // Packed samples of lengths s_i: sum s_i (s_i + 1) / 2 pairs, s (packed + 1) / 2 (within the window, if narrower).
  double pairs = t.windowed() ? t.window * s - t.window * t.window / 2 : s * s / 2;
  if (t.is_packed()) pairs = std::min(pairs, s * (t.packed + 1) / 2);
  const double core_useful = 2 * pairs * a * (t.dqk + t.dv);
  // Flash: the causal (or windowed) kernel skips the masked blocks; its backward
  // re-runs Q K^T and adds dV, dP, dQ, dK: 5 s^2 GEMMs against forward's 2.
  // Unfused: the whole s^2 forward (the mask skips nothing), two GEMMs per forward one in backward.
  const double core_fwd = t.flash() ? core_useful : core_full;
  const double core_bwd = t.flash() ? 2.5 * core_fwd : 2 * core_full;
  l->fwd_flops += gemm + core_fwd;
  AddAttentionGemms(t, l);
  l->attention_seq = s;
  l->attention_window = t.windowed() ? t.window : 0;
  l->attention_packed = t.is_packed() ? t.packed : 0;
  l->attention_head_dim = (t.dqk + t.dv) / 2;
  l->attention_heads = a;
  l->bwd_weight_flops += gemm;
  l->bwd_input_flops += gemm + core_bwd;
  // Model FLOPs: 3 x forward with the causal half of the s^2 core, as Megatron-LM's
  // num_floating_point_operations counts since its 2025 causal-mask change (every model here is a
  // decoder; a sliding window: its pairs); Korthikanti eq. (7) counts the full 4 s^2 h.
  l->model_flops += 3 * (gemm + core_useful);
  l->attention_core_fwd_flops += core_fwd;
  l->cp_kv_bytes += dt * s * geo.kv;
  const double mask = t.dropout ? s * h : 0;  // the output dropout's 1-byte mask
  const double gemm_saved = (dt - gi) * s * (geo.kept_gemm_in + (t.flash() ? 0 : geo.proj_in));  // 0 unless fp8
  const double kept = dt * s * geo.kept - gemm_saved + mask;
  double mem_fwd = dt * 4 * s * h, mem_bwd = dt * 8 * s * h;  // dropout + residual on s h
  if (t.position == "rope") {                                 // rotate Q and K: read + write, the same in backward
    mem_fwd += dt * 2 * s * geo.rope;
    mem_bwd += dt * 2 * s * geo.rope;
  }
  mem_fwd += dt * 2 * s * geo.latent_norm;  // MLA's latent RMSNorms
  mem_bwd += dt * 4 * s * geo.latent_norm;
  if (t.mla) {  // mla_up_proj: Q, K and V dropped, re-made from the kept latents by the up projections and RoPE
    RecomputeModuleCost& up = Module(l, RecomputeModule::kMlaUpProj);
    up.stash_bytes = dt * s * (2 * a * t.dqk + a * t.dv);
    up.gemm_flops = 2 * s * ((t.q_lora > 0 ? t.q_lora : h) * a * t.dqk + t.kv_lora * a * (t.nope_dim + t.dv));
    up.mem_bytes = t.position == "rope" ? dt * 2 * s * geo.rope : 0;
  }
  if (t.flash()) {
    l->stash_bytes += kept + 4 * a * s;  // + the fp32 log-sum-exp per head and row
    // core_attn re-makes O in backward: the output projection keeps only its FP8 copy (fp8; else nothing changes)
    l->stash_bytes_selective += kept - (dt - gi) * s * geo.proj_in + 4 * a * s;
    l->selective_recompute_flops += core_fwd;  // Megatron-Core re-runs the core attention forward
  } else {
    // softmax output and dropout output (dtype) and the dropout mask (1 byte), a s^2 each;
    // without dropout the softmax output alone
    l->stash_bytes += kept + (t.dropout ? dt * 2 * a * s * s + a * s * s : dt * a * s * s);
    l->stash_bytes_selective += kept;
    l->selective_recompute_flops += core_full;
    l->selective_recompute_mem_bytes += dt * 4 * a * s * s;
    mem_fwd += dt * 4 * a * s * s;  // softmax, scale, mask, dropout over a s^2
    mem_bwd += dt * 8 * a * s * s;
  }
  l->fwd_mem_bytes += mem_fwd;
  l->bwd_mem_bytes += mem_bwd;
  RecomputeModuleCost& core = Module(l, RecomputeModule::kCoreAttn);  // what stash_bytes_selective leaves out
  core.stash_bytes =
      t.flash() ? (dt - gi) * s * geo.proj_in : (t.dropout ? dt * 2 * a * s * s + a * s * s : dt * a * s * s);
  core.core_flops = t.flash() ? core_fwd : core_full;
  core.mem_bytes = t.flash() ? 0 : dt * 4 * a * s * s;
  // QKV input (MLA: and the latents), the mask
  l->stash_bytes_tp_replicated += dt * s * geo.kept_replicated - (dt - gi) * s * geo.replicated_gemm_in + mask;
  l->tp_allreduces_fwd += 1;
}

// One MLP: fc1 [h, f] (SwiGLU: [h, 2f], gate and up), the activation, fc2 [f, h], run on `tokens` tokens.
struct MlpPart {
  double weights = 0, params = 0, gemm = 0, stash = 0, act_fwd = 0, act_bwd = 0;
  double fc1_in = 0, fc1_out = 0;  // elements of stash: fc1's input and output (the rest: fc2's input)
  // Bytes of stash: fc1's input at in_bytes, fc1's output at dt, fc2's input at gi (written as a cut
  // from dt so that gi == in_bytes == dt gives dt * stash exactly).
  double StashBytes(double dt, double gi, double in_bytes) const {
    return dt * stash - (dt - gi) * (stash - fc1_in - fc1_out) - (dt - in_bytes) * fc1_in;
  }
};
MlpPart Mlp(const std::string& act, bool bias, double h, double f, double tokens) {
  const bool swiglu = act == "swiglu";
  const double fc1_cols = swiglu ? 2 * f : f;
  MlpPart m;
  m.weights = h * fc1_cols + f * h;
  m.params = m.weights + (bias ? fc1_cols + h : 0);
  m.gemm = 2 * tokens * h * fc1_cols + 2 * tokens * f * h;
  // fc1 input, the activation's input (fc1's output) and fc2's input.
  // GeLU and relu2 (relu then square, fused) keep s f each; SwiGLU keeps its 2 s f input.
  m.stash = tokens * (h + fc1_cols + f);
  m.fc1_in = tokens * h;
  m.fc1_out = tokens * fc1_cols;
  // Activation: GeLU / relu2 read + write s f forward, 4 s f backward; SwiGLU
  // reads 2 s f and writes s f forward, reads 3 s f and writes 2 s f backward.
  m.act_fwd = tokens * (swiglu ? 3 * f : 2 * f);
  m.act_bwd = tokens * (swiglu ? 5 * f : 4 * f);
  return m;
}

// A GEMM's FLOPs: the same in forward, backward-input and backward-weight; model FLOPs 3x.
void AddGemm(double fwd, Layer* l) {
  l->fwd_flops += fwd;
  l->bwd_input_flops += fwd;
  l->bwd_weight_flops += fwd;
  l->model_flops += 3 * fwd;
}

// Dense MLP with its dropout and residual.
void MlpCosts(const Transformer& t, double dt, double gi, Layer* l) {
  const double s = t.s, h = t.h;
  const MlpPart m = Mlp(t.act, t.bias, h, t.f, s);
  l->params += m.params;
  AddGemm(m.gemm, l);
  AddMlpGemms(t.act, h, t.f, s, 0, l);
  const double mask = t.dropout ? s * h : 0;     // the dropout mask
  const double kept = m.StashBytes(dt, gi, gi);  // fc1's input is the norm's output, read by fc1 alone
  l->stash_bytes += kept + mask;
  l->stash_bytes_selective += kept + mask;
  l->stash_bytes_tp_replicated += gi * s * h + mask;  // fc1 input and the dropout mask
  l->fwd_mem_bytes += dt * (m.act_fwd + 4 * s * h);   // + dropout and residual on s h
  l->bwd_mem_bytes += dt * (m.act_bwd + 8 * s * h);
  l->tp_allreduces_fwd += 1;
  // mlp: the sub-layer checkpointed whole; it keeps its input (fc1's, as the checkpoint got it: dt),
  // re-runs its forward and its all-reduce.
  RecomputeModuleCost& mlp = Module(l, RecomputeModule::kMlp);
  mlp.stash_bytes = gi == dt ? dt * (m.stash - s * h) : kept - dt * s * h;
  mlp.gemm_flops = m.gemm;
  mlp.mem_bytes = dt * m.act_fwd;
  mlp.tp_collectives = 1;
}

// An MoE MLP's resolved attributes: E routed experts, top_k, one expert's FFN, the shared
// experts' total FFN (0: none), the capacity factor (0: dropless).
struct Moe {
  double e = 0, k = 0, fe = 0, fs = 0, capacity = 0;
};

// The recompute modules of an MoE MLP (docs/cost_model.md section 5): moe checkpoints the whole
// MoELayer (keeps its s h input; re-runs router, dispatch, experts, combine and the shared experts),
// shared_experts the shared expert MLP (keeps its input), moe_act the routed experts' activation
// (its output, fc2's input, dropped; re-made from the kept fc1 output, memory-bound).
void MoeRecomputeModules(double dt, double gi, double s, double h, const MlpPart* shared, const MlpPart& ex,
                         double router_flops, double stash, double mem_fwd, Layer* l) {
  RecomputeModuleCost& moe = Module(l, RecomputeModule::kMoe);
  const double shared_kept = shared ? shared->StashBytes(dt, gi, dt) - dt * s * h : 0,
               ex_kept = ex.StashBytes(dt, gi, gi);
  moe.stash_bytes = stash - dt * s * h;
  moe.stash_tp_replicated = stash - dt * s * h - shared_kept - ex_kept;  // the fp32 scores
  moe.expert_stash_bytes = ex_kept;
  moe.gemm_flops = router_flops + (shared ? shared->gemm : 0) + ex.gemm;
  moe.expert_gemm_flops = ex.gemm;
  moe.mem_bytes = mem_fwd;
  moe.tp_collectives = 1;
  moe.alltoall = true;
  if (shared != nullptr) {
    RecomputeModuleCost& se = Module(l, RecomputeModule::kSharedExperts);
    se.stash_bytes = gi == dt ? dt * (shared->stash - s * h) : shared_kept;
    se.gemm_flops = shared->gemm;
    se.mem_bytes = dt * shared->act_fwd;
  }
  RecomputeModuleCost& act = Module(l, RecomputeModule::kMoeAct);
  const double fc2_in = ex.stash - ex.fc1_in - ex.fc1_out;  // the activation's output, per token copy
  act.stash_bytes = act.expert_stash_bytes = gi * fc2_in;
  act.mem_bytes = dt * ex.act_fwd;
}

// The MoE MLP of a moe_block (Megatron-Core MoELayer; docs/cost_model.md, MoE): the router
// [h, E] (replicated over TP), the shared expert MLP (a dense MLP of width fs), and the routed
// experts, each token reaching top_k of them (balanced; capacity c > 0 pads to c s k tokens).
// Under fp8 the MLP input stays at dt (the router, a bf16 GEMM per DeepSeek-V3 section 3.3.1, reads it);
// the shared and routed experts' fc2 inputs and the routed experts' permuted inputs are FP8 (gi).
void MoeCosts(const Transformer& t, const Moe& m, double dt, double gi, Layer* l) {
  const double s = t.s, h = t.h;
  const double router = 2 * s * h * m.e;
  l->params += m.e * h;
  l->tp_replicated_params += m.e * h;
  l->tp_replicated_fwd_flops += router;
  AddGemm(router, l);
  l->gemms.push_back({s, m.e, h, GemmSplit::kReplicated, false, 1, true});
  double stash = 4 * s * m.e;                                   // fp32 routing scores
  double mem_fwd = 4 * 2 * s * m.e, mem_bwd = 4 * 3 * s * m.e;  // softmax | sigmoid and top-k over them
  MlpPart shared;
  if (m.fs > 0) {
    shared = Mlp(t.act, t.bias, h, m.fs, s);
    l->params += shared.params;
    AddGemm(shared.gemm, l);
    AddMlpGemms(t.act, h, m.fs, s, 0, l);
    stash += shared.StashBytes(dt, gi, dt);  // holds the MLP input the router's weight gradient reads too
    mem_fwd += dt * shared.act_fwd;
    mem_bwd += dt * shared.act_bwd;
  } else {
    stash += dt * s * h;  // the router's input
  }
  const double routed = s * m.k * (m.capacity > 0 ? m.capacity : 1);  // token copies the experts run
  const MlpPart ex = Mlp(t.act, t.bias, h, m.fe, routed);
  const MlpPart active = Mlp(t.act, t.bias, h, m.fe, s * m.k);  // the model FLOPs count routed tokens only
  l->params += m.e * ex.params;
  l->expert_params = m.e * ex.params;
  l->fwd_flops += ex.gemm;
  AddMlpGemms(t.act, h, m.fe, routed, m.e, l);
  l->bwd_input_flops += ex.gemm;
  l->bwd_weight_flops += ex.gemm;
  l->model_flops += 3 * active.gemm;
  l->expert_fwd_flops = l->expert_bwd_input_flops = l->expert_bwd_weight_flops = ex.gemm;
  l->expert_stash_bytes = ex.StashBytes(dt, gi, gi);  // permuted input, fc1 output, fc2 input of every token copy
  stash += l->expert_stash_bytes;
  // Permute and unpermute (read s h, write the copies; back, weighted by the probabilities), the activation.
  mem_fwd += dt * (ex.act_fwd + 2 * (s * h + routed * h));
  mem_bwd += dt * (ex.act_bwd + 2 * (s * h + routed * h));
  MoeRecomputeModules(dt, gi, s, h, m.fs > 0 ? &shared : nullptr, ex, router, stash, mem_fwd, l);
  const double mask = t.dropout ? s * h : 0;
  stash += mask;
  l->stash_bytes += stash;
  l->stash_bytes_selective += stash;
  l->stash_bytes_tp_replicated += dt * s * h + mask + 4 * s * m.e;  // MLP input, mask, routing scores
  l->fwd_mem_bytes += mem_fwd + dt * 4 * s * h;                     // + dropout and residual on s h
  l->bwd_mem_bytes += mem_bwd + dt * 8 * s * h;
  l->tp_allreduces_fwd += 1;
  l->experts = static_cast<int64_t>(m.e);
  l->top_k = static_cast<int64_t>(m.k);
  l->moe_dispatch_bytes = dt * s * m.k * h;
}

// LayerNorm (weight and bias) or RMSNorm (weight only) over the last dimension.
void NormCosts(double n, double last_dim, bool rms, double dt, Layer* l) {
  l->params += (rms ? 1 : 2) * last_dim;
  l->stash_bytes += dt * n;
  l->stash_bytes_selective += dt * n;
  l->stash_bytes_tp_replicated += dt * n;
  l->fwd_mem_bytes += dt * 2 * n;
  l->bwd_mem_bytes += dt * 4 * n;
}

// torchtitan's op-level selective activation checkpointing on a dense block (kOpSac; torchtitan
// distributed/activation_checkpoint.py, _save_list and _custom_policy): the block keeps its input, every
// odd-numbered matmul's output in forward order (wq, wk, wv, wo, w1, w3, w2: wq, wv, w1 and w2), the attention
// kernel's output and log-sum-exp, and recomputes in backward the other matmuls and every memory-bound
// op of its forward (norms, RoPE, the activation, residuals). Relative to no recompute: `stash_bytes` is
// what the block stops keeping, `stash_tp_replicated` of it the TP-replicated part (the input and the
// row-parallel outputs wo and w2 are whole on each TP rank). MLA blocks and MoE blocks: not costed (nothing
// dropped, nothing re-run; docs/cost_model.md section 5).
void OpSacCosts(const Transformer& t, double dt, Layer* l) {
  if (t.mla) return;
  const double s = t.s, h = t.h, q = t.a * t.d, kv = t.g * t.d;
  struct Mm {
    double k, n;
    bool row_parallel;
  };
  std::vector<Mm> mms = {{h, q, false}, {h, kv, false}, {h, kv, false}, {q, h, true}, {h, t.f, false}};
  if (t.act == "swiglu") mms.push_back({h, t.f, false});
  mms.push_back({t.f, h, true});
  double kept = h, kept_replicated = h, recompute_flops = 0;  // the block's input, whole on each TP rank
  for (size_t i = 0; i < mms.size(); ++i) {
    if (i % 2 == 0) {
      kept += mms[i].n;
      if (mms[i].row_parallel) kept_replicated += mms[i].n;
    } else {
      recompute_flops += 2 * s * mms[i].k * mms[i].n;
    }
  }
  kept += t.a * t.dv;  // the attention output
  RecomputeModuleCost& op = Module(l, RecomputeModule::kOpSac);
  // The last matmul, w2 (row-parallel), feeds the residual add alone: saved when odd-numbered (SwiGLU's seventh), read
  // by no backward (an add's gradient needs no inputs).
  if ((mms.size() - 1) % 2 == 0 && mms.back().row_parallel) op.unread_bytes = dt * s * mms.back().n;
  const double lse = t.flash() ? 4 * t.a * s : 0;
  op.stash_bytes = std::max(0.0, l->stash_bytes - dt * s * kept - lse);
  op.stash_tp_replicated = std::max(0.0, l->stash_bytes_tp_replicated - dt * s * kept_replicated);
  op.gemm_flops = recompute_flops;
  op.mem_bytes = l->fwd_mem_bytes;
}

// The string attribute `key` of a transformer layer: its value or the default, checked.
Status ChoiceAttr(LayerKind kind, const LayerAttrs& attrs, const std::string& key, std::string* out) {
  const StringKey* k = FindStringKey(kind, key);
  if (k == nullptr) return Status::OK();
  *out = attrs.String(key, k->choices.front());
  if (std::find(k->choices.begin(), k->choices.end(), *out) == k->choices.end()) {
    return ShapeError(fmt::format("{} '{}' is not one of {}; set {}: {}", key, *out, ChoiceList(k->choices), key,
                                  k->choices.front()));
  }
  return Status::OK();
}

// MLA's attributes (kv_lora_rank > 0), checked and written into l->attrs.
Status ResolveMla(const LayerAttrs& attrs, Transformer* t, Layer* l) {
  bool any = false;
  for (const char* key : {"q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"}) {
    any = any || attrs.ints.count(key) > 0;
  }
  if (!any) return Status::OK();
  const int64_t ql = attrs.Int("q_lora_rank", 0), kvl = attrs.Int("kv_lora_rank", 0);
  const int64_t rope = attrs.Int("qk_rope_head_dim", 0), nope = attrs.Int("qk_nope_head_dim", 0),
                dv = attrs.Int("v_head_dim", 0);
  if (kvl < 1) {
    return ShapeError(
        fmt::format("kv_lora_rank ({}) must be at least 1: MLA compresses K and V to that width; set "
                    "kv_lora_rank (DeepSeek-V3: 512) or remove the MLA keys",
                    kvl));
  }
  if (ql < 0)
    return ShapeError(
        fmt::format("q_lora_rank ({}) must be at least 0; set q_lora_rank: 0 (no query compression)", ql));
  if (rope < 2 || rope % 2 != 0) {
    return ShapeError(
        fmt::format("qk_rope_head_dim ({}) must be even and at least 2: RoPE rotates pairs; set "
                    "qk_rope_head_dim: 64 (DeepSeek-V3)",
                    rope));
  }
  if (nope < 1 || dv < 1) {
    return ShapeError(
        fmt::format("MLA needs qk_nope_head_dim and v_head_dim of at least 1 (got {} and {}); set them "
                    "(DeepSeek-V3: 128 and 128)",
                    nope, dv));
  }
  t->mla = true;
  t->q_lora = static_cast<double>(ql);
  t->kv_lora = static_cast<double>(kvl);
  t->rope_dim = static_cast<double>(rope);
  t->nope_dim = static_cast<double>(nope);
  t->dqk = static_cast<double>(rope + nope);
  t->dv = static_cast<double>(dv);
  l->attrs.ints["q_lora_rank"] = ql;
  l->attrs.ints["kv_lora_rank"] = kvl;
  l->attrs.ints["qk_rope_head_dim"] = rope;
  l->attrs.ints["qk_nope_head_dim"] = nope;
  l->attrs.ints["v_head_dim"] = dv;
  return Status::OK();
}

// A moe_block's MoE attributes, checked and written into l->attrs.
Status ResolveMoe(const LayerAttrs& attrs, Moe* m, Layer* l) {
  const int64_t e = attrs.Int("experts", 0), k = attrs.Int("top_k", 0), fe = attrs.Int("expert_ffn", 0);
  const int64_t fs = attrs.Int("shared_ffn", 0), groups = attrs.Int("route_groups", 0),
                limit = attrs.Int("route_group_limit", 0);
  const double cap = attrs.Real("capacity_factor", 0), aux = attrs.Real("aux_loss", 0);
  if (e < 2) {
    return ShapeError(
        fmt::format("experts ({}) must be at least 2; one expert is a dense MLP: use a transformer_block with ffn", e));
  }
  if (k < 1 || k > e)
    return ShapeError(fmt::format("top_k ({}) must be between 1 and experts ({}); set top_k: {} or less", k, e, e));
  if (fe < 1)
    return ShapeError(
        "expert_ffn (one expert's FFN hidden size) is missing; set expert_ffn: <size> (DeepSeek-V3: 2048)");
  if (fs < 0)
    return ShapeError(fmt::format("shared_ffn ({}) must be at least 0; set shared_ffn: 0 (no shared expert)", fs));
  if (!(cap >= 0)) {
    return ShapeError(
        fmt::format("capacity_factor ({}) is below 0; set capacity_factor: 0 (dropless) or a capacity "
                    "above 0 (e.g. 1.25)",
                    cap));
  }
  if (!(aux >= 0))
    return ShapeError(
        fmt::format("aux_loss ({}) is below 0; set aux_loss: 0 (none) or a coefficient (e.g. 0.01)", aux));
  if (groups != 0 || limit != 0) {
    if (groups < 1 || e % groups != 0) {
      return ShapeError(
          fmt::format("route_groups ({}) must divide experts ({}); set route_groups to a divisor of {} "
                      "(DeepSeek-V3: 8 groups of 32)",
                      groups, e, e));
    }
    if (limit < 1 || limit > groups) {
      return ShapeError(
          fmt::format("route_group_limit ({}) must be between 1 and route_groups ({}); set "
                      "route_group_limit: {} or less (DeepSeek-V3: 4 of 8)",
                      limit, groups, groups));
    }
    if (k > limit * (e / groups)) {
      return ShapeError(
          fmt::format("top_k ({}) exceeds the {} experts of route_group_limit ({}) groups of {}; raise "
                      "route_group_limit or lower top_k",
                      k, limit * (e / groups), limit, e / groups));
    }
  }
  m->e = static_cast<double>(e);
  m->k = static_cast<double>(k);
  m->fe = static_cast<double>(fe);
  m->fs = static_cast<double>(fs);
  m->capacity = cap;
  const std::pair<const char*, int64_t> resolved[] = {{"experts", e},           {"top_k", k},
                                                      {"expert_ffn", fe},       {"shared_ffn", fs},
                                                      {"route_groups", groups}, {"route_group_limit", limit}};
  for (const auto& [key, v] : resolved) l->attrs.ints[key] = v;
  l->attrs.reals["capacity_factor"] = cap;
  l->attrs.reals["aux_loss"] = aux;
  return Status::OK();
}

// Resolves and checks a transformer layer's attributes on a [s, h] input,
// writing the resolved values into l->attrs.
Status ResolveTransformer(LayerKind kind, const LayerAttrs& attrs, const std::vector<int64_t>& in, Transformer* t,
                          Layer* l) {
  const int64_t hidden = in[1];
  const bool moe = kind == LayerKind::kMoeBlock;
  const int64_t heads = attrs.Int("heads", 1), kv = attrs.Int("kv_heads", heads);
  // moe_block: the MLP that TP splits whole is the shared experts' (0: none); f is one routed expert's.
  const int64_t ffn = moe ? attrs.Int("shared_ffn", 0) : attrs.Int("ffn", 4 * hidden);
  const int64_t theta = attrs.Int("rope_theta", 10000);
  for (const char* key : {"act", "norm", "position", "attention", "router"}) {
    std::string value;
    PLANNER_RETURN_IF_ERROR(ChoiceAttr(kind, attrs, key, &value));
    if (!value.empty()) l->attrs.strings[key] = value;
  }
  t->act = l->attrs.String("act", "gelu");
  t->norm = l->attrs.String("norm", "layernorm");
  t->position = l->attrs.String("position", "learned");
  t->attention = l->attrs.String("attention", "flash");
  t->bias = attrs.Bool("bias", true);
  t->dropout = attrs.Bool("dropout", true);
  if (heads < 1 || kv < 1 || ffn < (moe ? 0 : 1)) return ShapeError("heads, kv_heads and ffn must be at least 1");
  const bool has_head_dim = attrs.ints.count("head_dim") > 0;
  const int64_t head_dim = has_head_dim ? attrs.Int("head_dim", 0) : hidden / heads;
  if (HasAttention(kind)) {
    PLANNER_RETURN_IF_ERROR(ResolveMla(attrs, t, l));
    if (head_dim < 1) return ShapeError(fmt::format("head_dim ({}) must be at least 1", head_dim));
    if (!t->mla && !has_head_dim && hidden % heads != 0) {
      return ShapeError(fmt::format("heads ({}) must divide the hidden size {}", heads, hidden));
    }
    if (!t->mla && heads % kv != 0) {
      return ShapeError(
          fmt::format("kv_heads ({}) must divide heads ({}); set kv_heads to a divisor of {} (1: MQA, {}: "
                      "MHA)",
                      kv, heads, heads, heads));
    }
    if (!t->mla && t->position == "rope" && head_dim % 2 != 0) {
      return ShapeError(
          fmt::format("rope rotates pairs of the head dimension, which is odd ({}); use an even "
                      "hidden / heads or position: learned",
                      head_dim));
    }
    if (theta < 1) return ShapeError("rope_theta must be at least 1");
    if (attrs.ints.count("window") > 0) {
      if (t->mla) return ShapeError("sliding-window attention (window) with MLA is not modelled; drop window");
      t->window = static_cast<double>(attrs.Int("window", 0));
      l->attrs.ints["window"] = attrs.Int("window", 0);
    }
    if (attrs.ints.count("packed") > 0) {
      t->packed = static_cast<double>(attrs.Int("packed", 0));
      l->attrs.ints["packed"] = attrs.Int("packed", 0);
    }
    l->attrs.ints["kv_heads"] = kv;
    l->attrs.ints["rope_theta"] = theta;
    if (has_head_dim) l->attrs.ints["head_dim"] = head_dim;
  }
  l->attrs.ints["heads"] = heads;
  if (!moe) l->attrs.ints["ffn"] = ffn;
  l->attrs.bools["bias"] = t->bias;
  t->s = static_cast<double>(in[0]);
  t->h = static_cast<double>(hidden);
  t->a = static_cast<double>(heads);
  t->g = static_cast<double>(kv);
  t->d = static_cast<double>(head_dim);
  if (!t->mla) t->dqk = t->dv = t->d;
  t->f = static_cast<double>(moe ? attrs.Int("expert_ffn", 0) : ffn);
  // t divides heads and kv_heads (Megatron-Core splits the query groups; MLA: the heads), and the
  // ffn of the MLP TP splits (moe_block: the shared experts'; the routed experts are EP x ETP's).
  const int64_t attn_div = t->mla ? heads : std::gcd(heads, kv);
  if (kind == LayerKind::kMlp) l->tp_divisor = ffn;
  else if (kind == LayerKind::kAttention || ffn == 0) l->tp_divisor = attn_div;
  else l->tp_divisor = std::gcd(attn_div, ffn);
  return Status::OK();
}

// One multi-token-prediction module (DeepSeek-V3 section 2.2; Megatron-Core's MultiTokenPredictionLayer)
// on the main path's [s, h] hidden state, which it passes on unchanged: RMSNorm of that state and of the
// next tokens' embedding (the shared table), the [2h, h] projection, one block (a moe_block when experts
// is set), the output head's norm, the shared output head (V h FLOPs, no parameters) and its loss.
Status MtpCosts(const LayerAttrs& attrs, const std::vector<int64_t>& in, DType dtype, Layer* l) {
  const LayerKind inner = attrs.Int("experts", 0) > 0 ? LayerKind::kMoeBlock : LayerKind::kTransformerBlock;
  const LayerTypeInfo* info = FindLayerType(inner);
  LayerAttrs inner_attrs;
  for (const auto& [k, v] : attrs.ints) {
    if (std::find(info->int_keys.begin(), info->int_keys.end(), k) != info->int_keys.end()) inner_attrs.ints[k] = v;
  }
  inner_attrs.bools = attrs.bools;
  for (const auto& [k, v] : attrs.strings) {
    if (FindStringKey(inner, k) != nullptr) inner_attrs.strings[k] = v;
  }
  if (inner == LayerKind::kMoeBlock) inner_attrs.reals = attrs.reals;
  Layer b;
  PLANNER_RETURN_IF_ERROR(InferLayer(inner, inner_attrs, in, dtype, &b));
  const int64_t vocab = attrs.Int("vocab", 0);
  if (vocab < 1) return ShapeError("mtp needs the vocab of the shared output head; set vocab: <vocab size>");
  const double dt = DTypeBytes(dtype), s = static_cast<double>(in[0]), h = static_cast<double>(in[1]);
  const double v = static_cast<double>(vocab);
  const bool rms = b.attrs.String("norm", "layernorm") == "rmsnorm", bias = b.attrs.Bool("bias", true);
  *l = b;
  l->kind = LayerKind::kMtp;
  l->in_shape = in;
  l->attrs.ints["vocab"] = vocab;
  for (int i = 0; i < 3; ++i) NormCosts(s * h, h, rms, dt, l);  // hnorm, enorm, the output head's norm
  l->params += 2 * h * h + (bias ? h : 0);                      // eh_proj [2h, h]
  AddGemm(2 * s * 2 * h * h, l);
  AddGemm(2 * s * h * v, l);  // the shared output head
  // eh_proj's input (an FP8 GEMM's: gi), the head's input (the output head stays bf16, DeepSeek-V3
  // section 3.3.1), fp32 logits, token ids
  const double extra = GemmInputBytes(dtype) * 2 * s * h + dt * s * h + 4 * s * v + 4 * s;
  l->stash_bytes += extra;
  l->stash_bytes_selective += extra;
  l->stash_bytes_tp_replicated += 4 * s;
  l->stash_bytes_full = dt * s * h + 4 * s * v;        // the input; the loss's logits are never recomputed
  l->fwd_mem_bytes += dt * 2 * s * h + 4 * 3 * s * v;  // embedding gather and its copy; cross-entropy
  l->bwd_mem_bytes += dt * 2 * s * h + 4 * 2 * s * v;
  l->tp_divisor = std::gcd(b.tp_divisor, vocab);
  return Status::OK();
}

Status PoolShape(LayerKind kind, const LayerAttrs& attrs, const std::vector<int64_t>& in, std::vector<int64_t>* out) {
  if (in.size() != 3) {
    return ShapeError(fmt::format("{} needs a [channels, height, width] input, got {}; put it after a conv2d",
                                  LayerKindName(kind), ShapeString(in)));
  }
  int64_t k = attrs.Int("kernel", 2), st = attrs.Int("stride", k), p = attrs.Int("padding", 0);
  if (k < 1 || st < 1 || p < 0) return ShapeError("kernel and stride must be at least 1, padding at least 0");
  // PyTorch's pooling rule: a window must overlap the input, so padding is at most half the kernel.
  if (2 * p > k)
    return ShapeError(fmt::format("padding {} is more than half the kernel {}; use padding {} or less", p, k, k / 2));
  int64_t ho = (in[1] + 2 * p - k) / st + 1, wo = (in[2] + 2 * p - k) / st + 1;
  if (in[1] + 2 * p < k || in[2] + 2 * p < k || ho < 1 || wo < 1) {
    return ShapeError(fmt::format("kernel {} does not fit the {}x{} input; use a smaller kernel", k, in[1], in[2]));
  }
  *out = {in[0], ho, wo};
  return Status::OK();
}

}  // namespace

Status InferLayer(LayerKind kind, const LayerAttrs& attrs, const std::vector<int64_t>& in, DType dtype, Layer* out) {
  Layer l;
  l.kind = kind;
  l.in_shape = in;
  l.attrs = attrs;
  const double dt = DTypeBytes(dtype);
  const double n_in = Elements(in);
  std::string attr_sig;
  for (const auto& [k, v] : attrs.ints) attr_sig += fmt::format(",{}={}", k, v);
  for (const auto& [k, v] : attrs.bools) attr_sig += fmt::format(",{}={}", k, v);
  for (const auto& [k, v] : attrs.strings) attr_sig += fmt::format(",{}={}", k, v);
  for (const auto& [k, v] : attrs.reals) attr_sig += fmt::format(",{}={}", k, v);

  switch (kind) {
    case LayerKind::kLinear: {
      if (in.empty()) return ShapeError("linear needs an input with at least one dimension");
      int64_t fin = in.back();
      int64_t want = attrs.Int("in_features", fin);
      if (want != fin) {
        return ShapeError(
            fmt::format("in_features is {} but the input is {} (last dimension {}); set in_features: {} "
                        "or fix the previous layer",
                        want, ShapeString(in), fin, fin));
      }
      int64_t fout = attrs.Int("out_features", 0);
      l.attrs.ints["in_features"] = fin;
      l.attrs.bools["bias"] = attrs.Bool("bias", true);
      double tokens = n_in / static_cast<double>(fin);
      l.out_shape = in;
      l.out_shape.back() = fout;
      l.params = static_cast<double>(fin) * fout + (attrs.Bool("bias", true) ? fout : 0);
      l.fwd_flops = 2 * tokens * fin * fout;
      l.gemms.push_back({tokens, static_cast<double>(fout), static_cast<double>(fin)});
      l.bwd_input_flops = l.fwd_flops;
      l.bwd_weight_flops = l.fwd_flops;
      l.stash_bytes = l.stash_bytes_selective = dt * n_in;
      l.fwd_mem_bytes = dt * tokens * fout;  // bias add
      l.bwd_mem_bytes = dt * tokens * fout;
      break;
    }
    case LayerKind::kConv2d: {
      if (in.size() != 3) {
        return ShapeError(fmt::format("conv2d needs a [channels, height, width] input, got {}", ShapeString(in)));
      }
      int64_t cin = attrs.Int("in_channels", in[0]);
      if (cin != in[0]) {
        return ShapeError(fmt::format("in_channels is {} but the input has {} channels ({}); set in_channels: {}", cin,
                                      in[0], ShapeString(in), in[0]));
      }
      int64_t cout = attrs.Int("out_channels", 0), k = attrs.Int("kernel", 3), st = attrs.Int("stride", 1),
              p = attrs.Int("padding", 0);
      if (st < 1 || k < 1 || p < 0) return ShapeError("kernel and stride must be at least 1, padding at least 0");
      if (in[1] + 2 * p < k || in[2] + 2 * p < k) {
        return ShapeError(fmt::format("kernel {} does not fit the {}x{} input; add padding or use a smaller kernel", k,
                                      in[1], in[2]));
      }
      int64_t ho = (in[1] + 2 * p - k) / st + 1, wo = (in[2] + 2 * p - k) / st + 1;
      l.out_shape = {cout, ho, wo};
      l.attrs.ints["in_channels"] = cin;
      l.attrs.ints["kernel"] = k;
      l.attrs.ints["stride"] = st;
      l.attrs.ints["padding"] = p;
      double macs = static_cast<double>(cin) * k * k * cout * ho * wo;
      l.params = static_cast<double>(cin) * k * k * cout + (attrs.Bool("bias", true) ? cout : 0);
      l.attrs.bools["bias"] = attrs.Bool("bias", true);
      l.fwd_flops = 2 * macs;
      l.bwd_input_flops = 2 * macs;
      l.bwd_weight_flops = 2 * macs;
      l.stash_bytes = l.stash_bytes_selective = dt * n_in;
      l.fwd_mem_bytes = dt * Elements(l.out_shape);
      l.bwd_mem_bytes = dt * Elements(l.out_shape);
      break;
    }
    case LayerKind::kRelu:
    case LayerKind::kGelu:
    case LayerKind::kDropout: {
      l.out_shape = in;
      l.fwd_mem_bytes = dt * 2 * n_in;
      l.bwd_mem_bytes = dt * 3 * n_in;
      // ReLU keeps its output, GeLU its input, dropout a 1-byte mask.
      l.stash_bytes = l.stash_bytes_selective = kind == LayerKind::kDropout ? n_in : dt * n_in;
      break;
    }
    case LayerKind::kMaxpool:
    case LayerKind::kAvgpool: {
      PLANNER_RETURN_IF_ERROR(PoolShape(kind, attrs, in, &l.out_shape));
      l.attrs.ints["kernel"] = attrs.Int("kernel", 2);
      l.attrs.ints["stride"] = attrs.Int("stride", attrs.Int("kernel", 2));
      l.attrs.ints["padding"] = attrs.Int("padding", 0);
      double n_out = Elements(l.out_shape);
      l.fwd_mem_bytes = dt * (n_in + n_out);
      l.bwd_mem_bytes = dt * (n_in + n_out);
      l.stash_bytes = l.stash_bytes_selective = kind == LayerKind::kMaxpool ? dt * n_in : 0;
      break;
    }
    case LayerKind::kFlatten: {
      l.out_shape = {static_cast<int64_t>(n_in)};
      break;
    }
    case LayerKind::kLayernorm:
    case LayerKind::kRmsnorm: {
      if (in.empty()) {
        return ShapeError(std::string(LayerKindName(kind)) + " needs an input with at least one dimension");
      }
      l.out_shape = in;
      NormCosts(n_in, static_cast<double>(in.back()), kind == LayerKind::kRmsnorm, dt, &l);
      break;
    }
    case LayerKind::kEmbedding: {
      if (in.size() != 1) {
        return ShapeError(fmt::format("embedding needs a [sequence] input of token ids, got {}; set input: [<seq>]",
                                      ShapeString(in)));
      }
      int64_t v = attrs.Int("vocab", 0), h = attrs.Int("hidden", 0), pos = attrs.Int("positions", 0);
      if (pos != 0 && pos < in[0]) {
        return ShapeError(
            fmt::format("positions is {} but the sequence is {} long; set positions: {}", pos, in[0], in[0]));
      }
      double s = static_cast<double>(in[0]);
      l.out_shape = {in[0], h};
      l.params = static_cast<double>(v) * h + static_cast<double>(pos) * h;
      // token ids and the dropout mask
      l.stash_bytes = l.stash_bytes_selective = 4 * s + (attrs.Bool("dropout", true) ? s * h : 0);
      l.stash_bytes_tp_replicated = l.stash_bytes;
      const double passes = pos > 0 ? 3 : 2;  // gather, position add (none without a table), dropout
      l.fwd_mem_bytes = dt * passes * s * h;
      l.bwd_mem_bytes = dt * passes * s * h;
      l.tp_shardable = true;  // vocab-parallel
      l.tp_divisor = v;
      l.tp_allreduces_fwd = 1;
      break;
    }
    case LayerKind::kAttention:
    case LayerKind::kMlp:
    case LayerKind::kTransformerBlock:
    case LayerKind::kMoeBlock: {
      if (in.size() != 2) {
        return ShapeError(fmt::format("{} needs a [sequence, hidden] input, got {}; put it after an embedding",
                                      LayerKindName(kind), ShapeString(in)));
      }
      Transformer t;
      PLANNER_RETURN_IF_ERROR(ResolveTransformer(kind, attrs, in, &t, &l));
      l.out_shape = in;
      Moe moe;
      if (kind == LayerKind::kMoeBlock) PLANNER_RETURN_IF_ERROR(ResolveMoe(attrs, &moe, &l));
      const double gi = GemmInputBytes(dtype);
      if (HasAttention(kind)) AttentionCosts(t, dt, gi, &l);
      if (kind == LayerKind::kMoeBlock) MoeCosts(t, moe, dt, gi, &l);
      else if (HasDenseMlp(kind)) MlpCosts(t, dt, gi, &l);
      if (IsBlock(kind)) {  // pre-norm: before attention and before the MLP
        NormCosts(t.s * t.h, t.h, t.norm == "rmsnorm", dt, &l);
        NormCosts(t.s * t.h, t.h, t.norm == "rmsnorm", dt, &l);
        // layernorm: both norms' outputs (the attention's and the MLP's inputs) dropped and re-made
        // in backward from their inputs, which the residual path keeps; each at the bytes it was kept
        // (fp8: the QKV and fc1 inputs 1 byte, the MoE input, the router's too, dt).
        RecomputeModuleCost& norms = Module(&l, RecomputeModule::kLayernorm);
        const double mlp_in = kind == LayerKind::kMoeBlock ? dt : gi;
        norms.stash_bytes = norms.stash_tp_replicated = gi == dt ? dt * 2 * t.s * t.h : (gi + mlp_in) * t.s * t.h;
        norms.mem_bytes = dt * 2 * 2 * t.s * t.h;
        if (kind == LayerKind::kTransformerBlock) OpSacCosts(t, dt, &l);
      }
      l.tp_shardable = true;
      l.stash_bytes_full = dt * t.s * t.h;
      break;
    }
    case LayerKind::kMtp: {
      if (in.size() != 2) {
        return ShapeError(
            fmt::format("mtp needs a [sequence, hidden] input, got {}; put it after the last block", ShapeString(in)));
      }
      PLANNER_RETURN_IF_ERROR(MtpCosts(attrs, in, dtype, &l));
      l.out_shape = in;
      break;
    }
    case LayerKind::kLmHead: {
      if (in.size() != 2) {
        return ShapeError(fmt::format("lm_head needs a [sequence, hidden] input, got {}", ShapeString(in)));
      }
      double s = static_cast<double>(in[0]), h = static_cast<double>(in[1]);
      int64_t v = attrs.Int("vocab", 0);
      l.out_shape = {in[0], v};
      l.params = static_cast<double>(v) * h;
      l.params_tied = attrs.Bool("tied", true);
      l.fwd_flops = 2 * s * h * v;
      l.gemms.push_back({s, static_cast<double>(v), h, GemmSplit::kColumn, false, 1, true});
      l.bwd_input_flops = 2 * s * h * v;
      l.bwd_weight_flops = 2 * s * h * v;
      l.stash_bytes = l.stash_bytes_selective = dt * s * h;
      l.tp_shardable = true;
      l.tp_divisor = v;
      break;
    }
    case LayerKind::kLoss: {
      l.out_shape = {1};
      // Cross-entropy in fp32 over the logits: softmax read/write, and the fp32
      // logits kept for backward (Korthikanti 4.3: 4 s b V).
      l.fwd_mem_bytes = 4 * 3 * n_in;
      l.bwd_mem_bytes = 4 * 2 * n_in;
      l.stash_bytes = l.stash_bytes_selective = 4 * n_in;
      l.stash_bytes_tp_replicated = 0;
      l.tp_shardable = true;  // vocab-parallel cross-entropy
      break;
    }
    case LayerKind::kMoe:  // the runtime's MoE feed-forward: no model file names it, the catalogue costs it nowhere
      return Status::InvalidArgument(fmt::format("unknown layer type '{}'", LayerKindName(kind)));
  }
  if (l.model_flops == 0) l.model_flops = l.fwd_flops + l.bwd_flops();  // no recompute anywhere else
  if (l.stash_bytes_full == 0) l.stash_bytes_full = l.stash_bytes;
  if (l.stash_bytes_selective == 0) l.stash_bytes_selective = l.stash_bytes;
  if (!l.tp_shardable) l.stash_bytes_tp_replicated = l.stash_bytes;
  for (int64_t d : l.out_shape) {
    if (d < 1) return ShapeError(fmt::format("the output shape {} has an empty dimension", ShapeString(l.out_shape)));
  }
  l.out_bytes = kind == LayerKind::kLoss ? 4 : dt * Elements(l.out_shape);
  // Megatron's TP all-reduces move the [s, h] activation of the layer.
  if (l.tp_allreduces_fwd > 0) l.tp_allreduce_bytes = l.out_bytes;
  l.signature = LayerKindName(kind) + ShapeString(in) + attr_sig;
  *out = std::move(l);
  return Status::OK();
}

void ApplyLora(int64_t rank, uint32_t targets, DType dtype, Layer* l) {
  const double r = static_cast<double>(rank), dt = DTypeBytes(dtype);
  l->frozen_params = l->params;
  double base_gemm = 0;
  for (GemmShape& g : l->gemms) {
    g.frozen = true;
    base_gemm += g.Flops();
  }
  l->bwd_weight_flops = std::max(0.0, l->bwd_weight_flops - base_gemm);
  l->model_flops = std::max(0.0, l->model_flops - base_gemm);  // no weight gradient of the base
  l->expert_bwd_weight_flops = 0;
  if (l->kind == LayerKind::kEmbedding) l->bwd_mem_bytes = 0;  // its backward only makes the table's gradient
  std::vector<GemmShape> adapters;
  for (const GemmShape& g : l->gemms) {
    if (g.expert || (targets & LoraTargetBit(g.role)) == 0) continue;
    // Both adapter GEMMs split over TP as Megatron's parallel linears: a column-parallel base's A column-parallel
    // over r (its output gathered: s r, not costed) and B column-parallel as the base; a row-parallel base's A
    // row-parallel (its s r output all-reduced, not costed) and B column-parallel, its s x out output gathered.
    const bool column = g.split == GemmSplit::kColumn, row = g.split == GemmSplit::kRow;
    GemmShape a{g.rows, r, g.k, row ? GemmSplit::kRow : g.split};
    GemmShape b{g.rows, g.n, r, column || row ? GemmSplit::kColumn : g.split};
    a.high_precision = b.high_precision = true;
    const double flops = a.Flops() + b.Flops();
    l->params += r * (g.k + g.n);
    l->fwd_flops += flops;
    l->bwd_input_flops += flops;
    l->bwd_weight_flops += flops;
    l->model_flops += 3 * flops;
    // Scaled (alpha / r) and added to the base output: 5 passes over it forward; backward the scale's gradient and
    // the adapter's input gradient added to the base's (2 over the output, 3 over the input). A's output is kept for
    // B's weight gradient.
    l->fwd_mem_bytes += dt * g.rows * 5 * g.n;
    l->bwd_mem_bytes += dt * g.rows * (2 * g.n + 3 * g.k);
    l->stash_bytes += dt * g.rows * r;
    l->stash_bytes_selective += dt * g.rows * r;
    if (column) {  // its input gathered by the adapter under SP (and kept so, whole); else its backward all-reduce
      l->adapter_sp_fwd_bytes += dt * g.rows * g.k;
      l->adapter_sp_bwd_bytes += dt * g.rows * g.k;
      l->adapter_bwd_allreduce_bytes += dt * g.rows * g.k;
      l->stash_bytes_sp_whole += dt * g.rows * g.k;
    } else if (row) {  // B's output gathered whole; under SP scattered back, whose backward gathers
      l->adapter_sp_fwd_bytes += dt * g.rows * g.n;
      l->adapter_sp_bwd_bytes += dt * g.rows * g.n;
      l->adapter_fwd_bytes += dt * g.rows * g.n;
    }
    if (g.role == GemmRole::kFc1 || g.role == GemmRole::kFc2) {  // selective recompute's mlp re-runs the adapter too
      RecomputeModuleCost& mlp = Module(l, RecomputeModule::kMlp);
      mlp.gemm_flops += flops;
      mlp.mem_bytes += dt * g.rows * 5 * g.n;
    }
    adapters.push_back(a);
    adapters.push_back(b);
  }
  l->gemms.insert(l->gemms.end(), adapters.begin(), adapters.end());
  l->signature += fmt::format(",lora={}:{}", rank, targets);
}

Status InferLayer(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in, DType dtype,
                  Layer* out) {
  LayerKind kind;
  if (!ParseLayerKind(type, &kind)) return Status::InvalidArgument("unknown layer type '" + type + "'");
  return InferLayer(kind, attrs, in, dtype, out);
}

}  // namespace planner
