// deepspeed/: ds_config.json, partition.json and pipeline.py, or deepspeed/refused.txt with the reason.
#include "codegen/exports.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>


namespace planner {
namespace codegen_internal {

std::vector<std::string> DeepSpeedModelRequirements(const ModelSpec& model) {
  std::vector<std::string> req;
  if (!model.is_gpt) return req;
  const GptConfig& g = model.gpt;
  if (g.kv_heads > 0 && g.kv_heads < g.heads) req.push_back(fmt::format("grouped-query attention: {} heads, {} KV heads", g.heads, g.kv_heads));
  if (g.ffn_act != "gelu") req.push_back(fmt::format("{} MLP of width {}", g.ffn_act, g.ffn > 0 ? g.ffn : 4 * g.hidden));
  if (g.norm == "rmsnorm") req.push_back("RMSNorm");
  if (g.position == "rope") req.push_back(fmt::format("RoPE, base {}", g.rope_theta));
  if (!g.bias) req.push_back("no biases in linear layers");
  if (!g.tie_embeddings) req.push_back("untied input embedding and output layer");
  if (g.attention != "unfused") req.push_back("flash attention");
  return req;
}

// Why DeepSpeed cannot run the plan ("" when it can).
std::string DeepSpeedRefusal(const Plan& plan, const ModelSpec& model, const LaunchPlan& L) {
  for (const auto& l : model.layers) {
    if (l.experts <= 0) continue;
    return fmt::format("mixture of experts ({} experts, top {}, ep {}): DeepSpeed's config does not define MoE layers or their expert-parallel "
                       "groups (DeepSpeed-MoE's deepspeed.moe.layer.MoE and its ep_size live in the model code); use megatron.args",
                       l.experts, l.top_k, plan.ep);
  }
  if (plan.cp > 1) {
    return fmt::format("context parallelism (cp {}): DeepSpeed's config has no ring-attention context parallelism; DeepSpeed-Ulysses is "
                       "sequence parallelism of another kind (all-to-all over attention heads inside the model code), not this plan",
                       plan.cp);
  }
  if (L.schedule == Schedule::kDualPipeV) {
    return fmt::format("the dualpipev schedule: DeepSpeed's pipeline engine gives each rank one contiguous stage; the V (rank r holds stages r "
                       "and {} - r) has no DeepSpeed setting", 2 * L.pp - 1);
  }
  if ((plan.zero_stage == ZeroStage::kGradients || plan.zero_stage == ZeroStage::kParameters) && L.pp > 1) {
    return fmt::format("ZeRO-{} with pipelining (pp {}): DeepSpeed's pipeline engine runs ZeRO-1 at most; solve with --zero 0,1",
                       plan.zero_stage == ZeroStage::kGradients ? 2 : 3, L.pp);
  }
  return "";
}

// deepspeed/: the config, the stage boundaries and a PipelineModule that takes them; a plan
// DeepSpeed cannot run gets deepspeed/refused.txt (the reason) instead.
void AddDeepSpeedFiles(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files, std::vector<std::string>* notes) {
  const std::string refused = DeepSpeedRefusal(plan, model, L);
  if (!refused.empty()) {
    notes->push_back("deepspeed: not written: " + refused);
    files->emplace_back("deepspeed/refused.txt", refused + "\n");
    return;
  }
  std::vector<int64_t> parts;
  for (const auto& s : L.stages) if (s.chunk == 0) parts.push_back(s.first_layer);
  parts.push_back(static_cast<int64_t>(model.layers.size()));
  const int64_t accum = L.num_microbatches;
  std::string precision = model.dtype == DType::kFp16 ? ",\n  \"fp16\": {\"enabled\": true}" : (model.dtype == DType::kBf16 || model.dtype == DType::kFp8 ? ",\n  \"bf16\": {\"enabled\": true}" : "");
  if (model.dtype == DType::kFp8) notes->push_back("deepspeed: DeepSpeed's config has no FP8 GEMMs (they need Transformer Engine modules in the model); exported bf16");
  if (plan.recompute == Recompute::kFull && plan.recompute_num_layers > 0) {
    notes->push_back(fmt::format("deepspeed: activation_checkpoint_interval 1 recomputes every layer; the plan's block recompute ({} layers per chunk) has no DeepSpeed setting, so this runs slower than predicted",
                                 plan.recompute_num_layers));
  }
  const int zero = plan.zero_stage == ZeroStage::kNone ? 0 : plan.zero_stage == ZeroStage::kOptimizer ? 1 : plan.zero_stage == ZeroStage::kGradients ? 2 : 3;
  files->emplace_back("deepspeed/ds_config.json",
                      fmt::format("{{\n  \"train_batch_size\": {},\n  \"train_micro_batch_size_per_gpu\": {},\n  \"gradient_accumulation_steps\": {},\n"
                                  "  \"zero_optimization\": {{\"stage\": {}}},\n  \"pipeline\": {{\"activation_checkpoint_interval\": {}}}{}\n}}\n",
                                  L.global_batch, L.microbatch_size, accum, zero, plan.recompute == Recompute::kFull ? 1 : 0, precision));
  const std::vector<std::string> req = DeepSpeedModelRequirements(model);
  std::string req_json;
  for (size_t i = 0; i < req.size(); ++i) req_json += fmt::format("{}\"{}\"", i ? ", " : "", req[i]);
  if (!req.empty()) notes->push_back("deepspeed: DeepSpeed's config does not define the model; the model code must provide: " + fmt::format("{}", fmt::join(req, "; ")));
  std::string names;
  for (size_t i = 0; i < model.layers.size(); ++i) names += fmt::format("{}\"{}\"", i ? ", " : "", model.layers[i].name);
  files->emplace_back("deepspeed/partition.json",
                      fmt::format("{{\n  \"num_stages\": {},\n  \"parts\": [{}],\n  \"layers\": [{}]{}\n}}\n", L.pp, Join(parts, ", "), names,
                                  req.empty() ? "" : ",\n  \"model_requirements\": [" + req_json + "]"));
  files->emplace_back("deepspeed/pipeline.py", R"PY(# DeepSpeed PipelineModule with the planner's stage boundaries (partition.json):
# layer i of the model goes to stage s when parts[s] <= i < parts[s + 1].
import json, os

from deepspeed.pipe import PipelineModule

_HERE = os.path.dirname(os.path.abspath(__file__))
PARTITION = json.load(open(os.path.join(_HERE, "partition.json")))


class PlannedPipelineModule(PipelineModule):
    """PipelineModule(layers, num_stages=PARTITION['num_stages'], ...) with the planner's boundaries."""

    def _partition_layers(self, method="uniform"):
        super()._partition_layers(method="uniform")
        self.parts = list(PARTITION["parts"])
        stage = self.stage_id
        self._set_bounds(start=self.parts[stage], stop=self.parts[stage + 1])
)PY");
}

}  // namespace codegen_internal
}  // namespace planner
