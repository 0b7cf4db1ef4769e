// torchtitan.toml: the plan as torchtitan 0.2's job configuration (the last torchtitan release read from
// TOML; docs/exports.md "torchtitan"), or torchtitan.toml.refused with the reason.
#include "codegen/embedded_templates.h"
#include "codegen/exports.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace planner {
namespace codegen_internal {

namespace {

// torchtitan's registered Llama 3 flavors (torchtitan/models/llama3/__init__.py, 0.2.2): the model
// file must equal one of them, since torchtitan builds the model from its name and flavor.
// tests/exports/check_torchtitan.py checks each row against torchtitan's own TransformerModelArgs.
struct TitanFlavor {
  const char* name;
  int64_t layers, hidden, heads, kv_heads, ffn, vocab, rope_theta;
};
constexpr TitanFlavor kLlama3Flavors[] = {
    {"8B", 32, 4096, 32, 8, 14336, 128256, 500000},
    {"70B", 80, 8192, 64, 8, 28672, 128256, 500000},
    {"405B", 126, 16384, 128, 8, 53248, 128256, 500000},
};

// The flavor the model is, or why none: llama3's blocks are RMSNorm, SwiGLU, RoPE, GQA, no biases,
// untied embeddings; dense (MoE, MLA and MTP models have other torchtitan models, not mapped here).
std::string TitanFlavorOf(const ModelSpec& model, std::string* flavor) {
  if (!model.is_gpt)
    return fmt::format(
        "model {} is not a GPT (gpt: template) model: torchtitan trains its registered transformer models", model.name);
  const GptConfig& g = model.gpt;
  if (model.FirstWindowedLayer() != nullptr)
    return fmt::format(
        "model {} attends through a sliding window of {} keys: torchtitan's llama3 attends causally over the whole "
        "sequence",
        model.name, g.sliding_window);
  if (g.moe.experts > 0 || g.mla.kv_lora_rank > 0 || g.mtp > 0) {
    return fmt::format(
        "model {} has MoE / MLA / MTP layers: the export maps dense Llama 3 models only (torchtitan's deepseek_v3 and "
        "qwen3 models are not mapped)",
        model.name);
  }
  const int64_t kv = g.kv_heads > 0 ? g.kv_heads : g.heads;
  const int64_t ffn = g.ffn > 0 ? g.ffn : 4 * g.hidden;
  const bool llama = g.ffn_act == "swiglu" && g.norm == "rmsnorm" && g.position == "rope" && !g.bias &&
                     !g.tie_embeddings && (g.head_dim == 0 || g.head_dim * g.heads == g.hidden);
  for (const TitanFlavor& f : kLlama3Flavors) {
    if (llama && g.layers == f.layers && g.hidden == f.hidden && g.heads == f.heads && kv == f.kv_heads &&
        ffn == f.ffn && g.vocab == f.vocab && g.rope_theta == f.rope_theta) {
      *flavor = f.name;
      return "";
    }
  }
  return fmt::format(
      "model {} ({} layers, hidden {}, {} heads, {} KV heads, ffn {}, vocab {}) is none of torchtitan's llama3 flavors "
      "8B, 70B, "
      "405B: torchtitan builds the model from [model] name and flavor, so a model it does not register cannot be "
      "written",
      model.name, g.layers, g.hidden, g.heads, kv, ffn, g.vocab);
}

// torchtitan's module for a planner layer ("" for the loss, which rides with the output layer).
std::string TitanFqn(const ModelSpec& model, size_t i, int64_t block) {
  const Layer& l = model.layers[i];
  if (l.kind == LayerKind::kEmbedding) return "tok_embeddings";
  if (l.kind == LayerKind::kTransformerBlock) return fmt::format("layers.{}", block);
  if (l.kind == LayerKind::kLmHead) return "output";
  if (l.kind == LayerKind::kLoss) return "";
  return "norm";  // the final norm
}

const char* TitanSchedule(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "GPipe";
    case Schedule::kInterleaved: return "Interleaved1F1B";
    case Schedule::kZbH1: return "InterleavedZeroBubble";
    case Schedule::kDualPipeV: return "DualPipeV";
    default: return "1F1B";
  }
}

}  // namespace

