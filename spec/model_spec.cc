#include "spec/model_spec.h"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include "common/digest.h"
#include "common/edit_distance.h"
#include "spec/layer_catalog.h"
#include "spec/yaml_reader.h"

namespace planner {

double ModelSpec::TotalParams() const {
  double total = 0;
  for (const auto& l : layers) {
    if (!l.params_tied && l.kind != LayerKind::kMtp) total += l.params;
  }
  return total;
}

double ModelSpec::ActiveParams() const {
  double total = 0;
  for (const auto& l : layers) {
    if (l.params_tied || l.kind == LayerKind::kMtp) continue;
    total += l.params;
    if (l.experts > 0) total -= l.expert_params * (1 - static_cast<double>(l.top_k) / static_cast<double>(l.experts));
  }
  return total;
}

double ModelSpec::TrainableParams() const {
  double total = 0;
  for (const auto& l : layers) {
    if (!l.params_tied && l.kind != LayerKind::kMtp) total += l.params - l.frozen_params;
  }
  return total;
}

double ModelSpec::MtpParams() const {
  double total = 0;
  for (const auto& l : layers) {
    if (l.kind == LayerKind::kMtp) total += l.params;
  }
  return total;
}

double ModelSpec::IterationFlops(double batch, bool full_recompute) const {
  double per_sample = 0;
  for (const auto& l : layers) {
    per_sample += l.fwd_flops + l.bwd_flops();
    if (full_recompute && RecomputedInFull(l.kind)) per_sample += l.fwd_flops;
  }
  return per_sample * batch;
}

double CausalModelFlopsPerIteration(const GptConfig& g, double batch) {
  double l = static_cast<double>(g.layers), h = static_cast<double>(g.hidden);
  double v = static_cast<double>(g.vocab), s = static_cast<double>(g.seq);
  return 72 * batch * s * l * h * h * (1 + s / (12 * h) + v / (12 * l * h));
}

double ModelSpec::ModelFlops(double batch) const {
  double per_sample = 0;
  for (const auto& l : layers) per_sample += l.model_flops > 0 ? l.model_flops : l.fwd_flops + l.bwd_flops();
  return per_sample * batch;
}

double MegatronParamCount(const GptConfig& g) {
  double l = static_cast<double>(g.layers), h = static_cast<double>(g.hidden);
  double v = static_cast<double>(g.vocab), s = static_cast<double>(g.seq);
  return 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h));
}

double MegatronFlopsPerIteration(const GptConfig& g, double batch) {
  double l = static_cast<double>(g.layers), h = static_cast<double>(g.hidden);
  double v = static_cast<double>(g.vocab), s = static_cast<double>(g.seq);
  return 96 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
}

double ModelFlopsPerIteration(const GptConfig& g, double batch) {
  double l = static_cast<double>(g.layers), h = static_cast<double>(g.hidden);
  double v = static_cast<double>(g.vocab), s = static_cast<double>(g.seq);
  return 72 * batch * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h));
}

namespace {

const std::vector<std::string> kTopKeys = {"format_version", "name",  "dtype", "precision",
                                           "global_batch",   "input", "gpt",   "layers"};
const std::vector<std::string> kGptKeys = {"layers",
                                           "hidden",
                                           "heads",
                                           "seq",
                                           "vocab",
                                           "ffn",
                                           "tie_embeddings",
                                           "kv_heads",
                                           "ffn_act",
                                           "norm",
                                           "position",
                                           "rope_theta",
                                           "bias",
                                           "attention",
                                           "dropout",
                                           "head_dim",
                                           "moe",
                                           "mla",
                                           "mtp",
                                           "sliding_window",
                                           "full_attention_every",
                                           "packed_length",
                                           "lora"};
const std::vector<std::string> kMoeKeys = {"experts",         "top_k",        "expert_ffn",       "shared_experts",
                                           "shared_ffn",      "dense_layers", "router",           "aux_loss",
                                           "capacity_factor", "route_groups", "route_group_limit"};
const std::vector<std::string> kMlaKeys = {"q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                           "v_head_dim"};
const std::vector<std::string> kPrecisions = {"fp32", "fp16", "bf16", "fp8"};

// A string that must be one of `choices`: the error lists them all (and a did-you-mean).
Status GetChoice(const YamlReader& r, const YAML::Node& map, const std::string& key, const std::string& field,
                 const std::vector<std::string>& choices, std::string* out) {
  if (!map[key].IsDefined()) return Status::OK();
  std::string value;
  PLANNER_RETURN_IF_ERROR(r.GetString(map, key, field, &value, true));
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) {
    *out = value;
    return Status::OK();
  }
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  return r.FieldError(map[key], field,
                      fmt::format("unknown value '{}'{}; choose one of: {}", value, DidYouMean(value, choices), list));
}
constexpr int64_t kMaxLayers = 100000;
// Every size in a model file (hidden, ffn, heads, seq, vocab, a layer's features, an input dimension)
// is at most 2^24: far above any real model, and low enough that the cost model's products of
// three sizes stay exact in a double and any product of two fits an int64 (docs/formats.md, "Limits").
constexpr int64_t kMaxModelSize = int64_t{1} << 24;
constexpr int64_t kMaxRopeTheta = int64_t{1} << 40;

Status CheckAtMost(const YamlReader& r, const YAML::Node& map, const char* key, const std::string& field, int64_t v,
                   int64_t max_value) {
  if (v <= max_value) return Status::OK();
  return r.FieldError(
      map[key].IsDefined() ? map[key] : map, field,
      fmt::format("{} is more than the largest size this planner reads ({}); check the value", v, max_value));
}

struct Builder {
  const YamlReader& reader;
  DType dtype;
  std::vector<Layer>* layers;
  std::vector<int64_t> shape;
  int depth = 0;
  std::unordered_set<std::string> names;  // every layer name so far: duplicates refused in O(1)

