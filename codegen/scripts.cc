// run.sh (mpirun) and slurm.sbatch (srun) of a launch directory.
#include "codegen/exports.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace planner {

bool ValidSlurmMpi(const std::string& name) {
  if (name == "none" || name == "pmi2" || name == "pmix" || name == "cray_shasta") return true;
  return name.size() > 6 && name.rfind("pmix_v", 0) == 0 &&
         name.find_first_not_of("0123456789", 6) == std::string::npos;
}

namespace codegen_internal {

// The summation servers' line of a script's header ("" without servers).
std::string ServersNote(const LaunchPlan& L) {
  if (L.servers.empty()) return "";
  const std::string which = L.servers.size() == 1 ? fmt::format("rank {}", L.servers.front())
                                                  : fmt::format("ranks {}-{}", L.servers.front(), L.servers.back());
  return fmt::format(
      "# plus {} summation server rank{} of dp_comm {} ({}: no stage; they sum the workers' gradients)\n",
      L.servers.size(), L.servers.size() == 1 ? "" : "s", DpCommName(L.dp_comm), which);
}

// run.sh: mpirun, local ranks or a hostfile; -np counts the workers and the summation servers.
void AddRunScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files) {
  const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  files->emplace_back(
      "run.sh",
      fmt::format(R"SH(#!/usr/bin/env bash
# {} on {} ranks ({} {}, tp-pp-dp {}, replication {}). Written by planner codegen.
{})SH",
                  model.name, L.ranks.size(), ScheduleName(L.schedule),
                  L.interleave > 1 ? fmt::format("v={}", L.interleave) : "", fmt::format("{}-{}-{}", L.tp, L.pp, L.dp),
                  L.config, ServersNote(L)) +
          fmt::format(R"SH(#   bash run.sh                 local ranks on this machine
#   bash run.sh HOSTFILE [...]  {} ranks per node from an Open MPI hostfile; extra arguments go to planner run
# HOSTFILE: one line per node, "HOST slots={}"; rank i runs on its node i / {} (--map-by ppr:{}:node, ranked by slot),
# launch.yaml's placement; -np {} counts every rank{}.
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
PLANNER=${{PLANNER:-{}}}
ROOT=""
if [ "$(id -u)" = 0 ]; then ROOT="--allow-run-as-root"; fi
if [ $# -ge 1 ] && [ -f "$1" ]; then
  HOSTFILE=$1; shift
  exec mpirun $ROOT --hostfile "$HOSTFILE" --map-by ppr:{}:node -np {} "$PLANNER" run "$DIR" "$@"
fi
exec mpirun $ROOT --oversubscribe -np {} "$PLANNER" run "$DIR" "$@"
)SH",
                      L.gpus_per_node, L.gpus_per_node, L.gpus_per_node, L.gpus_per_node, n,
                      L.servers.empty() ? ""
                                        : fmt::format(" ({} workers and {} summation server{})", L.ranks.size(),
                                                      L.servers.size(), L.servers.size() == 1 ? "" : "s"),
                      o.planner_path, L.gpus_per_node, n, n));
}

SlurmLayout PlanSlurmLayout(const LaunchPlan& L, const CodegenOptions& o) {
  SlurmLayout s;
  // Summation servers are tasks too: the job's task count is the workers' plus theirs.
  s.tasks = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  s.tasks_per_node = std::min(s.tasks, L.gpus_per_node);
  s.nodes = (s.tasks + L.gpus_per_node - 1) / L.gpus_per_node;
  for (int64_t k = 0; k < s.nodes; ++k)
    s.node_tasks.push_back(std::min(L.gpus_per_node, s.tasks - k * L.gpus_per_node));
  s.cpus_per_task = L.run.threads;
  s.gpus_per_node = L.device == Device::kCuda ? s.tasks_per_node : 0;
  s.mpi = o.slurm_mpi;
  return s;
}

