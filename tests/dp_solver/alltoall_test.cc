// The all-to-all cost (expert parallelism's dispatch and combine) against its closed forms:
// one level, two levels, a deduplicating dispatcher (serial and pipelined hops), and a measured curve
// (docs/cost_model.md section 3).
#include <algorithm>
#include <cmath>
#include <vector>

#include "dp_solver/cost_model.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// 8 GPUs per node at 400 GB/s and 2 us; nodes over a 50 GB/s, 5 us network (H800-like).
ClusterSpec TwoLevels(int64_t nodes) {
  ClusterSpec c;
  TopologyLevel node, net;
  node.name = "node";
  node.size = 8;
  node.bandwidth_GBps = 400;
  node.latency_us = 2;
  net.name = "cluster";
  net.size = nodes;
  net.bandwidth_GBps = 50;
  net.latency_us = 5;
  c.levels = {node, net};
  return c;
}

TEST_CASE("all-to-all on one level: (n - 1)/n of the bytes at the level's busbw, plus (n - 1) latencies") {
  const ClusterSpec c = TwoLevels(4);
  const double m = 64e6;
  for (int64_t n : {2, 4, 8}) {
    INFO(n << " ranks in a node");
    const double want = m * (n - 1) / n / 400e9 + (n - 1) * 2e-6;
    CHECK(AllToAllSeconds(c, m, {n, 1}) == doctest::Approx(want).epsilon(1e-12));
    CHECK(AllToAllSeconds(c, m, GroupSpread(c, n, 1)) == doctest::Approx(want).epsilon(1e-12));
  }
  CHECK(AllToAllSeconds(c, m, {1, 1}) == 0);  // one rank: nothing leaves it
  CHECK(AllToAllSeconds(c, 0, {8, 1}) == 0);
  // Four ranks one per node (stride 8): everything crosses the network.
  CHECK(GroupSpread(c, 4, 8) == std::vector<int64_t>{1, 4});
  CHECK(AllToAllSeconds(c, m, GroupSpread(c, 4, 8)) == doctest::Approx(m * 3 / 4 / 50e9 + 3 * 5e-6).epsilon(1e-12));
}

TEST_CASE("all-to-all over two levels: the slower level's share sets the time") {
  const ClusterSpec c = TwoLevels(8);
  const double m = 64e6;
  // EP 64 over 8 nodes (DeepSeek-V3's layout): N = 64, U_0 = 8.
  const std::vector<int64_t> spread = GroupSpread(c, 64, 1);
  REQUIRE(spread == std::vector<int64_t>{8, 8});
  const double nvlink = m * 63 / 64 / 400e9 + 7 * 2e-6;  // everything leaving the GPU
  const double network = m * 56 / 64 / 50e9 + 7 * 5e-6;  // everything leaving the node
  CHECK(network > nvlink);
  CHECK(AllToAllSeconds(c, m, spread) == doctest::Approx(network).epsilon(1e-12));
  // Two GPUs per node on 8 nodes (16 ranks): 14 of the 16 shares leave the node.
  CHECK(AllToAllSeconds(c, m, {2, 8}) == doctest::Approx(m * 14 / 16 / 50e9 + 7 * 5e-6).epsilon(1e-12));
  // A slow node level (a PCIe box) can dominate: 16 ranks, 8 per node, node level at 10 GB/s.
  ClusterSpec slow = c;
  slow.levels[0].bandwidth_GBps = 10;
  CHECK(AllToAllSeconds(slow, m, {8, 2}) == doctest::Approx(m * 15 / 16 / 10e9 + 7 * 2e-6).epsilon(1e-12));
}

