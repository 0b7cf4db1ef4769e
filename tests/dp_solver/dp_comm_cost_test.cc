// The data-parallel architectures' costs (dp_solver/dp_comm_cost.h) against the seeds' closed forms
// (the lecture's all-reduce / PS / BytePS slides, Thakur et al.'s halving-doubling), hand values on
// small instances, hier bit for bit against AllReduceSeconds, the cluster file's new keys, and the
// search choosing BytePS for VGG-16 on configs/clusters/byteps.yaml.
#include <algorithm>
#include <cmath>
#include <random>

#include "dp_solver/dp_comm_cost.h"
#include "dp_solver/search.h"
#include "spec/model_spec.h"
#include "test_util.h"

namespace planner {
namespace {

ClusterSpec Parse(const std::string& text) {
  ClusterSpec c;
  const Status s = ParseClusterSpec("c.yaml", text, &c);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return c;
}

std::string Error(const std::string& text) {
  ClusterSpec c;
  return ParseClusterSpec("c.yaml", text, &c).message();
}

const char* kHead = "name: t\ngpu: {name: g, peak_tflops: {fp16: 100}, memory_GiB: 80, hbm_bandwidth_GBps: 2000}\n";

// One level of ranks, each a machine (B = 10 GB/s, no latency), CPU machines of the same bandwidth.
ClusterSpec Flat(int64_t ranks, int64_t cpus, double sum_GBps) {
  return Parse(std::string(kHead) + "topology:\n  - {name: host, size: " + std::to_string(ranks) +
               ", bandwidth_GBps: 10}\ncpu_machines: {count: " + std::to_string(cpus) +
               ", bandwidth_GBps: 10, sum_GBps: " + std::to_string(sum_GBps) + "}\n");
}

// Two levels: nodes of 4 GPUs at 100 GB/s (alpha 2 us), 8 nodes at 10 GB/s per GPU (alpha 5 us).
ClusterSpec TwoLevel(const std::string& node_extra = "", const std::string& node_GBps = "100") {
  return Parse(std::string(kHead) + "topology:\n  - {name: node, size: 4, bandwidth_GBps: " + node_GBps +
               ", latency_us: 2" + node_extra +
               "}\n  - {name: cluster, size: 8, bandwidth_GBps: 10, latency_us: 5}\ncpu_machines: {count: 8, "
               "bandwidth_GBps: 40, sum_GBps: 1000}\n");
}

constexpr double kM = 1e9;  // bytes of gradients

TEST_CASE("allreduce-hier is AllReduceSeconds bit for bit (random groups on shipped and random clusters)") {
  std::mt19937 rng(17);
  std::vector<ClusterSpec> clusters;
  for (const char* f : {"dgx-a100.yaml", "dgx-h100.yaml", "byteps.yaml", "local-cpu.yaml"}) {
    ClusterSpec c;
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath(std::string("configs/clusters/") + f), &c));
    clusters.push_back(c);
  }
  clusters.push_back(TwoLevel());
  for (const ClusterSpec& c : clusters) {
    for (int i = 0; i < 50; ++i) {
      std::vector<int64_t> members;
      for (const auto& lv : c.levels)
        members.push_back(1 + static_cast<int64_t>(rng() % static_cast<unsigned>(lv.size)));
      const double bytes = std::ldexp(1.0, static_cast<int>(rng() % 34));
      CHECK(DpSyncSeconds(c, DpComm::kHierAllReduce, bytes, members, 0) ==
            AllReduceSeconds(c, bytes, members, AllReduceUse::kGradient));
    }
  }
}

