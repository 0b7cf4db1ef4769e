#!/usr/bin/env bash
# vgg16 on 16 ranks (pipedream , tp-pp-dp 1-3-1, replication 14-1-1). Written by planner codegen.
#   bash run.sh                 local ranks on this machine
#   bash run.sh HOSTFILE [...]  4 ranks per node from an Open MPI hostfile; extra arguments go to planner run
# HOSTFILE: one line per node, "HOST slots=4"; rank i runs on its node i / 4 (--map-by ppr:4:node, ranked by slot),
# launch.yaml's placement; -np 16 counts every rank.
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
PLANNER=${PLANNER:-planner}
ROOT=""
if [ "$(id -u)" = 0 ]; then ROOT="--allow-run-as-root"; fi
if [ $# -ge 1 ] && [ -f "$1" ]; then
  HOSTFILE=$1; shift
  exec mpirun $ROOT --hostfile "$HOSTFILE" --map-by ppr:4:node -np 16 "$PLANNER" run "$DIR" "$@"
fi
exec mpirun $ROOT --oversubscribe -np 16 "$PLANNER" run "$DIR" "$@"
