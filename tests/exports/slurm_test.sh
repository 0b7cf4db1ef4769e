#!/usr/bin/env bash
# A real Slurm (Debian's slurm-wlm 22.05) on this machine runs the exported slurm.sbatch.
# As root it writes a slurm.conf for three nodes emulated on localhost (n0-n2, 8 CPUs and 8
# fake GPUs each) into a temp dir (SLURM_CONF, nothing in /etc), starts munged (own key and
# socket), slurmctld and three slurmd, then:
#  1. codegens the 2-rank tiny-gpt plan (tiny-gpt.yaml on local-cpu.yaml), submits slurm.sbatch
#     with `sbatch --wait` from the launch directory's parent folder (srun --mpi=pmix, Open MPI)
#     and checks the run directory planner run writes and that the loss falls;
#     then a dp_comm ps plan (2 workers + 1 summation server task) the same way;
#  2. a 20-rank plan at 8 per node: `sbatch --test-only` accepts it (3 nodes, 20 tasks) and,
#     run with PLANNER set to a probe and srun --mpi=none (pmix cannot run two emulated nodes of
#     one job on one host), task i runs on node i / 8 with 20 tasks in the step.
# Not root, or slurm-wlm / munge missing: FAIL with the reason. Daemons always torn down; every
# wait bounded. Usage: slurm_test.sh PLANNER SRC
set -u
PLANNER=$(readlink -f "$1")
SRC=$(readlink -f "$2")
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (slurmd and slurmctld run as SlurmUser=root here); run the suite as root"
for b in munged munge slurmctld slurmd sbatch srun scontrol sinfo; do
  command -v "$b" >/dev/null || fail "'$b' not found: install slurm-wlm and munge (make deps)"
done
T=$(mktemp -d /tmp/planner-slurm.XXXXXX)
chmod 755 "$T"
teardown() {
  # Jobs of this cluster first (a timed-out sbatch --wait leaves its job running), then the daemons.
  if [ -f "$T/run/slurmctld.pid" ]; then
    timeout 10 scancel --full --quiet $(timeout 5 squeue -h -o %A 2>/dev/null) 2>/dev/null
    sleep 1
  fi
  for f in "$T"/run/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
  sleep 0.5
  for f in "$T"/run/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$T"
}
trap teardown EXIT
mkdir -p "$T/run" "$T/log" "$T/spool" "$T/state" "$T/munge" "$T/gpu" "$T/work"
chmod 700 "$T/munge"
H=$(hostname -s)
# Ports from the process id, so two runs on one host do not collide.
P=$((20000 + ($$ % 2000) * 4))
# munged with its own key, socket, pid and seed files.
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none && chmod 400 "$T/munge/munge.key"
SOCK=$T/munge/munge.socket
munged -f --socket="$SOCK" --key-file="$T/munge/munge.key" --pid-file="$T/run/munged.pid" \
  --log-file="$T/log/munged.log" --seed-file="$T/munge/seed" || fail "munged did not start: $(cat "$T/log/munged.log" 2>/dev/null)"
munge -S "$SOCK" -n | unmunge -S "$SOCK" >/dev/null || fail "munge credentials do not round-trip"
touch "$T"/gpu/nvidia{0..7}
export SLURM_CONF=$T/slurm.conf
cat > "$SLURM_CONF" <<EOC
ClusterName=plannerci
SlurmctldHost=$H
SlurmctldPort=$P
SlurmdPort=$((P + 1))
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SlurmUser=root
SlurmdUser=root
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldPidFile=$T/run/slurmctld.pid
SlurmdPidFile=$T/run/slurmd-%n.pid
SlurmdSpoolDir=$T/spool/%n
StateSaveLocation=$T/state
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd-%n.log
NodeName=n[0-2] NodeHostname=$H Port=[$((P + 1))-$((P + 3))] CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=2000 Gres=gpu:8 State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOC
echo "NodeName=n[0-2] Name=gpu File=$T/gpu/nvidia[0-7]" > "$T/gres.conf"
slurmctld || fail "slurmctld did not start: $(tail -5 "$T/log/slurmctld.log")"
for i in 0 1 2; do
  mkdir -p "$T/spool/n$i"
  slurmd -N "n$i" || fail "slurmd n$i did not start: $(tail -5 "$T/log/slurmd-n$i.log")"
