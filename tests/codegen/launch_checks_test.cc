// Where launch.yaml is read (spec/launch_plan.cc, runtime/launch_layout.cc): a launch written by
// codegen reads back, and hand edits that would reach MPI_Comm_split with a wrong colour or make
// replicas diverge (groups that contradict the ranks table and tp / cp / dp / pp) are refused with
// the field and the fix. Also the bounded-integer and checked-product helpers (spec/input_limits.h).
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "runtime/launch_layout.h"
#include "spec/input_limits.h"
#include "spec/launch_plan.h"
#include "spec/rank_generator.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// A uniform plan of tp x cp x dp x pp GPUs over 8 layers (two per stage for pp 4, and so on).
Plan UniformPlan(int64_t tp, int64_t cp, int64_t dp, int64_t pp) {
  Plan p;
  p.tp = tp;
  p.cp = cp;
  p.dp = dp;
  p.pp = pp;
  p.gpus = p.gpus_used = tp * cp * dp * pp;
  p.microbatch_size = 1;
  p.num_microbatches = 4;
  p.global_batch = 4 * dp;
  const int64_t per = 8 / pp;
  for (int64_t s = 0; s < pp; ++s) {
    PlanStage st;
    st.first_layer = s * per;
    st.last_layer = s * per + per - 1;
    st.replicas = dp;
    st.tp = tp;
    st.forward_s = st.backward_input_s = st.backward_weight_s = 1e-3;
    p.stages.push_back(st);
  }
  return p;
}

LaunchPlan LaunchOf(const Plan& plan) {
  LaunchPlan L;
  CodegenOptions o;
  o.gpus_per_node = 8;
  const Status s = BuildLaunchPlan(plan, "digest", o, &L);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return L;
}

LaunchPlan Launch(int64_t tp, int64_t cp, int64_t dp, int64_t pp) { return LaunchOf(UniformPlan(tp, cp, dp, pp)); }

// The same with `v` virtual stages per position (8 / (pp v) layers each) under `schedule`, and MoE folding ep x etp.
Plan VirtualPlan(int64_t tp, int64_t cp, int64_t dp, int64_t pp, Schedule schedule, int64_t v, int64_t ep,
                 int64_t etp) {
  Plan p = UniformPlan(tp, cp, dp, pp);
  p.schedule = schedule;
  p.interleave = v;
  p.ep = ep;
  p.etp = etp;
  p.stages.clear();
  const int64_t per = 8 / (pp * v);
  for (int64_t q = 0; q < pp * v; ++q) {
    PlanStage st;
    st.first_layer = q * per;
    st.last_layer = q * per + per - 1;
    st.replicas = dp;
    st.tp = tp;
    st.chunk = q / pp;
    st.forward_s = st.backward_input_s = st.backward_weight_s = 1e-3;
    p.stages.push_back(st);
  }
  return p;
}

// The error of reading `L` back from its text ("" when it reads).
std::string ReadBack(const LaunchPlan& L) {
  LaunchPlan out;
  const Status s = ParseLaunchPlan("launch.yaml", LaunchPlanToYaml(L), &out);
  return s.ok() ? std::string() : s.message();
}

bool Has(const std::string& text, const std::string& part) {
  INFO(text);
  return text.find(part) != std::string::npos;
}

TEST_CASE("launch files codegen writes read back, groups and all") {
  CHECK(ReadBack(Launch(2, 1, 2, 2)) == "");
  CHECK(ReadBack(Launch(2, 2, 1, 2)) == "");
  CHECK(ReadBack(Launch(1, 1, 4, 1)) == "");
}

