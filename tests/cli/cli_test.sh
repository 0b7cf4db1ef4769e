#!/usr/bin/env bash
# CLI golden tests: exit codes and the exact "planner: error:" lines for the
# common mistakes, plus the user's path (import, solve, inspect).
set -u
PLANNER=$1
SRC=$2
REF="$SRC/tests/data/pipedream"   # vendored PipeDream profile graphs (tests/data/pipedream/README.md)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
pass=0
fail=0
expect() {  # expect NAME CODE PATTERN -- command...
  local name=$1 code=$2 pattern=$3
  shift 4
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [ "$rc" != "$code" ] || ! grep -qF -- "$pattern" out.txt err.txt; then
    echo "FAIL $name: rc=$rc (want $code), pattern '$pattern'"; cat err.txt | head -3; fail=$((fail+1))
  else
    pass=$((pass+1))
  fi
  if [ "$code" != 0 ] && [ "$(wc -l < err.txt)" != 1 ]; then echo "FAIL $name: want one error line"; cat err.txt; fail=$((fail+1)); fi
}
M=$SRC/configs/models
C=$SRC/configs/clusters
expect "solve gpt3" 0 "configuration: tp-pp-dp" -- $PLANNER solve --gpus 1024 --model $M/gpt3-175b.yaml --cluster $C/dgx-a100.yaml -o plan.yaml
expect "inspect" 0 "predicted timeline" -- $PLANNER inspect plan.yaml --svg t.svg
grep -q "<svg" t.svg && pass=$((pass+1)) || { echo "FAIL svg"; fail=$((fail+1)); }
expect "json" 0 '"format_version": 1' -- $PLANNER solve --gpus 64 --model $M/gpt2-small.yaml --cluster $C/dgx-a100.yaml --json
expect "missing file" 2 "planner: error: nope.yaml: cannot open file" -- $PLANNER solve --gpus 8 --model nope.yaml --cluster $C/dgx-a100.yaml
printf 'name: x\nglobal_batch: 8\ngpt: {layers: 2, hiden: 64, heads: 2, seq: 8, vocab: 10}\n' > bad.yaml
expect "unknown key" 2 "planner: error: bad.yaml:3: field 'gpt.hiden': unknown key 'hiden', did you mean 'hidden'?" -- $PLANNER solve --gpus 1 --model bad.yaml --cluster $C/dgx-a100.yaml
printf 'name: x\nglobal_batch: [8\n' > syntax.yaml
expect "yaml syntax" 2 "planner: error: syntax.yaml:3:1: YAML syntax error" -- $PLANNER solve --gpus 1 --model syntax.yaml --cluster $C/dgx-a100.yaml
expect "too many gpus" 2 "holds 2 GPUs" -- $PLANNER solve --gpus 4 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml
expect "batch not divisible" 3 "no configuration divides" -- $PLANNER solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --global-batch 3 --microbatch 2
expect "infeasible" 3 "GiB > 75.0 GiB usable" -- $PLANNER solve --gpus 8 --model $M/megatron-1t.yaml --cluster $C/dgx-a100.yaml
expect "bad subcommand" 2 "unknown subcommand 'slove', did you mean 'solve'?" -- $PLANNER slove --gpus 8
expect "bad schedule" 2 "--schedule: unknown value '1f1f', did you mean '1f1b'?" -- $PLANNER solve --gpus 8 --model $M/gpt2-small.yaml --cluster $C/dgx-a100.yaml --schedule 1f1f
expect "interleave v=8" 0 "schedule interleaved (v=8)" -- $PLANNER solve --gpus 1024 --model $M/gpt3-175b.yaml --cluster $C/dgx-a100.yaml --tp 8 --pp 4 --schedule interleaved --interleave 8
expect "interleave rule" 2 "planner: error: --interleave 5 with --pp 4: pp x v must divide the 96 layers" -- $PLANNER solve --gpus 1024 --model $M/gpt3-175b.yaml --cluster $C/dgx-a100.yaml --tp 8 --pp 4 --interleave 5
expect "no model" 2 "no model or profile given" -- $PLANNER solve --gpus 8 --cluster $C/dgx-a100.yaml
# The PipeDream path runs on the vendored graph; missing data is a failure, never a skip.
if [ ! -f "$REF/vgg16/graph.txt" ]; then
  echo "FAIL pipedream data: $REF/vgg16/graph.txt is missing (tests/data/pipedream/ is part of the repository)"; fail=$((fail+1))
