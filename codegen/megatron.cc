// megatron.args: the plan as Megatron-LM flags, or megatron.args.refused with the reason.
#include "codegen/exports.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dp_solver/programs.h"

namespace planner {
namespace codegen_internal {

// The model's architecture as Megatron-LM flags (megatron/training/arguments.py and the
// TransformerConfig fields it turns into flags; versions checked in docs/formats.md).
std::string MegatronModelArgs(const ModelSpec& model, std::vector<std::string>* notes) {
  const GptConfig& g = model.gpt;
  std::string mg = fmt::format("--num-layers {}\n--hidden-size {}\n--num-attention-heads {}\n--seq-length {}\n--max-position-embeddings {}\n",
                               g.layers, g.hidden, g.heads, g.seq, g.seq);
  // MLA has no query groups (kv_heads is ignored with it).
  if (g.kv_heads > 0 && g.kv_heads < g.heads && MlaLayer(model) == nullptr) mg += fmt::format("--group-query-attention\n--num-query-groups {}\n", g.kv_heads);
  // A head width other than hidden / heads (Qwen3: 128 at h 2048, 32 heads): Megatron's kv_channels.
  if (g.head_dim > 0 && g.head_dim * g.heads != g.hidden && MlaLayer(model) == nullptr) mg += fmt::format("--kv-channels {}\n", g.head_dim);
  // Megatron derives its own default for SwiGLU (8h/3 rounded to 64), so the width is always written then.
  if (g.ffn > 0 && (g.ffn != 4 * g.hidden || g.ffn_act == "swiglu")) mg += fmt::format("--ffn-hidden-size {}\n", g.ffn);
  if (g.ffn_act == "swiglu") mg += "--swiglu\n";
  if (g.ffn_act == "relu2") mg += "--squared-relu\n";
  if (g.norm == "rmsnorm") mg += "--normalization RMSNorm\n";
  // With rope Megatron adds no position table (--no-position-embedding is deprecated for it).
  if (g.position == "rope") mg += fmt::format("--position-embedding-type rope\n--rotary-base {}\n", g.rope_theta);
  if (!g.bias) mg += "--disable-bias-linear\n";
  if (!g.tie_embeddings) mg += "--untie-embeddings-and-output-weights\n";
  mg += fmt::format("--attention-backend {}\n", g.attention == "unfused" ? "unfused" : "flash");
  if (g.attention != "unfused" && model.dtype == DType::kFp32) {
    notes->push_back("megatron.args: flash attention runs in fp16/bf16 only; Megatron-LM refuses --attention-backend flash for an fp32 model");
  }
  return mg;
}

// The first layer of the model carrying multi-head latent attention (kv_lora_rank > 0); nullptr: none.
const Layer* MlaLayer(const ModelSpec& model) {
  for (const auto& l : model.layers) {
    if (l.attrs.Int("kv_lora_rank", 0) > 0) return &l;
  }
  return nullptr;
}

// Megatron's --moe-layer-freq list form for the blocks' pattern (0 dense, 1 MoE), run-length
// encoded as its help text writes it: ([0]*3+[1]*58); an all-MoE model is 1 (every layer).
std::string MoeLayerFreq(const std::vector<int>& pattern) {
  if (std::all_of(pattern.begin(), pattern.end(), [](int v) { return v == 1; })) return "1";
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    size_t j = i;
    while (j < pattern.size() && pattern[j] == pattern[i]) ++j;
    out += fmt::format("{}[{}]*{}", out.empty() ? "" : "+", pattern[i], j - i);
    i = j;
  }
  return "(" + out + ")";
}

// The router's flags of an moe_block (attributes per the MoE contract): score function, load
// balancing (aux_loss: GShard's, seq_aux_loss: DeepSeek's per-sequence loss with a sigmoid router,
// none), DeepSeek's node-limited groups, the capacity factor.
std::string MegatronRouterArgs(const LayerAttrs& a, std::vector<std::string>* notes) {
  const std::string router = a.String("router", "softmax");
  std::string mg = fmt::format("--moe-router-score-function {}\n", router);
  const double aux = a.Real("aux_loss", 0);
  if (aux > 0) mg += fmt::format("--moe-router-load-balancing-type {}\n--moe-aux-loss-coeff {}\n", router == "sigmoid" ? "seq_aux_loss" : "aux_loss", aux);
  else mg += "--moe-router-load-balancing-type none\n";
  if (router == "sigmoid") {
    mg += "--moe-router-enable-expert-bias\n";
    notes->push_back("megatron.args: sigmoid router exported with --moe-router-enable-expert-bias (DeepSeek-V3's auxiliary-loss-free balancing, "
                     "the sequence-wise aux loss only complementing it); drop the flag for plain sigmoid routing");
    notes->push_back("megatron.args: the model file carries no routed-expert scaling factor, so Megatron's default (none) runs; DeepSeek-V3 scales "
                     "its routed weights by 2.5 (its routed_scaling_factor): add --moe-router-topk-scaling-factor 2.5 for it");
  }
  if (a.Int("route_groups", 0) > 0) {
    mg += fmt::format("--moe-router-num-groups {}\n--moe-router-group-topk {}\n", a.Int("route_groups", 0), a.Int("route_group_limit", 0));
  }
  const double capacity = a.Real("capacity_factor", 0);
  if (capacity > 0) mg += fmt::format("--moe-expert-capacity-factor {}\n--moe-pad-expert-input-to-capacity\n", capacity);
  return mg;
}

// Megatron-LM's MoE, MLA and MTP flags from the model's layers: moe_block attributes, the MLA
// ranks and head dims, the mtp modules (TransformerConfig's fields as flags, _add_moe_args and
// _add_mla_args in megatron/training/arguments.py); the plan's ep and etp.
std::string MegatronMoeArgs(const ModelSpec& model, const Plan& plan, std::vector<std::string>* notes) {
  std::string mg;
  const Layer* moe = nullptr;
  std::vector<int> pattern;
  int64_t mtp = 0;
  for (const auto& l : model.layers) {
    if (l.type == "transformer_block" || l.type == "moe_block") pattern.push_back(l.type == "moe_block" ? 1 : 0);
    if (l.type == "moe_block" && moe == nullptr) moe = &l;
    if (l.type == "mtp") ++mtp;
  }
  if (moe != nullptr) {
    const LayerAttrs& a = moe->attrs;
    mg += fmt::format("--num-experts {}\n--moe-router-topk {}\n--moe-ffn-hidden-size {}\n", moe->experts, moe->top_k, a.Int("expert_ffn", 0));
    if (a.Int("shared_ffn", 0) > 0) mg += fmt::format("--moe-shared-expert-intermediate-size {}\n", a.Int("shared_ffn", 0));
    mg += fmt::format("--moe-layer-freq {}\n--expert-model-parallel-size {}\n--expert-tensor-parallel-size {}\n", MoeLayerFreq(pattern),
                      std::max<int64_t>(1, plan.ep), std::max<int64_t>(1, plan.etp));
    mg += "--moe-token-dispatcher-type alltoall\n--moe-grouped-gemm\n" + MegatronRouterArgs(a, notes);
    const bool overlapped = std::any_of(plan.notes.begin(), plan.notes.end(), [](const std::string& n) { return n.find("all-to-all overlapped") != std::string::npos; });
    if (overlapped && plan.ep > 1) mg += "--overlap-moe-expert-parallel-comm\n--delay-wgrad-compute\n";  // costed with --moe-overlap on
  }
  if (const Layer* mla = MlaLayer(model)) {
    const LayerAttrs& a = mla->attrs;
    mg += "--multi-latent-attention\n";
    if (a.Int("q_lora_rank", 0) > 0) mg += fmt::format("--q-lora-rank {}\n", a.Int("q_lora_rank", 0));
    mg += fmt::format("--kv-lora-rank {}\n--qk-head-dim {}\n--qk-pos-emb-head-dim {}\n--v-head-dim {}\n", a.Int("kv_lora_rank", 0),
                      a.Int("qk_nope_head_dim", 0), a.Int("qk_rope_head_dim", 0), a.Int("v_head_dim", 0));
    // The RMSNorms on the compressed query and KV latents (DeepSeek-V2/V3, counted in the layer's
    // parameters): Megatron-Core's MLA builds them into its q / kv up-projections under --qk-layernorm.
    mg += "--qk-layernorm\n";
  }
  if (mtp > 0) mg += fmt::format("--mtp-num-layers {}\n", mtp);
  return mg;
}

// The Megatron-LM pipeline-layout symbol of a layer type: E the embedding, t a transformer block
// (dense or MoE), m an MTP module, L the loss; 0 for the layers Megatron places beside them (final
// norm, output layer).
char LayoutSymbol(const std::string& type) {
  if (type == "embedding") return 'E';
  if (type == "transformer_block" || type == "moe_block") return 't';
  if (type == "mtp") return 'm';
  if (type == "loss") return 'L';
  return 0;
}

// Each stage's layout symbols, in the stages' (model) order.
std::vector<std::string> LayoutChunks(const ModelSpec& model, const std::vector<LaunchStage>& stages) {
  std::vector<std::string> chunks;
  for (const auto& s : stages) {
    std::string c;
    for (int64_t i = s.first_layer; i <= s.last_layer && i < static_cast<int64_t>(model.layers.size()); ++i) {
      if (const char x = LayoutSymbol(model.layers[static_cast<size_t>(i)].type)) c += x;
    }
    chunks.push_back(c);
  }
  return chunks;
}

// Whether Megatron-LM's pipeline layout is needed: the export has a pipeline Megatron splits itself
// (not pipedream's per-stage replicas) of a GPT model.
bool SplitExported(const ModelSpec& model, const LaunchPlan& L) { return model.is_gpt && L.pp > 1 && L.schedule != Schedule::kPipeDream; }

// Why Megatron-LM refuses the plan's MTP placement ("" when it takes it): its layout puts every MTP
// module in one virtual stage, the last one of its pipeline rank (pipeline_parallel_layer_layout.py,
// validate_layer_layout).
std::string MegatronMtpPlacement(const ModelSpec& model, const LaunchPlan& L) {
  if (!SplitExported(model, L)) return "";
  const std::vector<std::string> chunks = LayoutChunks(model, L.stages);
  int64_t holders = 0, last = -1;
  for (size_t q = 0; q < chunks.size(); ++q) {
    if (chunks[q].find('m') == std::string::npos) continue;
    ++holders;
    last = static_cast<int64_t>(q);
  }
  if (holders == 0) return "";
  const int64_t v = static_cast<int64_t>(chunks.size()) / L.pp;
  if (holders > 1) return fmt::format("the plan splits its MTP modules over {} pipeline chunks: Megatron-LM's pipeline layout keeps them in one", holders);
  if (last / L.pp != v - 1) {
    return fmt::format("the plan puts its MTP module in chunk {} (virtual stage {} of pipeline rank {}): Megatron-LM's pipeline layout places MTP "
                       "only in a rank's last virtual stage ({})", last, last / L.pp, last % L.pp, v - 1);
  }
  return "";
}

// The pipeline split as Megatron-LM flags. Megatron's own even split (every chunk the same number of
// blocks, the embedding and the loss not counted, no MTP module) is --num-layers-per-virtual-pipeline-stage
// when interleaved, else nothing; any other split (uneven, the embedding and loss counted as a unit
// each, an MTP module) is the plan's own layout, --pipeline-model-parallel-layout.
std::string MegatronSplitArgs(const Plan& plan, const ModelSpec& model, const LaunchPlan& L) {
  if (!SplitExported(model, L)) return "";
  const std::vector<std::string> chunks = LayoutChunks(model, L.stages);
  auto blocks = [](const std::string& c) { return std::count(c.begin(), c.end(), 't'); };
  bool even = !plan.account_embedding_loss;
  for (const auto& c : chunks) even = even && c.find('m') == std::string::npos && blocks(c) == blocks(chunks.front());
  if (!even) return fmt::format("--pipeline-model-parallel-layout {}\n", MegatronPipelineLayout(model, L.stages));
  if (L.interleave > 1) return fmt::format("--num-layers-per-virtual-pipeline-stage {}\n", blocks(chunks.front()));
  return "";
}

// Whether the plan was costed with a collective overlapped (its notes say "X not overlapped"
// when the solve turned the overlap off; the cost model's default is on).
bool Overlapped(const Plan& plan, const std::string& what) {
  return std::none_of(plan.notes.begin(), plan.notes.end(), [&](const std::string& n) { return n.find(what + " not overlapped") != std::string::npos; });
}

// Why Megatron-LM cannot run the plan ("" when it can): ZeRO-2/3 (Megatron-FSDP) with
// pipelining, or query groups that are neither a multiple nor a divisor of tp
// (TransformerConfig's check).
std::string MegatronRefusal(const Plan& plan, const ModelSpec& model, const LaunchPlan& L) {
  const bool zero23 = plan.zero_stage == ZeroStage::kGradients || plan.zero_stage == ZeroStage::kParameters;
  if (zero23 && L.pp > 1) {
    return fmt::format("ZeRO-{} with pipelining (pp {}): Megatron-LM's distributed optimizer is ZeRO-1 and Megatron-FSDP / torch FSDP2 do not "
                       "run with pipeline parallelism; solve with --zero 0,1 for a plan Megatron-LM runs",
                       plan.zero_stage == ZeroStage::kGradients ? 2 : 3, L.pp);
  }
  if (const std::string mtp = MegatronMtpPlacement(model, L); !mtp.empty()) return mtp;
  const int64_t groups = model.is_gpt && MlaLayer(model) == nullptr ? (model.gpt.kv_heads > 0 ? model.gpt.kv_heads : model.gpt.heads) : 0;
  if (groups > 0 && L.tp > 1 && groups % L.tp != 0 && L.tp % groups != 0) {
    return fmt::format("{} KV heads with tp {}: Megatron-LM needs the query groups to be a multiple or a divisor of tp", groups, L.tp);
  }
  return "";
}

// Optimizer and gradient sharding: ZeRO-1 is the distributed optimizer; ZeRO-2/3 are
// Megatron-FSDP's sharding strategies (pipelining refused above).
void MegatronShardingArgs(const Plan& plan, const LaunchPlan& L, std::string* mg) {
  const bool zero23 = plan.zero_stage == ZeroStage::kGradients || plan.zero_stage == ZeroStage::kParameters;
  if (plan.zero_stage == ZeroStage::kOptimizer) *mg += "--use-distributed-optimizer\n";
  if (zero23) {
    *mg += fmt::format("--use-megatron-fsdp\n--data-parallel-sharding-strategy {}\n--ckpt-format fsdp_dtensor\n",
                       plan.zero_stage == ZeroStage::kGradients ? "optim_grads" : "optim_grads_params");
  }
  if (L.dp > 1 && Overlapped(plan, "gradient reduce")) {
    *mg += "--overlap-grad-reduce\n";
    if (plan.zero_stage != ZeroStage::kNone && Overlapped(plan, "parameter gather")) *mg += "--overlap-param-gather\n";
  }
}

// megatron.args: Megatron-LM flags, and a note for each setting it cannot take. A plan
// Megatron-LM cannot run gets megatron.args.refused (the reason) instead.
void AddMegatronArgs(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files, std::vector<std::string>* notes) {
  std::string mg;
  mg += fmt::format("--tensor-model-parallel-size {}\n--pipeline-model-parallel-size {}\n", L.tp, L.pp);
  if (L.cp > 1) mg += fmt::format("--context-parallel-size {}\n--cp-comm-type p2p\n", L.cp);  // ring attention, as planner run executes it
  if (L.sequence_parallel) mg += "--sequence-parallel\n";
  if (model.is_gpt) mg += MegatronModelArgs(model, notes);
  mg += MegatronMoeArgs(model, plan, notes);
  mg += fmt::format("--micro-batch-size {}\n--global-batch-size {}\n", L.microbatch_size, L.global_batch);
  mg += MegatronSplitArgs(plan, model, L);
  if (plan.recompute == Recompute::kFull && plan.recompute_num_layers > 0) {
    // Block recompute: the first N layers of every chunk (megatron/core/recompute.py, method 'block').
    mg += fmt::format("--recompute-granularity full\n--recompute-method block\n--recompute-num-layers {}\n", plan.recompute_num_layers);
  } else if (plan.recompute == Recompute::kFull) {
    mg += "--recompute-granularity full\n--recompute-method uniform\n--recompute-num-layers 1\n";
  }
  if (plan.recompute == Recompute::kSelective) {
    mg += "--recompute-granularity selective\n";
    if (plan.recompute_modules != kDefaultRecomputeModules) mg += fmt::format("--recompute-modules {}\n", fmt::join(RecomputeModuleList(plan.recompute_modules), " "));
  }
  MegatronShardingArgs(plan, L, &mg);
  const std::string refused = MegatronRefusal(plan, model, L);
  if (!refused.empty()) {
    notes->push_back("megatron.args: not written: " + refused);
    files->emplace_back("megatron.args.refused", refused + "\n");
    return;
  }
  if (model.dtype == DType::kFp16) mg += "--fp16\n";
  if (model.dtype == DType::kBf16) mg += "--bf16\n";
  if (model.dtype == DType::kFp8) mg += "--bf16\n--fp8-format hybrid\n";  // Transformer Engine FP8 GEMMs, bf16 elsewhere
  // moe_act / layernorm recompute under FP8: Megatron-Core refuses its default delayed-scaling recipe there
  // (transformer_config.py); blockwise is DeepSeek-V3's fine-grained (1 x 128, 128 x 128) quantization.
  const uint32_t fp8_refused = RecomputeBit(RecomputeModule::kMoeAct) | RecomputeBit(RecomputeModule::kLayernorm);
  if (model.dtype == DType::kFp8 && plan.recompute == Recompute::kSelective && (plan.recompute_modules & fp8_refused) != 0) mg += "--fp8-recipe blockwise\n";
  if (L.schedule == Schedule::kZbH1) notes->push_back("megatron.args: ZB-H1 has no Megatron-LM flag; the exported settings run 1F1B");
  if (L.schedule == Schedule::kDualPipeV) {
    notes->push_back("megatron.args: Megatron-LM has no DualPipeV schedule; the exported settings run interleaved 1F1B with 2 chunks per rank (the same chunks, "
                     "Megatron's looped placement: chunk q on pipeline rank q mod pp, not the V; a pipeline layout lists the chunks in that model order)");
  }
  if (L.schedule == Schedule::kGpipe) notes->push_back("megatron.args: Megatron-LM has no GPipe schedule; the exported settings run 1F1B (same bubble, more memory in GPipe)");
  if (L.schedule == Schedule::kPipeDream) notes->push_back("megatron.args: per-stage replication and PipeDream's asynchronous schedule have no Megatron-LM equivalent; exported as uniform pipeline settings only");
  files->emplace_back("megatron.args", mg);
}

}  // namespace codegen_internal

std::string MegatronPipelineLayout(const ModelSpec& model, const std::vector<LaunchStage>& stages) {
  const std::vector<std::string> chunks = codegen_internal::LayoutChunks(model, stages);
  std::string out;
  for (size_t q = 0; q < chunks.size(); ++q) out += (q ? "|" : "") + chunks[q];
  return out;
}

}  // namespace planner