std::string CheckSlurmLayout(const LaunchPlan& L, const SlurmLayout& s) {
  const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  if (s.tasks != n)
    return fmt::format(
        "--ntasks {} is not the plan's {} ranks (workers and summation servers): planner run stops on the count",
        s.tasks, n);
  if (s.nodes < 1 || s.tasks_per_node < 1 || s.nodes * s.tasks_per_node < n) {
    return fmt::format("--nodes {} x --ntasks-per-node {} holds fewer than {} tasks", s.nodes, s.tasks_per_node, n);
  }
  if ((s.nodes - 1) * s.tasks_per_node >= n)
    return fmt::format("--nodes {} leaves a node without tasks ({} tasks, {} per node)", s.nodes, n, s.tasks_per_node);
  if (s.tasks_per_node > L.gpus_per_node)
    return fmt::format("--ntasks-per-node {} exceeds the {} devices of a node", s.tasks_per_node, L.gpus_per_node);
  if (static_cast<int64_t>(s.node_tasks.size()) != s.nodes)
    return fmt::format("the host list names {} nodes, not --nodes {}", s.node_tasks.size(), s.nodes);
  // Task i goes to the node of the host list's i-th line: it must be launch.yaml's node of rank i.
  int64_t i = 0;
  for (int64_t k = 0; k < s.nodes; ++k) {
    if (s.node_tasks[static_cast<size_t>(k)] > s.tasks_per_node)
      return fmt::format("node {} gets {} tasks, over --ntasks-per-node {}", k, s.node_tasks[static_cast<size_t>(k)],
                         s.tasks_per_node);
    for (int64_t j = 0; j < s.node_tasks[static_cast<size_t>(k)]; ++j, ++i) {
      if (i >= n) return fmt::format("the host list holds more than the {} tasks", n);
      const int64_t want =
          i < static_cast<int64_t>(L.ranks.size()) ? L.ranks[static_cast<size_t>(i)].node : i / L.gpus_per_node;
      if (want != k)
        return fmt::format("rank {} would run on node {}, but launch.yaml places it on node {}", i, k, want);
    }
  }
  if (i != n) return fmt::format("the host list holds {} of the {} tasks", i, n);
  if (s.cpus_per_task < 1) return fmt::format("--cpus-per-task {} is below 1", s.cpus_per_task);
  if (L.device == Device::kCuda && s.gpus_per_node < s.tasks_per_node)
    return fmt::format("--gpus-per-node {} is fewer than the {} tasks of a node", s.gpus_per_node, s.tasks_per_node);
  if (L.device != Device::kCuda && s.gpus_per_node != 0)
    return fmt::format("--gpus-per-node {} for CPU ranks", s.gpus_per_node);
  if (!ValidSlurmMpi(s.mpi))
    return fmt::format("--mpi={} is not an srun MPI plugin (pmix, pmix_vN, pmi2, none, cray_shasta)", s.mpi);
  return "";
}

// slurm.sbatch: one task per device; srun lays task i on node i / gpus_per_node (launch.yaml's
// placement) from a host list in rank order (--distribution=arbitrary) and starts planner run in
// the launch directory, named by absolute path. A layout that breaks a rule is refused.
void AddSlurmScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files,
                    std::vector<std::string>* notes) {
  const SlurmLayout s = PlanSlurmLayout(L, o);
  const std::string bad = CheckSlurmLayout(L, s);
  if (!bad.empty()) {
    files->emplace_back("slurm.sbatch.refused", bad + "\n");
    notes->push_back("slurm.sbatch: not written: " + bad);
    return;
  }
  std::string dir = "${SLURM_SUBMIT_DIR:-$(pwd)}";
  if (!o.launch_dir.empty()) {
    dir = "'";
    for (char c : o.launch_dir) dir += c == '\'' ? std::string("'\\''") : std::string(1, c);
    dir += "'";
  }
  files->emplace_back(
      "slurm.sbatch",
      fmt::format(R"SH(#!/bin/bash
# {} on {} ranks: one task per {}. Written by planner codegen.
{}# Submit from any folder: sbatch {} [planner run arguments]
#   PLANNER_LAUNCH_DIR=DIR  another copy of this launch directory (default: where codegen wrote it)
#   PLANNER=PATH            the planner executable; PLANNER_SLURM_MPI=NAME  srun's MPI plugin (default {})
# {} tasks on {} node{}: rank i on node i / {} (launch.yaml's placement; tasks per node: {}).
#SBATCH --job-name=planner-{}
#SBATCH --nodes={}
#SBATCH --ntasks={}
#SBATCH --ntasks-per-node={}
#SBATCH --cpus-per-task={}
{}#SBATCH --output=planner-%j.out
set -eu
DIR=${{PLANNER_LAUNCH_DIR:-{}}}
PLANNER=${{PLANNER:-{}}}
MPI=${{PLANNER_SLURM_MPI:-{}}}
# srun places the tasks in the order of this host list: node k of the allocation once per task it runs.
TASKS_PER_NODE=({})
HOSTLIST=$(mktemp)
trap 'rm -f "$HOSTLIST"' EXIT
k=0
for h in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  [ "$k" -lt ${{#TASKS_PER_NODE[@]}} ] || break
  for ((i = 0; i < TASKS_PER_NODE[k]; i++)); do echo "$h"; done
  k=$((k + 1))
done > "$HOSTLIST"
export SLURM_HOSTFILE=$HOSTLIST
srun --mpi="$MPI" --ntasks={} --distribution=arbitrary --cpus-per-task={} --kill-on-bad-exit=1 "$PLANNER" run "$DIR" "$@"
)SH",
                  model.name, L.ranks.size(), L.device == Device::kCuda ? "GPU" : "CPU core", ServersNote(L),
                  o.launch_dir.empty() ? "slurm.sbatch" : o.launch_dir + "/slurm.sbatch", o.slurm_mpi, s.tasks, s.nodes,
                  s.nodes == 1 ? "" : "s", L.gpus_per_node, Join(s.node_tasks, " "), model.name, s.nodes, s.tasks,
                  s.tasks_per_node, s.cpus_per_task,
                  s.gpus_per_node > 0 ? fmt::format("#SBATCH --gpus-per-node={}\n", s.gpus_per_node) : "", dir,
                  o.planner_path, o.slurm_mpi, Join(s.node_tasks, " "), s.tasks, s.cpus_per_task));
}

}  // namespace codegen_internal
}  // namespace planner
