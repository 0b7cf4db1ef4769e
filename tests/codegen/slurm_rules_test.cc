// slurm.sbatch's self-checks (codegen/scripts.cc, CheckSlurmLayout; docs/exports.md "Slurm and
// mpirun"): the layout PlanSlurmLayout makes passes every rule for any rank count (brute force),
// and one case per rule breaks exactly that rule and gets its reason.
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "codegen/exports.h"
#include "tests/test_util.h"

namespace planner {
namespace {

using codegen_internal::CheckSlurmLayout;
using codegen_internal::PlanSlurmLayout;
using codegen_internal::SlurmLayout;

// n workers then s summation servers, rank i on node i / gpn (launch.yaml's placement).
LaunchPlan Ranks(int64_t n, int64_t s, int64_t gpn, Device device = Device::kCpu, int64_t threads = 1) {
  LaunchPlan L;
  L.gpus_per_node = gpn;
  L.device = device;
  L.run.threads = threads;
  for (int64_t i = 0; i < n; ++i) {
    LaunchRank r;
    r.rank = i;
    r.node = i / gpn;
    r.local_device = i % gpn;
    L.ranks.push_back(r);
  }
  for (int64_t i = 0; i < s; ++i) L.servers.push_back(n + i);
  return L;
}

SlurmLayout Layout(const LaunchPlan& L, const std::string& mpi = "pmix") {
  CodegenOptions o;
  o.slurm_mpi = mpi;
  return PlanSlurmLayout(L, o);
}

// Expects the check to name `text`.
void Broken(const LaunchPlan& L, const SlurmLayout& s, const std::string& text) {
  const std::string why = CheckSlurmLayout(L, s);
  INFO(why);
  CHECK(why.find(text) != std::string::npos);
}

TEST_CASE("slurm layout: 20 ranks at 8 per node are 3 nodes of 8, 8 and 4 tasks, 20 in all") {
  const LaunchPlan L = Ranks(20, 0, 8, Device::kCuda, 2);
  const SlurmLayout s = Layout(L);
  CHECK(s.tasks == 20);
  CHECK(s.nodes == 3);
  CHECK(s.tasks_per_node == 8);
  CHECK(s.node_tasks == std::vector<int64_t>{8, 8, 4});
  CHECK(s.cpus_per_task == 2);
  CHECK(s.gpus_per_node == 8);
  CHECK(CheckSlurmLayout(L, s).empty());
}

TEST_CASE("slurm layout: every rank count 1..40 with 0..3 servers and 1..9 per node passes every rule (closed forms)") {
  for (int64_t n = 1; n <= 40; ++n)
    for (int64_t srv = 0; srv <= 3; ++srv)
      for (int64_t gpn = 1; gpn <= 9; ++gpn) {
        const LaunchPlan L = Ranks(n, srv, gpn, gpn % 2 ? Device::kCpu : Device::kCuda);
        const SlurmLayout s = Layout(L);
        const int64_t total = n + srv;
        INFO(n, " ", srv, " ", gpn);
        CHECK(CheckSlurmLayout(L, s).empty());
        CHECK(s.tasks == total);
        CHECK(s.nodes == (total + gpn - 1) / gpn);
        CHECK(s.nodes * s.tasks_per_node >= total);
        CHECK((s.nodes - 1) * s.tasks_per_node < total);
        int64_t sum = 0;
        for (int64_t t : s.node_tasks) sum += t;
        CHECK(sum == total);
      }
}

TEST_CASE("slurm rule: the task count is the plan's ranks, workers and summation servers") {
  const LaunchPlan L = Ranks(6, 2, 4);
  SlurmLayout s = Layout(L);
  s.tasks = 6;
  Broken(L, s, "--ntasks 6 is not the plan's 8 ranks");
}

TEST_CASE("slurm rule: nodes x tasks per node hold every task") {
  const LaunchPlan L = Ranks(20, 0, 8);
  SlurmLayout s = Layout(L);
  s.nodes = 2;
  Broken(L, s, "--nodes 2 x --ntasks-per-node 8 holds fewer than 20 tasks");
}

TEST_CASE("slurm rule: no node without tasks ((nodes - 1) x per node < tasks)") {
  const LaunchPlan L = Ranks(16, 0, 8);
  SlurmLayout s = Layout(L);
  s.nodes = 3;
  Broken(L, s, "--nodes 3 leaves a node without tasks");
}

TEST_CASE("slurm rule: a node runs at most its devices' worth of tasks") {
  const LaunchPlan L = Ranks(20, 0, 8);
  SlurmLayout s = Layout(L);
  s.tasks_per_node = 10;
  s.nodes = 2;
  Broken(L, s, "--ntasks-per-node 10 exceeds the 8 devices of a node");
}

TEST_CASE("slurm rule: the host list names every node of the job") {
  const LaunchPlan L = Ranks(20, 0, 8);
  SlurmLayout s = Layout(L);
  s.node_tasks = {8, 12};
  Broken(L, s, "the host list names 2 nodes, not --nodes 3");
}

TEST_CASE("slurm rule: no node gets more than --ntasks-per-node") {
  const LaunchPlan L = Ranks(20, 0, 8);
  SlurmLayout s = Layout(L);
  s.node_tasks = {9, 7, 4};
  Broken(L, s, "node 0 gets 9 tasks, over --ntasks-per-node 8");
}

TEST_CASE("slurm rule: rank i runs on launch.yaml's node of rank i (Slurm's balanced block layout 7-7-6 breaks it)") {
  const LaunchPlan L = Ranks(20, 0, 8);
  SlurmLayout s = Layout(L);
  s.node_tasks = {7, 7, 6};
  Broken(L, s, "rank 7 would run on node 1, but launch.yaml places it on node 0");
  // A plan whose ranks sit elsewhere than i / gpus_per_node is caught too (servers follow i / gpn).
  LaunchPlan moved = Ranks(4, 0, 2);
  moved.ranks[1].node = 1;
  moved.ranks[2].node = 0;
  Broken(moved, Layout(moved), "rank 1 would run on node 0, but launch.yaml places it on node 1");
}

TEST_CASE("slurm rule: the host list holds exactly the tasks") {
  const LaunchPlan L = Ranks(20, 0, 8);
  SlurmLayout s = Layout(L);
  s.node_tasks = {8, 8, 3};
  Broken(L, s, "the host list holds 19 of the 20 tasks");
}

TEST_CASE("slurm rule: at least one CPU per task") {
  const LaunchPlan L = Ranks(2, 0, 2);
  SlurmLayout s = Layout(L);
  s.cpus_per_task = 0;
  Broken(L, s, "--cpus-per-task 0 is below 1");
}

TEST_CASE("slurm rule: cuda ranks get a GPU per task of a node; CPU ranks none") {
  const LaunchPlan L = Ranks(16, 0, 8, Device::kCuda);
  SlurmLayout s = Layout(L);
  s.gpus_per_node = 4;
  Broken(L, s, "--gpus-per-node 4 is fewer than the 8 tasks of a node");
  const LaunchPlan C = Ranks(16, 0, 8, Device::kCpu);
  SlurmLayout c = Layout(C);
  c.gpus_per_node = 8;
  Broken(C, c, "--gpus-per-node 8 for CPU ranks");
}

TEST_CASE("slurm rule: srun's MPI plugin is one srun knows") {
  const LaunchPlan L = Ranks(2, 0, 2);
  Broken(L, Layout(L, "openmpi"), "--mpi=openmpi is not an srun MPI plugin");
  for (const char* ok : {"pmix", "pmix_v4", "pmi2", "none", "cray_shasta"}) CHECK(ValidSlurmMpi(ok));
  for (const char* bad : {"pmix_v", "pmix_4", "pmi3", "", "PMIX"}) CHECK_FALSE(ValidSlurmMpi(bad));
}

TEST_CASE("slurm.sbatch: a layout that breaks a rule is refused in slurm.sbatch.refused and a note") {
  // One node's devices exceed the tasks only when gpus_per_node is 0 or below; the writer clamps it,
  // so feed the writer a plan whose ranks sit off i / gpus_per_node.
  LaunchPlan L = Ranks(4, 0, 2);
  L.ranks[1].node = 1;
  L.ranks[2].node = 0;
  ModelSpec m;
  m.name = "m";
  codegen_internal::Files files;
  std::vector<std::string> notes;
  codegen_internal::AddSlurmScript(m, L, CodegenOptions{}, &files, &notes);
  REQUIRE(files.size() == 1);
  CHECK(files[0].first == "slurm.sbatch.refused");
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "slurm.sbatch: not written: rank 1 would run on node 0, but launch.yaml places it on node 1");
}

}  // namespace
}  // namespace planner
