// Parameter-server and BytePS gradient sync (runtime/summation_service.h) on thread ranks, the
// plans made by the solver and codegen with plan.dp_comm / dp_servers set as plan.yaml would:
// the first step's gradients and every iteration's loss (SGD and Adam) equal the all-reduce
// run's (max abs difference: 0 on thread ranks, whose AllReduce sums in rank order as the
// servers do; 1e-6 of the largest gradient allowed for float rounding), the bytes each process
// moves per sync equal BytePsOptimalSplit's shares of the bucket, the loss falls; codegen's
// launch files start the servers; launch.yaml's dp_comm / servers rules. Groups: dp only, pp 2 x dp 2
// and tp 2 x dp 2 (a server serves every group on its own thread).
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "codegen/codegen.h"
#include "dp_solver/search.h"
#include "runtime/executor.h"
#include "runtime/summation_service.h"
#include "spec/cluster_spec.h"
#include "tests/runtime/thread_run.h"
#include "tests/test_util.h"

namespace planner {
namespace {

struct DpCase {
  std::string model = "mlp-small", cluster = "dgx-a100";
  int64_t gpus = 2, pp = 1, tp = 1, global_batch = 64, iterations = 1, servers = 0;
  DpComm comm = DpComm::kHierAllReduce;
  bool colocated = false;  // ps_placement: colocated (servers 0)
  std::string optimizer = "adam";
  std::vector<int64_t> replication;  // per-stage replication (solve --replication)
  Schedule schedule = Schedule::k1F1B;
  int64_t microbatch = 0;
};

// planner solve (tp 1, the given pp), plan.yaml's dp_comm / dp_servers edited, planner codegen.
Status MakeDpLaunch(const DpCase& c, ModelSpec* model, LaunchPlan* out, std::vector<std::string>* notes = nullptr,
                    std::vector<std::pair<std::string, std::string>>* files = nullptr) {
  ClusterSpec cluster;
  PLANNER_RETURN_IF_ERROR(LoadClusterSpec(testing::SourcePath("configs/clusters/" + c.cluster + ".yaml"), &cluster));
  PLANNER_RETURN_IF_ERROR(LoadModelSpec(testing::SourcePath("configs/models/" + c.model + ".yaml"), model));
  CostSource src;
  src.cluster = &cluster;
  src.model = model;
  SearchOptions o;
  o.gpus = c.gpus;
  o.global_batch = c.global_batch;
  o.tp = {c.tp};
  o.pp = {c.pp};
  o.schedules = {c.schedule};
  o.replication = c.replication;
  if (c.microbatch > 0) o.microbatch = {c.microbatch};
  Plan plan;
  PLANNER_RETURN_IF_ERROR(SolveAuto(src, o, &plan));
  plan.dp_comm = c.comm;
  plan.dp_servers = c.servers;
  plan.ps_colocated = c.colocated;
  CodegenOptions g;
  g.gpus_per_node = cluster.levels[0].size;
  g.run.iterations = c.iterations;
  g.run.optimizer = c.optimizer;
  g.run.learning_rate = c.optimizer == "sgd" ? 0.05 : 1e-3;
  PLANNER_RETURN_IF_ERROR(BuildLaunchPlan(plan, model->digest, g, out));
  out->path = c.model + "/launch.yaml";
  if (files != nullptr) {
    std::vector<std::string> n;
    PLANNER_RETURN_IF_ERROR(GenerateLaunchFiles(plan, *model, *out, g, files, notes ? notes : &n));
  }
  return Status::OK();
}

// One thread per process of the job (workers and servers); every process's summary.
Status RunJob(const LaunchPlan& L, const ModelSpec& model, std::vector<RunSummary>* out) {
  RunOptions opt;
  opt.quiet = true;
  opt.keep_gradients = true;
  opt.run_dir = testing::FreshRunDir("dp-comm-test", DpCommName(L.dp_comm));
  const int n = static_cast<int>(L.ranks.size() + L.servers.size());
  out->assign(static_cast<size_t>(n), RunSummary());
  return RunThreadRanks(
      n,
      [&](Communicator& world) -> Status {
        world.set_timeout_seconds(L.run.timeout_s);
        return RunLaunch(L, model, world, opt, &(*out)[static_cast<size_t>(world.rank())]);
      },
      L.run.timeout_s);
}

// Largest |a - b| over every gradient of every worker (by rank and name), and the largest |a|.
void GradientDiff(const std::vector<RunSummary>& a, const std::vector<RunSummary>& b, size_t workers, double* diff,
                  double* scale) {
  *diff = 0, *scale = 0;
  for (size_t r = 0; r < workers; ++r) {
    REQUIRE(a[r].gradients.size() == b[r].gradients.size());
    REQUIRE(!a[r].gradients.empty());
    for (size_t i = 0; i < a[r].gradients.size(); ++i) {
      const auto& x = a[r].gradients[i].values;
      const auto& y = b[r].gradients[i].values;
      REQUIRE(x.size() == y.size());
      for (size_t j = 0; j < x.size(); ++j) {
        *diff = std::max(*diff, std::fabs(static_cast<double>(x[j]) - y[j]));
        *scale = std::max(*scale, std::fabs(static_cast<double>(x[j])));
      }
    }
  }
}

// The sync of `c` against the all-reduce run of the same plan: gradients and losses.
std::vector<RunSummary> CheckAgainstAllReduce(DpCase c) {
  ModelSpec model;
  LaunchPlan L, R;
  REQUIRE_OK(MakeDpLaunch(c, &model, &L));
  REQUIRE(L.dp_comm == c.comm);
  REQUIRE(static_cast<int64_t>(L.servers.size()) == c.servers);
  DpCase ar = c;
  ar.comm = DpComm::kHierAllReduce;
  ar.servers = 0;
  ar.colocated = false;
  REQUIRE_OK(MakeDpLaunch(ar, &model, &R));
  std::vector<RunSummary> got, want;
  REQUIRE_OK(RunJob(L, model, &got));
  REQUIRE_OK(RunJob(R, model, &want));
  double diff = 0, scale = 0;
  GradientDiff(got, want, L.ranks.size(), &diff, &scale);
  MESSAGE(fmt::format("{} with {} servers, {}: max abs gradient difference {:.3g} (largest gradient {:.3g})",
                      DpCommName(c.comm), c.servers, c.optimizer, diff, scale));
  CHECK(scale > 0);
  CHECK(diff <= 1e-6 * scale);
  REQUIRE(got[0].loss.size() == want[0].loss.size());
  for (size_t i = 0; i < want[0].loss.size(); ++i)
    CHECK(std::fabs(got[0].loss[i] - want[0].loss[i]) <= 1e-6 * std::fabs(want[0].loss[i]));
  for (size_t s = L.ranks.size(); s < got.size(); ++s) CHECK(got[s].server);
  return got;
}

TEST_CASE(
    "SplitForSync: ps shards the bucket over the servers; byteps gives each server cpu_share and each worker "
    "gpu_share") {
  const SyncParts ps = SplitForSync(DpComm::kParameterServer, 10, 4, 3);
  REQUIRE(ps.server.size() == 3);
  CHECK(ps.server[0].count == 4);
  CHECK(ps.server[1].begin == 4);
  CHECK(ps.server[2].begin + ps.server[2].count == 10);
  for (const SyncPart& w : ps.worker) CHECK(w.count == 0);
  for (int64_t n : {2, 3, 4, 8})
    for (int64_t k : {0, 1, 2, 3, 8}) {
      const int64_t m = 100003;
      const SyncParts p = SplitForSync(DpComm::kBytePS, m, n, k);
      const BytePsSplit s = BytePsOptimalSplit(n, k);
      int64_t total = 0, end = 0;
      for (const SyncPart& x : p.server) {
        CHECK(x.begin == end);
        end = x.begin + x.count;
        total += x.count;
        CHECK(std::fabs(static_cast<double>(x.count) - s.cpu_share * m) < 1.0);
      }
      for (const SyncPart& x : p.worker) {
        CHECK(x.begin == end);
        end = x.begin + x.count;
        total += x.count;
        CHECK(std::fabs(static_cast<double>(x.count) - s.gpu_share * m) <= static_cast<double>(k) + 1.0);
      }
      CHECK(total == m);
    }
}

TEST_CASE("SplitForSync: ps with k = 0 (co-located) cuts the bucket into n contiguous worker shards, no server part") {
  for (int64_t n : {2, 3, 4, 8}) {
    const int64_t m = 100003;
    const SyncParts p = SplitForSync(DpComm::kParameterServer, m, n, 0);
    CHECK(p.server.empty());
    REQUIRE(static_cast<int64_t>(p.worker.size()) == n);
    int64_t end = 0;
    for (int64_t i = 0; i < n; ++i) {
      const SyncPart& w = p.worker[static_cast<size_t>(i)];
      CHECK(w.begin == end);
      CHECK(w.count == m / n + (i < m % n ? 1 : 0));
      end = w.begin + w.count;
    }
    CHECK(end == m);
  }
}

// Co-located ps over dp n: gradients and losses equal the all-reduce run's, and each worker sends (and
// receives) 2(n-1)/n M per sync: M - its shard pushed to the shards' owners, its summed shard to the n-1 others.
void CheckColocated(int64_t n) {
  DpCase c;
  c.gpus = n;
  c.comm = DpComm::kParameterServer;
  c.colocated = true;
  c.iterations = 2;
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeDpLaunch(c, &model, &L));
  CHECK(L.ps_colocated);
  CHECK(L.servers.empty());
  const std::vector<RunSummary> got = CheckAgainstAllReduce(c);
  REQUIRE(static_cast<int64_t>(got.size()) == n);  // no server ranks
  double m_bytes = 0;                              // the bucket: every parameter of the one stage
  for (const NamedGradient& g : got[0].gradients) m_bytes += 4.0 * static_cast<double>(g.values.size());
  const double nn = static_cast<double>(n), want = 2 * (nn - 1) / nn * m_bytes;
  for (int64_t r = 0; r < n; ++r) {
    const SyncTraffic& t = got[static_cast<size_t>(r)].dp_traffic;
    CHECK(t.syncs == 2);
    MESSAGE(
        fmt::format("dp {} worker {}: {:.0f} bytes sent per sync, 2(n-1)/n M = {:.0f}", n, r, t.sent_bytes / 2, want));
    CHECK(std::fabs(t.sent_bytes / 2 - want) <= 2 * (nn - 1) * 4);  // the shards' rounding: under a float each
    CHECK(std::fabs(t.received_bytes / 2 - want) <= 2 * (nn - 1) * 4);
  }
}

TEST_CASE("ps co-located, dp 2 and dp 4: gradients equal the all-reduce run's; each worker sends 2(n-1)/n M per sync") {
  CheckColocated(2);
  CheckColocated(4);
}

TEST_CASE("ps co-located: codegen writes servers: [] and ps_placement: colocated; the reader wants both together") {
  DpCase c;
  c.comm = DpComm::kParameterServer;
  c.colocated = true;
  ModelSpec model;
  LaunchPlan L;
  std::vector<std::pair<std::string, std::string>> files;
  REQUIRE_OK(MakeDpLaunch(c, &model, &L, nullptr, &files));
  std::map<std::string, std::string> f(files.begin(), files.end());
  CHECK(f["launch.yaml"].find("dp_comm: ps\nservers: []\nps_placement: colocated\n") != std::string::npos);
  CHECK(f["run.sh"].find("--oversubscribe -np 2 ") != std::string::npos);
  LaunchPlan back;
  REQUIRE_OK(ParseLaunchPlan("launch.yaml", f["launch.yaml"], &back));
  CHECK(back.ps_colocated);
  CHECK(back.servers.empty());
  const std::string text = f["launch.yaml"];
  const size_t at = text.find("ps_placement: colocated\n");
  Status s = ParseLaunchPlan("launch.yaml", text.substr(0, at) + text.substr(at + 24),
                             &back);  // ps, no servers, not colocated
  CHECK(s.message().find("field 'servers': dp_comm ps needs at least one server rank") != std::string::npos);
  std::string with_server = text;
  with_server.replace(with_server.find("servers: []"), 11, "servers: [2]");
  s = ParseLaunchPlan("launch.yaml", with_server, &back);
  CHECK(s.message().find("field 'ps_placement': colocated is for dp_comm ps with servers: []") != std::string::npos);
}

TEST_CASE("ps, dp 2 + 1 server: gradients and 3 losses equal the all-reduce run's, with SGD and with Adam") {
  for (const char* opt : {"sgd", "adam"}) {
    DpCase c;
    c.comm = DpComm::kParameterServer;
    c.servers = 1;
    c.iterations = 3;
    c.optimizer = opt;
    CheckAgainstAllReduce(c);
  }
}

TEST_CASE(
    "byteps, dp 4 + 2 servers: gradients equal the all-reduce run's; each process moves BytePsOptimalSplit's bytes per "
    "sync") {
  DpCase c;
  c.gpus = 4;
  c.comm = DpComm::kBytePS;
  c.servers = 2;
  c.iterations = 2;
  const std::vector<RunSummary> got = CheckAgainstAllReduce(c);
  double m_floats = 0;  // the bucket: every parameter of the one stage
  for (const NamedGradient& g : got[0].gradients) m_floats += static_cast<double>(g.values.size());
  const BytePsSplit s = BytePsOptimalSplit(4, 2);  // cpu 6/20, gpu 2/20
  CHECK(s.cpu_share == doctest::Approx(0.3));
  CHECK(s.gpu_share == doctest::Approx(0.1));
  const double tol = 4.0 * 8;  // the parts' rounding: under a float each, in bytes, per part
  for (size_t r = 0; r < 4; ++r) {
    const SyncTraffic& t = got[r].dp_traffic;
    CHECK(t.syncs == 2);
    // worker: pushes M - its own part (to 3 workers and 2 servers), returns its part's sum to 3 workers
    CHECK(std::fabs(t.sent_bytes / 2 - 4 * m_floats * (1 + (4 - 2) * s.gpu_share)) <= 2 * tol);
    CHECK(t.sent_bytes == t.received_bytes);
  }
  for (size_t r = 4; r < 6; ++r) {
    const SyncTraffic& t = got[r].dp_traffic;
    CHECK(t.syncs == 2);
    CHECK(std::fabs(t.received_bytes / 2 - 4 * m_floats * 4 * s.cpu_share) <= tol);
    CHECK(t.sent_bytes == t.received_bytes);
  }
}

TEST_CASE(
    "byteps without servers (k = 0, the all-reduce's split) and pp 2 x dp 2 under ps with 1 server serving both "
    "groups") {
  DpCase c;
  c.comm = DpComm::kBytePS;
  c.servers = 0;
  const std::vector<RunSummary> a = CheckAgainstAllReduce(c);
  CHECK(a[0].dp_traffic.syncs == 1);
  DpCase p;
  p.gpus = 4;
  p.pp = 2;
  p.comm = DpComm::kParameterServer;
  p.servers = 1;
  p.iterations = 2;
  const std::vector<RunSummary> b = CheckAgainstAllReduce(p);
  REQUIRE(b.size() == 5);
  CHECK(b[4].dp_traffic.syncs == 4);  // 2 groups x 2 iterations
}

TEST_CASE(
    "tp 2 x dp 2 (tiny-gpt) under byteps with 1 server: one group per tp rank, both served; gradients equal the "
    "all-reduce run's") {
  DpCase c;
  c.model = "tiny-gpt";
  c.gpus = 4;
  c.tp = 2;
  c.global_batch = 8;
  c.comm = DpComm::kBytePS;
  c.servers = 1;
  const std::vector<RunSummary> got = CheckAgainstAllReduce(c);
  REQUIRE(got.size() == 5);
  CHECK(got[4].dp_traffic.syncs == 2);  // the tp ranks' two groups, one iteration
}

TEST_CASE(
    "PipeDream 2-1-1 under ps with 1 server: stage 0's replicas sync after every backward; losses equal the all-reduce "
    "run's") {
  DpCase c;
  c.model = "tiny-gpt";
  c.gpus = 4;
  c.global_batch = 24;
  c.microbatch = 1;
  c.replication = {2, 1, 1};
  c.schedule = Schedule::kPipeDream;
  c.comm = DpComm::kParameterServer;
  c.servers = 1;
  c.iterations = 2;
  const std::vector<RunSummary> got = CheckAgainstAllReduce(c);
  REQUIRE(got.size() == 5);
  CHECK(got[4].dp_traffic.syncs == 24);  // one per backward of stage 0 (2 iterations x 24 microbatches over 2 replicas)
}

TEST_CASE("byteps dp 2 + 1 server: the loss falls over 20 iterations") {
  DpCase c;
  c.comm = DpComm::kBytePS;
  c.servers = 1;
  c.iterations = 20;
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeDpLaunch(c, &model, &L));
  std::vector<RunSummary> got;
  REQUIRE_OK(RunJob(L, model, &got));
  MESSAGE(fmt::format("loss {:.4f} -> {:.4f}", got[0].loss.front(), got[0].loss.back()));
  CHECK(got[0].loss.back() < got[0].loss.front() - 0.01);
}

