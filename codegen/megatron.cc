// megatron.args: the plan as Megatron-LM flags, or megatron.args.refused with the reason.
#include "codegen/exports.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dp_solver/cost_model.h"
#include "dp_solver/programs.h"
#include "spec/engine_spec.h"
#include "spec/kernel_table.h"
#include "spec/layer_catalog.h"
#include "spec/pipeline_layout.h"

namespace planner {
namespace codegen_internal {

// The attention kernel Megatron-Core runs the plan with as the planner costs it: the one the plan recorded
// (inputs.attention_kernel) where its engine is Megatron-Core or a file; Megatron-Core's where that engine is another
// built-in (torchtitan, DeepSpeed: this target runs Megatron-Core's kernels, as the engine note says). A plan written
// before the kernel was recorded (2026-12-01) derives it: the plan's engine's (its file, else the built-in of that
// name; Megatron-Core's where the file cannot be read from here, with a note), then dp_solver's AttentionKernel on
// the plan's kernel table (the engine's fallback where the table lacks its kernel).
std::string CostedAttentionKernel(const Plan& plan, std::vector<std::string>* notes) {
  const std::vector<std::string> builtin = BuiltinEngines();
  const bool named_builtin =
      std::find(builtin.begin(), builtin.end(), plan.engine) != builtin.end() && plan.engine != "megatron-core";
  if (!plan.attention_kernel.empty() && !(plan.engine_file.empty() && named_builtin)) return plan.attention_kernel;
  EngineSpec e;
  const bool file = !plan.engine_file.empty() && LoadEngineSpec(plan.engine_file, &e).ok();
  if (!plan.engine_file.empty() && !file)
    notes->push_back(fmt::format(
        "megatron.args: the plan's engine file {} is not readable from here: --attention-backend chosen as "
        "Megatron-Core's engine costs attention (codegen from the directory the plan was solved in to follow the "
        "file)",
        plan.engine_file));
  const bool other_builtin = !file && named_builtin;
  if (!file && (other_builtin || plan.engine.empty() || !LoadEngineSpec(plan.engine, &e).ok()))
    if (!LoadEngineSpec("megatron-core", &e).ok()) return "cudnn";
  KernelTable kt;
  if (plan.kernels.empty() || !LoadKernelTable(plan.kernels, &kt).ok()) return e.attention;
  const std::string k = AttentionKernel(kt, e);
  return k.empty() ? e.attention : k;
}

// --attention-backend for the costed kernel: cuDNN fused attention as `auto` (Megatron-LM's default: Transformer
// Engine prefers FusedAttention on Hopper and later where both it and flash-attn run the layer, and falls back to
// flash-attn where cuDNN does not: the engine's fallback order; TE 2.9 attention/dot_product_attention/utils.py
// "give FusedAttention preference on Hopper+"), flash-attn 2 / 3 as `flash` (NVTE_FLASH_ATTN alone: the NeMo 24.x
// backend; Megatron-Core's engine on the A100 table, which has FlashAttention-2 only). Where TE turns the costed
// kernel off for the model (the same utils.py filters), `auto` with a note, as `flash` could leave no backend:
// flash-attn 2 for MLA with unequal query / key and value head dims (DeepSeek: 192 / 128), flash-attn 3 for head
// dims outside its _is_fa3_supported and for dropout, cuDNN for a sliding window with dropout. An fp32 or unfused
// model is written `unfused` by MegatronModelArgs: nothing here applies.
// Whether Megatron-LM runs the model's attention unfused (MegatronModelArgs writes `--attention-backend unfused`): an
// unfused model, or an fp32 one (neither flash-attn nor cuDNN's fused attention has an fp32 kernel).
bool MegatronAttentionUnfused(const ModelSpec& model) {
  return model.gpt.attention == "unfused" || model.dtype == DType::kFp32;
}

std::string MegatronAttentionBackend(const Plan& plan, const ModelSpec& model, std::vector<std::string>* notes) {
  const std::string k = CostedAttentionKernel(plan, notes);
  const GptConfig& g = model.gpt;
  if (MegatronAttentionUnfused(model)) return "auto";
  int64_t qk = 0, v = 0;  // MLA's head dims where they differ
  if (const Layer* mla = MlaLayer(model)) {
    const LayerAttrs& a = mla->attrs;
    qk = a.Int("qk_nope_head_dim", 0) + a.Int("qk_rope_head_dim", 0), v = a.Int("v_head_dim", 0);
    if (qk == v) qk = v = 0;
  }
  std::string off;  // why TE turns the costed kernel off ("": it runs)
  if (k == "fa2" && qk > 0)
    off = fmt::format("MLA's query / key head dim {} beside value head dim {} (flash-attn 2 does not support MLA)", qk,
                      v);
  if (k == "fa3" && qk > 0 && !((128 < qk && qk <= 192 && 96 < v && v <= 128) || (qk <= 64 && v <= 512)))
    off = fmt::format("MLA's query / key head dim {} beside value head dim {} (outside flash-attn 3's supported dims)",
                      qk, v);
  if (off.empty() && g.dropout > 0 && k == "fa3") off = fmt::format("dropout {}", g.dropout);
  if (off.empty() && g.dropout > 0 && k == "cudnn" && model.FirstWindowedLayer() != nullptr)
    off = fmt::format("sliding-window attention with dropout {}", g.dropout);
  const std::string name = k == "cudnn" ? "cuDNN fused" : k == "fa2" ? "flash-attn 2" : k == "fa3" ? "flash-attn 3" : k;
  if (!off.empty() && !plan.kernels.empty())  // on the flat efficiency no kernel was costed: nothing to note
    notes->push_back(fmt::format(
        "megatron.args: the plan costs {} attention, which Transformer Engine turns off for {}: --attention-backend "
        "auto, whichever kernel it finds for those layers (cuDNN fused attention or flash-attn 2 where they run the "
        "layer, unfused otherwise): not the costed one{}",
        name, off, g.dropout > 0 && off.rfind("MLA", 0) != 0 ? "; a model file with dropout 0 keeps it" : ""));
  return (k == "fa2" || k == "fa3") && off.empty() ? "flash" : "auto";
}

// The model's architecture as Megatron-LM flags (megatron/training/arguments.py and the
// TransformerConfig fields it turns into flags; versions checked in docs/formats.md).
std::string MegatronModelArgs(const ModelSpec& model, const std::string& attention_backend,
                              std::vector<std::string>* notes) {
  const GptConfig& g = model.gpt;
  std::string mg = fmt::format(
      "--num-layers {}\n--hidden-size {}\n--num-attention-heads {}\n--seq-length {}\n--max-position-embeddings {}\n",
      g.layers, g.hidden, g.heads, g.seq, g.seq);
  // MLA has no query groups (kv_heads is ignored with it).
  if (g.kv_heads > 0 && g.kv_heads < g.heads && MlaLayer(model) == nullptr)
    mg += fmt::format("--group-query-attention\n--num-query-groups {}\n", g.kv_heads);
  // A head width other than hidden / heads (Qwen3: 128 at h 2048, 32 heads): Megatron's kv_channels.
  if (g.head_dim > 0 && g.head_dim * g.heads != g.hidden && MlaLayer(model) == nullptr)
    mg += fmt::format("--kv-channels {}\n", g.head_dim);
  // Megatron derives its own default for SwiGLU (8h/3 rounded to 64), so the width is always written then.
  if (g.ffn > 0 && (g.ffn != 4 * g.hidden || g.ffn_act == "swiglu")) mg += fmt::format("--ffn-hidden-size {}\n", g.ffn);
  if (g.ffn_act == "swiglu") mg += "--swiglu\n";
  if (g.ffn_act == "relu2") mg += "--squared-relu\n";
  if (g.norm == "rmsnorm") mg += "--normalization RMSNorm\n";
  // With rope Megatron adds no position table (--no-position-embedding is deprecated for it).
  if (g.position == "rope") mg += fmt::format("--position-embedding-type rope\n--rotary-base {}\n", g.rope_theta);
  if (!g.bias) mg += "--disable-bias-linear\n";
  if (!g.tie_embeddings) mg += "--untie-embeddings-and-output-weights\n";
  // Sliding-window attention: Megatron's window (left, right) = (W, 0), every N-th layer (1-based) full
  // (TransformerConfig window_size / window_attn_skip_freq; megatron/core/transformer/utils.py
  // is_layer_window_attention).
  if (model.FirstWindowedLayer() != nullptr) {  // a window covering the sequence is causal attention: no flag
    mg += fmt::format("--window-size {},0\n", g.sliding_window);
    if (g.full_attention_every > 0) mg += fmt::format("--window-attn-skip-freq {}\n", g.full_attention_every);
  }
  // The model file's dropout, written always (Megatron-LM's default is GPT's 0.1; Llama-class files say 0): the cost
  // model keeps its masks and traffic only where it is above 0, and Transformer Engine picks its kernel by it.
  std::string p = fmt::format("{}", g.dropout);
  if (p.find_first_of(".e") == std::string::npos) p += ".0";
  mg += fmt::format("--attention-dropout {}\n--hidden-dropout {}\n", p, p);
  // Neither flash-attn nor cuDNN's fused attention has an fp32 kernel: an fp32 model runs TE's unfused attention
  // (`auto` would pick it too; written so, with a note).
  const bool fp32_flash = g.attention != "unfused" && model.dtype == DType::kFp32;
  mg += fmt::format("--attention-backend {}\n", MegatronAttentionUnfused(model) ? "unfused" : attention_backend);
  if (fp32_flash) {
    notes->push_back(
        "megatron.args: flash attention has no fp32 kernel (Transformer Engine's flash-attn and cuDNN fused attention "
        "take fp16/bf16 only): this fp32 model is exported with --attention-backend unfused, slower than the plan's "
        "flash attention");
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
  if (aux > 0)
    mg += fmt::format("--moe-router-load-balancing-type {}\n--moe-aux-loss-coeff {}\n",
                      router == "sigmoid" ? "seq_aux_loss" : "aux_loss", aux);
  else mg += "--moe-router-load-balancing-type none\n";
  if (router == "sigmoid") {
    mg += "--moe-router-enable-expert-bias\n";
    notes->push_back(
        "megatron.args: sigmoid router exported with --moe-router-enable-expert-bias (DeepSeek-V3's "
        "auxiliary-loss-free balancing, "
        "the sequence-wise aux loss only complementing it); drop the flag for plain sigmoid routing");
    notes->push_back(
        "megatron.args: the model file carries no routed-expert scaling factor, so Megatron's default (none) runs; "
        "DeepSeek-V3 scales "
        "its routed weights by 2.5 (its routed_scaling_factor): add --moe-router-topk-scaling-factor 2.5 for it");
  }
  if (a.Int("route_groups", 0) > 0) {
    mg += fmt::format("--moe-router-num-groups {}\n--moe-router-group-topk {}\n", a.Int("route_groups", 0),
                      a.Int("route_group_limit", 0));
  }
  const double capacity = a.Real("capacity_factor", 0);
  if (capacity > 0)
    mg += fmt::format("--moe-expert-capacity-factor {}\n--moe-pad-expert-input-to-capacity\n", capacity);
  return mg;
}

// Megatron-LM's MoE, MLA and MTP flags from the model's layers: moe_block attributes, the MLA
// ranks and head dims, the mtp modules (TransformerConfig's fields as flags, _add_moe_args and
// _add_mla_args in megatron/training/arguments.py); the plan's ep and etp.
std::string MegatronMoeArgs(const ModelSpec& model, const Plan& plan, const LaunchPlan& L,
                            std::vector<std::string>* notes) {
  std::string mg;
  const Layer* moe = nullptr;
  std::vector<int> pattern;
  int64_t mtp = 0;
  for (const auto& l : model.layers) {
    if (IsBlock(l.kind)) pattern.push_back(l.kind == LayerKind::kMoeBlock ? 1 : 0);
    if (l.kind == LayerKind::kMoeBlock && moe == nullptr) moe = &l;
    if (l.kind == LayerKind::kMtp) ++mtp;
  }
  if (moe != nullptr) {
    const LayerAttrs& a = moe->attrs;
    mg += fmt::format("--num-experts {}\n--moe-router-topk {}\n--moe-ffn-hidden-size {}\n", moe->experts, moe->top_k,
                      a.Int("expert_ffn", 0));
    if (a.Int("shared_ffn", 0) > 0)
      mg += fmt::format("--moe-shared-expert-intermediate-size {}\n", a.Int("shared_ffn", 0));
    mg += fmt::format("--moe-layer-freq {}\n--expert-model-parallel-size {}\n--expert-tensor-parallel-size {}\n",
                      MoeLayerFreq(pattern), std::max<int64_t>(1, plan.ep), std::max<int64_t>(1, plan.etp));
    // The dispatcher the plan was costed with: flex is DeepEP (deduplicated per node; Megatron-Core 0.15+'s
    // backend flag, --moe-enable-deepep before it).
    mg += plan.moe_dispatcher == MoeDispatcher::kFlex
              ? "--moe-token-dispatcher-type flex\n--moe-flex-dispatcher-backend deepep\n"
              : "--moe-token-dispatcher-type alltoall\n";
    mg += "--moe-grouped-gemm\n" + MegatronRouterArgs(a, notes);
    // Costed with --moe-overlap on (inputs.moe_overlap, or an older plan's note: ParsePlan); written where Megatron-Core
    // runs it.
    const bool overlapped = plan.moe_overlap;
    const bool runs = MegatronOverlapsMoe(L.pp, L.interleave, plan.recompute);
    if (overlapped && plan.ep > 1 && runs) mg += "--overlap-moe-expert-parallel-comm\n--delay-wgrad-compute\n";
    if (overlapped && plan.ep > 1 && !runs)
      notes->push_back(
          "megatron.args: the plan was costed with the MoE all-to-all overlapped (--moe-overlap on), which "
          "Megatron-Core "
          "runs only with pp 1 or the interleaved schedule and without full recompute: written without "
          "--overlap-moe-expert-parallel-comm (slower than predicted); solve with --moe-overlap off for its own "
          "figure");
  }
  if (const Layer* mla = MlaLayer(model)) {
    const LayerAttrs& a = mla->attrs;
    mg += "--multi-latent-attention\n";
    if (a.Int("q_lora_rank", 0) > 0) mg += fmt::format("--q-lora-rank {}\n", a.Int("q_lora_rank", 0));
    mg += fmt::format("--kv-lora-rank {}\n--qk-head-dim {}\n--qk-pos-emb-head-dim {}\n--v-head-dim {}\n",
                      a.Int("kv_lora_rank", 0), a.Int("qk_nope_head_dim", 0), a.Int("qk_rope_head_dim", 0),
                      a.Int("v_head_dim", 0));
    // The RMSNorms on the compressed query and KV latents (DeepSeek-V2/V3, counted in the layer's
    // parameters): Megatron-Core's MLA builds them into its q / kv up-projections under --qk-layernorm.
    mg += "--qk-layernorm\n";
  }
  if (mtp > 0) mg += fmt::format("--mtp-num-layers {}\n", mtp);
  return mg;
}

// Each stage's layout symbols, in the stages' (model) order.
std::vector<std::string> LayoutChunks(const ModelSpec& model, const std::vector<LaunchStage>& stages) {
  std::vector<std::string> chunks;
  for (const auto& s : stages) {
    std::string c;
    for (int64_t i = s.first_layer; i <= s.last_layer && i < static_cast<int64_t>(model.layers.size()); ++i) {
      // The layout's symbols (spec/pipeline_layout.h); layers Megatron places beside them (0) and kinds a GPT
      // has none of ('?') add nothing.
      const char x = PipelineLayoutSymbol(model.layers[static_cast<size_t>(i)].kind);
      if (x != 0 && x != '?') c += x;
    }
    chunks.push_back(c);
  }
  return chunks;
}

// Whether Megatron-LM's pipeline layout is needed: the export has a pipeline Megatron splits itself
// (not pipedream's per-stage replicas) of a GPT model.
bool SplitExported(const ModelSpec& model, const LaunchPlan& L) {
  return model.is_gpt && L.pp > 1 && L.schedule != Schedule::kPipeDream;
}

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
  if (holders > 1)
    return fmt::format(
        "the plan splits its MTP modules over {} pipeline chunks: Megatron-LM's pipeline layout keeps them in one",
        holders);
  if (last / L.pp != v - 1) {
    return fmt::format(
        "the plan puts its MTP module in chunk {} (virtual stage {} of pipeline rank {}): Megatron-LM's pipeline "
        "layout places MTP "
        "only in a rank's last virtual stage ({})",
        last, last / L.pp, last % L.pp, v - 1);
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
  // --num-layers-per-virtual-pipeline-stage b: validate_args takes vp = (layers / pp) / b, so it is
  // written only when that is the plan's interleave exactly (else the layout says it).
  const int64_t b = blocks(chunks.front()), layers = model.gpt.layers;
  const bool exact_vp = b > 0 && layers % L.pp == 0 && (layers / L.pp) % b == 0 && (layers / L.pp) / b == L.interleave;
  if (!even || (L.interleave > 1 && !exact_vp))
    return fmt::format("--pipeline-model-parallel-layout {}\n", MegatronPipelineLayout(model, L.stages));
  if (L.interleave > 1) return fmt::format("--num-layers-per-virtual-pipeline-stage {}\n", b);
  return "";
}

// Megatron-LM's interleaved schedule runs groups of G microbatches per virtual stage, G = pp by
// default, and needs the last group (m mod G) empty or at least pp (schedules.py): for m not a multiple
// of pp the smallest G in [pp, m] that Megatron takes, with a note (none exists for m < pp: refused by
// the rules check).
std::string MegatronGroupArgs(const LaunchPlan& L, std::vector<std::string>* notes) {
  const int64_t m = L.global_batch / std::max<int64_t>(1, L.microbatch_size * L.dp);
  if (L.pp <= 1 || L.interleave <= 1 || m % L.pp == 0 || m < L.pp) return "";
  int64_t g = L.pp;
  while (m % g != 0 && m % g < L.pp) ++g;
  notes->push_back(
      fmt::format("megatron.args: {} microbatches are not a multiple of pp {}, which Megatron-LM's interleaved "
                  "schedule needs with its default "
                  "groups of pp microbatches per virtual stage; exported with groups of {} "
                  "(--microbatch-group-size-per-virtual-pipeline-stage): Megatron-LM runs {} microbatches per virtual "
                  "stage at a time, not pp",
                  m, L.pp, g, g));
  return fmt::format("--microbatch-group-size-per-virtual-pipeline-stage {}\n", g);
}

// Whether the plan was costed with a collective overlapped (its notes say "X not overlapped"
// when the solve turned the overlap off; the cost model's default is on).
bool Overlapped(const Plan& plan, const std::string& what) {
  return std::none_of(plan.notes.begin(), plan.notes.end(),
                      [&](const std::string& n) { return n.find(what + " not overlapped") != std::string::npos; });
}

// Why Megatron-LM cannot express the plan at all ("" when it can): a model other than a GPT
// (pretrain_gpt.py builds decoder-only transformers: VGG / ResNet layer lists have no Megatron
// model), PipeDream's asynchronous schedule (Megatron's schedules flush every iteration), per-stage
// replication (Megatron gives every pipeline stage the same dp = world / (tp x pp x cp) replicas).
std::string MegatronInexpressible(const Plan& plan, const ModelSpec& model, const LaunchPlan& L) {
  std::vector<std::string> why;
  if (!model.is_gpt) {
    why.push_back(
        fmt::format("model {} is not a GPT (gpt: template) model: Megatron-LM's pretrain_gpt.py trains decoder-only "
                    "transformers only",
                    model.name));
  }
  if (L.schedule == Schedule::kPipeDream) {
    why.push_back(
        "PipeDream's asynchronous schedule (weight stashing, no flush) has no Megatron-LM equivalent: its schedules "
        "flush every iteration");
  }
  std::vector<std::string> replicas;
  bool per_stage = false;
  for (const auto& s : plan.stages) {
    replicas.push_back(std::to_string(s.replicas));
    per_stage = per_stage || s.replicas != plan.dp;
  }
  if (per_stage) {
    why.push_back(
        fmt::format("per-stage replication ({} replicas per stage): Megatron-LM gives every pipeline stage the same "
                    "data-parallel width",
                    fmt::join(replicas, "-")));
  }
  return fmt::format("{}", fmt::join(why, "; "));
}

// Why Megatron-LM cannot run the plan ("" when it can): ZeRO-2/3 (Megatron-FSDP) with
// pipelining, torchtitan's op-level selective recompute, or an MTP placement its layout refuses.
std::string MegatronRefusal(const Plan& plan, const ModelSpec& model, const LaunchPlan& L) {
  if (L.cp > 1 && plan.cp_comm_type != CpCommType::kAllGather && model.FirstWindowedLayer() != nullptr) {
    return fmt::format(
        "sliding-window attention with context parallelism over {} (cp {}): Transformer Engine asserts \"Context "
        "parallelism does not support sliding window attention with cp_comm_type=...\" for all but all_gather and "
        "a2a (attention/dot_product_attention/context_parallel.py); solve with --cp-comm-type allgather",
        CpCommTypeName(plan.cp_comm_type), L.cp);
  }
  const bool zero23 = plan.zero_stage == ZeroStage::kGradients || plan.zero_stage == ZeroStage::kParameters;
  if (zero23 && L.pp > 1) {
    return fmt::format(
        "ZeRO-{} with pipelining (pp {}): Megatron-LM's distributed optimizer is ZeRO-1 and Megatron-FSDP does not "
        "run with pipeline parallelism (torchtitan's FSDP2 does: the torchtitan export); solve with --zero 0,1 for a "
        "plan Megatron-LM runs",
        plan.zero_stage == ZeroStage::kGradients ? 2 : 3, L.pp);
  }
  if (plan.recompute == Recompute::kSelective && HasRecomputeModule(plan.recompute_modules, RecomputeModule::kOpSac)) {
    return "selective recompute op_sac is torchtitan's op-level activation checkpointing (every other matmul's "
           "output kept), which Megatron-LM has no flag for; solve with --engine megatron-core for Megatron's "
           "--recompute-modules";
  }
  if (plan.dp_replicate > 1 && plan.zero_stage != ZeroStage::kOptimizer)
    return fmt::format(
        "HSDP ({} replicas) at ZeRO-{}: Megatron-LM shards hierarchically only its distributed optimizer "
        "(--num-distributed-optimizer-instances, ZeRO-1); solve with --engine megatron-core",
        plan.dp_replicate, ZeroStageNumber(plan.zero_stage));
  return MegatronMtpPlacement(model, L);
}

namespace {

// The flags of a megatron.args text: the first word of each line -> the rest ("" for a switch).
std::map<std::string, std::string> ArgsFlags(const std::string& args) {
  std::map<std::string, std::string> f;
  size_t at = 0;
  while (at < args.size()) {
    size_t end = args.find('\n', at);
    if (end == std::string::npos) end = args.size();
    const std::string line = args.substr(at, end - at);
    const size_t sp = line.find(' ');
    if (!line.empty()) f[line.substr(0, sp)] = sp == std::string::npos ? "" : line.substr(sp + 1);
    at = end + 1;
  }
  return f;
}

// Megatron-LM's decoder blocks per virtual stage (model order) from the split flags, as
// validate_args and TransformerConfig derive them: the layout's t per chunk; pp x vp chunks of
// --num-layers-per-virtual-pipeline-stage; else num_layers / pp per stage. "" or the rule broken.
std::string MegatronSplit(const std::map<std::string, std::string>& f, int64_t pp, int64_t layers,
                          std::vector<int64_t>* blocks) {
  auto num = [&](const char* k) { return f.count(k) ? std::stoll(f.at(k)) : int64_t{0}; };
  for (const char* k : {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"}) {
    if (f.count(k) && num(k) <= 0)
      return fmt::format("{} {}: Megatron-LM needs a positive layer count there", k, f.at(k));
  }
  if (f.count("--pipeline-model-parallel-layout")) {
    const std::string& lay = f.at("--pipeline-model-parallel-layout");
    int64_t t = 0;
    for (char c : lay) {
      if (c == '|') blocks->push_back(t), t = 0;
      else if (c == 't') ++t;
    }
    blocks->push_back(t);
    const auto n = static_cast<int64_t>(blocks->size());
    if (n % pp != 0)
      return fmt::format("the pipeline layout has {} chunks, not a multiple of pp {} (validate_args)", n, pp);
    const auto count = [&](char c) { return std::count(lay.begin(), lay.end(), c); };
    if (lay.empty() || lay.front() != 'E' || lay.back() != 'L' || count('E') != 1 || count('L') != 1) {
      return "the pipeline layout must start with the embedding (E) and end with the loss (L), each once "
             "(validate_layer_layout)";
    }
    if (count('t') != layers)
      return fmt::format("the pipeline layout places {} decoder blocks, the model has {} (validate_layer_layout)",
                         count('t'), layers);
    if (count('m') != num("--mtp-num-layers"))
      return fmt::format("the pipeline layout places {} MTP modules, --mtp-num-layers is {}", count('m'),
                         num("--mtp-num-layers"));
    return "";
  }
  if (layers % pp != 0)
    return fmt::format("{} layers are not divisible by pp {} without a pipeline layout (validate_args)", layers, pp);
  const int64_t per_rank = layers / pp, v = num("--num-layers-per-virtual-pipeline-stage");
  if (v > 0 && per_rank % v != 0) {
    return fmt::format(
        "{} layers per pipeline rank are not divisible by --num-layers-per-virtual-pipeline-stage {} (validate_args)",
        per_rank, v);
  }
  blocks->assign(static_cast<size_t>(v > 0 ? pp * (per_rank / v) : pp), v > 0 ? v : per_rank);
  return "";
}

// Context parallelism's rules: the sequence splits into 2 cp chunks (validate_args), the exchange is one Transformer
// Engine dispatches on (context_parallel.py raises "Unsupported communication type" at the first attention forward on
// any other name; Megatron-LM passes the string through).
std::string ContextParallelRule(const std::map<std::string, std::string>& f, int64_t cp) {
  if (f.count("--cp-comm-type")) {
    const std::string& t = f.at("--cp-comm-type");
    if (t != "p2p" && t != "all_gather" && t != "a2a" && t != "a2a+p2p")
      return fmt::format(
          "--cp-comm-type {}: Transformer Engine runs p2p, all_gather, a2a or a2a+p2p and raises \"Unsupported "
          "communication type\" on anything else at the first attention forward (context_parallel.py)",
          t);
  }
  const int64_t seq = f.count("--seq-length") ? std::stoll(f.at("--seq-length")) : 0;
  if (cp > 1 && seq % (2 * cp) != 0)
    return fmt::format("sequence length {} is not a multiple of 2 x cp = {} (validate_args)", seq, 2 * cp);
  return "";
}

}  // namespace

// The first of Megatron-LM's rules (validate_args, TransformerConfig, the microbatch calculator)
// the flags in `args` break for the plan in `c`, or "". See docs/exports.md, "Megatron-LM".
std::string MegatronRuleViolation(const std::string& args, const MegatronCheck& c) {
  const std::map<std::string, std::string> f = ArgsFlags(args);
  auto num = [&](const char* k, int64_t dflt) { return f.count(k) ? std::stoll(f.at(k)) : dflt; };
  const int64_t tp = num("--tensor-model-parallel-size", 1), pp = num("--pipeline-model-parallel-size", 1),
                cp = num("--context-parallel-size", 1);
  const int64_t heads = num("--num-attention-heads", 0), layers = num("--num-layers", 0),
                ep = num("--expert-model-parallel-size", 1);
  if (c.world % (tp * pp * cp) != 0)
    return fmt::format("world size {} is not divisible by tp x pp x cp = {} (validate_args)", c.world, tp * pp * cp);
  const int64_t dp = c.world / (tp * pp * cp);
  if (dp != c.dp)
    return fmt::format("Megatron-LM derives dp = world / (tp x pp x cp) = {}, the plan has dp {}", dp, c.dp);
  if (heads % tp != 0)
    return fmt::format("{} attention heads are not divisible by tp {} (TransformerConfig)", heads, tp);
  const int64_t groups = num("--num-query-groups", heads);
  if (!f.count("--multi-latent-attention") && tp > 1 && groups % tp != 0 && tp % groups != 0) {
    return fmt::format(
        "{} query groups with tp {}: Megatron-LM needs the query groups to be a multiple or a divisor of tp "
        "(TransformerConfig)",
        groups, tp);
  }
  if (!f.count("--kv-channels") && heads > 0 && num("--hidden-size", 0) % heads != 0) {
    return fmt::format("hidden size {} is not divisible by {} heads and no --kv-channels (validate_args)",
                       num("--hidden-size", 0), heads);
  }
  if (std::string e = ContextParallelRule(f, cp); !e.empty()) return e;
  if (f.count("--sequence-parallel") && tp == 1)
    return "sequence parallelism with tp 1: Megatron-LM turns --sequence-parallel off (validate_args)";
  if (f.count("--use-precision-aware-optimizer") && !f.count("--use-distributed-optimizer"))
    return "--use-precision-aware-optimizer without the distributed optimizer (ZeRO-1): Megatron-Core refuses it "
           "(OptimizerConfig: \"only supported with distributed optimizer\"); solve with --zero 1 or "
           "--optimizer-state fp32";
  if (f.count("--fp8-param-gather") && f.count("--fp8-recipe") && f.at("--fp8-recipe") == "mxfp8" &&
      f.count("--use-distributed-optimizer") && !f.count("--reuse-grad-buf-for-mxfp8-param-ag"))
    return "--fp8-param-gather with --fp8-recipe mxfp8 under the distributed optimizer without "
           "--reuse-grad-buf-for-mxfp8-param-ag: Transformer Engine's MXFP8Tensor refuses the buffer's storage swap "
           "at start-up (replace_raw_data); add the flag";
  // Under delayed scaling Transformer Engine's FusedAdam holds the master; it stores int16 remainders for every
  // parameter whose dtype reads bf16, FP8 parameters (Float8Tensor, nominally bf16) included, and its FP8 Adam kernel
  // takes an fp32 master only (fused_adam.py; Megatron-Core's OptimizerConfig keeps store_param_remainders on).
  if (f.count("--fp8-param-gather") && f.count("--use-precision-aware-optimizer") &&
      (!f.count("--fp8-recipe") || f.at("--fp8-recipe") == "delayed"))
    return "--fp8-param-gather with --use-precision-aware-optimizer under delayed scaling: Transformer Engine's "
           "FusedAdam stores int16 remainders for the FP8 parameters (nominally bf16) and its FP8 Adam kernel needs an "
           "fp32 master; solve with --optimizer-state fp32, or another --fp8-recipe";
  if (f.count("--fp8-param-gather") && !f.count("--use-distributed-optimizer") && !f.count("--use-megatron-fsdp"))
    return "--fp8-param-gather without the distributed optimizer or FSDP: Megatron-LM refuses it (validate_args); "
           "solve with --zero 1 or 3, or without --fp8-param-gather";
  if (ep > 1 && num("--num-experts", 0) % ep != 0)
    return fmt::format("{} experts are not divisible by ep {} (validate_args)", num("--num-experts", 0), ep);
  const int64_t mbs = num("--micro-batch-size", 1), gbs = num("--global-batch-size", 0);
  if (gbs % (mbs * dp) != 0) {
    return fmt::format("global batch {} is not divisible by micro batch {} x dp {} (num_microbatches_calculator)", gbs,
                       mbs, dp);
  }
  std::vector<int64_t> blocks;
  if (std::string e = MegatronSplit(f, pp, layers, &blocks); !e.empty()) return e;
  const int64_t vp = static_cast<int64_t>(blocks.size()) / pp;
  if (vp > 1 && pp == 1)
    return fmt::format(
        "{} virtual stages per rank with pp 1: Megatron-LM's interleaved schedule needs pp > 1 (validate_args)", vp);
  // forward_backward_pipelining_with_interleaving (schedules.py): groups of G microbatches per virtual
  // stage (--microbatch-group-size-per-virtual-pipeline-stage, default pp), pp <= G <= m, and the last
  // group (m mod G) empty or at least pp.
  if (const int64_t m = gbs / (mbs * dp), g = num("--microbatch-group-size-per-virtual-pipeline-stage", pp);
      vp > 1 && (g < pp || g > m || (m % g > 0 && m % g < pp))) {
    return fmt::format(
        "{} microbatches in groups of {} with pp {} and {} virtual stages: Megatron-LM's interleaved schedule needs pp "
        "<= group <= "
        "microbatches and the last group empty or at least pp (schedules.py)",
        m, g, pp, vp);
  }
  if (vp != c.interleave)
    return fmt::format("Megatron-LM would run {} virtual stages per pipeline rank, the plan {}", vp, c.interleave);
  if (blocks != c.blocks) {
    return fmt::format("Megatron-LM's split ({} blocks per virtual stage) differs from the plan's ({})",
                       fmt::join(blocks, " "), fmt::join(c.blocks, " "));
  }
  return "";
}

// Optimizer and gradient sharding: ZeRO-1 is the distributed optimizer; ZeRO-2/3 are
// Megatron-FSDP's sharding strategies (pipelining refused above).
void MegatronShardingArgs(const Plan& plan, const LaunchPlan& L, std::string* mg) {
  const bool zero23 = plan.zero_stage == ZeroStage::kGradients || plan.zero_stage == ZeroStage::kParameters;
  // The precision-aware optimizer (plan.optimizer_state) and FP8 parameters (plan.fp8_param_gather) run under the
  // distributed optimizer only: over one rank (dp x cp 1) that is ZeRO-0, which the plan then says.
  const bool one_rank = L.dp * std::max<int64_t>(1, L.cp) == 1;
  if (plan.zero_stage == ZeroStage::kOptimizer ||
      (one_rank && (plan.optimizer_state != OptimizerState::kFp32 || plan.fp8_param_gather)))
    *mg += "--use-distributed-optimizer\n";
  if (plan.zero_stage == ZeroStage::kOptimizer && plan.dp_replicate > 1)
    *mg += fmt::format("--num-distributed-optimizer-instances {}\n", plan.dp_replicate);
  if (zero23) {
    *mg += fmt::format("--use-megatron-fsdp\n--data-parallel-sharding-strategy {}\n--ckpt-format fsdp_dtensor\n",
                       plan.zero_stage == ZeroStage::kGradients ? "optim_grads" : "optim_grads_params");
  }
  if (L.dp > 1 && Overlapped(plan, "gradient reduce")) {
    *mg += "--overlap-grad-reduce\n";
    if (plan.zero_stage != ZeroStage::kNone && Overlapped(plan, "parameter gather")) *mg += "--overlap-param-gather\n";
  }
}

// Whether Megatron-Core refuses the delayed-scaling recipe for the plan: moe_act / layernorm recompute under FP8
// (transformer_config.py: "Delayed scaling does not support moe_act and layernorm recompute for fp8").
bool MegatronDelayedRefused(const Plan& plan, const ModelSpec& model) {
  const uint32_t fp8_refused = RecomputeBit(RecomputeModule::kMoeAct) | RecomputeBit(RecomputeModule::kLayernorm);
  return model.dtype == DType::kFp8 && plan.recompute == Recompute::kSelective &&
         (plan.recompute_modules & fp8_refused) != 0;
}

// The --fp8-recipe Megatron-LM runs (its names: delayed, tensorwise = Transformer Engine's current scaling, blockwise,
// mxfp8): the costed recipe (inputs.fp8_recipe), delayed where none is recorded (flat efficiency, a profile, an older
// plan), blockwise (DeepSeek-V3's 1 x 128 / 128 x 128) where delayed is refused, tensorwise for torchao's rowwise.
// "" for a model that is not FP8.
std::string MegatronFp8Recipe(const Plan& plan, const ModelSpec& model) {
  if (model.dtype != DType::kFp8) return "";
  const std::string& r = plan.fp8_recipe;
  if (r.empty() || r == "delayed") return MegatronDelayedRefused(plan, model) ? "blockwise" : "delayed";
  if (r == "current" || r == "tensorwise" || r == "rowwise") return "tensorwise";
  return r;  // blockwise, mxfp8
}

// --fp8-recipe as MegatronFp8Recipe says (nothing for delayed, Megatron's default), with a note where it is not the
// costed recipe.
std::string MegatronFp8RecipeArgs(const Plan& plan, const ModelSpec& model, std::vector<std::string>* notes) {
  const std::string runs = MegatronFp8Recipe(plan, model);
  if (runs.empty() || runs == "delayed") return "";
  if (runs == "blockwise" && plan.fp8_recipe != "blockwise")
    notes->push_back(fmt::format(
        "megatron.args: --fp8-recipe blockwise, as Megatron-Core requires beside moe_act / layernorm recompute in "
        "place of delayed scaling; {} (solve with --fp8-recipe blockwise on Hopper, or tensorwise / mxfp8, to cost "
        "what runs)",
        plan.fp8_recipe.empty() ? "the plan records no FP8 recipe" : "the plan was costed with delayed scaling"));
  if (plan.fp8_recipe == "rowwise")
    notes->push_back(
        "megatron.args: the plan was costed with torchao's rowwise FP8 recipe, which Megatron-LM does not run: "
        "written as --fp8-recipe tensorwise (per-tensor current scaling)");
  return fmt::format("--fp8-recipe {}\n", runs);
}

// The optimizer state (plan.optimizer_state): Transformer Engine's FusedAdam through --use-precision-aware-optimizer,
// which keeps the fp32 master as int16 remainders beside bf16 weights (OptimizerConfig store_param_remainders,
// default true) and the moments in --exp-avg-dtype / --exp-avg-sq-dtype. Megatron-Core keeps a master always: the
// plan's bf16 (none) is written as bf16-moments, with a note; under FP8 recipes other than delayed scaling
// Megatron-Core keeps the master itself in fp32 (use_precision_aware_optimizer_no_fp8_or_ds_fp8), not as
// remainders: noted. bf16-master (FP8 parameters' bf16 master, NeMo 1.x) runs with an fp32 master: noted.
std::string MegatronOptimizerStateArgs(const Plan& plan, const ModelSpec& model, std::vector<std::string>* notes) {
  const OptimizerState s = plan.optimizer_state;
  if (s == OptimizerState::kFp32) return "";
  std::string mg = "--use-precision-aware-optimizer\n";
  if (s != OptimizerState::kFp32Remainders) mg += "--exp-avg-dtype bf16\n--exp-avg-sq-dtype bf16\n";
  if (s == OptimizerState::kBf16)
    notes->push_back(
        "megatron.args: Megatron-Core keeps a master copy of the weights (TE FusedAdam's int16 remainders): the "
        "plan's bf16 optimizer state (4 B per parameter, no master) runs as bf16-moments, 2 B per parameter more; "
        "solve with --optimizer-state bf16-moments to plan what it runs");
  // NeMo 1.x's Apex kept FP8 parameters' master in bf16; Megatron-Core keeps it in fp32. Under delayed scaling the
  // precision-aware optimizer would hand FP8 parameters to TE FusedAdam, which stores remainders for them and then
  // needs an fp32 master (the export rule refuses it): the default optimizer, 12 B. Under the other recipes
  // Megatron-Core keeps the fp32 master itself beside TE's bf16 moments: 8 B.
  const std::string recipe = MegatronFp8Recipe(plan, model);
  // No FP8 or delayed scaling: TE FusedAdam's path (remainders, or its FP8 kernel); the other recipes: Megatron-Core's
  // own fp32 master.
  const bool delayed = recipe.empty() || recipe == "delayed";
  if (s == OptimizerState::kBf16Master) {
    notes->push_back(fmt::format(
        "megatron.args: Megatron-Core keeps the FP8 parameters' master weights in fp32 (--main-params-dtype takes "
        "fp32 or fp16), not the plan's bf16-master (NeMo 1.x's Apex optimizer with optim.dtype bf16): written as {}, "
        "{} B per parameter of optimizer state, {} B more than planned; solve with --optimizer-state fp32 for a "
        "figure it does not exceed",
        delayed ? "the default optimizer (under delayed scaling Transformer Engine's FusedAdam cannot step FP8 "
                  "parameters with bf16 moments: it stores remainders for them)"
                : "the precision-aware optimizer with bf16 moments",
        delayed ? 12 : 8, delayed ? 6 : 2));
    return delayed ? "" : mg;
  }
  if (!delayed)
    notes->push_back(fmt::format(
        "megatron.args: under --fp8-recipe {} Megatron-Core keeps the master weights itself in fp32, not as TE's "
        "remainders: 2 B per parameter more than the plan's optimizer state",
        recipe));
  return mg;
}

// The flags of the plan's settings Megatron-LM runs as they are (no check, no note).
std::string MegatronFlags(const Plan& plan, const ModelSpec& model, const LaunchPlan& L,
                          std::vector<std::string>* notes) {
  std::string mg;
  mg += fmt::format("--tensor-model-parallel-size {}\n--pipeline-model-parallel-size {}\n", L.tp, L.pp);
  if (L.cp > 1)  // the exchange the plan was costed with (planner run executes the ring either way)
    // Transformer Engine's spelling (context_parallel.py dispatches on p2p, all_gather, a2a, a2a+p2p and raises
    // "Unsupported communication type" at the first attention forward on anything else; Megatron-LM passes the
    // string through and its help text's "allgather" is not one of them).
    mg += fmt::format("--context-parallel-size {}\n--cp-comm-type {}\n", L.cp,
                      plan.cp_comm_type == CpCommType::kAllGather ? "all_gather" : "p2p");
  if (L.sequence_parallel) mg += "--sequence-parallel\n";
  // TP communication overlap as costed (inputs.tp_comm_overlap): Transformer Engine's userbuffers, which Megatron
  // runs only with sequence parallelism (validate_args).
  if (plan.tp_comm_overlap && L.tp > 1 && L.sequence_parallel) mg += "--tp-comm-overlap\n";
  if (plan.tp_comm_overlap && L.tp > 1 && !L.sequence_parallel)
    notes->push_back(
        "megatron.args: the plan was costed with TP communication overlapped (--tp-comm-overlap on), which Megatron "
        "runs only with sequence parallelism: written without --tp-comm-overlap (slower than predicted)");
  mg += MegatronModelArgs(model, MegatronAttentionBackend(plan, model, notes), notes);
  mg += MegatronMoeArgs(model, plan, L, notes);
  mg += fmt::format("--micro-batch-size {}\n--global-batch-size {}\n", L.microbatch_size, L.global_batch);
  mg += MegatronSplitArgs(plan, model, L);
  mg += MegatronGroupArgs(L, notes);
  if (plan.recompute == Recompute::kFull && plan.recompute_num_layers > 0) {
    // Block recompute: the first N layers of every chunk (megatron/core/recompute.py, method 'block').
    mg += fmt::format("--recompute-granularity full\n--recompute-method block\n--recompute-num-layers {}\n",
                      plan.recompute_num_layers);
  } else if (plan.recompute == Recompute::kFull) {
    mg += "--recompute-granularity full\n--recompute-method uniform\n--recompute-num-layers 1\n";
  }
  if (plan.recompute == Recompute::kSelective) {
    mg += "--recompute-granularity selective\n";
    if (plan.recompute_modules != kDefaultRecomputeModules)
      mg += fmt::format("--recompute-modules {}\n", fmt::join(RecomputeModuleList(plan.recompute_modules), " "));
  }
  MegatronShardingArgs(plan, L, &mg);
  if (model.dtype == DType::kFp16) mg += "--fp16\n";
  if (model.dtype == DType::kBf16) mg += "--bf16\n";
  if (model.dtype == DType::kFp8)
    mg += "--bf16\n--fp8-format hybrid\n";  // Transformer Engine FP8 GEMMs, bf16 elsewhere
  // The gradient buffer where it differs from Megatron's default for the precision (fp16: fp16, bf16: fp32).
  const DType grad = EffectiveGradDType(model.dtype, plan.grad_dtype);
  if (model.dtype == DType::kFp16 && grad == DType::kFp32) mg += "--accumulate-allreduce-grads-in-fp32\n";
  if ((model.dtype == DType::kBf16 || model.dtype == DType::kFp8) && grad == DType::kBf16)
    mg += "--grad-reduce-in-bf16\n";
  mg += MegatronOptimizerStateArgs(plan, model, notes);
  mg += MegatronFp8RecipeArgs(plan, model, notes);
  if (plan.fp8_param_gather)
    mg += "--fp8-param-gather\n";  // FP8 weights alone (the sharding args below hold the master)
  // MXFP8 parameters are gathered as bf16 into the gradient buffer: without it Megatron-Core's buffer re-points each
  // parameter's storage, which Transformer Engine's MXFP8Tensor refuses at start-up (replace_raw_data: "not supported
  // yet"); Megatron-Bridge's mxfp8 presets set it and its config refuses the combination without it.
  if (plan.fp8_param_gather && plan.zero_stage != ZeroStage::kParameters && MegatronFp8Recipe(plan, model) == "mxfp8")
    mg += "--reuse-grad-buf-for-mxfp8-param-ag\n";
  return mg;
}

// What the self-check compares the flags with: the launch's world (worker ranks), the plan's dp,
// chunks per rank and decoder blocks per chunk in model order.
MegatronCheck MegatronCheckOf(const ModelSpec& model, const LaunchPlan& L) {
  MegatronCheck c;
  c.world = static_cast<int64_t>(L.ranks.size());
  c.dp = L.dp;
  c.interleave = std::max<int64_t>(1, L.interleave);
  for (const auto& chunk : LayoutChunks(model, L.stages))
    c.blocks.push_back(std::count(chunk.begin(), chunk.end(), 't'));
  return c;
}

// megatron.sh: the plan as a smoke test on Megatron-LM, pretrain_gpt.py on its mock data under
// torchrun at the plan's world size, reading megatron.args beside it.
void AddMegatronScript(const ModelSpec& model, const LaunchPlan& L, bool fsdp, Files* files) {
  const int64_t world = static_cast<int64_t>(L.ranks.size()), gpn = std::max<int64_t>(1, L.gpus_per_node);
  int64_t nodes =
      (world + gpn - 1) / gpn;  // the fewest nodes with an equal count per node (torchrun's --nproc-per-node)
  while (world % nodes != 0) ++nodes;
  // validate_args asks for one hardware queue with tp / cp > 1 before Blackwell, and for more than one
  // with Megatron-FSDP on Blackwell: set only without FSDP.
  const bool one_connection = (L.tp > 1 || L.cp > 1) && !fsdp;
  std::string sh = fmt::format(R"SH(#!/usr/bin/env bash
# Smoke test of this plan on Megatron-LM: pretrain_gpt.py on its mock data (no dataset, no tokenizer
# files) with the flags of megatron.args beside this script, under torchrun at the plan's {world} ranks.
#   MEGATRON_LM=/path/to/Megatron-LM bash megatron.sh [TRAIN_ITERS]        (default 10 iterations)
# Several nodes: run it on each with NNODES, NODE_RANK, MASTER_ADDR (and MASTER_PORT, NPROC_PER_NODE);
# NNODES x NPROC_PER_NODE must be {world}. Generated by planner codegen; docs/exports.md.
set -euo pipefail
HERE=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)
: "${{MEGATRON_LM:?set MEGATRON_LM to a Megatron-LM checkout (the directory holding pretrain_gpt.py)}}"
ITERS=${{1:-10}}
NNODES=${{NNODES:-{nodes}}}
NPROC_PER_NODE=${{NPROC_PER_NODE:-{per_node}}}
if [ $((NNODES * NPROC_PER_NODE)) -ne {world} ]; then
  echo "megatron.sh: NNODES ($NNODES) x NPROC_PER_NODE ($NPROC_PER_NODE) must be the plan's world size {world}" >&2
  exit 2
fi
)SH",
                               fmt::arg("world", world), fmt::arg("nodes", nodes), fmt::arg("per_node", world / nodes));
  if (one_connection)
    sh +=
        "export CUDA_DEVICE_MAX_CONNECTIONS=1  # tp or cp > 1 (Megatron-LM's validate_args asks for it before "
        "Blackwell)\n";
  // NullTokenizer's vocabulary is --vocab-size plus its end-of-document token.
  sh += fmt::format(
      R"SH(# NullTokenizer adds an end-of-document token to --vocab-size: the model's vocabulary is {vocab_model}.
set -f  # the flags hold brackets and stars (--moe-layer-freq): no globbing
FLAGS=($(grep -v '^#' "$HERE/megatron.args"))
set +f
exec torchrun --nproc-per-node "$NPROC_PER_NODE" --nnodes "$NNODES" --node-rank "${{NODE_RANK:-0}}" \
  --master-addr "${{MASTER_ADDR:-127.0.0.1}}" --master-port "${{MASTER_PORT:-29500}}" \
  "$MEGATRON_LM/pretrain_gpt.py" "${{FLAGS[@]}}" \
  --mock-data --tokenizer-type NullTokenizer --vocab-size {vocab} \
  --train-iters "$ITERS" --lr 1.0e-4 --log-interval 1 --eval-iters 0
)SH",
      fmt::arg("vocab", model.gpt.vocab - 1), fmt::arg("vocab_model", model.gpt.vocab));
  files->emplace_back("megatron.sh", sh);
}

// What Megatron-LM runs for the plan's schedule when it has no flag for it ("" when it runs it as
// planned). One stage: forward_backward_no_pipelining, as every schedule is with one stage.
std::string MegatronScheduleNote(const LaunchPlan& L) {
  if (L.pp == 1) return "";
  if (L.schedule == Schedule::kZbH1)
    return "ZB-H1 has no Megatron-LM flag; the exported settings run 1F1B (the same stages, without ZB-H1's split "
           "backward)";
  if (L.schedule == Schedule::kGpipe)
    return "Megatron-LM has no GPipe schedule; the exported settings run 1F1B (same bubble, more memory in GPipe)";
  if (L.schedule == Schedule::kDualPipeV) {
    return "Megatron-LM has no DualPipeV schedule; the exported settings run interleaved 1F1B with 2 chunks per rank "
           "(the same chunks, "
           "Megatron's looped placement: chunk q on pipeline rank q mod pp, not the V; a pipeline layout lists the "
           "chunks in that model order)";
  }
  return "";
}

// megatron.args (and megatron.sh): Megatron-LM flags, and a note for each setting it runs
// differently. A plan Megatron-LM cannot express or run, or whose flags break one of its rules,
// gets megatron.args.refused (the reason) and one note instead.
void AddMegatronArgs(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files,
                     std::vector<std::string>* notes) {
  std::string refused = MegatronInexpressible(plan, model, L);
  std::vector<std::string> flag_notes;
  std::string mg;
  if (refused.empty()) refused = MegatronRefusal(plan, model, L);
  if (refused.empty()) {
    mg = MegatronFlags(plan, model, L, &flag_notes);
    refused = MegatronRuleViolation(mg, MegatronCheckOf(model, L));
  }
  if (!refused.empty()) {
    notes->push_back("megatron.args: not written: " + refused);
    files->emplace_back("megatron.args.refused", refused + "\n");
    return;
  }
  notes->insert(notes->end(), flag_notes.begin(), flag_notes.end());
  if (const std::string n = MegatronScheduleNote(L); !n.empty()) notes->push_back("megatron.args: " + n);
  if (DpCommUsesServers(L.dp_comm)) {
    notes->push_back(
        fmt::format("megatron.args: dp_comm {} has no Megatron-LM equivalent: Megatron-LM all-reduces the gradients "
                    "over NCCL in its "
                    "data-parallel groups, without the plan's {} summation server(s)",
                    DpCommName(L.dp_comm), L.servers.size()));
  }
  files->emplace_back("megatron.args", mg);
  AddMegatronScript(model, L, mg.find("--use-megatron-fsdp\n") != std::string::npos, files);
}

}  // namespace codegen_internal

std::string MegatronPipelineLayout(const ModelSpec& model, const std::vector<LaunchStage>& stages) {
  const std::vector<std::string> chunks = codegen_internal::LayoutChunks(model, stages);
  std::string out;
  for (size_t q = 0; q < chunks.size(); ++q) out += (q ? "|" : "") + chunks[q];
  return out;
}

}  // namespace planner
