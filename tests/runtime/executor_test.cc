// The runtime on thread ranks (RunThreadRanks), case by case: every schedule's
// gradients after one step equal one process's (GPipe, 1F1B, interleaved,
// ZB-H1, DualPipeV on pp=2; dp=2, with the overlapped reducer too; pp=2 x dp=2; the
// synchronous 2-1-1), tensor parallelism gives one process's gradient norm
// and losses, PipeDream's weight stashing keeps each microbatch on one weight
// version and the loss falls; a checkpointed run resumes onto the same loss
// curve; with sequence parallelism (tp 2) and context parallelism (cp 2, with pp 2, tp 2, ZB-H1,
// interleaving) every parameter's gradient equals one process's, for tiny-gpt and for the
// Llama-class tiny-llama (GQA, RoPE, SwiGLU, RMSNorm, no biases). Plans come from the solver and codegen, as `planner solve` and
// `planner codegen` make them. The same cases run under mpirun in
// tests/runtime/run_test.sh (tolerance: relative L2 1e-5 per gradient).
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <sstream>

#include <fmt/format.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "common/crc32c.h"
#include "common/timing.h"
#include "common/units.h"
#include "dp_solver/search.h"
#include "runtime/executor.h"
#include "runtime/kernels/shards.h"
#include "spec/cluster_spec.h"
#include "tests/runtime/thread_run.h"
#include "tests/test_util.h"

namespace planner {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string model = "tiny-gpt", cluster = "local-cpu";
  int64_t gpus = 2, global_batch = 0;
  std::vector<int64_t> pp, tp, microbatch, replication;
  std::vector<Schedule> schedules;
  int64_t iterations = 1;
  double lr = 1e-3;
  bool overlap_dp = false;
  int64_t cp = 1;  // the solved plan's cp / sequence_parallel set before codegen (the search does not choose them yet)
  bool sp = false;
  std::optional<Schedule>
      plan_schedule;  // the solved plan's schedule replaced before codegen (as run_test.sh edits plan.yaml)
  std::function<void(ModelSpec*)> edit;  // applied to the loaded model before solving (a variant of a shipped model)
};

// A fresh directory for one run's files.
std::string RunDir(const std::string& name) { return testing::FreshRunDir("executor-test", name); }

// planner solve and planner codegen, in memory.
Status MakeLaunch(const Case& c, ModelSpec* model, LaunchPlan* out) {
  ClusterSpec cluster;
  PLANNER_RETURN_IF_ERROR(LoadClusterSpec(testing::SourcePath("configs/clusters/" + c.cluster + ".yaml"), &cluster));
  PLANNER_RETURN_IF_ERROR(LoadModelSpec(testing::SourcePath("configs/models/" + c.model + ".yaml"), model));
  if (c.edit) c.edit(model);
  CostSource src;
  src.cluster = &cluster;
  src.model = model;
  SearchOptions o;
  o.gpus = c.gpus;
  o.global_batch = c.global_batch;
  o.tp = c.tp;
  o.pp = c.pp;
  o.microbatch = c.microbatch;
  o.replication = c.replication;
  o.schedules = c.schedules;
  Plan plan;
  PLANNER_RETURN_IF_ERROR(SolveAuto(src, o, &plan));
  if (c.plan_schedule) plan.schedule = *c.plan_schedule;
  plan.cp = c.cp;
  plan.sequence_parallel = c.sp;
  CodegenOptions g;
  g.gpus_per_node = cluster.levels[0].size;
  g.run.iterations = c.iterations;
  g.run.learning_rate = c.lr;
  g.run.overlap_dp = c.overlap_dp;
  PLANNER_RETURN_IF_ERROR(BuildLaunchPlan(plan, model->digest, g, out));
  out->path = c.model + "/launch.yaml";
  return Status::OK();
}

Status RunOnThreads(const LaunchPlan& L, const ModelSpec& model, RunOptions opt, std::vector<RunSummary>* out) {
  return testing::RunOnThreads(L, model, std::move(opt), out, "executor-test");
}

// The model's gradients by parameter name, from replica 0 and tp rank 0 of each stage (what
// --dump-gradients writes).
std::map<std::string, std::vector<float>> ModelGradients(const LaunchPlan& L, const std::vector<RunSummary>& runs) {
  std::map<std::string, std::vector<float>> g;
  for (size_t r = 0; r < runs.size(); ++r) {
    if (L.ranks[r].replica != 0 || L.ranks[r].tp_rank != 0 || L.ranks[r].cp_rank != 0) continue;
    for (const NamedGradient& x : runs[r].gradients) g[x.name] = x.values;
  }
  return g;
}

