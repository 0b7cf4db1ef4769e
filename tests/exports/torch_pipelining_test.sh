#!/usr/bin/env bash
# The generated torch_pipelining.py run by torch.distributed.pipelining itself (torch 2.15, gloo, CPU ranks):
# tiny-gpt plans solved with each schedule (gpipe, 1f1b, 1f1b with fewer microbatches than stages, interleaved,
# zb-h1, dualpipev; 2 ranks, run in one torchrun by torch_pipelining_driver.py), pp2 x dp2 and tiny-llama pp2 x tp2 (4 ranks,
# each file run unedited as `torchrun --nproc-per-node 4 torch_pipelining.py`). Asserts each rank's stages, TP's
# sharding, a falling loss and, per step, the pipelined loss equal to the one-process reference run of the same
# model, data and seed within 1e-4. Fails with the reason when the engines' venv is missing (docs/exports.md).
set -u
PLANNER=$1
SRC=$2
STEPS=4
PY=$(bash "$SRC/tests/exports/venv_python.sh") || { echo "FAIL torch_pipelining: no torch to run the export with (see above)"; exit 1; }
TORCHRUN=$(dirname "$PY")/torchrun
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
M=$SRC/configs/models/tiny-gpt.yaml
solve() {  # solve NAME GPUS ARGS...: a tiny-gpt plan and its launch directory
  local name=$1 gpus=$2; shift 2
  if ! "$PLANNER" -q solve --model "$M" --cluster "$SRC/configs/clusters/dgx-a100.yaml" --gpus "$gpus" --zero 0 --recompute none \
      -o "$T/$name.plan.yaml" "$@" >/dev/null 2>"$T/$name.err" ||
     ! "$PLANNER" codegen "$T/$name.plan.yaml" -o "$T/$name" --planner-path planner 2>>"$T/$name.err" ||
     [ ! -f "$T/$name/torch_pipelining.py" ]; then
    echo "FAIL $name: no torch_pipelining.py"; cat "$T/$name.err"; fail=1
  fi
}
solve gpipe 2 --pp 2 --tp 1 --schedule gpipe --microbatch 8 --kernels none
solve 1f1b 2 --pp 2 --tp 1 --schedule 1f1b --microbatch 8
solve 1f1b-m1 2 --pp 2 --tp 1 --schedule 1f1b --microbatch 32
solve interleaved 2 --pp 2 --tp 1 --schedule interleaved --interleave 2 --microbatch 8
solve zb-h1 2 --pp 2 --tp 1 --schedule zb-h1 --microbatch 8 --kernels none
solve dualpipev 2 --pp 2 --tp 1 --schedule dualpipev --microbatch 8 --kernels none
solve pp2-dp2 4 --pp 2 --tp 1 --schedule 1f1b --microbatch 4
M=$SRC/configs/models/tiny-llama.yaml  # GQA, SwiGLU, RMSNorm, RoPE, untied embeddings
solve pp2-tp2 4 --pp 2 --tp 2 --schedule 1f1b --microbatch 4 --sp off
[ $fail = 0 ] || exit 1
two="gpipe 1f1b 1f1b-m1 interleaved zb-h1 dualpipev"
files() { for n in "$@"; do echo "$T/$n/torch_pipelining.py"; done; }
start=$(date +%s)
# shellcheck disable=SC2046
"$PY" "$SRC/tests/exports/torch_pipelining_driver.py" reference $STEPS $(files $two pp2-tp2) "$T/pp2-dp2/torch_pipelining.py@sgd@0.5" >"$T/reference.out" 2>&1 || { echo "FAIL reference run"; cat "$T/reference.out"; exit 1; }
t1=$(date +%s)
# shellcheck disable=SC2046
# Each rank's output in its own file (torchrun --redirects 3), read rank after rank: lines of two processes
# sharing one stdout can land in any order, and a rank's line under another plan's header.
"$TORCHRUN" --log-dir "$T/log2" --redirects 3 --nproc-per-node 2 "$SRC/tests/exports/torch_pipelining_driver.py" train $STEPS $(files $two) >"$T/two.torchrun" 2>&1 \
  || { echo "FAIL torchrun (2 ranks)"; tail -40 "$T/two.torchrun"; cat "$T"/log2/*/attempt_0/*/stderr.log | tail -40; exit 1; }