  Status AddLayer(LayerKind kind, const LayerAttrs& attrs, const std::string& name, int line, const YAML::Node& node,
                  const std::string& field) {
    // 100000 layers of a list, or 100000 gpt blocks with the template's embedding, norm, head, loss and mtp modules.
    if (static_cast<int64_t>(layers->size()) >= kMaxLayers + (line == 0 ? 32 : 0)) {
      return reader.FieldError(
          node, field, fmt::format("the model expands to more than {} layers; lower the repeat counts", kMaxLayers));
    }
    Layer layer;
    Status st = InferLayer(kind, attrs, shape, dtype, &layer);
    if (!st.ok()) {
      std::string where = node.IsDefined() ? reader.Where(node) : reader.path();
      return Status::InvalidArgument(
          fmt::format("{}: field '{}' ({}): {}", where, field, LayerKindName(kind), st.message()));
    }
    layer.name = name.empty() ? fmt::format("{}{}", LayerKindName(kind), layers->size()) : name;
    if (!names.insert(layer.name).second) {
      return reader.FieldError(node, field + ".name",
                               "duplicate layer name '" + layer.name + "'; names must be unique");
    }
    layer.source_line = line;
    shape = layer.out_shape;
    layers->push_back(std::move(layer));
    return Status::OK();
  }

