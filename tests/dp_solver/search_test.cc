// The joint search on the bundled models: orderings, constraints and errors.
#include <cmath>

#include "dp_solver/search.h"
#include "spec/layer_catalog.h"
#include "tests/test_util.h"

namespace planner {
namespace {

struct Fixture {
  ModelSpec model;
  ClusterSpec cluster;
  Fixture(const char* m, const char* c) {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath(std::string("configs/models/") + m), &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath(std::string("configs/clusters/") + c), &cluster));
  }
  Status Solve(const SearchOptions& o, Plan* p) {
    CostSource s;
    s.model = &model;
    s.cluster = &cluster;
    return SolveAuto(s, o, p);
  }
};

TEST_CASE("GPT-3 175B on 1024 A100s: a feasible plan, ranked, within memory") {
  Fixture f("gpt3-175b.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 1024;
  Plan p;
  REQUIRE_OK(f.Solve(o, &p));
  CHECK(p.tp * p.pp * p.dp == 1024);
  CHECK(p.tp <= 8);  // TP stays inside a node
  CHECK(p.predicted.peak_memory_bytes <= f.cluster.UsableMemoryBytes());
  CHECK(p.runners_up.size() == 4);
  for (const auto& r : p.runners_up) CHECK(r.iteration_s >= p.predicted.iteration_s);
  CHECK(p.predicted.mfu > 0.3);
  CHECK(p.predicted.mfu < 0.7);
}

TEST_CASE("more GPUs never predict a slower iteration for a data-parallel-friendly model") {
  Fixture f("gpt2-small.yaml", "dgx-a100.yaml");
  double prev = INFINITY;
  for (int64_t n : {1, 2, 4, 8, 16}) {
    SearchOptions o;
    o.gpus = n;
    Plan p;
    REQUIRE_OK(f.Solve(o, &p));
    CHECK(p.predicted.iteration_s < prev);
    prev = p.predicted.iteration_s;
  }
}

TEST_CASE(
    "a gpt model's embedding and its final norm, lm_head and loss stay in one chunk each, as Megatron places them") {
  // Llama 3 8B (vocabulary 128256: the lm_head alone outweighs a block) on pp 4 x v 8: 32 chunks over 32 blocks.
  // A balance that ignored Megatron's units cut between the lm_head and the loss and sent the logits (what
  // Megatron's layout cannot express).
  Fixture f("llama3-8b.yaml", "dgx-h100.yaml");
  SearchOptions o;
  o.gpus = 32;
  o.tp = {1};
  o.pp = {4};
  o.cp = {1};
  o.microbatch = {1};
  o.schedules = {Schedule::kInterleaved};
  o.interleave = {8};
  Plan p;
  REQUIRE_OK(f.Solve(o, &p));
  REQUIRE(p.stages.size() == 32);
  const auto& layers = f.model.layers;
  const int64_t n = static_cast<int64_t>(layers.size());
  // No chunk starts inside the tail (final norm, lm_head, loss: Megatron's L, a chunk of its own or with blocks).
  CHECK(layers[static_cast<size_t>(n - 1)].kind == LayerKind::kLoss);
  CHECK(layers[static_cast<size_t>(n - 2)].kind == LayerKind::kLmHead);
  for (const auto& st : p.stages) {
    CHECK(st.first_layer != n - 1);
    CHECK(st.first_layer != n - 2);
  }
  CHECK(p.stages.back().last_layer == n - 1);
  // pp x v above the units (32 blocks, the embedding, the tail: 34) is no candidate.
  o.pp = {4};
  o.interleave = {16};
  Plan q;
  CHECK(!f.Solve(o, &q).ok());
}

TEST_CASE("a model that fits no GPU count is Infeasible and names the binding constraint") {
  Fixture f("megatron-1t.yaml", "dgx-a100.yaml");
  SearchOptions o;
  o.gpus = 8;
  Plan p;
  Status s = f.Solve(o, &p);
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(s.message().find("GiB > 75.0 GiB usable") != std::string::npos);
  CHECK(ExitCodeFor(s) == 3);
}

TEST_CASE("bad requests are InvalidArgument") {
  Fixture f("tiny-gpt.yaml", "local-cpu.yaml");
  Plan p;
  SearchOptions o;
  o.gpus = 3;  // the cluster holds 2
  Status s = f.Solve(o, &p);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("the cluster holds 2 GPUs but --gpus is 3") != std::string::npos);
  CHECK(ExitCodeFor(s) == 2);
  o.gpus = 0;
  s = f.Solve(o, &p);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("--gpus must be at least 1") != std::string::npos);
}

TEST_CASE("a valid request no configuration divides is Infeasible") {
  Fixture f("tiny-gpt.yaml", "local-cpu.yaml");
  SearchOptions o;
  o.gpus = 2;
  o.global_batch = 3;  // microbatch 2 x any data-parallel width never divides 3
  o.microbatch = {2};
  Plan p;
  Status s = f.Solve(o, &p);
  CHECK(s.code() == StatusCode::kInfeasible);
  CHECK(s.message().find("no configuration divides the problem") != std::string::npos);
  CHECK(ExitCodeFor(s) == 3);
}

}  // namespace
}  // namespace planner
