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
expect "solve imported" 0 "configuration: tp-pp-dp" -- $PLANNER solve --gpus 8 --model gpt2.yaml --cluster $C/dgx-a100.yaml --global-batch 64 -o gpt2.plan.yaml
# A dense model's active parameters are all of them (GPT-2 small: 124,439,808 with its 1024 positions); no MTP field.
has "model_parameters" gpt2.plan.yaml "model_parameters: 124439808"
has "model_active_parameters" gpt2.plan.yaml "model_active_parameters: 124439808"
grep -q "^mtp_parameters" gpt2.plan.yaml && { echo "FAIL: mtp_parameters written for a model without MTP"; fail=$((fail+1)); } || pass=$((pass+1))
expect "seq over limit" 2 "planner: error: --seq 16384: above max_position_embeddings 8192 of $HF/llama3-8b.json:11; the model has no positions past it: use --seq 8192 or less" -- \
  $PLANNER import hf $HF/llama3-8b.json -o x.yaml --seq 16384
sed 's/LlamaForCausalLM/PhiForCausalLM/' $HF/llama3-8b.json > phi.json
expect "unknown architecture" 2 "planner: error: phi.json:2: field 'architectures': 'PhiForCausalLM' is not supported; planner import hf reads LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel, GPTNeoXForCausalLM, NemotronForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM" -- \
  $PLANNER import hf phi.json -o x.yaml
# MoE architectures: the imported file is the shipped one (comments, attention: flash and seq / batch aside).
for m in mixtral-8x7b qwen3-30b-a3b qwen3-235b-a22b deepseek-v3; do
  expect "import $m" 0 "wrote $m.yaml: $m (" -- $PLANNER import hf $HF/$m.json -o $m.yaml --seq 4096 --global-batch 1024
done
has "deepseek moe" deepseek-v3.yaml "  moe: {experts: 256, top_k: 8, expert_ffn: 2048, shared_experts: 1, dense_layers: 3, router: sigmoid, aux_loss: 0.001, route_groups: 8, route_group_limit: 4}"
has "deepseek mla" deepseek-v3.yaml "  mla: {q_lora_rank: 1536, kv_lora_rank: 512, qk_rope_head_dim: 64, qk_nope_head_dim: 128, v_head_dim: 128}"
has "deepseek mtp" deepseek-v3.yaml "  mtp: 1"
has "qwen3 head_dim" qwen3-30b-a3b.yaml "  head_dim: 128"
has "mixtral moe" mixtral-8x7b.yaml "  moe: {experts: 8, top_k: 2, expert_ffn: 14336, shared_experts: 0, dense_layers: 0, router: softmax, aux_loss: 0.02}"
sed 's/"decoder_sparse_step": 1/"decoder_sparse_step": 2/' $HF/qwen3-30b-a3b.json > sparse.json
expect "qwen3 sparse step" 2 "planner: error: sparse.json:6: field 'decoder_sparse_step': 2: every 2th block is MoE, the others dense; the planner's template has dense blocks only before the first MoE block (moe.dense_layers): not imported" -- \
  $PLANNER import hf sparse.json -o x.yaml
# MoE model-file errors: one line, exit 2.
printf 'name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, seq: 8, vocab: 128,\n  moe: {experts: 4, top_k: 8, expert_ffn: 32}}\n' > topk.yaml
expect "moe top_k" 2 "planner: error: topk.yaml:4: field 'gpt.moe.top_k': top_k (8) is larger than experts (4); set top_k: 4 or less" -- \
  $PLANNER solve --gpus 8 --model topk.yaml --cluster $C/dgx-a100.yaml
printf 'name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, seq: 8, vocab: 128,\n  moe: {experts: 4, top_k: 2}}\n' > noexp.yaml
expect "moe expert_ffn" 2 "planner: error: noexp.yaml:4: field 'gpt.moe.expert_ffn': missing: the MoE block needs its expert size" -- \
  $PLANNER solve --gpus 8 --model noexp.yaml --cluster $C/dgx-a100.yaml
printf 'name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, seq: 8, vocab: 128,\n  moe: {experts: 4, top_k: 2, expert_ffn: 32, capacity_factor: -1}}\n' > cap.yaml
expect "moe capacity" 2 "planner: error: cap.yaml:4: field 'gpt.moe.capacity_factor': -1 is below 0; set capacity_factor: 0 (dropless) or a positive value" -- \
  $PLANNER solve --gpus 8 --model cap.yaml --cluster $C/dgx-a100.yaml
grep -v intermediate_size $HF/llama3-8b.json > noffn.json
expect "missing field" 2 "planner: error: noffn.json:1: field 'intermediate_size': missing; every LlamaForCausalLM config.json has it" -- \
  $PLANNER import hf noffn.json -o x.yaml
[ ! -e x.yaml ] && pass=$((pass+1)) || { echo "FAIL: a failed import wrote x.yaml"; fail=$((fail+1)); }
expect "missing file" 2 "planner: error: nope.json: cannot open file" -- $PLANNER import hf nope.json -o x.yaml
expect "bad format" 2 "planner: error: unknown import format 'hugging'; the supported formats are 'pipedream' and 'hf'" -- \
  $PLANNER import hugging $HF/gpt2.json -o x.yaml
expect "flag of the other format" 2 "planner: error: --minibatch: applies to 'import pipedream' only; remove it" -- \
  $PLANNER import hf $HF/gpt2.json -o x.yaml --minibatch 4
expect "bad seq" 2 "planner: error: --seq -5: must be between 1 and 16777216" -- $PLANNER import hf $HF/gpt2.json -o x.yaml --seq -5
expect "zero batch" 2 "planner: error: --global-batch 0: must be between 1 and 2^40" -- $PLANNER import hf $HF/gpt2.json -o x.yaml --global-batch 0
expect "hf flag on pipedream" 2 "planner: error: --seq, --global-batch and --name: apply to 'import hf' only; remove them" -- \
  $PLANNER import pipedream $SRC/tests/data/pipedream/vgg16/graph.txt -o x.yaml --seq 0
# The model-file keys the import writes: bad values are one error line, exit 2.
printf 'name: x\nprecision: bf16\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, kv_heads: 3, seq: 8, vocab: 128}\n' > kv.yaml
expect "kv_heads" 2 "planner: error: kv.yaml:4: field 'gpt.kv_heads': kv_heads (3) must divide heads (8); set kv_heads to a divisor of 8 (1: MQA, 8: MHA)" -- \
  $PLANNER solve --gpus 8 --model kv.yaml --cluster $C/dgx-a100.yaml
printf 'name: x\nglobal_batch: 8\ngpt: {layers: 2, hidden: 64, heads: 8, ffn_act: silu, seq: 8, vocab: 128}\n' > act.yaml
expect "ffn_act" 2 "planner: error: act.yaml:3: field 'gpt.ffn_act': unknown value 'silu'" -- $PLANNER solve --gpus 8 --model act.yaml --cluster $C/dgx-a100.yaml
grep -qF "choose one of: gelu, swiglu, relu2" err.txt && pass=$((pass+1)) || { echo "FAIL ffn_act: choices not listed"; fail=$((fail+1)); }
echo "import: $pass passed, $fail failed"
[ "$fail" = 0 ]