  Status ParseList(const YAML::Node& list, const std::string& field, const std::string& name_prefix) {
    PLANNER_RETURN_IF_ERROR(reader.RequireSequence(list, field));
    if (list.size() == 0) return reader.FieldError(list, field, "the list is empty; add at least one layer");
    for (size_t i = 0; i < list.size(); ++i) {
      const YAML::Node& item = list[i];
      std::string f = fmt::format("{}[{}]", field, i);
      PLANNER_RETURN_IF_ERROR(reader.RequireMap(item, f));
      if (item["repeat"].IsDefined()) {
        PLANNER_RETURN_IF_ERROR(reader.CheckKeys(item, f, {"repeat", "layers", "name"}));
        int64_t count = 0;
        PLANNER_RETURN_IF_ERROR(reader.GetInt(item, "repeat", f + ".repeat", &count, true, 1));
        if (count > kMaxLayers)
          return reader.FieldError(item["repeat"], f + ".repeat", fmt::format("must be at most {}", kMaxLayers));
        if (++depth > 8) return reader.FieldError(item, f, "repeat blocks nest more than 8 deep");
        std::string block_name;
        PLANNER_RETURN_IF_ERROR(reader.GetString(item, "name", f + ".name", &block_name, false));
        if (!item["layers"].IsDefined()) return reader.FieldError(item, f, "a repeat block needs 'layers:'");
        for (int64_t r = 0; r < count; ++r) {
          std::string prefix = name_prefix + (block_name.empty() ? "block" : block_name) + std::to_string(r) + ".";
          PLANNER_RETURN_IF_ERROR(ParseList(item["layers"], f + ".layers", prefix));
        }
        --depth;
        continue;
      }
      std::string type;
      PLANNER_RETURN_IF_ERROR(reader.GetString(item, "type", f + ".type", &type, true));
      LayerKind kind = LayerKind::kLinear;  // the one place a model file's type is read: a kind from here on
      const LayerTypeInfo* info = ParseLayerKind(type, &kind) ? FindLayerType(kind) : nullptr;
      if (info == nullptr) {
        std::vector<std::string> names;
        for (const auto& t : LayerTypes()) names.push_back(LayerKindName(t.kind));
        std::string hint = DidYouMeanOrList(type, names);
        return reader.FieldError(item["type"], f + ".type", "unknown layer type '" + type + "'" + hint);
      }
      std::vector<std::string> allowed = {"type", "name"};
      for (const auto& k : info->int_keys) allowed.push_back(k);
      for (const auto& k : info->bool_keys) allowed.push_back(k);
      for (const auto& k : info->string_keys) allowed.push_back(k.key);
      for (const auto& k : info->real_keys) allowed.push_back(k);
      if (info->has_probability) allowed.push_back("p");
      PLANNER_RETURN_IF_ERROR(reader.CheckKeys(item, f, allowed));
      LayerAttrs attrs;
      for (const auto& k : info->int_keys) {
        bool required = std::find(info->required.begin(), info->required.end(), k) != info->required.end();
        int64_t v = 0;
        const bool zero_ok = std::find(info->zero_ok.begin(), info->zero_ok.end(), k) != info->zero_ok.end();
        int64_t min_value = (k == "padding" || k == "positions" || zero_ok) ? 0 : 1;  // positions 0: no table (RoPE)
        if (item[k].IsDefined() || required) {
          PLANNER_RETURN_IF_ERROR(reader.GetInt(item, k, f + "." + k, &v, required, min_value));
          PLANNER_RETURN_IF_ERROR(
              CheckAtMost(reader, item, k.c_str(), f + "." + k, v, k == "rope_theta" ? kMaxRopeTheta : kMaxModelSize));
          attrs.ints[k] = v;
        }
      }
      for (const auto& k : info->bool_keys) {
        if (item[k].IsDefined()) {
          bool b = false;
          PLANNER_RETURN_IF_ERROR(reader.GetBool(item, k, f + "." + k, &b, false));
          attrs.bools[k] = b;
        }
      }
      for (const auto& k : info->string_keys) {
        std::string value;
        PLANNER_RETURN_IF_ERROR(GetChoice(reader, item, k.key, f + "." + k.key, k.choices, &value));
        if (!value.empty()) attrs.strings[k.key] = value;
      }
      for (const auto& k : info->real_keys) {  // checked by InferLayer (capacity_factor and aux_loss at least 0)
        double v = 0;
        if (item[k].IsDefined()) {
          PLANNER_RETURN_IF_ERROR(reader.GetDouble(item, k, f + "." + k, &v, false, -1e300, false));
          attrs.reals[k] = v;
        }
      }
      if (info->has_probability && item["p"].IsDefined()) {
        PLANNER_RETURN_IF_ERROR(reader.GetDouble(item, "p", f + ".p", &attrs.probability, false, 0.0, false));
        if (attrs.probability >= 1.0) return reader.FieldError(item["p"], f + ".p", "must be below 1");
      }
      std::string name;
      PLANNER_RETURN_IF_ERROR(reader.GetString(item, "name", f + ".name", &name, false));
      if (!name.empty()) name = name_prefix + name;
      else if (!name_prefix.empty()) name = name_prefix + type + std::to_string(i);
      PLANNER_RETURN_IF_ERROR(AddLayer(kind, attrs, name, item.Mark().line + 1, item, f));
    }
    return Status::OK();
  }

  static std::string DidYouMeanOrList(const std::string& word, const std::vector<std::string>& names) {
    std::string hint = DidYouMean(word, names);
    if (!hint.empty()) return hint;
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return "; known types: " + list;
  }
};

}  // namespace

