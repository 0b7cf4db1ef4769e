#!/usr/bin/env bash
# Runtime faults under mpirun (2 ranks) and in one process: each must end the job with its cause,
# a bounded time, the documented exit code and at most one `planner: error:` line per rank
# (docs/hardening.md, "Runtime faults"). Every job runs under `timeout`: 124 means it hung.
#   kill -9 of a rank in its first 0.5 s; SIGSTOP of a rank at start-up and mid-run (--timeout 4);
#   a rank failing cleanly (its trace path is a directory) ends both ranks with its exit code;
#   SIGINT / SIGTERM to one process, to mpirun and to one rank; a full disk (a 1 MiB tmpfs).
set -u
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$T"
}
trap cleanup EXIT
skip=0
ok() { pass=$((pass+1)); echo "ok   $1"; }  # this script names each passing case
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
errors() { grep -c '^planner: error:' "$1"; }

$PLANNER -q solve --gpus 2 --pp 2 --schedule 1f1b --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o two.plan.yaml >/dev/null || { echo "FAIL solve"; exit 1; }
$PLANNER -q solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o one.plan.yaml >/dev/null || { echo "FAIL solve 1"; exit 1; }
$PLANNER -q codegen two.plan.yaml -o long --iterations 100000 --timeout 4 || exit 1
$PLANNER -q codegen two.plan.yaml -o slow --iterations 100000 --timeout 60 || exit 1
$PLANNER -q codegen one.plan.yaml -o one --iterations 100000 --timeout 60 || exit 1

# rank_pid DIR RUNID RANK: the pid of that rank's process (empty until it exists).
rank_pid() {
  local p
  for p in $(pgrep -f -- "^$PLANNER -q run $1 --run-id $2" 2>/dev/null); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$3"; then echo $p; return; fi
  done
}
# wait_pid DIR RUNID RANK: polls every 10 ms for up to 5 s.
wait_pid() {
  local p="" i
  for i in $(seq 500); do
    p=$(rank_pid "$@")
    [ -n "$p" ] && break
    sleep 0.01
  done
  echo "$p"
}

# --- 1. kill -9 of rank 1 within its first 0.5 s: the job ends, non-zero, within seconds.
start=$(now_ms)
timeout 60 mpirun --oversubscribe -np 2 $PLANNER -q run long --run-id k9 >/dev/null 2>k9.err &
job=$!
v=$(wait_pid long k9 1)
[ -n "$v" ] && kill -9 "$v"
wait $job; rc=$?
took=$(( $(now_ms) - start ))
[ -n "$v" ] && [ $rc != 0 ] && [ $rc != 124 ] && [ $took -lt 15000 ] && ok "kill -9 at start-up: exit $rc after $took ms" ||
  bad "kill -9 at start-up (pid '$v'): exit $rc after $took ms: $(head -3 k9.err)"

# --- 2. SIGSTOP of rank 1 within its first 0.5 s (MPI_Init, the splits, the peer watch's all-gather):
# rank 0's watchdog names the start-up call that timed out (4 s) and the job ends.
start=$(now_ms)
timeout 60 mpirun --oversubscribe -np 2 $PLANNER -q run long --run-id st >/dev/null 2>st.err &
job=$!
v=$(wait_pid long st 1)
[ -n "$v" ] && kill -STOP "$v" && PIDS+=("$v")
wait $job; rc=$?
took=$(( $(now_ms) - start ))
[ -n "$v" ] && [ $rc = 1 ] && [ $took -lt 15000 ] && grep -qE '^planner: error: MPI .* on rank 0 of 2 timed out after 4 s' st.err &&
  [ "$(errors st.err)" -le 2 ] && ok "SIGSTOP at start-up: exit 1 after $took ms: $(grep '^planner: error:' st.err)" ||
  bad "SIGSTOP at start-up (pid '$v'): exit $rc after $took ms: $(cat st.err | head -5)"
