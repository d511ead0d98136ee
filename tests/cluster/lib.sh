# Shared helpers of the cluster tests (tools/cluster.sh, DESIGN.md §9.1). Sourced after the
# arguments of every script test ($1 upipe, $2 build dir, $3 source dir); brings in
# tests/scripts/lib.sh (ok, bad, run_case, compare, ...).
#
# cluster_up N [--rate R]: N nodes, torn down when the script exits however it exits (a trap on
# EXIT, INT and TERM; a SIGKILL leaves them to the next `up`, which removes leftovers first). One
# cluster per host: the tests take a lock (ctest's RESOURCE_LOCK inside one run, flock across
# runs). Skips the test (status 77, one line) where namespaces cannot be made or mpiexec is not
# MPICH's hydra.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
CLUSTER=$SRC/tools/cluster.sh
LOCAL_MPIEXEC=$MPIEXEC
JOB=$SRC/tests/cluster/job.sh # an MPI job, ended when it hangs in MPI_Finalize (job.sh)
export FINALIZE_MARK=${FINALIZE_MARK:-$BUILD/tests/libfinalize_mark.so}
export FINALIZE_LOG=$TMP/finalize.log
# lib.sh's verdict, with the count of jobs job.sh ended in MPI_Finalize
finish() {
  local hung=0
  [ -f "$FINALIZE_LOG" ] && hung=$(wc -l <"$FINALIZE_LOG")
  echo "$PASS passed, $FAIL failed ($hung MPI job(s) ended in MPICH's MPI_Finalize hang, job.sh)"
  [ "$FAIL" -eq 0 ]
}

cluster_teardown() {
  "$CLUSTER" down >/dev/null 2>&1 || true
  rm -rf "$TMP"
}

cluster_up() {
  if ! "$LOCAL_MPIEXEC" --version 2>/dev/null | grep -q HYDRA; then
    echo "skip: the cluster tests launch through MPICH's hydra; $LOCAL_MPIEXEC is not it"
    exit 77
  fi
  if [ "${UPIPE_CLUSTER_LOCKED:-0}" != 1 ]; then
    exec 9>/tmp/upipe-cluster.lock
    flock -w 900 9 || { echo "FAIL: another cluster test held the host's cluster for 900 s"; exit 1; }
    export UPIPE_CLUSTER_LOCKED=1
  fi
  trap 'cluster_teardown' EXIT
  trap 'exit 1' INT TERM
  local rc=0
  UPIPE_CLUSTER_OWNER=$$ "$CLUSTER" up "$@" >"$TMP/up.out" 2>&1 || rc=$?
  if [ "$rc" = 77 ]; then echo "skip: $(cat "$TMP/up.out")"; exit 77; fi
  [ "$rc" = 0 ] || { cat "$TMP/up.out"; echo "FAIL: cluster up $*"; exit 1; }
  HOSTFILE=$("$CLUSTER" hostfile)
}

# A command of lib.sh with its MPI ranks placed on the cluster: mpiexec from the first node with
# the hostfile (2 slots per node: ranks 0, 1 on upn0, 2, 3 on upn1).
on_cluster() {
  local saved=$MPIEXEC rc=0
  MPIEXEC="$JOB $CLUSTER mpirun"
  "$@" || rc=$?
  MPIEXEC=$saved
  return $rc
}
# The same with every rank on one node (mpiexec inside it, no hosts: hydra forks them there).
on_node() { # node command...
  local saved=$MPIEXEC rc=0 node=$1
  shift
  MPIEXEC="$JOB $CLUSTER run $node mpiexec"
  "$@" || rc=$?
  MPIEXEC=$saved
  return $rc
}
# Bytes the nodes' links sent, summed over the nodes (every byte between two nodes leaves one).
wire_bytes() {
  "$CLUSTER" bytes | awk '{ s += $3 } END { printf "%d\n", s }'
}