// Every reference gradient has its like in `got`, within relative L2 1e-5 (run_test.sh's compare).
void CheckSameGradients(const std::map<std::string, std::vector<float>>& want,
                        const std::map<std::string, std::vector<float>>& got) {
  REQUIRE(!want.empty());
  CHECK(got.size() == want.size());
  double worst = 0;
  for (const auto& [name, w] : want) {
    INFO(name);
    auto it = got.find(name);
    REQUIRE(it != got.end());
    REQUIRE(it->second.size() == w.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      num += (static_cast<double>(it->second[i]) - w[i]) * (static_cast<double>(it->second[i]) - w[i]);
      den += static_cast<double>(w[i]) * w[i];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  MESSAGE(fmt::format("{} gradients, worst relative L2 difference {:.2e}", want.size(), worst));
  CHECK(worst < 1e-5);
}

// The launch's gradients after one step against one process's; returns the multi-rank runs.
std::vector<RunSummary> CheckAgainstOneProcess(const LaunchPlan& L, const ModelSpec& model,
                                               const RunOptions& opt = {}) {
  std::vector<RunSummary> multi, single;
  REQUIRE_OK(RunOnThreads(L, model, opt, &multi));
  REQUIRE_OK(RunOnThreads(SingleProcessPlan(L, model), model, {}, &single));
  CheckSameGradients(ModelGradients(SingleProcessPlan(L, model), single), ModelGradients(L, multi));
  return multi;
}

// planner solve --gpus 2 --pp 2 --schedule S (tiny-gpt, local-cpu)
Case Pipeline(Schedule s) {
  Case c;
  c.pp = {2};
  c.schedules = {s};
  return c;
}

// planner solve --gpus 2 --pp 1 --tp 1: dp=2
Case DataParallel() {
  Case c;
  c.pp = {1};
  c.tp = {1};
  return c;
}

void CheckGradients(const Case& c) {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  CheckAgainstOneProcess(L, model);
}

TEST_CASE("pp=2 GPipe: the gradients equal one process's") { CheckGradients(Pipeline(Schedule::kGpipe)); }

TEST_CASE("pp=2 1F1B: the gradients equal one process's") { CheckGradients(Pipeline(Schedule::k1F1B)); }

TEST_CASE("pp=2 interleaved 1F1B: the gradients equal one process's") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(Pipeline(Schedule::kInterleaved), &model, &L));
  CHECK(L.interleave > 1);
  CheckAgainstOneProcess(L, model);
}

TEST_CASE("pp=2 ZB-H1 (W split from B): the gradients equal one process's") {
  CheckGradients(Pipeline(Schedule::kZbH1));
}

TEST_CASE(
    "pp=2 DualPipeV (the V: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2): the gradients equal one process's") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(Pipeline(Schedule::kDualPipeV), &model, &L));
  REQUIRE(L.schedule == Schedule::kDualPipeV);
  REQUIRE(L.stages.size() == 4);
  // Rank 1 hands stage 1's output to its own stage 2 in memory: no message leaves for it.
  bool local = false;
  for (const RankProgram& g : L.programs) {
    for (const Action& a : g.actions)
      local = local || (g.position == 1 && a.kind == ActionKind::kSendActivation && a.stage == 1);
  }
  CHECK(local);
  CheckAgainstOneProcess(L, model);
}

TEST_CASE("pp=4 DualPipeV (mlp-small, 8 stages in a V over 4 ranks): the gradients equal one process's") {
  Case c;
  c.model = "mlp-small";
  c.cluster = "dgx-a100";
  c.gpus = 4;
  c.pp = {4};
  c.tp = {1};
  c.global_batch = 64;
  c.schedules = {Schedule::kDualPipeV};
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  REQUIRE(L.stages.size() == 8);
  CHECK(L.interleave == 2);
  CheckAgainstOneProcess(L, model);
}

TEST_CASE("dp=2: the gradients equal one process's") { CheckGradients(DataParallel()); }

TEST_CASE("dp=2 with the all-reduce overlapped with backward: the gradients equal one process's") {
  ModelSpec model;
  LaunchPlan L;
  Case c = DataParallel();
  c.overlap_dp = true;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  RunOptions o;
  o.run_dir = RunDir("dp2o");
  CheckAgainstOneProcess(L, model, o);
  std::ifstream trace(fs::path(o.run_dir) / "trace.json");
  std::stringstream text;
  text << trace.rdbuf();
  CHECK(text.str().find("\"dp all-reduce busy\"") != std::string::npos);
}

TEST_CASE("pp=2 x dp=2 (mlp-small, 4 ranks): the gradients equal one process's") {
  Case c = Pipeline(Schedule::k1F1B);
  c.model = "mlp-small";
  c.cluster = "dgx-a100";
  c.gpus = 4;
  c.global_batch = 64;
  c.tp = {1};
  CheckGradients(c);
}

// planner solve --gpus 4 --cluster dgx-a100 --replication 2-1-1 --tp 1 --global-batch 24 --microbatch 1
Case Replicated211() {
  Case c;
  c.cluster = "dgx-a100";
  c.gpus = 4;
  c.global_batch = 24;
  c.tp = {1};
  c.microbatch = {1};
  c.replication = {2, 1, 1};
  return c;
}

TEST_CASE("per-stage replication 2-1-1, synchronous (1F1B with a flush): the gradients equal one process's") {
  ModelSpec model;
  LaunchPlan L;
  // The plan's schedule is PipeDream's; its synchronous twin as run_test.sh makes it (plan.yaml
  // edited, then codegen: the programs are 1F1B's with a flush).
  Case c = Replicated211();
  c.plan_schedule = Schedule::k1F1B;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  REQUIRE(L.config == "2-1-1");
  REQUIRE(L.schedule == Schedule::k1F1B);
  CheckAgainstOneProcess(L, model);
}

