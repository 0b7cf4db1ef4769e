#!/usr/bin/env bash
# Data-parallel gradient sync of the three architectures on CPU ranks (docs/performance.md,
# "Data-parallel communication architectures"): the same dp 2 plan of tiny-gpt (local-cpu
# cluster, pp 1, tp 1) run with dp_comm allreduce-hier, ps (1 server) and byteps (1 server),
# codegen from plan.yaml with its dp_comm / dp_servers edited; prints per architecture the
# measured DP seconds per iteration (report.md: median after warm-up of the fastest worker)
# against the prediction launch.yaml carries (the plan's predicted_dp_allreduce_seconds of the
# chosen architecture; a plan solved before the cost model of every architecture carries the
# all-reduce's for all three) and the bytes per sync of a worker and a server.
#   bash bench/run_dp_comm_bench.sh [ITERATIONS] [PLANS_DIR]   (default 12 iterations, 2 warm-up)
#   PLANS_DIR: allreduce-hier.plan.yaml, ps.plan.yaml, byteps.plan.yaml, each solved for its
#   architecture (planner solve --dp-comm ...), used as they are, so that each row's prediction is
#   its own architecture's; a row without its file edits the solved dp 2 plan as above.
set -eu
cd "$(dirname "$0")/.."
R=$PWD
P=$R/build/planner/planner
IT=${1:-12}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
PLANS=$(cd "${2:-.}" && pwd)
$P -q solve --gpus 2 --model $R/configs/models/tiny-gpt.yaml --cluster $R/configs/clusters/local-cpu.yaml --pp 1 --tp 1 -o base.plan.yaml >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(git -C $R rev-parse --short HEAD); $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-16s %-8s %-22s %-22s %-8s %-24s %-24s\n' dp_comm servers "measured (s/iteration)" "predicted (s/iteration)" ratio "worker B/sync (sent)" "server B/sync (received)"
for spec in allreduce-hier:0 ps:1 byteps:1; do
  comm=${spec%:*}; k=${spec#*:}
  if [ $# -ge 2 ] && [ -f "$PLANS/$comm.plan.yaml" ]; then cp "$PLANS/$comm.plan.yaml" $comm.plan.yaml
    k=$(sed -n 's/^dp_servers: //p' $comm.plan.yaml); k=${k:-0}
  else
    sed -e "s/^dp_comm: .*/dp_comm: $comm/" -e '/^dp_servers:/d' base.plan.yaml > $comm.plan.yaml
    [ "$k" -gt 0 ] && echo "dp_servers: $k" >> $comm.plan.yaml
  fi
  $P -q codegen $comm.plan.yaml -o $comm --iterations $IT >/dev/null
  timeout 600 bash $comm/run.sh --run-id b >/dev/null 2>$comm.err || { echo "$comm: run failed"; tail -3 $comm.err; continue; }
  python3 - $comm/runs/b/report.md $comm $k <<'PY'
import re, sys
rep = open(sys.argv[1]).read()
row = re.search(r'\| 0 \| (\d+) \| (\d+) \| ([0-9.]+) \| ([0-9.na/]+) \| ([0-9.na/]+) \|', rep.split('Data-parallel gradient sync per iteration')[1])
w = re.search(r'\| 0 \| worker \(stage 0\) \| \d+ \| (\d+) \| (\d+) \|', rep)
s = re.search(r'\| \d+ \| server \| \d+ \| (\d+) \| (\d+) \|', rep)
print(f"{sys.argv[2]:<16} {sys.argv[3]:<8} {row.group(3):<22} {row.group(4):<22} {row.group(5):<8} {w.group(1) if w else 'n/a':<24} {s.group(2) if s else 'n/a':<24}")
PY
done