# gone(PID): no such process, or a zombie (mpirun, its parent, has exited)
gone() {
  local i
  for i in $(seq 200); do
    [ ! -e /proc/$1 ] && return 0
    [[ $(cat /proc/$1/stat 2>/dev/null) =~ \)\ [ZX] ]] && return 0
    sleep 0.01
  done
  return 1
}
[ -n "$v" ] && gone "$v" && ok "the stopped rank is gone" || bad "the stopped rank $v still runs: $(cat /proc/$v/stat)"

# --- 3. SIGSTOP of rank 1 mid-run: the watchdog of a pipeline call fires after 4 s.
start=$(now_ms)
timeout 60 mpirun --oversubscribe -np 2 $PLANNER -q run long --run-id sl >/dev/null 2>sl.err &
job=$!
sleep 3
v=$(rank_pid long sl 1)
[ -n "$v" ] && kill -STOP "$v" && PIDS+=("$v")
stopped=$(now_ms)
wait $job; rc=$?
took=$(( $(now_ms) - stopped ))
[ -n "$v" ] && [ $rc = 1 ] && [ $took -ge 3500 ] && [ $took -lt 12000 ] && grep -qE '^planner: error: MPI .* on rank 0 of 2 timed out after 4 s' sl.err &&
  [ "$(errors sl.err)" -le 2 ] && ok "SIGSTOP mid-run: exit 1, $took ms after the stop" ||
  bad "SIGSTOP mid-run (pid '$v'): exit $rc, $took ms after the stop: $(head -5 sl.err)"

# --- 4. A rank that fails cleanly (rank 1 cannot write its trace: the path is a directory, exit 2)
# ends the job with its exit code at once, not at the other rank's timeout (60 s): its line comes
# first; rank 0 (waiting in the job's last barrier) names it or is ended by mpirun.
mkdir -p slow/runs/cf/trace.rank1.json
start=$(now_ms)
timeout 90 mpirun --oversubscribe -np 2 $PLANNER -q run slow --run-id cf --iterations 3 >/dev/null 2>cf.err
rc=$?
took=$(( $(now_ms) - start ))
first=$(grep -m1 '^planner: error:' cf.err)
[ $rc = 2 ] && [ $took -lt 10000 ] && [[ $first == *"trace.rank1.json: exists and is not a regular file"* ]] && [ "$(errors cf.err)" -le 2 ] &&
  ok "rank 1 failing cleanly: exit 2 after $took ms; $(errors cf.err) error line(s)" ||
  bad "rank 1 failing cleanly: exit $rc after $took ms: $(head -8 cf.err)"
[ ! -e slow/runs/cf/report.md ] && [ -z "$(find slow/runs/cf -name '*.tmp.*')" ] && ok "no report, no temporaries after the failure" ||
  bad "after a failed rank: $(ls slow/runs/cf)"

# --- 5. SIGINT / SIGTERM to one process (1-rank plan): it stops at the next iteration boundary,
# exit 130 / 143, one line naming the iteration and the last complete checkpoint.
# sig_one SIGNAL CODE WORD
sig_one() {
  local sig=$1 code=$2 word=$3 id=s$1
  timeout 60 $PLANNER -q run one --run-id $id --checkpoint-every 20 >/dev/null 2>$id.err &
  local job=$! i
  # the signal goes to planner itself, as Ctrl-C would: `timeout` would pass one on twice (to its child and its group)
  local pl=""
  for i in $(seq 500); do pl=$(pgrep -P $job); [ -n "$pl" ] && break; sleep 0.01; done
  for i in $(seq 1500); do [ -f one/runs/$id/ckpt/rank0.bin ] && break; sleep 0.02; done
  sleep 0.5
  local sent=$(now_ms)
  kill -$sig $pl
  wait $job; local rc=$?
  local took=$(( $(now_ms) - sent ))
  local line
  line=$(grep '^planner: error:' $id.err)
  if [ $rc = $code ] && [ $took -lt 3000 ] && [ "$(errors $id.err)" = 1 ] &&
     [[ $line =~ ^"planner: error: $word (SIG$sig) after iteration "([0-9]+)" of 100000; the last complete checkpoint is iteration "([0-9]+) ]] &&
     [ $(( BASH_REMATCH[2] % 20 )) = 0 ] && [ "${BASH_REMATCH[2]}" -gt 0 ] && [ "${BASH_REMATCH[2]}" -le "${BASH_REMATCH[1]}" ] &&
     [ "$(( $(wc -l < one/runs/$id/metrics.csv) - 1 ))" = "${BASH_REMATCH[1]}" ]; then
    ok "SIG$sig to one process: exit $rc after $took ms: $line"
  else
    bad "SIG$sig to one process: exit $rc after $took ms: $(cat $id.err | tail -3)"
  fi
}
sig_one INT 130 interrupted
sig_one TERM 143 terminated
# The checkpoint it names resumes.
ck=$(sed -n 's/.*the last complete checkpoint is iteration \([0-9]*\).*/\1/p' sINT.err)
if [ -n "$ck" ] && timeout 60 $PLANNER -q run one --resume sINT --iterations $((ck + 2)) >/dev/null 2>res.err &&
   [ "$(( $(wc -l < one/runs/sINT/metrics.csv) - 1 ))" = $((ck + 2)) ]; then ok "resume after SIGINT from iteration $ck"