TEST_CASE("ring: one flat ring at the slowest level the group spans; tree: halving-doubling's log2 N latency") {
  const ClusterSpec c = TwoLevel();
  // 12 ranks over 3 nodes: every edge carries 2(N-1)/N M; a node's network edge through its 4 NICs
  // (4 x 10 GB/s), the 5 us latency of the network per step.
  CHECK(RingAllReduceSeconds(c, kM, {4, 3}) == doctest::Approx(2.0 * 11 / 12 * kM / 40e9 + 22 * 5e-6).epsilon(1e-12));
  // One GPU per node: its own NIC's 10 GB/s.
  CHECK(RingAllReduceSeconds(c, kM, {1, 8}) == doctest::Approx(2.0 * 7 / 8 * kM / 10e9 + 14 * 5e-6).epsilon(1e-12));
  // Inside one node: the node's 100 GB/s and 2 us; equal to hier there.
  CHECK(RingAllReduceSeconds(c, kM, {4, 1}) == doctest::Approx(2.0 * 3 / 4 * kM / 100e9 + 6 * 2e-6).epsilon(1e-12));
  CHECK(RingAllReduceSeconds(c, kM, {4, 1}) ==
        doctest::Approx(AllReduceSeconds(c, kM, {4, 1}, AllReduceUse::kGradient)).epsilon(1e-12));
  // Hier runs its levels one after the other (the node's 2 (3/4) M at 100 GB/s, then 2 (2/3) M / 4 per GPU
  // at 10 GB/s); the flat ring pipelines them, so here, with the node's links only 2.5x its NICs, it wins.
  const double hier = 2.0 * 3 / 4 * kM / 100e9 + 6 * 2e-6 + 2.0 * 2 / 3 * kM / 4 / 10e9 + 4 * 5e-6;
  CHECK(AllReduceSeconds(c, kM, {4, 3}, AllReduceUse::kGradient) == doctest::Approx(hier).epsilon(1e-12));
  CHECK(RingAllReduceSeconds(c, kM, {4, 3}) < hier);
  // Tree, power of two (8 nodes, one GPU each): 2 log2(8) alpha + 2 (7/8) M / B.
  CHECK(TreeAllReduceSeconds(c, kM, {1, 8}) == doctest::Approx(6 * 5e-6 + 2.0 * 7 / 8 * kM / 10e9).epsilon(1e-12));
  // Non-power of two, 12 = 8 + 4: the folded ranks add one exchange of M each way.
  CHECK(TreeAllReduceSeconds(c, kM, {4, 3}) ==
        doctest::Approx(6 * 5e-6 + 2.0 * 7 / 8 * kM / 10e9 + 2 * (5e-6 + kM / 10e9)).epsilon(1e-12));
  // Latency terms alone (M = 0): ring 2(N-1) alpha, tree 2 log2 N alpha.
  CHECK(RingAllReduceSeconds(c, 0, {1, 8}) == doctest::Approx(14 * 5e-6).epsilon(1e-12));
  CHECK(TreeAllReduceSeconds(c, 0, {1, 8}) == doctest::Approx(6 * 5e-6).epsilon(1e-12));
  CHECK(RingAllReduceSeconds(c, 0, {1, 1}) == 0);
}

TEST_CASE("a measured level: ring and tree take its curve as hier does") {
  ClusterSpec c = TwoLevel();
  c.levels[1].measured_allreduce.points = {{1e6, 1e-3}, {1e9, 0.3}};
  c.levels[1].measured_allreduce.group = 2;
  const double hier = AllReduceSeconds(c, 5e8, {1, 8}, AllReduceUse::kGradient);
  CHECK(RingAllReduceSeconds(c, 5e8, {1, 8}) == hier);
  CHECK(TreeAllReduceSeconds(c, 5e8, {1, 8}) == hier);
  CHECK(hier ==
        doctest::Approx(MeasuredSeconds(c.levels[1].measured_allreduce.points, 5e8) * (7.0 / 8) / 0.5).epsilon(1e-12));
}