Status BuildGptModel(const GptConfig& g, DType dtype, ModelSpec* out) {
  out->is_gpt = true;
  out->gpt = g;
  out->dtype = dtype;
  out->input_shape = {g.seq};
  out->layers.clear();
  YamlReader reader(out->path.empty() ? "(gpt template)" : out->path);
  Builder b{reader, dtype, &out->layers, out->input_shape, 0, {}};
  YAML::Node none;
  auto add = [&](LayerKind kind, LayerAttrs attrs, const std::string& name) {
    return b.AddLayer(kind, attrs, name, 0, none, "gpt");
  };
  const bool rope = g.position == "rope";
  LayerAttrs emb;
  emb.ints = {{"vocab", g.vocab}, {"hidden", g.hidden}, {"positions", rope ? 0 : g.seq}};  // RoPE: no position table
  emb.bools = {{"dropout", g.dropout > 0}};
  PLANNER_RETURN_IF_ERROR(add(LayerKind::kEmbedding, emb, "embedding"));
  LayerAttrs blk;
  blk.ints = {{"heads", g.heads},
              {"kv_heads", g.kv_heads > 0 ? g.kv_heads : g.heads},
              {"ffn", g.ffn > 0 ? g.ffn : 4 * g.hidden},
              {"rope_theta", g.rope_theta}};
  if (g.head_dim > 0) blk.ints["head_dim"] = g.head_dim;
  if (g.mla.kv_lora_rank > 0) {
    blk.ints["q_lora_rank"] = g.mla.q_lora_rank;
    blk.ints["kv_lora_rank"] = g.mla.kv_lora_rank;
    blk.ints["qk_rope_head_dim"] = g.mla.qk_rope_head_dim;
    blk.ints["qk_nope_head_dim"] = g.mla.qk_nope_head_dim;
    blk.ints["v_head_dim"] = g.mla.v_head_dim;
  }
  blk.strings = {{"act", g.ffn_act}, {"norm", g.norm}, {"position", g.position}, {"attention", g.attention}};
  blk.bools = {{"bias", g.bias}, {"dropout", g.dropout > 0}};
  const MoeConfig& moe = g.moe;
  LayerAttrs moe_blk = blk;  // the MoE blocks: the block's attention, an MoE MLP
  moe_blk.ints.erase("ffn");
  if (moe.experts > 0) {
    const int64_t shared = moe.shared_ffn > 0 ? moe.shared_ffn : moe.shared_experts * moe.expert_ffn;
    const std::pair<const char*, int64_t> ints[] = {
        {"experts", moe.experts},           {"top_k", moe.top_k},
        {"expert_ffn", moe.expert_ffn},     {"shared_ffn", shared},
        {"route_groups", moe.route_groups}, {"route_group_limit", moe.route_group_limit}};
    for (const auto& [k, v] : ints) moe_blk.ints[k] = v;
    moe_blk.strings["router"] = moe.router;
    moe_blk.reals = {{"capacity_factor", moe.capacity_factor}, {"aux_loss", moe.aux_loss}};
  }
  for (int64_t i = 0; i < g.layers; ++i) {
    const bool is_moe = moe.experts > 0 && i >= moe.dense_layers;
    const LayerKind kind = is_moe ? LayerKind::kMoeBlock : LayerKind::kTransformerBlock;
    LayerAttrs attrs = is_moe ? moe_blk : blk;
    if (g.Windowed(i)) attrs.ints["window"] = g.sliding_window;
    if (g.packed_length > 0) attrs.ints["packed"] = g.packed_length;
    PLANNER_RETURN_IF_ERROR(add(kind, attrs, fmt::format("block{}", i)));
  }
  LayerAttrs mtp = moe.experts > 0 ? moe_blk : blk;  // DeepSeek-V3's MTP block is an MoE block
  mtp.ints["vocab"] = g.vocab;
  for (int64_t i = 0; i < g.mtp; ++i) PLANNER_RETURN_IF_ERROR(add(LayerKind::kMtp, mtp, fmt::format("mtp{}", i)));
  if (g.norm == "rmsnorm") {
    PLANNER_RETURN_IF_ERROR(add(LayerKind::kRmsnorm, LayerAttrs{}, "final_rmsnorm"));
  } else {
    PLANNER_RETURN_IF_ERROR(add(LayerKind::kLayernorm, LayerAttrs{}, "final_layernorm"));
  }
  LayerAttrs head;
  head.ints = {{"vocab", g.vocab}};
  head.bools = {{"tied", g.tie_embeddings}};
  PLANNER_RETURN_IF_ERROR(add(LayerKind::kLmHead, head, "lm_head"));
  PLANNER_RETURN_IF_ERROR(add(LayerKind::kLoss, LayerAttrs{}, "loss"));
  if (g.lora.rank > 0) {
    for (Layer& l : out->layers) ApplyLora(g.lora.rank, g.lora.targets, dtype, &l);
  }
  return Status::OK();
}

