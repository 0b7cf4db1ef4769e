// deepspeed/: ds_config.json, partition.json and pipeline.py, or deepspeed/refused.txt with the reason.
#include "codegen/embedded_templates.h"
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
  if (g.kv_heads > 0 && g.kv_heads < g.heads)
    req.push_back(fmt::format("grouped-query attention: {} heads, {} KV heads", g.heads, g.kv_heads));
  if (g.ffn_act != "gelu")
    req.push_back(fmt::format("{} MLP of width {}", g.ffn_act, g.ffn > 0 ? g.ffn : 4 * g.hidden));
  if (g.norm == "rmsnorm") req.push_back("RMSNorm");
  if (g.position == "rope") req.push_back(fmt::format("RoPE, base {}", g.rope_theta));
  if (!g.bias) req.push_back("no biases in linear layers");
  if (!g.tie_embeddings) req.push_back("untied input embedding and output layer");
  if (g.attention != "unfused") req.push_back("flash attention");
  if (!(g.dropout > 0)) req.push_back("no dropout (hidden and attention dropout 0)");
  if (model.FirstWindowedLayer() != nullptr)
    req.push_back(g.full_attention_every > 0
                      ? fmt::format("sliding-window attention over {} keys, layers {}, {}, ... (1-based) over the "
                                    "whole sequence",
                                    g.sliding_window, g.full_attention_every, 2 * g.full_attention_every)
                      : fmt::format("sliding-window attention over {} keys in every layer", g.sliding_window));
  return req;
}

// Why DeepSpeed cannot run the plan ("" when it can).
std::string DeepSpeedRefusal(const Plan& plan, const ModelSpec& model, const LaunchPlan& L) {
  if (plan.dp_replicate > 1)
    return fmt::format(
        "HSDP ({} replicas): DeepSpeed 0.19 removed MiCS, its hybrid sharding (zero_optimization.mics_shard_size is "
        "refused); solve with --engine deepspeed, which shards over every data-parallel rank",
        plan.dp_replicate);
  if (L.schedule == Schedule::kPipeDream || PerStageReplication(L)) {
    return fmt::format(
        "{}: DeepSpeed's pipeline engine runs one synchronous schedule (it flushes every batch) with every stage "
        "replicated "
        "dp times over PipeModelDataParallelTopology; {}",
        L.schedule == Schedule::kPipeDream ? "PipeDream's asynchronous schedule (weight stashing, no flush)"
                                           : "per-stage replication",
        PerStageReplication(L) ? fmt::format("the plan replicates its stages {} times", L.config)
                               : "solve with --schedule 1f1b");
  }
  for (const auto& l : model.layers) {
    if (l.experts <= 0) continue;
    return fmt::format(
        "mixture of experts ({} experts, top {}, ep {}): DeepSpeed's config does not define MoE layers or their "
        "expert-parallel "
        "groups (DeepSpeed-MoE's deepspeed.moe.layer.MoE and its ep_size live in the model code); use megatron.args",
        l.experts, l.top_k, plan.ep);
  }
  if (plan.cp > 1) {
    return fmt::format(
        "context parallelism (cp {}): DeepSpeed's config has no ring-attention context parallelism; DeepSpeed-Ulysses "
        "is "
        "sequence parallelism of another kind (all-to-all over attention heads inside the model code), not this plan",
        plan.cp);
  }
  if ((plan.zero_stage == ZeroStage::kGradients || plan.zero_stage == ZeroStage::kParameters) && L.pp > 1) {
    return fmt::format(
        "ZeRO-{} with pipelining (pp {}): DeepSpeed's pipeline engine runs ZeRO-1 at most (PipelineEngine asserts "
        "\"ZeRO-2 and "
        "ZeRO-3 are incompatible with pipeline parallelism\"); solve with --zero 0,1",
        plan.zero_stage == ZeroStage::kGradients ? 2 : 3, L.pp);
  }
  return "";
}

// The pipeline rank of stage q (model order): q for one stage per rank, the loop q mod pp for the
// interleaved schedule, the V (q, 2 pp - 1 - q) for dualpipev.
int64_t DeepSpeedStageRank(const LaunchPlan& L, int64_t q) {
  if (L.schedule == Schedule::kDualPipeV) return q < L.pp ? q : 2 * L.pp - 1 - q;
  return q % L.pp;
}