TEST_CASE("parameter server: max(M/B, nM/(kB)) + the summation, the server's nM/k the bottleneck") {
  const double S = 100;  // GB/s of summation
  for (int64_t k = 1; k <= 8; ++k) {
    const ClusterSpec c = Flat(8, 8, S);
    const double n = 8, kk = static_cast<double>(k);
    // The summation pipelined with the network: the slowest of the worker's link, the server's link
    // and the server's summation (here the server's link, 10 < 100 GB/s).
    const double want = std::max({kM / 10e9, n * kM / (kk * 10e9), n * kM / (kk * S * 1e9)});
    CHECK(ParameterServerSeconds(c, kM, {8}, k) == doctest::Approx(want).epsilon(1e-12));
    CHECK(ParameterServerSeconds(c, kM, {8}, k) == doctest::Approx(n / kk * kM / 10e9).epsilon(1e-12));
  }
  // More servers than workers: the workers' M / B bounds the network.
  const ClusterSpec many = Flat(4, 16, S);
  CHECK(ParameterServerSeconds(many, kM, {4}, 16) == doctest::Approx(kM / 10e9).epsilon(1e-12));
  // A slow summation (1 GB/s) is the bottleneck: n M / (k S).
  const ClusterSpec slow = Flat(8, 8, 1);
  CHECK(ParameterServerSeconds(slow, kM, {8}, 8) == doctest::Approx(8 * kM / (8 * 1e9)).epsilon(1e-12));
  CHECK(std::isinf(ParameterServerSeconds(many, kM, {4}, 0)));
  // Nodes of 4 GPUs: reduce-scatter inside the node first, then the machine (4 NICs of 10 GB/s) pushes M.
  const ClusterSpec two = TwoLevel();
  const double intra = 2 * (0.75 * kM / 100e9 + 3 * 2e-6);
  CHECK(ParameterServerSeconds(two, kM, {4, 8}, 2) ==
        doctest::Approx(intra + std::max({kM / 40e9, 8 * kM / (2 * 40e9), 8 * kM / (2 * 1000e9)}) + 2 * 5e-6)
            .epsilon(1e-12));
}

TEST_CASE("BytePS: k = 0 is the ring all-reduce between machines; the time falls as k grows until k = n") {
  const int64_t n = 8;
  const ClusterSpec c = Flat(n, 12, 1e6);  // summation far faster than the network
  CHECK(BytePsSeconds(c, kM, {n}, 0) == doctest::Approx(RingAllReduceSeconds(c, kM, {n})).epsilon(1e-12));
  CHECK(BytePsSeconds(c, kM, {n}, 0) == doctest::Approx(2.0 * (n - 1) / n * kM / 10e9).epsilon(1e-12));
  double last = BytePsSeconds(c, kM, {n}, 0);
  for (int64_t k = 1; k <= 12; ++k) {
    const double t = BytePsSeconds(c, kM, {n}, k), nn = n, kk = static_cast<double>(std::min(k, n));
    // Closed form: 2n(n-1)/(n^2 + kn - 2k) M / B, 1 x M / B from k = n on.
    CHECK(t == doctest::Approx(2 * nn * (nn - 1) / (nn * nn + kk * nn - 2 * kk) * kM / 10e9).epsilon(1e-9));
    if (k <= n) CHECK(t < last);
    else CHECK(t == doctest::Approx(last).epsilon(1e-12));
    last = t;
  }
  CHECK(last == doctest::Approx(kM / 10e9).epsilon(1e-12));
  // Against the plain PS with the same servers: BytePS is never slower (it can put work on GPU machines).
  for (int64_t k = 1; k <= n; ++k)
    CHECK(BytePsSeconds(c, kM, {n}, k) <= ParameterServerSeconds(c, kM, {n}, k) * (1 + 1e-12));
  // G sibling groups (TP ranks' groups) pushing to the same k servers at once: k / G servers each.
  CHECK(BytePsSeconds(c, kM, {n}, 8, 2) == doctest::Approx(BytePsSeconds(c, kM, {n}, 4)).epsilon(1e-12));
  CHECK(ParameterServerSeconds(c, kM, {n}, 8, 4) ==
        doctest::Approx(ParameterServerSeconds(c, kM, {n}, 2)).epsilon(1e-12));
  // k / G = 1/2: the split formula at a real k, 2n(n-1)/(n^2 + kn - 2k) M / B.
  CHECK(BytePsSeconds(c, kM, {n}, 1, 2) == doctest::Approx(2.0 * 8 * 7 / (64 + 4 - 1) * kM / 10e9).epsilon(1e-12));
  CHECK(BytePsSeconds(c, kM, {n}, 1, 2) > BytePsSeconds(c, kM, {n}, 1));
  // Slow summation binds the CPU machines: t_c = n s_cpu M / S (k = n = 8: M / S).
  const ClusterSpec slow = Flat(n, 8, 2);
  CHECK(BytePsSeconds(slow, kM, {n}, 8) == doctest::Approx(kM / 2e9).epsilon(1e-12));
}

