// The kind of a layer, as an enum. Parsed once where a model file is read (or
// where a test builds a layer from its name); everything past the reader
// switches on the enum or asks the layer catalogue's traits
// (spec/layer_catalog.h), never compares names. LayerKindName gives back the
// spelling of docs/formats.md, so every output stays as it was.
#pragma once

#include <string_view>

namespace planner {

// In the layer catalogue's order (LayerTypes()), then the runtime's own kind. Adding one: HACKING.md,
// "How to add a layer type" (the compiler's -Wswitch names every switch that must handle it).
enum class LayerKind {
  kLinear,
  kConv2d,
  kRelu,
  kGelu,
  kMaxpool,
  kAvgpool,
  kFlatten,
  kDropout,
  kLayernorm,
  kRmsnorm,
  kEmbedding,
  kAttention,
  kMlp,
  kTransformerBlock,
  kMoeBlock,
  kMtp,
  kLmHead,
  kLoss,
  // A moe_block's MoE feed-forward alone (as mlp is a transformer_block's dense one): built by the
  // runtime (sequence parallelism's routed experts) and by tests; no model file names it (it has no
  // entry in LayerTypes(), so the model reader and InferLayer refuse it).
  kMoe,
};
inline constexpr LayerKind kAllLayerKinds[] = {LayerKind::kLinear,  LayerKind::kConv2d,           LayerKind::kRelu,
                                               LayerKind::kGelu,    LayerKind::kMaxpool,          LayerKind::kAvgpool,
                                               LayerKind::kFlatten, LayerKind::kDropout,          LayerKind::kLayernorm,
                                               LayerKind::kRmsnorm, LayerKind::kEmbedding,        LayerKind::kAttention,
                                               LayerKind::kMlp,     LayerKind::kTransformerBlock, LayerKind::kMoeBlock,
                                               LayerKind::kMtp,     LayerKind::kLmHead,           LayerKind::kLoss,
                                               LayerKind::kMoe};

// linear | conv2d | relu | gelu | maxpool | avgpool | flatten | dropout | layernorm | rmsnorm | embedding |
// attention | mlp | transformer_block | moe_block | mtp | lm_head | loss | moe
const char* LayerKindName(LayerKind kind);
// The kind named `text` (one of LayerKindName's spellings); false on anything else.
bool ParseLayerKind(std::string_view text, LayerKind* out);

}  // namespace planner
