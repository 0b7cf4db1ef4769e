#!/usr/bin/env bash
# Creates (or reuses) the virtual environment of the export tests: the engines' own packages
# pinned in tests/exports/requirements.txt plus deepspeed, installed from PyPI.
#   bash tests/exports/setup_venv.sh [VENV]    (default: $PLANNER_EXPORTS_VENV, else ~/.cache/planner/exports-venv)
# Reused when its stamp equals the requirements' digest (a fresh CI machine installs ~3 GB,
# about 4 minutes). Exit 1 with the reason when something cannot be installed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=${1:-${PLANNER_EXPORTS_VENV:-$HOME/.cache/planner/exports-venv}}
DS=deepspeed==0.19.8
# torchtitan 0.2.2, the last release that reads TOML job configs (0.3 reads Python config modules):
# its wheel unpacked into $VENV/torchtitan-0.2.2, put first on PYTHONPATH by the torchtitan.toml check.
TT=torchtitan==0.2.2
STAMP=$( (cat "$HERE/requirements.txt"; echo "$DS $TT") | sha256sum | cut -c1-16)
if [ -f "$VENV/.planner-stamp" ] && [ "$(cat "$VENV/.planner-stamp")" = "$STAMP" ]; then
  echo "exports venv: $VENV (up to date)"; exit 0
fi
fail() { echo "exports venv: cannot install: $*" >&2; exit 1; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || fail "no $PY (apt-get install python3 python3-venv)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || fail "python3 -m venv $VENV failed (apt-get install python3-venv)"
P="$VENV/bin/pip"
"$P" install -q --upgrade pip >/dev/null 2>&1 || true
echo "exports venv: installing the pinned engines into $VENV (PyPI; ~3 GB on a fresh machine)"
"$P" install -q -r "$HERE/requirements.txt" || fail "pip install -r tests/exports/requirements.txt failed (is PyPI reachable?)"
DS_BUILD_OPS=0 "$P" install -q --no-build-isolation "$DS" || fail "pip install $DS failed"
rm -rf "$VENV/torchtitan-0.2.2" "$VENV/.tt-wheel"
"$P" download -q --no-deps "$TT" -d "$VENV/.tt-wheel" || fail "pip download $TT failed"
"$VENV/bin/python" -c "import glob, sys, zipfile; zipfile.ZipFile(glob.glob(sys.argv[1] + '/torchtitan-0.2.2-*.whl')[0]).extractall(sys.argv[2])" \
  "$VENV/.tt-wheel" "$VENV/torchtitan-0.2.2" || fail "cannot unpack the $TT wheel"
"$VENV/bin/python" -c "import torch, megatron.core, deepspeed, torchtitan" 2>/dev/null || fail "the engines do not import in $VENV"
echo "$STAMP" > "$VENV/.planner-stamp"
echo "exports venv: $VENV ready"
