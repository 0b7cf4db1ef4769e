// dp_solver/programs.h: each rank's program reproduces the order the runtime
// derived from the simulator, and the checker proves program sets
// deadlock-free and catches broken ones.
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "dp_solver/programs.h"
#include "dp_solver/schedule_sim.h"
#include "tests/test_util.h"

namespace planner {
namespace {

// Stage times that differ per stage (so ZB-H1's list scheduling has real choices).
LaunchStage StageTimes(int64_t q) {
  LaunchStage s;
  s.first_layer = s.last_layer = q;
  s.predicted_forward_s = 1.0 + 0.37 * static_cast<double>(q % 3);
  s.predicted_backward_input_s = 1.3 + 0.21 * static_cast<double>((q + 1) % 4);
  s.predicted_backward_weight_s = 0.6 + 0.11 * static_cast<double>(q % 2);
  s.predicted_compute_s = s.predicted_forward_s + s.predicted_backward_input_s + s.predicted_backward_weight_s;
  s.predicted_p2p_s = 0.05 * static_cast<double>(q % 2);
  return s;
}

// A uniform launch plan (codegen's Megatron rank order: tp fastest, then dp, then pp).
LaunchPlan Uniform(Schedule s, int64_t p, int64_t v, int64_t m, int64_t dp = 1, int64_t tp = 1) {
  LaunchPlan L;
  L.schedule = s;
  L.pp = p;
  L.dp = dp;
  L.tp = tp;
  L.interleave = v;
  L.num_microbatches = m;
  L.microbatch_size = 1;
  L.global_batch = m * dp;
  for (int64_t q = 0; q < p * v; ++q) {
    LaunchStage st = StageTimes(q);
    st.replicas = dp;
    st.chunk = q / p;
    L.stages.push_back(st);
  }
  for (int64_t r = 0; r < p * dp * tp; ++r) {
    LaunchRank x;
    x.rank = r;
    x.stage = r / (tp * dp);
    x.replica = (r / tp) % dp;
    x.tp_rank = r % tp;
    L.ranks.push_back(x);
  }
  // Megatron's groups of that order (the launch reader checks them against the ranks).
  for (int64_t q = 0; q < p; ++q)
    for (int64_t k = 0; k < dp; ++k) {
      L.tp_groups.emplace_back();
      for (int64_t j = 0; j < tp; ++j) L.tp_groups.back().push_back((q * dp + k) * tp + j);
    }
  for (int64_t q = 0; q < p; ++q)
    for (int64_t j = 0; j < tp; ++j) {
      L.dp_groups.emplace_back();
      for (int64_t k = 0; k < dp; ++k) L.dp_groups.back().push_back((q * dp + k) * tp + j);
    }
  for (int64_t k = 0; k < dp; ++k)
    for (int64_t j = 0; j < tp; ++j) {
      L.pp_groups.emplace_back();
      for (int64_t q = 0; q < p; ++q) L.pp_groups.back().push_back((q * dp + k) * tp + j);
    }
  return L;
}

// Per-stage replication: stage s has replicas[s] ranks (numbered stage by stage).
LaunchPlan Replicated(Schedule s, const std::vector<int64_t>& replicas, int64_t m, int64_t iterations = 1) {
  LaunchPlan L;
  L.schedule = s;
  L.pp = static_cast<int64_t>(replicas.size());
  L.dp = 1;
  L.num_microbatches = m;
  L.microbatch_size = 2;
  L.global_batch = 2 * m;
  L.run.iterations = iterations;
  int64_t rank = 0;
  for (size_t q = 0; q < replicas.size(); ++q) {
    LaunchStage st = StageTimes(static_cast<int64_t>(q));
    st.replicas = replicas[q];
    L.stages.push_back(st);
    for (int64_t k = 0; k < replicas[q]; ++k) {
      LaunchRank x;
      x.rank = rank++;
      x.stage = static_cast<int64_t>(q);
      x.replica = k;
      L.ranks.push_back(x);
    }
  }
  if (std::any_of(replicas.begin(), replicas.end(), [](int64_t r) { return r != 1; }))
    L.dp = 0;  // force "replicas != dp"
  return L;
}

// The runtime's derivation before programs (runtime/executor.cc: SimStagesOf, DeviceOrder,
// ScheduleOrder, replicated_order), kept here as the reference the programs must reproduce.
std::vector<SimStage> RuntimeSimStages(const LaunchPlan& L) {
  std::vector<SimStage> st;
  for (const auto& s : L.stages) {
    SimStage x;
    x.forward_s = s.predicted_forward_s;
    x.backward_input_s = s.predicted_backward_input_s;
    x.backward_weight_s = s.predicted_backward_weight_s;
    x.send_s = s.predicted_p2p_s;
    st.push_back(x);
  }
  return st;
}
std::vector<std::string> RuntimeDeviceOrder(const SimResult& r, int64_t device) {
  std::vector<SimEvent> ev;
  for (const auto& e : r.events) {
    if (e.device == device && e.kind != 'C') ev.push_back(e);
  }
  std::stable_sort(ev.begin(), ev.end(), [](const SimEvent& x, const SimEvent& y) { return x.start_s < y.start_s; });
  std::vector<std::string> out;
  for (const auto& e : ev) out.push_back(fmt::format("{}{}.{}", e.kind, e.stage, e.microbatch));
  return out;
}
std::vector<std::string> RuntimeOrder(const LaunchPlan& L, int64_t position, int64_t replica) {
  SimResult r;
  if (!PerStageReplication(L)) {
    REQUIRE_OK(SimulateSchedule(L.schedule, RuntimeSimStages(L), L.pp, L.num_microbatches, true, &r));
    return RuntimeDeviceOrder(r, position);
  }
  std::vector<int64_t> reps, in_flight;
  int64_t after = 0, device = -1, offset = 0;
  for (const auto& x : L.stages) after += x.replicas;
  for (int64_t q = 0; q < static_cast<int64_t>(L.stages.size()); ++q) {
    const auto& x = L.stages[static_cast<size_t>(q)];
    reps.push_back(x.replicas);
    in_flight.push_back((after + x.replicas - 1) / x.replicas);
    if (q == position) device = offset + replica;
    offset += x.replicas;
    after -= x.replicas;
  }
  const int64_t m = L.global_batch / L.microbatch_size;
  const int64_t total = L.schedule == Schedule::kPipeDream ? L.run.iterations * m : m;
  REQUIRE_OK(SimulateReplicated(RuntimeSimStages(L), reps, in_flight, total, true, &r));
  return RuntimeDeviceOrder(r, device);
}

std::vector<std::string> ComputeOrder(const RankProgram& g) {
  std::vector<std::string> out;
  for (const Action& a : g.actions) {
    if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackwardInput ||
        a.kind == ActionKind::kBackwardWeight) {
      out.push_back(ActionToString(a));
    }
  }
  return out;
}

// Builds, assigns and checks a plan's programs; returns them.
std::vector<RankProgram> BuildAndCheck(LaunchPlan* L) {
  REQUIRE_OK(BuildPrograms(*L, &L->programs));
  REQUIRE_OK(AssignPrograms(L));
  CHECK_OK(CheckPrograms(*L));
  return L->programs;
}

void CompareWithRuntime(LaunchPlan L) {
  const auto progs = BuildAndCheck(&L);
  for (const auto& g : progs) {
    CAPTURE(g.position);
    CAPTURE(g.replica);
    CHECK(ComputeOrder(g) == RuntimeOrder(L, g.position, std::max<int64_t>(0, g.replica)));
  }
}

TEST_CASE("programs reproduce the runtime's simulated order for every schedule") {
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1, Schedule::kInterleaved}) {
    for (int64_t p : {1, 2, 3, 4}) {
      for (int64_t m : {1, 2, 4, 6, 8}) {
        for (int64_t v : {1, 2, 3}) {
          if ((s != Schedule::kInterleaved && v != 1) || (s == Schedule::kInterleaved && m % p != 0)) continue;
          const std::string name = ScheduleName(s);
          CAPTURE(name);
          CAPTURE(p);
          CAPTURE(m);
          CAPTURE(v);
          CompareWithRuntime(Uniform(s, p, v, m, 2, 2));
        }
      }
    }
  }
  // 2-1-1 with a flush, and PipeDream's asynchronous schedule over several iterations.
  CompareWithRuntime(Replicated(Schedule::k1F1B, {2, 1, 1}, 4));
  CompareWithRuntime(Replicated(Schedule::k1F1B, {3, 1, 2}, 6));
  CompareWithRuntime(Replicated(Schedule::kPipeDream, {2, 1, 1}, 4, 3));
  CompareWithRuntime(Replicated(Schedule::kPipeDream, {1, 1, 1}, 4, 2));
  CompareWithRuntime(Replicated(Schedule::kPipeDream, {3, 2, 1, 2}, 6, 4));
}

