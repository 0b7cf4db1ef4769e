// Every error the joint search meets reaches the caller with its cause: input
// problems are InvalidArgument (or NotFound) naming the file or flag and the
// fix; infeasibility names the binding constraint.
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "dp_solver/search.h"
#include "tests/test_util.h"

namespace planner {
namespace {

bool Has(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// A two-GPU cluster with the given peaks and usable memory.
ClusterSpec Cluster(const std::string& peaks, double usable_GiB = 10) {
  const std::string text = fmt::format(
      "format_version: 1\nname: test-cluster\n"
      "gpu: {{name: test-gpu, peak_tflops: {{{}}}, memory_GiB: 12, usable_memory_GiB: {}, hbm_bandwidth_GBps: 10}}\n"
      "topology:\n  - {{name: host, size: 2, bandwidth_GBps: 2.5, latency_us: 5}}\n",
      peaks, usable_GiB);
  ClusterSpec c;
  REQUIRE_OK(ParseClusterSpec("test-cluster.yaml", text, &c));
  return c;
}

ModelSpec TinyGpt() {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/tiny-gpt.yaml"), &m));
  return m;
}

// A measured profile of `layers` layers with timings at tp = 1 only.
Profile TpOneProfile(size_t layers) {
  Profile p;
  p.path = "tp1.profile.yaml";
  p.reference_microbatch = 1;
  for (size_t i = 0; i < layers; ++i) {
    ProfileLayer l;
    l.name = "layer" + std::to_string(i);
    l.params_bytes = 4e3;
    l.output_bytes = l.stash_bytes = 1e3;
    ProfileTiming t;
    t.forward_s = 1e-3;
    t.backward_s = 2e-3;
    l.timings.push_back(t);
    p.layers.push_back(l);
  }
  return p;
}

Status Solve(const ModelSpec* model, const Profile* profile, const ClusterSpec& cluster, const SearchOptions& o,
             Plan* plan) {
  CostSource src;
  src.model = model;
  src.profile = profile;
  src.cluster = &cluster;
  return SolveAuto(src, o, plan);
}

TEST_CASE("a cluster without a peak for the model's dtype is InvalidArgument naming the field to add") {
  ModelSpec m = TinyGpt();  // fp32
  ClusterSpec c = Cluster("fp16: 100");
  SearchOptions o;
  o.gpus = 2;
  Plan p;
  Status s = Solve(&m, nullptr, c, o, &p);
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(Has(s, "test-cluster.yaml"));
  CHECK(Has(s, "no peak for dtype fp32"));
  CHECK(Has(s, "add gpu.peak_tflops.fp32"));
  CHECK(ExitCodeFor(s) == 2);
}

TEST_CASE("a profile-costed plan on a cluster without the model's peak has no MFU, and says why") {
  ModelSpec m = TinyGpt();
  Profile prof = TpOneProfile(m.layers.size());
  ClusterSpec c = Cluster("fp16: 100");
  SearchOptions o;
  o.gpus = 2;
  o.tp = {1};
  Plan p;
  REQUIRE_OK(Solve(&m, &prof, c, o, &p));
  CHECK(std::isfinite(p.predicted.mfu));
  CHECK(p.predicted.mfu == 0);
  bool noted = false;
  for (const auto& n : p.notes)
    noted =
        noted || (n.find("MFU unknown") != std::string::npos && n.find("gpu.peak_tflops.fp32") != std::string::npos);
  CHECK(noted);
}

TEST_CASE("a profile without timings at a --tp asked for names the profile, the layer and the fix") {
  ModelSpec m = TinyGpt();
  Profile prof = TpOneProfile(m.layers.size());
  ClusterSpec c = Cluster("fp32: 1");
  SearchOptions o;
  o.gpus = 2;
  o.tp = {2};
  Plan p;
  Status s = Solve(&m, &prof, c, o, &p);
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kNotFound);
  CHECK(Has(s, "tp1.profile.yaml: layer 'layer0' has no timing at tp=2"));
  CHECK(Has(s, "profile it with --tp 2"));
  CHECK(ExitCodeFor(s) == 2);

  // Not asked for: the default degrees skip what the profile does not cover.
  o.tp.clear();
  REQUIRE_OK(Solve(&m, &prof, c, o, &p));
  CHECK(p.tp == 1);
}

TEST_CASE("a --replication that no tensor-parallel degree matches is InvalidArgument naming it") {
  ModelSpec m = TinyGpt();
  ClusterSpec c = Cluster("fp32: 1");
  SearchOptions o;
  o.gpus = 2;
  o.tp = {1};
  o.replication = {2, 1};  // 3 TP groups; 2 GPUs at tp 1 make 2
  Plan p;
  Status s = Solve(&m, nullptr, c, o, &p);
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(Has(s, "--replication 2-1: the replicas sum to 3 TP groups but tp=1 makes 2"));
}

TEST_CASE("a --replication that does not fit in memory is Infeasible naming the replication, not a uniform plan") {
  ModelSpec m = TinyGpt();
  ClusterSpec c = Cluster("fp32: 1", 0.0001);
  SearchOptions o;
  o.gpus = 2;
  o.tp = {1};
  o.replication = {1, 1};
  Plan p;
  Status s = Solve(&m, nullptr, c, o, &p);
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(Has(s, "no plan fits in memory: per-stage replication at tp=1"));
  CHECK_FALSE(Has(s, "best try"));
}

TEST_CASE("nothing divides the problem: the message names what left the layouts out") {
  ModelSpec m = TinyGpt();
  ClusterSpec c = Cluster("fp32: 1");
  SearchOptions o;
  o.gpus = 2;
  o.global_batch = 3;
  o.microbatch = {2};
  Plan p;
  Status s = Solve(&m, nullptr, c, o, &p);
  INFO(s.ToString());
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(Has(s, "no configuration divides the problem"));
  CHECK(Has(s, "the global batch 3 is not a multiple of microbatch 2"));

  o.global_batch = 0;
  o.microbatch.clear();
  o.tp = {4};
  s = Solve(&m, nullptr, c, o, &p);
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(Has(s, "tp=4 does not divide the 2 GPUs"));
}

TEST_CASE("requests the search cannot serve are InvalidArgument, not a crash") {
  ModelSpec m = TinyGpt();
  ClusterSpec c = Cluster("fp32: 1");
  SearchOptions o;
  o.gpus = 2;
  Plan p;
  Status s = Solve(nullptr, nullptr, c, o, &p);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(Has(s, "needs a model"));
  o.top_k = 0;
  s = Solve(&m, nullptr, c, o, &p);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(Has(s, "--top 0"));
}

TEST_CASE("a tp, pp, microbatch or replica below 1 is InvalidArgument naming the flag") {
  ModelSpec m = TinyGpt();
  ClusterSpec c = Cluster("fp32: 1");
  Plan p;
  {
    SearchOptions o;
    o.gpus = 2;
    o.microbatch = {-2};  // was planned with negative times
    Status s = Solve(&m, nullptr, c, o, &p);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(Has(s, "--microbatch -2: every value must be at least 1"));
  }
  {
    SearchOptions o;
    o.gpus = 2;
    o.tp = {1, 0};  // 0 was skipped silently
    Status s = Solve(&m, nullptr, c, o, &p);
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(Has(s, "--tp 0"));
  }
}

}  // namespace
}  // namespace planner
