#!/usr/bin/env bash
# Fuzz the file readers under ASan + UBSan with libFuzzer (clang), seeded
# from the bundled configs and the saved corpus. Crashing inputs land in
# tests/fuzz/regressions/ and are replayed by the `fuzz_corpus` Meson test.
#   bash tests/fuzz/run_fuzz.sh [SECONDS]       (default 300)
set -eu
cd "$(dirname "$0")/../.."
SECONDS_TO_RUN=${1:-300}
OUT=build-fuzz
mkdir -p $OUT/seeds
CXX=${CXX_FUZZ:-clang++}
SRC="common/*.cc spec/*.cc dp_solver/cost_model.cc tests/fuzz/fuzz_spec.cc"
if [ ! -x $OUT/fuzz_spec ] || [ -n "$(find common spec dp_solver tests/fuzz -newer $OUT/fuzz_spec -name '*.cc' -o -newer $OUT/fuzz_spec -name '*.h' | head -1)" ]; then
  $CXX -std=c++20 -O1 -g -I. -DPLANNER_LIBFUZZER -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    $SRC -lyaml-cpp -lfmt -o $OUT/fuzz_spec
fi
# Seeds: every bundled file, prefixed with the selector byte of its reader.
i=0
for f in configs/models/*.yaml; do { printf '\x00'; cat "$f"; } > $OUT/seeds/model_$((i++)); done
for f in configs/clusters/*.yaml; do { printf '\x01'; cat "$f"; } > $OUT/seeds/cluster_$((i++)); done
# (Profiles: the saved corpus holds them; the tree has no bundled *.profile.yaml.)
# A glob that matches nothing is an error, never an empty seed set.
seed() {  # seed SELECTOR NAME FILES...
  local sel=$1 name=$2; shift 2
  [ -f "$1" ] || { echo "run_fuzz.sh: no seed files for $name ($1)" >&2; exit 1; }
  for f in "$@"; do { printf "$sel"; head -c 20000 "$f"; } > $OUT/seeds/${name}_$((i++)); done
}
seed '\x03' plan tests/codegen/plans/*.plan.yaml
seed '\x05' launch tests/codegen/golden/*/launch.yaml
seed '\x04' graph tests/data/pipedream/*/graph.txt
seed '\x06' hf tests/data/hf/*.json
mkdir -p $OUT/corpus
ASAN_OPTIONS=detect_leaks=0 $OUT/fuzz_spec -max_total_time=$SECONDS_TO_RUN -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -artifact_prefix=tests/fuzz/regressions/ $OUT/corpus tests/fuzz/corpus $OUT/seeds || true
# Keep a small, minimised corpus in the tree.
$OUT/fuzz_spec -merge=1 -max_len=8192 tests/fuzz/corpus $OUT/corpus >/dev/null 2>&1 || true
echo "corpus: $(ls tests/fuzz/corpus | wc -l) files; regressions: $(ls tests/fuzz/regressions | wc -l) files"
