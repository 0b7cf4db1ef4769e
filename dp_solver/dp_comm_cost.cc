#include "dp_solver/dp_comm_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace planner {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The level a flat collective over the group is bound by: of the levels with more than one member,
// the one with the least bandwidth (the outer one on a tie); -1 when the group is one rank.
int SlowestLevel(const ClusterSpec& c, const std::vector<int64_t>& members) {
  int slowest = -1;
  for (size_t l = 0; l < members.size() && l < c.levels.size(); ++l) {
    if (members[l] <= 1) continue;
    if (slowest < 0 || c.levels[l].bandwidth_GBps <= c.levels[static_cast<size_t>(slowest)].bandwidth_GBps)
      slowest = static_cast<int>(l);
  }
  return slowest;
}

double Ranks(const std::vector<int64_t>& members) {
  double n = 1;
  for (int64_t m : members) n *= static_cast<double>(std::max<int64_t>(1, m));
  return n;
}

// The measured gradient all-reduce time of `bytes` on level `lv` moved to n ranks (as AllReduceSeconds
// picks its curve for AllReduceUse::kGradient); negative when the level has no measured curve.
double MeasuredRing(const TopologyLevel& lv, double bytes, double n) {
  const MeasuredCurve* curve = &lv.measured_allreduce;
  if (lv.measured_grad_allreduce.usable() && bytes >= lv.measured_grad_allreduce.points.front().first)
    curve = &lv.measured_grad_allreduce;
  if (!curve->usable()) return -1;
  const double g = static_cast<double>(curve->group);
  return MeasuredSeconds(curve->points, bytes) * ((n - 1) / n) / ((g - 1) / g);
}

// The reduce-scatter + all-gather inside one machine of the group's c GPUs there (level 0 only).
double IntraNodeAllReduce(const ClusterSpec& c, double bytes, int64_t gpus) {
  if (gpus <= 1 || c.levels.size() < 2) return 0;
  std::vector<int64_t> inside(c.levels.size(), 1);
  inside[0] = gpus;
  return AllReduceSeconds(c, bytes, inside, AllReduceUse::kGradient);
}

// The bytes per second a summation streams its inputs at: the CPU machines' `sum_GBps`; without one
// `fallback_GBps` (0: unbounded, the summation never the bottleneck).
double SummationBps(const ClusterSpec& c, double fallback_GBps = 0) {
  const double GBps = c.cpu_machines.sum_GBps > 0 ? c.cpu_machines.sum_GBps : fallback_GBps;
  return GBps > 0 ? GBps * 1e9 : kInf;
}

}  // namespace

bool DpCommRunnable(const ClusterSpec& c, DpComm d) { return DpCommIsAllReduce(d) || c.cpu_machines.count > 0; }

std::vector<DpComm> RunnableDpComms(const ClusterSpec& c) {
  std::vector<DpComm> out;
  for (DpComm d : kAllDpComms) {
    if (DpCommRunnable(c, d)) out.push_back(d);
  }
  return out;
}

std::vector<DpComm> DefaultDpComms(const ClusterSpec& c) {
  std::vector<DpComm> out = {DpComm::kRingAllReduce, DpComm::kTreeAllReduce, DpComm::kHierAllReduce};
  if (c.cpu_machines.count > 0) {
    out.push_back(DpComm::kParameterServer);
    out.push_back(DpComm::kBytePS);
  }
  return out;
}

namespace {

// The level a flat (one-level) collective over `members` runs at: the slowest it spans, the group's
// ranks, and the measured time when the level has a curve (< 0: none, use alpha-beta).
struct FlatGroup {
  const TopologyLevel* level = nullptr;
  double n = 0, measured = -1;
};
FlatGroup Flat(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members) {
  FlatGroup f;
  const int l = SlowestLevel(c, members);
  if (l < 0) return f;
  f.level = &c.levels[static_cast<size_t>(l)];
  f.n = Ranks(members);
  f.measured = bytes > 0 ? MeasuredRing(*f.level, bytes, f.n) : -1;
  return f;
}

}  // namespace

double RingAllReduceSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members) {
  const FlatGroup f = Flat(c, bytes, members);
  if (f.level == nullptr) return 0;
  if (f.measured >= 0) return f.measured;
  const double n = f.n;
  // One flat ring: every edge carries 2(N-1)/N M. Inside a level the edge is a GPU's link; across
  // machines each node's network edge carries the ring's whole stream through the node's NICs (the
  // implementation spreads its channels over them, as NCCL does), not a GPU's 1/c share of them: the
  // NICs of the group's GPUs on the node (GroupMachines), and no faster than a GPU's node link.
  double edge_Bps = f.level->bandwidth_GBps * 1e9;
  if (f.level != &c.levels.front())
    edge_Bps = std::min(c.levels.front().bandwidth_GBps * 1e9, GroupMachines(c, members).network_Bps);
  return 2 * (n - 1) / n * bytes / edge_Bps + 2 * (n - 1) * f.level->latency_us * 1e-6;
}

double TreeAllReduceSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members) {
  const FlatGroup f = Flat(c, bytes, members);
  if (f.level == nullptr) return 0;
  if (f.measured >= 0) return f.measured;
  const double p = std::exp2(std::floor(std::log2(f.n) + 1e-12)), r = f.n - p;
  const double beta = 1.0 / (f.level->bandwidth_GBps * 1e9), alpha = f.level->latency_us * 1e-6;
  double t = 2 * std::log2(p) * alpha + 2 * (p - 1) / p * bytes * beta;
  if (r > 0) t += 2 * (alpha + bytes * beta);  // fold the r extra ranks in, hand them the result
  return t;
}

