# Shared helpers of the script tests. Sourced; $1 upipe, $2 build dir, $3 source dir.
set -u
UPIPE=$1
BUILD=$2
SRC=$3
FIX=$SRC/tests/fixtures
TMP=$(mktemp -d /tmp/upipe-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PASS=0
FAIL=0
ok() { PASS=$((PASS + 1)); echo "ok: $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }
finish() {
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
}
# Value of a numeric field in a JSONL line (the log format is upipe's own: "key": value).
json_field() { sed -n "s/.*\"$2\": *\([-+0-9.eE]*\).*/\1/p" <<<"$1"; }
# mpiexec that runs as root and oversubscribed with MPICH (default) or Open MPI.
MPIEXEC=${MPIEXEC:-mpiexec}
if "$MPIEXEC" --version 2>/dev/null | grep -qi "open mpi"; then
  MPIEXEC="$MPIEXEC --oversubscribe --allow-run-as-root"
fi
mpirun_n() { local n=$1; shift; timeout 300 $MPIEXEC -n "$n" "$@"; }
# Relative difference |a-b| <= r*|b| of two numbers.
close() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; exit !(d <= r * b) }'; }
