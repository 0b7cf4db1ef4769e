// Expert parallelism's costs (docs/cost_model.md, "Expert parallelism"): the token all-to-all
// of an MoE layer (AllToAllSeconds, cost_model.h) on the topology levels its expert-parallel group
// spans (with DeepSeek's node-limited routing), the expert tensor-parallel collectives, and what one MoE layer adds
// to a cost-table row at (microbatch, tp, cp, ep, etp). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/cluster_spec.h"
#include "spec/layer.h"

namespace planner {

// The level-0 units (nodes) one token's top_k copies reach, expected, when the EP group spans `units_spanned`
// of them, each holding experts / units_spanned of the experts: the expected distinct units of top_k experts
// drawn uniformly without replacement, U (1 - C(E - E/U, k) / C(E, k)); under node-limited routing (each token
// sent to route_group_limit M of route_groups G groups, each chosen group holding one of its best experts: the
// groups are ranked by their experts' affinities) the distinct nodes of M groups drawn from G when a node holds
// G / U >= 1 groups, else the first formula over the M U / G nodes the chosen groups span. What a
// deduplicating dispatcher sends across the nodes per token (AllToAllRouting::node_copies).
double MoeNodeCopies(const Layer& l, int64_t units_spanned);

// The parallel point and options an MoE layer is costed at.
struct MoeShape {
  double microbatch = 1, tp = 1, cp = 1;
  int64_t ep = 1, etp = 1;
  double imbalance = 1;     // busiest EP rank's tokens / the mean (dropless routing); `--moe-imbalance`
  bool overlap = false;     // all-to-all hidden behind the layer's compute of the same pass; `--moe-overlap`
  bool dedup = false;       // a deduplicating dispatcher (`--moe-dispatcher flex`): one copy per node reached
  bool serial_hops = true;  // with dedup: its network and NVLink hops add up (the engine's moe_flex_hops)
};

// What one MoE layer's experts cost per microbatch on one GPU, per pass (forward, or backward).
struct MoeLayerCost {
  double token_factor =
      1;                  // tokens the busiest rank handles / the balanced count: imbalance (dropless) or 1 (capacity)
  double a2a_pass_s = 0;  // dispatch + combine all-to-all of one pass
  double etp_pass_s = 0;  // expert TP all-gather + reduce-scatter of one pass (etp > 1)
  // HBM bytes one pass reads and writes regrouping the received copies by local expert: an all-to-all dispatcher
  // (not dedup) on a GPU with more than one expert sorts what it received into one chunk per local expert after
  // dispatch and back before combine, read + write each (Megatron's sort_chunks_by_idxs, "permutation 2";
  // torchtitan's permute indices; DeepSpeed's per-expert chunks); a deduplicating dispatcher's receiving rank
  // permutes its tokens to its experts once, the layer's permute (docs/cost_model.md, "Expert parallelism").
  double regroup_bytes = 0;
  double params = 0;  // expert parameters on this GPU: expert_params / (ep etp)
};
// Zero for a layer without experts.
MoeLayerCost MoeLayerCosts(const ClusterSpec& cluster, const Layer& l, const MoeShape& s);

// The share of a GPU's SMs the all-to-all kernels take while they overlap compute: DeepSeek-V3
// dedicates 20 of the H800's 132 SMs to dispatch and combine (report §3.2.2; DeepEP's default).
inline constexpr double kOverlapCommSmShare = 20.0 / 132.0;

// Exposed all-to-all of one pass: all of it, or with overlap (1 - h) T_c + max(share h T_c, h T_c - T_p):
// the part h of T_c the engine runs beside compute (its measured share; 1: all) less what the pass's
// compute T_p hides, at least the compute the communication's SMs take away, and the rest exposed.
double MoeExposed(double a2a_s, double compute_s, bool overlap, double hidden_share = 1);

}  // namespace planner
