// The profiler: one timing per distinct signature shared by equal layers,
// sane statistics, the profile file round trip, collectives on the threads
// backend with every result right, and the alpha-beta fit on closed forms.
#include <cmath>

#include "common/timing.h"
#include "dp_solver/cost_model.h"
#include "profiler/comm_profiler.h"
#include "profiler/layer_profiler.h"
#include "tests/test_util.h"

namespace planner {
namespace {

TEST_CASE("profiling tiny-gpt times each signature once and fills every layer") {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/tiny-gpt.yaml"), &m));
  LayerProfileOptions o;
  o.microbatches = {1, 2};
  o.tps = {1, 2};
  o.min_repetitions = 3;
  o.budget_s = 0.05;
  o.progress = false;
  Profile p;
  REQUIRE_OK(ProfileModel(m, o, &p));
  REQUIRE(p.layers.size() == m.layers.size());
  CHECK(p.backend == "cpu");
  CHECK(p.reference_microbatch == 1);
  for (size_t i = 0; i < p.layers.size(); ++i) {
    const auto& l = p.layers[i];
    INFO(l.name);
    CHECK(l.timings.size() == 4);
    CHECK(l.params_bytes == doctest::Approx(4 * m.layers[i].params));
    for (const auto& t : l.timings) {
      CHECK(t.forward_s > 0);
      // backward_s is the median of each sample's input + weight pass: never below the sum of the two passes' minima
      // (an order-statistics bound, not a timing: the median-of-sums against the sum of medians was a 25% check
      // that a loaded machine broke, CI 2026-12-01).
      CHECK(t.backward_input_s > 0);
      CHECK(t.backward_input_min_s + t.backward_weight_min_s <= t.backward_s * (1 + 1e-12));
      CHECK(t.forward_min_s <= t.forward_s);
      CHECK(t.repetitions >= 3);
    }
  }
  // The four blocks share one signature, hence identical timings.
  int b0 = p.FindLayer("block0"), b3 = p.FindLayer("block3");
  REQUIRE(b0 >= 0);
  REQUIRE(b3 >= 0);
  CHECK(p.layers[static_cast<size_t>(b0)].timings[0].forward_s ==
        p.layers[static_cast<size_t>(b3)].timings[0].forward_s);
  // GEMM-bound layers report their achieved FLOP/s; a TP shard does half the work.
  const auto& blk = p.layers[static_cast<size_t>(b0)].timings;
  CHECK(blk[0].achieved_gflops > 0.5);
  // The file round-trips.
  Profile q;
  REQUIRE_OK(ParseProfile("tiny.profile.yaml", ProfileToYaml(p), &q));
  REQUIRE(q.layers.size() == p.layers.size());
  CHECK(q.layers[1].timings[3].backward_weight_s == p.layers[1].timings[3].backward_weight_s);
  CHECK(q.layers[1].tp_allreduces == 2);
  CHECK(q.layers[1].timings[0].repetitions == p.layers[1].timings[0].repetitions);
}

TEST_CASE("profiling in rounds: every point once per round, samples pooled, the sync hook before each") {
  ModelSpec m;
  REQUIRE_OK(LoadModelSpec(testing::SourcePath("configs/models/tiny-gpt.yaml"), &m));
  LayerProfileOptions o;
  o.microbatches = {1, 2};
  o.min_repetitions = 7;   // 3 per round in 3 rounds
  o.max_repetitions = 9;   // 3 per round: exactly 9 pooled
  o.target_rel_error = 0;  // never "stable": every round runs to its maximum
  o.budget_s = 3;          // 1 s a round: no pass here is over 1/20 of it
  o.rounds = 3;
  o.progress = false;
  int calls = 0;
  o.sync = [&calls] {
    ++calls;
    return Status::OK();
  };
  o.budget_floor = 1;
  Profile p;
  REQUIRE_OK(ProfileModel(m, o, &p));
  // tiny-gpt has 5 distinct signatures (embedding, block, final layernorm, lm_head, loss) x 2 points x 3 rounds.
  CHECK(calls == 5 * 2 * 3);
  for (const auto& l : p.layers) {
    INFO(l.name);
    for (const auto& t : l.timings) CHECK(t.repetitions == 9);
  }
  // A point whose pass takes over 1/20 of a round's budget is timed whole in the first round (the
  // whole profile's repetitions: here the budget is tiny, so every point), and the hook still runs
  // before every point of every round, as the ranks under mpirun must meet equally often.
  calls = 0;
  o.budget_s = 1e-6;
  o.budget_floor = 9;
  REQUIRE_OK(ProfileModel(m, o, &p));
  CHECK(calls == 5 * 2 * 3);
  for (const auto& l : p.layers) {
    INFO(l.name);
    for (const auto& t : l.timings) CHECK(t.repetitions == 7);  // min(budget_floor 9, min_repetitions 7) in one go
  }
  // A failing hook (a lost peer rank under mpirun) stops the profile with its error.
  o.sync = [] { return Status::CommError("peer gone"); };
  Status s = ProfileModel(m, o, &p);
  CHECK(!s.ok());
  CHECK(s.message().find("peer gone") != std::string::npos);
}

TEST_CASE("alpha-beta fit recovers a closed form") {
  std::vector<std::pair<double, double>> pts;
  for (double b = 8; b <= 1 << 24; b *= 4) pts.emplace_back(b, 5e-6 + b / 3e9);
  double alpha = 0, beta = 0;
  FitAlphaBeta(pts, &alpha, &beta);
  CHECK(alpha == doctest::Approx(5e-6).epsilon(1e-6).scale(0));
  CHECK(1 / beta == doctest::Approx(3e9).epsilon(1e-6));
  CHECK(BusBandwidthFactor("all_reduce", 4) == doctest::Approx(1.5));
  CHECK(BusBandwidthFactor("all_gather", 4) == doctest::Approx(0.75));
  CHECK(BusBandwidthFactor("send_recv", 4) == 1.0);
  CHECK(BusBandwidthFactor("all_to_all", 4) == doctest::Approx(0.75));  // nccl-tests: (n - 1) / n
}

TEST_CASE("collective profile on 2 and 4 thread ranks: every result right, curves fitted") {
  for (int n : {2, 4}) {
    std::vector<CommRow> rows;
    std::vector<CommCurve> curves;
    CHECK_OK(RunThreadRanks(n, [&](Communicator& c) -> Status {
      CommProfileOptions o;
      o.max_bytes = 1 << 14;
      o.iterations = 2;
      o.warmup = 1;
      std::vector<CommRow> r;
      std::vector<CommCurve> cv;
      PLANNER_RETURN_IF_ERROR(ProfileCollectives(c, o, &r, &cv, [](const std::string&) {}));
      if (c.rank() == 0) {
        rows = r;
        curves = cv;
      }
      return Status::OK();
    }));
    INFO(n << " ranks");
    // Group sizes 2 (and 4): six collectives each.
    CHECK(curves.size() == (n == 2 ? 6u : 12u));
    for (const auto& r : rows) CHECK(r.wrong == 0);
    for (const auto& c : curves) {
      CHECK(c.level == "node");
      CHECK(c.busbw_GBps >= 0);  // threads: timing noise may flatten the fit; MPI is checked in the mpi suite
      CHECK(c.alpha_s >= 0);
      CHECK(c.points.size() >= 10);
    }
  }
  Status one = RunThreadRanks(1, [](Communicator& c) {
    std::vector<CommRow> r;
    std::vector<CommCurve> cv;
    return ProfileCollectives(c, {}, &r, &cv, [](const std::string&) {});
  });
  CHECK(one.code() == StatusCode::kInvalidArgument);
}

TEST_CASE("cold-cache collective profile: every result right, curves marked cold and preferred") {
  std::vector<CommCurve> curves;
  CHECK_OK(RunThreadRanks(2, [&](Communicator& c) -> Status {
    CommProfileOptions o;
    o.max_bytes = 1 << 12;
    o.iterations = 2;
    o.warmup = 1;
    o.cold = true;
    o.collectives = {"all_reduce", "send_recv"};
    std::vector<CommRow> r;
    std::vector<CommCurve> cv;
    PLANNER_RETURN_IF_ERROR(ProfileCollectives(c, o, &r, &cv, [](const std::string&) {}));
    for (const auto& row : r) {
      if (row.wrong != 0) return Status::Internal("wrong results");
    }
    if (c.rank() == 0) curves = cv;
    return Status::OK();
  }));
  REQUIRE(curves.size() == 2);
  Profile p;
  CommCurve warm = curves[0];
  warm.cold = false;
  warm.group_size = 4;  // a warm curve of a larger group must not win over the cold one
  p.comm = {warm, curves[0]};
  const CommCurve* f = p.FindComm("all_reduce", "node");
  REQUIRE(f != nullptr);
  CHECK(f->cold);
  Profile q;
  REQUIRE_OK(ParseProfile("c.yaml", ProfileToYaml(p), &q));
  CHECK(q.comm[1].cold);
  CHECK_FALSE(q.comm[0].cold);
}

TEST_CASE("measured curves replace the cluster file's figures for the levels they cover") {
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/dgx-a100.yaml"), &c));
  Profile comm;
  CommCurve ar;
  ar.collective = "all_reduce";
  ar.level = "node";
  ar.group_size = 8;
  ar.alpha_s = 14e-6;
  ar.busbw_GBps = 180;
  comm.comm.push_back(ar);
  std::vector<std::string> notes;
  ApplyCommCurves(comm, "comm.profile.yaml", &c, &notes);
  CHECK(c.levels[0].bandwidth_GBps == 180);
  CHECK(c.levels[0].latency_us == doctest::Approx(1.0));  // 14 us over 2 (8 - 1) ring steps
  CHECK(c.levels[1].bandwidth_GBps == 24);                // not measured: the file's
  CHECK(c.levels[0].measured_allreduce.points.empty());   // a fit without points: the alpha-beta line
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].find("measured (comm.profile.yaml") != std::string::npos);
  CHECK(notes[1].find("from the cluster file") != std::string::npos);
}

