// torch_pipelining.py: the plan for torch.distributed.pipelining (torch 2.15): a DeviceMesh over (pp, dp, tp),
// this rank's stages (the loop r + k pp, or DualPipeV's V r and 2 pp - 1 - r), the schedule class with its
// stage list, TP by parallelize_module, DP by a gradient all-reduce over mesh['dp'], a reference GPT of the
// planner's template and mock data; or torch_pipelining.py.refused with the reason (docs/exports.md).
#include "codegen/embedded_templates.h"
#include "codegen/exports.h"

#include <algorithm>

#include <fmt/format.h>

namespace planner {
namespace codegen_internal {
namespace {

bool IsSingleStageClass(const std::string& cls) { return cls == "ScheduleGPipe" || cls == "Schedule1F1B"; }

// What torch.distributed.pipelining cannot run as planned ("" when it can).
std::string TorchPipeliningUnsupported(const ModelSpec& model, const LaunchPlan& L) {
  if (L.schedule == Schedule::kPipeDream)
    return "PipeDream's asynchronous schedule (torch.distributed.pipelining's schedules all flush every step)";
  if (PerStageReplication(L))
    return "per-stage replication (a PipelineStage group spans one rank per stage; every stage has dp replicas)";
  if (L.cp > 1)
    return fmt::format("context parallelism (cp {}): the export builds no context-parallel attention", L.cp);
  if (!model.is_gpt)
    return "a layer list that is not the gpt template (the export's reference model is the planner's GPT)";
  for (const Layer& l : model.layers) {
    if (l.kind == LayerKind::kMoeBlock || L.ep > 1)
      return "MoE layers / expert parallelism (the reference model builds dense blocks only)";
    if (l.kind == LayerKind::kMtp) return "multi-token-prediction modules (the reference model has none)";
    if (l.attrs.ints.count("kv_lora_rank") != 0 && l.attrs.ints.at("kv_lora_rank") > 0)
      return "multi-head latent attention (the reference model has none)";
    if (l.attention_window > 0)
      return fmt::format(
          "sliding-window attention ({} keys, {}): the reference model attends causally over the whole "
          "sequence",
          l.attention_window, l.name);
  }
  return "";
}

}  // namespace

std::string TorchScheduleClass(const LaunchPlan& L) {
  switch (L.schedule) {
    case Schedule::kGpipe: return "ScheduleGPipe";
    case Schedule::kInterleaved: return "ScheduleInterleaved1F1B";
    case Schedule::kZbH1: return "ScheduleInterleavedZeroBubble";
    case Schedule::kDualPipeV: return "ScheduleDualPipeV";
    default: return L.num_microbatches < L.pp ? "ScheduleGPipe" : "Schedule1F1B";  // see the note in AddTorchPipelining
  }
}

std::string TorchPipeliningRuleViolation(const ModelSpec& model, const LaunchPlan& L, const std::string& cls) {
  const int64_t world = static_cast<int64_t>(L.ranks.size()), m = L.num_microbatches, p = L.pp;
  const int64_t nstages = static_cast<int64_t>(L.stages.size());
  if (L.pp * L.dp * L.tp != world)
    return fmt::format("world size: pp {} x dp {} x tp {} = {} is not the plan's {} ranks", L.pp, L.dp, L.tp,
                       L.pp * L.dp * L.tp, world);
  const int64_t per_rank = IsSingleStageClass(cls) || cls == "ScheduleInterleavedZeroBubble" ? 1
                           : cls == "ScheduleDualPipeV"                                      ? 2
                                                                                             : L.interleave;
  if (nstages != p * per_rank)
    return fmt::format("stages per rank: {} takes {} stage(s) per rank, so pp {} needs {} stages, not {}", cls,
                       per_rank, p, p * per_rank, nstages);
  int64_t next = 0;
  for (const LaunchStage& s : L.stages) {
    if (s.first_layer != next || s.last_layer < s.first_layer)
      return fmt::format("stage boundaries: a stage starts at layer {}, not {} (stages must cover the layers in order)",
                         s.first_layer, next);
    next = s.last_layer + 1;
  }
  if (next != static_cast<int64_t>(model.layers.size()))
    return fmt::format("stage boundaries: the stages end at layer {} of {}", next, model.layers.size());
  if (m < 1) return "microbatches: n_microbatches must be at least 1";
  if (cls == "Schedule1F1B" && m < nstages)
    return fmt::format("microbatches: Schedule1F1B needs n_microbatches >= stages ({} < {})", m, nstages);
  if (cls == "ScheduleDualPipeV" && m < nstages)
    return fmt::format("microbatches: ScheduleDualPipeV needs n_microbatches >= stages ({} < {})", m, nstages);
  if (cls == "ScheduleInterleaved1F1B" || cls == "ScheduleInterleavedZeroBubble") {
    const int64_t rounds = std::max<int64_t>(1, m / p);
    if (m % rounds != 0)
      return fmt::format("microbatches: {} needs n_microbatches a multiple of its rounds max(1, m / pp) = {} (m = {})",
                         cls, rounds, m);
  }
  if (L.microbatch_size * m * L.dp != L.global_batch)
    return fmt::format("batch identity: microbatch {} x {} microbatches x dp {} = {} is not the global batch {}",
                       L.microbatch_size, m, L.dp, L.microbatch_size * m * L.dp, L.global_batch);
  const GptConfig& g = model.gpt;
  const int64_t kv = g.kv_heads > 0 ? g.kv_heads : g.heads, ffn = g.ffn > 0 ? g.ffn : 4 * g.hidden;
  if (g.heads % L.tp != 0)
    return fmt::format("tensor parallelism: {} heads not divisible by tp {} (ColwiseParallel splits the heads)",
                       g.heads, L.tp);
  if (kv % L.tp != 0) return fmt::format("tensor parallelism: {} KV heads not divisible by tp {}", kv, L.tp);
  if (ffn % L.tp != 0) return fmt::format("tensor parallelism: ffn {} not divisible by tp {}", ffn, L.tp);
  return "";
}

void AddTorchPipelining(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, Files* files,
                        std::vector<std::string>* notes) {
  const std::string cls = TorchScheduleClass(L);
  std::string why = TorchPipeliningUnsupported(model, L);
  if (why.empty()) why = TorchPipeliningRuleViolation(model, L, cls);
  if (!why.empty()) {
    files->emplace_back("torch_pipelining.py.refused", fmt::format("torch_pipelining.py: not written: {}\n", why));
    notes->push_back("torch_pipelining.py: not written: " + why);
    return;
  }
  auto note = [&](const std::string& s) { notes->push_back("torch_pipelining.py: " + s); };
  if (L.schedule == Schedule::k1F1B && cls == "ScheduleGPipe") {
    note(
        fmt::format("1f1b with {} microbatch(es) < {} stages (torch's Schedule1F1B needs m >= stages) written as "
                    "ScheduleGPipe: the same gradients (both flush every step); "
                    "rank 0 holds m microbatches' activations in both, later ranks m instead of pp - r",
                    L.num_microbatches, L.pp));
  }
  if (L.schedule == Schedule::kZbH1)
    note(
        "zb-h1 written as ScheduleInterleavedZeroBubble with one stage per rank (torch's ZB1P, the zero-bubble paper's "
        "ZB-H1 at one chunk)");
  if (model.dtype != DType::kFp32)
    note(fmt::format("the reference model trains in fp32, not the plan's {}", DTypeName(model.dtype)));
  if (model.gpt.dropout > 0) note("the reference model has no dropout (a deterministic check against one process)");
  if (plan.zero_stage != ZeroStage::kNone)
    note(fmt::format("ZeRO-{} not applied: gradients all-reduced over mesh['dp'], optimizer state replicated",
                     ZeroStageNumber(plan.zero_stage)));
  if (plan.recompute != Recompute::kNone) note("activation recompute not applied");
  if (L.sequence_parallel) note("TP without sequence parallelism (activations replicated over mesh['tp'])");
  if (L.dp > 1 && L.dp_comm != DpComm::kRingAllReduce && L.dp_comm != DpComm::kHierAllReduce &&
      L.dp_comm != DpComm::kTreeAllReduce)
    note(fmt::format("dp_comm {} written as an all-reduce over mesh['dp'] (the same average)", DpCommName(L.dp_comm)));
  std::string stages;
  for (const LaunchStage& s : L.stages) {
    std::string names;
    for (int64_t i = s.first_layer; i <= s.last_layer; ++i)
      names += fmt::format("{}\"{}\"", i > s.first_layer ? ", " : "", model.layers[static_cast<size_t>(i)].name);
    stages += fmt::format("    [{}],\n", names);
  }
  const GptConfig& g = model.gpt;
  const int64_t per_rank = static_cast<int64_t>(L.stages.size()) / L.pp;
  const int64_t head_dim = g.head_dim > 0 ? g.head_dim : g.hidden / g.heads;
  auto str = [](auto x) { return fmt::format("{}", x); };  // a value as fmt writes it
  files->emplace_back("torch_pipelining.py", FillTemplate(codegen_templates::kTorchPipelining,
                                                          {{"world", str(L.ranks.size())},
                                                           {"tp", str(L.tp)},
                                                           {"pp", str(L.pp)},
                                                           {"dp", str(L.dp)},
                                                           {"sched", ScheduleName(L.schedule)},
                                                           {"cls", cls},
                                                           {"per_rank", str(per_rank)},
                                                           {"style", L.schedule == Schedule::kDualPipeV ? "v" : "loop"},
                                                           {"m", str(L.num_microbatches)},
                                                           {"mbs", str(L.microbatch_size)},
                                                           {"gb", str(L.global_batch)},
                                                           {"stages", stages},
                                                           {"layers", str(g.layers)},
                                                           {"hidden", str(g.hidden)},
                                                           {"heads", str(g.heads)},
                                                           {"kv", str(g.kv_heads > 0 ? g.kv_heads : g.heads)},
                                                           {"hd", str(head_dim)},
                                                           {"ffn", str(g.ffn > 0 ? g.ffn : 4 * g.hidden)},
                                                           {"seq", str(g.seq)},
                                                           {"vocab", str(g.vocab)},
                                                           {"act", g.ffn_act},
                                                           {"norm", g.norm},
                                                           {"pos", g.position},
                                                           {"theta", str(g.rope_theta)},
                                                           {"bias", g.bias ? "True" : "False"},
                                                           {"tie", g.tie_embeddings ? "True" : "False"},
                                                           {"opt", L.run.optimizer},
                                                           {"lr", str(L.run.learning_rate)},
                                                           {"seed", str(L.run.seed)},
                                                           {"steps", str(L.run.iterations)}}));
}

}  // namespace codegen_internal
}  // namespace planner