// DeepSpeed's stage boundaries (PipelineModule.parts): pp + 1 layer indices, stage r holding
// layers parts[r] .. parts[r + 1] - 1. One stage per rank: the plan's boundaries. Several chunks
// per rank (interleaved, dualpipev): DeepSpeed gives each rank one contiguous stage, so rank r's
// stage holds as many layers as the plan's chunks on rank r (an approximation, noted).
std::vector<int64_t> DeepSpeedParts(const ModelSpec& model, const LaunchPlan& L) {
  std::vector<int64_t> count(static_cast<size_t>(L.pp), 0);
  for (size_t q = 0; q < L.stages.size(); ++q) {
    const LaunchStage& s = L.stages[q];
    count[static_cast<size_t>(DeepSpeedStageRank(L, static_cast<int64_t>(q)))] += s.last_layer - s.first_layer + 1;
  }
  std::vector<int64_t> parts = {0};
  for (int64_t c : count) parts.push_back(parts.back() + c);
  parts.back() = std::max<int64_t>(parts.back(), static_cast<int64_t>(model.layers.size()));
  return parts;
}

std::string DeepSpeedRuleViolation(const DeepSpeedCheck& c) {
  if (c.pp < 1 || c.tp < 1 || c.dp < 1 || c.pp * c.tp * c.dp != c.world) {
    return fmt::format(
        "world size {} is not pipe {} x model {} x data {} (PipeModelDataParallelTopology spans every rank)", c.world,
        c.pp, c.tp, c.dp);
  }
  if (c.train_batch > 0 && c.train_batch != c.micro_batch * c.grad_accum * c.dp) {
    return fmt::format(
        "train_batch_size {} != train_micro_batch_size_per_gpu {} x gradient_accumulation_steps {} x data-parallel "
        "size {} "
        "(DeepSpeedConfig's batch assertion)",
        c.train_batch, c.micro_batch, c.grad_accum, c.dp);
  }
  if (c.micro_batch < 1 || c.grad_accum < 1)
    return fmt::format("micro batch {} and gradient accumulation {} must be positive", c.micro_batch, c.grad_accum);
  if (c.zero_stage < 0 || c.zero_stage > 3) return fmt::format("zero_optimization.stage {} is not 0-3", c.zero_stage);
  if (c.pp > 1 && c.zero_stage > 1)
    return fmt::format("zero_optimization.stage {} with {} pipeline stages: PipelineEngine allows ZeRO-0 or 1",
                       c.zero_stage, c.pp);
  if (c.fp16 && c.bf16) return "fp16 and bf16 both enabled (DeepSpeedConfig asserts at most one)";
  if (c.parts.size() != static_cast<size_t>(c.pp) + 1 || c.parts.front() != 0 || c.parts.back() != c.num_layers) {
    return fmt::format("parts [{}] are not {} + 1 boundaries from 0 to the model's {} layers", Join(c.parts, ", "),
                       c.pp, c.num_layers);
  }
  for (size_t i = 1; i < c.parts.size(); ++i) {
    if (c.parts[i] <= c.parts[i - 1])
      return fmt::format("parts [{}]: stage {} holds no layer (PipelineModule needs every stage non-empty)",
                         Join(c.parts, ", "), i - 1);
  }
  if (c.autotp > 1 && c.pp > 1)
    return fmt::format(
        "tensor_parallel.autotp_size {} with {} pipeline stages: DeepSpeed's AutoTP training runs without "
        "PipelineModule",
        c.autotp, c.pp);
  return "";
}