TEST_CASE("measured comm curves: the cost model interpolates their points") {
  const std::vector<std::pair<double, double>> pts = {{1024, 4e-6}, {4096, 8e-6}, {16384, 32e-6}};
  CHECK(MeasuredSeconds(pts, 4096) == doctest::Approx(8e-6).scale(0));                    // at a point
  CHECK(MeasuredSeconds(pts, 2048) == doctest::Approx(std::sqrt(4e-6 * 8e-6)).scale(0));  // log-log midpoint
  CHECK(MeasuredSeconds(pts, 100) == doctest::Approx(4e-6).scale(0));                     // below: latency-bound
  CHECK(MeasuredSeconds(pts, 65536) == doctest::Approx(128e-6).scale(0));                 // above: the last bandwidth
  CHECK(MeasuredSeconds({}, 4096) == 0);
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/local-cpu.yaml"), &c));
  Profile comm;
  CommCurve ar, p2p;
  ar.collective = "all_reduce";
  ar.level = "node";
  ar.group_size = 2;
  ar.alpha_s = 3e-6;
  ar.busbw_GBps = 5;
  ar.points = {{16384, 20e-6}, {1024, 3e-6}, {4096, 6e-6}};  // unsorted on purpose
  p2p = ar;
  p2p.collective = "send_recv";
  p2p.points = pts;
  comm.comm = {ar, p2p};
  std::vector<std::string> notes;
  ApplyCommCurves(comm, "comm.profile.yaml", &c, &notes);
  CHECK(P2PSeconds(c, 2048, 0, 1) == doctest::Approx(std::sqrt(4e-6 * 8e-6)).scale(0));
  CHECK(AllReduceSeconds(c, 4096, {2}) == doctest::Approx(6e-6).scale(0));  // the measured group size: the point
  CHECK(AllReduceSeconds(c, 4096, {4}) ==
        doctest::Approx(6e-6 * 1.5).scale(0));  // 4 ranks at the same busbw: (3/4) / (1/2)
}

