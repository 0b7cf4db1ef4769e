// Per-iteration gradient synchronisation of the data-parallel architectures
// (the seeds' comparison): flat ring, tree (recursive halving-doubling) and
// hierarchical all-reduce, a parameter server on k CPU machines, and BytePS
// (its optimal CPU/GPU summation split, CPU-assisted aggregation inside
// PCIe-only nodes). docs/cost_model.md, "Data-parallel communication
// architectures". Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dp_solver/cost_model.h"
#include "spec/cluster_spec.h"
#include "spec/dp_comm.h"

namespace planner {

// Whether the cluster can run `d`: ps and byteps need the cluster file's cpu_machines (byteps with
// k = 0 is the all-reduce and needs no servers, but is offered only where the cluster has CPU machines).
bool DpCommRunnable(const ClusterSpec& cluster, DpComm d);
// Every architecture the cluster can run, in kAllDpComms order.
std::vector<DpComm> RunnableDpComms(const ClusterSpec& cluster);
// The search's choices without --dp-comm: every architecture the cluster can run, the three
// all-reduces always, ps and byteps where the cluster declares CPU machines (docs/cost_model.md,
// "Data-parallel communication architectures").
std::vector<DpComm> DefaultDpComms(const ClusterSpec& cluster);
// The all-reduce family: ring, tree, hier (they also give reduce-scatter and all-gather, each half).
inline bool DpCommIsAllReduce(DpComm d) { return !DpCommUsesServers(d); }

// One flat ring over all N = prod(members) ranks; every step at the slowest level the group spans
// (the least bandwidth; a tie, the outer level): T = 2(N-1)/N M / B + 2(N-1) alpha, or that
// level's measured gradient all-reduce curve moved to N ranks where the comm profile has one.
double RingAllReduceSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members);
// Recursive halving reduce-scatter + recursive doubling all-gather (Rabenseifner; Thakur et al.
// 2005), flat at the slowest level: with p = 2^floor(log2 N) and r = N - p ranks folded in first
// and served last (one send of M each way, Thakur's non-power-of-two step):
//   T = 2 log2(p) alpha + 2(p-1)/p M / B + [r > 0] 2 (alpha + M / B).
// A measured level takes the ring's measured time (the curve is the library's own algorithm).
double TreeAllReduceSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members);

// The group as machines: c GPUs of the group in each machine (topology level 0 unit; one GPU on a
// one-level cluster), n machines, and the bandwidth the group's c GPUs have to the network.
struct DpMachines {
  int64_t gpus_per_machine = 1;  // c: members of the group inside one machine
  int64_t machines = 1;          // n
  double network_Bps = 0;        // c / GPUs per node x NodeNetworkGBps, bytes/s
};
DpMachines GroupMachines(const ClusterSpec& cluster, const std::vector<int64_t>& members);

// Parameter server on k dedicated CPU machines, the model sharded over them: the c GPUs of a
// machine reduce-scatter first (level 0), the machine pushes M and pulls M, each server receives and
// sends n M / k and sums n M / k bytes at sum_GBps after the pushes:
//   T = RS_0 + max(M / B_w, n M / (k B_s)) + n M / (k S) + 2 alpha + AG_0.
// `sibling_groups` G: the data-parallel groups that synchronise at the same time as this one and push
// to the same k servers (the group's ranks are G apart: its TP / EP siblings); each has k / G servers'
// worth of bandwidth, k / G in place of k in every formula here (the GPU side is the group's own).
double ParameterServerSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members,
                              int64_t servers, int64_t sibling_groups = 1);
// Parameter server co-located with the workers (the seed's "(b) Colocated mode"; ps with k = 0):
// a server process on each of the group's n machines owns 1/n of the model. After the c GPUs of a
// machine reduce-scatter (level 0), each machine pushes the n-1 shards it does not own and pulls
// them back summed, sending and receiving 2(n-1)/n M; its server sums the n copies of its M/n shard
// (M bytes of summands) at the node's memory bandwidth S (cpu_machines.sum_GBps where the cluster
// declares it, else hbm_bandwidth_GBps x hbm_efficiency), pipelined with the network as BytePS's:
//   T = RS_0 + max(2(n-1)/n M / B_w, M / S) + 2 alpha + AG_0,
// BytePsSeconds at k = 0 term for term (PCIe-only nodes aside) and, on a flat cluster with fast
// memory, the ring between machines with 2 alpha for its 2(n-1) alpha.
double ColocatedPsSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members);
// The servers `d` sums on: ps co-located runs with k = 0 (DpSyncSeconds then costs ColocatedPsSeconds).
inline int64_t DpServersFor(DpComm d, int64_t servers, bool ps_colocated) {
  return d == DpComm::kParameterServer && ps_colocated ? 0 : servers;
}

// BytePS with k CPU machines (k = 0: the all-reduce's split) over n machines, summation pipelined
// with the network (BytePS's multi-stage pipeline): split s = BytePsOptimalSplit(n, k),
//   t_g = max((1 + (n-2) s_gpu) M / B_w, n s_gpu M / S),  t_c = max(n s_cpu M / B_s, n s_cpu M / S),
//   T = intra + max(t_g, t_c) + 2 alpha,
// intra the node's reduce-scatter + all-gather (NVLink) or, on PCIe-only nodes, CPU-assisted
// aggregation (BytePsPcieIntraSeconds). n = 1: the intra-node all-reduce alone.
// The split at k / G servers is the same formula over a real k / G (BytePsOptimalSplit at integers).
double BytePsSeconds(const ClusterSpec& cluster, double bytes, const std::vector<int64_t>& members, int64_t servers,
                     int64_t sibling_groups = 1);
// CPU-assisted aggregation inside a PCIe-only node (OSDI'20 section 4.2): reduce-scatter inside each
// PCIe switch of s GPUs (at the GPUs' PCIe bandwidth P = pcie_GBps, never across switches), GPU->CPU
// copy (M per switch over its link to the CPU), CPU reduce of the w switches' copies (w M at sum_GBps),
// and after the network CPU->GPU copy and all-gather inside each switch:
//   intra = 2 [(s-1)/s M / P + (s-1) alpha_0] + 2 M / P + w M / S.
// BytePsSeconds takes it where it beats the node's own reduce-scatter + all-gather (level 0's busbw).
double BytePsPcieIntraSeconds(const ClusterSpec& cluster, double bytes, int64_t gpus_in_node);

// The per-iteration synchronisation of `bytes` of gradients under `d` (k = servers for ps / byteps);
// allreduce-hier is AllReduceSeconds(kGradient), bit for bit; ps with servers = 0 is co-located
// (ColocatedPsSeconds).
double DpSyncSeconds(const ClusterSpec& cluster, DpComm d, double bytes, const std::vector<int64_t>& members,
                     int64_t servers, int64_t sibling_groups = 1);

}  // namespace planner
