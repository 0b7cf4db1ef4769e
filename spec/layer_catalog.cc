#include "spec/layer_catalog.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace planner {

int DTypeBytes(DType dtype) { return dtype == DType::kFp32 ? 4 : 2; }
const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFp32: return "fp32";
    case DType::kFp16: return "fp16";
    case DType::kBf16: return "bf16";
    case DType::kFp8: return "fp8";
  }
  return "fp16";
}
bool ParseDType(const std::string& text, DType* out) {
  if (text == "fp32") { *out = DType::kFp32; return true; }
  if (text == "fp16") { *out = DType::kFp16; return true; }
  if (text == "bf16") { *out = DType::kBf16; return true; }
  if (text == "fp8") { *out = DType::kFp8; return true; }
  return false;
}

namespace {
// Choices of the transformer layers' string attributes (docs/formats.md); the first is the default.
const StringKey kActKey{"act", {"gelu", "swiglu", "relu2"}};
const StringKey kNormKey{"norm", {"layernorm", "rmsnorm"}};
const StringKey kPositionKey{"position", {"learned", "rope"}};
const StringKey kAttentionKey{"attention", {"flash", "unfused"}};
}  // namespace

const std::vector<LayerTypeInfo>& LayerTypes() {
  static const std::vector<LayerTypeInfo> types = {
      {"linear", {"in_features", "out_features"}, {"bias"}, {"out_features"}},
      {"conv2d", {"in_channels", "out_channels", "kernel", "stride", "padding"}, {"bias"}, {"out_channels", "kernel"}},
      {"relu", {}, {}, {}},
      {"gelu", {}, {}, {}},
      {"maxpool", {"kernel", "stride", "padding"}, {}, {"kernel"}},
      {"avgpool", {"kernel", "stride", "padding"}, {}, {"kernel"}},
      {"flatten", {}, {}, {}},
      {"dropout", {}, {}, {}, /*has_probability=*/true},
      {"layernorm", {}, {}, {}},
      {"rmsnorm", {}, {}, {}},
      {"embedding", {"vocab", "hidden", "positions"}, {"dropout"}, {"vocab", "hidden"}},
      {"attention", {"heads", "kv_heads", "rope_theta"}, {"bias", "dropout"}, {"heads"}, false, {kPositionKey, kAttentionKey}},
      {"mlp", {"ffn"}, {"bias", "dropout"}, {}, false, {kActKey}},
      {"transformer_block", {"heads", "kv_heads", "ffn", "rope_theta"}, {"bias", "dropout"}, {"heads"}, false,
       {kActKey, kNormKey, kPositionKey, kAttentionKey}},
      {"lm_head", {"vocab"}, {"tied"}, {"vocab"}},
      {"loss", {}, {}, {}},
  };
  return types;
}

const LayerTypeInfo* FindLayerType(const std::string& type) {
  for (const auto& t : LayerTypes()) {
    if (t.name == type) return &t;
  }
  return nullptr;
}

