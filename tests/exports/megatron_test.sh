#!/usr/bin/env bash
# megatron.args checked by Megatron-Core's own code (tools/check_megatron_core.py, PyPI megatron-core
# in the exports venv): every golden megatron.args and the demo plans' exports (solved and generated
# here: tiny-gpt, llama3-8b, gpt3-175b, mixtral-8x7b (MoE, ep), deepseek-v3 (MoE, MLA, MTP, layout), gpt-oss-120b
# (MoE, sliding-window attention on every other layer)), all in
# ONE python process; then the issue's defects, which the checker must reject. With MEGATRON_LM_DIR
# (a Megatron-LM checkout, e.g. tag core_v0.16.1) also tools/check_megatron_args.py (Megatron-LM's
# parse_args + validate_args) on each. Without the venv: FAIL with the reason, never a skip.
#   bash tests/exports/megatron_test.sh PLANNER SOURCE_DIR
set -u
PLANNER=$1
SRC=$(cd "$2" && pwd)
PY=$(bash "$SRC/tests/exports/venv_python.sh") || { echo "FAIL megatron export check: no engines' venv (see above); megatron-core is needed"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C=$SRC/configs
# The demo plans: MODEL GPUS CLUSTER
while read -r model gpus cluster; do
  if ! $PLANNER -q solve --gpus "$gpus" --model "$C/models/$model.yaml" --cluster "$C/clusters/$cluster.yaml" -o "$T/$model.plan.yaml" >/dev/null 2>"$T/$model.err" \
    || ! $PLANNER -q codegen "$T/$model.plan.yaml" -o "$T/demo-$model" 2>>"$T/$model.err"; then
    echo "FAIL demo $model: solve / codegen"; cat "$T/$model.err"; fail=1; continue
  fi
  [ -f "$T/demo-$model/megatron.args" ] || { echo "FAIL demo $model: no megatron.args ($(cat "$T/demo-$model/megatron.args.refused" 2>/dev/null))"; fail=1; }
done <<EOF
tiny-gpt 2 local-cpu
llama3-8b 64 dgx-h100
gpt3-175b 64 dgx-h100
mixtral-8x7b 64 dgx-h100
deepseek-v3 256 h800
gpt-oss-120b 64 dgx-h100
EOF
grep -qx -- "--window-size 127,0" "$T/demo-gpt-oss-120b/megatron.args" && grep -qx -- "--window-attn-skip-freq 2" "$T/demo-gpt-oss-120b/megatron.args" \
  || { echo "FAIL demo gpt-oss-120b: no sliding window (--window-size 127,0, --window-attn-skip-freq 2) in megatron.args"; fail=1; }
# ZeRO-3 without pipelining: Megatron-FSDP (the golden fp8 plan at zero_stage 3).
cp "$SRC/tests/codegen/plans/llama3-8b-fp8.model.yaml" "$T/"
sed 's/^zero_stage: 1$/zero_stage: 3/' "$SRC/tests/codegen/plans/llama3-8b-fp8-16.plan.yaml" > "$T/llama3-8b-fp8-zero3.plan.yaml"
$PLANNER -q codegen "$T/llama3-8b-fp8-zero3.plan.yaml" -o "$T/demo-llama3-8b-fp8-zero3" 2>/dev/null && grep -qx -- --use-megatron-fsdp "$T/demo-llama3-8b-fp8-zero3/megatron.args" \
  || { echo "FAIL demo zero3: no Megatron-FSDP megatron.args"; fail=1; }
# FP8 parameters (plan fp8_param_gather: the golden fp8 plan, ZeRO-1 over dp 2): --fp8-param-gather under the
# distributed optimizer, which Megatron-LM's validate_args requires.
sed 's/^p2p_overlap: \(.*\)$/p2p_overlap: \1\nfp8_param_gather: true/' "$SRC/tests/codegen/plans/llama3-8b-fp8-16.plan.yaml" > "$T/llama3-8b-fp8-params.plan.yaml"
$PLANNER -q codegen "$T/llama3-8b-fp8-params.plan.yaml" -o "$T/demo-llama3-8b-fp8-params" 2>/dev/null \
  && grep -qx -- --fp8-param-gather "$T/demo-llama3-8b-fp8-params/megatron.args" && grep -qx -- --use-distributed-optimizer "$T/demo-llama3-8b-fp8-params/megatron.args" \
  || { echo "FAIL demo fp8 params: no --fp8-param-gather under the distributed optimizer in megatron.args"; fail=1; }
# The same with MXFP8 (Blackwell): its parameters gathered as bf16 into the gradient buffer, which Transformer Engine's
# MXFP8Tensor needs (--reuse-grad-buf-for-mxfp8-param-ag; without it the run fails at start-up).
sed -e 's/^p2p_overlap: \(.*\)$/p2p_overlap: \1\nfp8_param_gather: true/' -e 's/^  dtype: "fp8"$/  dtype: "fp8"\n  fp8_recipe: "mxfp8"/' "$SRC/tests/codegen/plans/llama3-8b-fp8-16.plan.yaml" > "$T/llama3-8b-mxfp8-params.plan.yaml"
$PLANNER -q codegen "$T/llama3-8b-mxfp8-params.plan.yaml" -o "$T/demo-llama3-8b-mxfp8-params" 2>/dev/null \
  && grep -qx -- "--fp8-recipe mxfp8" "$T/demo-llama3-8b-mxfp8-params/megatron.args" && grep -qx -- --reuse-grad-buf-for-mxfp8-param-ag "$T/demo-llama3-8b-mxfp8-params/megatron.args" \
  || { echo "FAIL demo mxfp8 params: no --reuse-grad-buf-for-mxfp8-param-ag beside --fp8-recipe mxfp8 in megatron.args"; fail=1; }
# All-gather context parallelism (solve --cp-comm-type allgather): the export names it.
$PLANNER -q solve --gpus 64 --model "$C/models/llama2-7b.yaml" --cluster "$C/clusters/dgx-h100.yaml" --tp 4 --pp 1 --cp 2 --global-batch 64 --seq 65536 --cp-comm-type allgather -o "$T/cp-allgather.plan.yaml" >/dev/null 2>&1 \
  && $PLANNER -q codegen "$T/cp-allgather.plan.yaml" -o "$T/demo-cp-allgather" 2>/dev/null && grep -qx -- "--cp-comm-type all_gather" "$T/demo-cp-allgather/megatron.args" \
  || { echo "FAIL demo cp allgather: no --cp-comm-type all_gather (Transformer Engine's spelling) in megatron.args"; fail=1; }
# The flex dispatcher (DeepEP) with the EP all-to-all overlap under the interleaved schedule: both written, and the
# file passes Megatron-Core's TransformerConfig checks below with the others.
$PLANNER -q solve --gpus 64 --model "$C/models/mixtral-8x7b.yaml" --cluster "$C/clusters/dgx-h100.yaml" --tp 2 --pp 4 --ep 8 --etp 1 --schedule interleaved --interleave 2 --recompute selective --moe-dispatcher flex --moe-overlap on -o "$T/moe-flex.plan.yaml" >/dev/null 2>&1 \
  && $PLANNER -q codegen "$T/moe-flex.plan.yaml" -o "$T/demo-moe-flex" 2>/dev/null \
  && grep -qx -- "--moe-token-dispatcher-type flex" "$T/demo-moe-flex/megatron.args" \
  && grep -qx -- "--moe-flex-dispatcher-backend deepep" "$T/demo-moe-flex/megatron.args" \
  && grep -qx -- "--overlap-moe-expert-parallel-comm" "$T/demo-moe-flex/megatron.args" \
  || { echo "FAIL demo moe flex: no flex dispatcher or EP overlap in megatron.args"; fail=1; }
# TP communication overlap as solved (--tp-comm-overlap on, sequence parallelism with TP): written, and the file passes
# Megatron-Core's TransformerConfig checks below with the others.
$PLANNER -q solve --gpus 64 --model "$C/models/llama3-8b.yaml" --cluster "$C/clusters/dgx-h100.yaml" --tp 4 --pp 1 --tp-comm-overlap on -o "$T/tp-comm-overlap.plan.yaml" >/dev/null 2>&1 \
  && $PLANNER -q codegen "$T/tp-comm-overlap.plan.yaml" -o "$T/demo-tp-comm-overlap" 2>/dev/null \
  && grep -qx -- "--tp-comm-overlap" "$T/demo-tp-comm-overlap/megatron.args" \
  || { echo "FAIL demo tp comm overlap: no --tp-comm-overlap in megatron.args"; fail=1; }
# The precision-aware optimizer (solve --optimizer-state bf16-moments: TE FusedAdam, bf16 moments, fp32 remainders under
# the distributed optimizer): written, and Megatron-Core's OptimizerConfig keeps the plan's 6 B per parameter.
$PLANNER -q solve --gpus 8 --model "$C/models/llama3-8b.yaml" --cluster "$C/clusters/dgx-h100.yaml" --tp 1 --pp 1 --cp 1 --global-batch 64 --optimizer-state bf16-moments -o "$T/optimizer-state.plan.yaml" >/dev/null 2>&1 \
  && $PLANNER -q codegen "$T/optimizer-state.plan.yaml" -o "$T/demo-optimizer-state" 2>/dev/null \
  && grep -qx -- "--use-precision-aware-optimizer" "$T/demo-optimizer-state/megatron.args" \
  && grep -qx -- "--exp-avg-sq-dtype bf16" "$T/demo-optimizer-state/megatron.args" \
  || { echo "FAIL demo optimizer state: no precision-aware optimizer in megatron.args"; fail=1; }
# Under --fp8-recipe blockwise (layernorm recompute in FP8) Megatron-Core keeps its own fp32 master, not TE's
# remainders: 12 B, which the checker expects (the plan's 10 + codegen's noted 2).
$PLANNER -q solve --gpus 8 --model "$C/models/llama3-8b.yaml" --cluster "$C/clusters/dgx-h100.yaml" --tp 2 --pp 1 --cp 1 --global-batch 64 --precision fp8 --recompute selective --recompute-modules layernorm --optimizer-state fp32-remainders -o "$T/optimizer-state-blockwise.plan.yaml" >/dev/null 2>&1 \
  && $PLANNER -q codegen "$T/optimizer-state-blockwise.plan.yaml" -o "$T/demo-optimizer-state-blockwise" 2>/dev/null \
  && grep -qx -- "--fp8-recipe blockwise" "$T/demo-optimizer-state-blockwise/megatron.args" \
  || { echo "FAIL demo optimizer state blockwise: no blockwise recipe in megatron.args"; fail=1; }
# NeMo 1.x's bf16 master beside FP8 parameters (solve --optimizer-state bf16-master, in an engine file that keeps it).
# Megatron-Core keeps FP8 parameters' master in fp32: under delayed scaling the default optimizer (12 B; TE FusedAdam
# would store remainders for FP8 parameters), under current scaling its own fp32 master beside TE's bf16 moments (8 B):
# the plan's 6 + codegen's noted 6 or 2, which the checker expects.
sed -e 's/^name: megatron-core/name: nemo-apex/' -e 's/^  bf16-moments: \[1\].*$/  bf16-moments: [1]\n  bf16-master: [1]/' "$C/engines/megatron-core.yaml" > "$T/nemo-apex.yaml"
for recipe in delayed current; do
  $PLANNER -q solve --gpus 8 --model "$C/models/llama3-8b.yaml" --cluster "$C/clusters/dgx-h100.yaml" --tp 1 --pp 1 --cp 1 --global-batch 64 --precision fp8 --fp8-recipe $recipe --fp8-param-gather --engine "$T/nemo-apex.yaml" --optimizer-state bf16-master -o "$T/optimizer-state-bf16-master-$recipe.plan.yaml" >/dev/null 2>&1 \
    && $PLANNER -q codegen "$T/optimizer-state-bf16-master-$recipe.plan.yaml" -o "$T/demo-optimizer-state-bf16-master-$recipe" --export megatron 2>/dev/null \
    && grep -qx -- "--fp8-param-gather" "$T/demo-optimizer-state-bf16-master-$recipe/megatron.args" \
    || { echo "FAIL demo optimizer state bf16-master $recipe: no FP8 parameters in megatron.args"; fail=1; }
done
grep -qx -- "--exp-avg-dtype bf16" "$T/demo-optimizer-state-bf16-master-current/megatron.args" \
  && ! grep -q -- "--use-precision-aware-optimizer" "$T/demo-optimizer-state-bf16-master-delayed/megatron.args" \
  || { echo "FAIL demo optimizer state bf16-master: bf16 moments under current scaling, the default optimizer under delayed"; fail=1; }
# The issue's defects, each in a copy of a golden launch directory: the checker must FAIL them with the reason.
G=$SRC/tests/codegen/golden
neg() {  # neg NAME GOLDEN SED-SCRIPT EXPECTED-TEXT
  cp -r "$G/$2" "$T/neg-$1"
  sed -i "$3" "$T/neg-$1/megatron.args"
  echo "$1|$4" >> "$T/expect"
}
neg vp-rounded gpt3-64 's/^--num-layers-per-virtual-pipeline-stage 3$/--num-layers-per-virtual-pipeline-stage 2/' "Megatron runs 6 virtual stages per pipeline rank, the plan 4"
neg decoder-last-0 gpt3-64 's/^--num-layers-per-virtual-pipeline-stage 3$/--decoder-last-pipeline-num-layers 0/' "num_layers_in_last_pipeline_stage must be larger than 0"
neg unknown-flag tiny-gpt-pp2 '$a --bogus-flag 1' "flag --bogus-flag has no Megatron-Core field"
neg layout-blocks llama3-8b-64 's/^--pipeline-model-parallel-layout Etttttttt|/--pipeline-model-parallel-layout Ettttttt|/' "must match num_layers"
neg groups-tp llama3-8b-64 's/^--num-query-groups 8$/--num-query-groups 3/' "must be a multiple or divisor of tensor_model_parallel_size"
neg mb-group gpt3-64 's/^--global-batch-size 128$/--global-batch-size 128\n--microbatch-group-size-per-virtual-pipeline-stage 5/' "in groups of 5 per virtual stage, pp 8: the interleaved schedule raises"
neg batch llama3-8b-64 's/^--global-batch-size 512$/--global-batch-size 520/' "is not divisible by micro batch size (2) times data parallel size (8)"
cp -r "$G/vgg16-async" "$T/neg-vgg16"; printf -- '--tensor-model-parallel-size 1\n--pipeline-model-parallel-size 3\n--micro-batch-size 64\n--global-batch-size 1024\n' > "$T/neg-vgg16/megatron.args"
echo "vgg16|no --num-layers" >> "$T/expect"
# A plan that keeps fp32 state run with the bf16 moments (launch.yaml's optimizer_state dropped): 6 B against 12.
cp -r "$T/demo-optimizer-state" "$T/neg-optimizer-state" && sed -i '/^optimizer_state:/d' "$T/neg-optimizer-state/launch.yaml"
echo "optimizer-state|keeps 6 B per parameter, the plan 12" >> "$T/expect"
# The current-scaling bf16-master plan run with fp32 moments (the moment dtypes dropped): 12 B, the plan's 8.
cp -r "$T/demo-optimizer-state-bf16-master-current" "$T/neg-bf16-master" && sed -i '/^--exp-avg/d' "$T/neg-bf16-master/megatron.args"
echo "bf16-master|keeps 12 B per parameter, the plan 8" >> "$T/expect"
# The delayed-scaling one given the precision-aware optimizer: TE FusedAdam cannot step FP8 parameters so.
cp -r "$T/demo-optimizer-state-bf16-master-delayed" "$T/neg-bf16-master-delayed" && printf -- '--use-precision-aware-optimizer\n--exp-avg-dtype bf16\n--exp-avg-sq-dtype bf16\n' >> "$T/neg-bf16-master-delayed/megatron.args"
echo "bf16-master-delayed|would store int16 remainders for the FP8 parameters" >> "$T/expect"
# megatron.sh's whole command line (megatron.args + the smoke test's mock-data flags), as torchrun
# receives it: each golden's script run with a fake torchrun that records its argv.
mkdir -p "$T/bin"
printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$@" > "$ARGV_OUT"\n' > "$T/bin/torchrun"; chmod +x "$T/bin/torchrun"
for sh in "$G"/*/megatron.sh; do
  name=$(basename "$(dirname "$sh")")
  cp -r "$(dirname "$sh")" "$T/smoke-$name"
  PATH="$T/bin:$PATH" ARGV_OUT="$T/smoke-$name.argv" MEGATRON_LM=/opt/Megatron-LM bash "$sh" 3 || { echo "FAIL $name: megatron.sh"; fail=1; }
  sed '1,/pretrain_gpt.py$/d' "$T/smoke-$name.argv" > "$T/smoke-$name/megatron.args"
  grep -qx -- --mock-data "$T/smoke-$name/megatron.args" || { echo "FAIL $name: megatron.sh passes no --mock-data"; fail=1; }
done
files=("$G"/*/megatron.args "$T"/demo-*/megatron.args "$T"/smoke-*/megatron.args "$T"/neg-*/megatron.args)
start=$(date +%s.%N)
"$PY" "$SRC/tools/check_megatron_core.py" "${files[@]}" > "$T/out" 2>"$T/err"
echo "check_megatron_core.py: ${#files[@]} files in $(echo "$(date +%s.%N) - $start" | bc) s"
grep -E "^megatron-core |: (PASS|FAIL)|^megatron-core check" "$T/out" | cut -c1-240
grep -q "^megatron-core 0.16.1 " "$T/out" || { echo "FAIL: megatron-core is not 0.16.1 (tests/exports/requirements.txt)"; tail -5 "$T/err"; fail=1; }
for f in "$G"/*/megatron.args "$T"/demo-*/megatron.args "$T"/smoke-*/megatron.args; do
  grep -qF "$f: PASS" "$T/out" || { echo "FAIL $f: not PASS under megatron-core"; fail=1; }
