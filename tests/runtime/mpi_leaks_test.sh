#!/usr/bin/env bash
# A 2-rank `planner run` with LeakSanitizer on (the sanitizer job: make test-sanitize runs the `mpi_leaks` suite;
# in other builds it checks the run alone). Open MPI keeps allocations for the process's life in libmpi,
# libopen-pal, its MCA components, hwloc, libevent and PMIx; tests/lsan.supp names those modules. Their stacks
# need the slow unwinder (fast_unwind_on_malloc=0): without frame pointers the fast one stops in the module and
# leaves "<unknown module>" frames no suppression can match (issue 32: "116 KB of leaks from modules lsan.supp
# does not name"). The planner's own allocations are never suppressed.
set -u
source "$(dirname "$0")/mpi_env.sh" "$1" "$2"
$PLANNER -q solve --gpus 2 --pp 2 --schedule 1f1b --model $M/tiny-gpt.yaml --cluster $C/local-cpu.yaml -o two.plan.yaml \
  > /dev/null || { echo "FAIL solve"; exit 1; }
$PLANNER -q codegen two.plan.yaml -o L --iterations 5 --timeout 60 || { echo "FAIL codegen"; exit 1; }
ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 \
  LSAN_OPTIONS=suppressions=$SRC/tests/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0 \
  timeout 240 mpirun --oversubscribe -np 2 $PLANNER -q run L --run-id leaks > run.out 2> run.err
rc=$?
if [ $rc = 0 ] && ! grep -q "LeakSanitizer\|AddressSanitizer" run.err && [ "$(( $(wc -l < L/runs/leaks/metrics.csv) - 1 ))" = 5 ]; then
  ok
else
  bad "2-rank run under LeakSanitizer: exit $rc: $(grep -m3 'SUMMARY\|ERROR' run.err)"
fi
echo "mpi_leaks: $pass passed, $fail failed"
[ "$fail" = 0 ]
