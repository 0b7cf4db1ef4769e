// The per-stage replication DP of --mode auto equals brute-force enumeration
// (every contiguous split x every replica vector) on random two-level
// clusters; the schedule lower bound never exceeds the simulated makespan;
// best-first pruning returns the same ranking as the exhaustive search.
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "dp_solver/replicated_dp.h"
#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

ClusterSpec TwoLevels(std::mt19937& rng, int64_t node, int64_t nodes) {
  std::uniform_real_distribution<double> bw(1, 300), lat(0.5, 20);
  ClusterSpec c;
  c.name = "random";
  c.hbm_bandwidth_GBps = 1000;
  c.hbm_efficiency = 1;
  TopologyLevel a{"node", node, bw(rng), bw(rng), lat(rng), {}, {}, {}, {}, {}};
  TopologyLevel b{"cluster", nodes, bw(rng) / 10, bw(rng) / 10, lat(rng), {}, {}, {}, {}, {}};
  c.levels = {a, b};
  return c;
}

CostTable RandomTable(std::mt19937& rng, int64_t layers) {
  std::uniform_real_distribution<double> ms(0.1, 10), bytes(1e5, 5e8), params(0, 2e8);
  CostTable t;
  for (int64_t i = 0; i < layers; ++i) {
    LayerCostRow r;
    r.forward_s = ms(rng) / 1000;
    r.backward_input_s = ms(rng) / 1000;
    r.backward_weight_s = ms(rng) / 1000;
    r.params = rng() % 4 == 0 ? 0 : params(rng);
    r.stash_bytes = bytes(rng);
    r.out_bytes = bytes(rng);
    t.rows.push_back(r);
    std::string name(1, 'l');  // not "l" + ...: GCC 12's -Wrestrict false positive
    name += std::to_string(i);
    t.names.push_back(name);
  }
  t.BuildPrefix();
  return t;
}

// Min over every split of [0, L) into contiguous stages and every vector of
// positive replica counts summing to W, of the slowest stage.
double BruteForce(const ReplicatedCoster& coster, int64_t layers, int64_t workers) {
  double best = INFINITY;
  std::vector<int64_t> cuts = {0};
  std::function<void(int64_t, int64_t, double)> place;  // stages so far, workers used, max so far
  std::function<void()> split = [&]() {
    if (cuts.back() == layers) {
      place(0, 0, 0.0);
      return;
    }
    for (int64_t e = cuts.back() + 1; e <= layers; ++e) {
      cuts.push_back(e);
      split();
      cuts.pop_back();
    }
  };
  place = [&](int64_t q, int64_t used, double worst) {
    const int64_t stages = static_cast<int64_t>(cuts.size()) - 1;
    if (q == stages) {
      if (used == workers) best = std::min(best, worst);
      return;
    }
    const int64_t left = stages - q - 1;
    for (int64_t r = 1; used + r + left <= workers; ++r) {
      ReplicatedStage s;
      if (!coster.Cost(cuts[static_cast<size_t>(q)], cuts[static_cast<size_t>(q + 1)], used, r, &s)) continue;
      place(q + 1, used + r, std::max(worst, s.seconds));
    }
  };
  split();
  return best;
}

double Binomial(int64_t n, int64_t k) {
  double r = 1;
  for (int64_t i = 1; i <= k; ++i) r = r * static_cast<double>(n - k + i) / static_cast<double>(i);
  return r;
}