TEST_CASE("group spread: a group that does not tile its nodes reaches the next one (brute force over the ranks)") {
  ClusterSpec c = TwoLevels(16);
  CHECK(GroupSpread(c, 12, 1) == std::vector<int64_t>{8, 2});  // EP 12 on 8-GPU nodes: two nodes, not one
  CHECK(GroupSpread(c, 3, 4) == std::vector<int64_t>{2, 2});   // ranks 0, 4, 8
  CHECK(GroupSpread(c, 6, 1) == std::vector<int64_t>{6, 1});
  CHECK(GroupSpread(c, 16, 1) == std::vector<int64_t>{8, 2});
  // Level 0 holds the most members any node holds, level 1 the nodes the group touches (aligned at rank 0). A
  // stride that neither divides a node nor is a multiple of one (5 on 8-GPU nodes) is not modelled.
  for (int64_t size = 1; size <= 40; ++size) {
    for (int64_t stride : {1, 2, 4, 8, 16}) {  // strides that divide a node or are whole nodes (products of sizes)
      if ((size - 1) * stride >= 8 * 16) continue;
      std::vector<int64_t> per_node(16, 0);
      for (int64_t k = 0; k < size; ++k) ++per_node[static_cast<size_t>(k * stride / 8)];
      int64_t most = 0, nodes = 0;
      for (int64_t n : per_node) {
        most = std::max(most, n);
        nodes += n > 0 ? 1 : 0;
      }
      INFO(size << " ranks " << stride << " apart");
      const std::vector<int64_t> spread = GroupSpread(c, size, stride);
      CHECK(spread[0] == most);
      CHECK(spread[1] == nodes);
      CHECK(spread == GroupSpreadAt(c, 0, size, stride));
    }
  }
}

TEST_CASE("all-to-all over a group that does not tile its nodes: N is its ranks, the emptiest node sets the time") {
  const ClusterSpec c = TwoLevels(4);
  const double m = 64e6;
  // EP 12 on 8-GPU nodes: 8 ranks on the first node, 4 on the second. Each of those 4 sends 8 of its 12 shares
  // over the network (the first node's ranks 4 of 12); every rank sends 11 of 12 out of its GPU.
  AllToAllRouting twelve;
  twelve.ranks = 12;
  const std::vector<int64_t> spread = GroupSpread(c, 12, 1);
  REQUIRE(spread == std::vector<int64_t>{8, 2});
  const double network = m * 8 / 12 / 50e9 + 1 * 5e-6, nvlink = m * 11 / 12 / 400e9 + 7 * 2e-6;
  CHECK(network > nvlink);
  CHECK(AllToAllSeconds(c, m, spread, twelve) == doctest::Approx(network).epsilon(1e-12));
  // Without the size the 16 slots of {8, 2} were charged: 8 of 16 shares, optimistic for the second node.
  CHECK(AllToAllSeconds(c, m, spread) == doctest::Approx(m * 8 / 16 / 50e9 + 5e-6).epsilon(1e-12));
  // Brute force: per rank, the shares it sends out of its node; the most of them is the network level's share.
  for (int64_t n = 2; n <= 32; ++n) {
    std::vector<int64_t> per_node(4, 0);
    for (int64_t r = 0; r < n; ++r) ++per_node[static_cast<size_t>(r / 8)];
    int64_t fewest = n;
    for (int64_t k : per_node)
      if (k > 0) fewest = std::min(fewest, k);
    AllToAllRouting g;
    g.ranks = n;
    const std::vector<int64_t> sp = GroupSpread(c, n, 1);
    const double want_net =
        sp[1] > 1 ? static_cast<double>(m) * static_cast<double>(n - fewest) / static_cast<double>(n) / 50e9 +
                        static_cast<double>(sp[1] - 1) * 5e-6
                  : 0.0;
    const double want_gpu =
        m * static_cast<double>(n - 1) / static_cast<double>(n) / 400e9 + static_cast<double>(sp[0] - 1) * 2e-6;
    INFO(n << " ranks");
    CHECK(AllToAllSeconds(c, m, sp, g) == doctest::Approx(std::max(want_net, want_gpu)).epsilon(1e-12));
    if (n % 8 == 0 || n < 8) CHECK(AllToAllSeconds(c, m, sp, g) == AllToAllSeconds(c, m, sp));  // tiling: unchanged
  }
}

