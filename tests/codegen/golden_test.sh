#!/usr/bin/env bash
# Golden tests of planner codegen: each checked-in plan's launch directory
# equals tests/codegen/golden/<case>/ byte for byte. UPDATE_GOLDEN=1 rewrites them.
set -u
PLANNER=$1
SRC=$2
G=$SRC/tests/codegen/golden
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
for plan in "$SRC"/tests/codegen/plans/*.plan.yaml; do
  name=$(basename "$plan" .plan.yaml)
  if ! $PLANNER -q codegen "$plan" -o "$T/$name" --planner-path planner --iterations 20 2>"$T/$name.err"; then
    echo "FAIL $name: codegen"; cat "$T/$name.err"; fail=$((fail+1)); continue
  fi
  if [ "${UPDATE_GOLDEN:-0}" = 1 ]; then rm -rf "$G/$name"; mkdir -p "$G"; cp -r "$T/$name" "$G/$name"; fi
  if diff -r "$G/$name" "$T/$name" > "$T/$name.diff"; then pass=$((pass+1)); else echo "FAIL $name: differs from golden"; head -20 "$T/$name.diff"; fail=$((fail+1)); fi
done
# The launch file is validated on read: a rank listed twice is an error naming the line.
sed 's/- {rank: 1,/- {rank: 0,/' "$G/tiny-gpt-pp2/launch.yaml" > "$T/dup.yaml"
mkdir -p "$T/dup" && cp "$T/dup.yaml" "$T/dup/launch.yaml" && cp "$G/tiny-gpt-pp2/model.yaml" "$T/dup/"
out=$($PLANNER run "$T/dup" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$out" | grep -qF "rank 0 appears twice"; then pass=$((pass+1)); else echo "FAIL duplicate rank: rc=$rc $out"; fail=$((fail+1)); fi
echo "codegen: $pass passed, $fail failed"
[ $fail = 0 ]