TEST_CASE("the programs codegen wrote are the order a rank derives from the same launch.yaml") {
  // The golden launch files: programs built from the stage times as written, so a rank that
  // re-simulated from the file (as the runtime did) would get the same order.
  for (const char* name : {"tiny-gpt-pp2", "gpt3-64", "vgg16-async"}) {
    CAPTURE(name);
    LaunchPlan L;
    REQUIRE_OK(LoadLaunchPlan(testing::SourcePath(fmt::format("tests/codegen/golden/{}/launch.yaml", name)), &L));
    CHECK_OK(CheckPrograms(L));
    for (const auto& g : L.programs) {
      CAPTURE(g.position);
      CAPTURE(g.replica);
      CHECK(ComputeOrder(g) == RuntimeOrder(L, g.position, std::max<int64_t>(0, g.replica)));
    }
    std::vector<RankProgram> again;
    REQUIRE_OK(BuildPrograms(L, &again));
    REQUIRE(again.size() == L.programs.size());
    for (size_t i = 0; i < again.size(); ++i) CHECK(again[i].actions == L.programs[i].actions);
  }
}

std::string Text(const std::vector<RankProgram>& progs, int64_t position, int64_t replica) {
  for (const auto& g : progs) {
    if (g.position == position && g.replica == replica) return ActionsToString(g.actions);
  }
  return "(none)";
}