DpMachines GroupMachines(const ClusterSpec& c, const std::vector<int64_t>& members) {
  DpMachines m;
  if (c.levels.size() < 2) {  // one level: every rank is a machine with the level's (or network_GBps) bandwidth
    m.machines = static_cast<int64_t>(Ranks(members));
    m.network_Bps = c.NodeNetworkGBps() * 1e9;
    return m;
  }
  m.gpus_per_machine = members.empty() ? 1 : std::max<int64_t>(1, members[0]);
  m.machines = static_cast<int64_t>(Ranks(members) / static_cast<double>(m.gpus_per_machine));
  m.network_Bps =
      c.NodeNetworkGBps() * 1e9 * static_cast<double>(m.gpus_per_machine) / static_cast<double>(c.levels[0].size);
  return m;
}

double ParameterServerSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members, int64_t servers,
                              int64_t siblings) {
  if (servers < 1 || c.cpu_machines.count < 1) return kInf;
  const DpMachines m = GroupMachines(c, members);
  if (m.machines * m.gpus_per_machine <= 1) return 0;
  const double n = static_cast<double>(m.machines),
               k = static_cast<double>(servers) / static_cast<double>(std::max<int64_t>(1, siblings));
  const double server_bytes = n * bytes / k;
  // A server sums each key's pushes as they arrive, pipelined with the network as BytePS's summation
  // service is: the slowest of the worker's link, the server's link and the server's summation.
  const double sum_Bps = SummationBps(c);
  const double net =
      std::max({bytes / m.network_Bps, server_bytes / (c.cpu_machines.bandwidth_GBps * 1e9), server_bytes / sum_Bps});
  return IntraNodeAllReduce(c, bytes, m.gpus_per_machine) + net + 2 * c.NetworkLatencySeconds();
}

double ColocatedPsSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members) {
  const DpMachines m = GroupMachines(c, members);
  const double intra = IntraNodeAllReduce(c, bytes, m.gpus_per_machine);
  if (m.machines <= 1) return intra;
  const double n = static_cast<double>(m.machines);
  const double sum_Bps = SummationBps(c, c.hbm_bandwidth_GBps * c.hbm_efficiency);
  const double net = 2 * (n - 1) / n * bytes / m.network_Bps;  // push n-1 shards of M/n, pull them back summed
  return intra + std::max(net, bytes / sum_Bps) + 2 * c.NetworkLatencySeconds();
}

double BytePsPcieIntraSeconds(const ClusterSpec& c, double bytes, int64_t gpus) {
  if (gpus <= 1 || c.levels.empty()) return 0;
  const TopologyLevel& lv = c.levels[0];
  const double s = static_cast<double>(std::min<int64_t>(gpus, std::max<int64_t>(1, c.gpus_per_pcie_switch)));
  const double w = std::ceil(static_cast<double>(gpus) / s);
  if (!(c.pcie_GBps > 0)) return IntraNodeAllReduce(c, bytes, gpus);
  const double rs = (s - 1) / s * bytes / (c.pcie_GBps * 1e9) + (s - 1) * lv.latency_us * 1e-6;  // inside one switch
  const double copy = bytes / (c.pcie_GBps * 1e9);
  const double reduce = w * bytes / SummationBps(c);  // no sum_GBps: unbounded, 0
  return 2 * rs + 2 * copy + reduce;
}

double BytePsSeconds(const ClusterSpec& c, double bytes, const std::vector<int64_t>& members, int64_t servers,
                     int64_t siblings) {
  const DpMachines m = GroupMachines(c, members);
  const bool pcie = c.intra_node == IntraNode::kPcie && c.levels.size() > 1;
  // PCIe-only nodes: CPU-assisted aggregation where it beats the node's own reduce-scatter + all-gather.
  const double plain = IntraNodeAllReduce(c, bytes, m.gpus_per_machine);
  const double intra = pcie ? std::min(plain, BytePsPcieIntraSeconds(c, bytes, m.gpus_per_machine)) : plain;
  if (m.machines <= 1) return plain;
  const double k =
      static_cast<double>(std::max<int64_t>(0, servers)) / static_cast<double>(std::max<int64_t>(1, siblings));
  const double n = static_cast<double>(m.machines);
  const BytePsSplit split = BytePsSplitAt(n, k);
  const double sum_Bps = SummationBps(c);
  const double t_g =
      std::max((1 + (n - 2) * split.gpu_share) * bytes / m.network_Bps, n * split.gpu_share * bytes / sum_Bps);
  double t_c = 0;
  if (k > 0)
    t_c = std::max(n * split.cpu_share * bytes / (c.cpu_machines.bandwidth_GBps * 1e9),
                   n * split.cpu_share * bytes / sum_Bps);
  return intra + std::max(t_g, t_c) + 2 * c.NetworkLatencySeconds();
}

double DpSyncSeconds(const ClusterSpec& c, DpComm d, double bytes, const std::vector<int64_t>& members, int64_t servers,
                     int64_t siblings) {
  switch (d) {
    case DpComm::kRingAllReduce: return RingAllReduceSeconds(c, bytes, members);
    case DpComm::kTreeAllReduce: return TreeAllReduceSeconds(c, bytes, members);
    case DpComm::kHierAllReduce: return AllReduceSeconds(c, bytes, members, AllReduceUse::kGradient);
    case DpComm::kParameterServer:
      return servers < 1 ? ColocatedPsSeconds(c, bytes, members)
                         : ParameterServerSeconds(c, bytes, members, servers, siblings);
    case DpComm::kBytePS: return BytePsSeconds(c, bytes, members, servers, siblings);
  }
  return kInf;
}

}  // namespace planner
