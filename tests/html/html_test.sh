#!/usr/bin/env bash
# HTML reports in a real browser (issue 31; docs/formats.md "HTML reports"): headless Chromium (Debian's
# chromium, installed by `make deps`) renders every kind of page planner writes (solve's plan, solve's --gpus
# list, inspect's plan); the test reads the DOM Chromium built (--dump-dom): every section present, every
# figure marked data-field equal to plan.yaml's value, no console message, no request leaving the file (the
# page has no src / href / url() / @import, and Chromium runs with the network mapped to nowhere), and keeps a
# PNG screenshot per page under ARTIFACTS.
#   bash tests/html/html_test.sh PLANNER SOURCE_DIR ARTIFACTS
set -u
PLANNER=$1
SRC=$2
ART=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T"
mkdir -p "$ART"
pass=0
fail=0
check() {  # check NAME CMD...
  local name=$1
  shift
  if "$@"; then pass=$((pass+1)); else echo "FAIL $name"; fail=$((fail+1)); fi
}
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROMIUM" ] || { echo "FAIL chromium is not installed (make deps installs Debian's chromium)"; exit 1; }
M=$SRC/configs/models
C=$SRC/configs/clusters
$PLANNER -q solve --gpus 64 --model $M/llama3-70b.yaml --cluster $C/dgx-h100.yaml -o solve.yaml --html solve.html > /dev/null 2>&1
check "solve --html writes the page" test -s solve.html
$PLANNER -q inspect solve.yaml --html inspect.html > /dev/null 2>&1
check "inspect --html writes the page" test -s inspect.html
$PLANNER -q solve --gpus 64,128 --model $M/llama3-70b.yaml --cluster $C/dgx-h100.yaml --engine all --train-tokens 15T \
  -o scale.yaml --html scale.html > /dev/null 2>&1
check "solve --gpus a list --html writes the page" test -s scale.html
browse() {  # browse PAGE: the DOM and a screenshot, console messages logged
  local page=$1
  timeout 120 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --host-resolver-rules="MAP * ~NOTFOUND" --enable-logging=stderr --v=0 --dump-dom "file://$T/$page.html" \
    > "$page.dom" 2> "$page.log"
  timeout 120 "$CHROMIUM" --headless=new --no-sandbox --disable-gpu --no-first-run --disable-extensions \
    --host-resolver-rules="MAP * ~NOTFOUND" --window-size=1280,1600 --screenshot="$ART/$page.png" "file://$T/$page.html" \
    > /dev/null 2>&1
}
for page in solve inspect scale; do
  browse $page
  check "$page: Chromium built the DOM" grep -q "</html>" $page.dom
  check "$page: no console message" bash -c "! grep -qi 'CONSOLE' $page.log"
  check "$page: a PNG screenshot" test -s "$ART/$page.png"
  check "$page: no request leaves the file" python3 - "$page.html" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
t = t.replace('xmlns="http://www.w3.org/2000/svg"', '')  # a namespace name, not a request
bad = re.findall(r'(?i)(https?://|\bsrc=|\bhref=|url\(|@import|<script|<link|<img|<iframe)', t)
if bad: print("found:", bad)
sys.exit(1 if bad else 0)
PY
done
# The figures against plan.yaml (the DOM Chromium built, not the file: what a reader sees).
figures() {  # figures DOM PLAN.yaml [SECTION_IDS...]
  python3 - "$@" <<'PY'
import re, sys, yaml
dom, plan_path, ids = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3:]
plan = yaml.safe_load(open(plan_path))
def get(path):
    node = plan
    for part in re.findall(r'[^.\[\]]+|\[\d+\]', path):
        node = node[int(part[1:-1])] if part.startswith('[') else node[part]
    return float(node)
figs = re.findall(r'data-field="([^"]+)" data-value="([^"]+)"', dom)
bad = [(f, v, get(f)) for f, v in figs if abs(float(v) - get(f)) > 1e-9 * max(1.0, abs(get(f)))]
missing = [i for i in ids if f'id="{i}"' not in dom]
need = {"predicted.iteration_seconds", "predicted.peak_memory_GiB", "predicted.mfu", "stages[0].peak_memory_GiB",
        "runners_up[0].iteration_seconds", "predicted.band.iteration_seconds_low"}
absent = need - {f for f, _ in figs}
if bad or missing or absent or len(figs) < 15:
    print("mismatched:", bad[:5], "missing sections:", missing, "absent figures:", absent, "figures:", len(figs))
    sys.exit(1)
PY
}
SECTIONS="card memory timeline communication runners-up notes"
check "solve: every figure equals plan.yaml's, every section present" figures solve.dom solve.yaml $SECTIONS
check "inspect: every figure equals plan.yaml's" figures inspect.dom solve.yaml $SECTIONS
check "solve: the allocator's reserved memory on the card (checked against plan.yaml above)" \
  grep -q 'data-field="predicted.peak_reserved_GiB"' solve.dom