TEST_CASE("a program places receives before, sends after the compute, then AR and OPT") {
  LaunchPlan L = Uniform(Schedule::k1F1B, 2, 1, 3, 2);
  auto progs = BuildAndCheck(&L);
  REQUIRE(progs.size() == 2);  // one per position: data- and tensor-parallel ranks share it
  CHECK(Text(progs, 0, -1) == "F0.0 SA0.0 F0.1 SA0.1 RG0.0 B0.0 F0.2 SA0.2 RG0.1 B0.1 RG0.2 B0.2 AR OPT");
  CHECK(Text(progs, 1, -1) == "RA1.0 F1.0 B1.0 SG1.0 RA1.1 F1.1 B1.1 SG1.1 RA1.2 F1.2 B1.2 SG1.2 AR OPT");
  // No AR without data parallelism; ZB-H1 splits W.
  LaunchPlan Z = Uniform(Schedule::kZbH1, 2, 1, 2, 1);
  progs = BuildAndCheck(&Z);
  for (const auto& g : progs) {
    const std::string t = ActionsToString(g.actions);
    CHECK(t.find("AR") == std::string::npos);
    CHECK(t.find(fmt::format("W{}.1", g.position)) != std::string::npos);
    CHECK(t.substr(t.size() - 3) == "OPT");
  }
  // Interleaved: chunks wrap around the devices (stage 1 on device 1 sends to stage 2 on device 0).
  LaunchPlan I = Uniform(Schedule::kInterleaved, 2, 2, 2);
  progs = BuildAndCheck(&I);
  CHECK(Text(progs, 1, -1).find("SA1.0") != std::string::npos);
  CHECK(Text(progs, 0, -1).find("RA2.0") != std::string::npos);
}