fi
expect "import" 0 "41 layers" -- $PLANNER import pipedream $REF/vgg16/graph.txt -o vgg16.profile.yaml
expect "pipedream 4" 0 "replication 3-1" -- $PLANNER solve --gpus 4 --profile vgg16.profile.yaml --cluster $C/dgx-a100.yaml --mode pipedream --pd-bandwidths 1e9 --pd-machines 4
expect "pipedream 8 cluster-b" 0 "replication 7-1" -- $PLANNER solve --gpus 8 --profile vgg16.profile.yaml --cluster $C/pipedream-cluster-b.yaml --mode pipedream
expect "pipedream 16 flat" 0 "replication 15-1" -- $PLANNER solve --gpus 16 --profile vgg16.profile.yaml --cluster $C/pipedream-cluster-b.yaml --mode pipedream --pd-machines 16 --pd-bandwidths 3.125e9
expect "default discovery" 0 "using profile vgg16.profile.yaml" -- $PLANNER solve --gpus 4 --cluster $C/pipedream-cluster-a.yaml
printf 'node1 -- Conv -- forward_compute_time=x, backward_compute_time=1, activation_size=1, parameter_size=1\n' > g.txt
expect "bad graph" 2 "g.txt:1: bad number 'x' in forward_compute_time" -- $PLANNER import pipedream g.txt -o g.yaml
# planner profile: layers on the CPU, bad devices and degrees, --comm outside mpirun, Ctrl-C.
expect "profile mlp" 0 "wrote mlp.profile.yaml: 10 layers, 4 distinct signatures" -- $PLANNER profile $M/mlp-small.yaml --device cpu --threads 1 --budget-seconds 0.05 -o mlp.profile.yaml
expect "solve from profile" 0 "configuration: tp-pp-dp" -- $PLANNER solve --gpus 2 --profile mlp.profile.yaml --cluster $C/local-cpu.yaml
expect "profile bad device" 2 "--device: unknown value 'tpu'; use cpu, cuda or auto" -- $PLANNER profile $M/mlp-small.yaml --device tpu
expect "profile bad tp" 2 "--tp 3: it does not divide" -- $PLANNER profile $M/tiny-gpt.yaml --device cpu --tp 3
expect "profile comm no mpi" 2 "--comm needs" -- env -u OMPI_COMM_WORLD_SIZE $PLANNER profile --comm
expect "profile gap without cold" 2 "--gap-ms applies to cold-cache timing only; add --cache cold" -- $PLANNER profile --comm --gap-ms 20
expect "profile cache unknown" 2 "--cache: unknown value 'hot'; use warm, cold or warm,cold" -- $PLANNER profile --comm --cache warm,hot
expect "profile gap negative" 2 "--gap-ms: Value -1 not in range 0 to 10000" -- $PLANNER profile --comm --cache cold --gap-ms -1
expect "comm-profile missing" 2 "nope.yaml" -- $PLANNER solve --gpus 2 --profile mlp.profile.yaml --cluster $C/local-cpu.yaml --comm-profile nope.yaml
# --device cuda asserts on both kinds of host: without a GPU one error line (exit 1); with one, a
# profile from a CUDA build, or the "built without CUDA" line from a CPU-only build.
if ! nvidia-smi >/dev/null 2>&1; then
  expect "profile cuda without gpu" 1 "--device cuda: " -- $PLANNER profile $M/mlp-small.yaml --device cuda
elif $PLANNER profile $M/mlp-small.yaml --device cuda --budget-seconds 0.05 -o mlp-cuda.profile.yaml >cuda.out 2>&1; then
  grep -qF "wrote mlp-cuda.profile.yaml: 10 layers" cuda.out && pass=$((pass+1)) || { echo "FAIL profile cuda with gpu:"; tail -2 cuda.out; fail=$((fail+1)); }