std::string TorchtitanRuleViolation(const TorchtitanCheck& c) {
  if (c.dp_replicate * c.dp_shard * c.cp * c.tp * c.pp != c.world) {
    return fmt::format(
        "dp_replicate {} x dp_shard {} x cp {} x tp {} x pp {} != world size {} (ParallelDims._validate)",
        c.dp_replicate, c.dp_shard, c.cp, c.tp, c.pp, c.world);
  }
  if (c.microbatch < 1 || c.local_batch % c.microbatch != 0) {
    return fmt::format(
        "local_batch_size {} is not a multiple of pipeline_parallel_microbatch_size {} (pipeline_parallel.py)",
        c.local_batch, c.microbatch);
  }
  if (c.global_batch != c.local_batch * c.dp_replicate * c.dp_shard) {
    return fmt::format(
        "global_batch_size {} != local_batch_size {} x data-parallel {} (the trainer's gradient accumulation is global "
        "/ (local x dp) = 1 "
        "step per microbatch group)",
        c.global_batch, c.local_batch, c.dp_replicate * c.dp_shard);
  }
  if (c.pp > 1) {
    const int64_t parts = static_cast<int64_t>(c.parts.size());
    if (parts % c.pp != 0)
      return fmt::format("{} model parts for pp {}: num_stages must be evenly divisible by pp_degree", parts, c.pp);
    if (c.single_stage && parts != c.pp)
      return fmt::format("{} model parts for pp {}: a single-stage schedule takes exactly 1 stage per rank", parts,
                         c.pp);
    if (c.v_style && parts != 2 * c.pp)
      return fmt::format("{} model parts for pp {}: V schedules assume 2 stages per rank", parts, c.pp);
    for (size_t i = 0; i < c.parts.size(); ++i) {
      if (c.parts[i].empty()) return fmt::format("model part {} names no module (a stage holding only the loss)", i);
    }
  }
  if (c.heads % c.tp != 0 || c.kv_heads % c.tp != 0)
    return fmt::format("{} heads / {} KV heads are not divisible by tp {} (torchtitan's TP shards whole heads)",
                       c.heads, c.kv_heads, c.tp);
  if (c.cp > 1 && c.seq % (2 * c.cp) != 0)
    return fmt::format(
        "seq_len {} is not a multiple of 2 x cp = {} (the head-tail load balancer splits each sequence in 2 cp chunks)",
        c.seq, 2 * c.cp);
  return "";
}

namespace {

// Why torchtitan cannot run the plan ("" when it can), and the model's flavor.
std::string TitanRefusal(const ModelSpec& model, const LaunchPlan& L, std::string* flavor) {
  if (L.schedule == Schedule::kPipeDream || PerStageReplication(L)) {
    return "PipeDream's asynchronous schedule / per-stage replication: torchtitan's pipeline schedules "
           "(torch.distributed.pipelining) flush every "
           "step and replicate every stage over the same data-parallel degree";
  }
  return TitanFlavorOf(model, flavor);
}

}  // namespace

