// DualPipeV (Schedule::kDualPipeV): the simulator's per-rank order against
// torch's ScheduleDualPipeV worked by hand, its makespan against DeepSeek-V3's
// bubble formula and against a brute-force replay, the per-rank in-flight
// activations at the peak, the programs (deadlock-free, local handover on the
// last rank) and the search (forced, and in the default set).
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "dp_solver/candidates.h"
#include "dp_solver/evaluate.h"
#include "dp_solver/programs.h"
#include "dp_solver/schedule_sim.h"
#include "dp_solver/search.h"
#include "tests/dp_solver/moe_model.h"
#include "tests/test_util.h"

namespace planner {
namespace {

std::vector<SimStage> UniformStages(int64_t p, double f, double b, double w) {
  return std::vector<SimStage>(static_cast<size_t>(2 * p), SimStage{f, b, w, 0, 0});
}

// Device d's compute events in start order.
std::vector<SimEvent> DeviceEvents(const SimResult& r, int64_t d) {
  std::vector<SimEvent> ev;
  for (const auto& e : r.events) {
    if (e.device == d && e.kind != 'C') ev.push_back(e);
  }
  std::stable_sort(ev.begin(), ev.end(), [](const SimEvent& x, const SimEvent& y) { return x.start_s < y.start_s; });
  return ev;
}

std::string OrderText(const std::vector<SimEvent>& ev) {
  std::string s;
  for (const auto& e : ev) s += fmt::format("{}{}{}.{}", s.empty() ? "" : " ", e.kind, e.stage, e.microbatch);
  return s;
}

TEST_CASE("dualpipev: stage q runs on rank q for q < p and on rank 2p - 1 - q after (the V)") {
  CHECK(StagePosition(Schedule::kDualPipeV, 0, 4) == 0);
  CHECK(StagePosition(Schedule::kDualPipeV, 3, 4) == 3);
  CHECK(StagePosition(Schedule::kDualPipeV, 4, 4) == 3);
  CHECK(StagePosition(Schedule::kDualPipeV, 7, 4) == 0);  // the loss stage on rank 0
  CHECK(StagePosition(Schedule::kInterleaved, 7, 4) == 3);
  for (int64_t p : {1, 2, 5}) {
    for (int64_t r = 0; r < p; ++r) {
      for (int64_t c = 0; c < 2; ++c) {
        CHECK(StagePosition(Schedule::kDualPipeV, ChunkStage(Schedule::kDualPipeV, c, r, p), p) == r);
        CHECK(StagePosition(Schedule::k1F1B, ChunkStage(Schedule::kInterleaved, c, r, p), p) == r);
      }
    }
  }
  Schedule s;
  REQUIRE(ParseSchedule("dualpipev", &s));
  CHECK(s == Schedule::kDualPipeV);
  CHECK(std::string(ScheduleName(Schedule::kDualPipeV)) == "dualpipev");
}

TEST_CASE("dualpipev's per-rank order is torch's ScheduleDualPipeV's (p = 2, m = 4, worked by hand)") {
  // Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. torch's steps for rank r (p = 2, m = 4):
  // rank 0: 1. F0 F0  2. (F0 F1)  3. (I1 W F1)  4. (F0 B1 F1 B0)  5. (B1 F1 B0)  6. (B1 I0)  7. (W I0)  8. W
  // rank 1: 2. (F0 F1) x 2  4. (F0 B1 F1 B0) x 2  6. (B1 B0) (I1 I0)  8. W W
  // A full backward B is its input part then its W at once; I leaves its W to the FIFO.
  SimResult r;
  REQUIRE_OK(SimulateSchedule(Schedule::kDualPipeV, UniformStages(2, 1, 1, 1), 2, 4, true, &r));
  CHECK(OrderText(DeviceEvents(r, 0)) ==
        "F0.0 F0.1 F0.2 F3.0 B3.0 W3.0 F3.1 F0.3 B3.1 W3.1 F3.2 B0.0 W0.0 B3.2 W3.2 F3.3 B0.1 W0.1 B3.3 W3.3 B0.2 W0.2 "
        "B0.3 W0.3");
  CHECK(OrderText(DeviceEvents(r, 1)) ==
        "F1.0 F2.0 F1.1 F2.1 F1.2 B2.0 W2.0 F2.2 B1.0 W1.0 F1.3 B2.1 W2.1 F2.3 B1.1 W1.1 B2.2 W2.2 B1.2 W1.2 B2.3 B1.3 "
        "W2.3 W1.3");
  // The overlapped pairs hold their outputs until the pair's end: rank 1's second F1 (F1.3) is
  // paired with B2.1, its first (F1.2, the last rank's first step-4 F0) is not.
  for (const auto& e : DeviceEvents(r, 1)) {
    if (e.kind == 'F' && e.stage == 1 && e.microbatch == 2) CHECK_FALSE(e.held);
    if (e.kind == 'F' && e.stage == 1 && e.microbatch == 3) CHECK(e.held);
    if (e.kind == 'W') CHECK_FALSE(e.held);
  }
  // 24 units of work per rank and DeepSeek's bubble (p - 1)(F + 2B - W) = 2.
  CHECK(r.makespan_s == doctest::Approx(26.0));
  CHECK(r.busy_s == std::vector<double>{24.0, 24.0});
}

TEST_CASE("dualpipev's order on the first and last of p = 4 ranks (m = 8, worked by hand)") {
  // Rank 0 (stages 0, 7): 1. six F0  2. (F0 F1)  3. three (I1 W F1)  4. one (F0 B1 F1 B0)
  // 5. three (B1 F1 B0)  6. (B1 I0)  7. three (W I0)  8. W.
  // Rank 3 (stages 3, 4): 2. four (F0 F1)  4. four (F0 B1 F1 B0)  6. (B1 B0) x 2, (I1 I0) x 2
  // (odd rank: the split starts before the B1 of i = 2)  8. four W, oldest first.
  SimResult r;
  REQUIRE_OK(SimulateSchedule(Schedule::kDualPipeV, UniformStages(4, 1, 1, 1), 4, 8, true, &r));
  CHECK(OrderText(DeviceEvents(r, 0)) ==
        "F0.0 F0.1 F0.2 F0.3 F0.4 F0.5 F0.6 F7.0 B7.0 W7.0 F7.1 B7.1 W7.1 F7.2 B7.2 W7.2 F7.3 "
        "F0.7 B7.3 W7.3 F7.4 B0.0 W0.0 B7.4 W7.4 F7.5 B0.1 W0.1 B7.5 W7.5 F7.6 B0.2 W0.2 B7.6 W7.6 F7.7 B0.3 W0.3 "
        "B7.7 W7.7 B0.4 W0.4 B0.5 W0.5 B0.6 W0.6 B0.7 W0.7");
  CHECK(OrderText(DeviceEvents(r, 3)) ==
        "F3.0 F4.0 F3.1 F4.1 F3.2 F4.2 F3.3 F4.3 F3.4 B4.0 W4.0 F4.4 B3.0 W3.0 F3.5 B4.1 W4.1 F4.5 B3.1 W3.1 "
        "F3.6 B4.2 W4.2 F4.6 B3.2 W3.2 F3.7 B4.3 W4.3 F4.7 B3.3 W3.3 B4.4 W4.4 B3.4 W3.4 B4.5 W4.5 B3.5 W3.5 "
        "B4.6 B3.6 B4.7 B3.7 W4.6 W3.6 W4.7 W3.7");
  CHECK(r.makespan_s == doctest::Approx(2 * 8 * 3 + 3 * 2.0));
}

TEST_CASE("dualpipev's makespan is DeepSeek-V3's bubble formula where it applies (F = B, W <= B)") {
  // DualPipe (PP ranks): bubble (PP/2 - 1)(F&B + B' - 3W), B' the full backward B + W, F&B = F + B'
  // run back to back; DualPipeV on p ranks is DualPipe on PP = 2p cut in half: (p - 1)(F + 2B - W).
  for (int64_t p : {1, 2, 4}) {
    for (int64_t m : {2 * p, 2 * p + 1, 3 * p, 5 * p}) {
      for (double fb : {1.0, 0.7}) {
        for (double w : {0.0, 0.4 * fb, fb}) {
          CAPTURE(p);
          CAPTURE(m);
          CAPTURE(w);
          SimResult r;
          REQUIRE_OK(SimulateSchedule(Schedule::kDualPipeV, UniformStages(p, fb, fb, w), p, m, false, &r));
          const double work = 2.0 * static_cast<double>(m) * (fb + fb + w),
                       bubble = static_cast<double>(p - 1) * (fb + 2 * fb - w);
          CHECK(r.makespan_s == doctest::Approx(work + bubble));
          CHECK(r.makespan_s == doctest::Approx(ClosedFormMakespan(Schedule::kDualPipeV, fb, fb, w, p, m, 2)));
          CHECK(r.bubble_fraction == doctest::Approx(bubble / (work + bubble)));
          CHECK(MakespanLowerBound(Schedule::kDualPipeV, UniformStages(p, fb, fb, w), p, m) <= r.makespan_s + 1e-9);
        }
      }
    }
  }
}

// One model split into 2p chunks of F, B, W each: a 1F1B / ZB-H1 stage is two chunks.
double Bubble(Schedule s, int64_t p, int64_t m, double f, double b, double w) {
  const int64_t v = s == Schedule::kInterleaved || s == Schedule::kDualPipeV ? 2 : 1;
  const double k = 2.0 / static_cast<double>(v);
  SimResult r;
  REQUIRE_OK(SimulateSchedule(s, std::vector<SimStage>(static_cast<size_t>(p * v), SimStage{f * k, b * k, w * k, 0, 0}),
                              p, m, false, &r));
  return r.bubble_fraction;
}

TEST_CASE("dualpipev against 1F1B, ZB-H1 and interleaved on one model (docs/cost_model.md's figures)") {
  // F = B = W, p = 8, m = 32: bubbles (p - 1) x 6F, 2F, 3F, 2F over makespans 2m 3F + bubble.
  CHECK(Bubble(Schedule::k1F1B, 8, 32, 1, 1, 1) == doctest::Approx(42.0 / 234));
  CHECK(Bubble(Schedule::kZbH1, 8, 32, 1, 1, 1) == doctest::Approx(14.0 / 206));
  CHECK(Bubble(Schedule::kInterleaved, 8, 32, 1, 1, 1) == doctest::Approx(21.0 / 213));
  CHECK(Bubble(Schedule::kDualPipeV, 8, 32, 1, 1, 1) == doctest::Approx(14.0 / 206));
  // W = B/2: DualPipeV's (p - 1)(F + 2B - W) = interleaved's (p - 1)(F + B + W), below ZB-H1's.
  CHECK(Bubble(Schedule::kDualPipeV, 8, 32, 1, 1, 0.5) ==
        doctest::Approx(Bubble(Schedule::kInterleaved, 8, 32, 1, 1, 0.5)));
  CHECK(Bubble(Schedule::kDualPipeV, 8, 32, 1, 1, 0.5) < Bubble(Schedule::kZbH1, 8, 32, 1, 1, 0.5));
  CHECK(Bubble(Schedule::kDualPipeV, 4, 8, 1, 1, 1) == doctest::Approx(6.0 / 54));
  CHECK(Bubble(Schedule::k1F1B, 4, 8, 1, 1, 1) == doctest::Approx(18.0 / 66));
}

// Brute-force replay of the simulator's per-device orders: every start is the latest of its
// device's previous end and its inputs' arrival (an input leaves with the first unheld event of
// its producer's device from the producer on, plus the boundary's send unless both stages share
// a device), relaxed to a fixed point.
std::map<std::tuple<char, int, int>, double> Replay(const std::vector<SimStage>& st, int64_t p, const SimResult& r) {
  std::vector<std::vector<SimEvent>> dev;
  for (int64_t d = 0; d < p; ++d) dev.push_back(DeviceEvents(r, d));
  std::map<std::tuple<char, int, int>, double> start, end, leave;
  for (int round = 0; round < 100000; ++round) {
    bool changed = false;
    for (const auto& ev : dev) {
      double prev = 0;
      for (size_t i = 0; i < ev.size(); ++i) {
        const SimEvent& e = ev[i];
        double ready = prev;
        auto need = [&](char k, int q, int j, double send) {
          auto it = leave.find({k, q, j});
          ready = std::max(ready, it == leave.end() ? 1e300 : it->second + send);
        };
        const int q = e.stage, Q = static_cast<int>(st.size());
        auto send = [&](int a) {
          return StagePosition(Schedule::kDualPipeV, a, p) == StagePosition(Schedule::kDualPipeV, a + 1, p)
                     ? 0.0
                     : st[static_cast<size_t>(a)].send_s;
        };
        if (e.kind == 'F' && q > 0) need('F', q - 1, e.microbatch, send(q - 1));
        if (e.kind == 'B') need('F', q, e.microbatch, 0.0);
        if (e.kind == 'B' && q + 1 < Q) need('B', q + 1, e.microbatch, send(q));
        const SimStage& x = st[static_cast<size_t>(q)];
        const double dur = e.kind == 'F' ? x.forward_s : e.kind == 'B' ? x.backward_input_s : x.backward_weight_s;
        auto key = std::make_tuple(e.kind, q, e.microbatch);
        if (start[key] != ready) changed = true;
        start[key] = ready;
        end[key] = prev = ready + dur;
      }
      for (size_t i = ev.size(); i-- > 0;) {  // leave: the end of the first unheld event from i on
        size_t k = i;
        while (k + 1 < ev.size() && ev[k].held) ++k;
        const auto key = std::make_tuple(ev[i].kind, ev[i].stage, ev[i].microbatch);
        const double at = end[std::make_tuple(ev[k].kind, ev[k].stage, ev[k].microbatch)];
        if (leave[key] != at) changed = true;
        leave[key] = at;
      }
    }
    if (!changed) break;
  }
  return start;
}

TEST_CASE("dualpipev's simulated times equal a brute-force replay on uneven stages with transfers") {
  for (int64_t p : {2, 3, 4}) {
    for (int64_t m : {2 * p, 3 * p + 1}) {
      std::vector<SimStage> st(static_cast<size_t>(2 * p));
      for (size_t q = 0; q < st.size(); ++q) {
        st[q] = SimStage{0.8 + 0.3 * static_cast<double>(q % 3), 1.1 + 0.2 * static_cast<double>((q + 1) % 4),
                         0.4 + 0.5 * static_cast<double>(q % 2), 0.05 * static_cast<double>(1 + q % 2), 0};
      }
      SimResult r;
      REQUIRE_OK(SimulateSchedule(Schedule::kDualPipeV, st, p, m, true, &r));
      const auto start = Replay(st, p, r);
      REQUIRE(start.size() == static_cast<size_t>(3 * 2 * p * m));
      double makespan = 0;
      for (const auto& e : r.events) {
        CAPTURE(e.kind);
        CAPTURE(e.stage);
        CAPTURE(e.microbatch);
        CHECK(e.start_s == doctest::Approx(start.at({e.kind, e.stage, e.microbatch})));
        makespan = std::max(makespan, e.end_s);
      }
      CHECK(r.makespan_s == doctest::Approx(makespan));
      CHECK(MakespanLowerBound(Schedule::kDualPipeV, st, p, m) <= r.makespan_s + 1e-9);
    }
  }
}

TEST_CASE("dualpipev's peak in-flight activations per rank: 2p - r of chunk 0 and r + 1 of chunk 1") {
  const double s0 = 3.0, s1 = 5.0;  // bytes per microbatch of each chunk's stash (any values)
  for (int64_t p : {2, 3, 4}) {
    for (int64_t m : {2 * p, 3 * p + 1}) {
      SimResult r;
      REQUIRE_OK(SimulateSchedule(Schedule::kDualPipeV, UniformStages(p, 1.0, 1.2, 0.6), p, m, true, &r));
      for (int64_t d = 0; d < p; ++d) {
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(d);
        int64_t alive[2] = {0, 0}, most[2] = {0, 0};
        double peak = 0;
        for (const auto& e : DeviceEvents(r, d)) {  // alive from F to the input-gradient backward
          const int c = e.stage < p ? 0 : 1;
          if (e.kind == 'F') ++alive[c];
          if (e.kind == 'B') --alive[c];
          for (int k = 0; k < 2; ++k) most[k] = std::max(most[k], alive[k]);
          peak = std::max(peak, static_cast<double>(alive[0]) * s0 + static_cast<double>(alive[1]) * s1);
        }
        CHECK(most[0] == DualPipeVInFlight(p, d, 0));
        CHECK(most[1] == DualPipeVInFlight(p, d, 1));
        CHECK(peak == doctest::Approx(static_cast<double>(DualPipeVInFlight(p, d, 0)) * s0 +
                                      static_cast<double>(DualPipeVInFlight(p, d, 1)) * s1));
      }
    }
  }
}

TEST_CASE("dualpipev refuses fewer microbatches than stages and other chunk counts") {
  SimResult r;
  Status s = SimulateSchedule(Schedule::kDualPipeV, UniformStages(4, 1, 1, 1), 4, 7, false, &r);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("at least as many microbatches (7) as stages (2 x pp = 8)") != std::string::npos);
  CHECK(SimulateSchedule(Schedule::kDualPipeV, std::vector<SimStage>(12, SimStage{1, 1, 1, 0, 0}), 4, 8, false, &r)
            .code() == StatusCode::kInvalidArgument);
  CHECK_OK(SimulateSchedule(Schedule::kDualPipeV, UniformStages(4, 1, 1, 1), 4, 8, false, &r));
}

LaunchPlan DualPipeVLaunch(int64_t p, int64_t m, int64_t dp) {
  LaunchPlan L;
  L.schedule = Schedule::kDualPipeV;
  L.pp = p;
  L.dp = dp;
  L.interleave = 2;
  L.num_microbatches = m;
  L.microbatch_size = 1;
  L.global_batch = m * dp;
  for (int64_t q = 0; q < 2 * p; ++q) {
    LaunchStage st;
    st.first_layer = st.last_layer = q;
    st.predicted_forward_s = 1.0 + 0.25 * static_cast<double>(q % 3);
    st.predicted_backward_input_s = 1.2 + 0.1 * static_cast<double>(q % 2);
    st.predicted_backward_weight_s = 0.7;
    st.predicted_p2p_s =
        StagePosition(Schedule::kDualPipeV, q, p) == StagePosition(Schedule::kDualPipeV, q + 1, p) ? 0.0 : 0.05;
    st.replicas = dp;
    st.chunk = q / p;
    L.stages.push_back(st);
  }
  for (int64_t rk = 0; rk < p * dp; ++rk) {
    LaunchRank x;
    x.rank = rk;
    x.stage = rk / dp;
    x.replica = rk % dp;
    L.ranks.push_back(x);
  }
  return L;
}

TEST_CASE("dualpipev programs: the simulator's order, deadlock-free, the last rank hands stage p - 1 to p locally") {
  for (int64_t p : {2, 3, 4, 8}) {
    for (int64_t m : {2 * p, 2 * p + 3, 4 * p}) {
      CAPTURE(p);
      CAPTURE(m);
      LaunchPlan L = DualPipeVLaunch(p, m, 2);
      REQUIRE_OK(BuildPrograms(L, &L.programs));
      REQUIRE_OK(AssignPrograms(&L));
      REQUIRE_OK(CheckPrograms(L));
      REQUIRE(L.programs.size() == static_cast<size_t>(p));
      for (const RankProgram& g : L.programs) {
        int64_t f = 0, b = 0, w = 0, local = 0;
        for (const Action& a : g.actions) {
          CHECK((a.stage == -1 || StagePosition(Schedule::kDualPipeV, a.stage, p) == g.position));
          f += a.kind == ActionKind::kForward;
          b += a.kind == ActionKind::kBackwardInput;
          w += a.kind == ActionKind::kBackwardWeight;
          if (IsTransfer(a)) local += StagePosition(Schedule::kDualPipeV, PeerStage(a), p) == g.position;
        }
        CHECK(f == 2 * m);
        CHECK(b == 2 * m);
        CHECK(w == 2 * m);
        // Only the last rank talks to itself: SA(p-1).j, RA p.j, SG p.j, RG(p-1).j for every microbatch.
        CHECK(local == (g.position == p - 1 ? 4 * m : 0));
      }
    }
  }
  // A program that receives its own activation before the forward that sends it is refused.
  LaunchPlan L = DualPipeVLaunch(2, 4, 1);
  REQUIRE_OK(BuildPrograms(L, &L.programs));
  REQUIRE_OK(AssignPrograms(&L));
  auto& acts = L.programs[1].actions;
  auto ra = std::find(acts.begin(), acts.end(), Action{ActionKind::kRecvActivation, 2, 0});
  REQUIRE(ra != acts.end());
  const Action moved = *ra;
  acts.erase(ra);
  acts.insert(acts.begin(), moved);
  Status s = CheckPrograms(L);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("deadlock") != std::string::npos);
}