done
idle=0
for _ in $(seq 1 60); do
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
  [ "$idle" = 3 ] && break
  sleep 0.5
done
[ "$idle" = 3 ] || fail "3 nodes not idle after 30 s: $(sinfo -N 2>&1); $(tail -5 "$T/log/slurmctld.log")"
pass=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; teardown; trap - EXIT; exit 1; }

# 1. The 2-rank tiny-gpt plan on one node, submitted from the parent folder.
W=$T/work
"$PLANNER" -q solve --gpus 2 --model "$SRC/configs/models/tiny-gpt.yaml" --cluster "$SRC/configs/clusters/local-cpu.yaml" \
  --schedule gpipe,1f1b -o "$W/tiny.plan.yaml" >/dev/null 2>"$W/solve.err" || bad "solve: $(cat "$W/solve.err")"
"$PLANNER" -q codegen "$W/tiny.plan.yaml" -o "$W/launch" --iterations 12 2>"$W/codegen.err" || bad "codegen: $(cat "$W/codegen.err")"
grep -qxF -- "#SBATCH --ntasks=2" "$W/launch/slurm.sbatch" && ok || bad "slurm.sbatch asks not for 2 tasks"
grep -qF -- "srun --mpi=\"\$MPI\" --ntasks=2 --distribution=arbitrary --cpus-per-task=1" "$W/launch/slurm.sbatch" && ok || bad "srun line"
start=$(date +%s.%N)
(cd "$W" && OMPI_MCA_btl=self,vader timeout 150 sbatch --wait --parsable launch/slurm.sbatch --run-id slurm > "$W/jobid" 2>"$W/sbatch.err")
rc=$?
end=$(date +%s.%N)
job=$(cat "$W/jobid")
[ $rc = 0 ] || bad "sbatch --wait exit $rc: $(cat "$W/sbatch.err"); $(cat "$W"/planner-*.out 2>/dev/null | tail -20)"
ok
[ -f "$W/planner-$job.out" ] && ok || bad "no job output $W/planner-$job.out"
RUN=$W/launch/runs/slurm
for f in metrics.csv report.md trace.json; do [ -s "$RUN/$f" ] && ok || bad "$RUN/$f missing: $(tail -20 "$W/planner-$job.out")"; done
# Falling loss: iteration 0's loss above the last one's by more than 0.1.
python3 - "$RUN/metrics.csv" <<'EOP' && ok || bad "loss does not fall: $(cat "$RUN/metrics.csv")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
loss = [float(r["loss"]) for r in rows]
assert len(loss) == 12, loss
assert loss[0] - loss[-1] > 0.1, loss
print(f"slurm tiny-gpt: loss {loss[0]:.4f} -> {loss[-1]:.4f} over {len(loss)} iterations")
EOP
awk -v a="$start" -v b="$end" 'BEGIN { printf "slurm tiny-gpt 2 ranks (pmix): sbatch --wait %.1f s\n", b - a }'

# 1b. Summation servers are tasks too: 2 workers + 1 ps server (3 tasks on one node), the loss falls.
"$PLANNER" -q solve --gpus 2 --model "$SRC/configs/models/tiny-gpt.yaml" --cluster "$SRC/configs/clusters/local-cpu-ps.yaml" --dp-comm ps \
  --ps-servers 1 --tp 1 --pp 1 -o "$W/ps.plan.yaml" >/dev/null 2>"$W/solve.err" || bad "solve ps: $(cat "$W/solve.err")"
"$PLANNER" -q codegen "$W/ps.plan.yaml" -o "$W/ps" --iterations 8 --gpus-per-node 3 2>"$W/codegen.err" || bad "codegen ps: $(cat "$W/codegen.err")"
(cd "$W" && OMPI_MCA_btl=self,vader timeout 150 sbatch --wait --parsable ps/slurm.sbatch --run-id slurm > "$W/jobid" 2>"$W/sbatch.err") ||
  bad "ps job: $(cat "$W/sbatch.err"); $(tail -20 "$W/planner-$(cat "$W/jobid").out" 2>/dev/null)"