namespace {

// The torchao recipe an FP8 plan's scaling runs as in torchtitan (torchtitan 0.2.2 registers the converters
// "quantize.linear.float8" and "quantize.linear.mx", torchtitan/components/quantization/float8.py and mx.py; 0.3 the
// same converters' Config classes): current scaling as torchao's tensorwise default, rowwise as recipe "rowwise",
// MXFP8 as the mx converter's "mxfp8_cublas" (Blackwell). Delayed and blockwise scaling have no torchao training
// recipe: tensorwise is written, with a note. The output layer stays in bf16 (filter_fqns), as the plan costs it.
struct TitanFp8 {
  bool mx = false;     // the mx converter (MXFP8) instead of float8
  std::string recipe;  // float8's recipe_name ("" = torchao's tensorwise default) or mx's
};

TitanFp8 TitanFp8Recipe(const Plan& plan) {
  if (plan.fp8_recipe == "mxfp8") return {true, "mxfp8_cublas"};
  if (plan.fp8_recipe == "rowwise") return {false, "rowwise"};
  return {};
}

// The same settings as torchtitan 0.3's Python config module (0.3 reads no TOML): a function of
// torchtitan.models.llama3.config_registry edited field by field; the output layer is `lm_head` there.
std::string TitanConfigModule(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o,
                              const TorchtitanCheck& c, const std::string& flavor, const std::string& fsdp,
                              const std::string& ac, bool compile, bool async_tp) {
  std::string parts;
  for (const auto& p : c.parts) {
    std::vector<std::string> q;
    for (const auto& f : p) q.push_back("\"" + (f == "output" ? std::string("lm_head") : f) + "\"");
    parts += fmt::format("        [{}],\n", fmt::join(q, ", "));
  }
  const std::string flavor_fn = flavor == "8B" ? "llama3_8b" : flavor == "70B" ? "llama3_70b" : "llama3_405b";
  std::string pipeline_lines;
  // Float8 (or MXFP8) linears only in an FP8 plan, the output layer kept in bf16 as the plan costs it: float8's
  // filter_fqns skips lm_head; MXFP8's fqns converts the linears under `layers` only. torchtitan 0.3's float8 has
  // rowwise recipes only (TorchtitanFp8Note says when the plan was costed with another).
  std::string converters = "[]";
  if (model.dtype == DType::kFp8) {
    const TitanFp8 r = TitanFp8Recipe(plan);
    converters = r.mx ? "[MXFP8LinearConverter.Config(fqns=[\"layers\"])]"
                      : "[Float8LinearConverter.Config(filter_fqns=[\"lm_head\"], recipe_name=\"rowwise\")]";
  }
  if (L.pp > 1) {
    pipeline_lines = fmt::format(
        "    p.pipeline_parallel_schedule = \"{}\"\n"
        "    p.pipeline_parallel_microbatch_size = {}\n"
        "    p.module_fqns_per_model_part = [\n{}    ]\n",
        TitanSchedule(L.schedule), L.microbatch_size, parts);
  }
  const char* cuda_graph_lines =
      "    t.disable_cuda_graphs = True  # torchtitan 0.3: CUDA graphs do not run with pipeline parallelism\n";
  const char* ac_value = ac == "full"        ? "FullAC.Config()"
                         : ac == "selective" ? "SelectiveAC.Config()  # 0.3: op-level selective AC"
                                             : "None";
  auto str = [](auto x) { return fmt::format("{}", x); };  // a value as fmt writes it
  return FillTemplate(codegen_templates::kTorchtitanConfig,
                      {{"world", str(c.world)},
                       {"tp", str(L.tp)},
                       {"cp", str(L.cp)},
                       {"pp", str(L.pp)},
                       {"dp", str(L.dp)},
                       {"sched", ScheduleName(L.schedule)},
                       {"flavor_fn", flavor_fn},
                       {"flavor", flavor},
                       {"converters", converters},
                       {"compile", compile ? "True" : "False"},
                       {"async_tp", compile && async_tp ? "True" : "False"},
                       {"dp_replicate", str(c.dp_replicate)},
                       {"dp_shard", str(c.dp_shard)},
                       {"fsdp", fsdp},
                       {"pipeline_lines", pipeline_lines},
                       {"local_batch", str(c.local_batch)},
                       {"global_batch", str(c.global_batch)},
                       {"seq", str(c.seq)},
                       {"steps", str(o.run.iterations)},
                       {"param_dtype", model.dtype == DType::kFp32 ? "float32" : "bfloat16"},
                       {"cuda_graph_lines", L.pp > 1 ? cuda_graph_lines : ""},
                       {"ac", ac_value}});
}

void TorchtitanFp8Note(const Plan& plan, const ModelSpec& model, int64_t tp, std::vector<std::string>* notes) {
  if (model.dtype != DType::kFp8) return;
  const bool mx = TitanFp8Recipe(plan).mx;
  if (plan.fp8_recipe.empty())
    notes->push_back(
        "torchtitan.toml: the plan records no FP8 recipe (solved before inputs.fp8_recipe); written as torchao's "
        "tensorwise float8");
  if (!mx && plan.fp8_recipe != "rowwise")
    notes->push_back(fmt::format(
        "torchtitan_config.py: torchtitan 0.3's float8 converter has rowwise recipes only: the module runs rowwise "
        "scaling where the plan was costed with {} (torchtitan.toml, for 0.2, runs tensorwise); to cost what 0.3 "
        "runs, solve with --fp8-recipe rowwise where the kernel table lists it (Hopper's) or mxfp8 on Blackwell",
        plan.fp8_recipe.empty() ? std::string("the engine's recipe") : plan.fp8_recipe));
  if (plan.fp8_recipe == "delayed" || plan.fp8_recipe == "blockwise")
    notes->push_back(fmt::format(
        "torchtitan.toml: the plan was costed with {} scaling, which torchao's float8 training has no recipe for: "
        "written as its tensorwise (current) scaling; solve with --fp8-recipe current to cost what runs",
        plan.fp8_recipe));
  if (mx && plan.engine == "torchtitan-compile" && tp > 1)
    notes->push_back(
        "torchtitan.toml: torchtitan 0.2.2's MXFP8 converter asserts \"TP not yet supported with torch.compile for "
        "mxfp8\" (components/quantization/mx.py): this TOML stops at launch under 0.2.2 (torchtitan_config.py, for "
        "0.3, has no such limit); solve with --tp 1 or --engine torchtitan for a 0.2.2 run");
  if (mx)
    notes->push_back(
        "torchtitan.toml: torchtitan 0.2.2's MXFP8 converter imports torchao.prototype.mx_formats.MXLinearConfig, "
        "which torchao 0.18 (torchtitan 0.3's) no longer has: run it with the torchao of 0.2.2's time");
}

// The TOML's converter line and its [quantize.linear.*] table for an FP8 plan; empty strings otherwise.
void TitanFp8Toml(const Plan& plan, const ModelSpec& model, std::string* converters, std::string* table) {
  if (model.dtype != DType::kFp8) return;
  const TitanFp8 r = TitanFp8Recipe(plan);
  const char* name = r.mx ? "quantize.linear.mx" : "quantize.linear.float8";
  *converters = fmt::format("converters = [\"{}\"]\n", name);
  *table = fmt::format("\n[{}]\nfilter_fqns = [\"output\"]\n", name);
  if (!r.recipe.empty()) *table += fmt::format("recipe_name = \"{}\"\n", r.recipe);
}

}  // namespace

