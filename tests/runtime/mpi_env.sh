# The shared preamble of the mpirun test scripts (run_test.sh, checkpoint_faults_test.sh,
# faults_test.sh, dp_comm_run_test.sh), sourced after `set -u` with the script's PLANNER and
# SOURCE_DIR arguments: sets PLANNER, SRC, M (configs/models), C (configs/clusters), a scratch
# directory T that becomes the working directory and is removed on exit (a script with more to clean
# sets its own trap after this), Open MPI's run-as-root and shared-memory transport settings, and
# the pass / fail counters with ok and bad.
PLANNER=$1
SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
M=$SRC/configs/models
C=$SRC/configs/clusters
pass=0
fail=0
ok() { pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }
