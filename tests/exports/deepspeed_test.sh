#!/usr/bin/env bash
# DeepSpeed exports checked by DeepSpeed's own code (tests/exports/check_deepspeed.py, DeepSpeed 0.19.8 in
# the exports venv): every golden deepspeed/ and the demo plans' exports in ONE python process
# (DeepSpeedConfig with the topology's data-parallel size, keys DeepSpeed reads, the topology's rank order
# against launch.yaml, parts against the plan's stages per rank); the issue's defects, which it must
# reject; the exported PlannedPipelineModule under torchrun with gloo on CPU (2 and 4 ranks).
# Without the venv: FAIL with the reason, never a skip.
#   bash tests/exports/deepspeed_test.sh PLANNER SOURCE_DIR
set -u
. "$(dirname "$0")/results.sh"
PLANNER=$1
SRC=$(cd "$2" && pwd)
PY=$(bash "$SRC/tests/exports/venv_python.sh") || { echo "FAIL deepspeed export check: no engines' venv (see above); deepspeed is needed"; exit 1; }
TORCHRUN=$(dirname "$PY")/torchrun
export PYTHONDONTWRITEBYTECODE=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C=$SRC/configs
G=$SRC/tests/codegen/golden
# The demo plans: NAME MODEL GPUS CLUSTER SOLVE-FLAGS
while read -r name model gpus cluster flags; do
  if ! $PLANNER -q solve --gpus "$gpus" --model "$C/models/$model.yaml" --cluster "$C/clusters/$cluster.yaml" $flags -o "$T/$name.plan.yaml" >/dev/null 2>"$T/$name.err" \
    || ! $PLANNER -q codegen "$T/$name.plan.yaml" -o "$T/demo-$name" 2>>"$T/$name.err"; then
    echo "FAIL demo $name: solve / codegen"; cat "$T/$name.err"; fail=1; continue
  fi
  [ -f "$T/demo-$name/deepspeed/ds_config.json" ] || { echo "FAIL demo $name: no ds_config.json ($(cat "$T/demo-$name/deepspeed/refused.txt" 2>/dev/null))"; fail=1; }
done <<EOF
tiny-gpt-pp2 tiny-gpt 2 local-cpu --pp 2
tiny-gpt-pp2dp2 tiny-gpt 4 dgx-a100 --pp 2 --tp 1 --zero 1
llama3-8b llama3-8b 64 dgx-h100 --cp 1
gpt3-interleaved gpt3-175b 128 dgx-h100 --tp 8 --pp 8 --vp 2 --zero 1
llama3-8b-tp8 llama3-8b 16 dgx-h100 --tp 8 --pp 1 --cp 1 --zero 3
dualpipev llama3-8b 32 dgx-h100 --tp 8 --pp 2 --cp 1 --zero 1 --schedule dualpipev --kernels none
tiny-gpt-pp2 tiny-gpt 2 local-cpu --pp 2
tiny-gpt-pp2dp2 tiny-gpt 4 dgx-a100 --pp 2 --tp 1 --zero 1
llama3-8b llama3-8b 64 dgx-h100 --cp 1
gpt3-interleaved gpt3-175b 128 dgx-h100 --tp 8 --pp 8 --vp 2 --zero 1
llama3-8b-tp8 llama3-8b 16 dgx-h100 --tp 8 --pp 1 --cp 1 --zero 3
dualpipev llama3-8b 32 dgx-h100 --tp 8 --pp 2 --cp 1 --zero 1 --schedule dualpipev --kernels none
EOF
# The issue's defects in copies of golden directories: the checker must FAIL each with the reason.
neg() {  # neg NAME GOLDEN FILE PYTHON-EDIT EXPECTED-TEXT
  cp -r "$G/$2" "$T/neg-$1"
  python3 -c "import json, sys; p = sys.argv[1]; c = json.load(open(p)); $4; json.dump(c, open(p, 'w'))" "$T/neg-$1/deepspeed/$3"
  echo "$1|$5" >> "$T/expect"
}
neg first-chunk-parts gpt3-64 partition.json "c['parts'] = [0, 4, 7, 10, 13, 16, 19, 22, 100]" "stages hold [4, 3, 3, 3, 3, 3, 3, 78] layers per pipeline rank"
neg no-topology llama3-8b-64 partition.json "c.pop('topology')" "partition.json has no topology"
neg batch llama3-8b-64 ds_config.json "c['train_batch_size'] = 4096" "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size"
neg unknown-key tiny-gpt-pp2 ds_config.json "c['bogus_key'] = 1" "top-level keys DeepSpeed does not read: ['bogus_key']"
neg pipeline-key tiny-gpt-pp2 ds_config.json "c['pipeline']['activation_checkpoint_intervals'] = 1" "pipeline.activation_checkpoint_intervals"
neg zero-stage tiny-gpt-pp2 ds_config.json "c['zero_optimization']['stage'] = 7" "DeepSpeedConfig: ValidationError"
neg grad-fp32-zero0 llama3-8b-64 ds_config.json "c['zero_optimization']['stage'] = 0" "unsupported mix of model_dtype=torch.bfloat16 and grad_accum_dtype=torch.float32"
dirs=$(for d in "$G"/* "$T"/demo-* "$T"/neg-*; do [ -f "$d/deepspeed/ds_config.json" ] && echo "$d"; done)
"$PY" "$SRC/tests/exports/check_deepspeed.py" config $dirs > "$T/config.out" 2>"$T/config.err"
expect_results "$T/config.out" "$T/expect" "$T/config.err" $dirs
echo "deepspeed config: $n_ok of $(echo "$dirs" | wc -w) directories as expected (DeepSpeed $("$PY" -c 'import importlib.metadata as m; print(m.version("deepspeed"))' 2>/dev/null))"
# Refused plans have no ds_config.json, a refused.txt.
[ -f "$G/vgg16-async/deepspeed/refused.txt" ] && [ ! -e "$G/vgg16-async/deepspeed/ds_config.json" ] || { echo "FAIL vgg16-async: DeepSpeed files for a PipeDream plan"; fail=1; }
# PlannedPipelineModule under torchrun (gloo, CPU): each rank's stage, layers and coordinates.
for case in "tiny-gpt-pp2 2" "demo-tiny-gpt-pp2dp2 4"; do
  set -- $case
  d=$G/$1; [ -d "$d" ] || d=$T/$1
  cp -r "$d" "$T/run-$1"
  # Each rank's output in its own file (torchrun --redirects 3), read rank after rank: lines of ranks
  # sharing one stdout can run together ("...block1']rank 2: ok ...", seen in CI).
  if timeout 180 "$TORCHRUN" --log-dir "$T/log-$1" --redirects 3 --nproc-per-node "$2" "$SRC/tests/exports/check_deepspeed.py" module "$T/run-$1" \
       > "$T/run-$1.torchrun" 2>&1 \
     && for r in $(seq 0 $(( $2 - 1 ))); do cat "$T"/log-$1/*/attempt_0/$r/stdout.log; done > "$T/run-$1.out" \
     && [ "$(grep -c '^rank [0-9]*: ok' "$T/run-$1.out")" = "$2" ]; then
    grep '^rank' "$T/run-$1.out" | sort
  else echo "FAIL PipelineModule $1 on $2 ranks"; cat "$T/run-$1.torchrun" "$T"/log-$1/*/attempt_0/*/std*.log 2>/dev/null | grep -E '^rank|Error' | tail -8; fail=1; fi
done
[ $fail = 0 ] && echo "deepspeed: all checks passed"
exit $fail
