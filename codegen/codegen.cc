#include "codegen/codegen.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dp_solver/programs.h"

namespace planner {

namespace {

std::string Join(const std::vector<int64_t>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

// A stage time as launch.yaml carries it ({:.9g}) and every rank reads it back.
double AsWritten(double x) { return std::strtod(fmt::format("{:.9g}", x).c_str(), nullptr); }

// Each rank's program, from the stage times launch.yaml carries (so the order is the one a
// rank would derive from the file), checked deadlock-free before anything is written.
Status AddPrograms(LaunchPlan* L) {
  LaunchPlan carried = *L;
  for (auto& s : carried.stages) {
    for (double* x : {&s.predicted_compute_s, &s.predicted_forward_s, &s.predicted_backward_input_s, &s.predicted_backward_weight_s,
                      &s.predicted_p2p_s}) {
      *x = AsWritten(*x);
    }
  }
  PLANNER_RETURN_IF_ERROR(BuildPrograms(carried, &L->programs));
  PLANNER_RETURN_IF_ERROR(AssignPrograms(L));
  Status s = CheckPrograms(*L);
  if (!s.ok()) return Status::Internal("the plan's programs are not deadlock-free, so no launch directory is written: " + s.message());
  return Status::OK();
}

}  // namespace

namespace {

// launch.yaml's header and stages from the plan.
LaunchPlan LaunchHeader(const Plan& plan, const std::string& model_digest, const CodegenOptions& o) {
  LaunchPlan L;
  L.model_digest = model_digest;
  L.device = o.device;
  L.schedule = plan.schedule;
  L.vertical_sync = plan.vertical_sync;  // PipeDream's vertical sync (the plan reader allows it with schedule pipedream only)
  L.interleave = std::max<int64_t>(1, plan.interleave);
  L.tp = plan.tp;
  L.pp = plan.pp;
  L.dp = plan.dp;
  L.cp = std::max<int64_t>(1, plan.cp);
  L.sequence_parallel = plan.sequence_parallel;
  L.ep = std::max<int64_t>(1, plan.ep);
  L.etp = std::max<int64_t>(1, plan.etp);
  L.config = plan.config;
  L.microbatch_size = plan.microbatch_size;
  L.num_microbatches = plan.num_microbatches;
  L.global_batch = plan.global_batch;
  L.gpus_per_node = std::max<int64_t>(1, o.gpus_per_node);
  L.run = o.run;
  L.predicted_iteration_s = plan.predicted.iteration_s;
  L.predicted_bubble_fraction = plan.predicted.bubble_fraction;
  for (const auto& s : plan.stages) {
    LaunchStage ls;
    ls.first_layer = s.first_layer;
    ls.last_layer = s.last_layer;
    ls.replicas = s.replicas;
    ls.chunk = s.chunk;
    ls.predicted_compute_s = s.forward_s + s.backward_input_s + s.backward_weight_s;
    ls.predicted_forward_s = s.forward_s;
    ls.predicted_backward_input_s = s.backward_input_s;
    ls.predicted_backward_weight_s = s.backward_weight_s;
    ls.predicted_p2p_s = s.p2p_s;
    ls.predicted_dp_allreduce_s = s.dp_allreduce_s;
    ls.predicted_ep_comm_s = s.ep_comm_s * static_cast<double>(plan.num_microbatches);  // per microbatch in the plan, per iteration here
    ls.predicted_peak_memory_bytes = s.peak_memory_bytes;
    L.stages.push_back(ls);
  }
  return L;
}

// The rank's host slot and device on it.
void Place(const LaunchPlan& L, LaunchRank* r) {
  r->node = r->rank / L.gpus_per_node;
  r->local_device = r->rank % L.gpus_per_node;
}

// MoE parallel folding (Megatron-Core; MOE.md): a stage's n = t cp d ranks, i = tp_rank + t (cp_rank + cp
// replica) (its ranks are stage n + i), read as i = etp_rank + etp (ep_rank + ep edp_rank). EP groups per
// (stage, edp rank, etp rank) in ep rank order; expert-data-parallel groups per (stage, ep rank, etp rank).
void ExpertGroups(int64_t p, int64_t n, LaunchPlan* L) {
  const int64_t ep = L->ep, etp = L->etp;
  if (ep <= 1 || n % (ep * etp) != 0) return;
  const int64_t edp = n / (ep * etp);
  for (int64_t r = 0; r < p; ++r)
    for (int64_t e = 0; e < edp; ++e)
      for (int64_t j = 0; j < etp; ++j) {
        std::vector<int64_t> g;
        for (int64_t q = 0; q < ep; ++q) g.push_back(r * n + j + etp * (q + ep * e));
        L->ep_groups.push_back(g);
      }
  for (int64_t r = 0; r < p; ++r)
    for (int64_t q = 0; q < ep; ++q)
      for (int64_t j = 0; j < etp; ++j) {
        std::vector<int64_t> g;
        for (int64_t e = 0; e < edp; ++e) g.push_back(r * n + j + etp * (q + ep * e));
        L->edp_groups.push_back(g);
      }
}

// Uniform plans: Megatron's order tp-cp-dp-pp, rank = ((position x d + replica) x cp + cp rank) x t
// + tp rank, and the groups of that order: TP per (position, replica, cp rank); the gradient
// ("data_parallel") group per (position, tp rank) spans replicas and CP ranks, which hold the same
// weights (Megatron's data-parallel group with context parallelism); PP per (replica, cp, tp rank);
// CP per (position, replica, tp rank).
void UniformRanks(int64_t p, int64_t d, int64_t t, LaunchPlan* L) {
  const int64_t cp = std::max<int64_t>(1, L->cp);
  auto rank_of = [&](int64_t r, int64_t k, int64_t c, int64_t j) { return ((r * d + k) * cp + c) * t + j; };
  for (int64_t r = 0; r < p; ++r)
    for (int64_t k = 0; k < d; ++k)
      for (int64_t c = 0; c < cp; ++c)
        for (int64_t j = 0; j < t; ++j) {
          LaunchRank x;
          x.rank = rank_of(r, k, c, j);
          x.stage = r;
          x.replica = k;
          x.tp_rank = j;
          x.cp_rank = c;
          // Interleaved chunks wrap around: the last device feeds the first's next chunk (DualPipeV's V does not: its last device feeds itself).
          if (r > 0) x.prev = {rank_of(r - 1, k, c, j)};
          else if (L->interleave > 1 && p > 1 && L->schedule != Schedule::kDualPipeV) x.prev = {rank_of(p - 1, k, c, j)};
          if (r + 1 < p) x.next = {rank_of(r + 1, k, c, j)};
          else if (L->interleave > 1 && p > 1 && L->schedule != Schedule::kDualPipeV) x.next = {rank_of(0, k, c, j)};
          Place(*L, &x);
          L->ranks.push_back(x);
        }
  for (int64_t r = 0; r < p; ++r)
    for (int64_t k = 0; k < d; ++k)
      for (int64_t c = 0; c < cp; ++c) {
        std::vector<int64_t> g;
        for (int64_t j = 0; j < t; ++j) g.push_back(rank_of(r, k, c, j));
        L->tp_groups.push_back(g);
      }
  for (int64_t r = 0; r < p; ++r)
    for (int64_t j = 0; j < t; ++j) {
      std::vector<int64_t> g;
      for (int64_t k = 0; k < d; ++k)
        for (int64_t c = 0; c < cp; ++c) g.push_back(rank_of(r, k, c, j));
      L->dp_groups.push_back(g);
    }
  for (int64_t k = 0; k < d; ++k)
    for (int64_t c = 0; c < cp; ++c)
      for (int64_t j = 0; j < t; ++j) {
        std::vector<int64_t> g;
        for (int64_t r = 0; r < p; ++r) g.push_back(rank_of(r, k, c, j));
        L->pp_groups.push_back(g);
      }
  ExpertGroups(p, d * cp * t, L);
  if (cp == 1) return;
  for (int64_t r = 0; r < p; ++r)
    for (int64_t k = 0; k < d; ++k)
      for (int64_t j = 0; j < t; ++j) {
        std::vector<int64_t> g;
        for (int64_t c = 0; c < cp; ++c) g.push_back(rank_of(r, k, c, j));
        L->cp_groups.push_back(g);
      }
}

// Per-stage replication: stage s holds replicas x t consecutive ranks from its offset; each
// stage's replicas of one tp rank form its DP group.
void ReplicatedRanks(const Plan& plan, int64_t t, LaunchPlan* L) {
  std::vector<std::vector<std::vector<int64_t>>> ranks_of(plan.stages.size());  // [stage][tp rank] -> ranks
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& st = plan.stages[s];
    ranks_of[s].resize(static_cast<size_t>(t));
    for (int64_t k = 0; k < st.replicas; ++k)
      for (int64_t j = 0; j < t; ++j) ranks_of[s][static_cast<size_t>(j)].push_back(st.device_offset + k * t + j);
  }
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& st = plan.stages[s];
    for (int64_t k = 0; k < st.replicas; ++k) {
      std::vector<int64_t> g;
      for (int64_t j = 0; j < t; ++j) {
        LaunchRank x;
        x.rank = st.device_offset + k * t + j;
        x.stage = static_cast<int64_t>(s);
        x.replica = k;
        x.tp_rank = j;
        if (s > 0) x.prev = ranks_of[s - 1][static_cast<size_t>(j)];
        if (s + 1 < plan.stages.size()) x.next = ranks_of[s + 1][static_cast<size_t>(j)];
        Place(*L, &x);
        L->ranks.push_back(x);
        g.push_back(x.rank);
      }
      L->tp_groups.push_back(g);
    }
    for (int64_t j = 0; j < t; ++j) L->dp_groups.push_back(ranks_of[s][static_cast<size_t>(j)]);
  }
}

// Whether some data-parallel group has two or more ranks (gradients to synchronise).
bool AnyDpSync(const LaunchPlan& L) {
  for (const auto& g : L.dp_groups) {
    if (g.size() > 1) return true;
  }
  return false;
}

// The plan's dp_comm; ps and byteps get plan.dp_servers server ranks numbered after the workers
// (ps co-located: none, launch `ps_placement: colocated`).
// With nothing to synchronise (every DP group one rank) the launch runs allreduce-hier without
// servers (GenerateLaunchFiles notes it).
Status AddServers(const Plan& plan, LaunchPlan* L) {
  L->dp_comm = plan.dp_comm;
  if (!DpCommUsesServers(plan.dp_comm)) return Status::OK();
  if (plan.dp_comm == DpComm::kParameterServer && plan.dp_servers < 1 && !plan.ps_colocated) {
    return Status::InvalidArgument("plan: dp_comm ps needs dp_servers >= 1; set dp_servers in plan.yaml or solve again");
  }
  if (!AnyDpSync(*L)) {
    L->dp_comm = DpComm::kHierAllReduce;
    return Status::OK();
  }
  L->ps_colocated = plan.dp_comm == DpComm::kParameterServer && plan.ps_colocated;  // servers: [] (every worker sums its shard)
  const int64_t n = static_cast<int64_t>(L->ranks.size());
  for (int64_t i = 0; i < plan.dp_servers; ++i) L->servers.push_back(n + i);
  return Status::OK();
}

}  // namespace

