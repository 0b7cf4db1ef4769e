// The layer types the planner knows: their attributes, shape inference and
// analytic per-sample costs (docs/cost_model.md section 1). Adding a layer
// type means adding one entry to LayerTypes() and one case to InferLayer()
// (HACKING.md). Pure functions; thread-safe.
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
  std::string name;
  std::vector<std::string> int_keys;    // integer attributes (all optional unless in `required`)
  std::vector<std::string> bool_keys;   // boolean attributes
  std::vector<std::string> required;    // required integer attributes
  bool has_probability = false;         // dropout's `p`
  std::vector<StringKey> string_keys = {};  // enumerated string attributes (optional; default: the first choice)
  std::vector<std::string> real_keys = {};  // real-valued attributes, at least 0 (moe_block's capacity_factor, aux_loss)
  std::vector<std::string> zero_ok = {};    // integer attributes that may be 0 (0: off; e.g. q_lora_rank, shared_ffn)
};


const std::vector<LayerTypeInfo>& LayerTypes();
// nullptr when `type` is unknown.
const LayerTypeInfo* FindLayerType(const std::string& type);
// The choices of string attribute `key` of `type`; nullptr when it has none.
const StringKey* FindStringKey(const std::string& type, const std::string& key);
// "a | b | c": the choices as the error messages list them.
std::string ChoiceList(const std::vector<std::string>& choices);

// Infers the output shape and the costs of a layer of `type` on `in_shape`.
// On success fills every field of *out except name and source_line. On a
// shape that does not fit, returns InvalidArgument with a message that names
// the attribute and the fix (the caller adds file:line).
Status InferLayer(const std::string& type, const LayerAttrs& attrs, const std::vector<int64_t>& in_shape,
                  DType dtype, Layer* out);

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace planner
