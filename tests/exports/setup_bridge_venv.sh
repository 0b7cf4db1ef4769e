#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of the Megatron-Bridge export check: Python 3.12 (megatron-bridge
# needs it) with tests/exports/bridge-requirements.txt and megatron-bridge 0.6.2 (--no-deps), from PyPI.
#   bash tests/exports/setup_bridge_venv.sh [VENV]   (default: $PLANNER_BRIDGE_VENV, else ~/.cache/planner/bridge-venv)
# Python 3.12: $PYTHON312, else python3.12 on PATH, else pyenv's newest 3.12 (Debian 12 ships 3.11 only). Exit 77 when
# there is none (the check is then skipped, saying so), 1 with the reason when something cannot be installed. Reused
# while its stamp equals the requirements' digest (a fresh machine installs ~5.6 GB, about 2-3 minutes).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-${PLANNER_BRIDGE_VENV:-$HOME/.cache/planner/bridge-venv}}
MB=megatron-bridge==0.6.2
STAMP=$( (cat "$HERE/bridge-requirements.txt"; echo "$MB") | sha256sum | cut -c1-16)
if [ -f "$VENV/.planner-stamp" ] && [ "$(cat "$VENV/.planner-stamp")" = "$STAMP" ]; then
  echo "bridge venv: $VENV (up to date)"; exit 0
fi
fail() { echo "bridge venv: cannot install: $*" >&2; exit 1; }
PY=$(bash "$HERE/python312.sh") || exit 77
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || fail "$PY -m venv $VENV failed"
P="$VENV/bin/pip"
"$P" install -q --upgrade pip >/dev/null 2>&1 || true
echo "bridge venv: installing megatron-bridge and its CPU imports into $VENV (PyPI; ~5.6 GB on a fresh machine)"
"$P" install -q -r "$HERE/bridge-requirements.txt" || fail "pip install -r tests/exports/bridge-requirements.txt failed (is PyPI reachable?)"
"$P" install -q --no-deps "$MB" || fail "pip install --no-deps $MB failed"
PYTHONPATH="$HERE" "$VENV/bin/python" -c "import bridge_stubs, megatron.bridge.training.config" >/dev/null 2>&1 \
  || fail "megatron.bridge does not import in $VENV"
echo "$STAMP" > "$VENV/.planner-stamp"
echo "bridge venv: $VENV ready"