TEST_CASE("tp=2: the global gradient norm and 3 steps' losses equal one process's") {
  ModelSpec model;
  LaunchPlan L;
  Case c;
  c.pp = {1};
  c.tp = {2};
  c.iterations = 3;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  REQUIRE(L.tp == 2);
  std::vector<RunSummary> multi, single;
  REQUIRE_OK(RunOnThreads(L, model, {}, &multi));
  REQUIRE_OK(RunOnThreads(SingleProcessPlan(L, model), model, {}, &single));
  const double rel = std::abs(multi[0].gradient_norm - single[0].gradient_norm) / single[0].gradient_norm;
  MESSAGE(
      fmt::format("gradient norm {:.6e} vs {:.6e} (rel {:.1e})", multi[0].gradient_norm, single[0].gradient_norm, rel));
  CHECK(rel < 1e-5);
  REQUIRE(multi[0].loss.size() == 3);
  REQUIRE(single[0].loss.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(std::abs(multi[0].loss[i] - single[0].loss[i]) < 1e-4);
}

// A replicated stage after a single one (1-3-1): its replicas' reduce follows the gradient sent
// upstream, else the middle stage's replicas wait in the reduce for a replica whose next
// activation waits for that gradient (the programs deadlocked and codegen refused the plan).
TEST_CASE("PipeDream 1-3-1 runs: codegen accepts it, every backward keeps its version, the loss falls") {
  Case c = Replicated211();
  c.gpus = 5;
  c.replication = {1, 3, 1};
  c.iterations = 4;
  c.lr = 3e-3;
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  REQUIRE(L.config == "1-3-1");
  std::vector<RunSummary> runs;
  RunOptions o;
  o.run_dir = RunDir("a131");
  REQUIRE_OK(RunOnThreads(L, model, o, &runs));
  CHECK(runs[0].stash.backward_passes == 4 * 24 * 3);
  CHECK(runs[0].stash.mismatches == 0);
  REQUIRE(runs[0].loss.size() == 4);
  CHECK(runs[0].loss.back() < runs[0].loss.front());
}

TEST_CASE("PipeDream programs that do not cover the launch's iterations are refused, not run with zero losses") {
  Case c = Replicated211();
  c.iterations = 2;
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  L.run.iterations = 4;  // launch.yaml edited: the programs still cover 2
  std::vector<RunSummary> runs;
  const Status st = RunOnThreads(L, model, {}, &runs);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("programs cover 48 microbatches but run.iterations 4 x 24 per iteration is 96") !=
        std::string::npos);
}

TEST_CASE(
    "PipeDream 2-1-1: weight stashing keeps each microbatch on one version, newer weights exist, the loss falls") {
  Case c = Replicated211();
  c.iterations = 12;
  c.lr = 3e-3;
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  std::vector<RunSummary> runs;
  RunOptions o;
  o.run_dir = RunDir("a211");
  REQUIRE_OK(RunOnThreads(L, model, o, &runs));
  const StashCounts& s = runs[0].stash;
  MESSAGE(fmt::format("{} backward passes, {} version mismatches, {} with newer weights", s.backward_passes,
                      s.mismatches, s.stale));
  CHECK(s.backward_passes == 12 * 24 * 3);  // every microbatch's backward on each of the 3 stages
  CHECK(s.mismatches == 0);
  CHECK(s.stale > 0);
  REQUIRE(runs[0].loss.size() == 12);
  MESSAGE(fmt::format("loss {:.6f} -> {:.6f}", runs[0].loss.front(), runs[0].loss.back()));
  CHECK(runs[0].loss.back() < runs[0].loss.front() - 0.3);
  CHECK(fs::exists(fs::path(o.run_dir) / "weight_stashing.txt"));
}

TEST_CASE("a run checkpointed after 3 iterations and resumed to 6 follows the uninterrupted loss curve") {
  ModelSpec model;
  LaunchPlan L;
  Case c = Pipeline(Schedule::k1F1B);
  c.iterations = 6;
  c.lr = 3e-3;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  std::vector<RunSummary> full, part, resumed;
  REQUIRE_OK(RunOnThreads(L, model, {}, &full));
  RunOptions o;
  o.run_dir = RunDir("ck");
  o.iterations = 3;
  o.checkpoint_every = 3;
  REQUIRE_OK(RunOnThreads(L, model, o, &part));
  o.iterations = 0;
  o.resume_from = o.run_dir;
  REQUIRE_OK(RunOnThreads(L, model, o, &resumed));
  REQUIRE(full[0].loss.size() == 6);
  REQUIRE(resumed[0].loss.size() == 6);
  // As metrics.csv writes them (the resumed run reads its first 3 from there).
  for (size_t i = 0; i < 6; ++i)
    CHECK(fmt::format("{:.6f}", resumed[0].loss[i]) == fmt::format("{:.6f}", full[0].loss[i]));
}