struct SolveCase {
  ModelSpec model;
  ClusterSpec cluster;
  SolveCase() {
    REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/tiny-gpt.yaml"), &model));
    REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  }
  Status Solve(int64_t gpus, int64_t pp, std::vector<Schedule> schedules, Plan* p) {
    SearchOptions o;
    o.gpus = gpus;
    o.pp = {pp};
    o.tp = {1};
    o.microbatch = {1};
    o.recompute = {Recompute::kNone};
    o.schedules = std::move(schedules);
    CostSource src;
    src.model = &model;
    src.cluster = &cluster;
    return SolveAuto(src, o, p);
  }
};

TEST_CASE("the search runs dualpipev when asked: V placement, per-chunk in-flight counts and memory") {
  SolveCase f;
  Plan v, one;
  REQUIRE_OK(f.Solve(2, 2, {Schedule::kDualPipeV}, &v));
  CHECK(v.schedule == Schedule::kDualPipeV);
  CHECK(v.interleave == 2);
  REQUIRE(v.stages.size() == 4);
  // Stages 0 and 3 on rank 0, 1 and 2 on rank 1; in flight at the peak: 2p - r (chunk 0), r + 1 (chunk 1).
  const std::vector<int64_t> offset = {0, 1, 1, 0}, chunk = {0, 0, 1, 1}, in_flight = {4, 3, 2, 1};
  for (size_t q = 0; q < 4; ++q) {
    CAPTURE(q);
    CHECK(v.stages[q].device_offset == offset[q]);
    CHECK(v.stages[q].chunk == chunk[q]);
    CHECK(v.stages[q].in_flight == in_flight[q]);
  }
  CHECK(v.stages[1].p2p_s == 0.0);  // stages 1 -> 2 stay on rank 1
  CHECK(v.stages[0].p2p_s > 0.0);
  // The same four chunks as 1F1B's four stages at pp = 4 (one balanced split), whose stage q holds
  // min(4 - q, m) microbatches of its own stash: rank r's activations are (4 - r) stash(r) + (r + 1) stash(3 - r).
  REQUIRE_OK(f.Solve(4, 4, {Schedule::k1F1B}, &one));
  REQUIRE(one.stages.size() == 4);
  std::vector<double> stash;
  for (const auto& s : one.stages) {
    CHECK(s.first_layer == v.stages[stash.size()].first_layer);
    stash.push_back(s.activations_bytes / static_cast<double>(s.in_flight));
  }
  CHECK(v.stages[0].activations_bytes == doctest::Approx(4 * stash[0] + 1 * stash[3]));
  CHECK(v.stages[1].activations_bytes == doctest::Approx(3 * stash[1] + 2 * stash[2]));
  CHECK(v.stages[3].activations_bytes == doctest::Approx(v.stages[0].activations_bytes));
  // The pipeline time is the simulator's on the plan's stage times.
  std::vector<SimStage> st;
  for (const auto& s : v.stages) {
    st.push_back(SimStage{s.forward_s, s.backward_input_s, s.backward_weight_s, v.p2p_overlap ? s.p2p_s : 0,
                          v.p2p_overlap ? 0 : s.p2p_s});
  }
  SimResult r;
  REQUIRE_OK(SimulateSchedule(Schedule::kDualPipeV, st, 2, v.num_microbatches, false, &r));
  CHECK(v.predicted.pipeline_s == doctest::Approx(r.makespan_s).scale(0));
}