Status BuildLaunchPlan(const Plan& plan, const std::string& model_digest, const CodegenOptions& o, LaunchPlan* out) {
  if (plan.stages.empty()) return Status::InvalidArgument("the plan has no stages");
  LaunchPlan L = LaunchHeader(plan, model_digest, o);
  const int64_t t = std::max<int64_t>(1, plan.tp);
  bool uniform = plan.schedule != Schedule::kPipeDream;
  for (const auto& s : plan.stages) uniform = uniform && s.replicas == plan.dp;
  if (L.ep > 1 && (!uniform || (t * L.cp * plan.dp) % (L.ep * L.etp) != 0)) {
    return Status::InvalidArgument(fmt::format("plan: ep {} x etp {} must divide each stage's tp x cp x dp = {} ranks, with uniform stages (MoE parallel folding)",
                                               L.ep, L.etp, t * L.cp * plan.dp));
  }
  if (uniform) {
    if (plan.pp * L.interleave != static_cast<int64_t>(plan.stages.size())) {
      return Status::InvalidArgument(fmt::format("plan: pp {} x interleave {} does not match its {} stages", plan.pp, L.interleave, plan.stages.size()));
    }
    UniformRanks(plan.pp, plan.dp, t, &L);
  } else if (L.cp > 1) {
    return Status::NotSupported("plan: context parallelism runs with uniform stages (no per-stage replication, not pipedream); solve with cp 1");
  } else {
    ReplicatedRanks(plan, t, &L);
  }
  std::sort(L.ranks.begin(), L.ranks.end(), [](const LaunchRank& a, const LaunchRank& b) { return a.rank < b.rank; });
  for (size_t i = 0; i < L.ranks.size(); ++i) {
    if (L.ranks[i].rank != static_cast<int64_t>(i)) return Status::InvalidArgument("plan: its stages do not place every rank exactly once");
  }
  PLANNER_RETURN_IF_ERROR(AddServers(plan, &L));
  PLANNER_RETURN_IF_ERROR(AddPrograms(&L));
  *out = std::move(L);
  return Status::OK();
}