// The checkpoint refusals (runtime/checkpoint.h): a run checkpointed after 3 iterations, copied,
// damaged one way, resumed: every rank ends with the same line naming the rank, file and reason.
struct Damaged {
  ModelSpec model;
  LaunchPlan L;
  std::string dir;  // the checkpointed run
  Damaged() {
    Case c = Pipeline(Schedule::k1F1B);
    c.iterations = 6;
    REQUIRE_OK(MakeLaunch(c, &model, &L));
    RunOptions o;
    o.run_dir = dir = RunDir("ck-src");
    o.iterations = 3;
    o.checkpoint_every = 3;
    std::vector<RunSummary> part;
    REQUIRE_OK(RunOnThreads(L, model, o, &part));
  }
  // A copy of the run, `damage` applied to it, resumed; the status every rank ended with.
  Status Resume(const std::function<void(const fs::path&)>& damage, const ModelSpec* other = nullptr,
                const LaunchPlan* other_launch = nullptr) {
    const std::string copy = RunDir("ck-copy");
    fs::copy(dir, copy, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    damage(copy);
    RunOptions o;
    o.run_dir = o.resume_from = copy;
    std::vector<RunSummary> runs;
    return RunOnThreads(other_launch ? *other_launch : L, other ? *other : model, o, &runs);
  }
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// Rank 1's file with `edit` applied, and the manifest's checksum fixed to match (a damage the
// checksum alone cannot see).
void EditRank1FixingChecksum(const fs::path& run, const std::function<void(std::string*)>& edit) {
  const fs::path file = run / "ckpt" / "iter-3" / "rank1.bin", manifest = run / "ckpt" / "manifest.yaml";
  std::string bytes = ReadAll(file), m = ReadAll(manifest);
  const uint32_t before = Crc32c(bytes);
  edit(&bytes);
  WriteAll(file, bytes);
  const size_t at = m.find(fmt::format("crc32c: {:08x}", before));
  REQUIRE(at != std::string::npos);
  WriteAll(manifest, m.replace(at, 16, fmt::format("crc32c: {:08x}", Crc32c(bytes))));
}

void CheckRefused(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  MESSAGE(s.message());
  CHECK(s.code() == code);
  for (const std::string& p : parts) CHECK(s.message().find(p) != std::string::npos);
}

TEST_CASE("a resumed checkpoint is verified: every damage is refused on every rank with one line") {
  Damaged d;
  const double t0 = MonotonicSeconds();
  CheckRefused(d.Resume([](const fs::path& r) {
    std::string b = ReadAll(r / "ckpt/iter-3/rank1.bin");
    b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x5a);
    WriteAll(r / "ckpt/iter-3/rank1.bin", b);
  }),
               StatusCode::kInvalidArgument, {"rank 1: ", "iter-3/rank1.bin: checksum mismatch"});
  CHECK(MonotonicSeconds() - t0 < 10);  // an agreement step, not a timeout (60 s)
  const float nan = std::nanf("");
  CheckRefused(d.Resume([&](const fs::path& r) {
    EditRank1FixingChecksum(r, [&](std::string* b) { std::memcpy(b->data() + 80 + 8, &nan, 4); });
  }),
               StatusCode::kInvalidArgument, {"rank 1: ", "rank1.bin: parameter value 2 of ", " is NaN"});
  const float inf = INFINITY;
  CheckRefused(d.Resume([&](const fs::path& r) {
    EditRank1FixingChecksum(r, [&](std::string* b) { std::memcpy(b->data() + b->size() - 4, &inf, 4); });
  }),
               StatusCode::kInvalidArgument, {"rank1.bin: optimizer state value", "is infinite"});
  const int64_t bad_iteration = 2, bad_count = -5;
  CheckRefused(d.Resume([&](const fs::path& r) {
    EditRank1FixingChecksum(r, [&](std::string* b) { std::memcpy(b->data() + 8, &bad_iteration, 8); });
  }),
               StatusCode::kInvalidArgument, {"rank1.bin: holds iteration 2, the manifest names 3"});
  CheckRefused(d.Resume([&](const fs::path& r) {
    EditRank1FixingChecksum(r, [&](std::string* b) { std::memcpy(b->data() + 40, &bad_count, 8); });
  }),
               StatusCode::kInvalidArgument, {"rank1.bin: header counts", "corrupt header"});
  CheckRefused(d.Resume([](const fs::path& r) { fs::resize_file(r / "ckpt/iter-3/rank0.bin", 100); }),
               StatusCode::kInvalidArgument, {"rank 0: ", "rank0.bin: 100 bytes, the manifest says", "truncated"});
  CheckRefused(d.Resume([](const fs::path& r) { fs::remove(r / "ckpt/manifest.yaml"); }), StatusCode::kNotFound,
               {"rank 0: ", "manifest.yaml: missing"});
  CheckRefused(d.Resume([](const fs::path& r) { fs::remove(r / "ckpt/iter-3/rank1.bin"); }), StatusCode::kNotFound,
               {"rank 1: ", "rank1.bin: missing"});
  CheckRefused(d.Resume([](const fs::path& r) { fs::remove(r / "metrics.csv"); }), StatusCode::kNotFound,
               {"rank 0: ", "metrics.csv: missing"});
  CheckRefused(d.Resume([](const fs::path& r) {
    std::string m = ReadAll(r / "metrics.csv");
    WriteAll(r / "metrics.csv", m.replace(m.find("\n2,") + 3, 1, "x"));
  }),
               StatusCode::kInvalidArgument, {"metrics.csv:3: not '2,<finite loss>,<seconds>'"});
}

TEST_CASE("a checkpoint of another model with the same parameter count, or of another layout, is refused") {
  Damaged d;
  ModelSpec other = d.model;  // same layers and sizes: only its identity differs
  LaunchPlan other_launch = d.L;
  other_launch.model_digest = "00000000000000ff";
  const auto nothing = [](const fs::path&) {};
  CheckRefused(d.Resume(nothing, &other, &other_launch), StatusCode::kInvalidArgument,
               {"manifest.yaml: a checkpoint of another model (model_digest"});
  LaunchPlan sgd = d.L;
  sgd.run.optimizer = "sgd";
  CheckRefused(d.Resume(nothing, nullptr, &sgd), StatusCode::kInvalidArgument,
               {"manifest.yaml: a checkpoint of another layout"});
  REQUIRE_OK(d.Resume(nothing));  // and the undamaged copy resumes
}

TEST_CASE(
    "rank files of two checkpoints are never mixed; a newer manifest removes the older directory only once it lands") {
  Damaged d;
  const std::string old_rank1 = ReadAll(fs::path(d.dir) / "ckpt/iter-3/rank1.bin");
  RunOptions o;
  o.run_dir = o.resume_from = d.dir;
  o.checkpoint_every = 3;
  std::vector<RunSummary> runs;
  REQUIRE_OK(RunOnThreads(d.L, d.model, o, &runs));
  CHECK(fs::exists(fs::path(d.dir) / "ckpt/iter-6/rank1.bin"));
  CHECK(!fs::exists(fs::path(d.dir) / "ckpt/iter-3"));
  CHECK(ReadAll(fs::path(d.dir) / "ckpt/manifest.yaml").find("iteration: 6\n") != std::string::npos);
  // rank 1 from the older checkpoint (a job killed between two ranks' renames, in the old layout)
  WriteAll(fs::path(d.dir) / "ckpt/iter-6/rank1.bin", old_rank1);
  o.checkpoint_every = 0;
  CheckRefused(RunOnThreads(d.L, d.model, o, &runs), StatusCode::kInvalidArgument,
               {"rank 1: ", "iter-6/rank1.bin: holds iteration 3, the manifest names 6"});
}

Action Act(ActionKind kind, int32_t stage, int32_t microbatch) {
  Action a;
  a.kind = kind;
  a.stage = stage;
  a.microbatch = microbatch;
  return a;
}

// GPipe on pp=2 written by hand: every forward, then every backward in reverse, then the step.
Status HandGpipe(const LaunchPlan& L, int64_t rank, int64_t, std::vector<Action>* out) {
  out->clear();
  const int32_t m = static_cast<int32_t>(L.num_microbatches),
                q = static_cast<int32_t>(L.ranks[static_cast<size_t>(rank)].stage);
  for (int32_t j = 0; j < m; ++j) {
    if (q == 1) out->push_back(Act(ActionKind::kRecvActivation, 1, j));
    out->push_back(Act(ActionKind::kForward, q, j));
    if (q == 0) out->push_back(Act(ActionKind::kSendActivation, 0, j));
  }
  for (int32_t j = m; j-- > 0;) {
    if (q == 0) out->push_back(Act(ActionKind::kRecvGrad, 0, j));
    out->push_back(Act(ActionKind::kBackwardInput, q, j));
    if (q == 1) out->push_back(Act(ActionKind::kSendGrad, 1, j));
  }
  out->push_back(Act(ActionKind::kOptimizerStep, -1, 0));
  return Status::OK();
}

TEST_CASE("the interpreter runs a hand-written program: its gradients equal one process's") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(Pipeline(Schedule::k1F1B), &model, &L));
  RunOptions o;
  o.program = HandGpipe;
  CheckAgainstOneProcess(L, model, o);
}