else bad "resume after SIGINT from '$ck': $(cat res.err)"; fi

# --- 6. SIGINT / SIGTERM to mpirun: it forwards SIGTERM to the ranks, which stop together at an
# iteration boundary; rank 0 prints the one line. mpirun (Open MPI 4.1) exits 1 whatever the
# ranks return once it was signalled itself; a signal to one rank alone gives mpirun its 143.
# sig_mpi SIGNAL TARGET(mpirun|rank1) WANT_RC
sig_mpi() {
  local sig=$1 target=$2 want=$3 id=m$1$2
  # mpirun gives signalled ranks odls_base_sigkill_timeout (1 s) before SIGKILL: the stop must come within it
  # (raising it makes mpirun wait that long after the ranks have gone)
  timeout 60 mpirun --oversubscribe -np 2 $PLANNER -q run slow --run-id $id >/dev/null 2>$id.err &
  local job=$! v
  v=$(wait_pid slow $id 1)
  sleep 3
  local sent=$(now_ms)
  # to mpirun itself, as Ctrl-C would (`timeout` would pass it on twice, and a second SIGINT makes mpirun quit at once)
  if [ $target = mpirun ]; then kill -$sig $(pgrep -P $job -x mpirun); else kill -$sig "$v"; fi
  wait $job; local rc=$?
  local took=$(( $(now_ms) - sent ))
  if [ $rc = $want ] && [ $took -lt 4000 ] && [ "$(errors $id.err)" = 1 ] &&
     grep -qE '^planner: error: (interrupted|terminated) \(SIG(INT|TERM)\) (after iteration [0-9]+ of 100000; no checkpoint|in iteration [0-9]+ of 100000, not ended 0.6 s after the signal)' $id.err; then
    ok "SIG$sig to $target: exit $rc after $took ms: $(grep '^planner: error:' $id.err)"
  else
    bad "SIG$sig to $target: exit $rc (want $want) after $took ms: $(head -5 $id.err)"
  fi
}
sig_mpi INT mpirun 1
sig_mpi TERM mpirun 1
sig_mpi TERM rank1 143
sig_mpi INT rank1 130
# An iteration longer than mpirun's 1 s before SIGKILL (global batch 4096 of tiny-gpt: about 12 s): rank 0's
# watchdog prints the line 0.6 s after the signal, naming the iteration that did not end; one line, exit 1.
$PLANNER -q solve --gpus 2 --pp 2 --schedule 1f1b --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --global-batch 4096 \
  --microbatch 8 -o long-iter.plan.yaml >/dev/null && $PLANNER -q codegen long-iter.plan.yaml -o longiter --iterations 100000 --timeout 60 ||
  bad "long-iteration plan"
