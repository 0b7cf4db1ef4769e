#!/usr/bin/env bash
# planner run under mpirun: synchronous schedules with PP, DP and PP x DP give
# the gradients of one process running the whole model on the same data;
# the loss falls; bad launch files and a lost rank end the job with an error.
# The gradient, TP, 2-1-1, PipeDream and checkpoint cases also run case by case on thread ranks
# in tests/runtime/executor_test.cc; here they run under mpirun, through the CLI and MPI.
set -u
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"

# compare DIR_A DIR_B [TOLERANCE]: every gradient file of A equals B's (relative L2 error below
# TOLERANCE, default 1e-5).
compare() {
  python3 - "$1" "$2" "${3:-1e-5}" <<'PY'
import array, math, os, sys
a_dir, b_dir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
names = sorted(os.listdir(a_dir))
if not names: sys.exit("no gradients in " + a_dir)
worst = 0.0
for n in names:
    a, b = array.array('f'), array.array('f')
    a.frombytes(open(os.path.join(a_dir, n), 'rb').read())
    b.frombytes(open(os.path.join(b_dir, n), 'rb').read())
    if len(a) != len(b): sys.exit(f"{n}: {len(a)} vs {len(b)} values")
    num = sum((x - y) ** 2 for x, y in zip(a, b)); den = sum(y * y for y in b)
    worst = max(worst, math.sqrt(num / max(den, 1e-30)))
print(f"{len(names)} gradients, worst relative L2 difference {worst:.2e}")
sys.exit(0 if worst < tol else 1)
PY
}

# case NAME NP MODEL CLUSTER SOLVE_FLAGS...
case_grad() {
  local name=$1 np=$2 model=$3 cluster=$4; shift 4
  local mpath=$M/$model.yaml
  [[ $model == *.yaml ]] && mpath=$model  # a model file written by the test
  $PLANNER -q solve --gpus $np --model $mpath --cluster $C/$cluster.yaml "$@" -o $name.plan.yaml >/dev/null || { bad "$name solve"; return; }
  $PLANNER -q codegen $name.plan.yaml -o $name --iterations 1 || { bad "$name codegen"; return; }
  timeout 120 mpirun --oversubscribe -np $np $PLANNER -q run $name --dump-gradients --run-id multi >/dev/null 2>$name.err || { bad "$name run"; cat $name.err | tail -3; return; }
  $PLANNER -q run $name --reference --dump-gradients --run-id single >/dev/null 2>>$name.err || { bad "$name reference"; return; }
  if compare $name/runs/single/grads $name/runs/multi/grads; then ok; else bad "$name gradients differ"; fi
}
case_grad pp2-1f1b 2 tiny-gpt local-cpu --pp 2 --schedule 1f1b
case_grad pp2-gpipe 2 tiny-gpt local-cpu --pp 2 --schedule gpipe
case_grad pp2-interleaved 2 tiny-gpt local-cpu --pp 2 --schedule interleaved
case_grad pp2-zbh1 2 tiny-gpt local-cpu --pp 2 --schedule zb-h1
case_grad pp2-dualpipev 2 tiny-gpt local-cpu --pp 2 --schedule dualpipev
# The report's predicted compute per rank is m x its two V stages' (rank 0: stages 0 and 3).
python3 - pp2-dualpipev/launch.yaml pp2-dualpipev/runs/multi/report.md <<'PY' && ok || bad "dualpipev report rows"
import re, sys
launch = open(sys.argv[1]).read()
m = int(re.search(r"^num_microbatches: (\d+)", launch, re.M).group(1))
st = [float(x) for x in re.findall(r"predicted_compute_seconds: ([0-9.eE+-]+)", launch)]
unit = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
rows = 0
for line in open(sys.argv[2]):
    c = [x.strip() for x in line.split("|")[1:-1]]
    if len(c) == 8 and c[0] in ("0", "1"):
        r, rows = int(c[0]), rows + 1
        want = m * (st[r] + st[3 - r])
        v, u = c[5].split()
        if abs(float(v) * unit[u] - want) > 1e-3 * want: sys.exit(f"rank {r}: {c[5]} vs {want}")
sys.exit(0 if len(st) == 4 and rows == 2 else f"{len(st)} stages, {rows} rank rows")
PY
case_grad dp2 2 tiny-gpt local-cpu --pp 1 --tp 1
grep -qE "^\| dp all-reduce stage 0 \(2 ranks\) \| [0-9.]+ MiB \| 1 \|" dp2/runs/multi/report.md && ok || bad "dp all-reduce row: $(grep dp dp2/runs/multi/report.md)"
# The same with the all-reduce overlapped with backward (codegen --overlap-dp).
$PLANNER -q codegen dp2.plan.yaml -o dp2o --iterations 1 --overlap-dp
if timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run dp2o --dump-gradients --run-id multi >/dev/null 2>dp2o.err; then
  grep -q '"dp all-reduce busy"' dp2o/runs/multi/trace.json && compare dp2/runs/single/grads dp2o/runs/multi/grads && ok || bad "overlapped DP gradients differ"
else
  bad "overlapped DP run"; tail -3 dp2o.err
fi
case_grad pp2-dp2-mlp 4 mlp-small dgx-a100 --pp 2 --tp 1 --schedule 1f1b --global-batch 64
case_grad pp4-dualpipev-mlp 4 mlp-small dgx-a100 --pp 4 --tp 1 --schedule dualpipev --global-batch 64 --kernels none