TEST_CASE("ps co-located (k = 0): 2(n-1)/n M / B, BytePS with k = 0 and the ring between machines on a flat cluster") {
  for (int64_t n : {2, 3, 4, 8, 16}) {
    const double nn = static_cast<double>(n);
    const ClusterSpec c = Flat(n, 4, 1e6);  // summation far faster than the network
    const double want = 2 * (nn - 1) / nn * kM / 10e9;
    CHECK(ColocatedPsSeconds(c, kM, {n}) == doctest::Approx(want).epsilon(1e-12));
    CHECK(ColocatedPsSeconds(c, kM, {n}) == doctest::Approx(BytePsSeconds(c, kM, {n}, 0)).epsilon(1e-12));
    CHECK(ColocatedPsSeconds(c, kM, {n}) == doctest::Approx(RingAllReduceSeconds(c, kM, {n})).epsilon(1e-12));
    CHECK(DpSyncSeconds(c, DpComm::kParameterServer, kM, {n}, 0) == ColocatedPsSeconds(c, kM, {n}));
    // Below the dedicated PS with as many servers as machines' halves: nM/k per server at k < n.
    if (n >= 4) CHECK(ColocatedPsSeconds(c, kM, {n}) < ParameterServerSeconds(c, kM, {n}, n / 2));
    // Slow memory: the server's n shards of M/n (M bytes) at S bind it, pipelined with the network.
    const ClusterSpec slow = Flat(n, 4, 1);
    CHECK(ColocatedPsSeconds(slow, kM, {n}) == doctest::Approx(std::max(want, kM / 1e9)).epsilon(1e-12));
    CHECK(ColocatedPsSeconds(slow, kM, {n}) == doctest::Approx(BytePsSeconds(slow, kM, {n}, 0)).epsilon(1e-12));
  }
  // Nodes of 4 GPUs, 8 machines: the node's reduce-scatter + all-gather, then 2(n-1)/n M over the machine's
  // 4 x 10 GB/s, 2 alpha of the network; equal to BytePS at k = 0; on the ring's latency the two differ.
  const ClusterSpec two = TwoLevel();
  const double intra = 2 * (0.75 * kM / 100e9 + 3 * 2e-6);
  CHECK(ColocatedPsSeconds(two, kM, {4, 8}) ==
        doctest::Approx(intra + 2 * 7.0 / 8 * kM / 40e9 + 2 * 5e-6).epsilon(1e-12));
  CHECK(ColocatedPsSeconds(two, kM, {4, 8}) == doctest::Approx(BytePsSeconds(two, kM, {4, 8}, 0)).epsilon(1e-12));
  // One machine: the node's all-reduce alone; no CPU machines: the summation at the GPUs' HBM (2000 x 0.8 GB/s).
  CHECK(ColocatedPsSeconds(two, kM, {4, 1}) == AllReduceSeconds(two, kM, {4, 1}, AllReduceUse::kGradient));
  const ClusterSpec nocpu = Parse(std::string(kHead) + "topology:\n  - {name: host, size: 4, bandwidth_GBps: 1000}\n");
  CHECK(ColocatedPsSeconds(nocpu, kM, {4}) == doctest::Approx(std::max(1.5 * kM / 1000e9, kM / 1600e9)).epsilon(1e-12));
  CHECK(DpServersFor(DpComm::kParameterServer, 8, true) == 0);
  CHECK(DpServersFor(DpComm::kBytePS, 8, true) == 8);
  CHECK(DpServersFor(DpComm::kParameterServer, 8, false) == 8);
}