TEST_CASE(
    "codegen: launch.yaml carries dp_comm and the servers after the workers; run.sh and slurm.sbatch start them; dp 1 "
    "needs no servers") {
  DpCase c;
  c.comm = DpComm::kParameterServer;
  c.servers = 2;
  ModelSpec model;
  LaunchPlan L;
  std::vector<std::pair<std::string, std::string>> files;
  std::vector<std::string> notes;
  REQUIRE_OK(MakeDpLaunch(c, &model, &L, &notes, &files));
  CHECK(L.servers == std::vector<int64_t>{2, 3});
  std::map<std::string, std::string> f(files.begin(), files.end());
  CHECK(f["launch.yaml"].find("dp_comm: ps\nservers: [2, 3]\n") != std::string::npos);
  CHECK(f["run.sh"].find("--oversubscribe -np 4 ") != std::string::npos);
  CHECK(f["slurm.sbatch"].find("#SBATCH --ntasks=4\n") != std::string::npos);
  LaunchPlan back;
  REQUIRE_OK(ParseLaunchPlan("launch.yaml", f["launch.yaml"], &back));
  CHECK(back.dp_comm == DpComm::kParameterServer);
  CHECK(back.servers == L.servers);
  // dp 1: nothing to synchronise, allreduce-hier without servers and a note.
  DpCase one = c;
  one.gpus = 1;
  files.clear();
  REQUIRE_OK(MakeDpLaunch(one, &model, &L, &notes, &files));
  CHECK(L.dp_comm == DpComm::kHierAllReduce);
  CHECK(L.servers.empty());
  REQUIRE(!notes.empty());
  CHECK(std::any_of(notes.begin(), notes.end(),
                    [](const std::string& n) { return n.find("no gradients to synchronise") != std::string::npos; }));
}

TEST_CASE(
    "launch.yaml: ps without servers is refused naming the field; a job without its servers is refused before any "
    "traffic") {
  DpCase c;
  c.comm = DpComm::kParameterServer;
  c.servers = 1;
  ModelSpec model;
  LaunchPlan L;
  std::vector<std::pair<std::string, std::string>> files;
  REQUIRE_OK(MakeDpLaunch(c, &model, &L, nullptr, &files));
  std::string text = files[0].second;
  const size_t at = text.find("servers: [2]\n");
  REQUIRE(at != std::string::npos);
  LaunchPlan bad;
  Status s = ParseLaunchPlan("launch.yaml", text.substr(0, at) + "servers: []\n" + text.substr(at + 13), &bad);
  CHECK(!s.ok());
  CHECK(s.message().find("servers") != std::string::npos);
  RunOptions o;
  o.quiet = true;
  o.run_dir = testing::FreshRunDir("dp-comm-test", "size");
  s = RunThreadRanks(
      2, [&](Communicator& w) { return RunLaunch(L, model, w, o, nullptr); }, 10);
  CHECK(!s.ok());
  CHECK(s.message().find("has 3 ranks (1 summation servers) but this job has 2") != std::string::npos);
}

}  // namespace
}  // namespace planner