# MoE (configs/models/tiny-moe.yaml: a dense block, then 2 MoE blocks of 4 experts, top-2, a shared
# expert and the aux loss; tiny-moe-mla.yaml: MLA in every block, sigmoid router with route groups):
# ep 2 (dp 2 folded into it), pp 2 x ep 2 and ep 2 with MLA give every gradient file of one process
# (each expert's from the rank that holds it); tp 2 + SP x ep 2 the gradient norm and 3 steps' losses.
# The report has the all-to-all row (5 per MoE layer and microbatch) against the plan's prediction.
case_grad moe-ep2 2 tiny-moe local-cpu --ep 2 --tp 1 --pp 1
python3 - moe-ep2 <<'PY' && ok || bad "moe all-to-all row: $(grep -A3 'Expert parallelism' moe-ep2/runs/multi/report.md)"
import re, sys
d = sys.argv[1]
m = int(re.search(r"^num_microbatches: (\d+)", open(f"{d}/launch.yaml").read(), re.M).group(1))
row = re.search(r"^\| 0 \| (\d+) \| [0-9.]+ [mun]?s \| [0-9.]+ [mun]?s \|$", open(f"{d}/runs/multi/report.md").read(), re.M)
sys.exit(0 if row and int(row.group(1)) == 2 * 5 * m else 1)
PY
case_grad moe-pp2-ep2 4 tiny-moe dgx-a100 --ep 2 --pp 2 --tp 1 --schedule 1f1b
case_grad moe-mla-ep2 2 tiny-moe-mla local-cpu --ep 2 --tp 1 --pp 1
# DualPipeV with expert parallelism: 4 blocks (1 dense, 3 MoE) in 2 x pp = 4 chunks, the V over 2
# pipeline ranks, each stage's 2 ranks one EP group.
sed 's/  layers: 3/  layers: 4/' $M/tiny-moe.yaml > tiny-moe-4.yaml
case_grad moe-pp2-ep2-dualpipev 4 tiny-moe-4.yaml dgx-a100 --ep 2 --pp 2 --tp 1 --schedule dualpipev --kernels none
$PLANNER -q solve --gpus 4 --model $M/tiny-moe.yaml --cluster $C/dgx-a100.yaml --tp 2 --pp 1 --ep 2 --etp 1 --sp on -o moetp2.plan.yaml >/dev/null \
  && grep -q '^sequence_parallel: true$' moetp2.plan.yaml && $PLANNER -q codegen moetp2.plan.yaml -o moetp2 --iterations 3 \
  && timeout 180 mpirun --oversubscribe -np 4 $PLANNER -q run moetp2 --dump-gradients --run-id multi >/dev/null 2>moetp2.err \
  && $PLANNER -q run moetp2 --reference --dump-gradients --run-id single >/dev/null 2>>moetp2.err && python3 - moetp2 <<'PY' && ok || { bad "tiny-moe tp2 + SP x ep2"; tail -3 moetp2.err; }
import csv, sys
d = sys.argv[1]
g = [float(open(f"{d}/runs/{r}/grad_norm.txt").read()) for r in ("multi", "single")]
l = [[float(x["loss"]) for x in csv.DictReader(open(f"{d}/runs/{r}/metrics.csv"))] for r in ("multi", "single")]
rel, dl = abs(g[0] - g[1]) / g[1], max(abs(a - b) for a, b in zip(*l))
print(f"{d}: gradient norm {g[0]:.6e} vs {g[1]:.6e} (rel {rel:.1e}); losses differ by {dl:.1e} at most")
sys.exit(0 if rel < 1e-5 and dl < 1e-4 and len(l[0]) == 3 else 1)
PY

# A capacity factor (token dropping) is refused by the runtime (dropless only): one error line naming the layer, exit 2.
sed 's/aux_loss: 0.01}/aux_loss: 0.01, capacity_factor: 1.25}/' $M/tiny-moe.yaml > cap.yaml
$PLANNER -q solve --gpus 1 --model cap.yaml --cluster $C/local-cpu.yaml -o cap.plan.yaml >/dev/null && $PLANNER -q codegen cap.plan.yaml -o cap --iterations 1 \
  && { $PLANNER -q run cap 2>cap.err; [ $? = 2 ] && [ "$(wc -l < cap.err)" = 1 ] && grep -q "^planner: error: layer 'block1': capacity_factor 1.25 is not 0" cap.err; } \
  && ok || bad "capacity factor: $(cat cap.err)"

# Tensor parallelism (heads, ffn and vocabulary split over 2 ranks): the same global gradient
# norm after one step and the same losses over 3 steps as one process (shards are slices of the
# single process's weights).
tp_case() {
  local name=$1; shift
  $PLANNER -q solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml "$@" -o $name.plan.yaml >/dev/null || { bad "$name solve"; return; }
  $PLANNER -q codegen $name.plan.yaml -o $name --iterations 3 || { bad "$name codegen"; return; }
  timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run $name --dump-gradients --run-id multi >/dev/null 2>$name.err || { bad "$name run"; tail -3 $name.err; return; }
  $PLANNER -q run $name --reference --dump-gradients --run-id single >/dev/null 2>>$name.err || { bad "$name reference"; return; }
  python3 - $name <<'PY' && ok || bad "$name differs from one process"
import csv, sys
d = sys.argv[1]
g = [float(open(f"{d}/runs/{r}/grad_norm.txt").read()) for r in ("multi", "single")]
l = [[float(x["loss"]) for x in csv.DictReader(open(f"{d}/runs/{r}/metrics.csv"))] for r in ("multi", "single")]
rel = abs(g[0] - g[1]) / g[1]
dl = max(abs(a - b) for a, b in zip(*l))
print(f"{d}: gradient norm {g[0]:.6e} vs {g[1]:.6e} (rel {rel:.1e}); losses differ by {dl:.1e} at most")
sys.exit(0 if rel < 1e-5 and dl < 1e-4 else 1)
PY
}
tp_case tp2 --tp 2 --pp 1 --sp off
# Context parallelism (ring attention, cp 2) and sequence parallelism (tp 2 + SP): plans the solver
# makes with --cp 2 and --sp on (so the report's prediction is theirs), through codegen and mpirun. cp 2 holds
# every parameter on cp rank 0: each gradient file equals one process's; tp 2 + SP: the gradient
# norm and 3 steps' losses (executor_test.cc compares every shard on thread ranks).
$PLANNER -q solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --cp 2 --tp 1 --pp 1 -o cp2.plan.yaml >/dev/null && grep -q '^cp: 2$' cp2.plan.yaml \
  && $PLANNER -q codegen cp2.plan.yaml -o cp2 --iterations 1 && grep -q "^--context-parallel-size 2$" cp2/megatron.args \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run cp2 --dump-gradients --run-id multi >/dev/null 2>cp2.err \
  && $PLANNER -q run cp2 --reference --dump-gradients --run-id single >/dev/null 2>>cp2.err \
  && compare cp2/runs/single/grads cp2/runs/multi/grads && grep -q "cp 2 (ring attention)" cp2/runs/multi/report.md && ok || { bad "cp2"; tail -3 cp2.err; }