TEST_CASE("the default search tries dualpipev: its pick is never slower than a forced dualpipev") {
  SolveCase f;
  SearchOptions o;
  o.gpus = 2;
  CostSource src;
  src.model = &f.model;
  src.cluster = &f.cluster;
  const std::vector<Schedule> defaults = MakeSearchSpace(src, o, 32).schedules;
  CHECK(std::find(defaults.begin(), defaults.end(), Schedule::kDualPipeV) != defaults.end());
  // Megatron's 1T on 3072 A100s: the free search against each schedule forced (DualPipeV's pick,
  // 8-32-12, was 0.2% faster than interleaved's when written).
  ModelSpec big;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/megatron-1t.yaml"), &big));
  src.model = &big;
  SearchOptions free;
  free.gpus = 3072;
  Plan best;
  REQUIRE_OK(SolveAuto(src, free, &best));
  for (Schedule s : {Schedule::kDualPipeV, Schedule::kInterleaved, Schedule::k1F1B}) {
    SearchOptions forced;
    forced.gpus = 3072;
    forced.schedules = {s};
    Plan p;
    REQUIRE_OK(SolveAuto(src, forced, &p));
    CHECK(best.predicted.iteration_s <= p.predicted.iteration_s * (1 + 1e-12));
  }
  // pp = 1 has no V: asking for dualpipev alone there finds nothing and says why.
  Plan q;
  Status st = f.Solve(2, 1, {Schedule::kDualPipeV}, &q);
  CHECK(st.code() == StatusCode::kInfeasible);
  CHECK(st.message().find("dualpipev needs pp >= 2") != std::string::npos);
}

