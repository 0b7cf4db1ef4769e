#!/usr/bin/env bash
# Golden tests of planner codegen: each checked-in plan's launch directory
# equals tests/codegen/golden/<case>/ byte for byte (torch_pipelining.py: its plan constants, the rest
# checked equal to its template). UPDATE_GOLDEN=1 rewrites them.
set -u
PLANNER=$1
SRC=$2
G=$SRC/tests/codegen/golden
TMPL=$SRC/codegen/templates/torch_pipelining.py
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
for plan in "$SRC"/tests/codegen/plans/*.plan.yaml; do
  name=$(basename "$plan" .plan.yaml)
  if ! $PLANNER -q codegen "$plan" -o "$T/$name" --planner-path planner --iterations 20 2>"$T/$name.err"; then
    echo "FAIL $name: codegen"; cat "$T/$name.err"; fail=$((fail+1)); continue
  fi
  # slurm.sbatch names the launch directory by absolute path: the golden holds @LAUNCH_DIR@.
  # codegen.manifest lists every file written with its FNV-1a 64 digest (docs/hardening.md); checked against the
  # files as written, then left out of the comparison (slurm.sbatch's digest depends on the launch directory).
  if python3 - "$T/$name" <<'PY'; then pass=$((pass+1)); else echo "FAIL $name: codegen.manifest does not list the files written"; fail=$((fail+1)); fi
import os, sys
d = sys.argv[1]
def fnv(b):
    h = 1469598103934665603
    for c in b: h = ((h ^ c) * 1099511628211) % (1 << 64)
    return f"{h:016x}"
listed = {l[18:].rstrip("\n"): l[:16] for l in open(f"{d}/codegen.manifest") if l.strip() and not l.startswith("#")}
files = {os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs} - {"codegen.manifest"}
sys.exit(0 if set(listed) == files and all(fnv(open(f"{d}/{f}", "rb").read()) == listed[f] for f in files) else 1)
PY
  rm "$T/$name/codegen.manifest"
  [ -f "$T/$name/slurm.sbatch" ] && sed -i "s|$T/$name|@LAUNCH_DIR@|g" "$T/$name/slurm.sbatch"
  # torch_pipelining.py: the golden keeps what the plan decides (its constants, through the STEPS line); the rest
  # must be codegen/templates/torch_pipelining.py's lines after that line, unchanged.
  f=$T/$name/torch_pipelining.py
  if [ -f "$f" ]; then
    steps='^OPTIMIZER, LEARNING_RATE, SEED, STEPS = '
    if diff <(sed -n "/$steps/,\$p" "$f" | sed 1d) <(sed -n "/$steps/,/^# ---- planner template ends ----\$/p" "$TMPL" | sed '1d;$d') >/dev/null; then
      pass=$((pass+1)); else echo "FAIL $name: torch_pipelining.py after its constants is not the template's text"; fail=$((fail+1)); fi
    sed -i "/$steps/q" "$f"
  fi
  # megatron_bridge.py likewise: the golden keeps the plan's dicts (through the LORA line), the rest is the template's.
  f=$T/$name/megatron_bridge.py
  BT=$SRC/codegen/templates/megatron_bridge.py
  if [ -f "$f" ]; then
    lora='^LORA = '
    if diff <(sed -n "/$lora/,\$p" "$f" | sed 1d) <(sed -n "/$lora/,/^# ---- planner template ends ----\$/p" "$BT" | sed '1d;$d') >/dev/null; then
      pass=$((pass+1)); else echo "FAIL $name: megatron_bridge.py after its dicts is not the template's text"; fail=$((fail+1)); fi
    sed -i "/$lora/q" "$f"
  fi
  if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then rm -rf "$G/$name"; mkdir -p "$G"; cp -r "$T/$name" "$G/$name"; fi
  if diff -r "$G/$name" "$T/$name" > "$T/$name.diff"; then pass=$((pass+1)); else echo "FAIL $name: differs from golden"; head -20 "$T/$name.diff"; fail=$((fail+1)); fi
done
# The launch file is validated on read: a rank listed twice is an error naming the line.
sed 's/- {rank: 1,/- {rank: 0,/' "$G/tiny-gpt-pp2/launch.yaml" > "$T/dup.yaml"
mkdir -p "$T/dup" && cp "$T/dup.yaml" "$T/dup/launch.yaml" && cp "$G/tiny-gpt-pp2/model.yaml" "$T/dup/"
out=$($PLANNER run "$T/dup" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$out" | grep -qF "rank 0 appears twice"; then pass=$((pass+1)); else echo "FAIL duplicate rank: rc=$rc $out"; fail=$((fail+1)); fi
# The model's architecture and the plan's settings as Megatron-LM flags (checked against
# megatron/training/arguments.py, docs/formats.md): each flag the Llama-class goldens must hold.
check() {  # check NAME FILE FLAG...
  local name=$1 file=$2; shift 2
  for flag in "$@"; do
    if grep -qxF -- "$flag" "$file"; then pass=$((pass+1)); else echo "FAIL $name: '$flag' not in $file"; fail=$((fail+1)); fi
  done
}
check llama3-8b-64 "$G/llama3-8b-64/megatron.args" "--group-query-attention" "--num-query-groups 8" "--ffn-hidden-size 14336" "--swiglu" "--sequence-parallel" \
  "--normalization RMSNorm" "--position-embedding-type rope" "--rotary-base 500000" "--disable-bias-linear" \
  "--untie-embeddings-and-output-weights" "--attention-backend auto" "--use-distributed-optimizer" "--overlap-grad-reduce" \
  "--overlap-param-gather" "--bf16"
check llama3-8b-fp8-16 "$G/llama3-8b-fp8-16/megatron.args" "--bf16" "--fp8-format hybrid"
check tiny-gpt-pp2 "$G/tiny-gpt-pp2/megatron.args" "--attention-backend unfused"  # fp32: flash-attn has no fp32 kernel
if grep -qF -- "--fp8-format" "$G/llama3-8b-64/megatron.args"; then echo "FAIL llama3-8b-64: bf16 plan exports --fp8-format"; fail=$((fail+1)); else pass=$((pass+1)); fi
# expect_codegen NAME PLAN: codegen of a plan edited from a golden one; its notes land in $T/NAME.err.
expect_codegen() {
  if $PLANNER codegen "$2" -o "$T/$1" --planner-path planner 2>"$T/$1.err"; then pass=$((pass+1)); else echo "FAIL $1: codegen"; cat "$T/$1.err"; fail=$((fail+1)); fi
}
P=$SRC/tests/codegen/plans
# ZeRO-3 without pipelining: Megatron-FSDP sharding optimizer, gradients and parameters; DeepSpeed stage 3.
cp "$P/llama3-8b-fp8.model.yaml" "$T/"
sed 's/^zero_stage: 1$/zero_stage: 3/' "$P/llama3-8b-fp8-16.plan.yaml" > "$T/zero3.plan.yaml"
expect_codegen zero3 "$T/zero3.plan.yaml"
check zero3 "$T/zero3/megatron.args" "--use-megatron-fsdp" "--data-parallel-sharding-strategy optim_grads_params" "--ckpt-format fsdp_dtensor" "--overlap-param-gather"
check zero3 "$T/zero3/deepspeed/ds_config.json" '  "zero_optimization": {"stage": 3},'
# Megatron-FSDP asks for more than one CUDA connection (validate_args on Blackwell): megatron.sh does not set it to 1 even at tp 8.
if grep -q CUDA_DEVICE_MAX_CONNECTIONS "$T/zero3/megatron.sh" || ! grep -q "pretrain_gpt.py" "$T/zero3/megatron.sh"; then echo "FAIL zero3: megatron.sh sets CUDA_DEVICE_MAX_CONNECTIONS under FSDP"; fail=$((fail+1)); else pass=$((pass+1)); fi
if grep -qF -- "--use-distributed-optimizer" "$T/zero3/megatron.args"; then echo "FAIL zero3: FSDP with --use-distributed-optimizer"; fail=$((fail+1)); else pass=$((pass+1)); fi
# The plan's gradient buffer (grad_dtype): Megatron's flag where it departs from Megatron's default for the
# precision, DeepSpeed's data_types where DeepSpeed runs it (else a note), torchtitan's fp32-only reduction noted.
for g in fp16 fp32; do
  sed -e "s/^p2p_overlap: \(.*\)$/p2p_overlap: \1\ngrad_dtype: \"$g\"/" -e "s|^  model_path: .*|  model_path: \"$SRC/configs/models/gpt3-175b.yaml\"|" \
    "$P/gpt3-64.plan.yaml" > "$T/gpt3-grad-$g.plan.yaml"
  expect_codegen gpt3-grad-$g "$T/gpt3-grad-$g.plan.yaml"
done
check gpt3-grad-fp32 "$T/gpt3-grad-fp32/megatron.args" "--fp16" "--accumulate-allreduce-grads-in-fp32"
check gpt3-grad-fp32 "$T/gpt3-grad-fp32/launch.yaml" "grad_dtype: fp32"
if grep -qF -- "--accumulate-allreduce-grads-in-fp32" "$T/gpt3-grad-fp16/megatron.args"; then echo "FAIL gpt3-grad-fp16: fp16 gradients exported with fp32 accumulation"; fail=$((fail+1)); else pass=$((pass+1)); fi
check gpt3-grad-fp16 "$T/gpt3-grad-fp16/deepspeed/ds_config.json" '  "data_types": {"grad_accum_dtype": "fp16"}'
if grep -qF "data_types" "$T/gpt3-grad-fp32/deepspeed/ds_config.json" && grep -qF "DeepSpeed accumulates and reduces them in the model's fp16" "$T/gpt3-grad-fp32.err"; then
  echo "FAIL gpt3-grad-fp32: DeepSpeed config written with a gradient dtype DeepSpeed refuses"; fail=$((fail+1))
elif grep -qF "DeepSpeed accumulates and reduces them in the model's fp16" "$T/gpt3-grad-fp32.err"; then pass=$((pass+1)); else echo "FAIL gpt3-grad-fp32: no DeepSpeed gradient note"; cat "$T/gpt3-grad-fp32.err"; fail=$((fail+1)); fi
sed -e "s/^p2p_overlap: \(.*\)$/p2p_overlap: \1\ngrad_dtype: \"bf16\"/" -e "s|^  model_path: .*|  model_path: \"$SRC/configs/models/llama3-8b.yaml\"|" \
  "$P/llama3-8b-64.plan.yaml" > "$T/llama-grad-bf16.plan.yaml"
expect_codegen llama-grad-bf16 "$T/llama-grad-bf16.plan.yaml"
check llama-grad-bf16 "$T/llama-grad-bf16/megatron.args" "--bf16" "--grad-reduce-in-bf16"
check llama-grad-bf16 "$T/llama-grad-bf16/deepspeed/ds_config.json" '  "data_types": {"grad_accum_dtype": "bf16"}'
if grep -qF "torchtitan reduces gradients in float32 only" "$T/llama-grad-bf16.err"; then pass=$((pass+1)); else echo "FAIL llama-grad-bf16: no torchtitan note"; fail=$((fail+1)); fi
# ZeRO-2 with pipelining: neither engine runs it; each refuses in a file and a note, nothing exported as-if.
sed -e 's/^zero_stage: 1$/zero_stage: 2/' -e "s|^  model_path: .*|  model_path: \"$SRC/configs/models/llama3-8b.yaml\"|" "$P/llama3-8b-64.plan.yaml" > "$T/zero2pp.plan.yaml"
expect_codegen zero2pp "$T/zero2pp.plan.yaml"
refused() {  # refused NAME DIR FILE TEXT: FILE written with TEXT, the engine's own file not
  if [ -f "$2/$3" ] && grep -qF "$4" "$2/$3" && grep -qF "$4" "$T/$1.err"; then pass=$((pass+1)); else echo "FAIL $1: no refusal '$4' in $2/$3 and the notes"; fail=$((fail+1)); fi
}
refused zero2pp "$T/zero2pp" megatron.args.refused "ZeRO-2 with pipelining (pp 2)"
refused zero2pp "$T/zero2pp" deepspeed/refused.txt "DeepSpeed's pipeline engine runs ZeRO-1 at most"
for f in megatron.args deepspeed/ds_config.json; do
  if [ -e "$T/zero2pp/$f" ]; then echo "FAIL zero2pp: $f written for a plan the engine refuses"; fail=$((fail+1)); else pass=$((pass+1)); fi
done
# KV heads neither a multiple nor a divisor of tp (12 with tp 8): Megatron-LM refuses; DeepSpeed does not care.
sed 's/^gpt: {layers: 96, hidden: 12288, heads: 96,/gpt: {layers: 96, hidden: 12288, heads: 96, kv_heads: 12,/' "$SRC/configs/models/gpt3-175b.yaml" > "$T/gqa12.yaml"
sed -e 's|^  model_path: .*|  model_path: "gqa12.yaml"|' -e 's|^  model_digest: .*|  model_digest: ""|' "$P/gpt3-64.plan.yaml" > "$T/gqa12.plan.yaml"
expect_codegen gqa12 "$T/gqa12.plan.yaml"
refused gqa12 "$T/gqa12" megatron.args.refused "12 query groups with tp 8"
if [ -f "$T/gqa12/deepspeed/ds_config.json" ] && [ ! -e "$T/gqa12/megatron.args" ]; then pass=$((pass+1)); else echo "FAIL gqa12: megatron.args written or ds_config.json missing"; fail=$((fail+1)); fi
# Context parallelism: DeepSpeed's config has none (Ulysses is another kind); refused. (tp 8 x cp 2 x
# dp 2 is 32 GPUs: the plan reader checks gpus_used against the layout.)
sed -e 's/^cp: 1$/cp: 2/' -e 's/^gpus_used: 16$/gpus_used: 32/' -e 's/^  gpus: 16$/  gpus: 32/' "$P/llama3-8b-fp8-16.plan.yaml" > "$T/cp2.plan.yaml"
expect_codegen cp2 "$T/cp2.plan.yaml"
refused cp2 "$T/cp2" deepspeed/refused.txt "context parallelism (cp 2)"
# Block recompute: the first N layers of every chunk (megatron/core/recompute.py, method 'block').
sed -e 's/^recompute: "none"$/recompute: "full"\nrecompute_num_layers: 3/' -e "s|^  model_path: .*|  model_path: \"$SRC/configs/models/llama3-8b.yaml\"|" "$P/llama3-8b-64.plan.yaml" > "$T/block3.plan.yaml"
expect_codegen block3 "$T/block3.plan.yaml"
check block3 "$T/block3/megatron.args" "--recompute-granularity full" "--recompute-method block" "--recompute-num-layers 3"
if grep -qF "has no DeepSpeed setting" "$T/block3.err"; then pass=$((pass+1)); else echo "FAIL block3: no DeepSpeed note"; fail=$((fail+1)); fi
if grep -qF -- "--recompute-method uniform" "$T/block3/megatron.args"; then echo "FAIL block3: uniform with block"; fail=$((fail+1)); else pass=$((pass+1)); fi
# The embedding and the loss counted as a layer each: 6 blocks at pp 2 x vp 2 (4 divides 6 + 2, not 6), as the search plans it.
printf 'format_version: 1\nname: six\ndtype: bf16\nglobal_batch: 64\ngpt: {layers: 6, hidden: 1024, heads: 16, seq: 2048, vocab: 32000}\n' > "$T/six.yaml"
if $PLANNER -q solve --gpus 16 --model "$T/six.yaml" --cluster "$SRC/configs/clusters/dgx-h100.yaml" --tp 8 --pp 2 --vp 2 --microbatch 1 -o "$T/six.plan.yaml" >/dev/null 2>"$T/six.err"; then pass=$((pass+1)); else echo "FAIL six: solve"; cat "$T/six.err"; fail=$((fail+1)); fi
check six "$T/six.plan.yaml" "account_embedding_loss: true"
expect_codegen six "$T/six.plan.yaml"
# Megatron's --account-for-* flags split by its own rule; the plan's split is exported exactly as a
# pipeline layout (chunks in model order, chunk q on pipeline rank q mod pp) and nothing else.
check six "$T/six/megatron.args" "--pipeline-model-parallel-layout Et|tt|tt|tL"
for flag in --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --num-layers-per-virtual-pipeline-stage; do
  if grep -qF -- "$flag" "$T/six/megatron.args"; then echo "FAIL six: $flag with a pipeline layout"; fail=$((fail+1)); else pass=$((pass+1)); fi
done
# torch_pipelining.py (torch.distributed.pipelining 2.15; tests/exports/torch_pipelining_test.sh runs it): a mesh over
# (pp, dp, tp) at the plan's world size, the multi-stage classes given this rank's stage list (the loop r + k pp), the
# plan's stages by layer name, and no single stage handed to a multi-stage schedule.
# (The mesh, the schedule call and the stage loop are the template's, the same for every plan: checked there.)
check template "$TMPL" '    mesh = init_device_mesh("cuda" if cuda else "cpu", (PP, DP, TP), mesh_dim_names=("pp", "dp", "tp"))' \
  '    schedule = cls(stages[0] if single else stages, n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)' \
  '    return [pp_rank + k * PP for k in range(STAGES_PER_RANK)]'
if grep -qE 'SCHEDULE\((stage|stages\[0\]),' "$TMPL"; then echo "FAIL template: a single stage passed to the schedule"; fail=$((fail+1)); else pass=$((pass+1)); fi
for name in gpt3-64 llama3-8b-64 llama3-8b-fp8-16 tiny-gpt-pp2; do
  f=$G/$name/torch_pipelining.py
  world=$(grep -c '^  - {rank: ' "$G/$name/launch.yaml")
  if grep -q "^WORLD, PP, DP, TP = $world, " "$f"; then pass=$((pass+1)); else echo "FAIL $name: torch_pipelining.py's WORLD is not launch.yaml's $world ranks"; fail=$((fail+1)); fi
done
check gpt3-64 "$G/gpt3-64/torch_pipelining.py" 'SCHEDULE = "ScheduleInterleaved1F1B"' 'STAGES_PER_RANK = 4' 'WORLD, PP, DP, TP = 64, 8, 1, 8'
check llama3-8b-64 "$G/llama3-8b-64/torch_pipelining.py" 'WORLD, PP, DP, TP = 64, 2, 8, 4' 'STAGES_PER_RANK = 2'
# 32 stages of gpt3-64, in model order: the first holds the embedding, the last the loss.
n=$(sed -n '/^STAGES = \[/,/^\]/p' "$G/gpt3-64/torch_pipelining.py" | grep -c '^    \[')
if [ "$n" = 32 ]; then pass=$((pass+1)); else echo "FAIL gpt3-64: $n stages in torch_pipelining.py, not pp 8 x v 4 = 32"; fail=$((fail+1)); fi
check tiny-gpt-pp2 "$G/tiny-gpt-pp2/torch_pipelining.py" '    ["embedding", "block0", "block1"],' '    ["block2", "block3", "final_layernorm", "lm_head", "loss"],'
# PipeDream's asynchronous schedule: refused, nothing written as if.
if [ -f "$G/vgg16-async/torch_pipelining.py.refused" ] && [ ! -e "$G/vgg16-async/torch_pipelining.py" ] &&
   grep -qF "PipeDream's asynchronous schedule" "$G/vgg16-async/torch_pipelining.py.refused"; then pass=$((pass+1)); else echo "FAIL vgg16-async: torch_pipelining.py not refused"; fail=$((fail+1)); fi
# 1f1b with fewer microbatches than stages (torch's Schedule1F1B raises): written as ScheduleGPipe with a note.
sed -e 's/^num_microbatches: 32$/num_microbatches: 1/' -e 's/^microbatch_size: 1$/microbatch_size: 32/' \
  -e "s|^  model_path: .*|  model_path: \"$SRC/configs/models/tiny-gpt.yaml\"|" "$P/tiny-gpt-pp2.plan.yaml" > "$T/m1.plan.yaml"
expect_codegen m1 "$T/m1.plan.yaml"
check m1 "$T/m1/torch_pipelining.py" 'SCHEDULE = "ScheduleGPipe"' 'N_MICROBATCHES = 1'
if grep -qF "torch_pipelining.py: 1f1b with 1 microbatch(es) < 2 stages" "$T/m1.err"; then pass=$((pass+1)); else echo "FAIL m1: no GPipe note"; fail=$((fail+1)); fi
# Context parallelism: torch_pipelining.py refused.
refused cp2 "$T/cp2" torch_pipelining.py.refused "context parallelism (cp 2)"
# slurm.sbatch (issue 14): srun --mpi=pmix (Debian's Open MPI has no Slurm PMI2), the launch directory by absolute
# path (not the submit folder), exact task counts with rank i on node i / gpus_per_node, --cpus-per-task given to srun.
for name in tiny-gpt-pp2 gpt3-64 vgg16-async; do
  f=$G/$name/slurm.sbatch
  check "$name slurm" "$f" "MPI=\${PLANNER_SLURM_MPI:-pmix}" "DIR=\${PLANNER_LAUNCH_DIR:-'@LAUNCH_DIR@'}"
  if grep -q 'SLURM_SUBMIT_DIR' "$f"; then echo "FAIL $name: slurm.sbatch runs in the submit folder"; fail=$((fail+1)); else pass=$((pass+1)); fi
done
check vgg16-async "$G/vgg16-async/slurm.sbatch" "#SBATCH --nodes=4" "#SBATCH --ntasks=16" "#SBATCH --ntasks-per-node=4" "TASKS_PER_NODE=(4 4 4 4)" \
  'srun --mpi="$MPI" --ntasks=16 --distribution=arbitrary --cpus-per-task=1 --kill-on-bad-exit=1 "$PLANNER" run "$DIR" "$@"'
# 20 ranks at 8 per node: 3 nodes, 20 tasks (8, 8, 4), not 3 x 8 = 24; 2 threads per rank reach srun.
if $PLANNER -q solve --gpus 20 --model "$SRC/configs/models/tiny-gpt.yaml" --cluster "$SRC/configs/clusters/dgx-a100.yaml" -o "$T/t20.plan.yaml" >/dev/null 2>"$T/t20.err"; then pass=$((pass+1)); else echo "FAIL t20: solve"; cat "$T/t20.err"; fail=$((fail+1)); fi
if $PLANNER -q codegen "$T/t20.plan.yaml" -o "$T/t20" --device cuda --threads 2 --slurm-mpi pmix_v4 2>"$T/t20.err"; then pass=$((pass+1)); else echo "FAIL t20: codegen"; cat "$T/t20.err"; fail=$((fail+1)); fi
check t20 "$T/t20/slurm.sbatch" "#SBATCH --nodes=3" "#SBATCH --ntasks=20" "#SBATCH --ntasks-per-node=8" "#SBATCH --gpus-per-node=8" "#SBATCH --cpus-per-task=2" \
  "TASKS_PER_NODE=(8 8 4)" "MPI=\${PLANNER_SLURM_MPI:-pmix_v4}" "DIR=\${PLANNER_LAUNCH_DIR:-'$T/t20'}" \
  'srun --mpi="$MPI" --ntasks=20 --distribution=arbitrary --cpus-per-task=2 --kill-on-bad-exit=1 "$PLANNER" run "$DIR" "$@"'
check t20 "$T/t20/run.sh" '  exec mpirun $ROOT --hostfile "$HOSTFILE" --map-by ppr:8:node -np 20 "$PLANNER" run "$DIR" "$@"'
out=$($PLANNER codegen "$T/t20.plan.yaml" -o "$T/t20b" --slurm-mpi pmi3 2>&1); rc=$?
if [ $rc = 2 ] && echo "$out" | grep -qF -- "--slurm-mpi: unknown value 'pmi3'"; then pass=$((pass+1)); else echo "FAIL --slurm-mpi pmi3: rc=$rc $out"; fail=$((fail+1)); fi
# Summation servers are ranks too: 2 workers + 1 ps server at 2 per node are 3 tasks on 2 nodes (2 and 1), -np 3.
if $PLANNER -q solve --gpus 2 --model "$SRC/configs/models/tiny-gpt.yaml" --cluster "$SRC/configs/clusters/local-cpu-ps.yaml" --dp-comm ps --ps-servers 1 \
     --tp 1 --pp 1 -o "$T/ps.plan.yaml" >/dev/null 2>"$T/ps.err" && $PLANNER -q codegen "$T/ps.plan.yaml" -o "$T/ps" 2>"$T/ps.err"; then pass=$((pass+1)); else echo "FAIL ps: solve/codegen"; cat "$T/ps.err"; fail=$((fail+1)); fi
check ps "$T/ps/slurm.sbatch" "#SBATCH --nodes=2" "#SBATCH --ntasks=3" "#SBATCH --ntasks-per-node=2" "TASKS_PER_NODE=(2 1)"
check ps "$T/ps/run.sh" '  exec mpirun $ROOT --hostfile "$HOSTFILE" --map-by ppr:2:node -np 3 "$PLANNER" run "$DIR" "$@"' 'exec mpirun $ROOT --oversubscribe -np 3 "$PLANNER" run "$DIR" "$@"'
# PipeDream's hierarchy on 2 servers x 4 GPUs (resnet50, -n 4 2): one top-level stage on both servers split
# into 4 stages inside each, so stage s runs on GPU s of both servers (devices s and s + 4), as the plan lists.
if $PLANNER -q import pipedream "$SRC/tests/data/pipedream/resnet50/graph.txt" -o "$T/r50.profile.yaml" >/dev/null 2>"$T/r50.err" &&
   $PLANNER -q solve --gpus 8 --profile "$T/r50.profile.yaml" --cluster "$SRC/configs/clusters/pipedream-cluster-a.yaml" --mode pipedream \
     --pd-machines 4,2 --pd-bandwidths 1.2e10,1.25e9 -o "$T/r50.plan.yaml" >/dev/null 2>"$T/r50.err"; then pass=$((pass+1)); else echo "FAIL r50: solve"; cat "$T/r50.err"; fail=$((fail+1)); fi
devs=$(awk '/^    devices:/ {f = 1; next} f && /^      - / {printf "%s ", $2; next} f {printf "| "; f = 0}' "$T/r50.plan.yaml")
if [ "$devs" = "0 4 | 1 5 | 2 6 | 3 7 | " ]; then pass=$((pass+1)); else echo "FAIL r50: stage devices '$devs', want '0 4 | 1 5 | 2 6 | 3 7 | '"; fail=$((fail+1)); fi
# Megatron-LM (issue 14): a plan it cannot express gets megatron.args.refused and one note, never
# megatron.args written as if: VGG-16 (no GPT), PipeDream's asynchronous schedule, per-stage replication.
V=$G/vgg16-async
for why in "model vgg16 is not a GPT" "PipeDream's asynchronous schedule" "per-stage replication (14-1-1 replicas per stage)"; do
  if grep -qF "$why" "$V/megatron.args.refused" 2>/dev/null; then pass=$((pass+1)); else echo "FAIL vgg16-async: megatron.args.refused lacks '$why'"; fail=$((fail+1)); fi
done
for f in megatron.args megatron.sh; do
  if [ -e "$V/$f" ]; then echo "FAIL vgg16-async: $f written for a plan Megatron-LM cannot express"; fail=$((fail+1)); else pass=$((pass+1)); fi
done
$PLANNER codegen "$P/vgg16-async.plan.yaml" -o "$T/vgg-notes" --planner-path planner 2>"$T/vgg-notes.err" >/dev/null
n=$(grep -c "megatron.args" "$T/vgg-notes.err")
if [ "$n" = 1 ] && grep -qF "megatron.args: not written: model vgg16 is not a GPT" "$T/vgg-notes.err"; then pass=$((pass+1)); else echo "FAIL vgg16-async: $n megatron notes, want 1 refusal"; fail=$((fail+1)); fi
# A GPT plan with per-stage replication 2-1 (PipeDream's schedule): refused for both reasons, nothing written as if.
if $PLANNER -q solve --gpus 3 --model "$SRC/configs/models/tiny-gpt.yaml" --cluster "$SRC/configs/clusters/dgx-h100.yaml" --replication 2-1 -o "$T/rep.plan.yaml" >/dev/null 2>&1; then
  expect_codegen rep21 "$T/rep.plan.yaml"
  refused rep21 "$T/rep21" megatron.args.refused "per-stage replication (2-1 replicas per stage)"
  refused rep21 "$T/rep21" megatron.args.refused "PipeDream's asynchronous schedule"
  if [ -e "$T/rep21/megatron.args" ] || [ -e "$T/rep21/megatron.sh" ]; then echo "FAIL rep21: megatron files written"; fail=$((fail+1)); else pass=$((pass+1)); fi
else echo "FAIL rep21: solve --replication 2-1"; fail=$((fail+1)); fi
# Every golden megatron.args: Megatron-LM's virtual pipeline equals the plan's interleave exactly
# (validate_args: vp = (num_layers / pp) / --num-layers-per-virtual-pipeline-stage, or the layout's
# chunks / pp), and no 0 in --decoder-first/last-pipeline-num-layers.
for a in "$G"/*/megatron.args; do
  name=$(basename "$(dirname "$a")")
  val() { awk -v k="$1" '$1 == k {print $2}' "$a"; }
  pp=$(val --pipeline-model-parallel-size); nl=$(val --num-layers); per=$(val --num-layers-per-virtual-pipeline-stage); lay=$(val --pipeline-model-parallel-layout)
  want=$(awk '/^interleave:/ {print $2}' "$P/$name.plan.yaml")
  if [ -n "$lay" ]; then vp=$(( $(echo "$lay" | tr -cd '|' | wc -c) + 1 )); vp=$((vp / pp)); elif [ -n "$per" ]; then vp=$(( nl / pp / per )); else vp=1; fi
  if [ "$vp" = "$want" ] && { [ -z "$per" ] || [ $(( (nl / pp) % per )) = 0 ]; }; then pass=$((pass+1)); else echo "FAIL $name: Megatron-LM runs vp $vp, the plan interleave $want"; fail=$((fail+1)); fi
  if grep -qE -- "--decoder-(first|last)-pipeline-num-layers 0$" "$a"; then echo "FAIL $name: a 0 in --decoder-first/last-pipeline-num-layers"; fail=$((fail+1)); else pass=$((pass+1)); fi