TEST_CASE("replicated DP == brute force on random two-level instances (2-12 layers, 2-16 GPUs)") {
  std::mt19937 rng(20261122);
  int checked = 0, infeasible = 0, multi_node = 0;
  for (int it = 0; it < 400 && checked < 150; ++it) {
    const int64_t layers = 2 + static_cast<int64_t>(rng() % 11);
    const int64_t tp = rng() % 3 == 0 ? 2 : 1;
    const int64_t node = int64_t{2} << (rng() % 3);  // 2, 4, 8 GPUs per node
    const int64_t gpus = 2 + static_cast<int64_t>(rng() % 15);
    if (gpus % tp != 0) continue;
    const int64_t workers = gpus / tp;
    if (workers < 2) continue;
    // Number of (split, replica vector) pairs: C(L + W - 2, L - 1) at most.
    if (Binomial(layers + workers - 2, layers - 1) > 2e5) continue;
    ClusterSpec c = TwoLevels(rng, node, (gpus + node - 1) / node + 1);
    CostTable t = RandomTable(rng, layers);
    ReplicatedOptions o;
    o.workers = workers;
    o.tp = tp;
    o.grad_bytes_per_param = 2;
    o.state_bytes_per_param = 18;
    o.weight_bytes_per_param = 2;
    o.p2p_overlap = rng() % 2 == 0;
    // Sometimes a memory cap that rules out some (or all) placements.
    o.usable_bytes = rng() % 3 == 0 ? std::uniform_real_distribution<double>(2e9, 3e10)(rng) : 0;
    ReplicatedCoster coster(t, c, o);
    double brute = BruteForce(coster, layers, workers);
    ReplicatedResult r;
    Status s = SolveReplicated(t, c, o, &r);
    INFO("layers=" << layers << " workers=" << workers << " tp=" << tp << " node=" << node);
    if (!std::isfinite(brute)) {
      CHECK(s.code() == StatusCode::kInfeasible);
      ++infeasible;
    } else {
      REQUIRE_OK(s);
      CHECK(r.bottleneck_s == doctest::Approx(brute).epsilon(1e-12));
      // The returned stages realise the objective and use every worker.
      double worst = 0;
      int64_t used = 0;
      for (const auto& st : r.stages) {
        worst = std::max(worst, st.seconds);
        CHECK(st.offset == used);
        used += st.replicas;
      }
      CHECK(used == workers);
      CHECK(worst == doctest::Approx(r.bottleneck_s).epsilon(1e-12));
      CHECK(r.stages.front().first == 0);
      CHECK(r.stages.back().end == layers);
    }
    if (gpus > node) ++multi_node;
    ++checked;
  }
  CHECK(checked >= 100);
  CHECK(multi_node >= 30);  // the second level is really exercised
  MESSAGE("checked " << checked << " instances, " << infeasible << " infeasible, " << multi_node << " spanning nodes");
}

TEST_CASE("a replica group spanning nodes costs its all-reduce on the slower level") {
  std::mt19937 rng(7);
  ClusterSpec c = TwoLevels(rng, 4, 2);
  c.levels[0].bandwidth_GBps = 100;
  c.levels[1].bandwidth_GBps = 10;
  c.levels[0].latency_us = c.levels[1].latency_us = 0;
  // Two ranks inside a node vs two ranks straddling the node boundary.
  double inside = AllReduceSeconds(c, 1e9, GroupSpreadAt(c, 0, 2, 1));
  double across = AllReduceSeconds(c, 1e9, GroupSpreadAt(c, 3, 2, 1));
  CHECK(inside == doctest::Approx(2 * 0.5 * 1e9 / 100e9));
  CHECK(across == doctest::Approx(2 * 0.5 * 1e9 / 10e9));
  // Aligned groups agree with GroupSpread.
  CHECK(GroupSpreadAt(c, 0, 8, 1) == GroupSpread(c, 8, 1));
  CHECK(GroupSpreadAt(c, 0, 2, 4) == GroupSpread(c, 2, 4));
}

// GroupSpreadAt by listing the ranks: per level, the distinct inner units of each unit, the most of them.
std::vector<int64_t> SpreadByListing(const ClusterSpec& c, int64_t first, int64_t size, int64_t stride) {
  std::vector<int64_t> spread;
  for (size_t l = 0; l < c.levels.size(); ++l) {
    const int64_t unit = c.GpusPerUnit(l), inner = l == 0 ? 1 : c.GpusPerUnit(l - 1);
    std::map<int64_t, std::set<int64_t>> per_unit;
    for (int64_t k = 0; k < size; ++k) per_unit[(first + k * stride) / unit].insert((first + k * stride) / inner);
    int64_t most = 1;
    for (const auto& [u, inners] : per_unit) most = std::max<int64_t>(most, static_cast<int64_t>(inners.size()));
    spread.push_back(most);
  }
  int64_t covered = 1;
  for (int64_t x : spread) covered *= x;
  if (covered < size) spread.back() *= (size + covered - 1) / covered;
  return spread;
}