TEST_CASE("cold profile with compute before each operation (--gap-ms): the gap is spent, recorded and read back") {
  std::vector<CommCurve> curves;
  double wall_s = 0;
  CHECK_OK(RunThreadRanks(2, [&](Communicator& c) -> Status {
    CommProfileOptions o;
    o.min_bytes = o.max_bytes = 4096;  // one size
    o.iterations = 3;
    o.warmup = 1;
    o.cold = true;
    o.gap_s = 0.05;  // long against a loaded host's preemption, so the bound below cannot pass by luck or fail by noise
    o.collectives = {"all_reduce"};
    std::vector<CommRow> r;
    std::vector<CommCurve> cv;
    const double t0 = MonotonicSeconds();
    PLANNER_RETURN_IF_ERROR(ProfileCollectives(c, o, &r, &cv, [](const std::string&) {}));
    if (c.rank() == 0) {
      wall_s = MonotonicSeconds() - t0;
      curves = cv;
    }
    for (const auto& row : r) {
      if (row.wrong != 0) return Status::Internal("wrong results");
    }
    return Status::OK();
  }));
  REQUIRE(curves.size() == 1);
  CHECK(curves[0].cold);
  CHECK(curves[0].gap_s == 0.05);
  CHECK(wall_s >= 3 * 0.05);  // three timed operations, each after 50 ms of compute
  // The timed operation excludes the gap: 50 ms of compute is not in a 4 KiB all-reduce's time.
  REQUIRE(curves[0].points.size() == 1);
  CHECK(curves[0].points[0].second < 0.05);
  Profile p;
  p.comm = curves;
  Profile q;
  REQUIRE_OK(ParseProfile("c.yaml", ProfileToYaml(p), &q));
  REQUIRE(q.comm.size() == 1);
  CHECK(q.comm[0].gap_s == 0.05);
  // A gap without cold caches is refused: by the profiler and in a profile file.
  CHECK(RunThreadRanks(2,
                       [&](Communicator& c) -> Status {
                         CommProfileOptions o;
                         o.gap_s = 0.01;
                         std::vector<CommRow> r;
                         std::vector<CommCurve> cv;
                         return ProfileCollectives(c, o, &r, &cv, [](const std::string&) {});
                       })
            .message()
            .find("add --cache cold") != std::string::npos);
  std::string text = ProfileToYaml(p);
  const size_t at = text.find("cache: cold");
  REQUIRE(at != std::string::npos);
  text.replace(at, 11, "cache: warm");
  Status st = ParseProfile("c.yaml", text, &q);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("comm[0].gap_s") != std::string::npos);
  CHECK(st.message().find("set cache: cold or remove gap_s") != std::string::npos);
}