TEST_CASE("replicated programs name peers' replicas; PipeDream updates after every backward") {
  LaunchPlan L = Replicated(Schedule::k1F1B, {2, 1}, 2);
  auto progs = BuildAndCheck(&L);
  REQUIRE(progs.size() == 3);
  CHECK(Text(progs, 0, 0) == "F0.0 SA0.0@0 RG0.0@0 B0.0 AR OPT");
  CHECK(Text(progs, 0, 1) == "F0.1 SA0.1@0 RG0.1@0 B0.1 AR OPT");
  CHECK(Text(progs, 1, 0) == "RA1.0@0 F1.0 B1.0 SG1.0@0 RA1.1@1 F1.1 B1.1 SG1.1@1 OPT");
  LaunchPlan A = Replicated(Schedule::kPipeDream, {2, 1}, 2, 2);
  progs = BuildAndCheck(&A);
  // Microbatches are numbered over the run (2 iterations x 2); replica j mod 2 of stage 0.
  CHECK(Text(progs, 0, 1) == "F0.1 SA0.1@0 F0.3 SA0.3@0 RG0.1@0 B0.1 AR0 OPT RG0.3@0 B0.3 AR0 OPT");
  CHECK(Text(progs, 1, 0).find("RA1.3@1 F1.3 B1.3 SG1.3@1 OPT") != std::string::npos);
  // 4 microbatches over 3 replicas: replicas 1 and 2 have none in the second round but join its reduce.
  LaunchPlan U = Replicated(Schedule::kPipeDream, {3, 1}, 4, 1);
  progs = BuildAndCheck(&U);
  CHECK(Text(progs, 0, 0) == "F0.0 SA0.0@0 F0.3 SA0.3@0 RG0.0@0 B0.0 AR0 OPT RG0.3@0 B0.3 AR0 OPT");
  CHECK(Text(progs, 0, 2) == "F0.2 SA0.2@0 RG0.2@0 B0.2 AR0 OPT AR0 OPT");
}

// ---------------------------------------------------------------------------
// The checker.

Action Find(const std::vector<Action>& v, const std::string& token, size_t* index) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (ActionToString(v[i]) == token) {
      *index = i;
      return v[i];
    }
  }
  FAIL("no action " << token);
  return {};
}

TEST_CASE("every schedule's programs pass the checker over a grid of p, m, v and replications") {
  int checked = 0;
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kZbH1, Schedule::kInterleaved}) {
    for (int64_t p : {1, 2, 3, 4, 5, 8}) {
      for (int64_t m : {1, 2, 3, 4, 8, 16}) {
        for (int64_t v : {1, 2, 4}) {
          if ((s != Schedule::kInterleaved && v != 1) || (s == Schedule::kInterleaved && m % p != 0)) continue;
          for (int64_t dp : {1, 3}) {
            LaunchPlan L = Uniform(s, p, v, m, dp);
            BuildAndCheck(&L);
            ++checked;
          }
        }
      }
    }
  }
  for (Schedule s : {Schedule::k1F1B, Schedule::kPipeDream}) {
    for (const std::vector<int64_t>& reps :
         std::vector<std::vector<int64_t>>{{2, 1, 1},
                                           {1, 2},
                                           {3, 1, 2},
                                           {2, 2, 2},
                                           {4, 2, 1},
                                           {1, 1, 1, 1},
                                           // a replicated stage after a single one (the solver picks such)
                                           {1, 3, 1},
                                           {2, 3, 1},
                                           {1, 3, 2, 2},
                                           {1, 3, 1, 3},
                                           {8, 5, 2, 1},
                                           {7, 1, 7, 1}}) {
      for (int64_t m : {12, 24}) {
        LaunchPlan L = Replicated(s, reps, m, 3);
        BuildAndCheck(&L);
        ++checked;
      }
    }
  }
  CHECK(checked > 100);
}

TEST_CASE("a shorter or resumed PipeDream run's sub-sequence of the programs stays deadlock-free") {
  for (const std::vector<int64_t>& reps : std::vector<std::vector<int64_t>>{{2, 1, 1}, {3, 1, 3}, {2, 2}}) {
    const int64_t m = 6, iterations = 4;
    LaunchPlan L = Replicated(Schedule::kPipeDream, reps, m, iterations);
    const auto full = BuildAndCheck(&L);
    for (int64_t start = 0; start <= iterations; ++start) {
      for (int64_t end = start; end <= iterations; ++end) {
        // What the runtime executes (runtime/rank_program.cc): the window's actions, renumbered from 0.
        LaunchPlan S = L;
        S.run.iterations = end - start;
        for (auto& g : S.programs) g.actions = WindowOfRun(g.actions, start * m, end * m);
        CAPTURE(start);
        CAPTURE(end);
        CHECK_OK(CheckPrograms(S));
      }
    }
  }
}