TEST_CASE("GroupUnits lists a group at any offset: the fullest and the emptiest node (brute force)") {
  const ClusterSpec c = TwoLevels(8);
  for (int64_t first = 0; first < 16; ++first) {
    for (int64_t size = 1; size <= 20; ++size) {
      for (int64_t stride : {1, 2, 3}) {
        if (first + (size - 1) * stride >= 64) continue;
        std::vector<int64_t> per_node(8, 0);
        for (int64_t k = 0; k < size; ++k) ++per_node[static_cast<size_t>((first + k * stride) / 8)];
        int64_t most = 0, least = size;
        for (int64_t n : per_node) {
          most = std::max(most, n);
          if (n > 0) least = std::min(least, n);
        }
        std::vector<int64_t> fullest, fewest;
        GroupUnits(c, first, size, stride, &fullest, &fewest);
        INFO(size << " ranks from " << first << ", " << stride << " apart");
        CHECK(fullest == GroupSpreadAt(c, first, size, stride));
        CHECK(fullest[0] == most);
        CHECK(fewest[1] == least);
      }
    }
  }
  // Ranks 6-11: 2 on the first node, 4 on the second. The 2 send 4 of their 6 shares over the network.
  const double m = 64e6;
  std::vector<int64_t> spread, fewest;
  GroupUnits(c, 6, 6, 1, &spread, &fewest);
  AllToAllRouting g;
  g.ranks = 6;
  g.fewest = fewest;
  const double network = m * 4 / 6 / 50e9 + 5e-6, nvlink = m * 5 / 6 / 400e9 + 3 * 2e-6;
  CHECK(AllToAllSeconds(c, m, spread, g) == doctest::Approx(std::max(network, nvlink)).epsilon(1e-12));
  // A group inside one node sends nothing over the network and pays no network latency.
  GroupUnits(c, 0, 6, 1, &spread, &fewest);
  g.fewest = fewest;
  CHECK(AllToAllSeconds(c, m, spread, g) == doctest::Approx(m * 5 / 6 / 400e9 + 5 * 2e-6).epsilon(1e-12));
}

TEST_CASE("a deduplicating dispatcher: the bytes leaving the node scale by min(1, node_copies / top_k), levels add") {
  const ClusterSpec c = TwoLevels(8);
  const double m = 64e6;  // tokens x top_k x h x dtype bytes
  AllToAllRouting deepseek;
  deepseek.top_k = 8;
  deepseek.node_copies = 4;  // DeepSeek-V3: 8 routed experts per token on at most 4 nodes, sent once to each
  const double network = m * 56 / 64 * 4 / 8 / 50e9 + 7 * 5e-6;
  const double nvlink = m * 63 / 64 / 400e9 + 7 * 2e-6;  // the node level still fans every copy out
  // The NVLink forward of a copy follows its network hop: the two levels' times add up.
  CHECK(AllToAllSeconds(c, m, {8, 8}, deepseek) == doctest::Approx(network + nvlink).epsilon(1e-12));
  // Every copy sent (0: Megatron's alltoall dispatcher, NCCL): both levels at once, the slowest sets it.
  const double plain = AllToAllSeconds(c, m, {8, 8});
  CHECK(plain == doctest::Approx(std::max(m * 56 / 64 / 50e9 + 7 * 5e-6, nvlink)).epsilon(1e-12));
  deepseek.node_copies = 0;
  CHECK(AllToAllSeconds(c, m, {8, 8}, deepseek) == plain);
  // Copies at or above top_k: the whole network share, still in two hops.
  deepseek.node_copies = 8;
  CHECK(AllToAllSeconds(c, m, {8, 8}, deepseek) ==
        doctest::Approx(m * 56 / 64 / 50e9 + 7 * 5e-6 + nvlink).epsilon(1e-12));
  // Inside one node the deduplication changes nothing.
  deepseek.node_copies = 1;
  CHECK(AllToAllSeconds(c, m, {8, 1}, deepseek) == AllToAllSeconds(c, m, {8, 1}));
  // With one node reached the network carries one copy per token: 1/8 of the plain share; a fraction
  // of a node (an expectation) scales the same way.
  CHECK(AllToAllSeconds(c, m, {8, 8}, deepseek) ==
        doctest::Approx(m * 56 / 64 / 8 / 50e9 + 7 * 5e-6 + nvlink).epsilon(1e-12));
  deepseek.node_copies = 1.5;
  CHECK(AllToAllSeconds(c, m, {8, 8}, deepseek) ==
        doctest::Approx(m * 56 / 64 * 1.5 / 8 / 50e9 + 7 * 5e-6 + nvlink).epsilon(1e-12));
  // Pipelined hops (DeepSeek's kernels): the slowest level sets the time, as in the plain all-to-all.
  deepseek.node_copies = 4;
  deepseek.serial_hops = false;
  CHECK(AllToAllSeconds(c, m, {8, 8}, deepseek) == doctest::Approx(std::max(network, nvlink)).epsilon(1e-12));
  // Three levels (node, rack, spine), serial: one network transfer crosses rack and spine at once, so the time
  // is the node level's plus the slower of the two above it, not their sum.
  ClusterSpec three = c;
  TopologyLevel spine = three.levels[1];
  spine.name = "spine";
  spine.bandwidth_GBps = 25;
  three.levels[1].size = 2;
  three.levels.push_back(spine);
  deepseek.serial_hops = true;
  const double rack = m * 56 / 64 * 4 / 8 / 50e9 + 1 * 5e-6, over = m * 48 / 64 * 4 / 8 / 25e9 + 3 * 5e-6;
  CHECK(AllToAllSeconds(three, m, {8, 2, 4}, deepseek) ==
        doctest::Approx(nvlink + std::max(rack, over)).epsilon(1e-12));
}