namespace {

using Files = std::vector<std::pair<std::string, std::string>>;

// The summation servers' line of a script's header ("" without servers).
std::string ServersNote(const LaunchPlan& L) {
  if (L.servers.empty()) return "";
  const std::string which = L.servers.size() == 1 ? fmt::format("rank {}", L.servers.front()) : fmt::format("ranks {}-{}", L.servers.front(), L.servers.back());
  return fmt::format("# plus {} summation server rank{} of dp_comm {} ({}: no stage; they sum the workers' gradients)\n", L.servers.size(),
                     L.servers.size() == 1 ? "" : "s", DpCommName(L.dp_comm), which);
}

// run.sh: mpirun, local ranks or a hostfile; -np counts the workers and the summation servers.
void AddRunScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files) {
  const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  files->emplace_back("run.sh", fmt::format(R"SH(#!/usr/bin/env bash
# {} on {} ranks ({} {}, tp-pp-dp {}, replication {}). Written by planner codegen.
{})SH", model.name, L.ranks.size(), ScheduleName(L.schedule), L.interleave > 1 ? fmt::format("v={}", L.interleave) : "",
                                           fmt::format("{}-{}-{}", L.tp, L.pp, L.dp), L.config, ServersNote(L)) + fmt::format(R"SH(#   bash run.sh                 local ranks on this machine
#   bash run.sh HOSTFILE [...]  {} ranks per node from an Open MPI hostfile; extra arguments go to planner run
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
PLANNER=${{PLANNER:-{}}}
ROOT=""
if [ "$(id -u)" = 0 ]; then ROOT="--allow-run-as-root"; fi
if [ $# -ge 1 ] && [ -f "$1" ]; then
  HOSTFILE=$1; shift
  exec mpirun $ROOT --hostfile "$HOSTFILE" --map-by ppr:{}:node -np {} "$PLANNER" run "$DIR" "$@"
fi
exec mpirun $ROOT --oversubscribe -np {} "$PLANNER" run "$DIR" "$@"
)SH",
                                           L.gpus_per_node, o.planner_path, L.gpus_per_node, n, n));
}

