// Placement of replicated stages (codegen/codegen.cc, ReplicatedRanks; issue 14): a PipeDream
// hierarchical plan's replicas sit where its optimizer costed them (dp_solver/pipedream_dp.cc,
// FlattenStages), node = rank / gpus_per_node; auto mode's per-stage replication keeps
// consecutive ranks (the group docs/cost_model.md section 8 costs).
#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include <numeric>

#include "codegen/codegen.h"
#include "dp_solver/pipedream_dp.h"
#include "dp_solver/search.h"
#include "spec/cluster_spec.h"
#include "spec/pipedream_import.h"
#include "tests/runtime/thread_run.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// PipeDream's optimizer on a vendored profile graph (tests/data/pipedream/).
PipeDreamResult Solve(const std::string& model, const std::vector<int64_t>& machines,
                      const std::vector<double>& bandwidths) {
  const std::string path = testing::SourcePath("tests/data/pipedream/" + model + "/graph.txt");
  REQUIRE(std::filesystem::is_regular_file(path));
  Profile p;
  REQUIRE_OK(ImportPipeDreamFile(path, 0, &p));
  PipeDreamOptions o;
  o.machines = machines;
  o.bandwidths = bandwidths;
  o.activation_compression_ratio = 1;
  PipeDreamResult r;
  REQUIRE_OK(SolvePipeDream(p, o, &r));
  return r;
}

// The plan planner solve --mode pipedream writes (planner/cmd_solve.cc): one stage per result
// stage, its devices and first device.
Plan PlanOf(const PipeDreamResult& r) {
  Plan plan;
  plan.schedule = Schedule::kPipeDream;
  plan.pp = static_cast<int64_t>(r.stages.size());
  plan.config = r.config;
  plan.microbatch_size = 1;
  plan.num_microbatches = 1;
  plan.global_batch = 1;
  int64_t layer = 0;
  for (const auto& s : r.stages) {
    PlanStage ps;
    ps.first_layer = ps.last_layer = layer++;
    ps.replicas = s.replicas;
    ps.devices = s.devices;
    ps.device_offset = s.devices.front();
    ps.forward_s = ps.backward_input_s = ps.backward_weight_s = s.compute_s / 3 / static_cast<double>(s.replicas);
    plan.stages.push_back(ps);
  }
  return plan;
}

// Node of each replica of each stage in the launch plan.
std::vector<std::set<int64_t>> NodesOfStages(const LaunchPlan& L) {
  std::vector<std::set<int64_t>> out(L.stages.size());
  for (const auto& r : L.ranks) {
    CHECK(r.node == r.rank / L.gpus_per_node);
    out[static_cast<size_t>(r.stage)].insert(r.node);
  }
  return out;
}

TEST_CASE("resnet50 on 2 servers x 4 GPUs (PipeDream -n 4 2): 2-2-2-2 with each stage's replicas on both servers") {
  // The top level keeps one stage on both servers (replicated over servers, 4 (r-1) W / (r B_2 K_2)),
  // the level below splits each server's 4 GPUs into 4 stages: stage s on GPU s of server 0 and 1.
  const PipeDreamResult r = Solve("resnet50", {4, 2}, {1.2e10, 1.25e9});
  REQUIRE(r.config == "2-2-2-2");
  for (size_t s = 0; s < 4; ++s)
    CHECK(r.stages[s].devices == std::vector<int64_t>{static_cast<int64_t>(s), static_cast<int64_t>(s) + 4});
  CodegenOptions o;
  o.gpus_per_node = 4;
  LaunchPlan L;
  REQUIRE_OK(BuildLaunchPlan(PlanOf(r), "digest", o, &L));
  REQUIRE(L.ranks.size() == 8);
  const auto nodes = NodesOfStages(L);
  for (const auto& n : nodes) CHECK(n == std::set<int64_t>{0, 1});
  // Stage 0's replicas are ranks 0 and 4; the next stage's are its pipeline neighbours.
  CHECK(L.ranks[0].stage == 0);
  CHECK(L.ranks[4].stage == 0);
  CHECK(L.ranks[0].next == std::vector<int64_t>{1, 5});
  CHECK(L.dp_groups[0] == std::vector<int64_t>{0, 4});
}

TEST_CASE(
    "vgg16 on 2 servers x 4 GPUs (PipeDream -n 4 2): 4-1-1-1-1, the replicated stage on server 0, the rest on server "
    "1") {
  // Top level: (0, a) on server 0, the rest on server 1; inside server 0 one stage on 4 GPUs.
  const PipeDreamResult r = Solve("vgg16", {4, 2}, {1.2e10, 1.25e9});
  REQUIRE(r.config == "4-1-1-1-1");
  CHECK(r.stages[0].devices == std::vector<int64_t>{0, 1, 2, 3});
  for (size_t s = 1; s < 5; ++s) CHECK(r.stages[s].devices == std::vector<int64_t>{static_cast<int64_t>(s) + 3});
  CodegenOptions o;
  o.gpus_per_node = 4;
  LaunchPlan L;
  REQUIRE_OK(BuildLaunchPlan(PlanOf(r), "digest", o, &L));
  const auto nodes = NodesOfStages(L);
  CHECK(nodes[0] == std::set<int64_t>{0});
  for (size_t s = 1; s < 5; ++s) CHECK(nodes[s] == std::set<int64_t>{1});
}

