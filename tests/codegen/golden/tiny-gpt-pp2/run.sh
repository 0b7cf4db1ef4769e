#!/usr/bin/env bash
# tiny-gpt on 2 ranks (1f1b , tp-pp-dp 1-2-1, replication 1-1). Written by planner codegen.
#   bash run.sh                 local ranks on this machine
#   bash run.sh HOSTFILE [...]  2 ranks per node from an Open MPI hostfile; extra arguments go to planner run
# HOSTFILE: one line per node, "HOST slots=2"; rank i runs on its node i / 2 (--map-by ppr:2:node, ranked by slot),
# launch.yaml's placement; -np 2 counts every rank.
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
PLANNER=${PLANNER:-planner}
ROOT=""
if [ "$(id -u)" = 0 ]; then ROOT="--allow-run-as-root"; fi
if [ $# -ge 1 ] && [ -f "$1" ]; then
  HOSTFILE=$1; shift
  exec mpirun $ROOT --hostfile "$HOSTFILE" --map-by ppr:2:node -np 2 "$PLANNER" run "$DIR" "$@"
fi
exec mpirun $ROOT --oversubscribe -np 2 "$PLANNER" run "$DIR" "$@"
