#include "dp_solver/moe_cost.h"

#include <algorithm>

#include "dp_solver/cost_model.h"

namespace planner {

double MoeAllToAllSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members, int64_t top_k, int64_t unit_limit) {
  const size_t levels = std::min(members.size(), c.levels.size());
  double n = 1;
  for (size_t l = 0; l < levels; ++l) n *= static_cast<double>(std::max<int64_t>(1, members[l]));
  if (!(bytes > 0) || n <= 1) return 0;
  const double c0 = static_cast<double>(std::max<int64_t>(1, members[0]));
  // Node-limited routing applies only when the group spans more than one level-0 unit and the
  // limit is below the copies a token sends.
  const bool limited = unit_limit > 0 && unit_limit < top_k && n > c0;
  const double cap = limited ? bytes * static_cast<double>(unit_limit) / static_cast<double>(std::max<int64_t>(1, top_k)) : bytes;
  double worst = 0, latency = 0, inner = 1;  // inner: U_{l-1}, the members inside one level-(l-1) unit
  for (size_t l = 0; l < levels; ++l) {
    const double cl = static_cast<double>(std::max<int64_t>(1, members[l]));
    double share = 0;
    if (l == 0) share = limited ? bytes * (c0 - 1) / c0 : bytes * (c0 - 1) / n;
    else share = std::min(cap, bytes * (n - inner) / n);
    if (cl > 1 || (l > 0 && n > inner)) {
      worst = std::max(worst, share / (c.levels[l].bandwidth_GBps * 1e9));
      if (cl > 1) latency = c.levels[l].latency_us * 1e-6;  // the outermost level spanned
    }
    inner *= cl;
  }
  return worst + latency;
}

int64_t MoeUnitLimit(const Layer& l, int64_t units) {
  const int64_t groups = l.attrs.Int("route_groups", 0), limit = l.attrs.Int("route_group_limit", 0);
  if (groups <= 0 || limit <= 0 || units <= 1) return 0;
  const int64_t per_group = std::max<int64_t>(1, (units + groups - 1) / groups);
  const int64_t reach = std::min(units, limit * per_group);
  return reach < l.top_k ? reach : 0;
}

MoeLayerCost MoeLayerCosts(const ClusterSpec& c, const Layer& l, const MoeShape& s) {
  MoeLayerCost m;
  if (l.experts <= 0) return m;
  const double capacity = l.attrs.Real("capacity_factor", 0);
  // Dropless: the busiest EP rank gets `imbalance` x the mean of tokens, and every rank waits for
  // it. With a capacity the layer's FLOPs already count c x tokens (padded) and nothing exceeds it;
  // at ep = 1 every rank computes its own tokens' copies whatever the routing.
  m.token_factor = capacity > 0 || s.ep <= 1 ? 1.0 : std::max(1.0, s.imbalance);
  const double ep = static_cast<double>(s.ep), etp = static_cast<double>(s.etp);
  m.params = l.expert_params / (ep * etp);
  // Each rank dispatches the top_k copies of its s / (t cp) tokens (sequence parallelism with t > 1).
  const double per_rank = s.microbatch * l.moe_dispatch_bytes / (s.tp * s.cp) * (capacity > 0 ? capacity : m.token_factor);
  if (s.ep > 1) {
    const std::vector<int64_t> spread = GroupSpread(c, s.ep, s.etp);  // EP ranks sit etp apart in the fold
    int64_t units = 1;
    for (size_t i = 1; i < spread.size(); ++i) units *= spread[i];
    m.a2a_pass_s = 2 * MoeAllToAllSeconds(c, per_rank, spread, l.top_k, MoeUnitLimit(l, units));  // dispatch + combine
  }
  if (s.etp > 1) {
    // Megatron's alltoall dispatcher with expert TP: all-gather the received tokens over the ETP
    // group before the experts, reduce-scatter their outputs after (reversed in backward).
    const std::vector<int64_t> group = GroupSpread(c, s.etp, 1);
    m.etp_pass_s = AllGatherSeconds(c, etp * per_rank, group) + ReduceScatterSeconds(c, etp * per_rank, group);
  }
  return m;
}

double MoeExposed(double a2a_s, double compute_s, bool overlap) { return overlap ? std::max(0.0, a2a_s - compute_s) : a2a_s; }

}  // namespace planner