namespace {
// The gpt template's keys beyond Megatron GPT's (kv_heads, ffn_act, norm, position, rope_theta, bias, attention).
Status ParseGptExtras(const YamlReader& r, const YAML::Node& g, GptConfig* c) {
  PLANNER_RETURN_IF_ERROR(r.GetInt(g, "kv_heads", "gpt.kv_heads", &c->kv_heads, false, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(g, "rope_theta", "gpt.rope_theta", &c->rope_theta, false, 1));
  PLANNER_RETURN_IF_ERROR(r.GetBool(g, "bias", "gpt.bias", &c->bias, false));
  PLANNER_RETURN_IF_ERROR(r.GetDouble(g, "dropout", "gpt.dropout", &c->dropout, false, 0.0, false));
  if (c->dropout >= 1.0)
    return r.FieldError(g["dropout"], "gpt.dropout", "must be below 1 (a probability; 0: no dropout)");
  struct Choice {
    const char* key;
    const char* string_key;
    std::string* out;
  };
  const Choice choices[] = {{"ffn_act", "act", &c->ffn_act},
                            {"norm", "norm", &c->norm},
                            {"position", "position", &c->position},
                            {"attention", "attention", &c->attention}};
  for (const auto& ch : choices) {
    const StringKey* k = FindStringKey(LayerKind::kTransformerBlock, ch.string_key);
    PLANNER_RETURN_IF_ERROR(GetChoice(r, g, ch.key, std::string("gpt.") + ch.key, k->choices, ch.out));
  }
  return Status::OK();
}

// gpt.moe: the MoE keys (docs/formats.md), checked where the file can point at the line.
Status ParseGptMoe(const YamlReader& r, const YAML::Node& g, GptConfig* c) {
  const YAML::Node& n = g["moe"];
  if (!n.IsDefined() || n.IsNull()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, "gpt.moe", kMoeKeys));
  MoeConfig& m = c->moe;
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "experts", "gpt.moe.experts", &m.experts, true, -1000000000));
  if (m.experts < 2) {
    return r.FieldError(n["experts"], "gpt.moe.experts",
                        fmt::format("experts ({}) must be at least 2 (one expert is a dense MLP); set experts: 2 or "
                                    "more, or remove moe: and set ffn",
                                    m.experts));
  }
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "top_k", "gpt.moe.top_k", &m.top_k, true, 1));
  if (m.top_k > m.experts) {
    return r.FieldError(
        n["top_k"], "gpt.moe.top_k",
        fmt::format("top_k ({}) is larger than experts ({}); set top_k: {} or less", m.top_k, m.experts, m.experts));
  }
  if (!n["expert_ffn"].IsDefined()) {
    return r.FieldError(n, "gpt.moe.expert_ffn",
                        "missing: the MoE block needs its expert size; add 'expert_ffn: <one expert's FFN hidden "
                        "size>' (DeepSeek-V3: 2048)");
  }
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "expert_ffn", "gpt.moe.expert_ffn", &m.expert_ffn, true, 1));
  const std::pair<const char*, int64_t*> ints[] = {{"shared_experts", &m.shared_experts},
                                                   {"shared_ffn", &m.shared_ffn},
                                                   {"dense_layers", &m.dense_layers},
                                                   {"route_groups", &m.route_groups},
                                                   {"route_group_limit", &m.route_group_limit}};
  for (const auto& [key, out] : ints) {
    PLANNER_RETURN_IF_ERROR(r.GetInt(n, key, std::string("gpt.moe.") + key, out, false, 0));
  }
  if (m.dense_layers > c->layers) {
    return r.FieldError(n["dense_layers"], "gpt.moe.dense_layers",
                        fmt::format("{} is more than the {} layers; set dense_layers: {} or less", m.dense_layers,
                                    c->layers, c->layers));
  }
  const std::pair<const char*, double*> reals[] = {{"capacity_factor", &m.capacity_factor}, {"aux_loss", &m.aux_loss}};
  for (const auto& [key, out] : reals) {
    const std::string field = std::string("gpt.moe.") + key;
    PLANNER_RETURN_IF_ERROR(r.GetDouble(n, key, field, out, false, -1e300, false));
    if (*out < 0) {
      return r.FieldError(n[key], field,
                          fmt::format("{} is below 0; set {}: 0 ({}) or a positive value", *out, key,
                                      std::string(key) == "aux_loss" ? "no auxiliary loss" : "dropless"));
    }
  }
  PLANNER_RETURN_IF_ERROR(
      GetChoice(r, n, "router", "gpt.moe.router", FindStringKey(LayerKind::kMoeBlock, "router")->choices, &m.router));
  if (m.route_groups > 0 || m.route_group_limit > 0) {
    if (m.route_groups < 1 || m.experts % m.route_groups != 0) {
      return r.FieldError(
          n["route_groups"].IsDefined() ? n["route_groups"] : n, "gpt.moe.route_groups",
          fmt::format(
              "route_groups ({}) must divide experts ({}); set route_groups to a divisor of {} (DeepSeek-V3: 8)",
              m.route_groups, m.experts, m.experts));
    }
    if (m.route_group_limit < 1 || m.route_group_limit > m.route_groups) {
      return r.FieldError(n["route_group_limit"].IsDefined() ? n["route_group_limit"] : n, "gpt.moe.route_group_limit",
                          fmt::format("route_group_limit ({}) must be between 1 and route_groups ({}); set "
                                      "route_group_limit: {} or less (DeepSeek-V3: 4)",
                                      m.route_group_limit, m.route_groups, m.route_groups));
    }
  }
  return Status::OK();
}

// gpt.mla: multi-head latent attention's keys.
Status ParseGptMla(const YamlReader& r, const YAML::Node& g, GptConfig* c) {
  const YAML::Node& n = g["mla"];
  if (!n.IsDefined() || n.IsNull()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, "gpt.mla", kMlaKeys));
  MlaConfig& m = c->mla;
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "q_lora_rank", "gpt.mla.q_lora_rank", &m.q_lora_rank, false, 0));
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "kv_lora_rank", "gpt.mla.kv_lora_rank", &m.kv_lora_rank, true, -1000000000));
  if (m.kv_lora_rank < 1) {
    return r.FieldError(n["kv_lora_rank"], "gpt.mla.kv_lora_rank",
                        fmt::format("{} is below 1: MLA compresses K and V to kv_lora_rank columns; set kv_lora_rank: "
                                    "512 (DeepSeek-V3) or remove mla:",
                                    m.kv_lora_rank));
  }
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "qk_rope_head_dim", "gpt.mla.qk_rope_head_dim", &m.qk_rope_head_dim, true, 1));
  if (m.qk_rope_head_dim % 2 != 0) {
    return r.FieldError(
        n["qk_rope_head_dim"], "gpt.mla.qk_rope_head_dim",
        fmt::format("{} is odd: RoPE rotates pairs; set qk_rope_head_dim to an even size (DeepSeek-V3: 64)",
                    m.qk_rope_head_dim));
  }
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "qk_nope_head_dim", "gpt.mla.qk_nope_head_dim", &m.qk_nope_head_dim, true, 1));
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "v_head_dim", "gpt.mla.v_head_dim", &m.v_head_dim, true, 1));
  return Status::OK();
}