TEST_CASE(
    "every PipeDream hierarchical result's devices: each device once, replicas = devices, a top-level stage's "
    "sub-stages alike on each of its servers") {
  for (const auto& [model, m1, m2] :
       {std::tuple{"resnet50", 4, 2}, {"resnet18", 4, 2}, {"vgg16", 4, 4}, {"vgg16", 8, 2}, {"resnet101", 4, 2}}) {
    INFO(model, " ", m1, "x", m2);
    const PipeDreamResult r = Solve(model, {m1, m2}, {1.2e10, 1.25e9});
    std::set<int64_t> seen;
    for (const auto& s : r.stages) {
      CHECK(static_cast<int64_t>(s.devices.size()) == s.replicas);
      // Same GPU slots on every server the stage spans (its replicas across servers are whole servers' worth).
      std::map<int64_t, std::set<int64_t>> slots;  // server -> GPU indices
      for (int64_t d : s.devices) {
        CHECK(seen.insert(d).second);
        slots[d / m1].insert(d % m1);
      }
      for (const auto& [server, g] : slots) CHECK(g == slots.begin()->second);
      CHECK(static_cast<int64_t>(slots.size() * slots.begin()->second.size()) == s.replicas);
    }
    CHECK(static_cast<int64_t>(seen.size()) == m1 * m2);
  }
}

TEST_CASE("auto mode's per-stage replication (no devices list) keeps consecutive ranks from each offset") {
  Plan plan;
  plan.schedule = Schedule::kPipeDream;
  plan.pp = 3;
  plan.microbatch_size = plan.num_microbatches = plan.global_batch = 1;
  int64_t off = 0;
  for (int64_t rep : {2, 1, 1}) {
    PlanStage ps;
    ps.first_layer = ps.last_layer = static_cast<int64_t>(plan.stages.size());
    ps.replicas = rep;
    ps.device_offset = off;
    ps.forward_s = ps.backward_input_s = ps.backward_weight_s = 1e-3;
    off += rep;
    plan.stages.push_back(ps);
  }
  CodegenOptions o;
  o.gpus_per_node = 2;
  LaunchPlan L;
  REQUIRE_OK(BuildLaunchPlan(plan, "digest", o, &L));
  REQUIRE(L.ranks.size() == 4);
  CHECK(L.ranks[0].stage == 0);
  CHECK(L.ranks[1].stage == 0);
  CHECK(L.ranks[2].stage == 1);
  CHECK(L.ranks[3].stage == 2);
  CHECK(L.ranks[3].node == 1);
}

// tiny-gpt 2-2 (asynchronous schedule) on 2 nodes of 2: each stage's replicas on one node (ranks
// as auto mode places them) or across both (devices {0, 2} and {1, 3}, as PipeDream's hierarchy
// with one top-level stage on both servers puts them). planner run on thread ranks trains the same
// losses either way (a replica's data follows its replica index, not its rank), and they fall.
TEST_CASE(
    "planner run of a 2-2 plan with its replicas across nodes trains the same losses as with them within a node") {
  ClusterSpec cluster;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  ModelSpec model;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/tiny-gpt.yaml"), &model));
  CostSource src;
  src.cluster = &cluster;
  src.model = &model;
  SearchOptions so;
  so.gpus = 4;
  so.global_batch = 16;
  so.tp = {1};
  so.microbatch = {1};
  so.replication = {2, 2};
  so.schedules = {Schedule::kPipeDream};
  Plan plan;
  REQUIRE_OK(SolveAuto(src, so, &plan));
  REQUIRE(plan.stages.size() == 2);
  std::vector<std::vector<double>> losses;
  for (bool across : {false, true}) {
    Plan p = plan;
    if (across) {
      p.stages[0].devices = {0, 2};
      p.stages[1].devices = {1, 3};
      p.stages[1].device_offset = 1;
    }
    CodegenOptions g;
    g.gpus_per_node = 2;
    g.run.iterations = 10;
    g.run.learning_rate = 3e-3;
    LaunchPlan L;
    REQUIRE_OK(BuildLaunchPlan(p, model.digest, g, &L));
    L.path = "tiny-gpt/launch.yaml";
    const auto nodes = NodesOfStages(L);
    CHECK(nodes[0] == (across ? std::set<int64_t>{0, 1} : std::set<int64_t>{0}));
    CHECK(nodes[1] == (across ? std::set<int64_t>{0, 1} : std::set<int64_t>{1}));
    std::vector<RunSummary> runs;
    RunOptions o;
    o.run_dir = testing::FreshRunDir("placement-test", across ? "across" : "within");
    REQUIRE_OK(testing::RunOnThreads(L, model, o, &runs, "placement-test"));
    losses.push_back(runs[0].loss);
  }
  REQUIRE(losses[0].size() == 10);
  CHECK(losses[0] == losses[1]);
  const double first = (losses[1][0] + losses[1][1] + losses[1][2]) / 3,
               last = (losses[1][7] + losses[1][8] + losses[1][9]) / 3;
  MESSAGE("2-2 across nodes: loss, first 3 mean " << first << ", last 3 mean " << last);
  CHECK(last < first - 0.05);
}

}  // namespace
}  // namespace planner
