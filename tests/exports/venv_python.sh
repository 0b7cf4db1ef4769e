#!/usr/bin/env bash
# Prints the export tests' Python (the venv of tests/exports/setup_venv.sh), or says why there is
# none and exits 1: an export test never passes without its engine.
VENV=${PLANNER_EXPORTS_VENV:-$HOME/.cache/planner/exports-venv}
if [ ! -x "$VENV/bin/python" ] || [ ! -f "$VENV/.planner-stamp" ]; then
  echo "no engines' virtual environment at $VENV: run 'make exports-venv' (tests/exports/setup_venv.sh) first" >&2
  exit 1
fi
echo "$VENV/bin/python"
