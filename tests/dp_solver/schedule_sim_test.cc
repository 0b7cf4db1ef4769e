// The schedule simulator against the closed forms on uniform stages.
#include "dp_solver/schedule_sim.h"
#include "tests/test_util.h"

namespace planner {
namespace {

double Sim(Schedule s, double f, double b, double w, int64_t p, int64_t m, int64_t v, SimResult* out = nullptr) {
  // Interleaved: a device's F, B, W are split evenly over its v chunks.
  std::vector<SimStage> st(static_cast<size_t>(p * v), SimStage{f / static_cast<double>(v), b / static_cast<double>(v), w / static_cast<double>(v), 0});
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
        CHECK(Sim(Schedule::kInterleaved, 1.0, 1.0, 1.0, p, m, v) == doctest::Approx(ClosedFormMakespan(Schedule::kInterleaved, 1.0, 1.0, 1.0, p, m, v)));
      }
    }
  }
  std::vector<SimStage> st(4, SimStage{1, 1, 1, 0});
  SimResult r;
  CHECK(SimulateSchedule(Schedule::kInterleaved, st, 2, 3, false, &r).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("ZB-H1 takes m (F + B + W) + (p - 1)(F + B - W)") {
  for (int64_t p : {2, 3, 4, 6}) {
    for (int64_t m : {2 * p, 3 * p}) {
      CHECK(Sim(Schedule::kZbH1, 1.0, 1.0, 1.0, p, m, 1) == doctest::Approx(ClosedFormMakespan(Schedule::kZbH1, 1.0, 1.0, 1.0, p, m, 1)));
    }
  }
  // Its bubble is a third of 1F1B's when F = B = W.
  double zb = Sim(Schedule::kZbH1, 1, 1, 1, 4, 16, 1) - 16 * 3.0;
  double fb = Sim(Schedule::k1F1B, 1, 1, 1, 4, 16, 1) - 16 * 3.0;
  CHECK(zb == doctest::Approx(fb / 3));
}

TEST_CASE("the slowest stage sets the 1F1B steady state on non-uniform stages") {
  std::vector<SimStage> st = {{1, 1, 0, 0}, {3, 3, 0, 0}, {1, 1, 0, 0}};
  SimResult r;
  REQUIRE_OK(SimulateSchedule(Schedule::k1F1B, st, 3, 20, true, &r));
  // Fill (stage 0 and 1 forwards), 20 microbatches through stage 1, drain.
  CHECK(r.makespan_s == doctest::Approx(1 + 20 * 6 + 1 + 1 + 1 - 1).epsilon(0.05));
  CHECK(r.events.size() == 3 * 20 * 2);
  // Forward of a microbatch never starts before its predecessor stage's forward ends.
  for (const auto& e : r.events) CHECK(e.end_s > e.start_s);
}

}  // namespace
}  // namespace planner