// Sliding-window attention: sliding_window (keys before each query) and full_attention_every (every N-th block
// attends to the whole sequence; needs a window, N at least 2).
Status ParseGptWindow(const YamlReader& r, const YAML::Node& g, GptConfig* c) {
  PLANNER_RETURN_IF_ERROR(r.GetInt(g, "sliding_window", "gpt.sliding_window", &c->sliding_window, false, 1));
  PLANNER_RETURN_IF_ERROR(
      r.GetInt(g, "full_attention_every", "gpt.full_attention_every", &c->full_attention_every, false, 2));
  if (c->full_attention_every > 0 && c->sliding_window == 0)
    return r.FieldError(g["full_attention_every"], "gpt.full_attention_every",
                        "spaces full-attention blocks among sliding-window ones; add gpt.sliding_window (GPT-OSS: "
                        "127) or remove it");
  if (c->sliding_window > 0 && c->mla.kv_lora_rank > 0)
    return r.FieldError(g["sliding_window"], "gpt.sliding_window",
                        "sliding-window attention with MLA (gpt.mla) is not modelled; remove one of them");
  PLANNER_RETURN_IF_ERROR(r.GetInt(g, "packed_length", "gpt.packed_length", &c->packed_length, false, 1));
  PLANNER_RETURN_IF_ERROR(CheckAtMost(r, g, "packed_length", "gpt.packed_length", c->packed_length, kMaxModelSize));
  return CheckAtMost(r, g, "sliding_window", "gpt.sliding_window", c->sliding_window, kMaxModelSize);
}

// gpt.lora: LoRA fine-tuning's rank and the linears it adapts (default all four, NeMo's and Megatron-Bridge's
// target_modules).
const std::vector<std::string> kLoraKeys = {"rank", "targets"};
const std::vector<std::pair<std::string, GemmRole>> kLoraTargets = {
    {"qkv", GemmRole::kQkv}, {"proj", GemmRole::kProj}, {"fc1", GemmRole::kFc1}, {"fc2", GemmRole::kFc2}};
Status ParseGptLora(const YamlReader& r, const YAML::Node& g, GptConfig* c) {
  const YAML::Node& n = g["lora"];
  if (!n.IsDefined() || n.IsNull()) return Status::OK();
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(n, "gpt.lora", kLoraKeys));
  LoraConfig& lo = c->lora;
  lo.line = n.Mark().line + 1;
  if (c->moe.experts > 0 || c->mtp > 0)
    return r.FieldError(
        n, "gpt.lora",
        fmt::format("LoRA on a model with {} is not modelled (Megatron-Bridge adapts every routed "
                    "expert's linears and the MTP modules' too); remove gpt.lora or gpt.{}",
                    c->moe.experts > 0 ? "routed experts" : "MTP modules", c->moe.experts > 0 ? "moe" : "mtp"));
  PLANNER_RETURN_IF_ERROR(r.GetInt(n, "rank", "gpt.lora.rank", &lo.rank, true, 1));
  if (lo.rank > c->hidden)
    return r.FieldError(
        n["rank"], "gpt.lora.rank",
        fmt::format("{} is above hidden ({}): an adapter that wide is no low-rank adapter; set rank: 16 "
                    "or 32 (NeMo's default), or drop lora: to train every weight",
                    lo.rank, c->hidden));
  std::vector<std::string> names;
  for (const auto& t : kLoraTargets) names.push_back(t.first);
  const YAML::Node& t = n["targets"];
  if (!t.IsDefined()) {
    for (const auto& kv : kLoraTargets) lo.targets |= LoraTargetBit(kv.second);
    return Status::OK();
  }
  if (!t.IsSequence() || t.size() == 0)
    return r.FieldError(t, "gpt.lora.targets",
                        fmt::format("must be a non-empty list of {}; e.g. targets: [qkv, proj]", ChoiceList(names)));
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string v = t[i].IsScalar() ? t[i].Scalar() : "";
    auto it = std::find_if(kLoraTargets.begin(), kLoraTargets.end(), [&](const auto& kv) { return kv.first == v; });
    if (it == kLoraTargets.end())
      return r.FieldError(t[i], fmt::format("gpt.lora.targets[{}]", i),
                          fmt::format("unknown linear '{}'{}; use {}", v, DidYouMean(v, names), ChoiceList(names)));
    lo.targets |= LoraTargetBit(it->second);
  }
  return Status::OK();
}

