// The cost model of the joint search (docs/cost_model.md sections 2-5):
// per-layer times at a (microbatch b, tensor-parallel t, recompute) point,
// from the analytic rule FLOPs / (peak x efficiency) + bytes / (HBM x eff)
// or from a measured profile, and the collective and point-to-point times on
// the cluster's topology levels. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "spec/cluster_spec.h"
#include "spec/engine_spec.h"
#include "spec/kernel_table.h"
#include "spec/model_spec.h"
#include "spec/kinds.h"
#include "spec/model_state.h"
#include "spec/profile.h"

namespace planner {

struct CostOptions {
  bool scatter_gather = true;  // p2p of bsh/t per GPU when t > 1 (Megatron 4.1)
  bool dp_overlap = false;     // legacy --dp-overlap: same as overlap_grad_reduce
  // Megatron --overlap-grad-reduce / --overlap-param-gather (bucketed; docs/cost_model.md section 3).
  bool overlap_grad_reduce = true;     // gradient reduce overlapped with the last microbatch's backward
  bool overlap_grad_reduce_pp = true;  // ... with pp > 1 too (false: the engine reduces after the pipeline drains)
  bool overlap_param_gather = true;    // ZeRO-1/2: the updated parameters' all-gather overlapped with the next forward
  bool overlap_param_prefetch = true;  // ZeRO-3 (FSDP): each layer's gather prefetched ahead of its use
  // Whether ZeRO stage `zero`'s parameter gathers overlap compute: ZeRO-3's (and FSDP's under PP) by prefetch, ZeRO-1/2's
  // after the step by overlap_param_gather.
  bool ParamGatherOverlapped(int64_t zero) const { return zero == 3 ? overlap_param_prefetch : overlap_param_gather; }
  bool p2p_overlap = false;  // p2p hidden behind compute (not added to stage time)
  double bytes_per_param =
      0;  // model-state bytes per parameter; 0: weights + gradients + optimizer (18 bf16 / fp8, 16 fp16 / fp32)
  // Gradient buffer dtype (accumulation over microbatches, data-parallel reduction; --grad-dtype);
  // unset: DefaultGradDType(model), Megatron-LM's default (fp16 for fp16, else fp32).
  std::optional<DType> grad_dtype;
  // How the optimizer keeps its state (--optimizer-state; spec/model_state.h): its bytes per parameter and the
  // step's HBM traffic per parameter, which follows from it (30 B for fp32).
  OptimizerState optimizer_state = OptimizerState::kFp32;
  double OptimizerStepBytesPerParam() const { return OptimizerStepTrafficPerParam(optimizer_state); }
  // Mixture of experts (docs/cost_model.md, "Expert parallelism"; dp_solver/moe_cost.h).
  double moe_imbalance = 1.0;  // busiest EP rank's routed tokens / the mean, dropless routing (--moe-imbalance)
  bool moe_overlap = false;    // all-to-all hidden behind the MoE layer's compute of the same pass (--moe-overlap)
  bool moe_dedup = false;      // token dispatch deduplicated per node (--moe-dispatcher flex: DeepEP / HybridEP)
  bool cp_overlap = true;      // ring attention's KV exchange hidden behind its steps' compute (off: the lead analysis)
  // Context parallelism's KV exchange (--cp-comm-type): the ring (p2p), or one exposed all-gather of K, V
  // per layer and pass with each local query chunk's attention in one kernel, no merges (allgather).
  CpCommType cp_comm = CpCommType::kP2P;
  // Kernel-level costs (a kernel table and an engine; docs/cost_model.md section 2, "Engines"), else unused:
  bool tp_comm_overlap = false;  // TP collectives overlapped with the GEMMs (Megatron --tp-comm-overlap, async TP)
  double compute_slowdown = 0;   // compute seconds lost per second of communication hidden behind it (the engine's)
  bool fsdp_with_pp = false;     // ZeRO-3 under pipelining as torchtitan runs FSDP2 there (the engine's fsdp_with_pp)
  // FP8 parameters (solve --fp8-param-gather): an FP8 model's weights held in FP8 alone, as the kernel table's recipe
  // keeps them (Fp8Recipe::weight_bytes), gathered in its param_gather_bytes; no bf16 copy (spec/model_state.h).
  bool fp8_params = false;
};

// Costs of one layer for one microbatch on one GPU of its tensor-parallel group.
struct LayerCostRow {
  double forward_s = 0;
  double backward_input_s = 0;  // includes recompute work and the backward TP all-reduces
  double backward_weight_s = 0;
  double tp_comm_s = 0;        // exposed TP all-reduce time inside forward + backward
  double cp_comm_s = 0;        // exposed ring-attention KV exchange inside forward + backward
  double ep_comm_s = 0;        // exposed expert-parallel all-to-all (dispatch + combine) inside forward + backward
  double moe_host_wait_s = 0;  // the routed-expert block waiting for the host's launches, inside forward + backward
  // The same communication whole, hidden or not (the plan's hidden / exposed split per kind).
  double tp_total_s = 0, cp_total_s = 0, ep_total_s = 0;
  double params = 0;         // parameters held on this GPU (tied weights included)
  double expert_params = 0;  // the part of params that is routed experts' (expert_params / (ep etp))
  int64_t tied_to = -1;      // the row whose weights these are (a tied lm_head: its embedding); -1: none
  double stash_bytes = 0;    // activations kept for backward on this GPU
  double out_bytes = 0;      // output activation of the whole microbatch (before TP split)
  // Working memory while the layer runs on this GPU beyond its stash, where the engine states it (the loss's logits at
  // its peak: EngineSpec::loss_logit_bytes); 0: twice out_bytes / tp, as for every layer.
  double work_bytes = 0;
};

struct CostTable {
  int64_t microbatch = 1, tp = 1;
  int64_t cp = 1;   // context-parallel size the rows are costed at
  bool sp = false;  // sequence parallelism the rows are costed with
  Recompute recompute = Recompute::kNone;
  uint32_t recompute_modules = kDefaultRecomputeModules;  // selective recompute's modules (RecomputeBit mask)
  int64_t ep = 1, etp = 1;  // expert-parallel and expert tensor-parallel sizes the rows are costed at
  std::vector<LayerCostRow> rows;
  std::vector<std::string> names;
  // Prefix sums for O(1) range queries; index i holds rows [0, i).
  std::vector<double> pre_time, pre_params, pre_stash, pre_f, pre_bi, pre_bw, pre_tp, pre_ep, pre_expert;
  std::vector<double> pre_cp, pre_tp_total, pre_cp_total, pre_ep_total;  // communication, exposed and whole
  std::vector<int64_t> tied_rows;                                        // rows with tied_to >= 0
  void BuildPrefix();
  double Time(int64_t a, int64_t b) const { return pre_time[b] - pre_time[a]; }  // layers [a, b)
  // Parameters of layers [a, b) on one GPU: a tied row whose partner is in the range too shares
  // its matrix and is not counted again (Megatron keeps the second copy only on another stage).
  double Params(int64_t a, int64_t b) const {
    double sum = pre_params[b] - pre_params[a];
    for (int64_t i : tied_rows) {
      const LayerCostRow& r = rows[static_cast<size_t>(i)];
      if (i >= a && i < b && r.tied_to >= a && r.tied_to < b) sum -= r.params;
    }
    return sum;
  }
  double Stash(int64_t a, int64_t b) const { return pre_stash[b] - pre_stash[a]; }
  // Routed experts' parameters of layers [a, b) on one GPU (sharded over the expert-data-parallel group).
  double ExpertParams(int64_t a, int64_t b) const { return pre_expert[b] - pre_expert[a]; }
};

// Where layer costs come from.
struct CostSource {
  const ModelSpec* model = nullptr;      // required for analytic costs and for TP
  const ClusterSpec* cluster = nullptr;  // required
  const Profile* profile = nullptr;      // measured times; nullptr: analytic
  // Kernel-level analytic costs (docs/cost_model.md section 2, "Kernel-level compute"): both set, the
  // table's per-operation-class rates times the engine's sustained shares replace the cluster's flat
  // `efficiency`; either nullptr: the flat model.
  const KernelTable* kernels = nullptr;
  const EngineSpec* engine = nullptr;
};
// Whether a source's analytic costs are kernel-level (a kernel table and an engine, no profile).
inline bool KernelLevel(const CostSource& src) {
  return src.kernels != nullptr && src.engine != nullptr && src.profile == nullptr;
}
// The attention kernel `engine` runs on `kernels`: its own when the table has curves of it, else the
// first of its fallbacks the table has, else the table's first kernel; "" when the table has none.
std::string AttentionKernel(const KernelTable& kernels, const EngineSpec& engine);

// True when every TP-shardable layer accepts degree t.
bool TpDegreeValid(const ModelSpec& model, int64_t t);
// True when the model has attention (a transformer_block, moe_block or attention layer): what sequence
// parallelism splits, selective recompute and context parallelism act on. False for nullptr.
bool HasAttention(const ModelSpec* model);
// The selective recompute modules that change anything on the model's layers (RecomputeBit mask):
// core_attn with attention, mla_up_proj with MLA, moe / moe_act with MoE layers, ...; 0 for nullptr.
uint32_t ApplicableRecomputeModules(const ModelSpec* model);
// The routed experts of the model's MoE layers (the first MoE layer's; 0: a dense model).
int64_t ModelExperts(const ModelSpec* model);
// What BuildCostTable needs of its source: a cluster; a model or a profile;
// for analytic costs the cluster's peak for the model's dtype. InvalidArgument
// naming the file, the field and the fix.
Status CheckCostSource(const CostSource& src);
// The point a cost table is costed at.
struct TableShape {
  int64_t microbatch = 1, tp = 1;
  int64_t cp = 1;   // context-parallel size
  bool sp = false;  // sequence parallelism (only with tp > 1)
  Recompute recompute = Recompute::kNone;
  int64_t ep = 1, etp = 1;  // expert-parallel / expert tensor-parallel sizes (MoE layers)
  // Selective recompute's modules (RecomputeBit mask; docs/cost_model.md section 5, "Recompute modules").
  uint32_t recompute_modules = kDefaultRecomputeModules;
};
// Per-layer costs at (microbatch, tp, cp, sp, recompute, ep, etp) (docs/cost_model.md section 2,
// "Expert parallelism"). InvalidArgument for ep > 1 or etp > 1 with a profile, and for an MoE
// model at tp > 1 without sequence parallelism (Megatron-Core asserts it).
// NotFound naming the profile and layer when a profile has no timing at tp; InvalidArgument
// for a profile asked for cp > 1 or SP (it measured neither).
Status BuildCostTable(const CostSource& src, const TableShape& shape, const CostOptions& options, CostTable* out);
// The same at cp = 1 without SP.
Status BuildCostTable(const CostSource& src, int64_t microbatch, int64_t tp, Recompute recompute,
                      const CostOptions& options, CostTable* out);

// Ring (hierarchical when spanning levels) all-reduce of `bytes` over a group
// whose members sit `members_per_level[l]` per level-l unit (innermost first).
// T = sum_l 2 (c_l - 1)/c_l * (bytes / prod_{j<l} c_j) / B_l + 2 (c_l - 1) alpha_l.
// `use`: kGradient (a data-parallel gradient all-reduce, after a backward) takes a level's
// after-compute curve where the comm profile has one (TopologyLevel::measured_grad_allreduce);
// kTensorParallel (a layer's output, just computed) the warm curve where it has one besides the
// cold (TopologyLevel::measured_tp_allreduce).
enum class AllReduceUse { kTensorParallel, kGradient };
double AllReduceSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members_per_level,
                        AllReduceUse use = AllReduceUse::kTensorParallel);