TEST_CASE("the interpreter refuses a program that does not fit its rank, naming the action") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(Pipeline(Schedule::k1F1B), &model, &L));
  std::vector<RunSummary> runs;
  RunOptions o;
  SUBCASE("a stage of another rank") {
    o.program = [](const LaunchPlan& launch, int64_t rank, int64_t it, std::vector<Action>* out) {
      PLANNER_RETURN_IF_ERROR(HandGpipe(launch, rank, it, out));
      if (rank == 0) out->insert(out->begin(), Act(ActionKind::kForward, 1, 0));
      return Status::OK();
    };
    const Status s = RunOnThreads(L, model, o, &runs);
    INFO(s.ToString());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("program action 0 (F1.0): stage 1 is not one of rank 0's") != std::string::npos);
  }
  SUBCASE("a send before the forward that computes it") {
    o.program = [](const LaunchPlan& launch, int64_t rank, int64_t it, std::vector<Action>* out) {
      PLANNER_RETURN_IF_ERROR(HandGpipe(launch, rank, it, out));
      if (rank == 0) std::swap((*out)[0], (*out)[1]);
      return Status::OK();
    };
    const Status s = RunOnThreads(L, model, o, &runs);
    INFO(s.ToString());
    CHECK(s.code() == StatusCode::kInternal);
    CHECK(s.message().find("program action 0 (SA0.0): send before the forward that computes it") != std::string::npos);
  }
  SUBCASE("a microbatch beyond the iteration's") {
    o.program = [](const LaunchPlan& launch, int64_t rank, int64_t it, std::vector<Action>* out) {
      PLANNER_RETURN_IF_ERROR(HandGpipe(launch, rank, it, out));
      (*out)[0].microbatch = static_cast<int32_t>(launch.num_microbatches);
      return Status::OK();
    };
    const Status s = RunOnThreads(L, model, o, &runs);
    INFO(s.ToString());
    CHECK(s.code() == StatusCode::kInvalidArgument);
    CHECK(s.message().find("names microbatch") != std::string::npos);
  }
}

TEST_CASE("a run whose directory cannot be written fails with an error naming the file") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(Pipeline(Schedule::k1F1B), &model, &L));
  RunOptions o;
  o.run_dir = (fs::path(RunDir("gone")) / "missing").string();  // never created
  std::vector<RunSummary> runs;
  const Status s = RunOnThreads(L, model, o, &runs);
  REQUIRE(!s.ok());
  INFO(s.ToString());
  CHECK(s.message().find(o.run_dir + "/trace.rank") != std::string::npos);
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

