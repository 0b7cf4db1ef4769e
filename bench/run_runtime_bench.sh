#!/usr/bin/env bash
# Runtime benchmarks for docs/performance.md (2-core machine, one thread per rank):
#  1. 2-rank pipeline (pp=2, 1F1B) and 2-rank data-parallel runs of tiny-gpt planned from a
#     profile taken with 2 ranks profiling at once: predicted vs measured iteration (median of
#     20 after 2 warm-up) and bubble fraction
#  2. runtime overhead: a 1-rank run's time per microbatch vs the sum of its profiled kernel times
#  3. the data-parallel all-reduce inside the runtime vs the comm profile's cold curves (after the
#     eviction alone, and after 20 ms of compute), and a 2-rank tensor-parallel run's all-reduces
#     vs the cold curve
#  4. pipeline send/recv inside the runtime vs the comm profile, and a plain-MPI one-way transfer
#     under the same memory conditions (bench/p2p_contention.cc)
# The MPI transport is planner's (shared-memory eager limit 256 KiB; all-reduces from 1 MiB as a
# segmented ring of 128 KiB segments; runtime/comm/mpi_comm.cc) unless exported:
#   OMPI_MCA_btl_vader_eager_limit=4096 bash bench/run_runtime_bench.sh  (Open MPI's default
#     protocol: CMA rendezvous above 32 KiB)
#   OMPI_MCA_coll_tuned_use_dynamic_rules=0 bash bench/run_runtime_bench.sh  (Open MPI's own
#     all-reduce algorithm choice)
# run everything the library's way for an A/B.
set -eu
cd "$(dirname "$0")/.."
R=$PWD
P=$PWD/build/planner/planner
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
# One reader of the comm profiles' curves for the checks below: the time at `nbytes` by log-log
# interpolation of the measured points (the cost model's own rule, docs/cost_model.md section 3).
cat > curve.py <<'PY'
import math, re
# gap: the compute before each operation in seconds (--gap-ms), None for a curve without one.
def at(path, coll, cache, nbytes, gap=None):
    comm = open(path).read()
    cond = cache + (f', gap_s: {gap}' if gap else '') + ', alpha_s'
    m = re.search(r'collective: ' + coll + r', level: "node", group_size: 2, backend: mpi, cache: ' + re.escape(cond) + r'.*?points: \[(.*?)\]\}', comm, re.S)
    pts = [tuple(map(float, p.split(","))) for p in re.findall(r'\[([^\[\]]+)\]', m.group(1))]
    lo = max(p for p in pts if p[0] <= nbytes); hi = min(p for p in pts if p[0] >= nbytes)
    f = 0 if hi[0] == lo[0] else (math.log(nbytes) - math.log(lo[0])) / (math.log(hi[0]) - math.log(lo[0]))
    return math.exp(math.log(lo[1]) + f * (math.log(hi[1]) - math.log(lo[1])))