// Codegen's ranks from the rank generator (spec/rank_generator.h) are the ones of its earlier loop nest: rank =
// ((position x dp + replica) x cp + cp rank) x tp + tp rank, neighbours at the adjacent positions, wrapping around
// with interleaved chunks but not with DualPipeV's V; and they read back.
TEST_CASE("codegen's ranks and pipeline neighbours are the rank formula's") {
  struct Case {
    int64_t tp, cp, dp, pp;
    Schedule schedule;
    int64_t v, ep, etp;
  };
  const Case cases[] = {{2, 1, 2, 2, Schedule::k1F1B, 1, 1, 1},        {1, 2, 2, 2, Schedule::k1F1B, 1, 1, 1},
                        {2, 2, 1, 2, Schedule::kInterleaved, 2, 1, 1}, {1, 1, 2, 4, Schedule::kInterleaved, 2, 1, 1},
                        {1, 1, 1, 2, Schedule::kDualPipeV, 2, 1, 1},   {2, 1, 2, 2, Schedule::kGpipe, 1, 2, 1},
                        {2, 1, 4, 1, Schedule::k1F1B, 1, 2, 2},        {1, 2, 2, 2, Schedule::kInterleaved, 2, 4, 1}};
  for (const Case& c : cases) {
    CAPTURE(c.tp);
    CAPTURE(c.cp);
    CAPTURE(c.dp);
    CAPTURE(c.pp);
    CAPTURE(ScheduleName(c.schedule));
    const LaunchPlan L = LaunchOf(VirtualPlan(c.tp, c.cp, c.dp, c.pp, c.schedule, c.v, c.ep, c.etp));
    CHECK(ReadBack(L) == "");
    auto rank_of = [&](int64_t r, int64_t k, int64_t cp_rank, int64_t j) {
      return ((r * c.dp + k) * c.cp + cp_rank) * c.tp + j;
    };
    const bool wrap = c.v > 1 && c.pp > 1 && c.schedule != Schedule::kDualPipeV;
    REQUIRE(static_cast<int64_t>(L.ranks.size()) == c.tp * c.cp * c.dp * c.pp);
    for (const LaunchRank& x : L.ranks) {
      CHECK(x.rank == rank_of(x.stage, x.replica, x.cp_rank, x.tp_rank));
      std::vector<int64_t> prev, next;
      if (x.stage > 0) prev = {rank_of(x.stage - 1, x.replica, x.cp_rank, x.tp_rank)};
      else if (wrap) prev = {rank_of(c.pp - 1, x.replica, x.cp_rank, x.tp_rank)};
      if (x.stage + 1 < c.pp) next = {rank_of(x.stage + 1, x.replica, x.cp_rank, x.tp_rank)};
      else if (wrap) next = {rank_of(0, x.replica, x.cp_rank, x.tp_rank)};
      CHECK(x.prev == prev);
      CHECK(x.next == next);
      CHECK(x.node == x.rank / 8);
      CHECK(x.local_device == x.rank % 8);
    }
    CHECK(L.cp_groups.empty() == (c.cp == 1));
    CHECK(L.ep_groups.empty() == (c.ep == 1));
  }
}

// Groups that pass the ranks-table rules but are not the rank generator's (regrouped, or listed in another order)
// are refused where launch.yaml is read, naming the group, the generator's sizes and order, and its group.
TEST_CASE("groups that are not the rank generator's are refused") {
  LaunchPlan L = Launch(2, 1, 2, 2);  // tp groups {0, 1}, {2, 3}, ...
  std::swap(L.tp_groups[0], L.tp_groups[1]);
  CHECK(Has(ReadBack(L),
            "field 'groups.tensor_parallel': group 0 is [2, 3] but tp 2, cp 1, dp 2, pp 2 in order "
            "tp-cp-dp-pp make [0, 1]; codegen the plan again"));
  L = Launch(2, 1, 2, 2);  // dp groups {0, 2}, {1, 3}, ...: members in another order
  std::swap(L.dp_groups[1][0], L.dp_groups[1][1]);
  CHECK(Has(ReadBack(L),
            "field 'groups.data_parallel': group 1 is [3, 1] but tp 2, cp 1, dp 2, pp 2 in order "
            "tp-cp-dp-pp make [1, 3]"));
  L = Launch(1, 2, 1, 2);
  std::swap(L.pp_groups[0], L.pp_groups[1]);
  CHECK(Has(ReadBack(L),
            "field 'groups.pipeline': group 0 is [1, 3] but tp 1, cp 2, dp 1, pp 2 in order tp-cp-dp-pp "
            "make [0, 2]"));
  L = Launch(1, 2, 2, 1);
  std::swap(L.cp_groups[0], L.cp_groups[1]);
  CHECK(Has(ReadBack(L), "field 'groups.context_parallel': group 0 is [2, 3] but"));
  // MoE: tp 1, dp 4, ep 2: the EP groups {0, 1}, {2, 3} and the expert-DP groups {0, 2}, {1, 3}, swapped.
  L = LaunchOf(VirtualPlan(1, 1, 4, 1, Schedule::k1F1B, 1, 2, 1));
  REQUIRE(L.ep_groups == RankGroups{{0, 1}, {2, 3}});
  std::swap(L.ep_groups, L.edp_groups);
  CHECK(Has(ReadBack(L),
            "field 'groups.expert_parallel': group 0 is [0, 2] but expert tp 1, ep 2, dp 2, pp 1 in order "
            "tp-ep-dp-pp make [0, 1]; codegen the plan again"));
}