TEST_CASE("the checker catches a swapped send/receive pair, a dropped send and a cycle across ranks") {
  LaunchPlan L = Uniform(Schedule::k1F1B, 3, 1, 4);
  BuildAndCheck(&L);
  SUBCASE("stage 0 waits for the gradient before sending the activation it comes from") {
    auto& v = L.programs[0].actions;
    size_t i = 0, k = 0;
    Find(v, "SA0.0", &i);
    Find(v, "RG0.0", &k);
    std::swap(v[i], v[k]);
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("deadlock: 3 of 3 ranks cannot finish") == 0);
    CHECK(s.message().find("rank 0 (stage 0, replica 0) waits at action") != std::string::npos);
    CHECK(s.message().find("RG0.0 (from rank 1 (stage 1, replica 0))") != std::string::npos);
  }
  SUBCASE("a dropped send") {
    auto& v = L.programs[1].actions;
    size_t i = 0;
    Find(v, "SG1.2", &i);
    v.erase(v.begin() + static_cast<long>(i));
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message() == "rank 0 (stage 0, replica 0): RG0.2 (from rank 1 (stage 1, replica 0)): no rank sends it");
  }
  SUBCASE("a receive twice") {
    auto& v = L.programs[2].actions;
    size_t i = 0;
    Action a = Find(v, "RA2.1", &i);
    v.insert(v.begin() + static_cast<long>(i), a);
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("sent 1 times and received 2 times") != std::string::npos);
  }
  SUBCASE("two ranks each receive first what the other sends later") {
    // Stage 1 waits for microbatch 3's activation before sending microbatch 0's gradient;
    // stage 0 waits for microbatch 0's gradient before sending microbatch 3's activation.
    auto& v0 = L.programs[0].actions;
    auto& v1 = L.programs[1].actions;
    size_t i = 0, k = 0;
    Find(v0, "RG0.0", &i);
    Find(v0, "SA0.3", &k);
    REQUIRE(i < k);
    size_t a = 0, b = 0;
    Find(v1, "RA1.3", &a);
    Action ra = v1[a];
    v1.erase(v1.begin() + static_cast<long>(a));
    Find(v1, "SG1.0", &b);
    v1.insert(v1.begin() + static_cast<long>(b), ra);
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("deadlock") == 0);
    CHECK(s.message().find("RA1.3 (from rank 0") != std::string::npos);
  }
  SUBCASE("a program that names a stage of another device, or a peer that does not exist") {
    L.programs[0].actions.push_back(L.programs[1].actions.front());
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message() == "rank 0 (stage 0, replica 0): RA1.0 names stage 1, which does not run on this rank");
    L.programs[0].actions.back() = L.programs[0].actions.front();
    L.programs[0].actions.back().kind = ActionKind::kSendGrad;
    s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message() == "rank 0 (stage 0, replica 0): SG0.0 has no peer stage -1");
  }
}

TEST_CASE("the checker catches a replica that misses a gradient reduce") {
  LaunchPlan L = Replicated(Schedule::k1F1B, {2, 1}, 4);
  BuildAndCheck(&L);
  auto& v = L.programs[1].actions;  // stage 0, replica 1
  REQUIRE(ActionToString(v[v.size() - 2]) == "AR");
  v.erase(v.end() - 2);
  Status s = CheckPrograms(L);
  REQUIRE_FALSE(s.ok());
  CHECK(
      s.message() ==
      fmt::format("deadlock: 1 of 3 ranks cannot finish (2 finished); rank 0 (stage 0, replica 0) waits at action {}: "
                  "AR (a collective of 2 ranks, group 0)",
                  L.programs[0].actions.size() - 1));
}

TEST_CASE("a uniform plan with per-replica programs is checked replica by replica") {
  LaunchPlan L = Uniform(Schedule::k1F1B, 2, 1, 2, 2);
  BuildAndCheck(&L);
  std::vector<RankProgram> split;
  for (const auto& g : L.programs) {
    for (int64_t k = 0; k < 2; ++k) {
      split.push_back(g);
      split.back().replica = k;
    }
  }
  L.programs = split;
  REQUIRE_OK(AssignPrograms(&L));
  CHECK_OK(CheckPrograms(L));
  auto& v = L.programs[1].actions;  // position 0, replica 1
  REQUIRE(ActionToString(v[v.size() - 2]) == "AR");
  v.erase(v.end() - 2);
  Status s = CheckPrograms(L);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("rank 0 (stage 0, replica 0) waits at action") != std::string::npos);
  CHECK(s.message().find("AR (a collective of 2 ranks") != std::string::npos);
}

