// megatron_bridge.py: the plan as a Megatron-Bridge recipe (a ConfigContainer built in Python and handed to
// Bridge's pretrain or finetune), or megatron_bridge.py.refused with the reason. docs/exports.md, "Megatron-Bridge".
//
// The recipe is megatron.args translated: the same flags, built and checked against Megatron-LM's rules by the
// megatron export (megatron.cc), each mapped to the Bridge field that carries it (kFields); a flag without a field
// here refuses the export rather than dropping it. What Bridge adds over Megatron-LM's pretrain_gpt.py: LoRA
// (peft=LoRA), offline packed sequences for fine-tuning, and its own checks (ConfigContainer.validate).
#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/embedded_templates.h"
#include "codegen/exports.h"
#include "spec/layer_catalog.h"

namespace planner {
namespace codegen_internal {

namespace {

// The sections of the recipe a flag's field belongs to (the Python dicts of megatron_bridge.py).
enum class Section { kModel, kTrain, kDdp, kOptimizer, kMixed, kCheckpoint, kCommOverlap };

// How a flag's value is written: an int or a float as it stands, a quoted string, True (a switch), a Python list of
// the flag's space-separated words (quoted), the flag's value as a Python expression (--moe-layer-freq's list form),
// a torch dtype (bf16 / fp32), or a (W, 0) window.
enum class Value { kNumber, kString, kTrue, kFalse, kStringList, kExpression, kDtype, kWindow };

struct Field {
  const char* flag;
  Section section;
  const char* field;
  Value value;
};

// Megatron-LM flags (megatron.args) and the Bridge fields that carry them (megatron-bridge 0.6: GPTModelProvider, a
// TransformerConfig; TrainingConfig; DistributedDataParallelConfig; OptimizerConfig; MixedPrecisionConfig;
// CheckpointConfig; CommOverlapConfig). Flags handled by hand (TranslateFlags) are not listed.
const std::vector<Field>& Fields() {
  static const std::vector<Field> kFields = {
      {"--tensor-model-parallel-size", Section::kModel, "tensor_model_parallel_size", Value::kNumber},
      {"--pipeline-model-parallel-size", Section::kModel, "pipeline_model_parallel_size", Value::kNumber},
      {"--context-parallel-size", Section::kModel, "context_parallel_size", Value::kNumber},
      {"--cp-comm-type", Section::kModel, "cp_comm_type", Value::kString},
      {"--sequence-parallel", Section::kModel, "sequence_parallel", Value::kTrue},
      {"--num-layers", Section::kModel, "num_layers", Value::kNumber},
      {"--hidden-size", Section::kModel, "hidden_size", Value::kNumber},
      {"--num-attention-heads", Section::kModel, "num_attention_heads", Value::kNumber},
      {"--seq-length", Section::kModel, "seq_length", Value::kNumber},
      {"--num-query-groups", Section::kModel, "num_query_groups", Value::kNumber},
      {"--kv-channels", Section::kModel, "kv_channels", Value::kNumber},
      {"--ffn-hidden-size", Section::kModel, "ffn_hidden_size", Value::kNumber},
      {"--normalization", Section::kModel, "normalization", Value::kString},
      {"--position-embedding-type", Section::kModel, "position_embedding_type", Value::kString},
      {"--rotary-base", Section::kModel, "rotary_base", Value::kNumber},
      {"--disable-bias-linear", Section::kModel, "add_bias_linear", Value::kFalse},
      // Multi-head latent attention: MLAModelProvider's fields (megatron/bridge/models/mla_provider.py, an
      // MLATransformerConfig).
      {"--multi-latent-attention", Section::kModel, "multi_latent_attention", Value::kTrue},
      {"--q-lora-rank", Section::kModel, "q_lora_rank", Value::kNumber},
      {"--kv-lora-rank", Section::kModel, "kv_lora_rank", Value::kNumber},
      {"--qk-head-dim", Section::kModel, "qk_head_dim", Value::kNumber},
      {"--qk-pos-emb-head-dim", Section::kModel, "qk_pos_emb_head_dim", Value::kNumber},
      {"--v-head-dim", Section::kModel, "v_head_dim", Value::kNumber},
      {"--qk-layernorm", Section::kModel, "qk_layernorm", Value::kTrue},
      {"--untie-embeddings-and-output-weights", Section::kModel, "share_embeddings_and_output_weights", Value::kFalse},
      {"--window-size", Section::kModel, "window_size", Value::kWindow},
      {"--window-attn-skip-freq", Section::kModel, "window_attn_skip_freq", Value::kNumber},
      {"--attention-dropout", Section::kModel, "attention_dropout", Value::kNumber},
      {"--hidden-dropout", Section::kModel, "hidden_dropout", Value::kNumber},
      {"--num-experts", Section::kModel, "num_moe_experts", Value::kNumber},
      {"--moe-router-topk", Section::kModel, "moe_router_topk", Value::kNumber},
      {"--moe-ffn-hidden-size", Section::kModel, "moe_ffn_hidden_size", Value::kNumber},
      {"--moe-shared-expert-intermediate-size", Section::kModel, "moe_shared_expert_intermediate_size", Value::kNumber},
      {"--moe-layer-freq", Section::kModel, "moe_layer_freq", Value::kExpression},
      {"--expert-model-parallel-size", Section::kModel, "expert_model_parallel_size", Value::kNumber},
      {"--expert-tensor-parallel-size", Section::kModel, "expert_tensor_parallel_size", Value::kNumber},
      {"--moe-token-dispatcher-type", Section::kModel, "moe_token_dispatcher_type", Value::kString},
      {"--moe-flex-dispatcher-backend", Section::kModel, "moe_flex_dispatcher_backend", Value::kString},
      {"--moe-grouped-gemm", Section::kModel, "moe_grouped_gemm", Value::kTrue},
      {"--moe-router-score-function", Section::kModel, "moe_router_score_function", Value::kString},
      {"--moe-router-load-balancing-type", Section::kModel, "moe_router_load_balancing_type", Value::kString},
      {"--moe-aux-loss-coeff", Section::kModel, "moe_aux_loss_coeff", Value::kNumber},
      {"--moe-router-enable-expert-bias", Section::kModel, "moe_router_enable_expert_bias", Value::kTrue},
      {"--moe-router-num-groups", Section::kModel, "moe_router_num_groups", Value::kNumber},
      {"--moe-router-group-topk", Section::kModel, "moe_router_group_topk", Value::kNumber},
      {"--moe-expert-capacity-factor", Section::kModel, "moe_expert_capacity_factor", Value::kNumber},
      {"--moe-pad-expert-input-to-capacity", Section::kModel, "moe_pad_expert_input_to_capacity", Value::kTrue},
      {"--overlap-moe-expert-parallel-comm", Section::kModel, "overlap_moe_expert_parallel_comm", Value::kTrue},
      {"--delay-wgrad-compute", Section::kModel, "delay_wgrad_compute", Value::kTrue},
      {"--mtp-num-layers", Section::kModel, "mtp_num_layers", Value::kNumber},
      {"--pipeline-model-parallel-layout", Section::kModel, "pipeline_model_parallel_layout", Value::kString},
      {"--microbatch-group-size-per-virtual-pipeline-stage", Section::kModel, "microbatch_group_size_per_vp_stage",
       Value::kNumber},
      {"--recompute-granularity", Section::kModel, "recompute_granularity", Value::kString},
      {"--recompute-method", Section::kModel, "recompute_method", Value::kString},
      {"--recompute-num-layers", Section::kModel, "recompute_num_layers", Value::kNumber},
      {"--recompute-modules", Section::kModel, "recompute_modules", Value::kStringList},
      {"--micro-batch-size", Section::kTrain, "micro_batch_size", Value::kNumber},
      {"--global-batch-size", Section::kTrain, "global_batch_size", Value::kNumber},
      {"--use-distributed-optimizer", Section::kDdp, "use_distributed_optimizer", Value::kTrue},
      {"--num-distributed-optimizer-instances", Section::kDdp, "num_distributed_optimizer_instances", Value::kNumber},
      {"--data-parallel-sharding-strategy", Section::kDdp, "data_parallel_sharding_strategy", Value::kString},
      {"--overlap-grad-reduce", Section::kDdp, "overlap_grad_reduce", Value::kTrue},
      {"--overlap-param-gather", Section::kDdp, "overlap_param_gather", Value::kTrue},
      {"--use-precision-aware-optimizer", Section::kOptimizer, "use_precision_aware_optimizer", Value::kTrue},
      {"--exp-avg-dtype", Section::kOptimizer, "exp_avg_dtype", Value::kDtype},
      {"--exp-avg-sq-dtype", Section::kOptimizer, "exp_avg_sq_dtype", Value::kDtype},
      {"--fp8-recipe", Section::kMixed, "fp8_recipe", Value::kString},
      {"--fp8-param-gather", Section::kMixed, "fp8_param_gather", Value::kTrue},
      {"--reuse-grad-buf-for-mxfp8-param-ag", Section::kMixed, "reuse_grad_buf_for_mxfp8_param_ag", Value::kTrue},
      {"--ckpt-format", Section::kCheckpoint, "ckpt_format", Value::kString},
      {"--tp-comm-overlap", Section::kCommOverlap, "tp_comm_overlap", Value::kTrue},
  };
  return kFields;
}

// One megatron.args line's value as Python.
std::string PythonValue(Value kind, const std::string& v) {
  switch (kind) {
    case Value::kNumber:
    case Value::kExpression: return v;
    case Value::kString: return fmt::format("\"{}\"", v);
    case Value::kTrue: return "True";
    case Value::kFalse: return "False";
    case Value::kDtype:  // "": a dtype this export does not write (TranslateFlags refuses it)
      return v == "bf16" ? "torch.bfloat16" : v == "fp16" ? "torch.float16" : v == "fp32" ? "torch.float32" : "";
    case Value::kWindow: return fmt::format("({})", v);
    case Value::kStringList: {
      std::vector<std::string> words;
      size_t at = 0;
      while (at < v.size()) {
        size_t end = v.find(' ', at);
        if (end == std::string::npos) end = v.size();
        if (end > at) words.push_back(fmt::format("\"{}\"", v.substr(at, end - at)));
        at = end + 1;
      }
      return fmt::format("[{}]", fmt::join(words, ", "));
    }
  }
  return v;
}

// The recipe's sections as (field, Python value) lists, in megatron.args order.
using Entries = std::vector<std::pair<std::string, std::string>>;
struct Recipe {
  std::map<Section, Entries> sections;
  bool fp8 = false, bf16 = false, fp16 = false, grad_fp32 = true;
  std::string fp8_format;
};

// The value `key` has in `e`, nullptr when unset.
const std::string* Find(const Entries& e, const std::string& key) {
  const auto it = std::find_if(e.begin(), e.end(), [&](const auto& x) { return x.first == key; });
  return it == e.end() ? nullptr : &it->second;
}

// Sets `key` once: "" when added or already there with that value, else the conflict (two flags setting one field
// two ways, which would be a Python SyntaxError or a silent override in the written dict).
std::string Put(Entries* e, const std::string& key, const std::string& value) {
  if (const std::string* v = Find(*e, key))
    return *v == value ? "" : fmt::format("two flags set Bridge's {} to {} and {}", key, *v, value);
  e->emplace_back(key, value);
  return "";
}

// megatron.args into the recipe's sections; "" or the first flag Bridge has no field for here.
std::string TranslateFlags(const std::string& args, const Plan& plan, const ModelSpec& model, const LaunchPlan& L,
                           Recipe* r) {
  size_t at = 0;
  while (at < args.size()) {
    size_t end = args.find('\n', at);
    if (end == std::string::npos) end = args.size();
    const std::string line = args.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string flag = line.substr(0, sp), value = sp == std::string::npos ? "" : line.substr(sp + 1);
    Entries& m = r->sections[Section::kModel];
    if (flag == "--swiglu") {
      m.emplace_back("gated_linear_unit", "True");
      m.emplace_back("activation_func", "\"silu\"");  // the template's ACTIVATIONS
    } else if (flag == "--squared-relu") {
      m.emplace_back("activation_func", "\"squared_relu\"");
    } else if (flag == "--attention-backend") {
      m.emplace_back("attention_backend", fmt::format("\"{}\"", value));  // AttnBackend[name]
    } else if (flag == "--num-layers-per-virtual-pipeline-stage") {
      m.emplace_back("virtual_pipeline_model_parallel_size", std::to_string(L.interleave));
    } else if (flag == "--use-megatron-fsdp") {
      // Bridge turns the distributed optimizer on under Megatron-FSDP itself (with a message): written as it runs.
      r->sections[Section::kDdp].emplace_back("use_megatron_fsdp", "True");
      if (std::string e = Put(&r->sections[Section::kDdp], "use_distributed_optimizer", "True"); !e.empty()) return e;
    } else if (flag == "--bf16") {
      r->bf16 = true;
    } else if (flag == "--fp16") {
      r->fp16 = true;
    } else if (flag == "--fp8-format") {
      r->fp8 = true;
      r->fp8_format = value;
    } else if (flag == "--grad-reduce-in-bf16") {
      r->grad_fp32 = false;
    } else if (flag == "--accumulate-allreduce-grads-in-fp32") {
      r->grad_fp32 = true;
    } else if (flag == "--max-position-embeddings" || flag == "--group-query-attention") {
      // the provider has no position-table length (rope, or the sequence length) and reads GQA from the groups
    } else {
      const auto& fields = Fields();
      const auto it = std::find_if(fields.begin(), fields.end(), [&](const Field& f) { return flag == f.flag; });
      if (it == fields.end())
        return fmt::format("megatron.args's {} has no Megatron-Bridge field in this export (docs/exports.md)", flag);
      const std::string py = PythonValue(it->value, value);
      if (py.empty()) return fmt::format("megatron.args's {} {}: no Bridge value for it in this export", flag, value);
      if (std::string e = Put(&r->sections[it->section], it->field, py); !e.empty()) return e;
    }
  }
  if (model.dtype == DType::kFp16) r->grad_fp32 = EffectiveGradDType(model.dtype, plan.grad_dtype) == DType::kFp32;
  // Megatron-LM interleaves from --num-layers-per-virtual-pipeline-stage or the layout; Bridge's provider wants the
  // chunk count as well when a layout is given (it checks the two agree).
  if (L.interleave > 1 && !Find(r->sections[Section::kModel], "virtual_pipeline_model_parallel_size"))
    r->sections[Section::kModel].emplace_back("virtual_pipeline_model_parallel_size", std::to_string(L.interleave));
  return "";
}

// What Megatron-LM decides without a flag where Bridge's dataclasses default otherwise (megatron/training/
// arguments.py and argument_utils.py, megatron-core 0.19.2, against GPTModelProvider (MLAModelProvider for MLA),
// TransformerConfig and DistributedDataParallelConfig): written, so that Bridge trains the model megatron.args trains,
// at its cost.
void MegatronLmDefaults(const ModelSpec& model, const LaunchPlan& L, Recipe* r) {
  const GptConfig& g = model.gpt;
  const bool vp = L.interleave > 1;
  const auto py = [](bool b) { return std::string(b ? "True" : "False"); };
  Entries& m = r->sections[Section::kModel];
  Put(&m, "add_qkv_bias", py(g.bias));  // validate_args: add_bias_linear turns add_qkv_bias on (the provider: off)
  // bias_swiglu_fusion (on) or bias_gelu_fusion (on, off without biases); the provider's default: off.
  Put(&m, "bias_activation_fusion", py(g.ffn_act == "swiglu" || (g.ffn_act == "gelu" && g.bias)));
  Put(&m, "bias_dropout_fusion", "True");
  Put(&m, "apply_rope_fusion", py(g.position == "rope"));  // on, off without RoPE (validate_args)
  Put(&m, "cross_entropy_loss_fusion", "False");           // Megatron-LM's flag is off; the provider's default: on
  // Interleaved 1F1B overlaps its p2p and does not batch it (without the overlap Megatron-LM refuses pp 2: a batch of
  // sends both ways to one peer); off without interleaving.
  Put(&m, "overlap_p2p_comm", py(vp));
  Put(&m, "batch_p2p_comm", py(!vp));
  if (MlaLayer(model) != nullptr) {
    // MLAModelProvider's defaults that are not Megatron-LM's (a review of Bridge 0.6 against core_v0.16.1): the
    // query's LoRA rank (the config's 512; Megatron-LM's None without --q-lora-rank), the rotary scaling factor (the
    // config's 40; --rotary-scaling-factor 1.0), and multi_latent_attention / normalization, which Bridge's
    // TransformerConfig base re-defaults over MLATransformerConfig's. YaRN at factor 1 is RoPE.
    if (!Find(m, "q_lora_rank")) Put(&m, "q_lora_rank", "None");
    Put(&m, "rotary_scaling_factor", "1.0");
    Put(&m, "rope_type", "\"yarn\"");  // MLA's default under Megatron-LM (--rope-type unset); rope fusion needs it
    Put(&m, "mscale", "1.0");
    Put(&m, "mscale_all_dim", "0.0");
    if (!Find(m, "normalization")) Put(&m, "normalization", "\"LayerNorm\"");
    // ... and four of GPTModelProvider's that MLAModelProvider's base order puts back to Megatron-Core's (Megatron-LM's
    // values: pipeline outputs deallocated, the masked-softmax fusion on, softmax in the input dtype); the gradient
    // accumulation fusion the template sets as GPTModelProvider would (where Transformer Engine has it).
    Put(&m, "deallocate_pipeline_outputs", "True");
    Put(&m, "masked_softmax_fusion", "True");
    Put(&m, "attention_softmax_in_fp32", "False");
  }
  Entries& d = r->sections[Section::kDdp];
  for (const char* k : {"overlap_grad_reduce", "overlap_param_gather"})
    if (!Find(d, k)) d.emplace_back(k, "False");
  Put(&d, "align_param_gather", py(vp));  // --no-align-param-gather's default, off without interleaving
}

// CommOverlapConfig (TP communication overlap) sets its own defaults on the model and DDP configs (comm_overlap.py:
// the MoE overlaps off, the DP overlaps on, 128 Mi-element buckets when dp > 1) unless given: given as the plan has
// them, the bucket as Megatron-LM sizes it (max(4e7, 1e6 x dp x cp) elements).
void CommOverlapEntries(const LaunchPlan& L, Recipe* r) {
  Entries& c = r->sections[Section::kCommOverlap];
  if (c.empty()) return;
  const auto value = [&](Section s, const char* key, const char* dflt) {
    const std::string* v = Find(r->sections[s], key);
    return v == nullptr ? std::string(dflt) : *v;
  };
  for (const char* k : {"overlap_grad_reduce", "overlap_param_gather", "align_param_gather"})
    Put(&c, k, value(Section::kDdp, k, "False"));
  for (const char* k :
       {"overlap_p2p_comm", "batch_p2p_comm", "overlap_moe_expert_parallel_comm", "delay_wgrad_compute"})
    Put(&c, k, value(Section::kModel, k, "False"));
  Put(&c, "bucket_size", std::to_string(std::max<int64_t>(40000000, 1000000 * L.dp * std::max<int64_t>(1, L.cp))));
}

// Why Bridge cannot run what megatron.args can ("" when it can).
std::string BridgeRefusal(const ModelSpec& model, const LaunchPlan& L) {
  if (model.gpt.vocab % std::max<int64_t>(1, L.tp) != 0)
    return fmt::format(
        "vocabulary {} not divisible by tp {}: this export keeps the model's vocabulary exactly (a fine-tuned "
        "checkpoint's), and Megatron-Core splits the embedding rows evenly over tp; pad the model file's vocab to a "
        "multiple of tp (Megatron-LM pads to 128 x tp itself: the megatron export)",
        model.gpt.vocab, L.tp);
  if (model.gpt.packed_length > 0 && L.microbatch_size > 1)
    return fmt::format(
        "packed sequences with micro-batch {}: Megatron-Bridge trains offline-packed data at micro-batch 1 only "
        "(ConfigContainer.validate: \"Micro batch size should be 1 when training with packed sequence\"); solve with "
        "--microbatch 1 (each sequence of {} tokens already holds several samples)",
        L.microbatch_size, model.gpt.seq);
  return "";
}

// A dict's keyword lines (the template's whole-line placeholder: each line indented as it is).
std::string DictLines(const Entries& e) {
  std::string s;
  for (const auto& [k, v] : e) s += fmt::format("    {}={},\n", k, v);
  return s;
}

// The LoRA targets as Megatron-Core's module names (linear_qkv, ...), in the model file's order.
std::string LoraTargets(const LoraConfig& lora) {
  std::vector<std::string> t;
  const std::pair<GemmRole, const char*> names[] = {{GemmRole::kQkv, "linear_qkv"},
                                                    {GemmRole::kProj, "linear_proj"},
                                                    {GemmRole::kFc1, "linear_fc1"},
                                                    {GemmRole::kFc2, "linear_fc2"}};
  for (const auto& [role, name] : names)
    if ((lora.targets & LoraTargetBit(role)) != 0) t.push_back(fmt::format("\"{}\"", name));
  return fmt::format("[{}]", fmt::join(t, ", "));
}

std::string MixedEntries(const Recipe& r) {
  Entries e;
  const char* dtype = r.fp16 ? "torch.float16" : r.bf16 || r.fp8 ? "torch.bfloat16" : "torch.float32";
  if (r.fp16) e.emplace_back("fp16", "True");
  else if (r.bf16 || r.fp8) e.emplace_back("bf16", "True");
  else e.emplace_back("fp32", "True");
  e.emplace_back("params_dtype", dtype);
  e.emplace_back("pipeline_dtype", dtype);
  e.emplace_back("grad_reduce_in_fp32", r.grad_fp32 ? "True" : "False");
  if (r.fp8) {
    // megatron.args's format, hybrid (E4M3 forward, E5M2 gradients; Bridge's MXFP8 preset writes e4m3, this writes
    // the run megatron.args is); delayed scaling is TE's default recipe when megatron.args names none.
    const bool recipe = r.sections.count(Section::kMixed) && Find(r.sections.at(Section::kMixed), "fp8_recipe");
    e.emplace_back("fp8", fmt::format("\"{}\"", r.fp8_format));  // megatron.args's format (MXFP8 too)
    if (!recipe) e.emplace_back("fp8_recipe", "\"delayed\"");
  }
  if (r.sections.count(Section::kMixed))
    e.insert(e.end(), r.sections.at(Section::kMixed).begin(), r.sections.at(Section::kMixed).end());
  return DictLines(e);
}

std::string BridgeScript(const ModelSpec& model, const LaunchPlan& L, Recipe& r) {
  const GptConfig& g = model.gpt;
  const bool finetune = g.lora.rank > 0 || g.packed_length > 0;
  std::string lora = "None";
  if (g.lora.rank > 0)  // alpha: Bridge's default (32), which the cost does not depend on
    lora = fmt::format("dict(target_modules={}, dim={})", LoraTargets(g.lora), g.lora.rank);
  auto lines = [&](Section s) { return r.sections.count(s) ? DictLines(r.sections.at(s)) : std::string(); };
  return FillTemplate(codegen_templates::kMegatronBridge, {{"name", model.name},
                                                           {"world", std::to_string(L.ranks.size())},
                                                           {"tp", std::to_string(L.tp)},
                                                           {"pp", std::to_string(L.pp)},
                                                           {"cp", std::to_string(L.cp)},
                                                           {"dp", std::to_string(L.dp)},
                                                           {"vocab", std::to_string(g.vocab)},
                                                           {"finetune", finetune ? "True" : "False"},
                                                           {"packed", g.packed_length > 0 ? "True" : "False"},
                                                           {"model", lines(Section::kModel)},
                                                           {"train", lines(Section::kTrain)},
                                                           {"ddp", lines(Section::kDdp)},
                                                           {"optimizer", lines(Section::kOptimizer)},
                                                           {"mixed", MixedEntries(r)},
                                                           {"checkpoint", lines(Section::kCheckpoint)},
                                                           {"comm_overlap", lines(Section::kCommOverlap)},
                                                           {"lora", lora}});
}

// A megatron.args note as Bridge's: the Megatron-LM flags it names (not the planner's own, after "solve with" up to
// the clause's end) followed by the Bridge fields that carry them, so that the user edits the script's fields.
std::string BridgeNote(const std::string& note) {
  static const std::map<std::string, std::string> kNoteOnly = {
      {"--moe-router-topk-scaling-factor", "moe_router_topk_scaling_factor"},
      {"--attention-backend", "attention_backend"},
      {"--main-params-dtype", "main_params_dtype"},
  };
  std::string n = note.rfind("megatron.args: ", 0) == 0 ? "megatron_bridge.py: " + note.substr(15) : note;
  std::vector<std::string> fields;
  bool planner = false;  // inside "solve with ...": the planner's flags
  for (size_t i = 0; i < n.size(); ++i) {
    if (n.compare(i, 10, "solve with") == 0) planner = true;
    if (n[i] == ')' || n[i] == ';') planner = false;
    if (planner || n.compare(i, 2, "--") != 0 || (i > 0 && n[i - 1] != ' ' && n[i - 1] != '(')) continue;
    size_t j = i + 2;
    while (j < n.size() && (std::islower(static_cast<unsigned char>(n[j])) ||
                            std::isdigit(static_cast<unsigned char>(n[j])) || n[j] == '-'))
      ++j;
    const std::string flag = n.substr(i, j - i);
    std::string field;
    for (const Field& f : Fields())
      if (flag == f.flag) field = f.field;
    if (field.empty() && kNoteOnly.count(flag)) field = kNoteOnly.at(flag);
    if (!field.empty() && std::find(fields.begin(), fields.end(), field) == fields.end()) fields.push_back(field);
  }
  if (fields.empty()) return n;
  return fmt::format("{} (Bridge's field{}: {})", n, fields.size() > 1 ? "s" : "", fmt::join(fields, ", "));
}

}  // namespace

void AddMegatronBridge(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files, Notes* notes) {
  std::string refused = MegatronInexpressible(plan, model, L);
  if (refused.empty()) refused = MegatronRefusal(plan, model, L);
  if (refused.empty()) refused = BridgeRefusal(model, L);
  std::vector<std::string> flag_notes;
  std::string mg;
  Recipe r;
  if (refused.empty()) {
    mg = MegatronFlags(plan, model, L, &flag_notes);
    refused = MegatronRuleViolation(mg, MegatronCheckOf(model, L));
  }
  if (refused.empty()) refused = TranslateFlags(mg, plan, model, L, &r);
  if (refused.empty()) {
    MegatronLmDefaults(model, L, &r);
    CommOverlapEntries(L, &r);
  }
  if (!refused.empty()) {
    notes->push_back("megatron_bridge.py: not written: " + refused);
    files->emplace_back("megatron_bridge.py.refused", refused + "\n");
    return;
  }
  for (const std::string& n : flag_notes)  // the flags are megatron.args's: so are their notes
    notes->push_back(BridgeNote(n));
  // Bridge trains with Megatron-Core's schedules and its NCCL data parallelism: what megatron.args notes, it notes.
  if (const std::string n = MegatronScheduleNote(L); !n.empty()) notes->push_back("megatron_bridge.py: " + n);
  if (DpCommUsesServers(L.dp_comm))
    notes->push_back(fmt::format(
        "megatron_bridge.py: dp_comm {} has no Megatron-Bridge equivalent: it all-reduces the gradients over NCCL in "
        "its data-parallel groups, without the plan's {} summation server(s)",
        DpCommName(L.dp_comm), L.servers.size()));
  files->emplace_back("megatron_bridge.py", BridgeScript(model, L, r));
}

}  // namespace codegen_internal
}  // namespace planner