TEST_CASE(
    "curves of several conditions: gradient all-reduces on the after-compute curve, TP all-reduces on the warm one") {
  CommCurve warm, cold0, cold20;
  warm.collective = cold0.collective = cold20.collective = "all_reduce";
  warm.level = cold0.level = cold20.level = "node";
  warm.group_size = 4;  // larger, but warm: never chosen over a cold curve
  cold0.group_size = cold20.group_size = 2;
  cold0.cold = cold20.cold = true;
  cold20.gap_s = 0.02;
  warm.points = {{1 << 20, 100e-6}, {4 << 20, 400e-6}};
  cold0.points = {{1 << 20, 200e-6}, {4 << 20, 500e-6}};
  cold20.points = {{2 << 20, 500e-6}, {4 << 20, 800e-6}};  // taken from 2 MiB only
  warm.busbw_GBps = cold0.busbw_GBps = cold20.busbw_GBps = 8;
  Profile comm;
  comm.comm = {warm, cold20, cold0};  // order does not matter
  REQUIRE(comm.FindComm("all_reduce", "node") != nullptr);
  CHECK(comm.FindComm("all_reduce", "node")->gap_s == 0);
  CHECK(comm.FindComm("all_reduce", "node")->cold);
  CHECK(comm.FindComm("all_reduce", "node", Profile::Conditions::kAfterCompute)->gap_s == 0.02);
  CHECK_FALSE(comm.FindComm("all_reduce", "node", Profile::Conditions::kWarm)->cold);
  CHECK(comm.FindComm("all_reduce", "node", Profile::Conditions::kWarm)->group_size == 4);
  ClusterSpec c;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/local-cpu.yaml"), &c));
  std::vector<std::string> notes;
  ApplyCommCurves(comm, "comm.profile.yaml", &c, &notes);
  // Tensor parallel: the warm curve, measured on 4 ranks, moved to 2 at the same busbw.
  CHECK(AllReduceSeconds(c, 4 << 20, {2}) == doctest::Approx(400e-6 * (1.0 / 2) / (3.0 / 4)).scale(0));
  CHECK(AllReduceSeconds(c, 4 << 20, {2}, AllReduceUse::kGradient) ==
        doctest::Approx(800e-6).scale(0));  // gradient: after compute
  CHECK(AllReduceSeconds(c, 1 << 20, {2}, AllReduceUse::kGradient) ==
        doctest::Approx(200e-6).scale(0));  // below its sizes: cold, gap 0
  REQUIRE_FALSE(notes.empty());
  CHECK(notes[0].find("times interpolated from 2 measured sizes (cold caches)") != std::string::npos);
  CHECK(notes[0].find("gradient all-reduces from 2.00 MiB on the curve (cold caches, 20 ms of compute before each)") !=
        std::string::npos);
  CHECK(notes[0].find("tensor-parallel all-reduces on the warm curve") != std::string::npos);
  // With one curve every use takes it.
  Profile one;
  one.comm = {cold0};
  ClusterSpec d;
  REQUIRE_OK(LoadClusterSpec(testing::SourcePath("configs/clusters/local-cpu.yaml"), &d));
  ApplyCommCurves(one, "comm.profile.yaml", &d, &notes);
  CHECK(AllReduceSeconds(d, 4 << 20, {2}, AllReduceUse::kGradient) == doctest::Approx(500e-6).scale(0));
  CHECK(AllReduceSeconds(d, 4 << 20, {2}) == doctest::Approx(500e-6).scale(0));
}

}  // namespace
}  // namespace planner