// Time at `bytes` on a measured curve of (bytes, seconds) points in increasing size: log-log
// interpolation between neighbours, the smallest point's time below the range and the largest
// point's bandwidth above it; 0 for an empty curve.
double MeasuredSeconds(const std::vector<std::pair<double, double>>& points, double bytes);
// Members per level of a group of `size` ranks spaced `stride` apart in rank order.
std::vector<int64_t> GroupSpread(const ClusterSpec& cluster, int64_t size, int64_t stride);
// Members per level of the group {first, first + stride, ..., first + (size-1) stride}
// at any offset: at level l, the most level-(l-1) units (ranks at level 0)
// that one level-l unit holds. Equals GroupSpread when first = 0 and the
// group is aligned; uneven groups are charged their fullest unit.
std::vector<int64_t> GroupSpreadAt(const ClusterSpec& cluster, int64_t first, int64_t size, int64_t stride);
// Ring reduce-scatter and all-gather of `bytes` (the whole buffer, each rank ends with or starts
// from bytes / n): each is one half of the ring all-reduce, (n-1)/n M / B + (n-1) alpha per level.
double ReduceScatterSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members_per_level,
                            AllReduceUse use = AllReduceUse::kTensorParallel);
double AllGatherSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members_per_level,
                        AllReduceUse use = AllReduceUse::kTensorParallel);