// Sequence and context parallelism (runtime/sequence_parallel.h): every parameter's gradient after
// one step equals one process's. tiny-gpt: s 64, h 128, 4 heads, ffn 512, V 512.
Case SeqCase(int64_t gpus, int64_t pp, int64_t tp, int64_t cp, bool sp) {
  Case c;
  c.gpus = gpus;
  c.pp = {pp};
  c.tp = {tp};
  c.cp = cp;
  c.sp = sp;
  c.schedules = {Schedule::k1F1B};
  return c;
}

// The part of the single-process gradient `full` that TP rank j holds of parameter `name` (the
// cuts of runtime/kernels/shards.h for the model's dimensions), or the whole when it is not cut.
std::vector<float> TpSlice(const std::string& name, const std::vector<float>& full, int64_t j, int64_t t,
                           const GptConfig& gpt) {
  const int64_t h = gpt.hidden, heads = gpt.heads, kv = gpt.kv_heads > 0 ? gpt.kv_heads : heads,
                ffn = gpt.ffn > 0 ? gpt.ffn : 4 * h, vocab = gpt.vocab;
  if (t == 1) return full;
  KernelOptions o;
  o.tp_size = t, o.tp_rank = j;
  auto ends = [&](const char* suffix) {
    return name.size() >= std::strlen(suffix) &&
           name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0;
  };
  auto cut = [&](const WeightSlice& w, int64_t cols) {
    std::vector<float> out;
    const std::vector<int64_t> rows = w.rows.empty() ? IndexRange(0, w.full_out) : w.rows;
    const int64_t width = static_cast<int64_t>(full.size()) / w.full_out;  // 1 for a bias
    for (int64_t r : rows)
      for (int64_t k = 0; k < (width == 1 ? 1 : cols); ++k)
        out.push_back(full[static_cast<size_t>(r * width + (width == 1 ? 0 : w.col0 + k))]);
    return out;
  };
  if (ends(".attn.qkv.weight") || ends(".attn.qkv.bias")) return cut(QkvShard(h, heads, kv, o), h);
  if (ends(".attn.out.weight")) return cut(AttnOutShard(h, heads, o), h / t);
  if (ends(".mlp.fc1.weight") || ends(".mlp.fc1.bias"))
    return cut(gpt.ffn_act == "swiglu" ? GatedFc1Shard(h, ffn, o) : Fc1Shard(h, ffn, o), h);
  if (ends(".mlp.fc2.weight")) return cut(Fc2Shard(h, ffn, o), ffn / t);
  if (ends(".word") || ends("lm_head.weight")) return cut(VocabShard(h, vocab, o), h);
  if (ends(".position") && j > 0) return std::vector<float>(full.size(), 0.0f);  // positions live on TP rank 0
  return full;
}

// Every parameter of every (tp, cp) rank of replica 0 against the matching slice of one process's;
// the worst relative L2 difference.
double CheckEveryParameter(const LaunchPlan& L, const ModelSpec& model) {
  std::vector<RunSummary> multi, single;
  REQUIRE_OK(RunOnThreads(L, model, {}, &multi));
  REQUIRE_OK(RunOnThreads(SingleProcessPlan(L, model), model, {}, &single));
  const auto want = ModelGradients(SingleProcessPlan(L, model), single);
  double worst = 0;
  size_t compared = 0;
  std::set<std::string> seen;
  for (size_t r = 0; r < multi.size(); ++r) {
    if (L.ranks[r].replica != 0) continue;
    for (const NamedGradient& g : multi[r].gradients) {
      INFO(g.name << " on rank " << r);
      auto it = want.find(g.name);
      REQUIRE(it != want.end());
      const std::vector<float> w = TpSlice(g.name, it->second, L.ranks[r].tp_rank, L.tp, model.gpt);
      REQUIRE(w.size() == g.values.size());
      double num = 0, den = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        num += (static_cast<double>(g.values[i]) - w[i]) * (static_cast<double>(g.values[i]) - w[i]);
        den += static_cast<double>(w[i]) * w[i];
      }
      const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
      CHECK(rel < 1e-5);
      worst = std::max(worst, rel);
      ++compared;
      seen.insert(g.name);
    }
  }
  CHECK(seen.size() == want.size());  // every parameter of the model is held by some rank
  MESSAGE(fmt::format("{}: {} parameter gradients on {} ranks, worst relative L2 difference {:.2e}", L.config, compared,
                      multi.size(), worst));
  // The losses agree too (each CP rank's share summed over the group).
  CHECK(std::abs(multi[0].loss[0] - single[0].loss[0]) < 1e-5);
  return worst;
}

TEST_CASE("tp=2 with sequence parallelism: every parameter's gradient equals one process's") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(SeqCase(2, 1, 2, 1, true), &model, &L));
  REQUIRE(L.tp == 2);
  REQUIRE(L.sequence_parallel);
  CheckEveryParameter(L, model);
}

TEST_CASE("cp=2 (ring attention): every parameter's gradient equals one process's") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(SeqCase(1, 1, 1, 2, false), &model, &L));
  REQUIRE(L.ranks.size() == 2);
  REQUIRE(L.cp_groups == std::vector<std::vector<int64_t>>{{0, 1}});
  REQUIRE(L.dp_groups == std::vector<std::vector<int64_t>>{{0, 1}});  // gradients summed over dp x cp
  CheckEveryParameter(L, model);
}