TEST_CASE("BytePS on nodes: NVLink reduce-scatter first; PCIe-only nodes: CPU-assisted aggregation") {
  const ClusterSpec nv = TwoLevel();
  const double intra = 2 * (0.75 * kM / 100e9 + 3 * 2e-6);
  const BytePsSplit s = BytePsOptimalSplit(8, 4);
  const double t_g = (1 + 6 * s.gpu_share) * kM / 40e9, t_c = 8 * s.cpu_share * kM / 40e9;
  CHECK(BytePsSeconds(nv, kM, {4, 8}, 4) == doctest::Approx(intra + std::max(t_g, t_c) + 2 * 5e-6).epsilon(1e-12));
  CHECK(t_g == doctest::Approx(t_c).epsilon(1e-12));  // the optimal split balances them (same bandwidth)
  // One machine: the node's all-reduce alone (= hier).
  CHECK(BytePsSeconds(nv, kM, {4, 1}, 4) == AllReduceSeconds(nv, kM, {4, 1}, AllReduceUse::kGradient));
  // PCIe-only: 2 switches of 2 GPUs at 16 GB/s PCIe, the node's cross-switch ring at 5 GB/s, CPU summation at 1000 GB/s.
  const ClusterSpec pcie = TwoLevel(", intra_node: pcie, pcie_GBps: 16, gpus_per_pcie_switch: 2", "5");
  const double assisted = 2 * (0.5 * kM / 16e9 + 1 * 2e-6) + 2 * kM / 16e9 + 2 * kM / 1000e9;
  const double plain = 2 * (0.75 * kM / 5e9 + 3 * 2e-6);
  CHECK(assisted == doctest::Approx(0.1895 + 4e-6).epsilon(1e-12));
  CHECK(plain == doctest::Approx(0.300 + 12e-6).epsilon(1e-12));
  CHECK(BytePsPcieIntraSeconds(pcie, kM, 4) == doctest::Approx(assisted).epsilon(1e-12));
  CHECK(BytePsSeconds(pcie, kM, {4, 8}, 4) == doctest::Approx(assisted + std::max(t_g, t_c) + 2 * 5e-6).epsilon(1e-12));
  // With a fast node ring (100 GB/s) the plain reduce-scatter + all-gather is kept.
  const ClusterSpec fast = TwoLevel(", intra_node: pcie, pcie_GBps: 16, gpus_per_pcie_switch: 2");
  CHECK(BytePsSeconds(fast, kM, {4, 8}, 4) == doctest::Approx(intra + std::max(t_g, t_c) + 2 * 5e-6).epsilon(1e-12));
}

TEST_CASE("cluster files: cpu_machines and the node's keys, derived network bandwidth, one error line per mistake") {
  ClusterSpec dgx;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &dgx));
  CHECK(dgx.NodeNetworkGBps() == doctest::Approx(24.0 * 8));  // per-GPU level-1 bandwidth x GPUs per node
  CHECK(dgx.cpu_machines.count == 0);
  CHECK(RunnableDpComms(dgx).size() == 3);
  ClusterSpec b;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/byteps.yaml"), &b));
  CHECK(b.cpu_machines.count == b.levels[1].size);  // as many CPU machines as GPU machines
  CHECK(b.NodeNetworkGBps() == doctest::Approx(b.levels[1].bandwidth_GBps * 8));
  CHECK(RunnableDpComms(b).size() == 5);
  const ClusterSpec local = Flat(2, 2, 5);
  CHECK(GroupMachines(local, {2}).machines == 2);
  const std::string topo = "topology:\n  - {name: node, size: 4, bandwidth_GBps: 100";
  const std::string lvl1 = "}\n  - {name: c, size: 2, bandwidth_GBps: 10}\n";
  CHECK(Error(kHead + topo + lvl1 + "cpu_machines: {count: 2, bandwith_GBps: 1, sum_GBps: 1}\n") ==
        "c.yaml:6: field 'cpu_machines.bandwith_GBps': unknown key 'bandwith_GBps', did you mean 'bandwidth_GBps'?");
  CHECK(Error(kHead + topo + lvl1 + "cpu_machines: {count: 0, bandwidth_GBps: 1, sum_GBps: 1}\n")
            .find("field 'cpu_machines.count'") != std::string::npos);
  CHECK(Error(kHead + topo + lvl1 + "cpu_machines: {count: 2, bandwidth_GBps: 1}\n")
            .find("field 'cpu_machines.sum_GBps'") != std::string::npos);
  CHECK(Error(kHead + topo + lvl1 + "cpu_machines: [1]\n").find("field 'cpu_machines'") != std::string::npos);
  CHECK(Error(kHead + topo + ", intra_node: nvlnk" + lvl1).find("field 'topology[0].intra_node'") != std::string::npos);
  CHECK(Error(kHead + topo + ", intra_node: pcie" + lvl1).find("field 'topology[0].pcie_GBps': missing") !=
        std::string::npos);
  CHECK(Error(kHead + topo + ", pcie_GBps: 16" + lvl1).find("add 'intra_node: pcie'") != std::string::npos);
  CHECK(Error(kHead + topo + ", intra_node: pcie, pcie_GBps: 16, gpus_per_pcie_switch: 3" + lvl1)
            .find("does not divide the node's 4 GPUs") != std::string::npos);
  CHECK(Error(kHead + topo + "}\n  - {name: c, size: 2, bandwidth_GBps: 10, network_GBps: 5}\n")
            .find("field 'topology[1].network_GBps': describes a node") != std::string::npos);
  CHECK(Error(kHead + topo + ", network_GBps: -1" + lvl1).find("field 'topology[0].network_GBps'") !=
        std::string::npos);
}

