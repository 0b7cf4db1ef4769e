# Sourced by the export tests: reads a checker's "ok DIR" / "FAIL DIR: reason" lines.
# expect_results OUT EXPECT ERR DIR...: a directory named neg-NAME must FAIL with the text EXPECT lists
# for NAME ("NAME|text" lines), every other one must be ok; prints each miss, sets fail=1 on one and
# n_ok to the directories as expected.
expect_results() {
  local out=$1 expect=$2 err=$3 d line name want
  shift 3
  n_ok=0
  for d in "$@"; do
    line=$(grep -F " $d" "$out" | head -1)
    case "$d" in
      */neg-*)
        name=${d##*/neg-}; want=$(grep "^$name|" "$expect" | cut -d'|' -f2-)
        if echo "$line" | grep -q "^FAIL" && echo "$line" | grep -qF -- "$want"; then n_ok=$((n_ok+1)); else echo "FAIL defect $name not rejected with '$want': $line"; fail=1; fi ;;
      *) if echo "$line" | grep -q "^ok "; then n_ok=$((n_ok+1)); else echo "FAIL $d: ${line:-no result}"; tail -5 "$err"; fail=1; fi ;;
    esac
  done
}
