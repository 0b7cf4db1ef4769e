// PipeDream mode against the objectives of PipeDream's own optimizer
// (optimizer_graph_hierarchical.py at msr-fiddle/pipedream 7db6a1c, run on
// the shipped profiles, vendored in tests/data/pipedream/; the recorded values
// are in docs/performance.md).
#include <filesystem>

#include "dp_solver/pipedream_dp.h"
#include "dp_solver/pipedream_plan.h"
#include "spec/cluster_spec.h"
#include "spec/pipedream_import.h"
#include "tests/test_util.h"

namespace planner {
namespace {

struct RefCase {
  const char* name;
  const char* model;
  std::vector<int64_t> machines;
  std::vector<double> bandwidths;
  double acr;     // 0: activation transfers off
  double memory;  // 0: no memory constraint
  bool straight, fewer;
  double objective;    // PipeDream's "Time per stage in pipeline", seconds
  const char* config;  // flattened, "" when not checked
};

const std::vector<RefCase> kCases = {
    {"vgg16 README -n 4", "vgg16", {4}, {1e9}, 1, 0, false, false, 0.205520896, "3-1"},
    {"vgg16 cluster A 4", "vgg16", {4}, {1.2e10}, 1, 0, false, false, 0.17007621866666667, "3-1"},
    {"vgg16 cluster A 4x2", "vgg16", {4, 2}, {1.2e10, 1.25e9}, 1, 0, false, false, 0.15743881600000004, "4-1-1-1-1"},
    // 4x4: PipeDream printed 12-1-1-1-1; 12-2-1-1 is an equal-cost tie (its tie order follows Python set hashing).
    {"vgg16 cluster A 4x4", "vgg16", {4, 4}, {1.2e10, 1.25e9}, 1, 0, false, false, 0.06688875213333333, ""},
    {"vgg16 cluster B 8", "vgg16", {8}, {2.5e10}, 1, 0, false, false, 0.08902892681142857, "7-1"},
    {"vgg16 cluster B 8x2", "vgg16", {8, 2}, {2.5e10, 3.125e9}, 1, 0, false, false, 0.06576668672, "8-5-2-1"},
    {"vgg16 flat 16", "vgg16", {16}, {3.125e9}, 1, 0, false, false, 0.04552480782648887, "15-1"},
    {"vgg16 flat 8 10Gbps", "vgg16", {8}, {1.25e9}, 1, 0, false, false, 0.10084139337142857, "7-1"},
    {"vgg16 flat 4 no comm", "vgg16", {4}, {1.25e8}, 0, 0, false, false, 0.19379062, "2-1-1"},
    {"vgg16 memory 4e9", "vgg16", {4, 4}, {1.2e10, 1.25e9}, 1, 4e9, false, false, 0.1336953104, ""},
    {"vgg16 straight", "vgg16", {4}, {1e10}, 1, 0, true, false, 0.23559000000000002, "1-1-1-1"},
    {"vgg16 fewer machines", "vgg16", {16}, {3.125e9}, 1, 0, false, true, 0.0455248078264889, ""},
    {"alexnet flat 4", "alexnet", {4}, {1e10}, 1, 0, false, false, 0.022185999999999997, ""},
    {"alexnet flat 16", "alexnet", {16}, {3.125e9}, 1, 0, false, false, 0.006289260029387755, ""},
    {"alexnet 4x2", "alexnet", {4, 2}, {1.2e10, 1.25e9}, 1, 0, false, false, 0.019694424, ""},
    {"resnet18 flat 8", "resnet18", {8}, {2.5e10}, 1, 0, false, false, 0.033029239568979595, ""},
    {"resnet18 4x2", "resnet18", {4, 2}, {1.2e10, 1.25e9}, 1, 0, false, false, 0.042310609599999986, ""},
    {"squeezenet flat 8", "squeezenet1_0", {8}, {1e10}, 1, 0, false, false, 0.03588922419999999, ""},
    {"gnmt flat 4", "gnmt", {4}, {1e10}, 1, 0, false, false, 0.025868000000000016, ""},
    {"gnmt flat 8 memory", "gnmt", {8}, {2.5e10}, 1, 8e9, false, false, 0.017125000000000015, ""},
    {"resnet50 flat 4", "resnet50", {4}, {1.2e10}, 1, 0, false, false, 0.11149699999999999, ""},
    {"resnet50 flat 16", "resnet50", {16}, {3.125e9}, 1, 0, false, false, 0.03288334336, ""},
    {"resnext50 flat 8 no comm", "resnext50", {8}, {2.5e10}, 0, 0, false, false, 0.07444093121279997, ""},
    {"resnet50 4x2", "resnet50", {4, 2}, {1.2e10, 1.25e9}, 1, 0, false, false, 0.07619412560000012, ""},
    {"resnet101 4x2", "resnet101", {4, 2}, {1.2e10, 1.25e9}, 1, 0, false, false, 0.0822083584, ""},
    {"densenet121 flat 8", "densenet121", {8}, {2.5e10}, 1, 0, false, false, 0.04101000000000021, ""},
    {"gnmt_large flat 4", "gnmt_large", {4}, {1e10}, 1, 0, false, false, 0.137129, ""},
};

TEST_CASE("PipeDream mode reproduces PipeDream's optimizer on its shipped profiles") {
  for (const auto& c : kCases) {
    // Vendored in the repository (tests/data/pipedream/README.md): missing data is a failure.
    std::string path = testing::SourcePath(std::string("tests/data/pipedream/") + c.model + "/graph.txt");
    INFO("PipeDream profile graph missing: " << path << " (tests/data/pipedream/ is part of the repository)");
    REQUIRE(std::filesystem::is_regular_file(path));
    Profile p;
    REQUIRE_OK(ImportPipeDreamFile(path, 0, &p));
    PipeDreamOptions o;
    o.machines = c.machines;
    o.bandwidths = c.bandwidths;
    o.activation_compression_ratio = c.acr;
    o.use_memory_constraint = c.memory > 0;
    if (c.memory > 0) o.memory_bytes = c.memory;
    o.straight_pipeline = c.straight;
    o.use_fewer_machines = c.fewer;
    PipeDreamResult r;
    INFO(c.name);
    REQUIRE_OK(SolvePipeDream(p, o, &r));
    CHECK(r.objective_s == doctest::Approx(c.objective).epsilon(1e-9));
    if (std::string(c.config).size() > 0) CHECK(r.config == c.config);
  }
}

TEST_CASE("PipeDream mode's levels come from whole topology levels of the cluster") {
  ClusterSpec cluster;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  std::vector<int64_t> machines;
  std::vector<double> bandwidths;
  REQUIRE_OK(PipeDreamLevels(cluster, 16, &machines, &bandwidths));
  CHECK(machines == std::vector<int64_t>{8, 2});
  CHECK(bandwidths == std::vector<double>{230e9, 24e9});
  REQUIRE_OK(PipeDreamLevels(cluster, 1, &machines, &bandwidths));
  CHECK(machines == std::vector<int64_t>{1});
  Status s = PipeDreamLevels(cluster, 12, &machines, &bandwidths);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "--gpus 12 does not fill whole 'node' units of 8; pass --pd-machines");
}

TEST_CASE("PipeDream mode's plan holds the optimizer's stages, replicas on the machines used") {
  Profile p;
  REQUIRE_OK(ImportPipeDreamFile(testing::SourcePath("tests/data/pipedream/vgg16/graph.txt"), 0, &p));
  ClusterSpec cluster;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  PipeDreamOptions o;
  o.machines = {4, 2};
  o.bandwidths = {1.2e10, 1.25e9};
  PipeDreamResult r;
  REQUIRE_OK(SolvePipeDream(p, o, &r));
  Plan plan;
  REQUIRE_OK(BuildPipeDreamPlan(p, cluster, 8, o, &plan));
  CHECK(plan.mode == PlanMode::kPipeDream);
  CHECK(plan.schedule == Schedule::kPipeDream);
  CHECK(plan.config == r.config);
  CHECK(plan.predicted.iteration_s == r.objective_s);
  REQUIRE(plan.stages.size() == r.stages.size());
  CHECK(plan.pp == static_cast<int64_t>(r.stages.size()));
  int64_t replicas = 0;
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    const PlanStage& st = plan.stages[i];
    CHECK(st.replicas == r.stages[i].replicas);
    CHECK(st.first_layer_name == r.stages[i].layers.front());
    CHECK(st.last_layer_name == r.stages[i].layers.back());
    CHECK(static_cast<int64_t>(st.devices.size()) == st.replicas);
    replicas += st.replicas;
  }
  CHECK(replicas == plan.gpus_used);
  REQUIRE(plan.notes.size() == 2);
  CHECK(plan.notes[1] == "levels (innermost first): 4 x 1.2e+10 B/s, 2 x 1.25e+09 B/s");
}

}  // namespace
}  // namespace planner