namespace {

std::string DeepSpeedConfigJson(const Plan& plan, const DeepSpeedCheck& c) {
  std::string j = "{\n";
  if (c.train_batch > 0) j += fmt::format("  \"train_batch_size\": {},\n", c.train_batch);
  j += fmt::format(
      "  \"train_micro_batch_size_per_gpu\": {},\n  \"gradient_accumulation_steps\": {},\n  \"zero_optimization\": "
      "{{\"stage\": {}}},\n",
      c.micro_batch, c.grad_accum, c.zero_stage);
  if (c.autotp > 1) j += fmt::format("  \"tensor_parallel\": {{\"autotp_size\": {}}},\n", c.autotp);
  j += fmt::format("  \"pipeline\": {{\"activation_checkpoint_interval\": {}}}",
                   plan.recompute == Recompute::kFull ? 1 : 0);
  if (c.fp16) j += ",\n  \"fp16\": {\"enabled\": true}";
  if (c.bf16) j += ",\n  \"bf16\": {\"enabled\": true}";
  if (!c.grad_accum_dtype.empty())
    j += fmt::format(",\n  \"data_types\": {{\"grad_accum_dtype\": \"{}\"}}", c.grad_accum_dtype);
  // fp32 gradients are reduced in fp32 too, as Megatron does (DeepSpeed's default: the model's dtype).
  if (c.grad_accum_dtype == "fp32") j += ",\n  \"communication_data_type\": \"fp32\"";
  return j + "\n}\n";
}

// Notes on what DeepSpeed runs differently from the plan (written with the files).
void DeepSpeedNotes(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, const DeepSpeedCheck& c,
                    std::vector<std::string>* notes) {
  if (L.interleave > 1) {
    notes->push_back(
        fmt::format("deepspeed: DeepSpeed's pipeline engine gives each rank one contiguous stage and runs "
                    "non-interleaved 1F1B: the plan's {} "
                    "({} chunks per rank) is approximated by stages holding each rank's layer count (parts [{}]); its "
                    "bubble is (pp-1)/m, "
                    "not the plan's (pp-1)/(v m)",
                    ScheduleName(L.schedule), L.interleave, Join(c.parts, ", ")));
  } else if (L.pp > 1 && L.schedule != Schedule::k1F1B) {
    notes->push_back(
        fmt::format("deepspeed: DeepSpeed's pipeline engine runs its own 1F1B (TrainSchedule), not the plan's {}",
                    ScheduleName(L.schedule)));
  }
  if (c.autotp > 1) {
    notes->push_back(
        fmt::format("deepspeed: tp {} without pipelining as DeepSpeed AutoTP training (tensor_parallel.autotp_size); "
                    "no train_batch_size is "
                    "written since DeepSpeedConfig counts every rank there: the global batch is micro {} x "
                    "accumulation {} x data-parallel {} = {}",
                    L.tp, c.micro_batch, c.grad_accum, c.dp, L.global_batch));
  } else if (L.tp > 1) {
    notes->push_back(
        fmt::format("deepspeed: tp {} with pipelining: the topology's model axis gives the tensor-parallel groups, the "
                    "model's layers must shard "
                    "themselves over them (DeepSpeed's AutoTP does not run with PipelineModule)",
                    L.tp));
  }
  if (model.dtype == DType::kFp8)
    notes->push_back(
        "deepspeed: DeepSpeed's config has no FP8 GEMMs (they need Transformer Engine modules in the model); exported "
        "bf16");
  const DType grad = EffectiveGradDType(model.dtype, plan.grad_dtype);
  if (model.dtype != DType::kFp32 && grad == DType::kFp32 && c.grad_accum_dtype != "fp32") {
    notes->push_back(fmt::format(
        "deepspeed: the plan keeps fp32 gradients (Megatron's accumulate_allreduce_grads_in_fp32); without ZeRO "
        "DeepSpeed accumulates "
        "and reduces them in the model's {} (data_types.grad_accum_dtype fp32 needs ZeRO stage 1-3: engine.py "
        "_do_optimizer_sanity_check raises 'unsupported mix' at stage 0): 2 bytes per parameter less and half the "
        "gradient bytes "
        "of the plan; solve with --grad-dtype {} to plan what DeepSpeed runs",
        c.fp16 ? "fp16" : "bf16", c.fp16 ? "fp16" : "bf16"));
  }
  if (plan.recompute == Recompute::kFull && plan.recompute_num_layers > 0) {
    notes->push_back(
        fmt::format("deepspeed: activation_checkpoint_interval 1 recomputes every layer; the plan's block recompute "
                    "({} layers per chunk) has no DeepSpeed setting, so this runs slower than predicted",
                    plan.recompute_num_layers));
  }
  if (plan.recompute == Recompute::kSelective)
    notes->push_back(
        "deepspeed: selective recompute has no DeepSpeed config key (it lives in the model code); "
        "activation_checkpoint_interval 0");
  if (DpCommUsesServers(plan.dp_comm))
    notes->push_back(
        fmt::format("deepspeed: dp_comm {} has no DeepSpeed equivalent: DeepSpeed all-reduces the gradients over its "
                    "data-parallel groups",
                    DpCommName(plan.dp_comm)));
  const std::vector<std::string> req = DeepSpeedModelRequirements(model);
  if (!req.empty())
    notes->push_back("deepspeed: DeepSpeed's config does not define the model; the model code must provide: " +
                     fmt::format("{}", fmt::join(req, "; ")));
}

}  // namespace