// Random program sets: a random global order of local steps, messages and collectives is
// written into per-process programs (each message's send before its receive in that order),
// so the order itself proves the set deadlock-free.
struct RandomSet {
  std::vector<CheckProcess> procs;
  std::vector<std::vector<int32_t>> groups;
};
RandomSet MakeRandom(std::mt19937& rng) {
  RandomSet r;
  const int n = 2 + static_cast<int>(rng() % 5);
  for (int p = 0; p < n; ++p) r.procs.push_back({fmt::format("p{}", p), {}});
  r.groups.push_back({});
  for (int p = 0; p < n; ++p) r.groups[0].push_back(p);
  r.groups.push_back({0, static_cast<int32_t>(n - 1)});
  const int events = 10 + static_cast<int>(rng() % 60);
  for (int e = 0; e < events; ++e) {
    const int kind = static_cast<int>(rng() % 10);
    const int32_t a = static_cast<int32_t>(rng() % static_cast<unsigned>(n));
    int32_t b = static_cast<int32_t>(rng() % static_cast<unsigned>(n - 1));
    if (b >= a) ++b;
    if (kind < 7) {
      r.procs[static_cast<size_t>(a)].steps.push_back({CheckStep::Kind::kSend, b, e, fmt::format("send m{}", e)});
      r.procs[static_cast<size_t>(b)].steps.push_back({CheckStep::Kind::kRecv, a, e, fmt::format("recv m{}", e)});
    } else if (kind < 9) {
      r.procs[static_cast<size_t>(a)].steps.push_back({CheckStep::Kind::kLocal, -1, 0, "local"});
    } else {
      const int g = static_cast<int>(rng() % 2);
      for (int32_t p : r.groups[static_cast<size_t>(g)])
        r.procs[static_cast<size_t>(p)].steps.push_back({CheckStep::Kind::kCollective, -1, g, "AR"});
    }
  }
  return r;
}

size_t IndexOf(const CheckProcess& p, CheckStep::Kind kind, int64_t tag) {
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].kind == kind && p.steps[i].tag == tag) return i;
  }
  return p.steps.size();
}

TEST_CASE("random valid program sets pass; their perturbations are caught") {
  std::mt19937 rng(20261123);
  int swapped = 0, cycles = 0;
  for (int trial = 0; trial < 500; ++trial) {
    RandomSet r = MakeRandom(rng);
    CAPTURE(trial);
    REQUIRE_OK(CheckDeadlockFree(r.procs, r.groups));
    {  // a dropped send
      RandomSet d = r;
      for (auto& p : d.procs) {
        auto it = std::find_if(p.steps.begin(), p.steps.end(),
                               [](const CheckStep& s) { return s.kind == CheckStep::Kind::kSend; });
        if (it == p.steps.end()) continue;
        p.steps.erase(it);
        Status s = CheckDeadlockFree(d.procs, d.groups);
        CHECK_FALSE(s.ok());
        CHECK(s.message().find("no rank sends it") != std::string::npos);
        break;
      }
    }
    // A swapped pair: A sends m1 to B, then receives m2 that B sends after receiving m1;
    // A receiving m2 first is a cycle.
    for (int32_t a = 0; a < static_cast<int32_t>(r.procs.size()) && swapped <= trial; ++a) {
      const auto& pa = r.procs[static_cast<size_t>(a)];
      for (size_t i = 0; i < pa.steps.size() && swapped <= trial; ++i) {
        if (pa.steps[i].kind != CheckStep::Kind::kSend) continue;
        const int32_t b = pa.steps[i].peer;
        const auto& pb = r.procs[static_cast<size_t>(b)];
        const size_t r1 = IndexOf(pb, CheckStep::Kind::kRecv, pa.steps[i].tag);
        for (size_t k = i + 1; k < pa.steps.size(); ++k) {
          const CheckStep& s2 = pa.steps[k];
          if (s2.kind != CheckStep::Kind::kRecv || s2.peer != b || IndexOf(pb, CheckStep::Kind::kSend, s2.tag) < r1)
            continue;
          RandomSet w = r;
          std::swap(w.procs[static_cast<size_t>(a)].steps[i], w.procs[static_cast<size_t>(a)].steps[k]);
          Status s = CheckDeadlockFree(w.procs, w.groups);
          CHECK_FALSE(s.ok());
          CHECK(s.message().find("deadlock") == 0);
          ++swapped;
          break;
        }
      }
    }
    // A cycle across ranks: A and B each move a receive of the other's message to their front.
    for (size_t i = 0; i < r.procs[0].steps.size(); ++i) {
      const CheckStep& s1 = r.procs[0].steps[i];
      if (s1.kind != CheckStep::Kind::kRecv) continue;
      const int32_t b = s1.peer;
      auto& pb = r.procs[static_cast<size_t>(b)].steps;
      auto it = std::find_if(pb.begin(), pb.end(),
                             [](const CheckStep& s) { return s.kind == CheckStep::Kind::kRecv && s.peer == 0; });
      if (it == pb.end()) continue;
      RandomSet c = r;
      auto& sa = c.procs[0].steps;
      auto& sb = c.procs[static_cast<size_t>(b)].steps;
      std::rotate(sa.begin(), sa.begin() + static_cast<long>(i), sa.begin() + static_cast<long>(i) + 1);
      const long kb = it - pb.begin();
      std::rotate(sb.begin(), sb.begin() + kb, sb.begin() + kb + 1);
      Status s = CheckDeadlockFree(c.procs, c.groups);
      CHECK_FALSE(s.ok());
      CHECK(s.message().find("deadlock") == 0);
      CHECK(s.message().find("p0 waits at action 1") != std::string::npos);
      ++cycles;
      break;
    }
  }
  CHECK(swapped > 100);
  CHECK(cycles > 100);
}