struct Vgg {
  ModelSpec model;
  ClusterSpec cluster;
  Vgg() {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/vgg16.yaml"), &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/byteps.yaml"), &cluster));
  }
  Status Solve(const SearchOptions& o, Plan* p) const {
    CostSource s;
    s.model = &model;
    s.cluster = &cluster;
    return SolveAuto(s, o, p);
  }
};

double Seconds(const Plan& p, const std::string& name) {
  for (const auto& [n, s] : p.predicted.dp_comm_seconds) {
    if (n == name) return s;
  }
  return -1;
}

TEST_CASE(
    "VGG-16 on byteps.yaml (64 V100, 8 CPU machines): the search picks BytePS, below the all-reduces by the closed "
    "forms") {
  Vgg f;
  SearchOptions o;
  o.gpus = 64;
  o.pp = {1};
  o.schedules = {Schedule::k1F1B};
  o.ps_servers = 4;
  Plan p;
  REQUIRE_OK(f.Solve(o, &p));
  REQUIRE(p.dp == 64);
  CHECK(p.dp_comm == DpComm::kBytePS);
  CHECK(p.dp_servers == 4);
  REQUIRE(p.predicted.dp_comm_seconds.size() == 5);
  const double M = f.model.TotalParams() * 4;  // fp32 gradients
  const double intra = 2 * (7.0 / 8 * M / 120e9 + 7 * 10e-6);
  // n = 8 GPU machines, k = 4 CPU machines: BytePS moves 2n(n-1)/(n^2+kn-2k) M = 112/88 M per
  // machine; the ps servers n M / k = 2 M each; the ring between machines 2(n-1)/n M.
  const double byteps = intra + 112.0 / 88 * M / 12.5e9 + 2 * 15e-6;
  const double ps = intra + 2 * M / 12.5e9 + 2 * 15e-6;
  const double hier = intra + 2 * 7.0 / 8 * (M / 8) / 1.5625e9 + 14 * 15e-6;
  // The flat ring: every edge 2(N-1)/N M, a node's network edge through its one 12.5 GB/s NIC.
  const double ring = 2 * 63.0 / 64 * M / 12.5e9 + 126 * 15e-6;
  // Every bucket past the first (max(40M, 1M x 64) parameters each) adds a call's latency: the all-reduce
  // family's as NCCL pays it (hier's steps), ps and byteps their own (one byte's time; 1e-6 covers its bytes).
  const double calls = std::ceil(f.model.TotalParams() / 64e6) - 1;
  REQUIRE(calls == 2);
  const double lat_ar = 2 * 7 * 10e-6 + 14 * 15e-6, lat_ps = 2 * 7 * 10e-6 + 2 * 15e-6;
  CHECK(Seconds(p, "ps") == doctest::Approx(ps + calls * lat_ps).epsilon(1e-6));
  CHECK(Seconds(p, "byteps") == doctest::Approx(byteps + calls * lat_ps).epsilon(1e-6));
  CHECK(Seconds(p, "allreduce-hier") == doctest::Approx(hier + calls * lat_ar).epsilon(1e-6));
  CHECK(Seconds(p, "allreduce-ring") == doctest::Approx(ring + calls * lat_ar).epsilon(1e-6));
  // The network parts stand as the closed forms say: 2(n-1)/n = 1.75 for hier's inter-node ring against BytePS's 112/88.
  CHECK((Seconds(p, "allreduce-hier") - calls * lat_ar - intra - 14 * 15e-6) /
            (Seconds(p, "byteps") - calls * lat_ps - intra - 2 * 15e-6) ==
        doctest::Approx(1.75 * 88 / 112).epsilon(1e-6));
  CHECK(p.stages[0].dp_allreduce_s == doctest::Approx(byteps + calls * lat_ps).epsilon(1e-6));
  // Only the all-reduce family named: hier (the fastest of them), the exposed DP time higher.
  SearchOptions ar = o;
  ar.dp_comms = {DpComm::kRingAllReduce, DpComm::kTreeAllReduce, DpComm::kHierAllReduce};
  Plan q;
  REQUIRE_OK(f.Solve(ar, &q));
  CHECK(q.dp_comm == DpComm::kHierAllReduce);
  CHECK(q.dp_servers == 0);
  CHECK(q.predicted.dp_allreduce_s >= p.predicted.dp_allreduce_s);
}

