#!/usr/bin/env bash
# Checkpoint faults under mpirun (2 ranks; docs/runtime.md "Checkpoints"): a damaged checkpoint
# (corrupt bytes, NaN behind a matching checksum, truncated, rank files of two iterations,
# another model with the same parameter count, no manifest, metrics.csv garbled or missing) is
# refused by every rank with exit 2 and one identical `planner: error:` line naming the rank,
# file and reason, within seconds (the launch's timeout is 300 s); a second job with the same
# run id stops at the lock; a job killed mid-checkpoint resumes from the last complete one with
# the loss curve of an uninterrupted run.
set -u
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"
MPI="timeout 120 mpirun --oversubscribe -np 2"

$PLANNER -q solve --gpus 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml --pp 2 --schedule 1f1b -o pp2.plan.yaml >/dev/null || { echo "solve failed"; exit 1; }
$PLANNER -q codegen pp2.plan.yaml -o ck --iterations 6 --lr 3e-3 --timeout 300 || { echo "codegen failed"; exit 1; }
$MPI $PLANNER -q run ck --run-id full >/dev/null 2>setup.err || bad "uninterrupted run: $(tail -3 setup.err)"
$MPI $PLANNER -q run ck --run-id base --iterations 3 --checkpoint-every 3 >/dev/null 2>>setup.err || bad "checkpointed run: $(tail -3 setup.err)"
[ -f ck/runs/base/ckpt/manifest.yaml ] && [ -f ck/runs/base/ckpt/iter-3/rank1.bin ] && ok || bad "no manifest or rank file: $(ls -R ck/runs/base)"