TEST_CASE("GroupSpreadAt's per-unit count equals listing the ranks (three levels, any offset and stride)") {
  std::mt19937 rng(11);
  for (int it = 0; it < 3000; ++it) {
    ClusterSpec c = TwoLevels(rng, 1 + static_cast<int64_t>(rng() % 8), 1 + static_cast<int64_t>(rng() % 6));
    c.levels.push_back(TopologyLevel{"pod", 1 + static_cast<int64_t>(rng() % 4), 10, 10, 1, {}, {}, {}, {}, {}});
    const int64_t first = static_cast<int64_t>(rng() % 40), size = 1 + static_cast<int64_t>(rng() % 30),
                  stride = static_cast<int64_t>(rng() % 12);
    CAPTURE(first);
    CAPTURE(size);
    CAPTURE(stride);
    CAPTURE(c.levels[0].size);
    CAPTURE(c.levels[1].size);
    CHECK(GroupSpreadAt(c, first, size, stride) == SpreadByListing(c, first, size, stride));
  }
}

TEST_CASE("the makespan lower bound never exceeds the simulated makespan") {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> u(0.1, 5);
  int checked = 0;
  for (int it = 0; it < 300; ++it) {
    const int64_t p = 1 + static_cast<int64_t>(rng() % 6);
    const int64_t v = rng() % 3 == 0 ? 2 : 1;
    const int64_t m = p * (1 + static_cast<int64_t>(rng() % 4));
    std::vector<SimStage> st(static_cast<size_t>(p * v));
    for (auto& s : st) {
      s.forward_s = u(rng);
      s.backward_input_s = u(rng);
      s.backward_weight_s = u(rng);
      s.send_s = rng() % 2 ? u(rng) / 4 : 0;
    }
    std::vector<Schedule> scheds = {Schedule::kInterleaved, Schedule::kDualPipeV};
    if (v == 1) scheds = {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1, Schedule::kPipeDream};
    for (Schedule s : scheds) {
      if (s == Schedule::kInterleaved && p < 2) continue;
      if (s == Schedule::kDualPipeV && m < 2 * p) continue;
      SimResult r;
      REQUIRE_OK(SimulateSchedule(s, st, p, m, false, &r));
      double lb = MakespanLowerBound(s, st, p, m);
      INFO(ScheduleName(s) << " p=" << p << " m=" << m);
      CHECK(lb <= r.makespan_s * (1 + 1e-12));
      CHECK(lb > 0.5 * r.makespan_s);  // and it is not vacuous
      ++checked;
    }
  }
  CHECK(checked > 300);
}

