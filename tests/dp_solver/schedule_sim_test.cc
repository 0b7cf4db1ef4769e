// The schedule simulator against the closed forms on uniform stages.
#include <algorithm>
#include <array>
#include <map>
#include <random>
#include <tuple>

#include "dp_solver/schedule_sim.h"
#include "tests/test_util.h"

namespace planner {
namespace {

double Sim(Schedule s, double f, double b, double w, int64_t p, int64_t m, int64_t v, SimResult* out = nullptr) {
  // Interleaved: a device's F, B, W are split evenly over its v chunks.
  std::vector<SimStage> st(static_cast<size_t>(p * v), SimStage{f / static_cast<double>(v), b / static_cast<double>(v),
                                                                w / static_cast<double>(v), 0});
  SimResult r;
  REQUIRE_OK(SimulateSchedule(s, st, p, m, false, &r));
  if (out) *out = r;
  return r.makespan_s;
}

TEST_CASE("GPipe and 1F1B take (m + p - 1)(F + B + W) on uniform stages") {
  for (int64_t p : {1, 2, 4, 8}) {
    for (int64_t m : {1, 3, 8, 32}) {
      for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
        SimResult r;
        double t = Sim(s, 1.0, 1.3, 0.7, p, m, 1, &r);
        CHECK(t == doctest::Approx(ClosedFormMakespan(s, 1.0, 1.3, 0.7, p, m, 1)));
        // Bubble: (p - 1)/(m + p - 1) of the total time.
        CHECK(r.bubble_fraction == doctest::Approx(static_cast<double>(p - 1) / static_cast<double>(m + p - 1)));
      }
    }
  }
}

TEST_CASE("interleaved 1F1B takes (m + (p - 1)/v)(F + B + W)") {
  for (int64_t p : {2, 4}) {
    for (int64_t v : {2, 3, 4}) {
      for (int64_t m : {p, 2 * p, 4 * p}) {
        CHECK(Sim(Schedule::kInterleaved, 1.0, 1.0, 1.0, p, m, v) ==
              doctest::Approx(ClosedFormMakespan(Schedule::kInterleaved, 1.0, 1.0, 1.0, p, m, v)));
      }
    }
  }
  std::vector<SimStage> st(4, SimStage{1, 1, 1, 0});
  SimResult r;
  CHECK(SimulateSchedule(Schedule::kInterleaved, st, 2, 3, false, &r).code() == StatusCode::kInvalidArgument);
}

// The search's shortcut: on uniform stages without sends the closed form replaces the simulation, and
// the simulator, played on the same random instances, is its check (makespan, busy time, bubble).
TEST_CASE("the search's closed form equals the simulation on uniform stages, any F, B, W") {
  std::mt19937 gen(29);
  std::uniform_real_distribution<double> t(0.05, 3.0);
  int taken = 0;
  for (int it = 0; it < 600; ++it) {
    const Schedule s = std::array{Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved}[gen() % 3];
    const int64_t p = 1 + static_cast<int64_t>(gen() % 8);
    const int64_t v = s == Schedule::kInterleaved ? 1 + static_cast<int64_t>(gen() % 4) : 1;
    const int64_t m =
        s == Schedule::kInterleaved ? p * (1 + static_cast<int64_t>(gen() % 4)) : 1 + static_cast<int64_t>(gen() % 20);
    std::vector<SimStage> st(static_cast<size_t>(p * v), SimStage{t(gen), t(gen), t(gen), 0, 0});
    for (SimStage& x : st) x = st.front();
    SimResult sim, closed;
    REQUIRE_OK(SimulateSchedule(s, st, p, m, false, &sim));
    REQUIRE(UniformMakespan(s, st, p, m, &closed));
    ++taken;
    CHECK(closed.makespan_s == doctest::Approx(sim.makespan_s).epsilon(1e-12));
    CHECK(closed.bubble_fraction == doctest::Approx(sim.bubble_fraction).epsilon(1e-9));
    REQUIRE(closed.busy_s.size() == sim.busy_s.size());
    for (size_t r = 0; r < sim.busy_s.size(); ++r) CHECK(closed.busy_s[r] == doctest::Approx(sim.busy_s[r]));
  }
  CHECK(taken == 600);
}

TEST_CASE("the closed form is not taken where it would not be exact") {
  const std::vector<SimStage> uniform(8, SimStage{1.0, 1.5, 0.5, 0, 0});
  SimResult r;
  r.makespan_s = -1;
  auto refused = [&](Schedule s, std::vector<SimStage> st, int64_t p, int64_t m) {
    return !UniformMakespan(s, st, p, m, &r) && r.makespan_s == -1;  // *out untouched
  };
  std::vector<SimStage> one_slower = uniform;
  one_slower[3].forward_s = 1.0 + 1e-12;
  CHECK(refused(Schedule::k1F1B, one_slower, 8, 16));
  std::vector<SimStage> sends = uniform, exposed = uniform;
  sends[0].send_s = 1e-6;  // a p2p latency stalls the steady state: no closed form here
  exposed[7].exposed_send_s = 1e-6;
  CHECK(refused(Schedule::k1F1B, sends, 8, 16));
  CHECK(refused(Schedule::kInterleaved, exposed, 4, 8));
  CHECK(refused(Schedule::kZbH1, uniform, 8, 16));
  CHECK(refused(Schedule::kPipeDream, uniform, 8, 16));
  CHECK(refused(Schedule::kDualPipeV, uniform, 4, 8));
  CHECK(refused(Schedule::kInterleaved, uniform, 4, 6));  // m not a multiple of p
  CHECK(refused(Schedule::k1F1B, uniform, 4, 8));         // several chunks without interleaving
  CHECK(refused(Schedule::k1F1B, uniform, 3, 8));         // stages not p x v
  CHECK(refused(Schedule::k1F1B, {}, 1, 8));
  // With a send, the simulation is above the sendless closed form: the shortcut would be optimistic.
  SimResult sim, closed;
  std::vector<SimStage> st(4, SimStage{1.0, 2.0, 0.0, 0.1, 0});
  REQUIRE_OK(SimulateSchedule(Schedule::k1F1B, st, 4, 8, false, &sim));
  CHECK(sim.makespan_s > ClosedFormMakespan(Schedule::k1F1B, 1.0, 2.0, 0.0, 4, 8, 1) + 2 * 3 * 0.1);
}

TEST_CASE("ZB-H1 takes m (F + B + W) + (p - 1)(F + B - W)") {
  for (int64_t p : {2, 3, 4, 6}) {
    for (int64_t m : {2 * p, 3 * p}) {
      CHECK(Sim(Schedule::kZbH1, 1.0, 1.0, 1.0, p, m, 1) ==
            doctest::Approx(ClosedFormMakespan(Schedule::kZbH1, 1.0, 1.0, 1.0, p, m, 1)));
    }
  }
  // Its bubble is a third of 1F1B's when F = B = W.
  double zb = Sim(Schedule::kZbH1, 1, 1, 1, 4, 16, 1) - 16 * 3.0;
  double fb = Sim(Schedule::k1F1B, 1, 1, 1, 4, 16, 1) - 16 * 3.0;
  CHECK(zb == doctest::Approx(fb / 3));
}

TEST_CASE("the slowest stage sets the 1F1B steady state on non-uniform stages") {
  // F = B: 1, 3, 1 s on stages 0, 1, 2; no W, no transfers; 20 microbatches.
  std::vector<SimStage> st = {{1, 1, 0, 0}, {3, 3, 0, 0}, {1, 1, 0, 0}};
  const int m = 20;
  SimResult r;
  REQUIRE_OK(SimulateSchedule(Schedule::k1F1B, st, 3, m, true, &r));
  // By hand: stage 1 starts F0 at 1 (stage 0's F0) and then never waits: its
  // B(j) needs stage 2's F(j) and B(j), 2 s after its own F(j), and it runs
  // F(j + 1) (3 s) or B(j - 1) (3 s) in between; stage 0 feeds F(j) long
  // before stage 1 asks. So stage 1 is busy from 1 to 1 + 20 x 6 = 121, and
  // stage 0's B19 follows stage 1's: 121 + 1 = 122.
  CHECK(r.makespan_s == doctest::Approx(122.0).epsilon(1e-12));
  CHECK(r.busy_s == std::vector<double>{40, 120, 40});
  CHECK(r.bubble_fraction == doctest::Approx(1 - 200.0 / (3 * 122.0)));
  REQUIRE(r.events.size() == 3 * m * 2);
  // Each (stage, microbatch, kind) once; duration as given; stage = device.
  std::map<std::tuple<int, int, char>, SimEvent> ev;
  for (const auto& e : r.events) {
    CHECK(e.device == e.stage);
    CHECK((e.kind == 'F' || e.kind == 'B'));
    CHECK(e.end_s - e.start_s == doctest::Approx(e.kind == 'F' ? st[static_cast<size_t>(e.stage)].forward_s
                                                               : st[static_cast<size_t>(e.stage)].backward_input_s));
    CHECK(ev.emplace(std::make_tuple(e.stage, e.microbatch, e.kind), e).second);
  }
  REQUIRE(ev.size() == r.events.size());
  // Dependencies: F(s, j) after F(s - 1, j); B(s, j) after F(s, j) and after B(s + 1, j).
  for (int s = 0; s < 3; ++s) {
    for (int j = 0; j < m; ++j) {
      const SimEvent& f = ev.at({s, j, 'F'});
      const SimEvent& b = ev.at({s, j, 'B'});
      if (s > 0) CHECK(f.start_s >= ev.at({s - 1, j, 'F'}).end_s);
      CHECK(b.start_s >= f.end_s);
      if (s < 2) CHECK(b.start_s >= ev.at({s + 1, j, 'B'}).end_s);
    }
  }
  // Per device: 1F1B's order (p - 1 - d warm-up forwards, then F/B pairs, then
  // the remaining backwards), no overlap, and stage 1 never idle.
  for (int d = 0; d < 3; ++d) {
    std::vector<SimEvent> mine;
    for (const auto& e : r.events)
      if (e.device == d) mine.push_back(e);
    std::sort(mine.begin(), mine.end(), [](const SimEvent& a, const SimEvent& b) { return a.start_s < b.start_s; });
    std::vector<std::pair<char, int>> want;
    const int warm = 2 - d;
    for (int j = 0; j < warm; ++j) want.push_back({'F', j});
    for (int j = 0; j < m - warm; ++j) {
      want.push_back({'F', warm + j});
      want.push_back({'B', j});
    }
    for (int j = m - warm; j < m; ++j) want.push_back({'B', j});
    std::vector<std::pair<char, int>> got;
    for (const auto& e : mine) got.push_back({e.kind, e.microbatch});
    CHECK(got == want);
    for (size_t k = 1; k < mine.size(); ++k) CHECK(mine[k].start_s >= mine[k - 1].end_s);
    if (d == 1) {
      CHECK(mine.front().start_s == doctest::Approx(1.0));
      CHECK(mine.back().end_s == doctest::Approx(121.0));
      for (size_t k = 1; k < mine.size(); ++k) CHECK(mine[k].start_s == doctest::Approx(mine[k - 1].end_s));
    }
  }
  CHECK(ev.at({0, m - 1, 'B'}).end_s == doctest::Approx(122.0));
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

TEST_CASE("exposed sends as 'C' events time like sends folded into F and B") {
  std::vector<SimStage> exposed(4), folded(4);
  for (int q = 0; q < 4; ++q) {
    exposed[q].forward_s = folded[q].forward_s = 1.0 + 0.1 * q;
    exposed[q].backward_input_s = folded[q].backward_input_s = 2.0 - 0.1 * q;
    exposed[q].backward_weight_s = folded[q].backward_weight_s = 0.5;
    exposed[q].exposed_send_s = q < 3 ? 0.25 : 0;
  }
  for (int q = 0; q < 3; ++q) folded[q].forward_s += 0.25;
  for (int q = 1; q < 4; ++q) folded[q].backward_input_s += 0.25;
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
    SimResult a, b;
    REQUIRE_OK(SimulateSchedule(s, exposed, 4, 8, true, &a));
    REQUIRE_OK(SimulateSchedule(s, folded, 4, 8, false, &b));
    CHECK(a.makespan_s == doctest::Approx(b.makespan_s).epsilon(1e-12));
    int sends = 0;
    for (const auto& e : a.events) sends += e.kind == 'C';
    CHECK(sends == 2 * 3 * 8);  // an activation and a gradient per boundary and microbatch
  }
}

TEST_CASE("a cutoff stops a simulation only past it, at a lower bound of the whole makespan") {
  // Non-uniform stages with exposed sends, every schedule, cutoffs below, at and above the makespan.
  std::mt19937_64 rng(29);
  std::uniform_real_distribution<double> u(0.2, 2.0);
  int cuts = 0, checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const Schedule s =
        std::array<Schedule, 6>{Schedule::kGpipe,       Schedule::k1F1B, Schedule::kPipeDream,
                                Schedule::kInterleaved, Schedule::kZbH1, Schedule::kDualPipeV}[trial % 6];
    const int64_t p = 2 + trial % 5;
    const int64_t v = s == Schedule::kInterleaved || s == Schedule::kDualPipeV ? 2 : 1;
    const int64_t m = (s == Schedule::kInterleaved ? p : 2 * p) * (1 + trial % 3);
    std::vector<SimStage> st(static_cast<size_t>(p * v));
    for (auto& x : st) x = SimStage{u(rng), u(rng), 0.5 * u(rng), 0.01 * u(rng), trial % 2 ? 0.05 * u(rng) : 0.0};
    SimResult whole;
    REQUIRE_OK(SimulateSchedule(s, st, p, m, false, &whole));
    CHECK_FALSE(whole.cut);
    for (double f : {0.5, 0.9, 0.99, 1.0, 1.01, 2.0}) {
      SimResult r;
      REQUIRE_OK(SimulateSchedule(s, st, p, m, false, &r, f * whole.makespan_s));
      ++checked;
      if (!r.cut) {  // played whole: the same figures
        CHECK(r.makespan_s == whole.makespan_s);
        CHECK(r.busy_s == whole.busy_s);
        continue;
      }
      ++cuts;
      CHECK(f < 1.0);  // never cut at or above the makespan
      CHECK(r.makespan_s > f * whole.makespan_s);
      CHECK(r.makespan_s <= whole.makespan_s * (1 + 1e-9));
    }
    // Recording events plays the whole run whatever the cutoff.
    SimResult rec;
    REQUIRE_OK(SimulateSchedule(s, st, p, m, true, &rec, 0.5 * whole.makespan_s));
    CHECK_FALSE(rec.cut);
    CHECK(rec.makespan_s == whole.makespan_s);
  }
  CHECK(checked == 360);
  CHECK(cuts > 100);
}

TEST_CASE("replicated async pipeline: steady state runs at the bottleneck stage / replicas") {
  // Stage 0: 3 s per microbatch on 3 replicas (1 s each), stage 1: 1.5 s on one device.
  std::vector<SimStage> st(2);
  st[0].forward_s = 1;
  st[0].backward_input_s = 2;
  st[1].forward_s = 0.5;
  st[1].backward_input_s = 1;
  SimResult a, b;
  REQUIRE_OK(SimulateReplicated(st, {3, 1}, {2, 1}, 60, false, &a));
  REQUIRE_OK(SimulateReplicated(st, {3, 1}, {2, 1}, 120, false, &b));
  CHECK((b.makespan_s - a.makespan_s) / 60 == doctest::Approx(1.5).epsilon(0.02).scale(0));
  CHECK(a.busy_s.size() == 4);
  CHECK(a.busy_s[0] == doctest::Approx(20 * 3.0));  // round robin: 60 / 3 microbatches each
  CHECK(a.busy_s[3] == doctest::Approx(60 * 1.5));
  SimResult bad;
  CHECK(SimulateReplicated(st, {3}, {2, 1}, 60, false, &bad).code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace planner
