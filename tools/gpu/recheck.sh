#!/usr/bin/env bash
# A short follow-up to check.sh (docs/gpu.md "The follow-up"): the FP8 GEMM diagnosis (tools/gpu/fp8_probe.cu, built by
# bundle.sh), kernels_gpu_test in FP8,
# the GEMM rates timed as GPU work alone (behind a spin kernel), and the Llama block's profile at b = 1, 2 and TP 1, 2
# (the four points whose PyTorch peer figures check.sh already has). Logs and FIGURE lines as check.sh writes them.
set -u
# As check.sh: logs in a work folder, $OUT gets summary.txt and all.tgz (the work folder) after every step.
FINAL=${OUT:-gpu-out}; mkdir -p "$FINAL"
OUT=${CHECK_WORK:-/tmp/gpu-recheck}
[ "$(realpath -m "$OUT")" = "$(realpath -m "$FINAL")" ] && { echo "recheck.sh: CHECK_WORK must not be \$OUT ($FINAL)" >&2; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT"
B=.gpu/bin; P=$B/planner; S=$OUT/summary.txt
: > "$S"
publish() { cp "$S" "$FINAL/"
  tar czf "$FINAL/all.tgz.part" --exclude='*.bin' -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null &&
    mv "$FINAL/all.tgz.part" "$FINAL/all.tgz"; }
step() { local name=$1; shift; local t0; t0=$(date +%s)
  timeout "${STEP_S:-150}" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  printf '%-30s rc=%-4s %6s s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$S"; publish; return $rc; }
echo "== commit $(tr '\n' ' ' < .gpu/commit) date $(date -u +%Y-%m-%dT%H:%M:%SZ)" | tee -a "$S"
wheel_libs=$(python3 -c "
import os, site
d = set()
for sp in site.getsitepackages():
    for r, _, fs in os.walk(os.path.join(sp, 'nvidia')):
        if any(f.startswith(('libcudnn', 'libnccl', 'libcublas', 'libcudart')) for f in fs): d.add(r)
print(':'.join(sorted(d)))" 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/.gpu/lib:${wheel_libs}:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
STEP_S=60 step fp8-probe $B/fp8_probe
grep 'ran correctly\|heuristic' "$OUT/fp8-probe.log" | sed 's/^/FIGURE /' | tee -a "$S"
STEP_S=90 step kernels-gpu-fp8 $B/kernels_gpu_test --precision fp8
echo "FIGURE kernels_gpu_test fp8: $(grep -c '^FAIL\|FAIL$' "$OUT/kernels-gpu-fp8.log") failures" | tee -a "$S"
STEP_S=60 step gemm-rates python3 bench/kernel_rates_peer.py --device cuda --skip attention,ring,host,memory
grep '^gemm\|^device' "$OUT/gemm-rates.log" > "$OUT/gemm-rates.txt"
mkdir -p "$OUT/models"
sed -e 's/^name: llama3-8b/name: llama3-8b-2l/' -e 's/^  layers: 32/  layers: 2/' -e 's/^  seq: 8192/  seq: 2048/' \
  configs/models/llama3-8b.yaml > "$OUT/models/llama3-8b-2l.yaml"
STEP_S=${PROFILE_S:-140} step profile-llama3-8b-2l-bf16 $P profile "$OUT/models/llama3-8b-2l.yaml" --device cuda \
  --precision bf16 --microbatch-sizes 1,2 --rounds 1 --min-repetitions 10 --warmup 2 --budget-seconds 0.5 --tp 1,2 \
  -o "$OUT/llama3-8b-2l.bf16.cuda.profile.yaml"
sed -n '/^GEMM-bound layers/,$p' "$OUT/profile-llama3-8b-2l-bf16.log" | grep -v '^planner:' | sed "s/^/FIGURE llama /" | tee -a "$S"
echo "== done" | tee -a "$S"
publish