else
  expect "profile cuda, CPU-only build" 1 "--device cuda: built without CUDA" -- $PLANNER profile $M/mlp-small.yaml --device cuda
fi
# Ctrl-C during a long profile: exit 130 and no (partial) file.
$PLANNER profile $M/gpt2-small.yaml --device cpu -o gpt2.profile.yaml >/dev/null 2>int.txt &
pid=$!
sleep 1.5
kill -INT $pid
wait $pid
rc=$?
if [ "$rc" = 130 ] && [ ! -e gpt2.profile.yaml ] && grep -qF "interrupted by Ctrl-C; no profile written" int.txt; then pass=$((pass+1)); else echo "FAIL ctrl-c: rc=$rc"; cat int.txt | tail -2; fail=$((fail+1)); fi
# The search's errors name their cause: a cluster without a peak for the model's dtype, a
# --replication that no tensor-parallel degree matches, a microbatch of 0, what left every layout out.
printf 'format_version: 1\nname: no-fp16\ngpu: {name: g, peak_tflops: {fp32: 19.5}, memory_GiB: 80, hbm_bandwidth_GBps: 2039}\ntopology:\n  - {name: node, size: 8, bandwidth_GBps: 235}\n' > nofp16.yaml
expect "no peak for dtype" 2 "nofp16.yaml: cluster 'no-fp16' has no peak for dtype fp16 (the dtype of model 'gpt2-small'); add gpu.peak_tflops.fp16 to it" -- $PLANNER solve --gpus 8 --model $M/gpt2-small.yaml --cluster nofp16.yaml
expect "replication mismatch" 2 "--replication 3-1: the replicas sum to 4 TP groups but tp=1 makes 2" -- $PLANNER solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --replication 3-1
expect "microbatch zero" 2 "--microbatch 0: every value must be at least 1" -- $PLANNER solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --microbatch 0
expect "divisibility cause" 3 "(tp=1 pp=1: the global batch 3 is not a multiple of microbatch 2 x data-parallel 2)" -- $PLANNER solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --global-batch 3 --microbatch 2
# planner inspect LAUNCH/launch.yaml --rank N: a rank's program with its peers resolved.
expect "solve pp2" 0 "configuration: tp-pp-dp 1-2-1" -- $PLANNER solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --pp 2 -o pp2.plan.yaml
expect "codegen pp2" 0 "wrote L2/: 2 ranks" -- $PLANNER codegen pp2.plan.yaml -o L2 --iterations 2
expect "inspect rank" 0 "receive the activation entering stage 1, microbatch 0 from rank 0" -- $PLANNER inspect L2/launch.yaml --rank 1
expect "inspect rank send" 0 "SA0.0        send the activation leaving stage 0, microbatch 0 to rank 1" -- $PLANNER inspect L2 --rank 0
expect "inspect rank opt" 0 "optimizer step" -- $PLANNER inspect L2/launch.yaml --rank 0
expect "inspect rank range" 2 "--rank 2: L2/launch.yaml has ranks 0..1" -- $PLANNER inspect L2/launch.yaml --rank 2
expect "inspect launch without rank" 2 "L2/launch.yaml is a launch plan; add --rank N" -- $PLANNER inspect L2/launch.yaml