$PLANNER -q solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --tp 2 --pp 1 --sp on -o tp2sp.plan.yaml >/dev/null && grep -q '^sequence_parallel: true$' tp2sp.plan.yaml \
  && $PLANNER -q codegen tp2sp.plan.yaml -o tp2sp --iterations 3 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run tp2sp --dump-gradients --run-id multi >/dev/null 2>tp2sp.err \
  && $PLANNER -q run tp2sp --reference --dump-gradients --run-id single >/dev/null 2>>tp2sp.err \
  && grep -q "sequence parallel" tp2sp/runs/multi/report.md && python3 - tp2sp <<'PY' && ok || { bad "tp2sp"; tail -3 tp2sp.err; }
import csv, sys
d = sys.argv[1]
g = [float(open(f"{d}/runs/{r}/grad_norm.txt").read()) for r in ("multi", "single")]
l = [[float(x["loss"]) for x in csv.DictReader(open(f"{d}/runs/{r}/metrics.csv"))] for r in ("multi", "single")]
rel, dl = abs(g[0] - g[1]) / g[1], max(abs(a - b) for a, b in zip(*l))
print(f"{d}: gradient norm {g[0]:.6e} vs {g[1]:.6e} (rel {rel:.1e}); losses differ by {dl:.1e} at most")
sys.exit(0 if rel < 1e-5 and dl < 1e-4 else 1)
PY
# The Llama-class demo model (configs/models/tiny-llama.yaml: GQA 4 heads / 2 KV heads, RoPE,
# SwiGLU, RMSNorm, no biases, untied embeddings) with ring attention (cp 2, RoPE at the tokens'
# global positions): every gradient file equals one process's; and at tp 2 + SP (KV heads split
# over TP, RMSNorm weight gradients all-reduced over it): gradient norm and 3 steps' losses.
$PLANNER -q solve --gpus 2 --model $M/tiny-llama.yaml --cluster $C/local-cpu.yaml --cp 2 --tp 1 --pp 1 -o llcp2.plan.yaml >/dev/null \
  && grep -q '^cp: 2$' llcp2.plan.yaml && $PLANNER -q codegen llcp2.plan.yaml -o llcp2 --iterations 1 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run llcp2 --dump-gradients --run-id multi >/dev/null 2>llcp2.err \
  && $PLANNER -q run llcp2 --reference --dump-gradients --run-id single >/dev/null 2>>llcp2.err \
  && [ "$(ls llcp2/runs/single/grads | wc -l)" = 15 ] && compare llcp2/runs/single/grads llcp2/runs/multi/grads && ok || { bad "tiny-llama cp2"; tail -3 llcp2.err; }
$PLANNER -q solve --gpus 2 --model $M/tiny-llama.yaml --cluster $C/local-cpu.yaml --tp 2 --pp 1 --sp on -o lltp2sp.plan.yaml >/dev/null \
  && grep -q '^sequence_parallel: true$' lltp2sp.plan.yaml && $PLANNER -q codegen lltp2sp.plan.yaml -o lltp2sp --iterations 3 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run lltp2sp --dump-gradients --run-id multi >/dev/null 2>lltp2sp.err \
  && $PLANNER -q run lltp2sp --reference --dump-gradients --run-id single >/dev/null 2>>lltp2sp.err && python3 - lltp2sp <<'PY' && ok || { bad "tiny-llama tp2sp"; tail -3 lltp2sp.err; }