TEST_CASE("a 16384-GPU plan carries one program per pipeline position") {
  LaunchPlan L = Uniform(Schedule::k1F1B, 64, 1, 128, 32, 8);
  REQUIRE(L.ranks.size() == 16384);
  const auto progs = BuildAndCheck(&L);
  CHECK(progs.size() == 64);
  const std::string yaml = LaunchPlanToYaml(L);
  const size_t programs_bytes = yaml.size() - yaml.find("\nprograms:\n");
  CHECK(programs_bytes < 64 * 128 * 6 * 8);  // ~6 tokens of < 8 bytes per microbatch and position
  LaunchPlan back;
  // The reader needs a valid document: stages and ranks round-trip with the programs.
  REQUIRE_OK(ParseLaunchPlan("big.yaml", yaml, &back));
  CHECK(back.programs.size() == 64);
  for (size_t i = 0; i < progs.size(); ++i) CHECK(back.programs[i].actions == progs[i].actions);
  CHECK(back.ranks[16383].program == 63);
  CHECK(back.ranks[0].program == 0);
}

// ---------------------------------------------------------------------------
// What the checker refuses beyond deadlocks: programs that would run but compute the wrong thing,
// or match messages wrongly on NCCL; and launch.yaml is checked where it is read.

TEST_CASE("the checker refuses incomplete programs, a second W, reordered sends and unused programs") {
  LaunchPlan L = Uniform(Schedule::kGpipe, 2, 1, 2);
  BuildAndCheck(&L);
  REQUIRE(ActionsToString(L.programs[0].actions) == "F0.0 SA0.0 F0.1 SA0.1 RG0.0 B0.0 RG0.1 B0.1 OPT");
  SUBCASE("one W: every other backward would lose its weight gradient") {
    L.programs[0].actions.insert(L.programs[0].actions.end() - 1, Action{ActionKind::kBackwardWeight, 0, 0});
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("stage 0 microbatch 1 has 0 backward-weight actions where every other microbatch has 1") !=
          std::string::npos);
  }
  SUBCASE("a microbatch dropped on both ranks: no deadlock, but half the batch never trains") {
    for (auto& g : L.programs) {
      std::erase_if(g.actions,
                    [](const Action& a) { return a.microbatch == 1 && a.kind != ActionKind::kOptimizerStep; });
    }
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("stage 0 microbatch 1 is never run") != std::string::npos);
  }
  SUBCASE("a forward twice") {
    L.programs[0].actions.insert(L.programs[0].actions.begin() + 1, Action{ActionKind::kForward, 0, 0});
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("stage 0 microbatch 0 has 2 forward and 1 backward actions") != std::string::npos);
  }
  SUBCASE("sends reordered: fine by tags (MPI), wrong by posting order (NCCL)") {
    L.programs[0].actions = {};
    REQUIRE_OK(ParseActions("F0.0 F0.1 SA0.1 SA0.0 RG0.0 B0.0 RG0.1 B0.1 OPT", &L.programs[0].actions));
    Status s = CheckPrograms(L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find("message 1 to rank 1 (stage 1, replica 0) is SA0.1") != std::string::npos);
    CHECK(s.message().find("NCCL matches them in posting order") != std::string::npos);
  }
  SUBCASE("a program no rank runs") {
    L.programs.push_back(RankProgram{9, 4, {}});
    Status s = AssignPrograms(&L);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message() == "program 2 (position 9, replica 4) is run by no rank; remove it");
  }
}

