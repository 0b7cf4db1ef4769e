#!/usr/bin/env bash
# Golden tests of planner codegen: each checked-in plan's launch directory
# equals tests/codegen/golden/<case>/ byte for byte. UPDATE_GOLDEN=1 rewrites them.
set -u
PLANNER=$1
SRC=$2
G=$SRC/tests/codegen/golden
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
for plan in "$SRC"/tests/codegen/plans/*.plan.yaml; do
  name=$(basename "$plan" .plan.yaml)
  if ! $PLANNER -q codegen "$plan" -o "$T/$name" --planner-path planner --iterations 20 2>"$T/$name.err"; then
    echo "FAIL $name: codegen"; cat "$T/$name.err"; fail=$((fail+1)); continue
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
  "--untie-embeddings-and-output-weights" "--attention-backend flash" "--use-distributed-optimizer" "--overlap-grad-reduce" \
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
# Context parallelism: DeepSpeed's config has none (Ulysses is another kind); refused.
sed 's/^cp: 1$/cp: 2/' "$P/llama3-8b-fp8-16.plan.yaml" > "$T/cp2.plan.yaml"
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
echo "codegen: $pass passed, $fail failed"
[ $fail = 0 ]