# ---- Errors mean what they say: no exception escapes except as one "planner: error:" line ----
mkdir -p errs && cd errs
ln -s loop loop            # a symbolic link to itself: every look-up through it fails with ELOOP
ln -s configs configs
expect "default cluster behind a link loop" 0 "configuration: tp-pp-dp" -- $PLANNER solve --gpus 1 --model $M/tiny-gpt.yaml
expect "inspect a link loop" 2 "planner: error: loop: cannot open file (Too many levels of symbolic links); check the path" -- $PLANNER inspect loop
expect "model is a directory" 2 "planner: error: $M: is a directory; give the path of a file" -- $PLANNER solve --gpus 1 --model $M --cluster $C/local-cpu.yaml
mkdir -p run
printf 'report\n' > run/report.md
printf 'iteration,loss,iteration_seconds\n1,2.5,0.1\n2,x,0.1\n' > run/metrics.csv
expect "malformed number in metrics.csv" 2 "planner: error: run/metrics.csv:3: field 'loss': must be a number, got 'x'" -- $PLANNER inspect run
printf 'iteration,loss,iteration_seconds\n1,2.5,0.1\n' > run/metrics.csv
printf '{"traceEvents": [\n {"ph": "X", "pid": "a", "name": "F0", "ts": 1, "dur": 2}]}\n' > run/trace.json
expect "malformed number in trace.json" 2 "planner: error: run/trace.json:2: field 'traceEvents[0].pid': must be an integer, got 'a'" -- $PLANNER inspect run
if [ -w /dev/full ]; then  # a result that cannot be written to stdout is exit 1, not 0
  $PLANNER solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml >/dev/full 2>err.txt
  rc=$?
  if [ $rc = 1 ] && [ "$(cat err.txt)" = "planner: error: standard output: write failed: No space left on device" ]; then pass=$((pass+1)); else echo "FAIL stdout full: rc=$rc $(cat err.txt)"; fail=$((fail+1)); fi
fi
# Every output goes through one writer: a path that cannot be used is exit 2, a failed write exit 1, both naming the path.
expect "output in a missing directory" 2 "planner: error: no/such/p.yaml: cannot write the file: directory 'no/such' does not exist; create it first" -- $PLANNER solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o no/such/p.yaml
expect "output is a directory" 2 "planner: error: run: exists and is not a regular file; write to a file path instead" -- $PLANNER solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o run
if [ "$(id -u)" = 0 ] && [ -c /dev/null ]; then  # as root a rename over /dev/null would succeed: the writer must refuse it
  expect "output is /dev/null" 2 "planner: error: /dev/null: exists and is not a regular file; write to a file path instead" -- $PLANNER solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o /dev/null
  [ -c /dev/null ] && pass=$((pass+1)) || { echo "FAIL /dev/null is no longer a character device"; fail=$((fail+1)); }
fi
(ulimit -f 1; trap '' XFSZ; exec $PLANNER solve --gpus 1024 --model $M/gpt3-175b.yaml --cluster $C/dgx-a100.yaml -o big.yaml) >out.txt 2>err.txt
rc=$?
if [ $rc = 1 ] && [ "$(cat err.txt)" = "planner: error: big.yaml: write failed: File too large" ] && [ -z "$(ls | grep '^big\.yaml')" ]; then pass=$((pass+1)); else echo "FAIL failed write: rc=$rc $(cat err.txt) $(ls)"; fail=$((fail+1)); fi
$PLANNER -q solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o p.yaml >/dev/null
touch afile
expect "codegen into a file" 2 "planner: error: afile: exists and is not a directory; choose another path" -- $PLANNER codegen p.yaml -o afile
expect "codegen scripts are executable" 0 "wrote L/" -- $PLANNER codegen p.yaml -o L
[ -x L/run.sh ] && pass=$((pass+1)) || { echo "FAIL L/run.sh is not executable"; fail=$((fail+1)); }
# A plan whose cluster file is broken is an error, not a silent 8 ranks per node.
cp $C/local-cpu.yaml c.yaml
$PLANNER -q solve --gpus 1 --model $M/tiny-gpt.yaml --cluster c.yaml -o pc.yaml >/dev/null
echo "junk: [" >> c.yaml
expect "codegen with a broken cluster file" 2 "planner: error: c.yaml:" -- $PLANNER codegen pc.yaml -o L2
cd ..
# ---- end of the error checks ----
# The ZeRO stage is an enum read once from plan.yaml: 0..3, anything else names its line.
$PLANNER -q solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o z.plan.yaml >/dev/null
sed '0,/^zero_stage: [0-9]/s//zero_stage: 7/' z.plan.yaml > z7.plan.yaml
expect "zero stage out of range" 2 "z7.plan.yaml:$(grep -n '^zero_stage:' z.plan.yaml | head -1 | cut -d: -f1): field 'zero_stage': must be 0, 1, 2 or 3 (the ZeRO stage), got 7" -- $PLANNER inspect z7.plan.yaml
echo "cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