// Every size of the template at most kMaxModelSize (the products the builder forms cannot overflow).
Status CheckGptSizes(const YamlReader& r, const YAML::Node& g, const GptConfig& c) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"hidden", c.hidden}, {"heads", c.heads},       {"seq", c.seq},          {"vocab", c.vocab},
      {"ffn", c.ffn},       {"kv_heads", c.kv_heads}, {"head_dim", c.head_dim}};
  for (const auto& [key, v] : sizes)
    PLANNER_RETURN_IF_ERROR(CheckAtMost(r, g, key, std::string("gpt.") + key, v, kMaxModelSize));
  PLANNER_RETURN_IF_ERROR(CheckAtMost(r, g, "rope_theta", "gpt.rope_theta", c.rope_theta, kMaxRopeTheta));
  // Absent blocks hold zeros (never over the bound); their nodes are looked up only when present.
  const YAML::Node moe = g["moe"].IsDefined() && g["moe"].IsMap() ? g["moe"] : g;
  const std::pair<const char*, int64_t> moe_sizes[] = {{"experts", c.moe.experts},
                                                       {"expert_ffn", c.moe.expert_ffn},
                                                       {"shared_experts", c.moe.shared_experts},
                                                       {"shared_ffn", c.moe.shared_ffn},
                                                       {"route_groups", c.moe.route_groups}};
  for (const auto& [key, v] : moe_sizes)
    PLANNER_RETURN_IF_ERROR(CheckAtMost(r, moe, key, std::string("gpt.moe.") + key, v, kMaxModelSize));
  if (c.moe.shared_experts > 0 && c.moe.shared_ffn == 0) {  // shared_ffn defaults to shared_experts x expert_ffn
    PLANNER_RETURN_IF_ERROR(CheckAtMost(r, moe, "shared_experts", "gpt.moe.shared_experts",
                                        c.moe.shared_experts * c.moe.expert_ffn, kMaxModelSize));
  }
  const YAML::Node mla = g["mla"].IsDefined() && g["mla"].IsMap() ? g["mla"] : g;
  const std::pair<const char*, int64_t> mla_sizes[] = {{"q_lora_rank", c.mla.q_lora_rank},
                                                       {"kv_lora_rank", c.mla.kv_lora_rank},
                                                       {"qk_rope_head_dim", c.mla.qk_rope_head_dim},
                                                       {"qk_nope_head_dim", c.mla.qk_nope_head_dim},
                                                       {"v_head_dim", c.mla.v_head_dim}};
  for (const auto& [key, v] : mla_sizes)
    PLANNER_RETURN_IF_ERROR(CheckAtMost(r, mla, key, std::string("gpt.mla.") + key, v, kMaxModelSize));
  return Status::OK();
}