check "scale: the 64-GPU plan's figures (the first section) equal scale.64.yaml's" bash -c "
  python3 -c \"import re,sys; d=open('scale.dom').read(); s=d.index('id=\\\"gpus-64\\\"'); e=d.index('id=\\\"gpus-128\\\"'); open('s64.dom','w').write(d[s:e]); open('s128.dom','w').write(d[e:])\" &&
  $(declare -f figures); figures s64.dom scale.64.yaml card-gpus-64 memory-gpus-64 && figures s128.dom scale.128.yaml card-gpus-128"
check "scale: the scaling table and its plot" bash -c "grep -q 'id=\"scaling\"' scale.dom && grep -q 'id=\"scaling-plot\"' scale.dom"
check "scale: days and GPU-hours (--train-tokens) in the table and their plot" bash -c \
  "grep -q '<th>days (15.0T tokens)</th><th>GPU-hours</th>' scale.dom && grep -q 'id=\"training-plot\"' scale.dom"
check "scale: one tokens/s/GPU line per engine (--engine all) and the MFU line" python3 -c "
import re, sys; d = open('scale.dom').read(); s = d[d.index('id=\"scaling-plot\"'):]; s = s[:s.index('</svg>')]
names = re.findall(r'data-series=\"([^\"]+)\"', s)
sys.exit(0 if names == ['tokens/s/GPU on megatron-core', 'tokens/s/GPU on torchtitan', 'tokens/s/GPU on torchtitan-compile',
                        'tokens/s/GPU on deepspeed', 'MFU (megatron-core)'] else 1)"
check "scale: the engines and data-parallel architectures sections, their figures in plan.yaml" bash -c "
  grep -q 'id=\"engines-gpus-64\"' scale.dom && grep -q 'data-field=\"predicted.engines.megatron-core.iteration_seconds\"' s64.dom &&
  grep -q 'id=\"dp-comm-gpus-128\"' scale.dom && grep -q 'data-field=\"predicted.dp_comm_seconds.allreduce-ring\"' s128.dom"
# A run directory's page and a calibration's: a real 1-rank run of tiny-gpt (20 iterations), calibrated.
$PLANNER -q solve --gpus 1 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o tiny.yaml > /dev/null 2>&1 &&
  $PLANNER -q codegen tiny.yaml -o L --iterations 20 > /dev/null 2>&1 && $PLANNER -q run L --run-id r > /dev/null 2>&1
$PLANNER -q inspect L/runs/r --html run.html > /dev/null 2>&1
$PLANNER -q calibrate --plan tiny.yaml L/runs/r -o cal.yaml > /dev/null 2>&1
$PLANNER -q inspect cal.yaml --html cal.html > /dev/null 2>&1
# A launch plan's page: tiny-gpt on 2 pipeline stages (ZB-H1), not run.
$PLANNER -q solve --gpus 2 --pp 2 --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o pp2.yaml > /dev/null 2>&1 &&
  $PLANNER -q codegen pp2.yaml -o L2 > /dev/null 2>&1
$PLANNER -q inspect L2 --html launch.html > /dev/null 2>&1
for page in run cal launch; do
  browse $page
  check "$page: Chromium built the DOM" grep -q "</html>" $page.dom
  check "$page: no console message" bash -c "! grep -qi 'CONSOLE' $page.log"
  check "$page: a PNG screenshot" test -s "$ART/$page.png"