// All-to-all (expert parallelism's token dispatch or combine) in which every rank of the group
// sends `bytes_per_rank` in all, spread evenly over the group's ranks (its own share stays), on a
// group spread `members_per_level` (innermost first; GroupSpread). The bytes leaving a rank's
// level-(l-1) unit (a GPU for l = 0) all cross level l:
//   D_l = bytes_per_rank (N - U_{l-1}) / N, U_l = prod_{j<=l} c_j, U_{-1} = 1, N = U_top,
// and the levels' links carry their shares at once:
//   T = max over levels with c_l > 1 of [ D_l / B_l + (c_l - 1) alpha_l ],
// where a level with a measured all-to-all curve (TopologyLevel::measured_alltoall, g ranks)
// takes the curve's time at the size whose crossing share is D_l: D_l g / (g - 1).
// Dispatch (docs/cost_model.md section 3, "All-to-all"): `bytes_per_rank` holds top_k copies of each token.
// Megatron's alltoall dispatcher (NCCL all_to_all_single) sends every copy to its expert's rank, so each
// level carries its whole share. A deduplicating dispatcher (DeepSeek's kernels, DeepEP, HybridEP:
// Megatron's flex) sends a token once to each node (level-0 unit) it reaches and forwards it to the
// experts there over the node's links: a level l >= 1 carries node_copies / top_k of its share, node_copies
// being the nodes one token reaches (MoeNodeCopies, dp_solver/moe_cost.h), and the levels' times add up
// (a copy's NVLink hop waits for its network hop; the engine's moe_flex_hops, serial_hops) or, pipelined, the
// slowest sets the time as in the plain all-to-all, whose levels run at once. Those dispatchers send a token
// once to each GPU it reaches as well (DeepEP's and HybridEP's is_token_in_rank: the receiving rank permutes it
// to its local experts), so the node level carries rank_copies / top_k of its share, rank_copies being the GPUs
// one token reaches (MoeNodeCopies over the EP group's GPUs).
struct AllToAllRouting {
  int64_t top_k = 1;        // copies of each token in bytes_per_rank (routed experts per token)
  double node_copies = 0;   // nodes one token reaches with a deduplicating dispatcher; 0: every copy sent
  bool serial_hops = true;  // with node_copies: the levels' times add (false: pipelined, the slowest sets it)
  double rank_copies = 0;   // GPUs one token reaches with a deduplicating dispatcher; 0: every copy sent
  // The group's ranks where its units are not all full (GroupSpread charges EP 12 on 8-GPU nodes as {8, 2}: 16
  // slots for 12 ranks); 0: the product of members_per_level. Each level is then charged for the ranks of its
  // emptiest unit, which send the most of their bytes out of it (the 4 ranks of the second node: 8 of 12 shares).
  int64_t ranks = 0;
  // Per level l >= 1, the fewest of the group's ranks in one level-(l-1) unit it touches (GroupUnits), for groups
  // not aligned to their units (ranks 6-11 on 8-GPU nodes: 2 and 4); empty: the units fill in rank order from the
  // group's first rank, and the last holds what is left.
  std::vector<int64_t> fewest = {};
};
// The group {first, first + stride, ..., first + (size - 1) stride} by listing its ranks: per level, the most
// (*fullest, as GroupSpreadAt) and the fewest (*fewest) members one unit of the level below holds of it; level 0's
// entries count ranks per level-0 unit, level l's count level-(l-1) units per level-l unit for *fullest, and ranks
// per level-(l-1) unit for *fewest (AllToAllRouting::fewest).
void GroupUnits(const ClusterSpec& cluster, int64_t first, int64_t size, int64_t stride, std::vector<int64_t>* fullest,
                std::vector<int64_t>* fewest);
double AllToAllSeconds(const ClusterSpec& cluster, double bytes_per_rank, const std::vector<int64_t>& members_per_level,
                       const AllToAllRouting& routing = {});
// Replaces the cluster file's figures of the levels a collective profile
// measured: level 0 from its "node" curves, level 1 from its "cluster"
// curves. All-reduce busbw -> bandwidth_GBps, its alpha / (2 (g - 1)) ->
// latency_us (the ring's 2 (g - 1) steps), send/recv busbw ->
// p2p_bandwidth_GBps, the all-to-all curve -> measured_alltoall. Appends one note per level
// saying which source it used.
void ApplyCommCurves(const Profile& comm, const std::string& comm_path, ClusterSpec* cluster,
                     std::vector<std::string>* notes);

// Send/recv of `bytes` between two ranks `distance` apart: bytes / B_p2p(level) + alpha(level).
double P2PSeconds(const ClusterSpec& cluster, double bytes, int64_t rank_a, int64_t rank_b);

}  // namespace planner
