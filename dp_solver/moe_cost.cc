#include "dp_solver/moe_cost.h"

#include <algorithm>
#include <numeric>

#include "dp_solver/cost_model.h"

namespace planner {

namespace {

// Expected distinct units among `draws` items drawn uniformly without replacement from `items` spread evenly over
// `units`: units (1 - C(items - items / units, draws) / C(items, draws)).
double ExpectedDistinct(double units, double items, int64_t draws) {
  if (units <= 1) return units;
  const double per_unit = items / units;
  double missed = 1;  // P(a given unit holds none of the draws)
  for (int64_t i = 0; i < draws && missed > 0; ++i)
    missed *= std::max(0.0, (items - per_unit - static_cast<double>(i)) / (items - static_cast<double>(i)));
  return units * (1 - missed);
}

}  // namespace

double MoeNodeCopies(const Layer& l, int64_t units) {
  if (units <= 1) return 1;
  const double u = static_cast<double>(units), experts = static_cast<double>(l.experts);
  const int64_t groups = l.attrs.Int("route_groups", 0), limit = l.attrs.Int("route_group_limit", 0);
  if (groups <= 0 || limit <= 0 || limit >= groups) return ExpectedDistinct(u, experts, l.top_k);
  const double g = static_cast<double>(groups);
  // Several groups per node: the nodes of the token's `limit` groups (each chosen group holds one of its best
  // experts by construction: groups are ranked by their experts' affinities).
  if (groups >= units) return ExpectedDistinct(u, g, limit);
  // A group spans units / groups nodes: the token's experts fall on the limit groups' nodes.
  const double reach = std::min(u, static_cast<double>(limit) * u / g);
  return ExpectedDistinct(reach, experts * reach / u, l.top_k);
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
    // EP groups are consecutive blocks of ep x etp ranks (EP ranks etp apart in the fold); where a block does not
    // align with the nodes some groups straddle two (EP 6 on 8-GPU nodes: ranks 6-11 as 2 + 4). Every group runs in
    // step with the others, so the slowest sets the time: the worst over the offsets, which repeat every
    // lcm(ep x etp, node) ranks.
    const int64_t block = s.ep * s.etp, node = std::max<int64_t>(1, c.GpusPerUnit(0));
    // Blocks that tile the nodes (or whole nodes) are all alike: the one at rank 0 stands for every group.
    const bool aligned = node % block == 0 || block % node == 0;
    const int64_t period = aligned ? block : std::min<int64_t>(std::lcm(block, node), 64 * block);
    const double rank_copies = s.dedup ? MoeNodeCopies(l, s.ep) : 0;  // the GPUs as units: E / ep experts each
    std::vector<int64_t> spread, fewest;
    for (int64_t first = 0; first < period; first += block) {
      GroupUnits(c, first, s.ep, s.etp, &spread, &fewest);
      int64_t units = 1;
      for (size_t i = 1; i < spread.size(); ++i) units *= spread[i];
      const double node_copies = s.dedup ? MoeNodeCopies(l, units) : 0;
      AllToAllRouting route{l.top_k, node_copies, s.serial_hops, rank_copies, s.ep, fewest};
      m.a2a_pass_s = std::max(m.a2a_pass_s, 2 * AllToAllSeconds(c, per_rank, spread, route));  // dispatch + combine
    }
  }
  if (!s.dedup && l.experts > s.ep) m.regroup_bytes = 2 * 2 * etp * per_rank;  // sort and unsort, read + write
  if (s.etp > 1) {
    // Megatron's alltoall dispatcher with expert TP: all-gather the received tokens over the ETP
    // group before the experts, reduce-scatter their outputs after (reversed in backward).
    const std::vector<int64_t> group = GroupSpread(c, s.etp, 1);
    m.etp_pass_s = AllGatherSeconds(c, etp * per_rank, group) + ReduceScatterSeconds(c, etp * per_rank, group);
  }
  return m;
}

double MoeExposed(double a2a_s, double compute_s, bool overlap, double hidden_share) {
  if (!overlap) return a2a_s;
  // The communication kernels hold kOverlapCommSmShare of the SMs while they run: compute under
  // them progresses at 1 - share. Of the all-to-all T_c only hidden_share h runs beside the compute
  // (the engine's measured share; the rest waits on it or is waited on); that part T_o = h T_c and
  // the compute start together; compute ends at T_p + share T_o when T_o ends first
  // (T_o <= T_p / (1 - share)), else T_o sets the time.
  const double beside = hidden_share * a2a_s;
  return (a2a_s - beside) + std::max(kOverlapCommSmShare * beside, beside - compute_s);
}

}  // namespace planner