// deepspeed/: the config, the stage boundaries with the topology, and a PipelineModule that takes
// them; a plan DeepSpeed cannot run gets deepspeed/refused.txt (the reason) instead.
void AddDeepSpeedFiles(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files,
                       std::vector<std::string>* notes) {
  std::string refused = DeepSpeedRefusal(plan, model, L);
  DeepSpeedCheck c;
  c.world = static_cast<int64_t>(L.ranks.size());
  c.pp = L.pp;
  c.tp = L.tp;
  c.dp = L.dp;
  c.micro_batch = L.microbatch_size;
  c.grad_accum = L.num_microbatches;
  c.autotp = L.pp == 1 && L.tp > 1 ? L.tp : 0;
  c.train_batch = c.autotp > 1 ? 0 : L.global_batch;
  c.zero_stage = plan.zero_stage == ZeroStage::kNone        ? 0
                 : plan.zero_stage == ZeroStage::kOptimizer ? 1
                 : plan.zero_stage == ZeroStage::kGradients ? 2
                                                            : 3;
  c.fp16 = model.dtype == DType::kFp16;
  c.bf16 = model.dtype == DType::kBf16 || model.dtype == DType::kFp8;
  // DeepSpeed's gradient accumulation dtype (data_types.grad_accum_dtype; default the model's): the plan's
  // where DeepSpeed runs it: the model's 16-bit dtype, or fp32 under ZeRO 1-3 (the ZeRO optimizers'
  // gradient_accumulation_dtype buffers; bf16 at stage 1: BF16_Optimizer). Without ZeRO only the model's.
  if (model.dtype != DType::kFp32) {
    const DType grad = EffectiveGradDType(model.dtype, plan.grad_dtype);
    if (grad != DType::kFp32) c.grad_accum_dtype = DTypeName(grad);
    else if (c.zero_stage >= 1) c.grad_accum_dtype = "fp32";
  }
  c.num_layers = static_cast<int64_t>(model.layers.size());
  if (refused.empty()) {
    c.parts = DeepSpeedParts(model, L);
    if (L.global_batch != L.microbatch_size * L.num_microbatches * L.dp)
      refused = fmt::format("the plan's global batch {} is not micro {} x microbatches {} x dp {}", L.global_batch,
                            L.microbatch_size, L.num_microbatches, L.dp);
    if (refused.empty()) refused = DeepSpeedRuleViolation(c);
  }
  if (!refused.empty()) {
    notes->push_back("deepspeed: not written: " + refused);
    files->emplace_back("deepspeed/refused.txt", refused + "\n");
    return;
  }
  DeepSpeedNotes(plan, model, L, c, notes);
  if (const std::string n = Fp32OptimizerNote(plan, "deepspeed"); !n.empty()) notes->push_back(n);
  if (const std::string n = Bf16WeightsNote(plan, "deepspeed"); !n.empty()) notes->push_back(n);
  files->emplace_back("deepspeed/ds_config.json", DeepSpeedConfigJson(plan, c));
  const std::vector<std::string> req = DeepSpeedModelRequirements(model);
  std::string req_json, names;
  for (size_t i = 0; i < req.size(); ++i) req_json += fmt::format("{}\"{}\"", i ? ", " : "", req[i]);
  for (size_t i = 0; i < model.layers.size(); ++i)
    names += fmt::format("{}\"{}\"", i ? ", " : "", model.layers[i].name);
  files->emplace_back("deepspeed/partition.json",
                      fmt::format("{{\n  \"num_stages\": {},\n  \"topology\": {{\"num_pp\": {}, \"num_mp\": {}, "
                                  "\"num_dp\": {}}},\n  \"parts\": [{}],\n  \"layers\": [{}]{}\n}}\n",
                                  L.pp, L.pp, L.tp, L.dp, Join(c.parts, ", "), names,
                                  req.empty() ? "" : ",\n  \"model_requirements\": [" + req_json + "]"));
  files->emplace_back("deepspeed/pipeline.py", FillTemplate(codegen_templates::kDeepspeedPipeline, {}));
}

}  // namespace codegen_internal
}  // namespace planner