import csv, sys
d = sys.argv[1]
g = [float(open(f"{d}/runs/{r}/grad_norm.txt").read()) for r in ("multi", "single")]
l = [[float(x["loss"]) for x in csv.DictReader(open(f"{d}/runs/{r}/metrics.csv"))] for r in ("multi", "single")]
rel, dl = abs(g[0] - g[1]) / g[1], max(abs(a - b) for a, b in zip(*l))
print(f"{d}: gradient norm {g[0]:.6e} vs {g[1]:.6e} (rel {rel:.1e}); losses differ by {dl:.1e} at most")
sys.exit(0 if rel < 1e-5 and dl < 1e-4 and len(l[0]) == 3 else 1)
PY
# The report times every tensor-parallel all-reduce, paired across the TP group: the activation-sized
# ones (b x s x h floats) number a whole multiple of the measured microbatches, 16 or more each
# (4 blocks x 2 in forward and 2 in backward).
python3 - tp2/launch.yaml tp2/runs/multi/report.md <<'PY' && ok || bad "tp all-reduce rows: $(grep 'tp all-reduce' tp2/runs/multi/report.md)"
import re, sys
launch, rep = open(sys.argv[1]).read(), open(sys.argv[2]).read()
b = int(re.search(r"^microbatch_size: (\d+)", launch, re.M).group(1))
m = int(re.search(r"^num_microbatches: (\d+)", launch, re.M).group(1))
run = re.search(r"iterations: (\d+), warmup_iterations: (\d+)", launch)
its = int(run.group(1)) - int(run.group(2))
want = b * 64 * 128 * 4
rows = re.findall(r"^\| tp all-reduce stage 0 \(2 ranks\) \| ([0-9.]+) (B|KiB|MiB) \| (\d+) \| [0-9.]+ (?:us|ms) \| [0-9.]+ GB/s \| n/a \| n/a \|", rep, re.M)
unit = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2}
count = sum(int(c) for size, u, c in rows if round(float(size) * unit[u]) == want)
print(f"tp all-reduces of {want} B: {count} over {its} iterations x {m} microbatches")
sys.exit(0 if count > 0 and count % (its * m) == 0 and count // (its * m) >= 16 else 1)
PY

# Per-stage replication "2-1-1" on 4 ranks (microbatch j on replica j mod 2 of stage 0).
$PLANNER -q solve --gpus 4 --model $M/tiny-gpt.yaml --cluster $C/dgx-a100.yaml --replication 2-1-1 --tp 1 --global-batch 24 --microbatch 1 -o r211.plan.yaml >/dev/null \
  && grep -q 'config: "2-1-1"' r211.plan.yaml && ok || bad "2-1-1 plan"
# Synchronous (1F1B with a flush): the gradients equal one process's.
sed 's/^schedule: "pipedream"/schedule: "1f1b"/' r211.plan.yaml > s211.plan.yaml
$PLANNER -q codegen s211.plan.yaml -o s211 --iterations 1
if timeout 120 mpirun --oversubscribe -np 4 $PLANNER -q run s211 --dump-gradients --run-id multi >/dev/null 2>s211.err \
   && $PLANNER -q run s211 --reference --dump-gradients --run-id single >/dev/null 2>>s211.err; then
  compare s211/runs/single/grads s211/runs/multi/grads && ok || bad "2-1-1 synchronous gradients differ"
else
  bad "2-1-1 synchronous run"; tail -3 s211.err
fi
# --comm-only refuses the asynchronous schedule with one clear error line.
$PLANNER -q codegen r211.plan.yaml -o c211 --iterations 1
timeout 60 mpirun --oversubscribe -np 4 $PLANNER -q run c211 --comm-only >/dev/null 2>c211.err
[ $? != 0 ] && grep -q "^planner: error: .*launch.yaml: schedule pipedream: --comm-only runs the synchronous schedules only" c211.err && ok \
  || bad "--comm-only with pipedream: $(head -2 c211.err)"
# Asynchronous (PipeDream): weight stashing keeps each microbatch's forward and backward on one
# version although newer weights exist by its backward; the loss falls.
$PLANNER -q codegen r211.plan.yaml -o a211 --iterations 12 --lr 3e-3
if timeout 120 mpirun --oversubscribe -np 4 $PLANNER -q run a211 --run-id a >/dev/null 2>a211.err; then
  cat a211/runs/a/weight_stashing.txt
  grep -q "^forward/backward on different weight versions 0$" a211/runs/a/weight_stashing.txt && ok || bad "stashing: versions differ"
  python3 -c "
import re,sys
t=open('a211/runs/a/weight_stashing.txt').read()
stale=int(re.search(r'newer than their stash (\d+)', t).group(1)); sys.exit(0 if stale > 0 else 1)" && ok || bad "stashing never mattered"
  python3 -c "
import csv,sys
rows=list(csv.DictReader(open('a211/runs/a/metrics.csv')))
first,last=float(rows[0]['loss']),float(rows[-1]['loss'])
print(f'asynchronous 2-1-1: loss {first:.4f} -> {last:.4f}')
sys.exit(0 if last < first - 0.3 else 1)" && ok || bad "async loss does not fall"
else
  bad "2-1-1 asynchronous run"; tail -3 a211.err
fi
# Vertical sync (solve --vertical-sync) on the same 2-1-1: every stage ran each minibatch on the version
# tagged at the input stage (vertical_sync.txt), where weight stashing alone (a211 above) split some
# minibatches over versions, a later stage newer; the loss falls; the versions each stage held at
# most are the cost model's (spec/weight_versions.h: 2, 4, 5 for 2-1-1).
grep -q "^minibatches whose stages ran on different weight versions [1-9]" a211/runs/a/vertical_sync.txt && grep -q "^vertical sync off" a211/runs/a/vertical_sync.txt \
  && ok || bad "weight stashing alone: no minibatch on different versions ($(head -3 a211/runs/a/vertical_sync.txt | tr '\n' ' '))"
$PLANNER -q solve --gpus 4 --model $M/tiny-gpt.yaml --cluster $C/dgx-a100.yaml --replication 2-1-1 --tp 1 --global-batch 24 --microbatch 1 \
  --schedule pipedream --vertical-sync -o v211.plan.yaml >/dev/null && $PLANNER -q codegen v211.plan.yaml -o v211 --iterations 6 --lr 3e-3
if timeout 120 mpirun --oversubscribe -np 4 $PLANNER -q run v211 --run-id v >/dev/null 2>v211.err; then
  cat v211/runs/v/vertical_sync.txt
  python3 - v211/runs/v <<'PY' && ok || bad "vertical sync 2-1-1 under mpirun"
import csv, re, sys
d = sys.argv[1]
t = open(d + "/vertical_sync.txt").read()
n = lambda k: int(re.search(k + r" (\d+)", t).group(1))
peaks = [int(x) for x in re.findall(r"versions held at most (\d+)", t)]
rows = list(csv.DictReader(open(d + "/metrics.csv")))
loss = [float(r["loss"]) for r in rows]
print(f"vertical sync 2-1-1: {n('minibatches')} minibatches, loss {sum(loss[:2]) / 2:.4f} -> {sum(loss[-2:]) / 2:.4f}, versions held {peaks}")
ok = t.startswith("vertical sync on") and n("minibatches") == 6 * 24 and n("different weight versions") == 0 and n("tag's version") == 0
ok = ok and peaks == [2, 4, 5] and sum(loss[-2:]) < sum(loss[:2])
ok = ok and "different weight versions 0" in open(d + "/weight_stashing.txt").read()
sys.exit(0 if ok else 1)
PY
else
  bad "vertical sync 2-1-1 run"; tail -3 v211.err
fi

# The loss falls over 15 iterations of the pipelined tiny GPT.
$PLANNER -q codegen pp2-1f1b.plan.yaml -o train --iterations 15 --lr 3e-3
if timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run train --run-id t >/dev/null 2>train.err; then
  python3 -c "
import csv,sys
rows=list(csv.DictReader(open('train/runs/t/metrics.csv')))
first,last=float(rows[0]['loss']),float(rows[-1]['loss'])
print(f'loss {first:.4f} -> {last:.4f}')
sys.exit(0 if last < first - 0.3 else 1)" && ok || bad "loss does not fall"
  [ -s train/runs/t/trace.json ] && grep -q '"name": "F0"' train/runs/t/trace.json && ok || bad "no trace"
  grep -q "bubble fraction" train/runs/t/report.md && ok || bad "no report"
  # The report names the transport: Open MPI with planner's 256 KiB shared-memory eager limit.
  grep -qE "Transport: Open MPI v[0-9.]+, shared-memory eager limit 262144 B" train/runs/t/report.md && ok \
    || bad "transport line: $(grep -o 'Transport: [^)]*' train/runs/t/report.md)"
  # Every pipeline message after warm-up is paired with its send (by tag) in the report's transfer table.
  python3 - train/runs/t/report.md train/launch.yaml <<'PY' && ok || bad "transfer table"
import re, sys
rep, launch = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = int(re.search(r"^num_microbatches: (\d+)", launch, re.M).group(1))
warm = int(re.search(r"warmup_iterations: (\d+)", launch).group(1))
rows = {k: (int(c), t) for k, c, t in re.findall(r"^\| (activation stage 0 -> 1|gradient stage 1 -> 0) \| [^|]+ \| (\d+) \| ([^|]+) \|", rep, re.M)}
want = (15 - warm) * m
print(f"transfer table: {rows} (want {want} of each)")
sys.exit(0 if len(rows) == 2 and all(c == want for c, _ in rows.values()) else 1)
PY
  $PLANNER inspect train/runs/t --svg t.svg > inspect.txt 2>&1 && grep -q "measured timeline of the last iteration" inspect.txt \
    && grep -q "loss per iteration" inspect.txt && grep -q "<svg" t.svg && ok || bad "inspect of a run"
else
  bad "train run"; tail -3 train.err
fi

# A small /dev/shm (a 64 MiB tmpfs in a private mount namespace, as in a default container): planner
# leaves Open MPI's eager limit alone, since a 64 MiB segment per rank would not fit, and Open MPI runs
# without its "not enough space" warning. Needs root and unshare; skipped (not counted) without them.
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  unshare -m sh -c "mount -t tmpfs -o size=64m tmpfs /dev/shm && timeout 60 mpirun --oversubscribe -np 2 $PLANNER profile --comm \
    --collectives send_recv --max-bytes 64 -o shm.yaml" > shm.out 2>&1
  if grep -q "^# transport: Open MPI v[0-9.]*, shared-memory eager limit 4096 B" shm.out && ! grep -q "not enough space" shm.out; then ok
  else bad "small /dev/shm: $(head -3 shm.out)"; fi
else
  echo "skip: small /dev/shm check (needs root and unshare)"
fi

# Warm curves and cold ones after two compute gaps in one profile (--cache warm,cold --gap-ms 0,5):
# all three written, each marked; the solver times the gradient all-reduce on the 5 ms one and
# tensor-parallel all-reduces on the warm one (its note says so). The curves are timed: on a loaded machine a fit can
# come out without a bandwidth (the solver then says "not measured"), so the profile is taken up to three times; the
# failure prints every level's note of the last try. (Failed once in CI under a load of 11 on 2 cores, and once
# beside a second test run: both single tries.)
gap_ok=0
for try in 1 2 3; do
  if timeout 60 mpirun --oversubscribe -np 2 $PLANNER -q profile --comm --cache warm,cold --gap-ms 0,5 --collectives all_reduce \
      --min-bytes 64K --max-bytes 2M --iterations 10 -o gap.yaml >/dev/null 2>gap.err \
    && [ "$(grep -c 'collective: all_reduce' gap.yaml)" = 3 ] && [ "$(grep -c 'cache: cold, gap_s: 0.005,' gap.yaml)" = 1 ] \
    && [ "$(grep -c 'cache: warm,' gap.yaml)" = 1 ]; then
    $PLANNER solve --gpus 2 --pp 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --comm-profile gap.yaml -o gap.plan.yaml > gap.notes 2>&1
    if grep -qE "gradient all-reduces from [0-9.]+ [KM]iB on the curve \(cold caches, 5 ms of compute before each\); tensor-parallel all-reduces on the warm curve" gap.notes; then
      gap_ok=1; break
    fi
  fi
done
if [ $gap_ok = 1 ]; then ok
else bad "gap curves (3 tries): $(grep -c "collective: " gap.yaml 2>/dev/null) curves, $(grep -c "gap_s: 0.005," gap.yaml 2>/dev/null) with a 5 ms gap; $(grep "level '" gap.notes 2>/dev/null | tr '\n' ' ') $(tail -2 gap.err)"; fi

# All-to-all curves through the CLI (--collectives all_to_all, 3 ranks: groups of 2 and 3, every
# result checked by the profiler, #wrong 0), read back by solve, whose note says the level's
# all-to-all is measured.
if timeout 60 mpirun --oversubscribe -np 3 $PLANNER profile --comm --collectives all_to_all,all_reduce --max-bytes 4K --iterations 3 \
    -o a2a.yaml >a2a.out 2>a2a.err; then
  if [ "$(grep -c 'collective: all_to_all' a2a.yaml)" = 2 ] && ! awk '/^ +[0-9]+ /{ if ($NF != 0) bad = 1 } END { exit !bad }' a2a.out \
    && $PLANNER solve --gpus 2 --pp 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --comm-profile a2a.yaml -o a2a.plan.yaml 2>&1 \
      | grep -q "; all-to-all measured (a2a.yaml, mpi 3 ranks)"; then ok
  else bad "all-to-all curves: $(grep -c 'collective: all_to_all' a2a.yaml) curves"; fi
else
  bad "all-to-all profile"; tail -3 a2a.err
fi

# Communication only: the same transfers (all paired in the report), no compute, no loss.
if timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run train --comm-only --iterations 4 --run-id c >/dev/null 2>comm.err; then
  python3 - train/runs/c/report.md train/launch.yaml <<'PY' && ok || bad "communication-only report"
import re, sys
rep, launch = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = int(re.search(r"^num_microbatches: (\d+)", launch, re.M).group(1))
warm = int(re.search(r"warmup_iterations: (\d+)", launch).group(1))
counts = [int(c) for c in re.findall(r"^\| (?:activation stage 0 -> 1|gradient stage 1 -> 0) \| [^|]+ \| (\d+) \|", rep, re.M)]
print(f"communication only: {counts} transfers (want 2 x {(4 - warm) * m})")
sys.exit(0 if counts == [(4 - warm) * m] * 2 and "n/a: communication only" in rep else 1)
PY
else
  bad "communication-only run"; tail -3 comm.err
fi

# Checkpoint every 3 iterations; a run stopped after 3 and resumed to 6 follows the same loss curve.
$PLANNER -q codegen pp2-1f1b.plan.yaml -o ck --iterations 6 --lr 3e-3
timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run ck --run-id full >/dev/null 2>ck.err || bad "ck full run"
timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run ck --run-id part --iterations 3 --checkpoint-every 3 >/dev/null 2>>ck.err || bad "ck part run"
timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run ck --resume part >/dev/null 2>>ck.err || { bad "ck resume"; tail -3 ck.err; }
python3 - <<'PY' && ok || bad "resumed loss curve differs"
import csv, sys
a = [x["loss"] for x in csv.DictReader(open("ck/runs/full/metrics.csv"))]
b = [x["loss"] for x in csv.DictReader(open("ck/runs/part/metrics.csv"))]
print("uninterrupted", a); print("resumed      ", b)
sys.exit(0 if a == b and len(a) == 6 else 1)
PY
out=$(timeout 60 mpirun --oversubscribe -np 2 $PLANNER run ck --resume nope 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -qF "no checkpoint to resume" && ok || bad "resume without checkpoint: rc=$rc $out"

# Bad launch files: clear errors before any communication.
cp -r train broken
sed -i 's/^pp: 2/pp: two/' broken/launch.yaml
out=$($PLANNER run broken 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -qF "launch.yaml:" && ok || { bad "corrupt launch.yaml: rc=$rc $out"; }
out=$(timeout 60 mpirun --oversubscribe -np 3 $PLANNER run train 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -qF "has 2 ranks but this job has 3" && ok || bad "wrong rank count: rc=$rc"
out=$($PLANNER run train 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -qF "start them with bash train/run.sh" && ok || bad "no mpirun: rc=$rc"

# device: cuda without a GPU: one clear line, exit 1, before any training.
if ! nvidia-smi >/dev/null 2>&1; then
  $PLANNER -q solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o one.plan.yaml >/dev/null
  $PLANNER -q codegen one.plan.yaml -o cuda1 --device cuda --iterations 1
  out=$($PLANNER run cuda1 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -qE "device cuda: (no CUDA device|built without CUDA)" && ok || bad "cuda without a GPU: rc=$rc $out"
fi

# A rank killed mid-run ends the job (non-zero) instead of hanging, and the survivor names the
# lost rank (its peer watch: well before the 10 s timeout).
$PLANNER -q codegen pp2-1f1b.plan.yaml -o long --iterations 100000 --timeout 10
start=$(date +%s)
timeout 60 mpirun --oversubscribe -np 2 $PLANNER -q run long --run-id k >/dev/null 2>long.err &
job=$!
sleep 3
victim=$(pgrep -f "^$PLANNER -q run long" | tail -1)
vrank=$(tr '\0' '\n' < /proc/$victim/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
[ -n "$victim" ] && kill -9 $victim
wait $job
rc=$?
took=$(( $(date +%s) - start ))
[ $rc != 0 ] && [ $rc != 124 ] && [ $took -lt 40 ] && ok || bad "killed rank: rc=$rc after ${took}s"
[ -n "$vrank" ] && grep -q "planner: error: rank $vrank (pid $victim, on this node) exited while rank $(( 1 - vrank )) of 2 was running" long.err && ok ||
  bad "killed rank $vrank (pid $victim) not named: $(cat long.err)"

# Mixed precision (docs/runtime.md, "Running in the plan's precision"): the TP, PP, DP and 2-1-1 cases
# in bf16; every multi-rank run's gradients against the one-process bf16 run's
# within 2e-2 relative L2 (not exact: the ranks sum in another order and round the 16-bit activations at
# other points; bf16 keeps 8 significant bits, 2^-8 = 3.9e-3 per rounding).
case_bf16() {
  local name=$1 np=$2; shift 2
  # local-cpu has no bf16 peak: the plan comes from a bf16 CPU profile (its times need none), in bf16 (codegen
  # writes it into the model file)
  $PLANNER -q solve --gpus $np --model $M/tiny-gpt.yaml --profile bf16.profile.yaml --cluster $C/local-cpu.yaml "$@" -o $name.plan.yaml >/dev/null \
    && grep -q 'dtype: "bf16"' $name.plan.yaml && $PLANNER -q codegen $name.plan.yaml -o $name --iterations 1 \
    && grep -q '^dtype: bf16' $name/model.yaml \
    && timeout 120 mpirun --oversubscribe -np $np $PLANNER -q run $name --dump-gradients --run-id multi >/dev/null 2>$name.err \
    && $PLANNER -q run $name --reference --dump-gradients --run-id single >/dev/null 2>>$name.err \
    && compare $name/runs/single/grads $name/runs/multi/grads 2e-2 && ok || { bad "$name (bf16) gradients"; tail -3 $name.err; }
}
$PLANNER -q profile $M/tiny-gpt.yaml --device cpu --threads 1 --microbatch-sizes 1,2,4 --tp 1,2 --precision bf16 -o bf16.profile.yaml >/dev/null 2>&1 \
  || bad "bf16 CPU profile"
case_bf16 bf16-pp2 2 --pp 2 --schedule 1f1b
case_bf16 bf16-dp2 2 --pp 1 --tp 1
# TP: each rank holds a shard (the files differ in size): the global gradient norm and the losses instead.
$PLANNER -q solve --gpus 2 --model $M/tiny-gpt.yaml --profile bf16.profile.yaml --cluster $C/local-cpu.yaml --tp 2 --pp 1 --sp off -o btp2.plan.yaml >/dev/null \
  && grep -q 'dtype: "bf16"' btp2.plan.yaml && $PLANNER -q codegen btp2.plan.yaml -o btp2 --iterations 3 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run btp2 --dump-gradients --run-id multi >/dev/null 2>btp2.err \
  && $PLANNER -q run btp2 --reference --dump-gradients --run-id single >/dev/null 2>>btp2.err && python3 - btp2 <<'PY' && ok || { bad "bf16 tp2"; tail -3 btp2.err; }
import csv, sys
d = sys.argv[1]
g = [float(open(f"{d}/runs/{r}/grad_norm.txt").read()) for r in ("multi", "single")]
l = [[float(x["loss"]) for x in csv.DictReader(open(f"{d}/runs/{r}/metrics.csv"))] for r in ("multi", "single")]
rel = abs(g[0] - g[1]) / g[1]
dl = max(abs(a - b) / b for a, b in zip(*l))
print(f"{d} (bf16): gradient norm {g[0]:.6e} vs {g[1]:.6e} (rel {rel:.1e}); losses differ by {dl:.1e} relative at most")
sys.exit(0 if rel < 2e-2 and dl < 1e-2 else 1)
PY
sed -e 's/^schedule: "pipedream"/schedule: "1f1b"/' -e 's/^  dtype: "fp32"/  dtype: "bf16"/' r211.plan.yaml > b211.plan.yaml
$PLANNER -q codegen b211.plan.yaml -o b211 --iterations 1 && grep -q '^dtype: bf16' b211/model.yaml \
  && timeout 120 mpirun --oversubscribe -np 4 $PLANNER -q run b211 --dump-gradients --run-id multi >/dev/null 2>b211.err \
  && $PLANNER -q run b211 --reference --dump-gradients --run-id single >/dev/null 2>>b211.err \
  && compare b211/runs/single/grads b211/runs/multi/grads 2e-2 && ok || { bad "2-1-1 (bf16) gradients"; tail -3 b211.err; }
# bf16 against fp32 (one process, same data and initial weights): gradients within 5e-2 relative L2;
# over 8 iterations every loss within 1% of fp32's and the loss falls; the report's model state is
# 18 bytes per parameter measured and predicted.
$PLANNER -q codegen bf16-pp2.plan.yaml -o bf16run --iterations 8 && sed 's/^  dtype: "bf16"/  dtype: "fp32"/' bf16-pp2.plan.yaml > fp32-pp2.plan.yaml \
  && $PLANNER -q codegen fp32-pp2.plan.yaml -o fp32run --iterations 8 \
  && $PLANNER -q run bf16run --reference --dump-gradients --run-id r >/dev/null 2>bf16run.err \
  && $PLANNER -q run fp32run --reference --dump-gradients --run-id r >/dev/null 2>>bf16run.err \
  && compare fp32run/runs/r/grads bf16run/runs/r/grads 5e-2 \
  && python3 - bf16run/runs/r fp32run/runs/r <<'PY' && ok || { bad "bf16 against fp32"; tail -3 bf16run.err; }
import csv, re, sys
b, f = ([float(r["loss"]) for r in csv.DictReader(open(d + "/metrics.csv"))] for d in sys.argv[1:3])
assert len(b) == len(f) == 8, (b, f)
worst = max(abs(x - y) / y for x, y in zip(b, f))
assert worst < 0.01, f"bf16 loss off fp32's by {worst:.2%}"
assert b[-1] < b[0], b
rep = open(sys.argv[1] + "/report.md").read()
rows = re.findall(r"^\| 0 \| (\d+) \| [\d.]+ MiB \| ([\d.]+) \| ([\d.]+) \|$", rep, re.M)
assert rows and rows[0][1] == "18.00" and rows[0][2] == "18.00", rows
assert "stored in bf16 (2 B per element)" in rep
print(f"bf16 losses within {worst:.3%} of fp32's; 18.00 bytes per parameter")
PY
# fp16 with dynamic loss scaling trains: the loss falls, the report names the scaler. The plan keeps
# Megatron's fp16 gradient buffer (grad_dtype fp16, as solve writes for fp16): predicted 16 bytes per
# parameter, measured 18 (this runtime accumulates in fp32), and the report says why.
sed -e 's/^  dtype: "bf16"/  dtype: "fp16"/' -e 's/^grad_dtype: "fp32"/grad_dtype: "fp16"/' bf16-pp2.plan.yaml > fp16-pp2.plan.yaml \
  && grep -q '^grad_dtype: "fp16"' fp16-pp2.plan.yaml && $PLANNER -q codegen fp16-pp2.plan.yaml -o fp16run --iterations 6 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run fp16run --run-id r >/dev/null 2>fp16run.err \
  && python3 - fp16run/runs/r <<'PY' && ok || { bad "fp16 loss scaling run"; tail -3 fp16run.err; }
import csv, sys
loss = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[1] + "/metrics.csv"))]
assert loss[-1] < loss[0], loss
rep = open(sys.argv[1] + "/report.md").read()
assert "fp16 dynamic loss scaling: 0 of 6 optimizer steps skipped" in rep
import re
rows = re.findall(r"^\| \d \| (\d+) \| [\d.]+ MiB \| ([\d.]+) \| ([\d.]+) \|$", rep, re.M)
assert rows and all(r[1] == "18.00" and r[2] == "16.00" for r in rows), rows
assert "The plan keeps gradients in fp16 (2 bytes per parameter" in rep, rep
print("fp16: 18.00 bytes per parameter measured against the plan's 16.00 (fp16 gradient buffer), said in the report")
PY

# A plan whose optimizer keeps bf16 moments beside fp32 remainders (optimizer_state bf16-moments: 2 + 4 + 6 = 12 bytes
# per parameter predicted) runs with this runtime's fp32 master weights and moments (18 measured); the report says why.
sed -e 's/^grad_dtype: "fp32"/grad_dtype: "fp32"\noptimizer_state: "bf16-moments"/' bf16-pp2.plan.yaml > bf16os.plan.yaml \
  && grep -q '^optimizer_state: "bf16-moments"' bf16os.plan.yaml && $PLANNER -q codegen bf16os.plan.yaml -o bf16os --iterations 3 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run bf16os --run-id r >/dev/null 2>bf16os.err \
  && python3 - bf16os/runs/r <<'PY' && ok || { bad "bf16 optimizer state run"; tail -3 bf16os.err; }
import re, sys
rep = open(sys.argv[1] + "/report.md").read()
rows = re.findall(r"^\| \d \| (\d+) \| [\d.]+ MiB \| ([\d.]+) \| ([\d.]+) \|$", rep, re.M)
assert rows and all(r[1] == "18.00" and r[2] == "12.00" for r in rows), rows
assert "The plan keeps the optimizer state as bf16-moments (6 bytes per parameter); this runtime keeps fp32 master weights and moments, 6 bytes per parameter more." in rep, rep
print("bf16-moments: 18.00 bytes per parameter measured against the plan's 12.00, said in the report")
PY

# fp16 overflow: a loss scale too large for fp16 (--initial-loss-scale, Megatron's flag) makes the activation
# gradients overflow; every rank skips those steps together (no update: the losses up to the first applied
# step equal a run that skips every step) and the scale halves as Megatron's hysteresis says (the first
# overflow spends the hysteresis, each later one halves: initial / 2^(k-1) after k skips).
$PLANNER -q codegen fp16-pp2.plan.yaml -o fp16ov --iterations 8 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run fp16ov --run-id s7 --initial-loss-scale 1e7 >/dev/null 2>fp16ov.err \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run fp16ov --run-id s30 --initial-loss-scale 1e30 >/dev/null 2>>fp16ov.err \
  && python3 - fp16ov/runs/s7 fp16ov/runs/s30 <<'PY' && ok || { bad "fp16 overflow skips and halves"; tail -3 fp16ov.err; }
import csv, re, sys
a, b = ([float(r["loss"]) for r in csv.DictReader(open(d + "/metrics.csv"))] for d in sys.argv[1:3])
rep = open(sys.argv[1] + "/report.md").read()
m = re.search(r"(\d+) of 8 optimizer steps skipped on overflow; loss scale ([0-9.e+]+) at the end \(initial 1e\+07", rep)
assert m, rep
k, scale = int(m.group(1)), float(m.group(2))
assert 1 <= k < 8, k
assert scale == 1e7 / 2 ** (k - 1), (k, scale)
assert "8 of 8 optimizer steps skipped" in open(sys.argv[2] + "/report.md").read()
assert a[:k + 1] == b[:k + 1] and a[k + 1] != b[k + 1], (k, a, b)
print(f"fp16: {k} overflowing steps skipped on every rank, scale 1e7 -> {scale:g}")
PY
# fp16 checkpoints hold the loss scaler's state: 3 iterations at 1e7 (2 overflowing, skipped), checkpoint, resume
# to 8 without the flag: the scale, and so the losses, as the uninterrupted run s7's.
timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run fp16ov --run-id p7 --iterations 3 --checkpoint-every 3 --initial-loss-scale 1e7 >/dev/null 2>>fp16ov.err \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run fp16ov --resume p7 >/dev/null 2>>fp16ov.err \
  && python3 - fp16ov/runs <<'PY' && ok || { bad "fp16 resume with the loss scale"; tail -3 fp16ov.err; }
import csv, re, sys
a, b = ([float(r["loss"]) for r in csv.DictReader(open(f"{sys.argv[1]}/{d}/metrics.csv"))] for d in ("s7", "p7"))
assert len(a) == len(b) == 8 and a == b, (a, b)
scale = lambda d: re.search(r"loss scale ([0-9.e+]+) at the end", open(f"{sys.argv[1]}/{d}/report.md").read()).group(1)
assert scale("s7") == scale("p7"), (scale("s7"), scale("p7"))
print(f"fp16 resumed: 8 losses as the uninterrupted run's, loss scale {scale('p7')}")
PY
# fp8 (bf16 storage, FP8 e4m3 GEMMs with per-tensor scaling, emulated on CPU ranks) trains beside bf16: the same
# 8 iterations as bf16run (one process, same data and initial weights), every loss within 5% of bf16's and
# falling; the report names the emulation and the plan's 20 B per parameter (Transformer Engine's FP8 weight
# copy) against the run's 18.
sed 's/^  dtype: "bf16"/  dtype: "fp8"/' bf16-pp2.plan.yaml > fp8-pp2.plan.yaml && $PLANNER -q codegen fp8-pp2.plan.yaml -o fp8run --iterations 8 \
  && $PLANNER -q run fp8run --reference --run-id r >/dev/null 2>fp8run.err \
  && python3 - fp8run/runs/r bf16run/runs/r <<'PY' && ok || { bad "fp8 run"; tail -3 fp8run.err; }
import csv, re, sys
e, b = ([float(r["loss"]) for r in csv.DictReader(open(d + "/metrics.csv"))] for d in sys.argv[1:3])
assert len(e) == len(b) == 8, (e, b)
worst = max(abs(x - y) / y for x, y in zip(e, b))
assert 0 < worst < 0.05, f"fp8 loss off bf16's by {worst:.2%} (0: the GEMMs were not quantised)"
assert e[-1] < e[0], e
rep = open(sys.argv[1] + "/report.md").read()
rows = re.findall(r"^\| 0 \| (\d+) \| [\d.]+ MiB \| ([\d.]+) \| ([\d.]+) \|$", rep, re.M)
assert rows and rows[0][1] == "18.00" and rows[0][2] == "20.00", rows
assert "quantised to FP8 e4m3 with per-tensor scaling (emulated)" in rep, rep
print(f"fp8 losses within {worst:.3%} of bf16's; 18.00 bytes per parameter against the plan's 20.00")
PY

# The same fp8 plan with FP8 parameters (fp8_param_gather: the weights in FP8 alone, 18 B per parameter planned, 2 B
# less): this runtime keeps bf16 weights and casts per use whatever the plan says, so it trains exactly as fp8run did;
# the report prices the plan's 18 B and says what the runtime keeps instead.
sed 's/^grad_dtype: "fp32"/grad_dtype: "fp32"\nfp8_param_gather: true/' fp8-pp2.plan.yaml > fp8p-pp2.plan.yaml \
  && grep -q '^fp8_param_gather: true' fp8p-pp2.plan.yaml && $PLANNER -q codegen fp8p-pp2.plan.yaml -o fp8prun --iterations 8 \
  && grep -qx 'fp8_param_gather: true' fp8prun/launch.yaml \
  && $PLANNER -q run fp8prun --reference --run-id r >/dev/null 2>fp8prun.err \
  && python3 - fp8prun/runs/r fp8run/runs/r <<'PY' && ok || { bad "fp8 params run"; tail -3 fp8prun.err; }
import csv, re, sys
p, e = ([float(r["loss"]) for r in csv.DictReader(open(d + "/metrics.csv"))] for d in sys.argv[1:3])
assert p == e, (p, e)
rep = open(sys.argv[1] + "/report.md").read()
rows = re.findall(r"^\| 0 \| (\d+) \| [\d.]+ MiB \| ([\d.]+) \| ([\d.]+) \|$", rep, re.M)
assert rows and rows[0][1] == "18.00" and rows[0][2] == "18.00", rows
assert "The plan keeps FP8 parameters (the weights in FP8 alone, Megatron --fp8-param-gather); this runtime keeps bf16 weights" in rep, rep
print("fp8 parameters: the fp8 run's 8 losses exactly; the plan's 18.00 bytes per parameter, the difference said")
PY

# bf16 checkpoints hold the fp32 masters: 3 iterations, checkpoint, resume to 6: the same 6 losses as one
# uninterrupted run (the rounded 16-bit weights alone would not give them).
$PLANNER -q codegen bf16-pp2.plan.yaml -o bf16ck --iterations 6 \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run bf16ck --run-id full >/dev/null 2>bf16ck.err \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run bf16ck --iterations 3 --checkpoint-every 3 --run-id part >/dev/null 2>>bf16ck.err \
  && timeout 120 mpirun --oversubscribe -np 2 $PLANNER -q run bf16ck --resume part >/dev/null 2>>bf16ck.err \
  && python3 - bf16ck/runs <<'PY' && ok || { bad "bf16 resume"; tail -3 bf16ck.err; }
import csv, sys
a, b = ([r["loss"] for r in csv.DictReader(open(f"{sys.argv[1]}/{d}/metrics.csv"))] for d in ("full", "part"))
assert len(a) == 6 and a == b, (a, b)
PY

echo "run: $pass passed, $fail failed"
[ $fail = 0 ]