TEST_CASE(
    "ZB-H1's chain bound: below the simulation with fill, drain and exposed sends, the closed form on uniform stages") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.1, 5);
  for (int it = 0; it < 400; ++it) {
    const int64_t p = 1 + static_cast<int64_t>(rng() % 12);
    const int64_t m =
        1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(3 * p));  // fewer microbatches than stages too
    std::vector<SimStage> st(static_cast<size_t>(p));
    for (auto& s : st) {
      s.forward_s = u(rng);
      s.backward_input_s = u(rng);
      s.backward_weight_s = u(rng);
      s.send_s = rng() % 2 ? u(rng) / 4 : 0;
      s.exposed_send_s = rng() % 2 ? u(rng) / 4 : 0;
    }
    SimResult r;
    REQUIRE_OK(SimulateSchedule(Schedule::kZbH1, st, p, m, false, &r));
    INFO("p=" << p << " m=" << m);
    CHECK(MakespanLowerBound(Schedule::kZbH1, st, p, m) <= r.makespan_s * (1 + 1e-12));
  }
  // Uniform stages, m >= p, no sends: the bound is the closed form, which the simulation reaches when F = B.
  for (int64_t p : {2, 5, 16, 64}) {
    for (int64_t m : {p, 2 * p + 1, 4 * p}) {
      std::vector<SimStage> st(static_cast<size_t>(p), SimStage{1.0, 1.0, 0.5, 0, 0});
      const double closed = ClosedFormMakespan(Schedule::kZbH1, 1.0, 1.0, 0.5, p, m, 1);
      CAPTURE(p);
      CAPTURE(m);
      CHECK(MakespanLowerBound(Schedule::kZbH1, st, p, m) == doctest::Approx(closed).epsilon(1e-12));
      SimResult r;
      REQUIRE_OK(SimulateSchedule(Schedule::kZbH1, st, p, m, false, &r));
      CHECK(r.makespan_s == doctest::Approx(closed).epsilon(1e-9));
    }
  }
  // Fewer microbatches than stages (p 8, m 2, F = B = W = 1): the last device runs F0 from t = 7, B0 (first
  // by priority), F1, B1 until 11; B1 runs back through 7 stages and W1 ends at 19, the simulation's
  // makespan. The per-device bound says 7 + 6 = 13.
  std::vector<SimStage> st(8, SimStage{1.0, 1.0, 1.0, 0, 0});
  SimResult r;
  REQUIRE_OK(SimulateSchedule(Schedule::kZbH1, st, 8, 2, false, &r));
  CHECK(r.makespan_s == doctest::Approx(19));
  CHECK(MakespanLowerBound(Schedule::kZbH1, st, 8, 2) == doctest::Approx(19));
}

TEST_CASE("best-first pruning returns the exhaustive search's ranking") {
  ModelSpec model;
  ClusterSpec cluster;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/gpt3-175b.yaml"), &model));
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  CostSource src;
  src.model = &model;
  src.cluster = &cluster;
  int64_t cuts = 0;  // simulations the pruned search stopped past the k-th best (3 of 9 at 256 GPUs)
  for (int64_t gpus : {64, 256}) {
    SearchOptions pruned, full;
    pruned.gpus = full.gpus = gpus;
    full.exhaustive = true;
    Plan a, b;
    SearchStats pruned_stats, full_stats;
    REQUIRE_OK(SolveAuto(src, pruned, &a, &pruned_stats));
    REQUIRE_OK(SolveAuto(src, full, &b, &full_stats));
    CHECK(pruned_stats.simulated < full_stats.simulated);
    CHECK(full_stats.cut == 0);
    cuts += pruned_stats.cut;
    CHECK(a.predicted.iteration_s == b.predicted.iteration_s);
    CHECK(a.ParallelString() == b.ParallelString());
    REQUIRE(a.runners_up.size() == b.runners_up.size());
    for (size_t i = 0; i < a.runners_up.size(); ++i) CHECK(a.runners_up[i].iteration_s == b.runners_up[i].iteration_s);
  }
  CHECK(cuts > 0);
}

TEST_CASE("auto mode ranks per-stage replication: VGG-16 on PipeDream's cluster A") {
  ModelSpec model;
  ClusterSpec cluster;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/vgg16.yaml"), &model));
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/pipedream-cluster-a.yaml"), &cluster));
  CostSource src;
  src.model = &model;
  src.cluster = &cluster;
  SearchOptions o;
  o.gpus = 16;
  o.schedules = {Schedule::kPipeDream};
  Plan p;
  REQUIRE_OK(SolveAuto(src, o, &p));
  CHECK(p.schedule == Schedule::kPipeDream);
  CHECK(p.pp >= 2);
  int64_t sum = 0;
  bool uneven = false;
  for (const auto& s : p.stages) {
    sum += s.replicas;
    uneven = uneven || s.replicas != p.stages.front().replicas;
  }
  CHECK(sum == 16);
  CHECK(uneven);  // a "2-1-1"-style configuration, not uniform DP
  // Like PipeDream on a 10 Gb/s cluster: the conv layers are replicated, the
  // parameter-heavy FC layers are not.
  CHECK(p.stages.front().replicas > p.stages.back().replicas);
  CHECK(p.predicted.peak_memory_bytes <= cluster.UsableMemoryBytes());
}

}  // namespace
}  // namespace planner
