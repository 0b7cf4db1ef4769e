#!/usr/bin/env bash
# The device check (docs/gpu.md). Runs on the lent GPU machine from the project root, after
# `bash tools/gpu/bundle.sh` here:
#   device run: command "bash .gpu/check.sh", carry [".gpu"], timeout_s 600
# Checks every CUDA / NCCL path of the project once and leaves logs, profiles and a run in $OUT;
# $OUT/summary.txt has one line per step (exit code, seconds) and every figure as a line starting
# "FIGURE", ready for docs/performance.md. Each step is independent: a failing step is logged and the
# next one still runs. CHECK_QUICK=1 shrinks the profiles to b = 1,2 (a rerun short of device time).
set -u
. "$(dirname "$0")/lib.sh"
gpu_check_start check.sh /tmp/gpu-check

# 1. The machine, and the libraries: the Python wheels' (cuDNN, NCCL, cuBLAS, runtime), then CUDA's own.
log "commit $(tr '\n' ' ' < .gpu/commit 2>/dev/null) date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,compute_cap --format=csv > "$OUT/nvidia-smi.txt" 2>&1
cat "$OUT/nvidia-smi.txt" >> "$S"
gpu_libraries
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$OUT/env.txt"
# The CUDA libraries are the module's (libplanner_cuda.so next to the planner), not the planner's.
ldd "$P" "$B/libplanner_cuda.so" > "$OUT/ldd.txt" 2>&1
grep -q 'not found' "$OUT/ldd.txt" && log "MISSING LIBRARIES: $(grep 'not found' "$OUT/ldd.txt" | tr -s ' ' | tr '\n' ';')"

# 8 (run first after the machine's facts: about a minute, and PyTorch's alone, so a hung build step before it
#    cannot take its time). Issue 27's kernel rates: GEMMs in bf16 and FP8 (cuBLASLt through torch), attention by
#    kernel (SDPA's cuDNN and flash backends), the host's launch cost; compared here afterwards with
#    build/bench/kernel_table_check configs/clusters/dgx-h100.yaml kernel-rates.txt (docs/gpu.md step 8).
STEP_S=240 step kernel-rates python3 bench/kernel_rates_peer.py --device cuda
grep -v '^#' "$OUT/kernel-rates.log" | grep '^gemm\|^attention\|^ring\|^launch\|^experts\|^device' > "$OUT/kernel-rates.txt"
figure "kernel rates: $(grep -c '^gemm' "$OUT/kernel-rates.txt") GEMMs, $(grep -c '^attention' "$OUT/kernel-rates.txt") attention points, $(grep -c '^ring' "$OUT/kernel-rates.txt") ring-step points; $(grep '^launch' "$OUT/kernel-rates.txt")"

# 2. CUDA kernels against the CPU ones, each GEMM precision (fp32 = TF32, bf16, fp16, fp8), and NCCL on one rank.
for p in fp32 bf16 fp16 fp8; do
  step "kernels-gpu-$p" $B/kernels_gpu_test --precision $p
  figure "kernels_gpu_test $p: $(grep -c '^FAIL\|FAIL$' "$OUT/kernels-gpu-$p.log") failures, worst relative L2 $(grep -o 'difference [0-9.e+-]*' "$OUT/kernels-gpu-$p.log" | awk '{print $2}' | sort -g | tail -1)"
done
# Which cuBLASLt FP8 configurations run (in place against out of place, fp32 / bf16 C and D): the diagnosis that found
# cuBLASLt 13.1 refusing in-place FP8 products (docs/gpu.md "First run").
step fp8-probe $B/fp8_probe
figure "fp8_probe: $(grep 'ran correctly' "$OUT/fp8-probe.log")"
step nccl-one-rank $B/nccl_test

# 3. The models: GPT-2 small in bf16 with its vocabulary padded to 50304 (Megatron's padding: 50257 divides by no TP
#    degree) and Llama 3 8B's layers (h 4096, 32 / 8 heads, SwiGLU 14336, vocabulary 128256) with 2 layers and 2048-token
#    sequences, so that its profile takes a minute, not an hour.
mkdir -p "$OUT/models"
sed -e 's/^dtype: fp16/dtype: bf16/' -e 's/vocab: 50257/vocab: 50304/' configs/models/gpt2-small.yaml > "$OUT/models/gpt2-small-bf16.yaml"
llama_2l_model
bs=1,2,4,8; [ "${CHECK_QUICK:-0}" = 1 ] && bs=1,2
prof=(--device cuda --precision bf16 --microbatch-sizes $bs --rounds 1 --min-repetitions 10 --warmup 2 --budget-seconds 0.5)