namespace {

// The plan as torchtitan's parallel dimensions, batch and model parts; *refused says why torchtitan cannot run it.
TorchtitanCheck TitanCheckOf(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, std::string* refused) {
  TorchtitanCheck c;
  c.world = static_cast<int64_t>(L.ranks.size());
  c.pp = L.pp;
  c.tp = L.tp;
  c.cp = L.cp;
  const bool ddp = plan.zero_stage == ZeroStage::kNone;  // ZeRO-0: DDP (replicate); else FSDP2 (shard)
  // HSDP: plan.dp_replicate replicas of a state sharded over dp_shard x cp ranks (torchtitan's dp_shard_cp mesh).
  const int64_t hsdp = ddp ? 1 : plan.dp_replicate;
  c.dp_replicate = ddp ? L.dp : hsdp;
  c.dp_shard = ddp ? 1 : L.dp / std::max<int64_t>(1, hsdp);
  if (refused->empty() && L.dp % std::max<int64_t>(1, hsdp) != 0)
    *refused = fmt::format(
        "HSDP {} x {}: torchtitan replicates whole data-parallel groups (data_parallel_replicate_degree divides dp "
        "{}); "
        "solve with --dp-replicate dividing {}",
        hsdp, L.dp * L.cp / hsdp, L.dp, L.dp);
  // torchtitan's batch is per data-parallel rank; context-parallel ranks share it.
  c.microbatch = L.microbatch_size;
  c.local_batch = L.microbatch_size * L.num_microbatches;
  c.global_batch = L.global_batch;
  c.single_stage = L.schedule == Schedule::k1F1B || L.schedule == Schedule::kGpipe;
  c.v_style = L.schedule == Schedule::kDualPipeV;
  c.heads = model.is_gpt ? model.gpt.heads : 1;
  c.kv_heads = model.is_gpt ? (model.gpt.kv_heads > 0 ? model.gpt.kv_heads : model.gpt.heads) : 1;
  c.seq = model.is_gpt ? model.gpt.seq : 0;
  int64_t block = 0;
  for (const auto& s : L.stages) {
    std::vector<std::string> part;
    for (int64_t i = s.first_layer; i <= s.last_layer && i < static_cast<int64_t>(model.layers.size()); ++i) {
      const std::string fqn = TitanFqn(model, static_cast<size_t>(i), block);
      if (model.layers[static_cast<size_t>(i)].kind == LayerKind::kTransformerBlock) ++block;
      if (!fqn.empty()) part.push_back(fqn);
    }
    c.parts.push_back(part);
  }
  if (refused->empty()) *refused = TorchtitanRuleViolation(c);
  return c;
}

// fsdp_reshard_after_forward for the plan's ZeRO stage (with its note where torchtitan's traffic differs).
std::string TitanFsdpMode(const Plan& plan, const LaunchPlan& L, std::vector<std::string>* notes) {
  std::string fsdp = "default";
  // ZeRO-3 under pipelining is torchtitan's default there (no reshard after forward), as the plan costs it.
  if (plan.zero_stage == ZeroStage::kParameters && L.pp == 1) fsdp = "always";
  if (plan.zero_stage == ZeroStage::kOptimizer || plan.zero_stage == ZeroStage::kGradients) {
    fsdp = "never";
    notes->push_back(fmt::format(
        "torchtitan.toml: ZeRO-{} as FSDP2 with fsdp_reshard_after_forward \"never\": torchtitan shards parameters, "
        "gradients and "
        "optimizer state over dp {} and gathers the parameters once per microbatch's forward (ZeRO-2/3-like traffic; "
        "the plan "
        "costed ZeRO-{}'s)",
        plan.zero_stage == ZeroStage::kOptimizer ? 1 : 2, L.dp, plan.zero_stage == ZeroStage::kOptimizer ? 1 : 2));
  }
  return fsdp;
}

// activation_checkpoint.mode for the plan's recompute (with its notes where torchtitan's policy differs).
std::string TitanAcMode(const Plan& plan, std::vector<std::string>* notes) {
  std::string ac = "none";
  if (plan.recompute == Recompute::kFull) ac = "full";
  if (plan.recompute == Recompute::kSelective) {
    ac = "selective";
    if (!HasRecomputeModule(plan.recompute_modules, RecomputeModule::kOpSac))
      notes->push_back(
          "torchtitan.toml: selective recompute as torchtitan's op-level selective AC (selective_ac_option \"op\": "
          "saves "
          "matmul outputs, "
          "recomputes the rest), not Megatron's core-attention recompute the plan costed");
  }
  if (plan.recompute == Recompute::kFull && plan.recompute_num_layers > 0) {
    notes->push_back(
        fmt::format("torchtitan.toml: block recompute ({} layers per chunk) has no torchtitan mode; written as full "
                    "recompute (slower than predicted)",
                    plan.recompute_num_layers));
  }
  return ac;
}

// The notes on what torchtitan runs differently from what the plan costed (TP, CP, schedule, precision, gradients,
// optimizer, data-parallel architecture).
void TitanDifferenceNotes(const Plan& plan, const ModelSpec& model, const LaunchPlan& L,
                          std::vector<std::string>* notes) {
  if (L.tp > 1 && !L.sequence_parallel)
    notes->push_back(
        "torchtitan.toml: torchtitan's TP always runs sequence parallelism; the plan costed TP without it");
  if (L.cp > 1 && plan.cp_comm_type == CpCommType::kAllGather)
    notes->push_back(
        "torchtitan.toml: context parallelism as torch's (one SDPA per K, V chunk, merged; its rotate method gathers "
        "the chunks), not Transformer Engine's all-gather the plan costed (--cp-comm-type allgather): slower than "
        "predicted; solve with --engine torchtitan for its own figure");
  if (L.schedule == Schedule::kZbH1)
    notes->push_back("torchtitan.toml: zb-h1 as InterleavedZeroBubble with one stage per rank (torch's ZB1P)");
  if (model.gpt.dropout > 0)
    notes->push_back(fmt::format(
        "torchtitan.toml: torchtitan's Llama 3 has no dropout: the model file's {} does not run (the plan costs its "
        "masks and their traffic: a little less memory and time than predicted, a different model)",
        model.gpt.dropout));
  if (model.dtype == DType::kFp16)
    notes->push_back("torchtitan.toml: torchtitan has no fp16 mixed precision; written bfloat16");
  if (model.dtype == DType::kFp32)
    notes->push_back("torchtitan.toml: mixed_precision_param float32 (the plan is fp32)");
  if (const DType grad = EffectiveGradDType(model.dtype, plan.grad_dtype); grad != DType::kFp32) {
    notes->push_back(
        fmt::format("torchtitan.toml: torchtitan reduces gradients in float32 only (training.mixed_precision_reduce); "
                    "the plan's {} gradients "
                    "(2 bytes per parameter, half the reduction bytes) run as fp32 there",
                    DTypeName(grad)));
  }
  if (const std::string n = Fp32OptimizerNote(plan, "torchtitan.toml"); !n.empty()) notes->push_back(n);
  if (const std::string n = Bf16WeightsNote(plan, "torchtitan.toml"); !n.empty()) notes->push_back(n);
  if (DpCommUsesServers(plan.dp_comm))
    notes->push_back(
        fmt::format("torchtitan.toml: dp_comm {} has no torchtitan equivalent: its data parallelism all-reduces / "
                    "reduce-scatters over NCCL",
                    DpCommName(plan.dp_comm)));
}

// torchtitan 0.2's TOML of the plan.
std::string TitanToml(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o,
                      const TorchtitanCheck& c, const std::string& flavor, const std::string& fsdp,
                      const std::string& ac, bool compile, bool async_tp) {
  std::string quoted;
  for (const auto& p : c.parts) {
    std::vector<std::string> q;
    for (const auto& f : p) q.push_back("\"" + f + "\"");
    quoted += fmt::format("{}[{}]", quoted.empty() ? "" : ", ", fmt::join(q, ", "));
  }
  std::string t = fmt::format(
      "# torchtitan 0.2 job configuration of the plan ({} ranks, tp-cp-pp-dp {}-{}-{}-{}, {}). Written by planner "
      "codegen.\n"
      "# torchrun --nproc-per-node N -m torchtitan.train --job.config_file torchtitan.toml (docs/exports.md)\n",
      c.world, L.tp, L.cp, L.pp, L.dp, ScheduleName(L.schedule));
  t += fmt::format("[job]\ndump_folder = \"./outputs\"\ndescription = \"planner plan {}\"\n\n", model.name);
  t += fmt::format("[model]\nname = \"llama3\"\nflavor = \"{}\"\n", flavor);
  std::string fp8_converters, fp8_table;
  TitanFp8Toml(plan, model, &fp8_converters, &fp8_table);
  t += fp8_converters;
  t += fmt::format(
      "\n[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\nsteps = {}\nmixed_precision_param = "
      "\"{}\"\n\n",
      c.local_batch, c.global_batch, c.seq, o.run.iterations, model.dtype == DType::kFp32 ? "float32" : "bfloat16");
  t += fmt::format(
      "[parallelism]\ndata_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\nfsdp_reshard_after_forward "
      "= \"{}\"\n"
      "tensor_parallel_degree = {}\ncontext_parallel_degree = {}\npipeline_parallel_degree = {}\n",
      c.dp_replicate, c.dp_shard, fsdp, L.tp, L.cp, L.pp);
  if (L.pp > 1) {
    t += fmt::format(
        "pipeline_parallel_schedule = \"{}\"\npipeline_parallel_microbatch_size = {}\nmodule_fqns_per_model_part = "
        "[{}]\n",
        TitanSchedule(L.schedule), L.microbatch_size, quoted);
  }
  if (async_tp) t += "enable_async_tensor_parallel = true\n";
  if (compile) t += "\n[compile]\nenable = true\n";
  t += fmt::format("\n[activation_checkpoint]\nmode = \"{}\"\n", ac);
  if (ac == "selective") t += "selective_ac_option = \"op\"\n";
  t += fp8_table;
  return t;
}

}  // namespace