TEST_CASE("pp=2 x cp=2: every parameter's gradient equals one process's; ranks in Megatron's tp-cp-dp-pp order") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(SeqCase(2, 2, 1, 2, false), &model, &L));
  REQUIRE(L.ranks.size() == 4);
  for (const LaunchRank& r : L.ranks)
    CHECK(r.rank == r.stage * 2 + r.cp_rank);         // rank = cp_rank + cp (dp_rank + d stage), t = d = 1
  CHECK(L.ranks[0].next == std::vector<int64_t>{2});  // pipeline neighbours keep the cp rank
  CHECK(L.ranks[1].next == std::vector<int64_t>{3});
  CheckEveryParameter(L, model);
}

TEST_CASE("tp=2 x cp=2, with and without sequence parallelism: every parameter's gradient equals one process's") {
  for (bool sp : {true, false}) {
    ModelSpec model;
    LaunchPlan L;
    REQUIRE_OK(MakeLaunch(SeqCase(2, 1, 2, 2, sp), &model, &L));
    REQUIRE(L.ranks.size() == 4);
    for (const LaunchRank& r : L.ranks) CHECK(r.rank == r.cp_rank * 2 + r.tp_rank);  // tp fastest, then cp
    CheckEveryParameter(L, model);
  }
}

TEST_CASE(
    "pp=2 x tp=2 with SP under ZB-H1 (W split from B) and pp=2 interleaved x cp=2: every parameter's gradient equals "
    "one process's") {
  for (auto [schedule, tp, cp, sp] :
       {std::tuple{Schedule::kZbH1, 2, 1, true}, std::tuple{Schedule::kInterleaved, 1, 2, false}}) {
    ModelSpec model;
    LaunchPlan L;
    Case c = SeqCase(2 * tp, 2, tp, cp, sp);
    c.schedules = {schedule};
    if (tp * 2 > 2) c.cluster = "dgx-a100";  // local-cpu holds 2 devices
    REQUIRE_OK(MakeLaunch(c, &model, &L));
    REQUIRE(L.schedule == schedule);
    REQUIRE(L.ranks.size() == 4);
    CheckEveryParameter(L, model);
  }
}

TEST_CASE("dp=2 x cp=2: every parameter's gradient equals one process's; gradients summed over dp x cp") {
  ModelSpec model;
  LaunchPlan L;
  Case c = SeqCase(2, 1, 1, 2, false);
  c.cluster = "dgx-a100";
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  REQUIRE(L.dp == 2);
  REQUIRE(L.dp_groups == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}});    // replicas x cp ranks
  REQUIRE(L.cp_groups == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});  // per replica
  CheckEveryParameter(L, model);
}

// tiny-llama (configs/models/tiny-llama.yaml: 2 blocks, s 32, h 64, 4 query heads sharing 2 KV
// heads, SwiGLU ffn 96, RMSNorm, RoPE, no biases, untied embeddings): tp 2 (query heads and KV
// groups split), tp 2 + SP, cp 2, pp 2 x cp 2 and tp 2 x cp 2 + SP.
TEST_CASE(
    "tiny-llama (GQA, RoPE, SwiGLU, RMSNorm, no bias): tp2, tp2+SP, cp2, pp2 x cp2, tp2 x cp2 + SP give one process's "
    "gradients") {
  struct L4 {
    int64_t gpus, pp, tp, cp;
    bool sp;
  };
  for (const L4& x : {L4{2, 1, 2, 1, false}, L4{2, 1, 2, 1, true}, L4{1, 1, 1, 2, false}, L4{2, 2, 1, 2, false},
                      L4{2, 1, 2, 2, true}}) {
    INFO(fmt::format("pp {} tp {} cp {} sp {}", x.pp, x.tp, x.cp, x.sp));
    Case c = SeqCase(x.gpus, x.pp, x.tp, x.cp, x.sp);
    c.model = "tiny-llama";
    ModelSpec model;
    LaunchPlan L;
    REQUIRE_OK(MakeLaunch(c, &model, &L));
    REQUIRE(model.gpt.kv_heads == 2);
    REQUIRE(L.tp == x.tp);
    REQUIRE(L.pp == x.pp);
    REQUIRE(L.cp == x.cp);
    REQUIRE(L.sequence_parallel == x.sp);
    REQUIRE(L.ranks.size() == static_cast<size_t>(x.pp * x.tp * x.cp));
    CHECK(CheckEveryParameter(L, model) < 1e-5);
  }
}

TEST_CASE(
    "tiny-llama variants under tp2 x cp2 + SP and cp2: relu2 with biases and 4 KV heads; LayerNorm with 1 KV head "
    "(MQA, cp only)") {
  struct Variant {
    const char* act;
    bool bias;
    int64_t kv, tp;
    const char* norm;
  };
  for (const Variant& v : {Variant{"relu2", true, 4, 2, "rmsnorm"}, Variant{"swiglu", false, 1, 1, "layernorm"}}) {
    INFO(fmt::format("act {} bias {} kv_heads {} tp {} norm {}", v.act, v.bias, v.kv, v.tp, v.norm));
    Case c = SeqCase(v.tp, 1, v.tp, 2, v.tp > 1);
    c.model = "tiny-llama";
    c.edit = [&](ModelSpec* m) {
      m->gpt.ffn_act = v.act, m->gpt.bias = v.bias, m->gpt.kv_heads = v.kv, m->gpt.norm = v.norm;
      for (Layer& l : m->layers) {
        if (l.kind != LayerKind::kTransformerBlock) continue;
        l.attrs.strings["act"] = v.act, l.attrs.strings["norm"] = v.norm;
        l.attrs.bools["bias"] = v.bias;
        l.attrs.ints["kv_heads"] = v.kv;
      }
    };
    ModelSpec model;
    LaunchPlan L;
    REQUIRE_OK(MakeLaunch(c, &model, &L));
    REQUIRE(L.cp == 2);
    CHECK(CheckEveryParameter(L, model) < 1e-5);
  }
}