TEST_CASE(
    "an MTP module is split as one block: DeepSeek-V3's 61 blocks + 1 MTP + embedding + loss = 64 units = 2 x 16 "
    "chunks of 2") {
  SolveCase f;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/deepseek-v3.yaml"), &f.model));
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/h800.yaml"), &f.cluster));
  REQUIRE(f.model.gpt.mtp == 1);
  SearchOptions o = testing::DeepSeekV3PublishedLayout();
  CostSource src;
  src.model = &f.model;
  src.cluster = &f.cluster;
  Plan p;
  REQUIRE_OK(SolveAuto(src, o, &p));
  REQUIRE(p.stages.size() == 32);
  // Chunk 0 holds the embedding and one block, the last chunk the MTP module and the final
  // norm / head / loss (the loss unit); every other chunk two blocks.
  CHECK(p.stages.front().first_layer_name == "embedding");
  CHECK(p.stages.front().last_layer_name == "block0");
  CHECK(p.stages.back().first_layer_name == "mtp0");
  CHECK(p.stages[p.stages.size() - 2].last_layer_name == "block60");
  for (size_t i = 1; i + 1 < p.stages.size(); ++i) CHECK(p.stages[i].last_layer - p.stages[i].first_layer == 1);
  CHECK(p.ep == 64);
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

TEST_CASE("default schedules: pipedream (asynchronous) only when named for gpt models, by default for the others") {
  ClusterSpec cluster;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &cluster));
  ModelSpec gpt, cnn;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/gpt3-175b.yaml"), &gpt));
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/vgg16.yaml"), &cnn));
  SearchOptions o;
  o.gpus = 64;
  CostSource src;
  src.cluster = &cluster;
  src.model = &gpt;
  const SearchSpace g = MakeSearchSpace(src, o, 1536);
  CHECK(std::find(g.schedules.begin(), g.schedules.end(), Schedule::kPipeDream) == g.schedules.end());
  CHECK(g.schedules.size() == 5);
  CHECK_FALSE(g.replicated);
  src.model = &cnn;
  const SearchSpace c = MakeSearchSpace(src, o, 256);
  CHECK(std::find(c.schedules.begin(), c.schedules.end(), Schedule::kPipeDream) != c.schedules.end());
  CHECK(c.replicated);
  // Named, it is searched for a gpt model too.
  src.model = &gpt;
  o.schedules = {Schedule::kPipeDream};
  CHECK(MakeSearchSpace(src, o, 1536).replicated);
}

}  // namespace
}  // namespace planner
