#!/bin/bash
# The MPI watchdog times each call by its own deadline (tests/runtime/mpi_watchdog.cc):
# the process must end non-zero within a few seconds naming the receive that timed out.
BIN=$1
start=$(date +%s%N)
out=$(timeout 30 mpirun --oversubscribe -np 1 "$BIN" 2>&1)
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ $rc = 77 ]; then echo "skipped: $out"; exit 77; fi
fail=0
[ $rc != 0 ] && [ $rc != 124 ] || { echo "FAIL: exit $rc (0: no abort; 124: hung)"; fail=1; }
echo "$out" | grep -q "^planner: error: MPI recv on rank 0 of 1 timed out after 1 s" || { echo "FAIL: no error line naming the receive"; fail=1; }
# mpirun itself takes a second or two to start, more on a loaded machine
[ $ms -lt 10000 ] || { echo "FAIL: took $ms ms for a 1 s timeout"; fail=1; }
echo "$out" | head -5
echo "watchdog: exit $rc after $ms ms"
exit $fail
