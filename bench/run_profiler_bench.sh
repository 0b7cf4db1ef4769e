#!/usr/bin/env bash
# Profiler benchmarks for docs/performance.md (one thread per rank):
#  1. Eigen's SGEMM peak and the GEMM layers' achieved GFLOP/s at tiny-gpt shapes
#  2. wall time of `planner profile` for tiny-gpt and gpt2-small
#  3. repeatability: two profiles of tiny-gpt, median layer times compared
#  4. a profile's predicted full forward+backward pass against one measured in one process
#  5. 2-rank collectives: planner profile --comm against a plain MPI loop (same library settings),
#     and planner's transport settings against Open MPI's defaults
set -eu
cd "$(dirname "$0")/.."
P=build/planner/planner
B=build/bench/kernels_bench
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
echo "== 1. GEMM peak and kernel GFLOP/s (one thread)"
$B gemm 1024
for b in 1 8; do $B kernels configs/models/tiny-gpt.yaml $b; done
echo "== 2. profiling time"
for m in tiny-gpt gpt2-small; do
  # fp32 GEMMs as in the earlier figures (gpt2-small.yaml is fp16: its own precision adds the CPU rounding pass)
  s=$(date +%s.%N); $P -q profile configs/models/$m.yaml --device cpu --threads 1 --precision fp32 -o $T/$m.profile.yaml >/dev/null; e=$(date +%s.%N)
  printf "%-12s profile wall %.2f s\n" $m "$(echo "$e - $s" | bc -l)"
done
echo "== 3. repeatability (tiny-gpt, b=1,8, two profiles)"
$P -q profile configs/models/tiny-gpt.yaml --device cpu --microbatch-sizes 1,8 -o $T/a.profile.yaml >/dev/null
$P -q profile configs/models/tiny-gpt.yaml --device cpu --microbatch-sizes 1,8 -o $T/b.profile.yaml >/dev/null
python3 - "$T/a.profile.yaml" "$T/b.profile.yaml" <<'PY'
import sys, re
def load(f):
    out = {}
    name = None
    for line in open(f):
        m = re.match(r'\s+- name: "(.*)"', line)
        if m: name = m.group(1)
        m = re.search(r'microbatch: (\d+), tp: (\d+), forward_s: ([0-9.e+-]+), backward_s: ([0-9.e+-]+)', line)
        if m and name: out[(name, int(m.group(1)))] = float(m.group(3)) + float(m.group(4))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
worst = max(abs(a[k] - b[k]) / a[k] for k in a if a[k] > 2e-5)
total = [sum(v for k, v in d.items() if k[1] == mb) for d in (a, b) for mb in (1, 8)]
print(f"largest per-layer difference (layers over 20 us): {100*worst:.1f}%; whole-model sums b=1 {1e3*total[0]:.3f} vs {1e3*total[2]:.3f} ms, b=8 {1e3*total[1]:.3f} vs {1e3*total[3]:.3f} ms")
PY
echo "== 4. predicted vs measured full pass (one process)"
$P -q profile configs/models/mlp-small.yaml --device cpu --microbatch-sizes 64 -o $T/mlp.profile.yaml >/dev/null
$B fullpass configs/models/mlp-small.yaml $T/mlp.profile.yaml 64
for b in 1 8; do $B fullpass configs/models/tiny-gpt.yaml $T/a.profile.yaml $b; done
if command -v mpirun >/dev/null && [ -x build/bench/mpi_loop ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # 5a: our communicator against a plain MPI loop under the same library settings (Open MPI's
  # defaults: exporting them keeps MakeMpiWorld from applying planner's transport settings).
  # 5b: planner's transport settings (runtime/comm/mpi_comm.cc) against those defaults.
  LIB="-x OMPI_MCA_btl_vader_eager_limit=4096 -x OMPI_MCA_coll_tuned_use_dynamic_rules=0"
  mpirun --oversubscribe -np 2 $LIB $P -q profile --comm --collectives all_reduce,send_recv --max-bytes 16M -o $T/comm-lib.profile.yaml > $T/comm-lib.txt
  mpirun --oversubscribe -np 2 $LIB build/bench/mpi_loop $((16 << 20)) > $T/plain.txt
  mpirun --oversubscribe -np 2 $P -q profile --comm --collectives all_reduce,send_recv --max-bytes 16M -o $T/comm.profile.yaml > $T/comm.txt
  # One reader for both comparisons: `planner profile --comm` prints nccl-tests tables under
  # "# all_reduce ..." / "# send_recv ..." headers (busbw in column 8); mpi_loop prints
  # "size all-reduce-busbw send/recv-busbw" rows.
  cat > $T/compare.py <<'PY'
import sys
def read(path):
    d = {"all_reduce": {}, "send_recv": {}}; cur = None
    for line in open(path):
        if line.startswith("# all_reduce"): cur = "all_reduce"
        elif line.startswith("# send_recv"): cur = "send_recv"
        elif line.startswith("#") or not line.strip(): continue
        elif cur:
            f = line.split(); d[cur][int(f[0])] = float(f[7])
        else:
            s, ar, sr = line.split(); d["all_reduce"][int(s)] = float(ar); d["send_recv"][int(s)] = float(sr)
    return d
a, b, la, lb = read(sys.argv[1]), read(sys.argv[2]), sys.argv[3], sys.argv[4]
print(f"{'size (B)':>10} {'AR ' + la:>11} {'AR ' + lb:>11} {'ratio':>6} {'SR ' + la:>11} {'SR ' + lb:>11} {'ratio':>6}   (busbw GB/s)")
for s in sorted(a["all_reduce"]):
    if s < 1024 or s not in b["all_reduce"]: continue
    w, x, y, z = a["all_reduce"][s], b["all_reduce"][s], a["send_recv"].get(s, 0), b["send_recv"].get(s, 1)
    print(f"{s:>10} {w:>11.3f} {x:>11.3f} {w/x:>6.2f} {y:>11.3f} {z:>11.3f} {y/z:>6.2f}")
PY
  echo "== 5a. 2-rank collectives, Open MPI's default settings: planner profile --comm vs plain MPI"
  python3 $T/compare.py $T/comm-lib.txt $T/plain.txt planner plain
  echo "== 5b. planner profile --comm: planner's transport settings vs Open MPI's defaults"
  python3 $T/compare.py $T/comm.txt $T/comm-lib.txt planner default
fi