// slurm.sbatch: one task per device, srun starting planner run.
void AddSlurmScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files) {
  // Summation servers are tasks too: the job's task count is the workers' plus theirs.
  const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  const int64_t nodes = (n + L.gpus_per_node - 1) / L.gpus_per_node;
  const int64_t per_node = std::min(n, L.gpus_per_node);
  files->emplace_back("slurm.sbatch", fmt::format(R"SH(#!/bin/bash
# {} on {} ranks: one task per {}. Submit with: sbatch slurm.sbatch
{}#SBATCH --job-name=planner-{}
#SBATCH --nodes={}
#SBATCH --ntasks-per-node={}
{}#SBATCH --cpus-per-task={}
{}#SBATCH --output=planner-%j.out
set -eu
DIR=${{SLURM_SUBMIT_DIR:-$(pwd)}}
srun --kill-on-bad-exit=1 {} run "$DIR"
)SH",
                                                  model.name, L.ranks.size(), L.device == "cuda" ? "GPU" : "CPU core", ServersNote(L), model.name, nodes, per_node,
                                                  L.servers.empty() ? "" : fmt::format("#SBATCH --ntasks={}\n", n), L.run.threads, L.device == "cuda" ? fmt::format("#SBATCH --gpus-per-node={}\n", per_node) : "",
                                                  o.planner_path));
}