# edit FILE OFFSET KIND [MANIFEST]: writes a float (nan) or bytes (flip) into FILE at OFFSET;
# with MANIFEST, the file's CRC-32C there is fixed to match (damage the checksum cannot see).
edit() {
  python3 - "$@" <<'PY'
import struct, sys
path, off, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def crc32c(b):
    t = []
    for i in range(256):
        c = i
        for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    c = 0xFFFFFFFF
    for x in b: c = t[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
b = bytearray(open(path, "rb").read())
before = crc32c(b)
if kind == "nan": b[off:off + 4] = struct.pack("<f", float("nan"))
else: b[off:off + 8] = bytes(x ^ 0xA5 for x in b[off:off + 8])
open(path, "wb").write(b)
if len(sys.argv) > 4:
    m = open(sys.argv[4]).read()
    assert f"crc32c: {before:08x}" in m
    open(sys.argv[4], "w").write(m.replace(f"crc32c: {before:08x}", f"crc32c: {crc32c(b):08x}"))
PY
}

# refused NAME LAUNCH WANT: resumes LAUNCH/runs/NAME; wants exit 2 within 20 s, every
# `planner: error:` line identical and containing WANT.
refused() {
  local name=$1 launch=$2 want=$3 start rc took lines
  start=$(date +%s%N)
  $MPI $PLANNER -q run $launch --resume $name >/dev/null 2>$name.err; rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  lines=$(grep "^planner: error:" $name.err | sort -u)
  if [ $rc = 2 ] && [ $took -lt 20000 ] && [ "$(echo "$lines" | wc -l)" = 1 ] && echo "$lines" | grep -qF -- "$want"; then
    ok; echo "$name: exit $rc after ${took} ms: $lines"
  else
    bad "$name: exit $rc after ${took} ms, want 2 and '$want': $(cat $name.err)"
  fi
}
copy() { cp -r ck/runs/base ck/runs/$1; }

copy corrupt; edit ck/runs/corrupt/ckpt/iter-3/rank1.bin 400 flip
refused corrupt ck "rank 1: ck/runs/corrupt/ckpt/iter-3/rank1.bin: checksum mismatch"
copy nan; edit ck/runs/nan/ckpt/iter-3/rank1.bin 96 nan ck/runs/nan/ckpt/manifest.yaml
refused nan ck "rank 1: ck/runs/nan/ckpt/iter-3/rank1.bin: parameter value 4 of"
copy trunc; truncate -s 1000 ck/runs/trunc/ckpt/iter-3/rank1.bin
refused trunc ck "rank 1: ck/runs/trunc/ckpt/iter-3/rank1.bin: 1000 bytes, the manifest says"
copy nomanifest; rm ck/runs/nomanifest/ckpt/manifest.yaml
refused nomanifest ck "rank 0: ck/runs/nomanifest/ckpt/manifest.yaml: missing"
copy garbled; sed -i '3s/.*/2,0.5x,0.01/' ck/runs/garbled/metrics.csv
refused garbled ck "rank 0: ck/runs/garbled/metrics.csv:3: not '2,<finite loss>,<seconds>'"
copy nometrics; rm ck/runs/nometrics/metrics.csv
refused nometrics ck "rank 0: ck/runs/nometrics/metrics.csv: missing"

# Rank files of two checkpoints: rank 1's file of iteration 3 copied over its file of iteration 6.
copy mixed; cp ck/runs/mixed/ckpt/iter-3/rank1.bin old-rank1.bin
$MPI $PLANNER -q run ck --resume mixed --checkpoint-every 3 >/dev/null 2>mixed-setup.err || bad "mixed: resume to 6: $(tail -3 mixed-setup.err)"
[ -f ck/runs/mixed/ckpt/iter-6/rank1.bin ] && [ ! -e ck/runs/mixed/ckpt/iter-3 ] && ok || bad "mixed: the older checkpoint not replaced: $(ls ck/runs/mixed/ckpt)"
cp old-rank1.bin ck/runs/mixed/ckpt/iter-6/rank1.bin
refused mixed ck "rank 1: ck/runs/mixed/ckpt/iter-6/rank1.bin: holds iteration 3, the manifest names 6"

# Another model with the same parameter count (tiny-gpt renamed): its launch refuses the checkpoint.
sed 's/^name: .*/name: other-gpt/' $M/tiny-gpt.yaml > other.yaml
grep -q "^name: other-gpt" other.yaml || bad "other model: no name field to change"
$PLANNER -q solve --gpus 2 --model other.yaml --cluster $C/local-cpu.yaml --pp 2 --schedule 1f1b -o other.plan.yaml >/dev/null &&
  $PLANNER -q codegen other.plan.yaml -o other --iterations 6 --lr 3e-3 --timeout 300 || bad "other model: solve / codegen"
mkdir -p other/runs && cp -r ck/runs/base other/runs/base
refused base other "rank 0: other/runs/base/ckpt/manifest.yaml: a checkpoint of another model"

# Killed mid-checkpoint: rank 0 dies once both rank files and metrics.csv of iteration 6 are
# durable, before the manifest; the resumed run starts from iteration 3 and ends on the
# uninterrupted run's losses.
PLANNER_TEST_KILL_AT_CHECKPOINT=6 $MPI -x PLANNER_TEST_KILL_AT_CHECKPOINT $PLANNER -q run ck --run-id killed --checkpoint-every 3 >/dev/null 2>killed.err
rc=$?
[ $rc != 0 ] && [ $rc != 124 ] && grep -q "^iteration: 3$" ck/runs/killed/ckpt/manifest.yaml && [ -f ck/runs/killed/ckpt/iter-6/rank1.bin ] && ok ||
  bad "killed: rc=$rc, manifest $(cat ck/runs/killed/ckpt/manifest.yaml 2>&1 | grep iteration), $(ls ck/runs/killed/ckpt)"
touch ck/runs/killed/metrics.csv.tmp.999999.0 ck/runs/killed/ckpt/iter-6/rank0.bin.tmp.999999.1  # a dead job's temporaries
$MPI $PLANNER -q run ck --resume killed --checkpoint-every 3 >/dev/null 2>>killed.err || bad "killed: resume: $(tail -3 killed.err)"
python3 - <<'PY' && ok || bad "killed: resumed loss curve differs"
import csv, sys
a = [x["loss"] for x in csv.DictReader(open("ck/runs/full/metrics.csv"))]
b = [x["loss"] for x in csv.DictReader(open("ck/runs/killed/metrics.csv"))]
print("uninterrupted", a); print("killed+resumed", b)
sys.exit(0 if a == b and len(a) == 6 else 1)
PY
# The resumed run's report measures its own iterations: the bubble is not the 100% of the resumed rows' zero compute.
bub=$(grep -o '^| bubble fraction | [0-9.]*%' ck/runs/killed/report.md | grep -o '[0-9.]*%' | tr -d %)
[ -n "$bub" ] && awk -v b="$bub" 'BEGIN { exit !(b < 99) }' && ok || bad "killed: resumed report's bubble ${bub:-missing}%"
[ -z "$(find ck/runs/killed -name '*.tmp.*')" ] && grep -q "^iteration: 6$" ck/runs/killed/ckpt/manifest.yaml && ok ||
  bad "killed: temporaries left or manifest not at 6: $(find ck/runs/killed)"

# The same run id twice at once: the second job stops at the lock (exit 2, one line naming the
# directory and the holder); once the first has ended, the id is free again.
$PLANNER -q codegen pp2.plan.yaml -o long --iterations 100000 --timeout 300
$MPI $PLANNER -q run long --run-id busy >/dev/null 2>busy-a.err &
job=$!
for _ in $(seq 100); do grep -q "^pid " long/runs/busy/lock 2>/dev/null && break; sleep 0.2; done
start=$(date +%s%N)
$MPI $PLANNER -q run long --run-id busy --iterations 1 >/dev/null 2>busy-b.err; rc=$?
took=$(( ($(date +%s%N) - start) / 1000000 ))
lines=$(grep "^planner: error:" busy-b.err | sort -u)
[ $rc = 2 ] && [ $took -lt 20000 ] && [ "$(echo "$lines" | wc -l)" = 1 ] && echo "$lines" | grep -qE "long/runs/busy: in use by another job \(pid [0-9]+ on " && ok ||
  bad "same run id: exit $rc after ${took} ms: $(cat busy-b.err)"
echo "busy: exit $rc after ${took} ms: $lines"
holder=$(sed -n 's/^pid \([0-9]*\) .*/\1/p' long/runs/busy/lock)
kill -TERM $job 2>/dev/null; wait $job 2>/dev/null
# mpirun may return before its ranks are gone: the lock is free once the holder has exited.
for _ in $(seq 100); do kill -0 "$holder" 2>/dev/null || break; sleep 0.2; done
kill -0 "$holder" 2>/dev/null && { bad "the first job's rank 0 (pid $holder) outlived its mpirun by 20 s"; kill -9 "$holder"; }
$MPI $PLANNER -q run long --run-id busy --iterations 1 >/dev/null 2>busy-c.err && ok || bad "run id not free after the first job: $(cat busy-c.err)"

echo "checkpoint faults: $pass passed, $fail failed"
[ $fail = 0 ]
