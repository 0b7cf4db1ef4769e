#!/usr/bin/env bash
# torchtitan.toml exports checked by torchtitan 0.2.2's own code (tests/exports/check_torchtitan.py; the wheel
# unpacked beside the exports venv by setup_venv.sh): every golden torchtitan.toml and the demo plans' exports
# (llama3-8b 1F1B, interleaved, ZB-H1, no pipelining with FSDP, async TP, FP8 rowwise and MXFP8; llama3-70b
# dualpipev, CP) in ONE process,
# then defects it must reject. Without the venv: FAIL with the reason, never a skip.
#   bash tests/exports/torchtitan_test.sh PLANNER SOURCE_DIR
set -u
. "$(dirname "$0")/results.sh"
PLANNER=$1
SRC=$(cd "$2" && pwd)
PY=$(bash "$SRC/tests/exports/venv_python.sh") || { echo "FAIL torchtitan export check: no engines' venv (see above); torchtitan is needed"; exit 1; }
TT=$(dirname "$(dirname "$PY")")/torchtitan-0.2.2
[ -f "$TT/torchtitan/config/job_config.py" ] || { echo "FAIL torchtitan export check: torchtitan 0.2.2 is not unpacked at $TT (run tests/exports/setup_venv.sh)"; exit 1; }
export PYTHONDONTWRITEBYTECODE=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
C=$SRC/configs
G=$SRC/tests/codegen/golden
while read -r name model gpus flags; do
  if ! $PLANNER -q solve --gpus "$gpus" --model "$C/models/$model.yaml" --cluster "$C/clusters/dgx-h100.yaml" $flags -o "$T/$name.plan.yaml" >/dev/null 2>"$T/$name.err" \
    || ! $PLANNER -q codegen "$T/$name.plan.yaml" -o "$T/demo-$name" 2>>"$T/$name.err"; then
    echo "FAIL demo $name: solve / codegen"; cat "$T/$name.err"; fail=1; continue
  fi
  [ -f "$T/demo-$name/torchtitan.toml" ] || { echo "FAIL demo $name: no torchtitan.toml ($(cat "$T/demo-$name/torchtitan.toml.refused" 2>/dev/null))"; fail=1; }
done <<EOF
l8-1f1b llama3-8b 32 --tp 8 --pp 2 --cp 1 --zero 1 --schedule 1f1b
l8-zbh1 llama3-8b 32 --tp 8 --pp 2 --cp 1 --zero 1 --schedule zb-h1 --kernels none
l8-fsdp llama3-8b 16 --tp 8 --pp 1 --cp 1 --zero 3 --recompute full
l8-ddp llama3-8b 16 --tp 8 --pp 1 --cp 1 --zero 0 --recompute selective
l70-dualpipev llama3-70b 128 --tp 8 --pp 4 --cp 1 --zero 1 --schedule dualpipev --kernels none
l70-cp llama3-70b 128 --tp 8 --pp 4 --cp 2 --zero 1 --schedule 1f1b
l8-asynctp llama3-8b 32 --tp 8 --pp 1 --cp 1 --zero 3 --engine torchtitan-compile --tp-comm-overlap on
EOF
# FP8 recipes as torchao runs them (codegen/torchtitan.cc TitanFp8Recipe): rowwise on H100, MXFP8 on B200 (the mx
# converter, mxfp8_cublas; 0.3: MXFP8LinearConverter over the layers).
for r in "rowwise dgx-h100" "mxfp8 b200"; do
  set -- $r
  if ! $PLANNER -q solve --gpus 16 --model "$C/models/llama3-8b.yaml" --cluster "$C/clusters/$2.yaml" --precision fp8 --fp8-recipe "$1" --tp 8 --pp 1 --zero 3 --engine torchtitan -o "$T/$1.plan.yaml" >/dev/null 2>"$T/$1.err" \
    || ! $PLANNER -q codegen "$T/$1.plan.yaml" -o "$T/demo-fp8-$1" 2>>"$T/$1.err"; then
    echo "FAIL demo fp8-$1: solve / codegen"; cat "$T/$1.err"; fail=1
  fi
done
grep -qx 'recipe_name = "rowwise"' "$T/demo-fp8-rowwise/torchtitan.toml" && grep -qx 'converters = \["quantize.linear.mx"\]' "$T/demo-fp8-mxfp8/torchtitan.toml" \
  && grep -qx 'recipe_name = "mxfp8_cublas"' "$T/demo-fp8-mxfp8/torchtitan.toml" && grep -qx 'filter_fqns = \["output"\]' "$T/demo-fp8-mxfp8/torchtitan.toml" \
  && grep -q 'MXFP8LinearConverter.Config(fqns=\["layers"\])' "$T/demo-fp8-mxfp8/torchtitan_config.py" \
  || { echo "FAIL demo fp8 recipes: rowwise / mx converter not written"; fail=1; }
# Async TP as solved (--tp-comm-overlap on with torch.compile): written in the TOML and in the 0.3 module.
grep -qx "enable_async_tensor_parallel = true" "$T/demo-l8-asynctp/torchtitan.toml" \
  && grep -q "enable_async_tensor_parallel=True" "$T/demo-l8-asynctp/torchtitan_config.py" \
  || { echo "FAIL demo l8-asynctp: async TP not written"; fail=1; }