TEST_CASE("per-stage replication (pipedream schedule): hier unless --dp-comm names architectures") {
  Vgg f;
  SearchOptions o;
  o.gpus = 64;
  o.schedules = {Schedule::kPipeDream};
  o.replication = {62, 2};
  o.microbatch = {64};
  Plan hier;
  REQUIRE_OK(f.Solve(o, &hier));
  REQUIRE(hier.schedule == Schedule::kPipeDream);
  CHECK(hier.dp_comm == DpComm::kHierAllReduce);  // the cluster has CPU machines, PipeDream's all-reduce stays
  // The comparison's hier row is the busiest stage's per-iteration all-reduce, as the stage table has it.
  double busiest = 0;
  for (const auto& st : hier.stages) busiest = std::max(busiest, st.dp_allreduce_s);
  CHECK(Seconds(hier, "allreduce-hier") == doctest::Approx(busiest).epsilon(1e-12));
  CHECK(hier.predicted.dp_comm_seconds.size() == 5);
  SearchOptions b = o;
  b.dp_comms = {DpComm::kBytePS};
  Plan bp;
  REQUIRE_OK(f.Solve(b, &bp));
  CHECK(bp.dp_comm == DpComm::kBytePS);
  CHECK(bp.dp_servers == 32);
  // The 62 replicas of stage 0 span 8 machines: BytePS's sync is cheaper, so is each stage's all-reduce share.
  CHECK(bp.stages[0].dp_allreduce_s < hier.stages[0].dp_allreduce_s);
  CHECK(bp.predicted.iteration_s <= hier.predicted.iteration_s);
}

TEST_CASE("ZeRO >= 1 keeps to the all-reduce family; bad --dp-comm / --ps-servers are named") {
  Vgg f;
  SearchOptions o;
  o.gpus = 64;
  o.pp = {1};
  o.schedules = {Schedule::k1F1B};
  o.zero = {1};
  Plan p;
  REQUIRE_OK(f.Solve(o, &p));
  CHECK(p.zero_stage == ZeroStage::kOptimizer);
  CHECK(p.dp_comm == DpComm::kHierAllReduce);
  for (const auto& [name, s] : p.predicted.dp_comm_seconds) CHECK(name.rfind("allreduce-", 0) == 0);
  SearchOptions only_ps = o;
  only_ps.dp_comms = {DpComm::kParameterServer};
  CHECK(f.Solve(only_ps, &p).message() ==
        "--dp-comm ps with --zero 1: ps and byteps synchronise ZeRO-0 gradients only; add --zero 0 or an all-reduce "
        "(--dp-comm allreduce-hier)");
  SearchOptions zero_servers;
  zero_servers.gpus = 64;
  zero_servers.dp_comms = {DpComm::kParameterServer};
  zero_servers.ps_servers = 0;
  CHECK(f.Solve(zero_servers, &p).message().find("--ps-servers 0: a parameter server (ps) needs at least 1 server") !=
        std::string::npos);
  zero_servers.ps_servers = 33;
  CHECK(f.Solve(zero_servers, &p).message().find("--ps-servers 33:") != std::string::npos);
  ClusterSpec dgx;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &dgx));
  CostSource s;
  s.model = &f.model;
  s.cluster = &dgx;
  SearchOptions bp;
  bp.gpus = 8;
  bp.dp_comms = {DpComm::kBytePS};
  CHECK(SolveAuto(s, bp, &p).message().find("--dp-comm byteps:") != std::string::npos);
}

