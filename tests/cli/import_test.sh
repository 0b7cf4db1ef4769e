#!/usr/bin/env bash
# CLI tests of `planner import hf`: exit codes, the one "planner: error:" line of
# each mistake, and the written model file (its keys, its header, and that solve
# reads it back). The fixtures are tests/data/hf/*.json (published config.json fields).
set -u
PLANNER=$1
SRC=$2
HF="$SRC/tests/data/hf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
pass=0
fail=0
expect() {  # expect NAME CODE PATTERN -- command...
  local name=$1 code=$2 pattern=$3
  shift 4
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [ "$rc" != "$code" ] || ! grep -qF -- "$pattern" out.txt err.txt; then
    echo "FAIL $name: rc=$rc (want $code), pattern '$pattern'"; head -3 err.txt; fail=$((fail+1))
  else
    pass=$((pass+1))
  fi
  if [ "$code" != 0 ] && [ "$(wc -l < err.txt)" != 1 ]; then echo "FAIL $name: want one error line"; cat err.txt; fail=$((fail+1)); fi
}
has() {  # has NAME FILE LINE: FILE holds LINE exactly
  if grep -qxF -- "$3" "$2"; then pass=$((pass+1)); else echo "FAIL $1: '$3' not in $2"; fail=$((fail+1)); fi
}
C=$SRC/configs/clusters
expect "import llama" 0 "wrote llama3-70b.yaml: llama3-70b (LlamaForCausalLM), 80 layers, seq 8192, global_batch 512" -- \
  $PLANNER import hf $HF/llama3-70b.json -o llama3-70b.yaml --seq 8192 --global-batch 512
for line in "name: llama3-70b" "precision: bf16" "global_batch: 512" "  kv_heads: 8" "  ffn: 28672" "  ffn_act: swiglu" \
            "  norm: rmsnorm" "  position: rope" "  rope_theta: 500000" "  bias: false" "  tie_embeddings: false" "  seq: 8192" "  vocab: 128256"; do
  has "llama key" llama3-70b.yaml "$line"
done
has "llama header" llama3-70b.yaml "# llama3-70b: imported by \`planner import hf\` from $HF/llama3-70b.json (LlamaForCausalLM)."
# The imported file is the shipped one (comments aside).
if diff <(grep -v '^#' llama3-70b.yaml | grep -v 'attention: flash') <(grep -v '^#' $SRC/configs/models/llama3-70b.yaml) >/dev/null; then
  pass=$((pass+1)); else echo "FAIL llama: the import differs from configs/models/llama3-70b.yaml"; fail=$((fail+1)); fi
expect "default seq" 0 "seq 4096: no --seq given, min(max_position_embeddings 32768, 4096)" -- \
  $PLANNER import hf $HF/mistral-7b.json -o mistral.yaml --name mistral-7b
has "default batch" mistral.yaml "global_batch: 1024"
has "name flag" mistral.yaml "name: mistral-7b"
expect "gpt2" 0 "wrote gpt2.yaml: gpt2 (GPT2LMHeadModel), 12 layers, seq 1024, global_batch 4096" -- $PLANNER import hf $HF/gpt2.json -o gpt2.yaml
has "gpt2 learned" gpt2.yaml "  position: learned"
expect "solve imported" 0 "configuration: tp-pp-dp" -- $PLANNER solve --gpus 8 --model gpt2.yaml --cluster $C/dgx-a100.yaml --global-batch 64
expect "seq over limit" 2 "planner: error: --seq 16384: above max_position_embeddings 8192 of $HF/llama3-8b.json:11; the model has no positions past it: use --seq 8192 or less" -- \
  $PLANNER import hf $HF/llama3-8b.json -o x.yaml --seq 16384
sed 's/LlamaForCausalLM/MixtralForCausalLM/' $HF/llama3-8b.json > mixtral.json
expect "unknown architecture" 2 "planner: error: mixtral.json:2: field 'architectures': 'MixtralForCausalLM' is not supported; planner import hf reads LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, GPTNeoXForCausalLM, NemotronForCausalLM" -- \
  $PLANNER import hf mixtral.json -o x.yaml
grep -v intermediate_size $HF/llama3-8b.json > noffn.json
expect "missing field" 2 "planner: error: noffn.json:1: field 'intermediate_size': missing; every LlamaForCausalLM config.json has it" -- \
  $PLANNER import hf noffn.json -o x.yaml
[ ! -e x.yaml ] && pass=$((pass+1)) || { echo "FAIL: a failed import wrote x.yaml"; fail=$((fail+1)); }
expect "missing file" 2 "planner: error: nope.json: cannot open file" -- $PLANNER import hf nope.json -o x.yaml
expect "bad format" 2 "planner: error: unknown import format 'hugging'; the supported formats are 'pipedream' and 'hf'" -- \
  $PLANNER import hugging $HF/gpt2.json -o x.yaml
expect "flag of the other format" 2 "planner: error: --minibatch: applies to 'import pipedream' only; remove it" -- \
  $PLANNER import hf $HF/gpt2.json -o x.yaml --minibatch 4
expect "bad seq" 2 "planner: error: --seq -5: must be at least 1" -- $PLANNER import hf $HF/gpt2.json -o x.yaml --seq -5
echo "import: $pass passed, $fail failed"
[ "$fail" = 0 ]
