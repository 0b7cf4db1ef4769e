#include "spec/layer_kind.h"

namespace planner {

const char* LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kLinear: return "linear";
    case LayerKind::kConv2d: return "conv2d";
    case LayerKind::kRelu: return "relu";
    case LayerKind::kGelu: return "gelu";
    case LayerKind::kMaxpool: return "maxpool";
    case LayerKind::kAvgpool: return "avgpool";
    case LayerKind::kFlatten: return "flatten";
    case LayerKind::kDropout: return "dropout";
    case LayerKind::kLayernorm: return "layernorm";
    case LayerKind::kRmsnorm: return "rmsnorm";
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kAttention: return "attention";
    case LayerKind::kMlp: return "mlp";
    case LayerKind::kTransformerBlock: return "transformer_block";
    case LayerKind::kMoeBlock: return "moe_block";
    case LayerKind::kMtp: return "mtp";
    case LayerKind::kLmHead: return "lm_head";
    case LayerKind::kLoss: return "loss";
    case LayerKind::kMoe: return "moe";
  }
  return "linear";
}

bool ParseLayerKind(std::string_view text, LayerKind* out) {
  for (LayerKind k : kAllLayerKinds) {
    if (text == LayerKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

}  // namespace planner