const Layer* MlaLayer(const ModelSpec& model);

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

// What a DeepSpeed model must implement itself: DeepSpeed's config does not define the model.
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

// torch_pipelining.py: split points and schedule for torch.distributed.pipelining.
void AddTorchPipelining(const ModelSpec& model, const LaunchPlan& L, Files* files, std::vector<std::string>* notes) {
  const int64_t n = static_cast<int64_t>(L.ranks.size());
  const char* sched = L.schedule == Schedule::kGpipe ? "ScheduleGPipe"
                      : L.schedule == Schedule::kInterleaved ? "ScheduleInterleaved1F1B"
                      : L.schedule == Schedule::kZbH1 ? "ScheduleInterleavedZeroBubble"
                      : L.schedule == Schedule::kDualPipeV ? "ScheduleDualPipeV"
                                              : "Schedule1F1B";
  if (L.schedule == Schedule::kDualPipeV) {
    notes->push_back("torch_pipelining.py: ScheduleDualPipeV takes both stages of a rank, stage indices r and 2 x pp - 1 - r (the V), as a list; build() makes one");
  }
  if (L.schedule == Schedule::kPipeDream) notes->push_back("torch_pipelining.py: no asynchronous schedule in torch.distributed.pipelining; exported as 1F1B");
  std::string splits;
  for (const auto& s : L.stages) {
    if (s.first_layer == 0) continue;
    splits += fmt::format("    \"{}\": SplitPoint.BEGINNING,\n", model.layers[static_cast<size_t>(s.first_layer)].name);
  }
  files->emplace_back("torch_pipelining.py", fmt::format(R"PY(# torch.distributed.pipelining settings of the plan ({} ranks, tp-pp-dp {}-{}-{}, {}).
# The model's top-level submodules must carry the planner's layer names.
from torch.distributed.pipelining import SplitPoint, pipeline
from torch.distributed.pipelining import {}

SPLIT_SPEC = {{
{}}}
SCHEDULE = {}
N_MICROBATCHES = {}
MICROBATCH_SIZE = {}
STAGES_PER_RANK = {}


def build(model, example_microbatch, stage_index, device, group=None, loss_fn=None):
    """Splits `model` at SPLIT_SPEC and returns (stage, schedule) for this rank."""
    pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=SPLIT_SPEC)
    stage = pipe.build_stage(stage_index, device, group)
    return stage, SCHEDULE(stage, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)
)PY",
                                                         n, L.tp, L.pp, L.dp, ScheduleName(L.schedule), sched, splits, sched, L.num_microbatches,
                                                         L.microbatch_size, L.interleave));
}

}  // namespace

std::string MegatronPipelineLayout(const ModelSpec& model, const std::vector<LaunchStage>& stages) {
  const std::vector<std::string> chunks = LayoutChunks(model, stages);
  std::string out;
  for (size_t q = 0; q < chunks.size(); ++q) out += (q ? "|" : "") + chunks[q];
  return out;
}

Status GenerateLaunchFiles(const Plan& plan, const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o,
                           std::vector<std::pair<std::string, std::string>>* files, std::vector<std::string>* notes) {
  files->emplace_back("launch.yaml", LaunchPlanToYaml(L));
  if (DpCommUsesServers(plan.dp_comm) && !DpCommUsesServers(L.dp_comm)) {
    notes->push_back(fmt::format("dp_comm {}: every data-parallel group has one rank, so there are no gradients to synchronise; launch.yaml "
                                 "runs dp_comm allreduce-hier without server ranks", DpCommName(plan.dp_comm)));
  }
  AddRunScript(model, L, o, files);
  AddSlurmScript(model, L, o, files);
  AddMegatronArgs(plan, model, L, files, notes);
  AddDeepSpeedFiles(plan, model, L, files, notes);
  AddTorchPipelining(model, L, files, notes);
  return Status::OK();
}

}  // namespace planner