done
while IFS='|' read -r name text; do
  line=$(grep -F "$T/neg-$name/megatron.args: " "$T/out")
  if echo "$line" | grep -q ": FAIL (" && echo "$line" | grep -qF "$text"; then :; else echo "FAIL defect $name: checker said '$line', want FAIL with '$text'"; fail=1; fi
done < "$T/expect"
# Megatron-LM's own parse_args + validate_args, when a checkout is given (not on PyPI; GitHub may be unreachable).
if [ -n "${MEGATRON_LM_DIR:-}" ]; then
  start=$(date +%s); n=0
  for f in "$G"/*/megatron.args "$T"/demo-*/megatron.args "$T"/smoke-llama3-8b-64/megatron.args; do
    d=$(dirname "$f"); name=$(basename "$d")
    plan=$SRC/tests/codegen/plans/${name#smoke-}.plan.yaml; [ -f "$plan" ] || plan=$T/${name#demo-}.plan.yaml
    out=$("$PY" "$SRC/tools/check_megatron_args.py" "$MEGATRON_LM_DIR" "$f" --plan "$plan" 2>&1 | grep -E "^megatron.args: |^split|^validate_args")
    n=$((n+1))
    echo "$out" | grep -q "^megatron.args: PASS" && echo "check_megatron_args.py $name: PASS" || { echo "FAIL check_megatron_args.py $name: $out"; fail=1; }
  done
  echo "check_megatron_args.py (Megatron-LM at $MEGATRON_LM_DIR): $n files in $(( $(date +%s) - start )) s"
else
  echo "note: Megatron-LM's own parse_args + validate_args not run (its training code is not on PyPI): set MEGATRON_LM_DIR to a checkout of tag core_v0.16.1 to add them"
fi
[ $fail = 0 ] && echo "megatron exports: all checked files PASS, every defect rejected"
exit $fail
