#!/usr/bin/env bash
# bench/torch_block_peer.py (the PyTorch peer of tools/gpu/check.sh) on the CPU with tiny shapes:
# the script runs, times every microbatch size and its block's output and gradients are finite.
# Uses the exports venv's torch (tests/exports/setup_venv.sh) or a system python3 with torch;
# skipped (exit 77) when neither has torch.
set -u
src=$1
py=""
for c in "$HOME/.cache/planner/exports-venv/bin/python" python3; do
  if command -v "$c" > /dev/null 2>&1 && "$c" -c 'import torch' > /dev/null 2>&1; then py=$c; break; fi
done
if [ -z "$py" ]; then echo "skipped: no python with torch (tests/exports/setup_venv.sh installs one)"; exit 77; fi
out=$("$py" "$src/bench/torch_block_peer.py" --device cpu --smoke --microbatch-sizes 1,2 --tp 2 2>&1) || { echo "$out"; exit 1; }
echo "$out"
[ "$(grep -c '^torch block bf16 b=[12] tp=2 seq=16 h=64 fwd_ms=[0-9.]* bwd_ms=[0-9.]* total_ms=[0-9.]*$' <<< "$out")" = 2 ] || { echo "FAIL: expected two timing lines"; exit 1; }
grep -qx 'torch block smoke: ok' <<< "$out" || { echo "FAIL: no smoke verdict"; exit 1; }
# A bad shape is refused with a usage error, not a traceback.
if "$py" "$src/bench/torch_block_peer.py" --device cpu --smoke --tp 3 > /dev/null 2>&1; then echo "FAIL: --tp 3 accepted"; exit 1; fi
echo ok
