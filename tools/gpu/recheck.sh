#!/usr/bin/env bash
# A short follow-up to check.sh (docs/gpu.md "The follow-up"): the FP8 GEMM diagnosis (tools/gpu/fp8_probe.cu, built by
# bundle.sh), kernels_gpu_test in FP8,
# the GEMM rates timed as GPU work alone (behind a spin kernel), and the Llama block's profile at b = 1, 2 and TP 1, 2
# (the four points whose PyTorch peer figures check.sh already has). Logs and FIGURE lines as check.sh writes them.
set -u
. "$(dirname "$0")/lib.sh"
gpu_check_start recheck.sh /tmp/gpu-recheck
log "commit $(tr '\n' ' ' < .gpu/commit) date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
gpu_libraries
STEP_S=60 step fp8-probe $B/fp8_probe
grep 'ran correctly\|heuristic' "$OUT/fp8-probe.log" | sed 's/^/FIGURE /' | tee -a "$S"
STEP_S=90 step kernels-gpu-fp8 $B/kernels_gpu_test --precision fp8
figure "kernels_gpu_test fp8: $(grep -c '^FAIL\|FAIL$' "$OUT/kernels-gpu-fp8.log") failures"
STEP_S=60 step gemm-rates python3 bench/kernel_rates_peer.py --device cuda --skip attention,ring,host,memory
grep '^gemm\|^device' "$OUT/gemm-rates.log" > "$OUT/gemm-rates.txt"
llama_2l_model
STEP_S=${PROFILE_S:-140} step profile-llama3-8b-2l-bf16 $P profile "$OUT/models/llama3-8b-2l.yaml" --device cuda \
  --precision bf16 --microbatch-sizes 1,2 --rounds 1 --min-repetitions 10 --warmup 2 --budget-seconds 0.5 --tp 1,2 \
  -o "$OUT/llama3-8b-2l.bf16.cuda.profile.yaml"
sed -n '/^GEMM-bound layers/,$p' "$OUT/profile-llama3-8b-2l-bf16.log" | grep -v '^planner:' | sed "s/^/FIGURE llama /" | tee -a "$S"
log done
publish
