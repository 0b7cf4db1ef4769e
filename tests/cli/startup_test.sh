#!/usr/bin/env bash
# Start-up (issue 29): the planner links no CUDA, cuDNN or NCCL library (the CUDA module libplanner_cuda.so
# holds them, common/cuda_module.h); `planner --help` stays under 30 MiB resident; planning commands never
# load the module; a missing module is one "planner: error:" line (exit 1) for --device cuda, and --device
# auto falls back to the CPU.
# With CUDA, the GPU test executables given load the module named by $PLANNER_CUDA_MODULE (their skip
# line, without a device, is not "cannot load"); the planner finds it next to itself.
#   bash tests/cli/startup_test.sh PLANNER SRC cuda|nocuda [GPU_TEST...]
set -u
PLANNER=$1
SRC=$2
KIND=${3:-cuda}
shift 3
MODULE=${PLANNER_CUDA_MODULE:-}
unset PLANNER_CUDA_MODULE
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
pass=0
fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
M=$SRC/configs/models
C=$SRC/configs/clusters

# 1. No CUDA library among the executable's dependencies.
libs=$(ldd "$PLANNER" | grep -E 'lib(cudart|cublas|cublasLt|cudnn|nccl|cuda)[.-]')
[ -z "$libs" ] && ok || bad "ldd planner lists CUDA libraries: $libs"

# 2. --help under 30 MiB resident (ru_maxrss of the child, KiB).
rss=$(python3 -c 'import resource, subprocess, sys
subprocess.run([sys.argv[1], "--help"], stdout=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$PLANNER")
if [ -n "$rss" ] && [ "$rss" -lt $((30 * 1024)) ]; then ok
else bad "planner --help peaks at ${rss:-?} KiB resident (limit 30720)"; fi

# 3. solve, inspect and codegen never load the module (nor any CUDA library); LD_DEBUG=files names every
# object the dynamic linker opens, dlopen included.
dbg() { local name=$1; shift; LD_DEBUG=files "$PLANNER" "$@" >/dev/null 2>"$name.dbg" || bad "$name failed"; }
dbg solve solve --gpus 8 --model "$M/gpt2-small.yaml" --cluster "$C/dgx-a100.yaml" -o p.yaml
dbg inspect inspect p.yaml
dbg codegen codegen p.yaml -o gen
dbg import import hf "$SRC/tests/data/hf/llama3-70b.json" -o l.yaml --seq 8192 --global-batch 512
for f in solve inspect codegen import; do
  grep -E 'file=.*(libplanner_cuda|libcudart|libcublas|libcudnn|libnccl)' $f.dbg && bad "$f loads CUDA code" || ok
done

if [ "$KIND" = cuda ]; then
  # The check above can see a dlopen: with the module present, --device cuda loads it (and then reports
  # the missing device, or profiles on one).
  LD_DEBUG=files "$PLANNER" profile "$M/mlp-small.yaml" --device cuda --budget-seconds 0.05 -o m.yaml \
    >/dev/null 2>cuda.dbg
  grep -q 'file=.*libplanner_cuda.so' cuda.dbg && ok || bad "profile --device cuda did not load libplanner_cuda.so"
  # 4. A missing module: --device cuda is one error line naming it, exit 1 (Unavailable); auto profiles on the CPU.
  missing=$T/missing/libplanner_cuda.so
  PLANNER_CUDA_MODULE=$missing "$PLANNER" profile "$M/tiny-gpt.yaml" --device cuda -o x.yaml >out.txt 2>err.txt
  rc=$?
  [ "$rc" = 1 ] && ok || bad "missing module, --device cuda: exit $rc (want 1)"
  want="planner: error: --device cuda: the CUDA module $missing (PLANNER_CUDA_MODULE) does not exist"
  [ "$(wc -l < err.txt)" = 1 ] && grep -qF "$want" err.txt \
    && ok || { bad "missing module, --device cuda: want one error line naming the module"; cat err.txt; }
  [ ! -e x.yaml ] && ok || bad "missing module, --device cuda wrote x.yaml"
  PLANNER_CUDA_MODULE=$missing "$PLANNER" profile "$M/tiny-gpt.yaml" --device auto --threads 1 \
    --budget-seconds 0.05 -o y.yaml >out.txt 2>err.txt
  rc=$?
  [ "$rc" = 0 ] && [ -s y.yaml ] && grep -q "^planner: --device auto: the CUDA module .*; profiling on the CPU" \
    err.txt \
    && ok || { bad "missing module, --device auto: exit $rc, want a CPU profile"; cat err.txt; }
  # 5. The GPU tests load the module (they export what it takes from them) and skip for want of a device; on a
  # machine with one the gpu suite runs them.
  nvidia-smi >/dev/null 2>&1 && set --
  for t in "$@"; do
    PLANNER_CUDA_MODULE=$MODULE "$t" >out.txt 2>&1
    rc=$?
    if [ "$rc" = 0 ] || { [ "$rc" = 77 ] && ! grep -q "CUDA module" out.txt; }; then ok
    else bad "$(basename "$t"): exit $rc: $(head -c 300 out.txt)"; fi
  done
fi
echo "startup: $pass passed, $fail failed"
[ "$fail" = 0 ]