TEST_CASE(
    "a deduplicating dispatcher sends a token once to each GPU it reaches: the node level at rank_copies / top_k") {
  const ClusterSpec c = TwoLevels(8);
  const double m = 64e6;
  AllToAllRouting flex;
  flex.top_k = 8;
  flex.rank_copies = 4;  // a token's 8 experts on 4 of the 8 GPUs of one node
  CHECK(AllToAllSeconds(c, m, {8, 1}, flex) == doctest::Approx(m * 7 / 8 * 4 / 8 / 400e9 + 7 * 2e-6).epsilon(1e-12));
  flex.rank_copies = 8;  // every copy on its own GPU: nothing saved
  CHECK(AllToAllSeconds(c, m, {8, 1}, flex) == AllToAllSeconds(c, m, {8, 1}));
  flex.rank_copies = 0;  // not given: every copy (the alltoall dispatcher)
  CHECK(AllToAllSeconds(c, m, {8, 1}, flex) == AllToAllSeconds(c, m, {8, 1}));
  // Over nodes, serial: once per node on the network, once per GPU reached on NVLink, the two hops added.
  flex.node_copies = 4;
  flex.rank_copies = 6;
  CHECK(AllToAllSeconds(c, m, {8, 8}, flex) ==
        doctest::Approx(m * 56 / 64 * 4 / 8 / 50e9 + 7 * 5e-6 + m * 63 / 64 * 6 / 8 / 400e9 + 7 * 2e-6).epsilon(1e-12));
}

TEST_CASE("a measured all-to-all curve times its level at the size with the same crossing share") {
  ClusterSpec c = TwoLevels(4);
  // Measured on 2 ranks of a node: 1 MB sent in all (0.5 MB crossing) in 10 us, 4 MB in 30 us.
  c.levels[0].measured_alltoall = {{{1e6, 10e-6}, {4e6, 30e-6}}, 2};
  CHECK(AllToAllSeconds(c, 1e6, {2, 1}) == doctest::Approx(10e-6).scale(0));
  // 4 ranks sending 4/3 MB cross 1 MB: the 2-rank curve's 2 MB point, log-log between 1 and 4 MB.
  CHECK(AllToAllSeconds(c, 4e6 / 3, {4, 1}) == doctest::Approx(std::sqrt(10e-6 * 30e-6)).epsilon(1e-9));
  // The network level without a curve keeps the alpha-beta line: 16 ranks, 4 nodes.
  const double net = 8e6 * 12 / 16 / 50e9 + 3 * 5e-6;
  CHECK(AllToAllSeconds(c, 8e6, {4, 4}) ==
        doctest::Approx(std::max(net, MeasuredSeconds(c.levels[0].measured_alltoall.points, 8e6 * 15 / 16 * 2)))
            .scale(0));
}