cat "$T"/log2/*/attempt_0/0/stdout.log "$T"/log2/*/attempt_0/1/stdout.log > "$T/two.out"
t2=$(date +%s)
# pp2-dp2 with SGD: Adam would hide a gradient summed instead of averaged over dp (it normalizes the step).
for run in "pp2-dp2 --optimizer sgd --lr 0.5" "pp2-tp2"; do
  set -- $run; n=$1; shift
  (cd "$T/$n" && "$TORCHRUN" --log-dir "$T/log-$n" --redirects 3 --nproc-per-node 4 torch_pipelining.py --steps $STEPS --device cpu "$@") >"$T/$n.torchrun" 2>&1 \
    || { echo "FAIL torchrun $n (4 ranks)"; tail -40 "$T/$n.torchrun"; cat "$T"/log-$n/*/attempt_0/*/stderr.log | tail -40; exit 1; }
  { echo "== $T/$n/torch_pipelining.py"; for r in 0 1 2 3; do cat "$T"/log-$n/*/attempt_0/$r/stdout.log; done; } > "$T/$n.out"
done
t3=$(date +%s)
echo "wall: reference ${t1}-${start} s, 2-rank torchrun $((t2 - t1)) s (6 plans), 4-rank torchruns $((t3 - t2)) s (2 plans)" | sed "s/${t1}-${start}/$((t1 - start))/"
python3 - "$T" $STEPS $two pp2-dp2 pp2-tp2 <<'EOF'
import re, sys
T, steps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def parse(path):
    out, cur = {}, None
    for line in open(path):
        m = re.match(r"== .*/([^/]+)/torch_pipelining\.py", line)
        if m:
            cur = out.setdefault(m.group(1), {"loss": [], "ranks": {}})
            continue
        m = re.match(r"step (\d+) loss ([-0-9.eE+naninf]+)", line)
        if m and cur is not None:
            cur["loss"].append(float(m.group(2)))
        m = re.match(r"rank (\d+): pp (\d+) dp (\d+) tp (\d+) stages \[([0-9, ]*)\] of (\d+), (\d+) parameters, (\w+)", line)
        if m and cur is not None:
            cur["ranks"][int(m.group(1))] = dict(pp=int(m.group(2)), stages=[int(x) for x in m.group(5).split(",")],
                                                 params=int(m.group(7)), cls=m.group(8))
    return out
ref = parse(f"{T}/reference.out")
run = parse(f"{T}/two.out")
run.update(parse(f"{T}/pp2-dp2.out"))
run.update(parse(f"{T}/pp2-tp2.out"))
fails = []
want_stages = {"interleaved": {0: [0, 2], 1: [1, 3]}, "dualpipev": {0: [0, 3], 1: [1, 2]}, "gpipe": {0: [0], 1: [1]},
               "pp2-dp2": {0: [0], 1: [0], 2: [1], 3: [1]}, "pp2-tp2": {0: [0], 1: [0], 2: [1], 3: [1]}}
want_cls = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "1f1b-m1": "ScheduleGPipe", "interleaved": "ScheduleInterleaved1F1B",
            "zb-h1": "ScheduleInterleavedZeroBubble", "dualpipev": "ScheduleDualPipeV"}
for n in names:
    r, p = ref.get(n, {"loss": []})["loss"], run.get(n, {"loss": [], "ranks": {}})
    l = p["loss"]
    if len(l) != steps or len(r) != steps:
        fails.append(f"{n}: {len(l)} pipelined and {len(r)} reference losses, not {steps}")
        continue
    diff = max(abs(a - b) for a, b in zip(l, r))
    ok = diff <= 1e-4 and l[-1] < l[0]
    for rank, ids in want_stages.get(n, {}).items():
        got = p["ranks"].get(rank, {}).get("stages")
        if got != ids:
            fails.append(f"{n}: rank {rank} holds stages {got}, not {ids}")
    if n in want_cls and any(x["cls"] != want_cls[n] for x in p["ranks"].values()):
        fails.append(f"{n}: schedule class {[x['cls'] for x in p['ranks'].values()]}, not {want_cls[n]}")
    print(f"{'ok  ' if ok else 'FAIL'} {n}: losses {' '.join(f'{x:.6f}' for x in l)}; reference {' '.join(f'{x:.6f}' for x in r)}; max diff {diff:.2e}")
    if not ok:
        fails.append(f"{n}: loss not falling or differs from the reference by {diff:.2e} > 1e-4")
# TP shards the blocks (tiny-llama: hidden 64, 4 heads and 2 KV heads of 16, SwiGLU ffn 96, vocab 128): each tp rank holds
# half of q, k, v, o, fc1, gate and fc2, (4096 + 2048 + 2048 + 4096 + 3 x 6144) / 2 = 15488, and whole norms, embedding
# and head: rank 0 embedding 8192 + 2 x 64 + 15488 = 23680, rank 2 2 x 64 + 15488 + final norm 64 + lm_head 8192 = 23744.
tp = run.get("pp2-tp2", {}).get("ranks", {})
for rank, want in ((0, 23680), (1, 23680), (2, 23744), (3, 23744)):
    got = tp.get(rank, {}).get("params")
    if got != want:
        fails.append(f"pp2-tp2: rank {rank} holds {got} parameters, not its TP shard's {want}")
    else:
        print(f"ok   pp2-tp2: rank {rank} holds {got} parameters (its TP shard)")
for f in fails:
    print("FAIL", f)
sys.exit(1 if fails else 0)
EOF