TEST_CASE("launch.yaml carries cp, sequence_parallel, cp ranks and the context-parallel groups") {
  ModelSpec model;
  LaunchPlan L, back;
  REQUIRE_OK(MakeLaunch(SeqCase(2, 2, 1, 2, false), &model, &L));
  REQUIRE_OK(ParseLaunchPlan("launch.yaml", LaunchPlanToYaml(L), &back));
  CHECK(back.cp == 2);
  CHECK(!back.sequence_parallel);
  CHECK(back.cp_groups == L.cp_groups);
  for (size_t i = 0; i < L.ranks.size(); ++i) CHECK(back.ranks[i].cp_rank == L.ranks[i].cp_rank);
  std::string bad = LaunchPlanToYaml(L);
  bad.replace(bad.find("cp_rank: 1"), 10, "cp_rank: 2");
  Status s = ParseLaunchPlan("launch.yaml", bad, &back);
  CHECK(!s.ok());
  CHECK(s.message().find("cp_rank 2 >= cp 2") != std::string::npos);
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

// The run report of an SP plan and of a CP plan: the heading names the parallelism, and the
// iteration row gives the measured median against the plan's prediction.
void CheckReport(const Case& c, const std::string& heading,
                 const std::vector<std::tuple<std::string, int64_t, int64_t>>& rows) {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(c, &model, &L));
  REQUIRE(L.predicted_iteration_s > 0);
  RunOptions opt;
  opt.run_dir = RunDir("report");
  std::vector<RunSummary> runs;
  REQUIRE_OK(RunOnThreads(L, model, opt, &runs));
  std::ifstream in(fs::path(opt.run_dir) / "report.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string rep = ss.str();
  INFO(rep);
  CHECK(rep.find(heading) != std::string::npos);
  const std::string row = fmt::format("| iteration | {} | {} |", FormatSeconds(runs[0].median_iteration_s),
                                      FormatSeconds(L.predicted_iteration_s));
  CHECK(rep.find(row) != std::string::npos);
  CHECK(runs[0].median_iteration_s > 0);
  CHECK(runs[0].loss.back() < runs[0].loss.front());  // 3 steps of Adam at 1e-3 on the teacher's data
  // The collectives inside layers, per kind and size: (row label, bytes per microbatch sample, calls per microbatch).
  const int64_t b = L.microbatch_size, m = L.num_microbatches, measured = c.iterations - L.run.warmup_iterations;
  for (const auto& [label, bytes, calls] : rows) {
    const std::string want =
        fmt::format("| {} | {} | {} |", label, FormatBytes(static_cast<double>(b * bytes)), calls * m * measured);
    INFO(want);
    CHECK(rep.find(want) != std::string::npos);
  }
}

TEST_CASE("the run report compares an SP plan and a CP plan with their predictions") {
  Case sp = SeqCase(2, 1, 2, 1, true), cp = SeqCase(1, 1, 1, 2, false);
  sp.iterations = cp.iterations = 3;
  // tiny-gpt (4 blocks, s 64, h 128). SP: all-gathers of [b, s, h] entering attention, the MLP and
  // lm_head in forward, and in backward leaving them and the embedding: 2 x 4 + 1 each way; as many
  // reduce-scatters. CP 2: ring shifts of the 32 local tokens' K and V (2 x 128 floats each) once
  // per block in forward, of K, V, dK and dV twice per block in backward; the loss's all-reduce.
  const int64_t act = 64 * 128 * 4;
  CheckReport(sp, "tp-pp-dp 2-1-1, sequence parallel,",
              {{"sp all-gather stage 0 (2 ranks)", act, 18}, {"sp reduce-scatter stage 0 (2 ranks)", act, 18}});
  CheckReport(cp, "tp-pp-dp 1-1-1, cp 2 (ring attention),",
              {{"cp ring shift stage 0 (2 ranks)", 32 * 256 * 4, 4},
               {"cp ring shift stage 0 (2 ranks)", 32 * 512 * 4, 8},
               {"cp all-reduce stage 0 (2 ranks)", 4, 1}});
}

}  // namespace
}  // namespace planner

namespace planner {
namespace {

TEST_CASE(
    "a cp that does not split the sequence into 2 cp chunks is refused before any communication, naming launch.yaml") {
  ModelSpec model;
  LaunchPlan L;
  REQUIRE_OK(MakeLaunch(SeqCase(1, 1, 1, 3, false), &model, &L));  // tiny-gpt: s = 64, 2 cp = 6
  std::vector<RunSummary> runs;
  Status s = RunOnThreads(L, model, {}, &runs);
  CHECK(!s.ok());
  CHECK(s.message().find(
            "tiny-gpt/launch.yaml: field 'cp': 3 does not split the sequence of 64 tokens into 2 x cp = 6 chunks") !=
        std::string::npos);
}

}  // namespace
}  // namespace planner