done
check gpt3-64 "$G/gpt3-64/megatron.args" "--num-layers-per-virtual-pipeline-stage 3"  # 96 / 8 / 3 = 4 = the plan's interleave
# megatron.sh runs pretrain_gpt.py under torchrun at the plan's world size with Megatron's mock data:
# run with a fake torchrun on PATH that records its argv (no GPU here), then check that argv.
GA=$(cd "$G" && pwd)  # absolute: the runs below start in another directory, as a user would
mkdir -p "$T/fakebin"
printf '#!/usr/bin/env bash\nprintf "%%s\\n" "CDMC=${CUDA_DEVICE_MAX_CONNECTIONS:-unset}" "$@" > "$TORCHRUN_ARGV"\n' > "$T/fakebin/torchrun"
chmod +x "$T/fakebin/torchrun"
for s in "$GA"/*/megatron.sh; do
  d=$(dirname "$s"); name=$(basename "$d")
  if ! bash -n "$s"; then echo "FAIL $name: megatron.sh syntax"; fail=$((fail+1)); continue; fi
  (cd "$T" && PATH="$T/fakebin:$PATH" TORCHRUN_ARGV="$T/$name.argv" MEGATRON_LM=/opt/mlm bash "$s" 3) || { echo "FAIL $name: megatron.sh exit $?"; fail=$((fail+1)); continue; }
  A=$T/$name.argv
  arg() { awk -v k="$1" 'prev == k {print; exit} {prev = $0}' "$A"; }
  world=$(awk '/^(tp|pp|dp|cp): / {p = (p ? p : 1) * $2} END {print p}' "$d/launch.yaml")
  got=$(( $(arg --nproc-per-node) * $(arg --nnodes) ))
  [ "$got" = "$world" ] && pass=$((pass+1)) || { echo "FAIL $name: torchrun world $got, the plan's $world"; fail=$((fail+1)); }
  vocab=$(awk '{for (i = 1; i <= NF; ++i) if ($i == "vocab:") {v = $(i+1); gsub(/[},]/, "", v); print v - 1; exit}}' "$d/model.yaml")
  [ "$(arg --vocab-size)" = "$vocab" ] && [ "$(arg --train-iters)" = 3 ] && [ "$(arg --tokenizer-type)" = NullTokenizer ] && grep -qx -- --mock-data "$A" \
    && [ "$(arg --node-rank)" = 0 ] && [ "$(arg --master-addr)" = 127.0.0.1 ] && grep -qx "/opt/mlm/pretrain_gpt.py" "$A" \
    && pass=$((pass+1)) || { echo "FAIL $name: megatron.sh argv lacks the smoke-test flags (vocab $vocab)"; fail=$((fail+1)); }
  # megatron.args verbatim, word by word, after pretrain_gpt.py (layouts and --moe-layer-freq unglobbed).
  if diff <(grep -v '^#' "$d/megatron.args" | tr ' ' '\n') <(sed -n '/pretrain_gpt.py$/,$p' "$A" | sed '1d' | head -n "$(grep -v '^#' "$d/megatron.args" | tr ' ' '\n' | wc -l)") >/dev/null; then
    pass=$((pass+1)); else echo "FAIL $name: megatron.args not passed verbatim"; fail=$((fail+1)); fi
  tpcp=$(awk '/^(tp|cp): / {p = (p ? p : 1) * $2} END {print p}' "$d/launch.yaml")
  want=unset; [ "$tpcp" -gt 1 ] && ! grep -qx -- --use-megatron-fsdp "$d/megatron.args" && want=1
  [ "$(head -1 "$A")" = "CDMC=$want" ] && pass=$((pass+1)) || { echo "FAIL $name: $(head -1 "$A"), want CDMC=$want"; fail=$((fail+1)); }
done
if (cd "$T" && PATH="$T/fakebin:$PATH" TORCHRUN_ARGV="$T/x.argv" MEGATRON_LM=/opt/mlm NNODES=3 bash "$GA/gpt3-64/megatron.sh" 2>/dev/null); then
  echo "FAIL gpt3-64: megatron.sh ran 3 x 8 ranks for a 64-rank plan"; fail=$((fail+1)); else pass=$((pass+1)); fi
# DeepSpeed (issue 14): every layer on exactly one stage, each pipeline rank's stage as many layers as
# the plan's chunks on that rank (gpt3-64: 8 ranks x 4 chunks of 3 blocks; the old export kept only the
# first chunk's boundaries, 75 of 96 blocks on the last stage), the topology in partition.json, the batch
# identity over dp, per-stage replication and PipeDream's asynchronous schedule refused.
check gpt3-64 "$G/gpt3-64/deepspeed/partition.json" '  "topology": {"num_pp": 8, "num_mp": 8, "num_dp": 1},' '  "parts": [0, 13, 25, 37, 49, 61, 73, 85, 100],'
check tiny-gpt-pp2 "$G/tiny-gpt-pp2/deepspeed/partition.json" '  "parts": [0, 3, 8],'
check tiny-gpt-pp2 "$G/tiny-gpt-pp2/deepspeed/pipeline.py" '            kwargs.setdefault("topology", topology())'
check llama3-8b-fp8-16 "$G/llama3-8b-fp8-16/deepspeed/ds_config.json" '  "tensor_parallel": {"autotp_size": 8},'
for name in gpt3-64 llama3-8b-64 tiny-gpt-pp2; do
  j=$G/$name/deepspeed
  read -r tbs mbs gas < <(python3 -c "import json; c = json.load(open('$j/ds_config.json')); print(c['train_batch_size'], c['train_micro_batch_size_per_gpu'], c['gradient_accumulation_steps'])")
  dp=$(python3 -c "import json; print(json.load(open('$j/partition.json'))['topology']['num_dp'])")
  [ "$tbs" = $((mbs * gas * dp)) ] && pass=$((pass+1)) || { echo "FAIL $name: train_batch_size $tbs != $mbs x $gas x dp $dp"; fail=$((fail+1)); }
done
if [ ! -e "$G/vgg16-async/deepspeed/ds_config.json" ] && grep -qF "PipeDream's asynchronous schedule" "$G/vgg16-async/deepspeed/refused.txt" \
   && grep -qF "deepspeed: not written: PipeDream's asynchronous schedule" "$T/vgg-notes.err"; then pass=$((pass+1)); else echo "FAIL vgg16-async: DeepSpeed not refused"; fail=$((fail+1)); fi
# torchtitan.toml (issue 14; torchtitan 0.2.2's TOML, tests/exports/torchtitan_test.sh parses it): the registered
# flavor, the degrees, the model parts by torchtitan's FQNs; models torchtitan does not register refused.
check llama3-8b-64 "$G/llama3-8b-64/torchtitan.toml" 'flavor = "8B"' 'data_parallel_shard_degree = 8' 'tensor_parallel_degree = 4' 'pipeline_parallel_degree = 2' \
  'pipeline_parallel_schedule = "Interleaved1F1B"' 'local_batch_size = 64' 'global_batch_size = 512' 'seq_len = 8192'
check llama3-8b-fp8-16 "$G/llama3-8b-fp8-16/torchtitan.toml" 'converters = ["quantize.linear.float8"]' 'filter_fqns = ["output"]' 'pipeline_parallel_degree = 1'
n=$(grep '^module_fqns_per_model_part' "$G/llama3-8b-64/torchtitan.toml" | grep -o '"layers\.[0-9]*"' | sort -u | wc -l)
[ "$n" = 32 ] && pass=$((pass+1)) || { echo "FAIL llama3-8b-64: $n distinct layers in the model parts, not 32"; fail=$((fail+1)); }
for name in gpt3-64 tiny-gpt-pp2 vgg16-async; do
  if [ -f "$G/$name/torchtitan.toml.refused" ] && [ ! -e "$G/$name/torchtitan.toml" ]; then pass=$((pass+1)); else echo "FAIL $name: torchtitan.toml not refused"; fail=$((fail+1)); fi
done
echo "codegen: $pass passed, $fail failed"
[ $fail = 0 ]
