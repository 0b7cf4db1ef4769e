#!/usr/bin/env bash
# The Python codegen writes, as stored in codegen/templates/*.py (embedded at build time by tools/embed.py):
# every template passes pyflakes with no warning (syntax errors, undefined names, unused imports and
# variables), its "planner template" markers are a begin before an end or neither, and no golden
# file holds a placeholder left unfilled. Needs pyflakes (Debian python3-pyflakes; make deps).
set -u
SRC=$1
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -m pyflakes --version >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then echo "FAIL: no python3 with pyflakes (apt-get install python3-pyflakes, or make deps)"; exit 1; fi
pass=0
fail=0
templates=("$SRC"/codegen/templates/*.py)
[ -f "${templates[0]}" ] || { echo "FAIL: no templates in $SRC/codegen/templates"; exit 1; }
for t in "${templates[@]}"; do
  if out=$("$py" -m pyflakes "$t" 2>&1) && [ -z "$out" ]; then pass=$((pass+1)); else echo "FAIL $t: pyflakes:"; echo "$out"; fail=$((fail+1)); fi
  b=$(grep -nx '# ---- planner template begins ----' "$t" | cut -d: -f1)
  e=$(grep -nx '# ---- planner template ends ----' "$t" | cut -d: -f1)
  if { [ -z "$b" ] && [ -z "$e" ]; } || { [ "$(echo "$b" | wc -l)" = 1 ] && [ "$(echo "$e" | wc -l)" = 1 ] && [ -n "$b" ] && [ -n "$e" ] && [ "$b" -lt "$e" ]; }; then
    pass=$((pass+1)); else echo "FAIL $t: the template markers are not one begin before one end (or neither)"; fail=$((fail+1)); fi
done
if left=$(grep -rln 'PLAN_[a-z]' "$SRC"/tests/codegen/golden); then echo "FAIL: unfilled placeholders in: $left"; fail=$((fail+1)); else pass=$((pass+1)); fi
echo "templates: $pass passed, $fail failed"
[ $fail = 0 ]