const StringKey* FindStringKey(const std::string& type, const std::string& key) {
  const LayerTypeInfo* info = FindLayerType(type);
  if (info == nullptr) return nullptr;
  for (const auto& k : info->string_keys) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

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
// heads, g KV heads (groups), d = h / a head dim, f FFN hidden size.
struct Transformer {
  double s = 0, h = 0, a = 0, g = 0, d = 0, f = 0;
  std::string act, norm, position, attention;
  bool bias = true;
  bool dropout = true;  // Megatron GPT's hidden and attention dropout (1-byte masks kept for backward); false: none
  bool flash() const { return attention == "flash"; }
};

// Attention (Megatron-Core SelfAttention) on a [s, h] input, per sample. dt:
// bytes per element. Stash per Korthikanti et al. 2022 section 4.1, written
// per tensor so GQA (K and V of g d columns) and flash attention (no s^2
// tensor; the log-sum-exp, fp32 a s, instead) fit; the 1-byte dropout masks
// stay at 1 byte.
void AttentionCosts(const Transformer& t, double dt, Layer* l) {
  const double s = t.s, h = t.h, a = t.a, g = t.g, d = t.d;
  const double qkv_cols = (a + 2 * g) * d;  // Q: a d columns, K and V: g d each
  l->params += h * qkv_cols + h * h + (t.bias ? qkv_cols + h : 0);
  const double gemm = 2 * s * h * qkv_cols + 2 * s * h * h;  // QKV and output projection
  const double core_full = 4 * s * s * h;                    // Q K^T and scores x V, 2 s^2 a d each
  // Flash: the causal kernel skips the masked blocks (half of s^2); its backward
  // re-runs Q K^T and adds dV, dP, dQ, dK: 5 s^2 GEMMs against forward's 2.
  // Unfused: the whole s^2 forward, two GEMMs per forward one in backward.
  const double core_fwd = t.flash() ? core_full / 2 : core_full;
  const double core_bwd = t.flash() ? 2.5 * core_fwd : 2 * core_full;
  l->fwd_flops += gemm + core_fwd;
  l->bwd_weight_flops += gemm;
  l->bwd_input_flops += gemm + core_bwd;
  // Model FLOPs: 3 x forward with the causal half of the s^2 core, as Megatron-LM's
  // num_floating_point_operations counts since its 2025 causal-mask change (every model here is a
  // decoder); Korthikanti eq. (7) counts the full 4 s^2 h.
  l->model_flops += 3 * (gemm + core_full / 2);
  l->attention_core_fwd_flops += core_fwd;
  l->cp_kv_bytes += dt * 2 * s * g * d;
  const double mask = t.dropout ? s * h : 0;                        // the output dropout's 1-byte mask
  const double kept = dt * (3 * s * h + 2 * s * g * d) + mask;     // QKV input, Q, K, V, projection input; mask
  double mem_fwd = dt * 4 * s * h, mem_bwd = dt * 8 * s * h;       // dropout + residual on s h
  if (t.position == "rope") {  // rotate Q and K: read + write, the same in backward
    mem_fwd += dt * 2 * (s * h + s * g * d);
    mem_bwd += dt * 2 * (s * h + s * g * d);
  }
  if (t.flash()) {
    l->stash_bytes += kept + 4 * a * s;  // + the fp32 log-sum-exp per head and row
    l->stash_bytes_selective += kept + 4 * a * s;
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
  l->stash_bytes_tp_replicated += dt * s * h + mask;  // QKV input and the output dropout mask
  l->tp_allreduces_fwd += 1;
}

// MLP: fc1 [h, f] (SwiGLU: [h, 2f], gate and up), the activation, fc2 [f, h].
void MlpCosts(const Transformer& t, double dt, Layer* l) {
  const double s = t.s, h = t.h, f = t.f;
  const bool swiglu = t.act == "swiglu";
  const double fc1_cols = swiglu ? 2 * f : f;
  l->params += h * fc1_cols + f * h + (t.bias ? fc1_cols + h : 0);
  const double gemm = 2 * s * h * fc1_cols + 2 * s * f * h;
  l->fwd_flops += gemm;
  l->bwd_weight_flops += gemm;
  l->bwd_input_flops += gemm;
  l->model_flops += 3 * gemm;
  // fc1 input, the activation's input (fc1's output) and fc2's input; the dropout mask.
  // GeLU and relu2 (relu then square, fused) keep s f each; SwiGLU keeps its 2 s f input.
  const double mask = t.dropout ? s * h : 0;
  const double stash = dt * (s * h + fc1_cols * s + s * f) + mask;
  l->stash_bytes += stash;
  l->stash_bytes_selective += stash;
  l->stash_bytes_tp_replicated += dt * s * h + mask;  // fc1 input and the dropout mask
  // Activation: GeLU / relu2 read + write s f forward, 4 s f backward; SwiGLU
  // reads 2 s f and writes s f forward, reads 3 s f and writes 2 s f backward.
  // Dropout + residual on s h.
  const double act_fwd = swiglu ? 3 * s * f : 2 * s * f, act_bwd = swiglu ? 5 * s * f : 4 * s * f;
  l->fwd_mem_bytes += dt * (act_fwd + 4 * s * h);
  l->bwd_mem_bytes += dt * (act_bwd + 8 * s * h);
  l->tp_allreduces_fwd += 1;
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

// The string attribute `key` of a transformer layer: its value or the default, checked.
Status ChoiceAttr(const std::string& type, const LayerAttrs& attrs, const std::string& key, std::string* out) {
  const StringKey* k = FindStringKey(type, key);
  if (k == nullptr) return Status::OK();
  *out = attrs.String(key, k->choices.front());
  if (std::find(k->choices.begin(), k->choices.end(), *out) == k->choices.end()) {
    return ShapeError(fmt::format("{} '{}' is not one of {}; set {}: {}", key, *out, ChoiceList(k->choices), key,
                                  k->choices.front()));
  }
  return Status::OK();
}

// Resolves and checks a transformer layer's attributes on a [s, h] input,
// writing the resolved values into l->attrs.
Status ResolveTransformer(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in,
                          Transformer* t, Layer* l) {
  const int64_t hidden = in[1];
  const int64_t heads = attrs.Int("heads", 1), kv = attrs.Int("kv_heads", heads), ffn = attrs.Int("ffn", 4 * hidden);
  const int64_t theta = attrs.Int("rope_theta", 10000);
  for (const char* key : {"act", "norm", "position", "attention"}) {
    std::string value;
    PLANNER_RETURN_IF_ERROR(ChoiceAttr(type, attrs, key, &value));
    if (!value.empty()) l->attrs.strings[key] = value;
  }
  t->act = l->attrs.String("act", "gelu");
  t->norm = l->attrs.String("norm", "layernorm");
  t->position = l->attrs.String("position", "learned");
  t->attention = l->attrs.String("attention", "flash");
  t->bias = attrs.Bool("bias", true);
  t->dropout = attrs.Bool("dropout", true);
  if (heads < 1 || kv < 1 || ffn < 1) return ShapeError("heads, kv_heads and ffn must be at least 1");
  if (type != "mlp") {
    if (hidden % heads != 0) return ShapeError(fmt::format("heads ({}) must divide the hidden size {}", heads, hidden));
    if (heads % kv != 0) {
      return ShapeError(fmt::format("kv_heads ({}) must divide heads ({}); set kv_heads to a divisor of {} (1: MQA, {}: "
                                    "MHA)", kv, heads, heads, heads));
    }
    if (t->position == "rope" && (hidden / heads) % 2 != 0) {
      return ShapeError(fmt::format("rope rotates pairs of the head dimension, which is odd ({}); use an even "
                                    "hidden / heads or position: learned", hidden / heads));
    }
    if (theta < 1) return ShapeError("rope_theta must be at least 1");
    l->attrs.ints["kv_heads"] = kv;
    l->attrs.ints["rope_theta"] = theta;
  }
  l->attrs.ints["heads"] = heads;
  l->attrs.ints["ffn"] = ffn;
  l->attrs.bools["bias"] = t->bias;
  t->s = static_cast<double>(in[0]);
  t->h = static_cast<double>(hidden);
  t->a = static_cast<double>(heads);
  t->g = static_cast<double>(kv);
  t->d = static_cast<double>(hidden) / static_cast<double>(heads);
  t->f = static_cast<double>(ffn);
  // t divides heads and kv_heads (Megatron-Core splits the query groups), and ffn for the MLP.
  const int64_t attn_div = std::gcd(heads, kv);
  l->tp_divisor = type == "mlp" ? ffn : (type == "attention" ? attn_div : std::gcd(attn_div, ffn));
  return Status::OK();
}

Status PoolShape(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in,
                 std::vector<int64_t>* out) {
  if (in.size() != 3) {
    return ShapeError(fmt::format("{} needs a [channels, height, width] input, got {}; put it after a conv2d", type,
                                  ShapeString(in)));
  }
  int64_t k = attrs.Int("kernel", 2), st = attrs.Int("stride", k), p = attrs.Int("padding", 0);
  if (k < 1 || st < 1 || p < 0) return ShapeError("kernel and stride must be at least 1, padding at least 0");
  int64_t ho = (in[1] + 2 * p - k) / st + 1, wo = (in[2] + 2 * p - k) / st + 1;
  if (in[1] + 2 * p < k || in[2] + 2 * p < k || ho < 1 || wo < 1) {
    return ShapeError(fmt::format("kernel {} does not fit the {}x{} input; use a smaller kernel", k, in[1], in[2]));
  }
  *out = {in[0], ho, wo};
  return Status::OK();
}

}  // namespace

Status InferLayer(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in, DType dtype,
                  Layer* out) {
  Layer l;
  l.type = type;
  l.in_shape = in;
  l.attrs = attrs;
  const double dt = DTypeBytes(dtype);
  const double n_in = Elements(in);
  std::string attr_sig;
  for (const auto& [k, v] : attrs.ints) attr_sig += fmt::format(",{}={}", k, v);
  for (const auto& [k, v] : attrs.bools) attr_sig += fmt::format(",{}={}", k, v);
  for (const auto& [k, v] : attrs.strings) attr_sig += fmt::format(",{}={}", k, v);

  if (type == "linear") {
    if (in.empty()) return ShapeError("linear needs an input with at least one dimension");
    int64_t fin = in.back();
    int64_t want = attrs.Int("in_features", fin);
    if (want != fin) {
      return ShapeError(fmt::format("in_features is {} but the input is {} (last dimension {}); set in_features: {} "
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
    l.bwd_input_flops = l.fwd_flops;
    l.bwd_weight_flops = l.fwd_flops;
    l.stash_bytes = l.stash_bytes_selective = dt * n_in;
    l.fwd_mem_bytes = dt * tokens * fout;  // bias add
    l.bwd_mem_bytes = dt * tokens * fout;
  } else if (type == "conv2d") {
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
  } else if (type == "relu" || type == "gelu" || type == "dropout") {
    l.out_shape = in;
    l.fwd_mem_bytes = dt * 2 * n_in;
    l.bwd_mem_bytes = dt * 3 * n_in;
    // ReLU keeps its output, GeLU its input, dropout a 1-byte mask.
    l.stash_bytes = l.stash_bytes_selective = type == "dropout" ? n_in : dt * n_in;
  } else if (type == "maxpool" || type == "avgpool") {
    PLANNER_RETURN_IF_ERROR(PoolShape(type, attrs, in, &l.out_shape));
    l.attrs.ints["kernel"] = attrs.Int("kernel", 2);
    l.attrs.ints["stride"] = attrs.Int("stride", attrs.Int("kernel", 2));
    l.attrs.ints["padding"] = attrs.Int("padding", 0);
    double n_out = Elements(l.out_shape);
    l.fwd_mem_bytes = dt * (n_in + n_out);
    l.bwd_mem_bytes = dt * (n_in + n_out);
    l.stash_bytes = l.stash_bytes_selective = type == "maxpool" ? dt * n_in : 0;
  } else if (type == "flatten") {
    l.out_shape = {static_cast<int64_t>(n_in)};
  } else if (type == "layernorm" || type == "rmsnorm") {
    if (in.empty()) return ShapeError(type + " needs an input with at least one dimension");
    l.out_shape = in;
    NormCosts(n_in, static_cast<double>(in.back()), type == "rmsnorm", dt, &l);
  } else if (type == "embedding") {
    if (in.size() != 1) {
      return ShapeError(fmt::format("embedding needs a [sequence] input of token ids, got {}; set input: [<seq>]",
                                    ShapeString(in)));
    }
    int64_t v = attrs.Int("vocab", 0), h = attrs.Int("hidden", 0), pos = attrs.Int("positions", 0);
    if (pos != 0 && pos < in[0]) {
      return ShapeError(fmt::format("positions is {} but the sequence is {} long; set positions: {}", pos, in[0], in[0]));
    }
    double s = static_cast<double>(in[0]);
    l.out_shape = {in[0], h};
    l.params = static_cast<double>(v) * h + static_cast<double>(pos) * h;
    l.stash_bytes = l.stash_bytes_selective = 4 * s + (attrs.Bool("dropout", true) ? s * h : 0);  // token ids and the dropout mask
    l.stash_bytes_tp_replicated = l.stash_bytes;
    const double passes = pos > 0 ? 3 : 2;  // gather, position add (none without a table), dropout
    l.fwd_mem_bytes = dt * passes * s * h;
    l.bwd_mem_bytes = dt * passes * s * h;
    l.tp_shardable = true;  // vocab-parallel
    l.tp_divisor = v;
    l.tp_allreduces_fwd = 1;
  } else if (type == "attention" || type == "mlp" || type == "transformer_block") {
    if (in.size() != 2) {
      return ShapeError(fmt::format("{} needs a [sequence, hidden] input, got {}; put it after an embedding", type,
                                    ShapeString(in)));
    }
    Transformer t;
    PLANNER_RETURN_IF_ERROR(ResolveTransformer(type, attrs, in, &t, &l));
    l.out_shape = in;
    if (type != "mlp") AttentionCosts(t, dt, &l);
    if (type != "attention") MlpCosts(t, dt, &l);
    if (type == "transformer_block") {  // pre-norm: before attention and before the MLP
      NormCosts(t.s * t.h, t.h, t.norm == "rmsnorm", dt, &l);
      NormCosts(t.s * t.h, t.h, t.norm == "rmsnorm", dt, &l);
    }
    l.tp_shardable = true;
    l.stash_bytes_full = dt * t.s * t.h;
  } else if (type == "lm_head") {
    if (in.size() != 2) return ShapeError(fmt::format("lm_head needs a [sequence, hidden] input, got {}", ShapeString(in)));
    double s = static_cast<double>(in[0]), h = static_cast<double>(in[1]);
    int64_t v = attrs.Int("vocab", 0);
    l.out_shape = {in[0], v};
    l.params = static_cast<double>(v) * h;
    l.params_tied = attrs.Bool("tied", true);
    l.fwd_flops = 2 * s * h * v;
    l.bwd_input_flops = 2 * s * h * v;
    l.bwd_weight_flops = 2 * s * h * v;
    l.stash_bytes = l.stash_bytes_selective = dt * s * h;
    l.tp_shardable = true;
    l.tp_divisor = v;
  } else if (type == "loss") {
    l.out_shape = {1};
    // Cross-entropy in fp32 over the logits: softmax read/write, and the fp32
    // logits kept for backward (Korthikanti 4.3: 4 s b V).
    l.fwd_mem_bytes = 4 * 3 * n_in;
    l.bwd_mem_bytes = 4 * 2 * n_in;
    l.stash_bytes = l.stash_bytes_selective = 4 * n_in;
    l.stash_bytes_tp_replicated = 0;
    l.tp_shardable = true;  // vocab-parallel cross-entropy
  } else {
    return Status::InvalidArgument("unknown layer type '" + type + "'");
  }
  if (l.model_flops == 0) l.model_flops = l.fwd_flops + l.bwd_flops();  // no recompute anywhere else
  if (l.stash_bytes_full == 0) l.stash_bytes_full = l.stash_bytes;
  if (l.stash_bytes_selective == 0) l.stash_bytes_selective = l.stash_bytes;
  if (!l.tp_shardable) l.stash_bytes_tp_replicated = l.stash_bytes;
  for (int64_t d : l.out_shape) {
    if (d < 1) return ShapeError(fmt::format("the output shape {} has an empty dimension", ShapeString(l.out_shape)));
  }
  l.out_bytes = type == "loss" ? 4 : dt * Elements(l.out_shape);
  // Megatron's TP all-reduces move the [s, h] activation of the layer.
  if (l.tp_allreduces_fwd > 0) l.tp_allreduce_bytes = l.out_bytes;
  l.signature = type + ShapeString(in) + attr_sig;
  *out = std::move(l);
  return Status::OK();
}

}  // namespace planner