timeout 60 mpirun --oversubscribe -np 2 $PLANNER -q run longiter --run-id late >/dev/null 2>late.err &
job=$!
v=$(wait_pid longiter late 1)
sleep 3
sent=$(now_ms)
kill -INT $(pgrep -P $job -x mpirun)
wait $job; rc=$?
took=$(( $(now_ms) - sent ))
if [ $rc = 1 ] && [ $took -lt 4000 ] && [ "$(errors late.err)" = 1 ] &&
   grep -qE '^planner: error: terminated \(SIGTERM\) in iteration 1 of 100000, not ended 0.6 s after the signal \(mpirun kills signalled ranks 1 s after forwarding it\); no checkpoint' late.err; then
  ok "SIGINT to mpirun during a 12 s iteration: exit $rc after $took ms: $(grep '^planner: error:' late.err)"
else
  bad "SIGINT to mpirun during a 12 s iteration: exit $rc after $took ms: $(head -5 late.err)"
fi

# --- 7. A full disk: the run directory on a 1 MiB tmpfs (a private mount namespace; root only).
# (256 KiB: tiny-gpt's traces take 5.4 KB per iteration and rank, 11 KB on 2 ranks)
# The traces fill it: exit 1 naming the file, no temporaries, no report passed off as complete.
full_disk() {  # NP DIR
  local np=$1 dir=$2
  unshare -m bash -c "
    mount -t tmpfs -o size=256k tmpfs '$T/small' || exit 99
    mkdir '$T/small/$dir' && cp '$T/$dir/launch.yaml' '$T/$dir/model.yaml' '$T/small/$dir/' && cd '$T/small' || exit 98
    if [ $np = 1 ]; then timeout 120 $PLANNER -q run $dir --run-id d --iterations 40 >/dev/null 2>'$T/fd.err'; rc=\$?
    else timeout 120 mpirun --oversubscribe -np $np $PLANNER -q run $dir --run-id d --iterations 20 >/dev/null 2>'$T/fd.err'; rc=\$?; fi
    echo \"rc=\$rc\"
    echo \"err=\$(grep -m1 '^planner: error:' '$T/fd.err')\"
    echo \"errors=\$(grep -c '^planner: error:' '$T/fd.err')\"
    echo \"tmps=\$(find $dir/runs -name '*.tmp.*' | wc -l)\"
    echo \"report=\$(test -e $dir/runs/d/report.md && echo yes || echo no)\"
    echo \"emptyfiles=\$(find $dir/runs -type f -size 0 | wc -l)\"
  " >fd$np.out 2>&1
}
mkdir -p small
if [ "$(id -u)" = 0 ] && unshare -m bash -c "mount -t tmpfs -o size=256k tmpfs '$T/small'" 2>/dev/null; then
  for np in 1 2; do
    dir=one; [ $np = 2 ] && dir=slow
    full_disk $np $dir
    r=$(sed -n 's/^rc=//p' fd$np.out); e=$(sed -n 's/^err=//p' fd$np.out); n=$(sed -n 's/^errors=//p' fd$np.out)
    tm=$(sed -n 's/^tmps=//p' fd$np.out); rp=$(sed -n 's/^report=//p' fd$np.out); z=$(sed -n 's/^emptyfiles=//p' fd$np.out)
    if [ "$r" = 1 ] && [[ $e == *"No space left on device"* ]] && [[ $e =~ runs/d/[a-z.0-9]+:\ (write failed|cannot write the file) ]] &&
       [ "$n" -le "$np" ] && [ "$tm" = 0 ] && [ "$rp" = no ] && [ "$z" = 0 ]; then
      ok "full disk, $np rank(s): exit 1: $e"
    else
      bad "full disk, $np rank(s): $(cat fd$np.out) $(head -5 fd.err)"
    fi
  done
else
  echo "skip full disk: no root or no mount namespace here"; skip=$((skip+1))
fi

# --- 8. stdout on a full device: exit 1 naming standard output.
out=$($PLANNER -q solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml 2>&1 >/dev/full); rc=$?
[ $rc = 1 ] && [[ $out == *"standard output: write failed"* ]] && ok "stdout on /dev/full: exit 1" || bad "stdout on /dev/full: exit $rc: $out"

echo "faults: $pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
