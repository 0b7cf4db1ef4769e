// Expert parallelism's costs (docs/cost_model.md, "Expert parallelism"): the token all-to-all
// of an MoE layer on the topology levels its expert-parallel group spans (with DeepSeek's
// node-limited routing), the expert tensor-parallel collectives, and what one MoE layer adds
// to a cost-table row at (microbatch, tp, cp, ep, etp). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/cluster_spec.h"
#include "spec/layer.h"

namespace planner {

// All-to-all of `bytes_per_rank` from every rank of a group with members_per_level[l] members per
// level-l unit (innermost first, n = their product): each rank sends bytes / n to every other
// member. The bytes leaving a rank's level-(l-1) unit (its node, for l = 1) cross level l at
// that level's per-GPU bus bandwidth B_l, all levels at once:
//   T = max_l share_l / B_l + alpha(outermost level spanned),
//   share_0 = bytes (c_0 - 1) / n, share_l = bytes (n - U_{l-1}) / n (l >= 1), U_l = prod_{j<=l} c_j.
// `unit_limit` > 0 (DeepSeek's node-limited routing): one token's top_k copies reach at most
// unit_limit level-0 units, sent once to each (deduplicated, then forwarded inside the unit), so
// share_l <= bytes unit_limit / top_k for l >= 1 and share_0 = bytes (U_0 - 1) / U_0 (the forwarding).
double MoeAllToAllSeconds(const ClusterSpec& cluster, double bytes_per_rank, const std::vector<int64_t>& members_per_level,
                          int64_t top_k = 1, int64_t unit_limit = 0);

// The level-0 units (nodes) one token reaches at most under the layer's route groups: each token
// reaches route_group_limit of route_groups expert groups; with the group's `units_spanned`
// level-0 units each holding the same share of the experts, a group covers max(1, units / groups)
// units. 0: no limit (no route groups, or a limit that is not below the token's top_k).
int64_t MoeUnitLimit(const Layer& l, int64_t units_spanned);

// The parallel point and options an MoE layer is costed at.
struct MoeShape {
  double microbatch = 1, tp = 1, cp = 1;
  int64_t ep = 1, etp = 1;
  double imbalance = 1;   // busiest EP rank's tokens / the mean (dropless routing); `--moe-imbalance`
  bool overlap = false;   // all-to-all hidden behind the layer's compute of the same pass; `--moe-overlap`
};

// What one MoE layer's experts cost per microbatch on one GPU, per pass (forward, or backward).
struct MoeLayerCost {
  double token_factor = 1;    // tokens the busiest rank handles / the balanced count: imbalance (dropless) or 1 (capacity)
  double a2a_pass_s = 0;      // dispatch + combine all-to-all of one pass
  double etp_pass_s = 0;      // expert TP all-gather + reduce-scatter of one pass (etp > 1)
  double params = 0;          // expert parameters on this GPU: expert_params / (ep etp)
};
// Zero for a layer without experts.
MoeLayerCost MoeLayerCosts(const ClusterSpec& cluster, const Layer& l, const MoeShape& s);

// Exposed all-to-all of one pass: all of it, or with overlap what the pass's compute does not hide.
double MoeExposed(double a2a_s, double compute_s, bool overlap);

}  // namespace planner
