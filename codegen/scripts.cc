// run.sh (mpirun) and slurm.sbatch (srun) of a launch directory.
#include "codegen/exports.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>


namespace planner {
namespace codegen_internal {

// The summation servers' line of a script's header ("" without servers).
std::string ServersNote(const LaunchPlan& L) {
  if (L.servers.empty()) return "";
  const std::string which = L.servers.size() == 1 ? fmt::format("rank {}", L.servers.front()) : fmt::format("ranks {}-{}", L.servers.front(), L.servers.back());
  return fmt::format("# plus {} summation server rank{} of dp_comm {} ({}: no stage; they sum the workers' gradients)\n", L.servers.size(),
                     L.servers.size() == 1 ? "" : "s", DpCommName(L.dp_comm), which);
}

// run.sh: mpirun, local ranks or a hostfile; -np counts the workers and the summation servers.
void AddRunScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files) {
  const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  files->emplace_back("run.sh", fmt::format(R"SH(#!/usr/bin/env bash
# {} on {} ranks ({} {}, tp-pp-dp {}, replication {}). Written by planner codegen.
{})SH", model.name, L.ranks.size(), ScheduleName(L.schedule), L.interleave > 1 ? fmt::format("v={}", L.interleave) : "",
                                           fmt::format("{}-{}-{}", L.tp, L.pp, L.dp), L.config, ServersNote(L)) + fmt::format(R"SH(#   bash run.sh                 local ranks on this machine
#   bash run.sh HOSTFILE [...]  {} ranks per node from an Open MPI hostfile; extra arguments go to planner run
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
                                           L.gpus_per_node, o.planner_path, L.gpus_per_node, n, n));
}

// slurm.sbatch: one task per device, srun starting planner run.
void AddSlurmScript(const ModelSpec& model, const LaunchPlan& L, const CodegenOptions& o, Files* files) {
  // Summation servers are tasks too: the job's task count is the workers' plus theirs.
  const int64_t n = static_cast<int64_t>(L.ranks.size() + L.servers.size());
  const int64_t nodes = (n + L.gpus_per_node - 1) / L.gpus_per_node;
  const int64_t per_node = std::min(n, L.gpus_per_node);
  files->emplace_back("slurm.sbatch", fmt::format(R"SH(#!/bin/bash
# {} on {} ranks: one task per {}. Submit with: sbatch slurm.sbatch
{}#SBATCH --job-name=planner-{}
#SBATCH --nodes={}
#SBATCH --ntasks-per-node={}
{}#SBATCH --cpus-per-task={}
{}#SBATCH --output=planner-%j.out
set -eu
DIR=${{SLURM_SUBMIT_DIR:-$(pwd)}}
srun --kill-on-bad-exit=1 {} run "$DIR"
)SH",
                                                  model.name, L.ranks.size(), L.device == "cuda" ? "GPU" : "CPU core", ServersNote(L), model.name, nodes, per_node,
                                                  L.servers.empty() ? "" : fmt::format("#SBATCH --ntasks={}\n", n), L.run.threads, L.device == "cuda" ? fmt::format("#SBATCH --gpus-per-node={}\n", per_node) : "",
                                                  o.planner_path));
}

}  // namespace codegen_internal
}  // namespace planner