TEST_CASE("launch.yaml's programs are checked where the file is read") {
  LaunchPlan L = Uniform(Schedule::k1F1B, 2, 1, 2);
  L.path = "L/launch.yaml";
  BuildAndCheck(&L);
  std::string text = LaunchPlanToYaml(L);
  LaunchPlan back;
  REQUIRE_OK(ParseLaunchPlan("L/launch.yaml", text, &back));
  const size_t at = text.find("SA0.0 ");
  REQUIRE(at != std::string::npos);
  text.erase(at, 6);  // rank 0 no longer sends microbatch 0's activation
  Status s = ParseLaunchPlan("L/launch.yaml", text, &back);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("L/launch.yaml:") == 0);
  CHECK(s.message().find("field 'programs'") != std::string::npos);
  CHECK(s.message().find("RA1.0 (from rank 0 (stage 0, replica 0)): no rank sends it") != std::string::npos);
}

// Issue 32: a program that passes the checker trains as the plan says. Every single-action deletion and
// duplication of a generated program set is refused (each schedule, uniform and per-stage replicated, the
// asynchronous one included); the unedited set passes.
TEST_CASE("every single-action deletion or duplication of a generated program is refused") {
  std::vector<LaunchPlan> plans = {Uniform(Schedule::kGpipe, 2, 1, 4, 2),
                                   Uniform(Schedule::k1F1B, 3, 1, 6, 2),
                                   Uniform(Schedule::kZbH1, 2, 1, 4, 1),
                                   Uniform(Schedule::kInterleaved, 2, 2, 4, 2),
                                   Uniform(Schedule::k1F1B, 2, 1, 4, 1),
                                   Replicated(Schedule::k1F1B, {2, 1, 1}, 4),
                                   Replicated(Schedule::kPipeDream, {2, 1, 1}, 4, 2)};
  int refused = 0;
  for (LaunchPlan& L : plans) {
    BuildAndCheck(&L);
    const std::string name = ScheduleName(L.schedule);
    for (size_t g = 0; g < L.programs.size(); ++g) {
      for (size_t i = 0; i < L.programs[g].actions.size(); ++i) {
        for (bool dup : {false, true}) {
          LaunchPlan e = L;
          auto& acts = e.programs[g].actions;
          const std::string what = ActionToString(acts[i]);
          if (dup) acts.insert(acts.begin() + static_cast<std::ptrdiff_t>(i), acts[i]);
          else acts.erase(acts.begin() + static_cast<std::ptrdiff_t>(i));
          CAPTURE(name);
          CAPTURE(g);
          CAPTURE(what);
          CAPTURE(dup);
          CHECK(!CheckPrograms(e).ok());
          ++refused;
        }
      }
    }
  }
  CHECK(refused > 200);
}

TEST_CASE("prev and next: the rank table's neighbours, or none stated") {
  LaunchPlan L = Uniform(Schedule::k1F1B, 2, 1, 4, 1);
  BuildAndCheck(&L);
  L.ranks[0].next = {1};
  L.ranks[1].prev = {0};
  CHECK_OK(CheckPrograms(L));
  L.ranks[0].next = {0};  // a rank naming itself as its neighbour
  const Status st = CheckPrograms(L);
  CHECK(st.message().find("rank 0 (stage 0, replica 0) has prev [] next [0]; the rank table gives prev [] next [1]") !=
        std::string::npos);
}

}  // namespace
}  // namespace planner
