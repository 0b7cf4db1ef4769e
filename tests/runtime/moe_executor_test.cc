// Expert parallelism through the executor on thread ranks (solve, codegen, run, as `planner solve`,
// `planner codegen` and `planner run` do): configs/models/tiny-moe.yaml (block 0 dense, blocks 1 and 2
// MoE: 4 experts of width 48, top-2, a shared expert of width 32, Switch aux loss 0.01) and
// tiny-moe-mla.yaml (MLA, sigmoid router with route groups) under ep 2 (dp 2 folded into ep 2),
// tp 2 x ep 2 (4 ranks) with and without sequence parallelism, pp 2 x ep 2 (4 ranks), dp 4 with ep 2 (edp 2) and
// an MLA variant (with and without SP), give one process's gradients for
// every parameter (each expert's from the rank that holds it), relative L2 1e-5; launch.yaml round trips
// ep and the expert groups of MOE.md's folding (etp 1 and etp = tp); the run report has the all-to-all rows.
// Expert tensor parallelism (etp = tp = 2, no SP): every expert cut over the TP group like the dense MLP.
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "dp_solver/search.h"
#include "runtime/executor.h"
#include "spec/cluster_spec.h"
#include "tests/runtime/thread_run.h"
#include "tests/test_util.h"

namespace planner {
namespace {

namespace fs = std::filesystem;

struct MoeCase {
  int64_t gpus = 2, tp = 1, pp = 1, ep = 2;
  bool mla = false, sp = false;
  int64_t etp = 1;
};

std::string RunDir(const std::string& name) { return testing::FreshRunDir("moe-test", name); }

Status MakeLaunch(const MoeCase& c, ModelSpec* model, LaunchPlan* out) {
  ClusterSpec cluster;
  PLANNER_RETURN_IF_ERROR(LoadClusterSpec(
      testing::SourcePath(c.gpus > 2 ? "configs/clusters/dgx-a100.yaml" : "configs/clusters/local-cpu.yaml"),
      &cluster));
  PLANNER_RETURN_IF_ERROR(LoadModelSpec(
      testing::SourcePath(c.mla ? "configs/models/tiny-moe-mla.yaml" : "configs/models/tiny-moe.yaml"), model));
  CostSource src;
  src.cluster = &cluster;
  src.model = model;
  SearchOptions o;
  o.gpus = c.gpus;
  o.tp = {c.tp};
  o.pp = {c.pp};
  o.schedules = {Schedule::k1F1B};
  o.ep = {c.ep};
  o.etp = {c.etp};
  Plan plan;
  PLANNER_RETURN_IF_ERROR(SolveAuto(src, o, &plan));
  plan.sequence_parallel = c.sp, plan.cp = 1;
  CodegenOptions g;
  g.gpus_per_node = cluster.levels[0].size;
  g.run.iterations = 1;
  PLANNER_RETURN_IF_ERROR(BuildLaunchPlan(plan, model->digest, g, out));
  out->path = "tiny-moe/launch.yaml";
  return Status::OK();
}

Status RunOnThreads(const LaunchPlan& L, const ModelSpec& model, RunOptions opt, std::vector<RunSummary>* out) {
  return testing::RunOnThreads(L, model, std::move(opt), out, "moe-test");
}

// name -> gradient: replica 0 / tp rank 0 for the dense parameters (TP-sharded ones are compared by their
// norm over the TP group), any rank for an expert's (its EDP group holds equal copies).
struct Grads {
  std::map<std::string, std::vector<float>> whole;
  std::map<std::string, double> sharded_sq;
};
Grads Gather(const LaunchPlan& L, const std::vector<RunSummary>& runs) {
  Grads g;
  for (size_t r = 0; r < runs.size(); ++r) {
    const bool edp0 = RankInGroup(L.edp_groups, static_cast<int64_t>(r)) == 0;
    for (const NamedGradient& x : runs[r].gradients) {
      if (x.expert && x.tp_sharded) {  // an expert's TP cut (etp > 1): each cut on one rank of EDP group 0
        if (edp0)
          for (float v : x.values) g.sharded_sq[x.name] += static_cast<double>(v) * v;
      } else if (x.expert) {
        g.whole[x.name] = x.values;
      } else if (L.ranks[r].replica == 0 && x.tp_sharded) {
        for (float v : x.values) g.sharded_sq[x.name] += static_cast<double>(v) * v;
      } else if (L.ranks[r].replica == 0 && L.ranks[r].tp_rank == 0) {
        g.whole[x.name] = x.values;
      }
    }
  }
  return g;
}

// The worst relative L2 difference over every parameter (sharded ones: of the squared norm).
double Compare(const LaunchPlan& L, const ModelSpec& model, const std::string& run_dir) {
  std::vector<RunSummary> multi, single;
  RunOptions o;
  o.run_dir = run_dir;
  REQUIRE_OK(RunOnThreads(L, model, o, &multi));
  REQUIRE_OK(RunOnThreads(SingleProcessPlan(L, model), model, {}, &single));
  const Grads want = Gather(SingleProcessPlan(L, model), single), got = Gather(L, multi);
  double worst = 0;
  int experts = 0;
  for (const auto& [name, w] : want.whole) {
    INFO(name);
    experts += name.find(".experts.") != std::string::npos;
    if (got.sharded_sq.count(name)) {
      double sq = 0;
      for (float v : w) sq += static_cast<double>(v) * v;
      worst = std::max(worst, std::fabs(got.sharded_sq.at(name) - sq) / sq);
      continue;
    }
    REQUIRE(got.whole.count(name) == 1);
    const std::vector<float>& x = got.whole.at(name);
    REQUIRE(x.size() == w.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < w.size(); ++i)
      num += (static_cast<double>(x[i]) - w[i]) * (x[i] - w[i]), den += static_cast<double>(w[i]) * w[i];
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  CHECK(experts == 16);  // 2 MoE blocks x 4 experts x fc1, fc2
  CHECK(want.whole.size() == got.whole.size() + got.sharded_sq.size());
  // the loss (cross-entropy and the MoE blocks' aux losses) equals one process's
  CHECK(std::fabs(multi[0].loss[0] - single[0].loss[0]) < 1e-5 * std::fabs(single[0].loss[0]));
  MESSAGE(fmt::format("{} parameters, worst relative L2 difference {:.2e}", want.whole.size(), worst));
  return worst;
}

TEST_CASE(
    "moe: ep 2 (dp 2 folded), tp 2 x ep 2 (with and without SP, etp 1 and 2), pp 2 x ep 2 and dp 4 x ep 2 (edp 2) give "
    "one process's gradients, each expert's on its rank") {
  // dp 4 with ep 2: edp 2, the expert gradients summed over the EDP group. SP: each TP rank routes its own tokens.
  for (const MoeCase& c :
       {MoeCase{2, 1, 1, 2, false}, MoeCase{4, 2, 1, 2, false}, MoeCase{4, 1, 2, 2, false}, MoeCase{4, 2, 1, 2, true},
        MoeCase{4, 1, 1, 2, false}, MoeCase{4, 2, 1, 2, false, true}, MoeCase{4, 2, 1, 2, true, true},
        MoeCase{4, 2, 1, 2, false, false, 2}, MoeCase{4, 2, 1, 2, true, false, 2}}) {
    INFO(fmt::format("gpus {} tp {} pp {} ep {} mla {} sp {} etp {}", c.gpus, c.tp, c.pp, c.ep, c.mla, c.sp, c.etp));
    ModelSpec model;
    LaunchPlan L;
    REQUIRE_OK(MakeLaunch(c, &model, &L));
    REQUIRE(L.ep == 2);
    REQUIRE(L.tp == c.tp);
    REQUIRE(L.pp == c.pp);
    const std::string dir = RunDir("ep");
    CHECK(Compare(L, model, dir) < 1e-5);
    std::ifstream in(fs::path(dir) / "report.md");
    std::stringstream text;
    text << in.rdbuf();
    INFO(text.str());
    CHECK(text.str().find(", ep 2,") != std::string::npos);
    CHECK(text.str().find("| stage | all-to-alls per iteration | measured | predicted |") != std::string::npos);
    // two MoE layers: per microbatch 3 in forward (counts, tokens, outputs) and 2 in backward each
    if (c.pp == 1) CHECK(text.str().find(fmt::format("| 0 | {} | ", 2 * 5 * L.num_microbatches)) != std::string::npos);
    CHECK(L.stages[0].predicted_ep_comm_s > 0);  // the solver's prediction reaches the report
    const std::string rep = text.str(), table = rep.substr(rep.find("| stage | all-to-alls per iteration"));
    CHECK(table.substr(0, table.find("\n\n")).find("n/a") == std::string::npos);
  }
}

TEST_CASE("moe: launch.yaml carries ep and MOE.md's folding (EP and EDP groups); etp 3 (neither 1 nor tp) is refused") {
  ModelSpec model;
  LaunchPlan L, back;
  REQUIRE_OK(MakeLaunch(MoeCase{4, 2, 1, 2, false}, &model, &L));
  // one stage, i = tp_rank + 2 replica read as ep_rank + 2 edp_rank: EP groups {0, 1}, {2, 3}; EDP {0, 2}, {1, 3}
  CHECK(L.ep_groups == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  CHECK(L.edp_groups == std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}});
  REQUIRE_OK(ParseLaunchPlan("launch.yaml", LaunchPlanToYaml(L), &back));
  CHECK(back.ep == 2);
  CHECK(back.etp == 1);
  CHECK(back.ep_groups == L.ep_groups);
  CHECK(back.edp_groups == L.edp_groups);
  LaunchPlan pp2;
  REQUIRE_OK(MakeLaunch(MoeCase{4, 1, 2, 2, false}, &model, &pp2));  // stage 1's ranks 2, 3
  CHECK(pp2.ep_groups == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  CHECK(pp2.edp_groups == std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}});
  LaunchPlan etp2;  // etp 2 = tp: i = etp_rank + 2 ep_rank: EP groups {0, 2}, {1, 3}; each EDP group one rank
  REQUIRE_OK(MakeLaunch(MoeCase{4, 2, 1, 2, false, false, 2}, &model, &etp2));
  CHECK(etp2.etp == 2);
  CHECK(etp2.ep_groups == std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}});
  CHECK(etp2.edp_groups == std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {3}});
  L.etp = 3;  // neither 1 nor tp
  std::vector<RunSummary> runs;
  Status s = RunOnThreads(L, model, {}, &runs);
  CHECK(s.code() == StatusCode::kNotSupported);
  CHECK(s.message().find("tiny-moe/launch.yaml: ep 2 runs with etp 1 (or etp = tp without sequence parallelism)") !=
        std::string::npos);
}

}  // namespace
}  // namespace planner
