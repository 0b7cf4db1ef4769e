#!/usr/bin/env bash
# megatron_bridge.py exports checked by Megatron-Bridge's own code (tests/exports/check_megatron_bridge.py in the venv
# of tests/exports/setup_bridge_venv.sh: megatron-bridge 0.6.2 on megatron-core 0.19.2, Python 3.12): the golden
# plans' megatron_bridge.py and the demo plans' (LoRA on packed samples, FP8 and MXFP8 parameters, context parallelism,
# Megatron-FSDP, MoE with expert parallelism, TP communication overlap, MLA: a small MoE model and DeepSeek-V3) in ONE
# process, then defects it must reject.
# No Python 3.12 on the machine: skipped (exit 77) saying so; Python 3.12 without the venv: FAIL with the reason.
#   bash tests/exports/megatron_bridge_test.sh PLANNER SOURCE_DIR
set -u
. "$(dirname "$0")/results.sh"
PLANNER=$1
SRC=$(cd "$2" && pwd)
bash "$SRC/tests/exports/python312.sh" >/dev/null || { echo "SKIP megatron-bridge export check: no Python 3.12 (see above)"; exit 77; }
VENV=${PLANNER_BRIDGE_VENV:-$HOME/.cache/planner/bridge-venv}
PY=$VENV/bin/python
[ -x "$PY" ] && [ -f "$VENV/.planner-stamp" ] || { echo "FAIL megatron-bridge export check: no venv at $VENV: run 'make exports-venv' (tests/exports/setup_bridge_venv.sh) first"; exit 1; }
export PYTHONDONTWRITEBYTECODE=1
T=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail=0
C=$SRC/configs
# The golden plans' exports, written whole (the goldens keep the plan's dicts only: tests/codegen/golden_test.sh).
for plan in "$SRC"/tests/codegen/plans/*.plan.yaml; do
  name=$(basename "$plan" .plan.yaml)
  $PLANNER -q codegen "$plan" -o "$T/golden-$name" --export megatron-bridge 2>"$T/$name.err" || { echo "FAIL golden $name: codegen"; cat "$T/$name.err"; fail=1; }
done
# A dense MLA model without a query LoRA rank, LayerNorm (Megatron-LM's default normalization): the MLA defaults the
# MoE demos do not reach.
mkdir -p "$T/models"
sed -e '/^  moe:/,/route_group_limit/d' -e 's/q_lora_rank: 24, //' -e 's/norm: rmsnorm/norm: layernorm/' -e 's/^name: .*/name: tiny-mla-dense/' \
  "$C/models/tiny-moe-mla.yaml" > "$T/models/tiny-mla-dense.yaml"