# 4. The layer profiler in bf16 (GPT-2 small at TP 1, 2, 4: 12 heads; the Llama layers in step 6): each GEMM-bound
#    layer's rate against the published dense bf16 peak (989.4 TFLOP/s on H100 SXM / H200: profiler/peaks.cc).
step profile-gpt2-small-bf16 $P profile "$OUT/models/gpt2-small-bf16.yaml" "${prof[@]}" --tp 1,2,4 -o "$OUT/gpt2-small.bf16.cuda.profile.yaml"
m=gpt2-small-bf16
sed -n '/^GEMM-bound layers/,$p' "$OUT/profile-$m.log" | grep -v '^planner:' | sed "s/^/FIGURE $m /" | tee -a "$S"

# 5. A whole plan on this GPU: solved for 1 GPU from the measured GPT-2 profile, generated for CUDA, run; the
#    report's predicted iteration time against the measured median.
cluster=configs/clusters/dgx-h100.yaml
if [ -s "$OUT/gpt2-small.bf16.cuda.profile.yaml" ]; then
  step solve-1gpu $P solve --gpus 1 --model "$OUT/models/gpt2-small-bf16.yaml" --profile "$OUT/gpt2-small.bf16.cuda.profile.yaml" \
    --cluster $cluster --global-batch 16 -o "$OUT/plan-1gpu.yaml"
  step codegen-1gpu $P codegen "$OUT/plan-1gpu.yaml" -o "$OUT/launch" --device cuda --iterations 12 --warmup 2
  STEP_S=240 step run-1gpu $P run "$OUT/launch" --run-id gpu
  if [ -f "$OUT/launch/runs/gpu/report.md" ]; then
    cp "$OUT/launch/runs/gpu/report.md" "$OUT/run-report.md"
    python3 tools/gpu/figures.py iteration "$OUT/run-report.md" "1-GPU gpt2-small bf16 plan" | tee -a "$S"
  fi
fi

# 6. The Llama block in bf16 (slower to set up: a 0.5B-parameter vocabulary table per point, about 5 s a point on an
#    H200: b = 1, 2, 4, 8 at four TP degrees ran past 300 s on 2026-11-30), so b = 1, 2 here; then its peer.
bs=1,2
prof=(--device cuda --precision bf16 --microbatch-sizes $bs --rounds 1 --min-repetitions 10 --warmup 2 --budget-seconds 0.5)
STEP_S=300 step profile-llama3-8b-2l-bf16 $P profile "$OUT/models/llama3-8b-2l.yaml" "${prof[@]}" --tp 1,2,4,8 -o "$OUT/llama3-8b-2l.bf16.cuda.profile.yaml"
m=llama3-8b-2l-bf16
sed -n '/^GEMM-bound layers/,$p' "$OUT/profile-$m.log" | grep -v '^planner:' | sed "s/^/FIGURE $m /" | tee -a "$S"

# 7. The peer: PyTorch eager (SDPA) timing the same Llama block in bf16 at the same shapes and shards.
for tp in 1 2 4 8; do
  step torch-block-tp$tp python3 bench/torch_block_peer.py --device cuda --dtype bf16 --microbatch-sizes $bs --tp $tp --seq 2048
done
cat "$OUT"/torch-block-tp*.log | grep '^torch block' > "$OUT/torch-block.txt"
# Ours (forward + backward-input + backward-weight, the profile's medians) against PyTorch's forward + backward.
python3 tools/gpu/figures.py block "$OUT/profile-llama3-8b-2l-bf16.log" "$OUT/torch-block.txt" | tee -a "$S"

tail -n 40 "$OUT"/run-1gpu.log > "$OUT/run-tail.txt" 2>/dev/null
log "done; paste the FIGURE lines into docs/performance.md with the machine, date and commit above"
publish