PY
cat > dp.py <<'PY'
import json, sys
from curve import at
allev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("name") in ("dp all-reduce", "dp all-reduce busy")]
# Per iteration, the rank that arrives last waits for nobody: its duration is the transfer
# (with overlap: the reducer thread's summed segment times).
per_rank = [[e["dur"] for e in allev if e["pid"] == r] for r in (0, 1)]
durs = sorted(min(a, b) for a, b in list(zip(*per_rank))[2:])
meas = durs[len(durs) // 2] * 1e-6
nbytes = 4 * (512*128 + 64*128 + 4 * (2*128*2 + 384*128 + 384 + 128*128 + 128 + 512*128 + 512 + 128*512 + 128) + 2*128 + 512*128)
pred = at(sys.argv[2], 'all_reduce', 'cold', nbytes)
bw = lambda t: nbytes / t / 1e9
line = (f"DP all-reduce of all gradients ({nbytes/1e6:.2f} MB): runtime {meas*1e3:.3f} ms ({bw(meas):.2f} GB/s busbw), "
        f"comm profile {pred*1e3:.3f} ms ({bw(pred):.2f} GB/s): {pred/meas:.0%} of the profiled rate")
if len(sys.argv) > 3:  # the curve taken with compute before each operation (--gap-ms)
    gap = at(sys.argv[3], 'all_reduce', 'cold', nbytes, gap=0.02)
    line += f"; after-compute curve {gap*1e3:.3f} ms: {gap/meas:.0%} [gap]"
print(line)
PY
cat > p2p.py <<'PY'
import json, sys, collections
from curve import at
ev = json.load(open(sys.argv[1]))["traceEvents"]
sends = collections.defaultdict(list); recvs = collections.defaultdict(list)
for e in ev:
    n = e.get("name", "")
    if n.startswith("send "):
        key, nbytes = n[5:].split(" "); sends[key].append((e["ts"] * 1e-6, int(nbytes[:-1])))
    elif n.startswith("recv "):
        recvs[n[5:]].append((e["ts"] * 1e-6, (e["ts"] + e["dur"]) * 1e-6))
xfer = []
for key, rs in recvs.items():
    for (s_ts, nbytes), (r_ts, r_end) in zip(sends[key], rs):
        d = r_end - max(s_ts, r_ts)
        if d > 0: xfer.append((nbytes, d))
xfer.sort(key=lambda x: x[1])
nbytes, med = xfer[len(xfer) // 2]
pred = at(sys.argv[2], 'send_recv', 'cold', nbytes)
print(f"pipeline send/recv of {nbytes} B ({len(xfer)} transfers): runtime median {med*1e6:.1f} us ({nbytes/med/1e9:.2f} GB/s), "
      f"comm profile {pred*1e6:.1f} us ({nbytes/pred/1e9:.2f} GB/s): {pred/med:.0%} of the profiled rate")
PY
cat > tp.py <<'PY'
import re, sys
from curve import at
rep = open(sys.argv[1]).read()
unit = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2}
scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
rows = [(round(float(s) * unit[u]), int(c), float(t) * scale[tu]) for s, u, c, t, tu in
        re.findall(r"^\| tp all-reduce stage 0 \(2 ranks\) \| ([0-9.]+) (B|KiB|MiB) \| (\d+) \| ([0-9.]+) (us|ms|s) \|", rep, re.M)]
nbytes, count, meas = max(rows)  # the activation-sized all-reduces (the largest)
cold, warm = at(sys.argv[2], 'all_reduce', 'cold', nbytes), at(sys.argv[2], 'all_reduce', 'warm', nbytes)
print(f"TP all-reduce of {nbytes} B ({count} calls, fastest rank of the pair each): runtime median {meas*1e6:.1f} us "
      f"({nbytes/meas/1e9:.2f} GB/s busbw), warm curve (the solver's for TP) {warm*1e6:.1f} us: {warm/meas:.0%} of the profiled rate; "
      f"cold curve {cold*1e6:.1f} us: {cold/meas:.0%}")
PY
export PYTHONPATH=$T
M=$OLDPWD/configs/models/tiny-gpt.yaml
C=$OLDPWD/configs/clusters/local-cpu.yaml
mpirun --oversubscribe -np 2 $P -q profile $M --device cpu --threads 1 --microbatch-sizes 1,2,4,8 -o two.profile.yaml >/dev/null
$P -q profile $M --device cpu --threads 1 --microbatch-sizes 1,2,4,8 -o one.profile.yaml >/dev/null
# The tensor-parallel shards, co-profiled the same way, for the TP run.
mpirun --oversubscribe -np 2 $P -q profile $M --device cpu --threads 1 --microbatch-sizes 1,2,4,8 --tp 1,2 -o tp.profile.yaml >/dev/null
# Collectives three ways in one profile: back to back (warm, nccl-tests style: the solver's curve
# for tensor-parallel all-reduces, whose input was just computed, and the reference for the
# communication-only runs), with cold caches after the eviction alone (pipeline sends, a
# microbatch's compute apart), and cold after 20 ms of compute in registers and the eviction, as
# the gradient all-reduce meets it after a backward (--gap-ms; docs/profiler.md).
mpirun --oversubscribe -np 2 $P -q profile --comm --cache warm,cold --gap-ms 0,20 --collectives all_reduce,send_recv --max-bytes 8M -o comm.profile.yaml >/dev/null
run() {  # run NAME PROFILE SOLVE-FLAGS...
  local name=$1 prof=$2; shift 2
  $P -q solve --model $M --profile $prof --cluster $C --comm-profile comm.profile.yaml "$@" -o $name.plan.yaml >/dev/null
  $P -q codegen $name.plan.yaml -o $name --iterations 22 --warmup 2
  local np; np=$(grep -c "^  - {rank:" $name/launch.yaml)
  if [ "$np" = 1 ]; then $P -q run $name --run-id r >/dev/null; else bash $name/run.sh --run-id r >/dev/null 2>&1; fi
  echo "== $name ($(grep '^parallel' $name.plan.yaml), $(grep '^schedule' $name.plan.yaml), b=$(grep '^microbatch_size' $name.plan.yaml | cut -d' ' -f2) m=$(grep '^num_microbatches' $name.plan.yaml | cut -d' ' -f2))"
  sed -n '5,6p' $name/runs/r/report.md
  sed -n '/^| rank | stage/,/^$/p' $name/runs/r/report.md
  grep -E '^\| (activation|gradient|dp all-reduce|tp all-reduce)' $name/runs/r/report.md || true
}
run pipeline two.profile.yaml --gpus 2 --pp 2 --schedule 1f1b
run data-parallel two.profile.yaml --gpus 2 --pp 1 --schedule 1f1b
run pipeline-b4 two.profile.yaml --gpus 2 --pp 2 --schedule 1f1b --microbatch 4
run pipeline-gpipe two.profile.yaml --gpus 2 --pp 2 --schedule gpipe --microbatch 1
run pipeline-interleaved two.profile.yaml --gpus 2 --pp 2 --schedule interleaved --microbatch 1
run pipeline-zbh1 two.profile.yaml --gpus 2 --pp 2 --schedule zb-h1 --microbatch 1
run tensor-parallel tp.profile.yaml --gpus 2 --pp 1 --tp 2
run one-rank one.profile.yaml --gpus 1 --microbatch 1 --global-batch 32
# The runtime's transfer path alone: the same two plans with --comm-only (zeros instead of every
# layer, so nothing contends with the copies), against the plan (cold curve) and the warm curve.
for name in pipeline-b4 data-parallel; do
  bash $name/run.sh --run-id comm --comm-only >/dev/null 2>&1
  echo "== $name --comm-only"
  grep -E '^\| (activation|gradient|dp all-reduce)' $name/runs/comm/report.md
done
python3 - comm.profile.yaml <<'PY'
import sys
from curve import at
w = sys.argv[1]
print(f"warm curve: send/recv 128 KiB {at(w, 'send_recv', 'warm', 131072)*1e6:.1f} us, all-reduce 3.56 MiB {at(w, 'all_reduce', 'warm', 3.56*2**20)*1e3:.3f} ms")
PY
# Overhead: the 1-rank run's time per microbatch against the profile's sum (b = 1). The profile
# and the run are a minute apart on a shared host, so nine fresh profile + run pairs, and their median;
# also the executor's own share: the run's iteration against its own measured kernel time.
overhead() {  # overhead PROFILE REPORT
python3 - "$1" "$2" <<'PY'
import re, sys
prof = open(sys.argv[1]).read()
total = 0.0
for m in re.finditer(r'microbatch: 1, tp: 1, forward_s: ([0-9.e+-]+), backward_s: ([0-9.e+-]+)', prof):
    total += float(m.group(1)) + float(m.group(2))
rep = open(sys.argv[2]).read()
it = re.search(r'\| iteration \| ([0-9.]+) (ms|s|us)', rep)
scale = {'ms': 1e-3, 's': 1.0, 'us': 1e-6}[it.group(2)]
per_mb = float(it.group(1)) * scale / 32
comp = re.search(r'^\| 0 \| 0 \| ([0-9.]+) (ms|s|us) \|', rep, re.M)
own = float(comp.group(1)) * {'ms': 1e-3, 's': 1.0, 'us': 1e-6}[comp.group(2)]
print(f"1-rank run: {per_mb*1e3:.3f} ms per microbatch (iteration / 32, optimizer included) vs profiled kernels {total*1e3:.3f} ms: "
      f"{per_mb/total:.3f}x; iteration vs the run's own kernel time: {per_mb * 32 / own:.4f}x")
PY
}
overhead one.profile.yaml one-rank/runs/r/report.md | tee overhead.txt
for k in 2 3 4 5 6 7 8 9; do
  $P -q profile $M --device cpu --threads 1 --microbatch-sizes 1 -o one$k.profile.yaml >/dev/null
  $P -q solve --model $M --profile one$k.profile.yaml --cluster $C --gpus 1 --microbatch 1 --global-batch 32 -o one$k.plan.yaml >/dev/null
  $P -q codegen one$k.plan.yaml -o one$k --iterations 12 --warmup 2
  $P -q run one$k --run-id r >/dev/null
  overhead one$k.profile.yaml one$k/runs/r/report.md | tee -a overhead.txt
done
python3 -c "
import re
r = sorted(float(re.search(r': ([0-9.]+)x;', l).group(1)) for l in open('overhead.txt'))
print(f'1-rank overhead: median {r[len(r) // 2]:.3f}x of {len(r)} profile + run pairs ({r[0]:.3f}x - {r[-1]:.3f}x)')"
# DP all-reduce inside the runtime (the gradients live in one flat bucket: one message, no copies) vs the
# comm profile's measured all-reduce at that size (log-log interpolation of its points).
python3 dp.py data-parallel/runs/r/trace.json comm.profile.yaml comm.profile.yaml
# Pipeline send/recv inside the runtime: each receive paired with its send (same name, in order;
# one monotonic clock on this machine). Transfer = receive end - max(send post, receive post):
# the part of the wait after both sides were ready. Against the comm profile's send/recv curve.
for RUN in pipeline pipeline-b4; do python3 p2p.py $RUN/runs/r/trace.json comm.profile.yaml; done
# Tensor-parallel all-reduces inside the runtime (the report's rows: per call the fastest rank of
# the pair, median) against the cold curve without a gap (a layer's compute apart).
python3 tp.py tensor-parallel/runs/r/report.md comm.profile.yaml
# The comm curve and the runtime's figures move with the host from minute to minute (the cold
# all-reduce curve measured 0.36-0.57 ms at this size in runs minutes apart), so a ratio from a
# profile taken at the start and a run a minute later mixes the host's drift into it. Nine fresh
# (cold comm profile, DP run, b = 4 pipeline run) triples, seconds apart: each ratio is taken within
# its triple, and the median of the nine is quoted. Each triple also takes the after-compute
# all-reduce curve (--gap-ms 20) just before its runs, for the A/B of the DP share.
for k in 1 2 3 4 5 6 7 8 9; do
  mpirun --oversubscribe -np 2 $P -q profile --comm --cache cold --collectives all_reduce,send_recv --max-bytes 8M -o comm$k.profile.yaml >/dev/null
  mpirun --oversubscribe -np 2 $P -q profile --comm --cache cold --gap-ms 20 --collectives all_reduce --min-bytes 1M --max-bytes 8M -o comm-gap$k.profile.yaml >/dev/null
  bash data-parallel/run.sh --run-id p$k >/dev/null 2>&1
  bash pipeline-b4/run.sh --run-id p$k >/dev/null 2>&1
  python3 dp.py data-parallel/runs/p$k/trace.json comm$k.profile.yaml comm-gap$k.profile.yaml >> dp_pairs.txt
  python3 p2p.py pipeline-b4/runs/p$k/trace.json comm$k.profile.yaml >> p2p_pairs.txt
done
python3 - dp_pairs.txt p2p_pairs.txt <<'PY'
import re, sys
for k, line in enumerate(open(sys.argv[1]), 1):  # each triple's figures: is the run or the curve moving?
    print(f"  triple {k}: {line.strip()}")
for path, what, pat in ((sys.argv[1], "DP all-reduce", r': ([0-9]+)% of the profiled rate'),
                        (sys.argv[1], "DP all-reduce against the after-compute (--gap-ms 20) curve", r': ([0-9]+)% \[gap\]'),
                        (sys.argv[2], "pipeline send/recv of 128 KiB", r': ([0-9]+)% of the profiled rate')):
    r = sorted(int(m.group(1)) for m in (re.search(pat, l) for l in open(path)) if m)
    print(f"{what}, curve and run seconds apart: median {r[len(r) // 2]}% of the profiled rate over {len(r)} triples ({', '.join(f'{x}%' for x in r)})")
PY
# The same one-way transfer in a plain MPI program under the memory conditions of a pipeline
# receive (bench/p2p_contention.cc), over both shared-memory protocols: Open MPI's default eager
# limit (4 KiB: above 32 KiB the receiver reads the sender's buffer with one kernel copy, CMA) and
# planner's (256 KiB: one copy into the shared segment at send, one out at receive;
# runtime/comm/mpi_comm.cc sets it for the profiler and the runtime unless it is exported).
echo "# Open MPI's default eager limit (4 KiB, CMA rendezvous above 32 KiB):"
env -u OMPI_MCA_btl_vader_max_send_size -u OMPI_MCA_btl_vader_segment_size \
  mpirun --oversubscribe -np 2 -x OMPI_MCA_btl_vader_eager_limit=4096 "$R/build/bench/p2p_contention" 200
echo "# planner's shared-memory settings (eager limit 256 KiB):"
mpirun --oversubscribe -np 2 -x OMPI_MCA_btl_vader_eager_limit=262144 -x OMPI_MCA_btl_vader_max_send_size=262144 \
  -x OMPI_MCA_btl_vader_segment_size=67108864 "$R/build/bench/p2p_contention" 200