done
check "run: report, loss, iteration time, predicted and measured timeline sections" bash -c \
  "grep -q 'id=\"report\"' run.dom && grep -q 'id=\"loss\"' run.dom && grep -q 'id=\"iteration-seconds\"' run.dom && grep -q 'id=\"timeline\"' run.dom && grep -q 'id=\"predicted-timeline\"' run.dom"
check "launch: every figure equals launch.yaml's, the action counts inspect --rank's" python3 - launch.dom L2/launch.yaml \
  "$($PLANNER inspect L2 --rank 0 | tail -n +2 | wc -l)" "$($PLANNER inspect L2 --rank 1 | tail -n +2 | wc -l)" <<'PY'
import re, sys, yaml
dom, launch = open(sys.argv[1]).read(), yaml.safe_load(open(sys.argv[2]))
printed = [int(x) for x in sys.argv[3:]]
def get(path):
    if path == "ranks": return len(launch["ranks"])
    m = re.fullmatch(r'programs\[(\d+)\]\.actions', path)
    if m: return len(launch["programs"][int(m.group(1))]["actions"].split())
    node = launch
    for part in path.split('.'): node = node[part]
    return float(node)
figs = re.findall(r'data-field="([^"]+)" data-value="([^"]+)"', dom)
ok = len(figs) >= 10 and all(abs(float(v) - get(f)) <= 1e-6 * max(1.0, abs(get(f))) for f, v in figs)
actions = [int(float(v)) for f, v in figs if f.startswith("programs[")]
ok = ok and actions == printed and all(f'id="{s}"' in dom for s in ("card", "timeline", "groups", "programs", "ranks"))
if not ok: print(figs, actions, printed)
sys.exit(0 if ok else 1)
PY
check "run: per rank, the predicted compute equals report.md's (one source: launch.yaml through the schedule)" python3 - run.dom L/runs/r/report.md <<'PY'
import re, sys
dom, report = open(sys.argv[1]).read(), open(sys.argv[2]).read()
rows = re.findall(r'<tr class="rank"><td>(\d+)</td><td>\d+</td><td>[0-9.]+</td><td>([0-9.]+)</td>', dom)
md = re.findall(r'^\| (\d+) \| \d+ \| [^|]+ \| [^|]+ \| [^|]+ \| ([0-9.]+) ms \|', report, re.M)
ok = len(rows) >= 1 and len(rows) == len(md) and all(abs(float(a[1]) - float(b[1])) < 1e-3 for a, b in zip(rows, md))
if not ok: print(rows, md)
sys.exit(0 if ok and 'id="per-rank"' in dom else 1)
PY
check "run: the loss curve has one point per metrics.csv row" grep -q "data-points=\"$(( $(wc -l < L/runs/r/metrics.csv) - 1 ))\"" run.dom
check "calibration: every figure equals cal.yaml's" python3 - cal.dom cal.yaml <<'PY'
import re, sys, yaml
dom, cal = open(sys.argv[1]).read(), yaml.safe_load(open(sys.argv[2]))
def get(path):
    node = cal
    for part in re.findall(r'[^.\[\]]+|\[\d+\]', path):
        node = node[int(part[1:-1])] if part.startswith('[') else node[part]
    return float(node)
figs = re.findall(r'data-field="([^"]+)" data-value="([^"]+)"', dom)
ok = len(figs) >= 8 and all(abs(float(v) - get(f)) <= 1e-5 * max(1.0, abs(get(f))) for f, v in figs)
sys.exit(0 if ok and 'id="runs"' in dom else 1)
PY
# The output guard: --html over a user's page is refused, over planner's own it is replaced.
echo "<html>my notes</html>" > mine.html
if $PLANNER -q inspect solve.yaml --html mine.html > /dev/null 2> guard.err; then echo "FAIL --html over a user's file"; fail=$((fail+1));
else check "--html over a user's file: one line naming it" grep -q "planner: error: --html mine.html: exists and is not a HTML report the planner wrote" guard.err; fi
check "--html over its own page" $PLANNER -q inspect solve.yaml --html inspect.html
echo "html: $pass passed, $fail failed"
[ "$fail" = 0 ]