TEST_CASE("a rank in no data-parallel group is refused before any communicator split") {
  LaunchPlan L = Launch(2, 1, 2, 2);
  L.dp_groups.clear();
  CHECK(Has(ReadBack(L), "field 'groups.data_parallel': rank 0 is in no data_parallel group"));
  L = Launch(2, 1, 2, 2);
  L.dp_groups.pop_back();  // the last group's ranks now have none
  CHECK(Has(ReadBack(L), "is in no data_parallel group"));
}

TEST_CASE("data-parallel groups that contradict the tp ranks are refused") {
  // tp 2, dp 2, pp 2: rank = (stage x 2 + replica) x 2 + tp rank; stage 0's DP groups are {0, 2} and {1, 3}.
  LaunchPlan L = Launch(2, 1, 2, 2);
  REQUIRE(L.dp_groups[0] == std::vector<int64_t>{0, 2});
  REQUIRE(L.dp_groups[1] == std::vector<int64_t>{1, 3});
  L.dp_groups[0] = {0, 3};
  L.dp_groups[1] = {1, 2};
  CHECK(Has(ReadBack(L), "field 'groups.data_parallel[0]': ranks 0 and 3 do not share a stage and tp rank"));
}

TEST_CASE("a data-parallel group of the wrong size is refused") {
  LaunchPlan L = Launch(1, 1, 4, 1);  // one group {0, 1, 2, 3}
  L.dp_groups = {{0, 1}, {2, 3}};
  CHECK(Has(ReadBack(L), "field 'groups.data_parallel[0]': 2 ranks, but a data_parallel group of this launch has 4"));
}

TEST_CASE("a rank in two groups of a kind is refused") {
  LaunchPlan L = Launch(1, 1, 4, 1);
  L.tp_groups[1] = {0};
  CHECK(Has(ReadBack(L), "field 'groups.tensor_parallel[1]': rank 0 is already in groups.tensor_parallel[0]"));
}

TEST_CASE("tensor-parallel members must be listed in tp-rank order") {
  LaunchPlan L = Launch(2, 1, 2, 2);
  std::swap(L.tp_groups[0][0], L.tp_groups[0][1]);
  CHECK(Has(ReadBack(L),
            "field 'groups.tensor_parallel[0]': rank 1 is member 0 of the group but its ranks entry says 1"));
}

TEST_CASE("pipeline groups hold one replica's stages in order") {
  LaunchPlan L = Launch(1, 1, 2, 2);  // ranks: stage 0 = {0, 1}, stage 1 = {2, 3}; pipelines {0, 2} and {1, 3}
  REQUIRE(L.pp_groups[0] == std::vector<int64_t>{0, 2});
  L.pp_groups[0] = {0, 3};
  L.pp_groups[1] = {1, 2};
  CHECK(Has(ReadBack(L), "field 'groups.pipeline[0]': ranks 0 and 3 do not share a replica, tp rank and cp rank"));
}

TEST_CASE("context-parallel groups are required with cp > 1 and checked against cp ranks") {
  LaunchPlan L = Launch(2, 2, 1, 2);
  L.cp_groups.clear();
  CHECK(Has(ReadBack(L), "field 'groups.context_parallel': rank 0 is in no context_parallel group"));
  L = Launch(2, 2, 1, 2);
  std::swap(L.cp_groups[0][0], L.cp_groups[0][1]);
  CHECK(Has(ReadBack(L), "field 'groups.context_parallel[0]'"));
  CHECK(Has(ReadBack(L), "its ranks entry says 1"));
}

