#!/usr/bin/env bash
# `make test` on a fresh clone while a second build shares the machine (issue "One vocabulary", item 6):
# the test durations a busy 2-core machine gives, against each test's time limit.
#
#   bash bench/test_under_load.sh [WORKDIR]      (default /tmp/planner-load)
#
# Clones this checkout (HEAD) into WORKDIR/clone, builds it, then runs the README's test command's
# suites (`meson test --no-suite bench`) with Meson's time limits multiplied by 10, so that no test
# is cut short and every duration is the real one, while a second checkout (WORKDIR/load) rebuilds
# from scratch in a loop (`ninja -j2`, a second build as a new user's machine has it). Prints, per
# test, its duration under load, its time limit and the ratio, the load average seen, and exits 1
# when a test failed or when a limit is under 3x its duration (the rule in docs/performance.md).
# Takes about an hour on a 2-core machine; needs the exports venv (tests/exports/setup_venv.sh) like
# `make test`.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/planner-load}
rm -rf "$work" && mkdir -p "$work"
git clone -q "$src" "$work/clone" && git clone -q "$src" "$work/load" || exit 1
cd "$work/clone" && make build > "$work/build.log" 2>&1 || { echo "build failed: $work/build.log"; exit 1; }
# The second build: from scratch, again and again, until the tests end.
( cd "$work/load" && meson setup build-load -Dcuda=disabled > /dev/null 2>&1
  while [ ! -e "$work/stop" ]; do ninja -C build-load -j2 > /dev/null 2>&1; ninja -C build-load -t clean > /dev/null 2>&1; done ) &
loader=$!
( while [ ! -e "$work/stop" ]; do cut -d' ' -f1 /proc/loadavg; sleep 10; done ) > "$work/loadavg.txt" &
sampler=$!
meson introspect build --tests > "$work/limits.json"
start=$(date +%s)
/usr/bin/time -f "%e %U %S" -o "$work/time.txt" meson test -C build --no-suite bench --timeout-multiplier 10 --num-processes 2 > "$work/test.log" 2>&1
rc=$?
touch "$work/stop"; pkill -f "ninja -C build-load" 2>/dev/null; wait $loader 2>/dev/null; kill $sampler 2>/dev/null; wait 2>/dev/null
read -r wall user sys < "$work/time.txt"
python3 - "$work" "$rc" "$wall" "$user" "$sys" "$(date +%s)" "$start" <<'PY'
import json, statistics, sys
work, rc, wall, user, sys_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
loads = [float(x) for x in open(f"{work}/loadavg.txt") if x.strip()]
rows = [json.loads(l) for l in open(f"{work}/clone/build/meson-logs/testlog.json")]
limits = {t['name']: t['timeout'] for t in json.load(open(f"{work}/limits.json"))}
bad = 0
print(f"{'test':40} {'suite':9} {'result':8} {'duration (s)':>12} {'limit (s)':>10} {'limit / duration':>16}")
for r in sorted(rows, key=lambda r: -r['duration']):
    limit = limits.get(r['name'].split(' / ')[-1], 0)  # as meson.build sets it (the run used 10x)
    ratio = limit / r['duration'] if r['duration'] > 0 and limit else float('inf')
    flag = '' if ratio >= 3 else '  < 3x'
    if r['result'] not in ('OK', 'SKIP', 'EXPECTEDFAIL'): flag += '  ' + r['result']
    bad += bool(flag)
    suite = r['name'].split(' / ')[0].split(':')[-1]
    print(f"{r['name']:40} {suite:9} {r['result']:8} {r['duration']:12.1f} {limit:10.0f} {ratio:16.1f}{flag}")
print(f"meson test: {wall:.0f} s wall, {user + sys_s:.0f} s CPU (user + sys) of this process tree; "
      f"load average median {statistics.median(loads) if loads else 0:.1f}, max {max(loads) if loads else 0:.1f} (2 cores)")
print(f"{sum(r['result'] in ('OK', 'EXPECTEDFAIL') for r in rows)} passed, "
      f"{sum(r['result'] not in ('OK', 'EXPECTEDFAIL', 'SKIP') for r in rows)} failed, {sum(r['result'] == 'SKIP' for r in rows)} skipped")
sys.exit(1 if bad or rc else 0)
PY