# The demo plans: NAME MODEL GPUS CLUSTER FLAGS (MODEL: configs/models/MODEL.yaml, or a path)
while read -r name model gpus cluster flags; do
  mfile="$C/models/$model.yaml"; [[ "$model" == /* ]] && mfile=$model
  if ! $PLANNER -q solve --gpus "$gpus" --model "$mfile" --cluster "$C/clusters/$cluster.yaml" $flags -o "$T/$name.plan.yaml" >/dev/null 2>"$T/$name.err" \
    || ! $PLANNER -q codegen "$T/$name.plan.yaml" -o "$T/demo-$name" --export megatron-bridge 2>>"$T/$name.err"; then
    echo "FAIL demo $name: solve / codegen"; cat "$T/$name.err"; fail=1; continue
  fi
  [ -f "$T/demo-$name/megatron_bridge.py" ] || { echo "FAIL demo $name: no megatron_bridge.py ($(cat "$T/demo-$name/megatron_bridge.py.refused" 2>/dev/null))"; fail=1; }
done <<EOF2
lora llama3-70b-lora 8 dgx-h100 --precision fp8 --tp 2 --pp 4 --vp 20 --sp on
fp8-params llama3-8b 16 dgx-h100 --precision fp8 --tp 2 --pp 1 --zero 1 --fp8-param-gather
mxfp8-params llama3-8b 16 b200 --precision fp8 --fp8-recipe mxfp8 --tp 1 --pp 1 --zero 1 --fp8-param-gather
cp llama3-70b 128 dgx-h100 --tp 8 --pp 4 --cp 2 --zero 1 --schedule 1f1b
fsdp llama3-8b 16 dgx-h100 --tp 1 --pp 1 --zero 3 --recompute full
moe mixtral-8x7b 64 dgx-h100 --tp 2 --pp 4 --ep 8 --zero 1
tp-overlap llama3-8b 32 dgx-h100 --tp 8 --pp 2 --sp on --tp-comm-overlap on --zero 1
moe-overlap mixtral-8x7b 16 dgx-h100 --tp 2 --pp 1 --ep 8 --sp on --moe-overlap on --tp-comm-overlap on --zero 1
cp-allgather llama2-7b 64 dgx-h100 --tp 4 --pp 1 --cp 2 --global-batch 64 --seq 65536 --cp-comm-type allgather
mla tiny-moe-mla 8 dgx-h100 --tp 2 --pp 1 --ep 4 --zero 1
mla-dense $T/models/tiny-mla-dense.yaml 8 dgx-h100 --tp 2 --pp 2 --zero 1 --schedule 1f1b
deepseek-v3 deepseek-v3 2048 h800 --pp 16 --ep 64 --tp 1 --cp 1 --zero 1 --schedule 1f1b
EOF2
grep -q "^LORA = dict(target_modules=" "$T/demo-lora/megatron_bridge.py" && grep -q "^PACKED = True " "$T/demo-lora/megatron_bridge.py" \
  || { echo "FAIL demo lora: no LoRA or packing in megatron_bridge.py"; fail=1; }
grep -qx "    fp8_param_gather=True," "$T/demo-mxfp8-params/megatron_bridge.py" && grep -qx "    reuse_grad_buf_for_mxfp8_param_ag=True," "$T/demo-mxfp8-params/megatron_bridge.py" \
  || { echo "FAIL demo mxfp8-params: FP8 parameters not in MIXED_PRECISION"; fail=1; }
grep -qx "    tp_comm_overlap=True," "$T/demo-tp-overlap/megatron_bridge.py" || { echo "FAIL demo tp-overlap: no CommOverlapConfig"; fail=1; }
neg() {  # neg NAME FROM SED-SCRIPT EXPECTED-TEXT (FROM: a golden or demo directory)
  cp -r "$1" "$T/neg-$2"
  sed -i "$3" "$T/neg-$2/megatron_bridge.py"
  echo "$2|$4" >> "$T/expect"
}
neg "$T/golden-llama3-8b-64" field 's/^    num_query_groups=8,$/    num_query_group=8,/' "['num_query_group'] are not fields of GPTModelProvider"
neg "$T/golden-llama3-8b-64" world 's/^    tensor_model_parallel_size=4,$/    tensor_model_parallel_size=3,/' "world size (64) is not divisible"
neg "$T/golden-llama3-8b-64" batch 's/^    global_batch_size=512,$/    global_batch_size=1024,/' "Bridge runs global_batch 1024, the plan 512"
neg "$T/golden-llama3-8b-64" layout 's/^    virtual_pipeline_model_parallel_size=2,$/    virtual_pipeline_model_parallel_size=4,/' "virtual"
neg "$T/demo-lora" packed-microbatch 's/^    micro_batch_size=1,$/    micro_batch_size=2,/' "Micro batch size should be 1 when training with packed sequence"
neg "$T/demo-fsdp" fsdp-no-distopt 's/^    use_distributed_optimizer=True,$/    use_distributed_optimizer=False,/' "Bridge runs DDP use_distributed_optimizer=True, the file sets False"
neg "$T/demo-cp-allgather" cp-comm-name 's/^    cp_comm_type="all_gather",$/    cp_comm_type="allgather",/' "cp_comm_type 'allgather' is none of Transformer Engine's"
# CommOverlapConfig without the plan's MoE overlap (exports before 2026-12-01): Bridge turns it off on the model.
neg "$T/demo-moe-overlap" moe-overlap-lost '/^COMM_OVERLAP = dict($/,/^)$/{/overlap_moe_expert_parallel_comm\|delay_wgrad_compute/d}' "Bridge runs MODEL overlap_moe_expert_parallel_comm=False, the file sets True"
neg "$T/golden-llama3-8b-64" p2p '/^    overlap_p2p_comm=True,$/d; /^    batch_p2p_comm=False,$/d' "interleaved schedule at pp 2 without overlap_p2p_comm"
neg "$T/demo-mla" mla-rotary 's/^    rotary_scaling_factor=1.0,$/    rotary_scaling_factor=40.0,/' "MLA rotary_scaling_factor 40.0: Megatron-LM runs 1.0"
neg "$T/demo-mla" mla-deallocate '/^    deallocate_pipeline_outputs=True,$/d' "MLA model runs deallocate_pipeline_outputs=False where GPTModelProvider runs True"
neg "$T/demo-mla-dense" mla-q-lora '/^    q_lora_rank=None,$/d' "MLA model runs q_lora_rank=512"
neg "$T/demo-mla-dense" mla-spec 's/^    if "num_moe_experts" in fields or fields.get("multi_latent_attention"):$/    if "num_moe_experts" in fields:/' "MLA model with transformer_layer_spec"
neg "$T/demo-mla" mla-off '/^    multi_latent_attention=True,$/d' "'qk_head_dim', 'qk_pos_emb_head_dim', 'rope_type', 'v_head_dim'] are not fields of GPTModelProvider"
neg "$T/demo-cp" cp-seq 's/^    seq_length=8192,$/    seq_length=8190,/' "Sequence length must be divisible by 2 * context parallel size"
dirs=$(for d in "$T"/golden-* "$T"/demo-* "$T"/neg-*; do [ -f "$d/megatron_bridge.py" ] && echo "$d"; done)
"$PY" "$SRC/tests/exports/check_megatron_bridge.py" $dirs > "$T/out" 2>"$T/err"
expect_results "$T/out" "$T/expect" "$T/err" $dirs
echo "megatron-bridge: $n_ok of $(echo "$dirs" | wc -w) directories as expected (megatron-bridge $("$PY" -c 'import importlib.metadata as m; print(m.version("megatron-bridge"))' 2>/dev/null))"
# Refused: a model Bridge's GPT provider does not build, PipeDream's schedule.
[ -f "$T/golden-vgg16-async/megatron_bridge.py.refused" ] && [ ! -e "$T/golden-vgg16-async/megatron_bridge.py" ] || { echo "FAIL vgg16-async: megatron_bridge.py written for a plan Bridge cannot run"; fail=1; }
[ $fail = 0 ] && echo "megatron-bridge: all checks passed"
exit $fail