TEST_CASE("an all-to-all curve in a comm profile reaches the cost model for its level") {
  ClusterSpec c = TwoLevels(4);
  Profile comm;
  CommCurve a2a;
  a2a.collective = "all_to_all";
  a2a.level = "cluster";
  a2a.group_size = 4;
  a2a.backend = "nccl";
  a2a.points = {{4e6, 80e-6}, {1e6, 30e-6}};  // unsorted on purpose
  comm.comm = {a2a};
  std::vector<std::string> notes;
  ApplyCommCurves(comm, "comm.profile.yaml", &c, &notes);
  CHECK(c.levels[0].measured_alltoall.points.empty());
  REQUIRE(c.levels[1].measured_alltoall.usable());
  CHECK(c.levels[1].measured_alltoall.points.front().first == 1e6);
  CHECK(c.levels[1].bandwidth_GBps == 50);  // no all-reduce curve: the file's figures stay
  REQUIRE(notes.size() == 2);
  CHECK(notes[1] ==
        "level 'cluster': 50 GB/s, 5 us from the cluster file (not measured); all-to-all measured (comm.profile.yaml, "
        "nccl 4 ranks)");
  // One rank per node on the 4 nodes: 4 MB sent, 3 MB crossing: the 4 MB point.
  CHECK(AllToAllSeconds(c, 4e6, {1, 4}) == doctest::Approx(80e-6).scale(0));
}

TEST_CASE("an all-reduce curve without a usable bandwidth keeps the cluster file's figures and says why") {
  ClusterSpec c = TwoLevels(4);
  Profile comm;
  CommCurve ar;
  ar.collective = "all_reduce";
  ar.level = "cluster";
  ar.group_size = 4;
  ar.backend = "mpi";
  ar.points = {{1e6, 90e-6}, {4e6, 80e-6}};  // a loaded machine's times: the larger message faster
  ar.busbw_GBps = 0;                         // the fit's: no bandwidth
  comm.comm = {ar};
  std::vector<std::string> notes;
  ApplyCommCurves(comm, "gap.yaml", &c, &notes);
  CHECK(c.levels[1].bandwidth_GBps == 50);
  CHECK_FALSE(c.levels[1].measured_allreduce.usable());
  REQUIRE(notes.size() == 2);
  CHECK(notes[1] ==
        "level 'cluster': 50 GB/s, 5 us from the cluster file (the all-reduce curve in gap.yaml has no usable "
        "bandwidth: its times do not grow with the size; profile again on an idle machine)");
}

TEST_CASE("all_to_all curves round-trip through the profile format; an unknown collective is refused") {
  Profile p;
  CommCurve a2a;
  a2a.collective = "all_to_all";
  a2a.level = "node";
  a2a.group_size = 4;
  a2a.backend = "mpi";
  a2a.alpha_s = 2e-6;
  a2a.busbw_GBps = 3.5;
  a2a.points = {{1024, 5e-6}, {4096, 9e-6}};
  p.comm = {a2a};
  Profile q;
  REQUIRE_OK(ParseProfile("c.yaml", ProfileToYaml(p), &q));
  REQUIRE(q.comm.size() == 1);
  CHECK(q.comm[0].collective == "all_to_all");
  CHECK(q.comm[0].group_size == 4);
  CHECK(q.comm[0].points == a2a.points);
  REQUIRE(q.FindComm("all_to_all", "node") != nullptr);
  std::string text = ProfileToYaml(p);
  text.replace(text.find("all_to_all"), 10, "all_to_any");
  const Status st = ParseProfile("c.yaml", text, &q);
  CHECK(st.code() == StatusCode::kInvalidArgument);
  CHECK(st.message().find("all_to_all") != std::string::npos);  // the choices are listed
}

}  // namespace
}  // namespace planner