// The reader proper; yaml-cpp exceptions it lets through become errors in ParseModelSpec.
Status ParseModelSpecUnguarded(const std::string& path, const std::string& text, ModelSpec* out) {
  YAML::Node root;
  PLANNER_RETURN_IF_ERROR(ParseYamlText(path, text, &root));
  YamlReader r(path);
  PLANNER_RETURN_IF_ERROR(r.CheckKeys(root, "", kTopKeys));
  ModelSpec m;
  m.path = path;
  m.digest = DigestHex(text);
  PLANNER_RETURN_IF_ERROR(r.CheckFormatVersion(root, false));
  PLANNER_RETURN_IF_ERROR(r.GetString(root, "name", "name", &m.name, true));
  // `precision:` is the newer name of `dtype:`; a file gives at most one of them.
  if (root["dtype"].IsDefined() && root["precision"].IsDefined()) {
    return r.FieldError(root["precision"], "precision",
                        "'precision' and 'dtype' name the same setting; keep 'precision' and remove 'dtype'");
  }
  std::string dtype = "fp16";
  const char* dtype_key = root["precision"].IsDefined() ? "precision" : "dtype";
  PLANNER_RETURN_IF_ERROR(GetChoice(r, root, dtype_key, dtype_key, kPrecisions, &dtype));
  ParseDType(dtype, &m.dtype);
  PLANNER_RETURN_IF_ERROR(r.GetInt(root, "global_batch", "global_batch", &m.global_batch, true, 1));
  bool has_gpt = root["gpt"].IsDefined(), has_layers = root["layers"].IsDefined();
  if (has_gpt == has_layers) {
    return r.FieldError(root, has_gpt ? "gpt" : "layers",
                        "give exactly one of 'gpt:' (a template) or 'layers:' (an explicit list)");
  }
  if (has_gpt) {
    const YAML::Node& g = root["gpt"];
    PLANNER_RETURN_IF_ERROR(r.CheckKeys(g, "gpt", kGptKeys));
    if (root["input"].IsDefined())
      return r.FieldError(root["input"], "input", "a gpt template takes its input from gpt.seq; remove 'input:'");
    GptConfig c;
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "layers", "gpt.layers", &c.layers, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "hidden", "gpt.hidden", &c.hidden, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "heads", "gpt.heads", &c.heads, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "seq", "gpt.seq", &c.seq, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "vocab", "gpt.vocab", &c.vocab, true, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "ffn", "gpt.ffn", &c.ffn, false, 1));
    PLANNER_RETURN_IF_ERROR(r.GetBool(g, "tie_embeddings", "gpt.tie_embeddings", &c.tie_embeddings, false));
    PLANNER_RETURN_IF_ERROR(ParseGptExtras(r, g, &c));
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "head_dim", "gpt.head_dim", &c.head_dim, false, 1));
    PLANNER_RETURN_IF_ERROR(r.GetInt(g, "mtp", "gpt.mtp", &c.mtp, false, 0));
    if (c.mtp > 16)
      return r.FieldError(g["mtp"], "gpt.mtp", fmt::format("{} modules; set mtp: 16 or fewer (DeepSeek-V3: 1)", c.mtp));
    PLANNER_RETURN_IF_ERROR(ParseGptMoe(r, g, &c));
    PLANNER_RETURN_IF_ERROR(ParseGptMla(r, g, &c));
    PLANNER_RETURN_IF_ERROR(ParseGptWindow(r, g, &c));
    PLANNER_RETURN_IF_ERROR(ParseGptLora(r, g, &c));
    if (c.layers > kMaxLayers)
      return r.FieldError(g["layers"], "gpt.layers", fmt::format("must be at most {}", kMaxLayers));
    PLANNER_RETURN_IF_ERROR(CheckGptSizes(r, g, c));
    const bool own_head_dim = c.head_dim > 0 || c.mla.kv_lora_rank > 0;  // attention's width need not be hidden
    if (!own_head_dim && c.hidden % c.heads != 0) {
      return r.FieldError(g["heads"], "gpt.heads",
                          fmt::format("heads ({}) must divide hidden ({})", c.heads, c.hidden));
    }
    if (c.mla.kv_lora_rank == 0 && c.kv_heads > 0 && c.heads % c.kv_heads != 0) {
      return r.FieldError(
          g["kv_heads"], "gpt.kv_heads",
          fmt::format("kv_heads ({}) must divide heads ({}); set kv_heads to a divisor of {} (1: MQA, {}: MHA)",
                      c.kv_heads, c.heads, c.heads, c.heads));
    }
    const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden / c.heads;
    if (c.mla.kv_lora_rank == 0 && c.position == "rope" && head_dim % 2 != 0) {
      return r.FieldError(g["position"], "gpt.position",
                          fmt::format("rope rotates pairs of the head dimension, which is odd ({}); use an even hidden "
                                      "/ heads or position: learned",
                                      head_dim));
    }
    PLANNER_RETURN_IF_ERROR(BuildGptModel(c, m.dtype, &m));
  } else {
    PLANNER_RETURN_IF_ERROR(r.GetIntList(root, "input", "input", &m.input_shape, true, 1));
    if (m.input_shape.empty()) return r.FieldError(root["input"], "input", "must list at least one dimension");
    if (m.input_shape.size() > 8) return r.FieldError(root["input"], "input", "has more than 8 dimensions");
    for (size_t i = 0; i < m.input_shape.size(); ++i) {
      if (m.input_shape[i] > kMaxModelSize)
        return r.FieldError(root["input"][i], fmt::format("input[{}]", i),
                            fmt::format("{} is more than the largest size this planner reads ({}); check the value",
                                        m.input_shape[i], kMaxModelSize));
    }
    Builder b{r, m.dtype, &m.layers, m.input_shape, 0, {}};
    PLANNER_RETURN_IF_ERROR(b.ParseList(root["layers"], "layers", ""));
  }
  *out = std::move(m);
  return Status::OK();
}
}  // namespace

const Layer* ModelSpec::FirstWindowedLayer() const {
  for (const Layer& l : layers) {
    if (l.attention_window > 0) return &l;
  }
  return nullptr;
}

Status ParseModelSpec(const std::string& path, const std::string& text, ModelSpec* out) {
  return CatchYamlErrors(path, [&] { return ParseModelSpecUnguarded(path, text, out); });
}

Status LoadModelSpec(const std::string& path, ModelSpec* out) {
  std::string text;
  PLANNER_RETURN_IF_ERROR(ReadTextFile(path, &text, kMaxConfigFileBytes));
  return ParseModelSpec(path, text, out);
}

}  // namespace planner
