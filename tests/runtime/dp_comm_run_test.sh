#!/usr/bin/env bash
# Parameter server and BytePS under mpirun (docs/runtime.md, "Parameter server and BytePS"):
# planner solve, plan.yaml's dp_comm / dp_servers edited, codegen, run.sh (mpirun -np workers +
# servers); every gradient file of the first step equals the allreduce-hier run's (max abs
# difference <= 1e-6 of the largest gradient: the fixed-order sums differ from MPI_Allreduce's by
# float rounding only), the servers exit 0 with the workers, the report names the architecture
# and gives every process's bytes per sync. 2-3 ranks + 1-2 servers, mlp-small, 1-3 iterations;
# ps co-located (ps_placement: colocated, no server ranks) on 4 ranks.
set -u
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"

# maxdiff DIR_A DIR_B: every gradient file equal within 1e-6 of the largest value.
maxdiff() {
  python3 - "$1" "$2" <<'PY'
import array, os, sys
a_dir, b_dir = sys.argv[1], sys.argv[2]
names = sorted(os.listdir(a_dir))
if not names or sorted(os.listdir(b_dir)) != names: sys.exit("gradient files differ")
diff = scale = 0.0
for n in names:
    a, b = array.array('f'), array.array('f')
    a.frombytes(open(os.path.join(a_dir, n), 'rb').read())
    b.frombytes(open(os.path.join(b_dir, n), 'rb').read())
    if len(a) != len(b): sys.exit(f"{n}: {len(a)} vs {len(b)} values")
    diff = max([diff] + [abs(x - y) for x, y in zip(a, b)])
    scale = max([scale] + [abs(y) for y in b])
print(f"{len(names)} gradients, max abs difference {diff:.3g} (largest {scale:.3g})")
sys.exit(0 if scale > 0 and diff <= 1e-6 * scale else 1)
PY
}

# one NAME NP COMM SERVERS SOLVE_FLAGS...: the allreduce run once per NAME's plan, then COMM with SERVERS.
one() {
  local name=$1 np=$2 comm=$3 k=$4; shift 4
  $PLANNER -q solve --gpus $np --model $SRC/configs/models/mlp-small.yaml --cluster $SRC/configs/clusters/dgx-a100.yaml --tp 1 \
    --schedule 1f1b --global-batch 64 "$@" -o $name.plan.yaml >/dev/null || { bad "$name solve"; return; }
  $PLANNER -q codegen $name.plan.yaml -o $name-ar --iterations 1 >/dev/null || { bad "$name codegen"; return; }
  timeout 120 bash $name-ar/run.sh --dump-gradients --run-id ar >/dev/null 2>$name.err || { bad "$name allreduce run"; tail -3 $name.err; return; }
  sed -e "s/^dp_comm: .*/dp_comm: $comm/" $name.plan.yaml > $name.$comm.plan.yaml
  [ "$k" -gt 0 ] && echo "dp_servers: $k" >> $name.$comm.plan.yaml
  [ "$comm" = ps ] && [ "$k" = 0 ] && echo "ps_placement: colocated" >> $name.$comm.plan.yaml  # a server on every worker
  $PLANNER -q codegen $name.$comm.plan.yaml -o $name-$comm --iterations 1 >/dev/null 2>>$name.err || { bad "$name $comm codegen"; tail -3 $name.err; return; }
  grep -q "mpirun.*-np $((np + k)) " $name-$comm/run.sh || { bad "$name run.sh does not start $((np + k)) processes"; return; }
  timeout 120 bash $name-$comm/run.sh --dump-gradients --run-id s >/dev/null 2>>$name.err || { bad "$name $comm run"; tail -3 $name.err; return; }
  local rep=$name-$comm/runs/s/report.md
  local label="dp $comm ($k server"
  [ "$k" = 0 ] && label="dp $comm (colocated)"
  grep -q "$label" $rep && grep -q "Data-parallel gradient sync per iteration, dp_comm $comm" $rep \
    && [ "$(grep -c '| server |' $rep)" = "$k" ] || { bad "$name $comm report"; return; }
  if maxdiff $name-ar/runs/ar/grads $name-$comm/runs/s/grads; then ok; else bad "$name $comm gradients differ"; fi
}
one dp2 2 ps 1 --pp 1
one dp2b 2 byteps 2 --pp 1
one pp2dp2 4 ps 1 --pp 2
one dp4c 4 ps 0 --pp 1 --zero 0

# A worker killed mid-run ends the job, its server included (the peer watch over every process of
# the job: well before the 10 s timeout), and the error names the lost worker.
if [ -f dp2.ps.plan.yaml ]; then
  $PLANNER -q codegen dp2.ps.plan.yaml -o psk --iterations 100000 --timeout 10 >/dev/null
  start=$(date +%s)
  timeout 60 mpirun --oversubscribe -np 3 $PLANNER -q run psk --run-id k >/dev/null 2>psk.err &
  job=$!
  sleep 3
  victim=""
  for pid in $(pgrep -f "^$PLANNER -q run psk"); do
    [ "$(tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')" = 0 ] && victim=$pid
  done
  [ -n "$victim" ] && kill -9 $victim
  wait $job
  rc=$?
  took=$(( $(date +%s) - start ))
  [ -n "$victim" ] && [ $rc != 0 ] && [ $rc != 124 ] && [ $took -lt 40 ] && grep -q "planner: error: rank 0 (pid $victim, on this node) exited" psk.err \
    && ok || bad "killed worker under ps: victim=$victim rc=$rc after ${took}s: $(tail -3 psk.err)"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