python3 - "$W/ps/runs/slurm/metrics.csv" <<'EOP' && ok || bad "ps: loss does not fall: $(cat "$W/ps/runs/slurm/metrics.csv")"
import csv, sys
loss = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))]
assert len(loss) == 8 and loss[0] - loss[-1] > 0.05, loss
print(f"slurm tiny-gpt 2 workers + 1 ps server: loss {loss[0]:.4f} -> {loss[-1]:.4f} over {len(loss)} iterations")
EOP

# 2. A 20-rank plan at 8 per node: 3 nodes (8, 8, 4 tasks), rank i on node i / 8.
"$PLANNER" -q solve --gpus 20 --model "$SRC/configs/models/tiny-gpt.yaml" --cluster "$SRC/configs/clusters/dgx-a100.yaml" \
  -o "$W/t20.plan.yaml" >/dev/null 2>"$W/solve20.err" || bad "solve 20: $(cat "$W/solve20.err")"
"$PLANNER" -q codegen "$W/t20.plan.yaml" -o "$W/l20" --device cuda 2>"$W/codegen20.err" || bad "codegen 20: $(cat "$W/codegen20.err")"
for flag in "#SBATCH --nodes=3" "#SBATCH --ntasks=20" "#SBATCH --ntasks-per-node=8" "#SBATCH --gpus-per-node=8" "TASKS_PER_NODE=(8 8 4)"; do
  grep -qxF -- "$flag" "$W/l20/slurm.sbatch" && ok || bad "l20/slurm.sbatch lacks '$flag'"
done
(cd "$W" && sbatch --test-only l20/slurm.sbatch) > "$W/testonly.txt" 2>&1 || bad "sbatch --test-only: $(cat "$W/testonly.txt")"
grep -qE "using (2[0-4]) processors on nodes n\[0-2\] in partition ci" "$W/testonly.txt" && ok || bad "--test-only: $(cat "$W/testonly.txt")"
cat > "$W/probe.sh" <<'EOP'
#!/bin/bash
echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_STEP_NUM_TASKS $1 $2" > "$PROBE_DIR/task-$SLURM_PROCID"
EOP
chmod 755 "$W/probe.sh"
mkdir -p "$W/probe"
(cd "$W" && PROBE_DIR=$W/probe PLANNER=$W/probe.sh PLANNER_SLURM_MPI=none timeout 60 sbatch --wait l20/slurm.sbatch >/dev/null 2>"$W/probe.err") || bad "probe job: $(cat "$W/probe.err")"
n=$(ls "$W/probe" | wc -l)
[ "$n" = 20 ] && ok || bad "$n probe tasks ran, not 20"
for i in $(seq 0 19); do
  read -r r node ntasks cmd dir < "$W/probe/task-$i"
  [ "$r $node $ntasks $cmd $dir" = "$i n$((i / 8)) 20 run $W/l20" ] && ok || bad "task $i: '$r $node $ntasks $cmd $dir', want '$i n$((i / 8)) 20 run $W/l20'"
done
# 3. run.sh with an Open MPI hostfile of 3 nodes: Open MPI's own mapper (mpirun --display-map
# --do-not-launch, through a shim first on PATH) puts rank i on node i / 8 of the file, 20 ranks.
mkdir -p "$W/shim"
printf '#!/bin/sh\nexec %s --bind-to none --display-map --do-not-launch "$@"\n' "$(command -v mpirun)" > "$W/shim/mpirun"
chmod 755 "$W/shim/mpirun"
printf 'hostA slots=8\nhostB slots=8\nhostC slots=8\n' > "$W/hosts"
PATH=$W/shim:$PATH timeout 30 bash "$W/l20/run.sh" "$W/hosts" > "$W/map.txt" 2>&1 || bad "run.sh with a hostfile: $(tail -20 "$W/map.txt")"
map=$(awk '/Data for node:/ {h = $4} /Process rank:/ {print $NF == "N/A" ? $(NF-2) " " h : $NF " " h}' "$W/map.txt" | sort -n | awk '{printf "%s:%s ", $1, $2}')
want=""
hosts=(hostA hostB hostC)
for i in $(seq 0 19); do want+="$i:${hosts[i / 8]} "; done
[ "$map" = "$want" ] && ok || bad "Open MPI maps run.sh's ranks as '$map', want '$want'"
echo "slurm: $pass checks passed (Slurm $(sinfo -V | awk '{print $2}'))"
