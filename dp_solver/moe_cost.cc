#include "dp_solver/moe_cost.h"

#include <algorithm>

#include "dp_solver/cost_model.h"

namespace planner {

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
  const double per_rank =
      s.microbatch * l.moe_dispatch_bytes / (s.tp * s.cp) * (capacity > 0 ? capacity : m.token_factor);
  if (s.ep > 1) {
    const std::vector<int64_t> spread = GroupSpread(c, s.ep, s.etp);  // EP ranks sit etp apart in the fold
    int64_t units = 1;
    for (size_t i = 1; i < spread.size(); ++i) units *= spread[i];
    m.a2a_pass_s = 2 * AllToAllSeconds(c, per_rank, spread, {l.top_k, MoeUnitLimit(l, units)});  // dispatch + combine
  }
  if (s.etp > 1) {
    // Megatron's alltoall dispatcher with expert TP: all-gather the received tokens over the ETP
    // group before the experts, reduce-scatter their outputs after (reversed in backward).
    const std::vector<int64_t> group = GroupSpread(c, s.etp, 1);
    m.etp_pass_s = AllGatherSeconds(c, etp * per_rank, group) + ReduceScatterSeconds(c, etp * per_rank, group);
  }
  return m;
}

double MoeExposed(double a2a_s, double compute_s, bool overlap) {
  if (!overlap) return a2a_s;
  // The communication kernels hold kOverlapCommSmShare of the SMs while they run: compute under
  // them progresses at 1 - share. Both start together; compute ends at T_p + share T_c when the
  // all-to-all ends first (T_c <= T_p / (1 - share)), else the all-to-all sets the time.
  return std::max(kOverlapCommSmShare * a2a_s, a2a_s - compute_s);
}

}  // namespace planner