void AddTorchtitan(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files,
                   std::vector<std::string>* notes) {
  std::string flavor;
  std::string refused = TitanRefusal(model, L, &flavor);
  const TorchtitanCheck c = TitanCheckOf(plan, model, L, &refused);
  if (!refused.empty()) {
    notes->push_back("torchtitan.toml: not written: " + refused);
    files->emplace_back("torchtitan.toml.refused", refused + "\n");
    return;
  }
  const std::string fsdp = TitanFsdpMode(plan, L, notes);
  const std::string ac = TitanAcMode(plan, notes);
  TitanDifferenceNotes(plan, model, L, notes);
  TorchtitanFp8Note(plan, model, L.tp, notes);
  // torch.compile when the plan was costed for it (engine torchtitan-compile), else eager as its engine
  // runs; async TP where the plan was costed with TP communication overlapped (inputs.tp_comm_overlap), which
  // torchtitan runs compiled only.
  const bool compile = plan.engine == "torchtitan-compile";
  const bool async_tp = plan.tp_comm_overlap && L.tp > 1 && compile;
  if (plan.tp_comm_overlap && L.tp > 1 && !compile)
    notes->push_back(
        "torchtitan.toml: the plan was costed with TP communication overlapped, which torchtitan runs (async TP) only "
        "with torch.compile: written without it (slower than predicted); solve with --engine torchtitan-compile");
  files->emplace_back("torchtitan.toml", TitanToml(plan, model, L, o, c, flavor, fsdp, ac, compile, async_tp));
  files->emplace_back("torchtitan_config.py",
                      TitanConfigModule(plan, model, L, o, c, flavor, fsdp, ac, compile, async_tp));
}

}  // namespace codegen_internal
}  // namespace planner
