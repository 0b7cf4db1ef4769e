// The search's --threads (SearchOptions::threads): ParallelFor runs every task once, and the search
// gives the plan, the runners-up, the counts and the errors one thread gives, pruned and exhaustive,
// on dense, MoE and infeasible requests.
#include <atomic>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "dp_solver/search.h"
#include "spec/engine_spec.h"
#include "spec/kernel_table.h"
#include "tests/dp_solver/moe_model.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("ParallelFor runs every task exactly once on every worker count") {
  for (int workers : {1, 2, 3, 8}) {
    for (int64_t n : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      std::atomic<int> bad_worker{0};
      ParallelFor(n, workers, [&](int64_t i, int w) {
        runs[static_cast<size_t>(i)].fetch_add(1);
        if (w < 0 || w >= workers) bad_worker.fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) CHECK(runs[static_cast<size_t>(i)].load() == 1);
      CHECK(bad_worker.load() == 0);
    }
  }
}

// The whole outcome of a search: its status, plan.yaml and counts.
std::string Outcome(const CostSource& src, SearchOptions o, int threads) {
  o.threads = threads;
  Plan p;
  SearchStats st;
  Status s = SolveAuto(src, o, &p, &st);
  return s.ToString() + "\n" + (s.ok() ? PlanToYaml(p) : std::string()) + "\n" + std::to_string(st.considered) +
         " considered, " + std::to_string(st.simulated) + " simulated";
}

void CheckSameAtEveryThreadCount(const CostSource& src, const SearchOptions& o) {
  const std::string one = Outcome(src, o, 1);
  for (int threads : {2, 3, 7}) {
    INFO("threads " << threads);
    CHECK(Outcome(src, o, threads) == one);
  }
}

TEST_CASE("a search on several threads gives one thread's plan, runners-up and counts") {
  ModelSpec gpt;
  ClusterSpec a100;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/gpt3-175b.yaml"), &gpt));
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &a100));
  CostSource src;
  src.model = &gpt;
  src.cluster = &a100;
  SearchOptions o;
  o.top_k = 8;
  SUBCASE("pruned, 256 GPUs") {
    o.gpus = 256;
    CheckSameAtEveryThreadCount(src, o);
  }
  SUBCASE("exhaustive, 64 GPUs") {
    o.gpus = 64;
    o.exhaustive = true;
    CheckSameAtEveryThreadCount(src, o);
  }
  SUBCASE("nothing fits: the binding constraint named is the same") {
    o.gpus = 8;
    const std::string one = Outcome(src, o, 1);
    CHECK(one.find("no plan fits in memory") != std::string::npos);
    CHECK(Outcome(src, o, 3) == one);
  }
  SUBCASE("nothing divides the problem: the same rejections") {
    o.gpus = 64;
    o.global_batch = 7;
    o.tp = {2, 4};
    o.pp = {1, 2};
    const std::string one = Outcome(src, o, 1);
    CHECK(one.find("no configuration divides the problem") != std::string::npos);
    CHECK(Outcome(src, o, 4) == one);
  }
}

TEST_CASE("an MoE search with kernel-level costs on several threads gives one thread's outcome") {
  const ModelSpec moe = testing::MoeModel(8, 16, 2, 1408, 1);
  ClusterSpec h100;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-h100.yaml"), &h100));
  KernelTable kt;
  EngineSpec engine;
  REQUIRE_OK(LoadKernelTable("h100", &kt));
  REQUIRE_OK(LoadEngineSpec("megatron-core", &engine));
  CostSource src;
  src.model = &moe;
  src.cluster = &h100;
  src.kernels = &kt;
  src.engine = &engine;
  SearchOptions o;
  o.gpus = 64;
  o.top_k = 6;
  CheckSameAtEveryThreadCount(src, o);
}

}  // namespace
}  // namespace planner
