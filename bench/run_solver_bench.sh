#!/usr/bin/env bash
# Solver speed benchmark (docs/performance.md, "Solver speed"): per case the median of 3 runs of CPU
# seconds (user + system of the whole process) beside wall seconds, and the candidates the search
# considered (its "searched N candidates" note). The clusters larger than the bundled files (DeepSeek-V3
# on 16 384 H800, Llama 3.1 405B on 131 072 H100) and the deep GPT models (125 to 1000 layers, hidden
# 4096) are written to a temporary directory from the bundled ones.
#   bash bench/run_solver_bench.sh            # every case
#   RUNS=1 bash bench/run_solver_bench.sh     # one run each
#   THREADS=2 bash bench/run_solver_bench.sh  # the searches with --threads 2 (the plans are the same)
set -eu
cd "$(dirname "$0")/.."
P=build/planner/planner
REF=tests/data/pipedream   # vendored PipeDream profile graphs (tests/data/pipedream/README.md)
RUNS=${RUNS:-3}
TH="--threads ${THREADS:-1}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf "%-52s %10s %10s %12s\n" "case" "CPU (s)" "wall (s)" "candidates"
run() {  # run NAME -- command...
  local name=$1; shift 2
  local cpu="" wall="" cands="-"
  for i in $(seq "$RUNS"); do
    /usr/bin/time -f "%U %S %e" -o "$T/time" "$@" > "$T/out" 2>&1 || true
    cpu+="$(awk '{print $1 + $2}' "$T/time")"$'\n'
    wall+="$(awk '{print $3}' "$T/time")"$'\n'
    cands=$(grep -o 'searched [0-9]* candidates' "$T/out" | awk '{print $2}' | head -1)
  done
  printf "%-52s %10.2f %10.2f %12s\n" "$name" "$(printf "%s" "$cpu" | median)" "$(printf "%s" "$wall" | median)" "${cands:--}"
}
# Clusters scaled out: level 1 (the cluster) holds more nodes.
sed 's/{name: cluster, size: 256,/{name: cluster, size: 2048,/' configs/clusters/h800.yaml > "$T/h800-16k.yaml"
sed 's/{name: cluster, size: 2048,/{name: cluster, size: 16384,/' configs/clusters/dgx-h100.yaml > "$T/h100-131k.yaml"
grep -q "size: 2048" "$T/h800-16k.yaml" && grep -q "size: 16384" "$T/h100-131k.yaml" ||
  { echo "run_solver_bench.sh: the cluster files' level-1 sizes changed; update the sed lines" >&2; exit 1; }
for L in 125 250 500 1000; do
  printf 'format_version: 1\nname: gpt-%s-layers\nprecision: bf16\nglobal_batch: 1024\ngpt: {layers: %s, hidden: 4096, heads: 32, seq: 2048, vocab: 51200}\n' "$L" "$L" > "$T/gpt-$L.yaml"
done
run "gpt3-175b 1024 x dgx-a100" -- $P solve $TH --gpus 1024 --model configs/models/gpt3-175b.yaml --cluster configs/clusters/dgx-a100.yaml
run "megatron-1t 3072 x dgx-a100" -- $P solve $TH --gpus 3072 --model configs/models/megatron-1t.yaml --cluster configs/clusters/dgx-a100.yaml
run "llama3.1-405b 16384 x dgx-h100" -- $P solve $TH --gpus 16384 --model configs/models/llama3.1-405b.yaml --cluster configs/clusters/dgx-h100.yaml
run "llama3.1-405b 16384 x dgx-h100 seq 131072" -- $P solve $TH --gpus 16384 --model configs/models/llama3.1-405b.yaml --cluster configs/clusters/dgx-h100.yaml --seq 131072 --global-batch 128
run "llama3.1-405b 131072 x h100" -- $P solve $TH --gpus 131072 --model configs/models/llama3.1-405b.yaml --cluster "$T/h100-131k.yaml"
run "deepseek-v3 2048 x h800 (EP, recompute modules)" -- $P solve $TH --gpus 2048 --model configs/models/deepseek-v3.yaml --cluster configs/clusters/h800.yaml
run "deepseek-v3 16384 x h800" -- $P solve $TH --gpus 16384 --model configs/models/deepseek-v3.yaml --cluster "$T/h800-16k.yaml"
run "mixtral-8x7b 256 x dgx-h100 (EP)" -- $P solve $TH --gpus 256 --model configs/models/mixtral-8x7b.yaml --cluster configs/clusters/dgx-h100.yaml
run "megatron-1t 8192 x dgx-h100" -- $P solve $TH --gpus 8192 --model configs/models/megatron-1t.yaml --cluster configs/clusters/dgx-h100.yaml
for L in 125 250 500 1000; do
  run "gpt $L layers (h 4096) 4096 x dgx-h100" -- $P solve $TH --gpus 4096 --model "$T/gpt-$L.yaml" --cluster configs/clusters/dgx-h100.yaml
done
if [ -f $REF/resnet101/graph.txt ]; then
  $P import pipedream $REF/resnet101/graph.txt -o "$T/resnet101.profile.yaml" 2>/dev/null
  run "resnet101 pipedream 4x2" -- $P solve $TH --gpus 8 --profile "$T/resnet101.profile.yaml" --mode pipedream --pd-machines 4,2 --pd-bandwidths 1.2e10,1.25e9
fi
/usr/bin/time -f "%M" -o "$T/time" $P --help > /dev/null 2>&1
printf "%-52s %10s\n" "planner --help: peak resident memory (MiB)" "$(awk '{printf "%.1f", $1 / 1024}' "$T/time")"