TEST_CASE(
    "--ps-placement colocated: ps with dp_servers 0, its row BytePS's at k = 0; plan.yaml round trip; reader rules") {
  Vgg f;
  SearchOptions o;
  o.gpus = 64;
  o.pp = {1};
  o.schedules = {Schedule::k1F1B};
  o.dp_comms = {DpComm::kParameterServer, DpComm::kBytePS};
  o.ps_servers = 0;  // byteps at k = 0: the all-reduce's split, which co-located ps is term for term (NVLink nodes)
  o.ps_colocated = true;
  o.ps_placement_named = true;
  Plan p;
  REQUIRE_OK(f.Solve(o, &p));
  CHECK(p.dp_comm == DpComm::kParameterServer);  // the tie goes to the earlier of ps and byteps
  CHECK(p.dp_servers == 0);
  CHECK(p.ps_colocated);
  REQUIRE(Seconds(p, "ps") > 0);
  CHECK(Seconds(p, "ps") == doctest::Approx(Seconds(p, "byteps")).epsilon(1e-12));
  const std::string yaml = PlanToYaml(p);
  CHECK(yaml.find("dp_comm: \"ps\"\nps_placement: \"colocated\"\n") != std::string::npos);
  Plan back;
  REQUIRE_OK(ParsePlan("plan.yaml", yaml, &back));
  CHECK(back.ps_colocated);
  CHECK(back.dp_servers == 0);
  const size_t at = yaml.find("ps_placement: \"colocated\"\n");
  const std::string dedicated = yaml.substr(0, at) + yaml.substr(at + 26);
  CHECK(ParsePlan("plan.yaml", dedicated, &back)
            .message()
            .find("field 'dp_servers': a parameter server needs dp_servers >= 1") != std::string::npos);
  const std::string both = yaml.substr(0, at) + "dp_servers: 2\n" + yaml.substr(at);
  CHECK(ParsePlan("plan.yaml", both, &back).message().find("a co-located ps runs its servers on the GPU machines") !=
        std::string::npos);
  // Dedicated placement (the default): the same search puts ps on the CPU machines, so no ps_placement.
  SearchOptions d = o;
  d.ps_colocated = false;
  d.ps_servers = 32;
  REQUIRE_OK(f.Solve(d, &p));
  CHECK(!p.ps_colocated);
  CHECK(PlanToYaml(p).find("ps_placement") == std::string::npos);
  // --ps-placement without ps among the architectures tried.
  SearchOptions none = o;
  none.dp_comms = {DpComm::kRingAllReduce};
  CHECK(f.Solve(none, &p).message() ==
        "--ps-placement: ps is not among the architectures tried (allreduce-ring); add ps to --dp-comm or drop "
        "--ps-placement");
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

TEST_CASE("the default architectures: every one the cluster can run; tree inside a level, hier across levels") {
  const ClusterSpec plain = Parse(std::string(kHead) +
                                  "topology:\n  - {name: node, size: 4, bandwidth_GBps: 100, latency_us: 2}\n"
                                  "  - {name: cluster, size: 8, bandwidth_GBps: 10, latency_us: 5}\n");
  const std::vector<DpComm> d = DefaultDpComms(plain);
  REQUIRE(d.size() == 3);
  CHECK(d[0] == DpComm::kRingAllReduce);
  CHECK(d[1] == DpComm::kTreeAllReduce);
  CHECK(d[2] == DpComm::kHierAllReduce);
  const std::vector<DpComm> with_cpus = DefaultDpComms(TwoLevel());
  REQUIRE(with_cpus.size() == 5);
  CHECK(with_cpus[3] == DpComm::kParameterServer);
  CHECK(with_cpus[4] == DpComm::kBytePS);
  // Inside one node (4 GPUs): equal bandwidth terms, tree's 2 log2 4 = 4 alphas against the ring's 6.
  const std::vector<int64_t> node = {4, 1};
  CHECK(std::abs(TreeAllReduceSeconds(plain, kM, node) - RingAllReduceSeconds(plain, kM, node) + 2 * 2e-6) < 1e-12);
  CHECK(TreeAllReduceSeconds(plain, kM, node) < AllReduceSeconds(plain, kM, node, AllReduceUse::kGradient));
  // Across 8 nodes of 4: the flat tree runs at the network's 10 GB/s on all of M; hier moves M/4 there.
  const std::vector<int64_t> all = {4, 8};
  CHECK(AllReduceSeconds(plain, kM, all, AllReduceUse::kGradient) < TreeAllReduceSeconds(plain, kM, all));
}

}  // namespace
}  // namespace planner
