#!/usr/bin/env bash
# llama3-70b on 64 ranks (zb-h1 , tp-pp-dp 4-2-4, replication 4-4). Written by planner codegen.
#   bash run.sh                 local ranks on this machine
#   bash run.sh HOSTFILE [...]  8 ranks per node from an Open MPI hostfile; extra arguments go to planner run
# HOSTFILE: one line per node, "HOST slots=8"; rank i runs on its node i / 8 (--map-by ppr:8:node, ranked by slot),
# launch.yaml's placement; -np 64 counts every rank.
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
PLANNER=${PLANNER:-/work/main/build/planner/planner}
ROOT=""
if [ "$(id -u)" = 0 ]; then ROOT="--allow-run-as-root"; fi
if [ $# -ge 1 ] && [ -f "$1" ]; then
  HOSTFILE=$1; shift
  exec mpirun $ROOT --hostfile "$HOSTFILE" --map-by ppr:8:node -np 64 "$PLANNER" run "$DIR" "$@"
fi
exec mpirun $ROOT --oversubscribe -np 64 "$PLANNER" run "$DIR" "$@"