neg() {  # neg NAME GOLDEN SED-SCRIPT FILE EXPECTED-TEXT
  cp -r "$G/$2" "$T/neg-$1"
  sed -i "$3" "$T/neg-$1/$4"
  echo "$1|$5" >> "$T/expect"
}
neg unknown-key llama3-8b-64 's/^tensor_parallel_degree = 4$/tensor_parallel_degree = 4\ntensor_paralel_degree = 4/' torchtitan.toml "ConfigManager"
neg world llama3-8b-64 's/^data_parallel_shard_degree = 8$/data_parallel_shard_degree = 4/' torchtitan.toml "ParallelDims"
neg fqn llama3-8b-64 's/"layers.9", /"layer.9", /' torchtitan.toml "FQN layer.9 names no module"
neg lost-layer llama3-8b-64 's/"layers.9", //' torchtitan.toml "not each of the model's 35 once"
neg single-stage llama3-8b-64 's/^pipeline_parallel_schedule = "Interleaved1F1B"$/pipeline_parallel_schedule = "1F1B"/' torchtitan.toml "is single-stage: 4 parts for pp 2"
neg flavor llama3-8b-64 's/^  ffn: 14336$/  ffn: 14400/' model.yaml "flavor 8B's ffn is 14336, model.yaml's 14400"
neg batch llama3-8b-64 's/^global_batch_size = 512$/global_batch_size = 500/' torchtitan.toml "global batch 500 not divisible"
# The converter name torchtitan 0.2.2 does not register (exports before 2026-11-30 wrote it: a KeyError at launch).
neg converter llama3-8b-fp8-16 's/^converters = \["quantize.linear.float8"\]$/converters = ["float8"]/' torchtitan.toml "converter 'float8' is not registered"
dirs=$(for d in "$G"/* "$T"/demo-* "$T"/neg-*; do [ -f "$d/torchtitan.toml" ] && echo "$d"; done)
PYTHONPATH="$TT" "$PY" "$SRC/tests/exports/check_torchtitan.py" $dirs > "$T/out" 2>"$T/err"
expect_results "$T/out" "$T/expect" "$T/err" $dirs
echo "torchtitan: $n_ok of $(echo "$dirs" | wc -w) directories as expected (torchtitan 0.2.2, torch $("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null))"
# torchtitan 0.3 (the venv's): torchtitan_config.py loaded by its ConfigManager, the same plan as the TOML.
pos=$(for d in "$G"/* "$T"/demo-*; do [ -f "$d/torchtitan_config.py" ] && echo "$d"; done)
cp -r "$G/llama3-8b-64" "$T/neg03-tp"; sed -i 's/^    p.tensor_parallel_degree = 4$/    p.tensor_parallel_degree = 2/' "$T/neg03-tp/torchtitan_config.py"
# The issue-32 defect: a bf16 plan whose module keeps a preset's float8 converter (405B's) trains FP8.
cp -r "$G/llama3-8b-64" "$T/neg03-fp8"; sed -i 's/converters=\[\])/converters=[Float8LinearConverter.Config(filter_fqns=["lm_head"])])/' "$T/neg03-fp8/torchtitan_config.py"
# An MXFP8 module converting the output layer too (fqns empty: every linear), which the plan costs in bf16.
cp -r "$T/demo-fp8-mxfp8" "$T/neg03-lmhead"; sed -i 's/MXFP8LinearConverter.Config(fqns=\["layers"\])/MXFP8LinearConverter.Config(fqns=[])/' "$T/neg03-lmhead/torchtitan_config.py"
"$PY" "$SRC/tests/exports/check_torchtitan_v03.py" $pos "$T/neg03-tp" "$T/neg03-fp8" "$T/neg03-lmhead" > "$T/out03" 2>"$T/err03"
n03=0
for d in $pos; do
  if grep -qxF "ok $d" "$T/out03"; then n03=$((n03+1)); else echo "FAIL torchtitan 0.3 $d: $(grep -F " $d" "$T/out03")"; tail -3 "$T/err03"; fail=1; fi
done
grep -F " $T/neg03-tp" "$T/out03" | grep -q "^FAIL.*ParallelDims\|^FAIL.*tensor_parallel_degree\|^FAIL.*Invalid parallel dims" && n03=$((n03+1)) || { echo "FAIL torchtitan 0.3: a module off its TOML not rejected: $(grep -F "neg03" "$T/out03")"; fail=1; }
grep -F " $T/neg03-fp8" "$T/out03" | grep -q "^FAIL.*Float8 linears in the model" && n03=$((n03+1)) || { echo "FAIL torchtitan 0.3: a bf16 plan's module with float8 linears not rejected: $(grep -F "neg03-fp8" "$T/out03")"; fail=1; }
grep -F " $T/neg03-lmhead" "$T/out03" | grep -q "^FAIL.*lm_head is MXFP8" && n03=$((n03+1)) || { echo "FAIL torchtitan 0.3: an MXFP8 output layer not rejected: $(grep -F "neg03-lmhead" "$T/out03")"; fail=1; }
echo "torchtitan 0.3: $n03 of $(( $(echo "$pos" | wc -w) + 3 )) directories as expected (torchtitan $("$PY" -c 'import importlib.metadata as m; print(m.version("torchtitan"))' 2>/dev/null))"
# Refused: models torchtitan does not register, PipeDream's schedule.
for name in gpt3-64 tiny-gpt-pp2 vgg16-async; do
  [ -f "$G/$name/torchtitan.toml.refused" ] && [ ! -e "$G/$name/torchtitan.toml" ] || { echo "FAIL $name: torchtitan.toml written for a plan torchtitan cannot run"; fail=1; }
done
[ $fail = 0 ] && echo "torchtitan: all checks passed"
exit $fail
