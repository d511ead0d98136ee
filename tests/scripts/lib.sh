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
# UPIPE_KERNEL forces a kernel path (kernels.h): a path this CPU cannot run skips the script
# (ctest SKIP_RETURN_CODE 77); any other refusal (a misspelt name) fails it.
if [ -n "${UPIPE_KERNEL:-}" ]; then
  if ! "$UPIPE" --version >"$TMP/version" 2>&1; then
    cat "$TMP/version"
    grep -q "cannot run" "$TMP/version" && exit 77
    exit 1
  fi
  echo "UPIPE_KERNEL=$UPIPE_KERNEL: $(grep '^kernels:' "$TMP/version")"
fi
ok() { PASS=$((PASS + 1)); echo "ok: $*"; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*"; }
finish() {
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" -eq 0 ]
}
# Value of a numeric field in a JSONL line (the log format is upipe's own: "key": value).
json_field() { sed -n "s/.*\"$2\": *\([-+0-9.eE]*\).*/\1/p" <<<"$1"; }
# The accounted peak of a memory report less its `runtime` category (the process's own resident
# bytes, measured in each process): what a plan and the run it plans must agree on to the byte.
buffer_peak() {
  local j p r
  j=$(tr -d '\n' <"$1"); p=$(json_field "$j" peak_bytes); r=$(json_field "$j" runtime)
  is_num "$p" && is_num "$r" && echo $((p - r))
}
# mpiexec that runs as root and oversubscribed with MPICH (default) or Open MPI.
MPIEXEC=${MPIEXEC:-mpiexec}
if "$MPIEXEC" --version 2>/dev/null | grep -qi "open mpi"; then
  MPIEXEC="$MPIEXEC --oversubscribe --allow-run-as-root"
fi
mpirun_n() { local n=$1; shift; timeout 300 $MPIEXEC -n "$n" "$@"; }
# Relative difference |a-b| <= r*|b| of two numbers; false when either is empty or not a number
# (a missing value must never pass a comparison).
is_num() { [[ "$1" =~ ^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]]; }
close() {
  is_num "$1" && is_num "$2" || return 1
  awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; if (b < 0) b = -b; exit !(d <= r * b) }'
}

# `upipe train --quiet --threads 1` on n ranks, its log in $TMP/name.jsonl, its output in
# $TMP/name.out (shown when it fails).
train_run() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 "$@" --log "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1 \
    || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
# Two files with the same bytes.
same_file() { # what file-a file-b
  if cmp -s "$2" "$3"; then ok "$1: identical"; else bad "$1: the files differ"; fi
}
# Two sets of flags that must give the same bits: the weights after 3 AdamW steps and the first
# step's gradients of runs NAME (args, flags-a) and NAME_b (args, flags-b).
same_bits() { # name ranks "flags-a" "flags-b" args...
  local name=$1 n=$2 fa=$3 fb=$4
  shift 4
  # shellcheck disable=SC2086
  train_run "$name" "$n" "$@" $fa --steps 3 --lr 1e-3 --save "$TMP/$name.w.st" \
    && train_run "${name}_b" "$n" "$@" $fb --steps 3 --lr 1e-3 --save "$TMP/${name}_b.w.st" \
    && same_file "$name: weights after 3 steps" "$TMP/$name.w.st" "$TMP/${name}_b.w.st"
  # shellcheck disable=SC2086
  train_run "$name.g" "$n" "$@" $fa --steps 1 --lr 0 --save-grads "$TMP/$name.g.st" \
    && train_run "${name}_b.g" "$n" "$@" $fb --steps 1 --lr 0 --save-grads "$TMP/${name}_b.g.st" \
    && same_file "$name: gradients" "$TMP/$name.g.st" "$TMP/${name}_b.g.st"
}
# One training step of `upipe train` on n ranks writing its gradients and log under $TMP/name.
run_case() { # name ranks args...
  local name=$1 n=$2
  shift 2
  if ! mpirun_n "$n" "$UPIPE" train --quiet --threads 1 --steps 1 --lr 0 "$@" \
      --save-grads "$TMP/$name.st" --log "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1; then
    bad "$name: run failed"; cat "$TMP/$name.out"; return 1
  fi
}
# The loss and gradients of a run's $TMP/name.jsonl and $TMP/name.st against a float64 reference
# (its expected JSON and gradients file): the loss within lrtol relative, every tensor's
# gradients within grtol of its scale.
check_ref() { # name expected-json expected-grads grtol lrtol
  local name=$1 l r
  l=$(json_field "$(head -n1 "$TMP/$name.jsonl")" loss)
  r=$(json_field "$(cat "$2")" loss)
  if [ -n "$l" ] && close "$l" "$r" "$5"; then ok "$name: loss $l vs reference $r"
  else bad "$name: loss '$l' vs reference $r (rtol $5)"; fi
  if "$BUILD/tests/st_compare" "$TMP/$name.st" "$3" --rtol "$4" >"$TMP/$name.cmp" 2>&1; then
    ok "$name: gradients $(tail -n1 "$TMP/$name.cmp")"
  else bad "$name: gradients (rtol $4)"; cat "$TMP/$name.cmp"; fi
}
# Loss and gradients of run_case name against ref: gradients within rtol of each tensor's scale
# (default $GRAD_RTOL), the loss within loss-rtol (default: rtol when given, else $LOSS_RTOL).
compare() { # name ref [rtol [loss-rtol]]
  local grtol=${3:-$GRAD_RTOL} lrtol=${4:-${3:-$LOSS_RTOL}} l1 l2
  l1=$(json_field "$(head -n1 "$TMP/$1.jsonl")" loss)
  l2=$(json_field "$(head -n1 "$TMP/$2.jsonl")" loss)
  if close "$l1" "$l2" "$lrtol"; then ok "$1: loss $l1 = $l2"; else bad "$1: loss $l1 vs $l2"; fi
  if "$BUILD/tests/st_compare" "$TMP/$1.st" "$TMP/$2.st" --rtol "$grtol" >"$TMP/$1.cmp" 2>&1; then
    ok "$1: gradients $(tail -n1 "$TMP/$1.cmp")"
  else
    bad "$1: gradients"; cat "$TMP/$1.cmp"
  fi
}
