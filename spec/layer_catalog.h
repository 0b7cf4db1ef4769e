// The layer types the planner knows: their attributes, shape inference,
// analytic per-sample costs (docs/cost_model.md section 1) and the traits the
// rest of the planner asks of a kind. Adding a layer type means adding a
// LayerKind (spec/layer_kind.h), one entry to LayerTypes(), its traits and a
// case to every switch on the kind (HACKING.md). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/layer.h"

namespace planner {

// An enumerated string attribute: its key, its choices (the first is the default).
struct StringKey {
  std::string key;
  std::vector<std::string> choices;
};

struct LayerTypeInfo {
  LayerKind kind;                           // LayerKindName(kind): the `type:` of a model file
  std::vector<std::string> int_keys;        // integer attributes (all optional unless in `required`)
  std::vector<std::string> bool_keys;       // boolean attributes
  std::vector<std::string> required;        // required integer attributes
  bool has_probability = false;             // dropout's `p`
  std::vector<StringKey> string_keys = {};  // enumerated string attributes (optional; default: the first choice)
  std::vector<std::string> real_keys =
      {};                                 // real-valued attributes, at least 0 (moe_block's capacity_factor, aux_loss)
  std::vector<std::string> zero_ok = {};  // integer attributes that may be 0 (0: off; e.g. q_lora_rank, shared_ffn)
};

// The kinds a model file may name, in LayerKind order (every kind but kMoe).
const std::vector<LayerTypeInfo>& LayerTypes();
// nullptr for a kind no model file names (kMoe).
const LayerTypeInfo* FindLayerType(LayerKind kind);
// The choices of string attribute `key` of `kind`; nullptr when it has none.
const StringKey* FindStringKey(LayerKind kind, const std::string& key);

// Per-kind traits: what the solver, the runtime and the exports ask of a layer's kind.
// A pre-norm transformer block, attention then a dense (transformer_block) or MoE (moe_block)
// feed-forward: Megatron's transformer layers (the pipeline layout's 't', --moe-layer-freq's
// pattern) and the runtime's sequence-parallel blocks. Not mtp, whose block is off the main path.
bool IsBlock(LayerKind kind);
// attention, transformer_block, moe_block: the main path's layers with an attention core (what
// selective recompute's core_attn drops and context parallelism splits). mtp's block is not counted.
bool HasAttention(LayerKind kind);
// mlp, transformer_block: the layers with a dense (not MoE) MLP.
bool HasDenseMlp(LayerKind kind);
// layernorm, rmsnorm.
bool IsNorm(LayerKind kind);
// Whether full recompute re-runs the layer's forward in backward: every layer but the output head
// (lm_head) and its loss, which Megatron keeps out of the recomputed transformer layers.
bool RecomputedInFull(LayerKind kind);
// "a | b | c": the choices as the error messages list them.
std::string ChoiceList(const std::vector<std::string>& choices);

// Infers the output shape and the costs of a layer of `type` on `in_shape`.
// On success fills every field of *out except name and source_line. On a
// shape that does not fit, returns InvalidArgument with a message that names
// the attribute and the fix (the caller adds file:line).
Status InferLayer(LayerKind kind, const LayerAttrs& attrs, const std::vector<int64_t>& in_shape, DType dtype,
                  Layer* out);
// The same for a kind given by its name (tests build layers so): a name that is no kind, or kMoe's,
// returns InvalidArgument "unknown layer type '<name>'".
Status InferLayer(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in_shape, DType dtype,
                  Layer* out);

std::string ShapeString(const std::vector<int64_t>& shape);

// A GemmRole as a bit of ApplyLora's `targets` mask.
constexpr uint32_t LoraTargetBit(GemmRole r) { return 1u << static_cast<unsigned>(r); }
// LoRA fine-tuning of `l` (a gpt model's gpt.lora; docs/cost_model.md section 1, "LoRA"): its own weights frozen (no
// weight-gradient GEMMs, no gradients or optimizer state: frozen_params; the embedding's backward, which only makes
// its table's gradient, dropped) and, on each dense GEMM whose role is in `targets` (LoraTargetBit), a rank-`rank`
// adapter trained beside it as NeMo / Megatron-Bridge run one: A [k, r] then B [r, n] in bf16, scaled and added to the
// base output; under TP both split as Megatron's parallel linears, with the adapter's own collectives
// (Layer::adapter_*_bytes, stash_bytes_sp_whole). The signature gains the adapters, so no measured profile of the full
// model stands in for it.
void ApplyLora(int64_t rank, uint32_t targets, DType dtype, Layer* l);

}  // namespace planner