TEST_CASE("the ranks table must fill the layout exactly") {
  LaunchPlan L = Launch(1, 1, 2, 2);
  L.ranks[1].replica = 0;  // rank 1 now claims rank 0's slot
  CHECK(Has(ReadBack(L),
            "field 'ranks[1]': rank 1 has the same stage 0, replica 0, tp_rank 0 and cp_rank 0 as an earlier rank"));
  L = Launch(1, 1, 2, 2);
  L.ranks[3].replica = 5;
  CHECK(Has(ReadBack(L), "field 'ranks[3].replica': replica 5 does not exist: stage 1 has 2 replicas"));
  L = Launch(1, 1, 2, 2);
  L.dp = 1;  // with tp 2 below: the ranks, written for dp 2 and tp 1, no longer fill the layout
  L.tp = 2;  // (stage replicas 2 != dp 1 reads as per-stage replication: (2 + 2) x tp 2 ranks)
  CHECK(Has(ReadBack(L), "4 ranks, but the layout (tp 2, cp 1, dp 1, pp 2, stage replicas) has 8"));
}

TEST_CASE("LayoutOf checks the batch split with a product that cannot overflow") {
  LaunchPlan L = Launch(1, 1, 2, 2);
  LaunchLayout y;
  CHECK_OK(LayoutOf(L, &y));
  CHECK(y.microbatches == 4);
  L.num_microbatches = int64_t{1} << 40;
  L.dp = int64_t{1} << 40;                       // the product overflows int64: refused, not wrapped into a match
  for (auto& st : L.stages) st.replicas = L.dp;  // still uniform (replicas = dp)
  L.global_batch = 0;
  const Status s = LayoutOf(L, &y);
  CHECK(!s.ok());
  CHECK(Has(s.message(), "global_batch 0 != microbatch_size 1 x num_microbatches 1099511627776 x dp 1099511627776"));
}

TEST_CASE("CheckedProduct and GetIntInRange") {
  int64_t p = -1;
  CHECK(CheckedProduct({1 << 20, 1 << 20, 1 << 20}, &p));
  CHECK(p == int64_t{1} << 60);
  CHECK(!CheckedProduct({int64_t{1} << 40, int64_t{1} << 40}, &p));
  CHECK(p == int64_t{1} << 60);  // untouched on overflow
  YAML::Node n = YAML::Load("a: 5\nb: 7\n");
  YamlReader r("f.yaml");
  int64_t v = 0;
  CHECK_OK(GetIntInRange(r, n, "a", "a", &v, true, 1, 5));
  CHECK(v == 5);
  const Status s = GetIntInRange(r, n, "b", "b", &v, true, 1, 5);
  CHECK(s.message() == "f.yaml:2: field 'b': must be at most 5, got 7");
  CHECK(v == 5);
}

TEST_CASE("CheckLayerCover names the gap, the overlap and the layer past the model") {
  CHECK_OK(CheckLayerCover("p.yaml", {{0, 3}, {4, 7}}, 8, "m.yaml"));
  CHECK_OK(CheckLayerCover("p.yaml", {{4, 7}, {0, 3}}, 8, "m.yaml"));  // listed by virtual stage, not by layer
  CHECK(CheckLayerCover("p.yaml", {{0, 3}, {4, 9}}, 8, "m.yaml").message() ==
        "p.yaml: field 'stages[1].last_layer': layer 9 does not exist: m.yaml has 8 layers (0..7); solve again for "
        "this model");
  CHECK(Has(CheckLayerCover("p.yaml", {{0, 3}, {3, 7}}, 8, "m.yaml").message(),
            "field 'stages[1].first_layer': stage starts at layer 3, but layer 3 is already in another stage"));
  CHECK(Has(CheckLayerCover("p.yaml", {{0, 3}, {5, 7}}, 8, "m.yaml").message(), "layers 4..4 are in no stage"));
  CHECK(Has(CheckLayerCover("p.yaml", {{0, 3}}, 8, "m.yaml").message(),
            "field 'stages': layers 4..7 of m.yaml are in no stage"));
}

}  // namespace
}  // namespace planner
