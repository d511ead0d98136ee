#!/usr/bin/env bash
# A run's life from start to stop (issue 23, items 4-7):
# - two jobs on one --ckpt-dir: the second is refused at once with one line naming the first
#   (pid and host), on every rank; the lock of a killed job is no lock; the lock file is never a
#   checkpoint and survives pruning;
# - a --stop-at that the resumed checkpoint has reached: nothing to do, exit 0, nothing written;
# - a resumed run's --log holds every step once, in order, with the losses of a straight run;
#   `upipe plot` reads a log with a restart in it as the later run's points;
# - --trace after kill -9, a non-finite stop and a watchdog stop: a file the viewers load (a JSON
#   array, its closing bracket added as they do), with the spans of the finished steps.
# Every wait polls for a file or a line (bounded generously), never a fixed sleep.
source "$(dirname "$0")/lib.sh"
CFG=$SRC/configs/tiny.json
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null || bad "data recall"
A="--config $CFG --data $TMP/d.bin --seq-len 64 --lr 1e-3 --threads 1"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

# Polls until command succeeds, or pid (when given) is gone, for at most 600 s: 1 or 0.
wait_until() { # pid command...
  local pid=$1
  shift
  for _ in $(seq 1 6000); do
    "$@" && return 0
    [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && { "$@"; return; }
    sleep 0.1
  done
  return 1
}
steps_of() { grep -o '"step": [0-9]*' "$1" | sed 's/.*: //' | tr '\n' ' '; }
losses_of() { sed 's/.*"loss": *\([^,]*\),.*/\1/' "$1" | tr '\n' ' '; }

# ---- 4. two jobs on one --ckpt-dir ----
"$UPIPE" train $A --quiet --steps 100000 --ckpt-dir "$TMP/ck" --log "$TMP/first.jsonl" \
  >"$TMP/first.out" 2>&1 &
first=$!
PIDS+=("$first")
# the lock is taken before the first step: once a step is logged, the first job holds it
if wait_until "$first" test -s "$TMP/first.jsonl" && kill -0 "$first" 2>/dev/null; then
  rc=0
  mpirun_n 2 "$UPIPE" train $A --steps 4 --ckpt-dir "$TMP/ck" --resume >"$TMP/second.out" 2>&1 || rc=$?
  want="upipe: error: --ckpt-dir $TMP/ck is in use by another upipe job (pid $first on host $(hostname)): wait for it, or use another folder"
  if [ "$rc" = 1 ] && [ "$(cat "$TMP/second.out")" = "$want" ]; then
    ok "second job on the folder refused (2 ranks, exit 1): $(cat "$TMP/second.out")"
  else bad "second job: exit $rc"; cat "$TMP/second.out"; fi
  kill -0 "$first" 2>/dev/null && ok "the first job trains on" || bad "the first job died"
else bad "first job did not start"; cat "$TMP/first.out"; fi
kill -9 "$first" 2>/dev/null; wait "$first" 2>/dev/null
# a killed job's lock went with it: the next job runs
rc=0
mpirun_n 2 "$UPIPE" train $A --quiet --steps 4 --ckpt-dir "$TMP/ck" --resume >"$TMP/after.out" 2>&1 || rc=$?
[ "$rc" = 0 ] && [ -d "$TMP/ck/step-00000004" ] && ok "after a kill -9 the folder is free: the next job ran" \
  || { bad "after kill -9: exit $rc"; cat "$TMP/after.out"; }

# ---- 5. a --stop-at already reached: nothing to do ----
S="$A --steps 6 --ckpt-dir $TMP/ck_stop --stop-at 3 --resume --log $TMP/stop.jsonl"
"$UPIPE" train $S --quiet >"$TMP/stop1.out" 2>&1 || bad "stop-at: first run failed"
cp "$TMP/stop.jsonl" "$TMP/stop1.jsonl"
rc=0
"$UPIPE" train $S --save "$TMP/stop.st" --trace "$TMP/stop.trace" >"$TMP/stop2.out" 2>&1 || rc=$?
if [ "$rc" = 0 ] && grep -q "^already at step 3 (--stop-at 3): nothing to do" "$TMP/stop2.out" \
   && [ "$(wc -l <"$TMP/stop2.out")" = 1 ] && cmp -s "$TMP/stop.jsonl" "$TMP/stop1.jsonl" \
   && [ "$(ls "$TMP/ck_stop")" = step-00000003 ] && [ ! -e "$TMP/stop.st" ] && [ ! -e "$TMP/stop.trace" ]; then
  ok "--stop-at 3 again: $(cat "$TMP/stop2.out" | cut -c1-60)..., exit 0, nothing written"
else
  bad "--stop-at 3 again: exit $rc, checkpoints: $(ls "$TMP/ck_stop" | tr '\n' ' ')"; head -n 5 "$TMP/stop2.out"
fi

# ---- 6. a crash after step 8's checkpoint was lost: the log is cut back to step 4 ----
L="$A --steps 8 --ckpt-every 4 --ckpt-keep 3 --quiet"
"$UPIPE" train $A --steps 8 --quiet --log "$TMP/straight.jsonl" >/dev/null 2>&1 || bad "log: straight run failed"
"$UPIPE" train $L --ckpt-dir "$TMP/ck_log" --log "$TMP/log.jsonl" >/dev/null 2>&1 || bad "log: first run failed"
rm -r "$TMP/ck_log/step-00000008" # the crash: only step 4's checkpoint is there
printf '{"step": 9, "loss": 4.1' >>"$TMP/log.jsonl" # and a line torn by the kill
cp "$TMP/log.jsonl" "$TMP/crashed.jsonl"
"$UPIPE" train $L --ckpt-dir "$TMP/ck_log" --resume --log "$TMP/log.jsonl" >"$TMP/log.out" 2>&1 \
  || { bad "log: resume failed"; cat "$TMP/log.out"; }
got=$(steps_of "$TMP/log.jsonl")
if [ "$got" = "1 2 3 4 5 6 7 8 " ] && [ "$(losses_of "$TMP/log.jsonl")" = "$(losses_of "$TMP/straight.jsonl")" ]; then
  ok "resumed log: steps $got once each, the losses of the straight run"
else bad "resumed log: steps $got"; fi
[ -f "$TMP/ck_log/.lock" ] && [ "$(ls "$TMP/ck_log" | tr '\n' ' ')" = "step-00000004 step-00000008 " ] \
  && ok "the lock file stays beside the checkpoints, which it is not" || bad "ck_log holds: $(ls -A "$TMP/ck_log")"
# a log from before this fix (steps 1..8, then 5..8 again): plot keeps the later run's points
{ cat "$TMP/straight.jsonl"; tail -n 4 "$TMP/straight.jsonl"; } >"$TMP/restart.jsonl"
"$UPIPE" plot --log "$TMP/restart.jsonl" --svg "$TMP/restart.svg" >"$TMP/plot.out" 2>&1
grep -q "8 training and 0 validation points" "$TMP/plot.out" && ok "plot of a log with a restart: $(cat "$TMP/plot.out")" \
  || { bad "plot of a log with a restart"; cat "$TMP/plot.out"; }

# ---- 7. the trace after kill -9, a non-finite stop and a watchdog stop ----
# trace_check FILE MIN: the file parses (with "]" added when it lacks it, as the viewers do) and
# holds step spans 0..MIN-1 and forward and backward spans of every layer on rank 0.
trace_check() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
path, want = sys.argv[1], int(sys.argv[2])
text = open(path).read()
doc = json.loads(text if text.rstrip().endswith("]") or text.lstrip().startswith("{") else text + "]")
evs = doc["traceEvents"] if isinstance(doc, dict) else doc
steps = sorted(e["args"]["step"] for e in evs if e.get("name") == "step" and e.get("pid") == 0)
layers = {n: {e["args"]["layer"] for e in evs if e.get("name") == n and e.get("pid") == 0}
          for n in ("forward", "backward")}
if steps[:want] != list(range(want)) or any(layers[n] != {0, 1, 2, 3} for n in layers):
    sys.exit("steps %s, layers %s" % (steps, layers))
print("%d events, steps %d..%d" % (len(evs), steps[0], steps[-1]))
EOF
}
# A buffer of 1024 events (about 30 steps of this model) goes to the file when half full, so
# once 60 steps are logged at least one flush with steps 0..2 in it is on disk (besides those the
# run makes every 2 s), however slow the machine.
T="$A --quiet --steps 100000"
UPIPE_TRACE_EVENTS=1024 "$UPIPE" train $T --trace "$TMP/kill.trace" --log "$TMP/kill.jsonl" >/dev/null 2>&1 &
pid=$!
PIDS+=("$pid")
logged() { [ -s "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
wait_until "$pid" logged "$TMP/kill.jsonl" 60
# stopped first: a write in progress completes (SIGSTOP is not fatal), and the writer ends each
# write on an event, so the kill leaves whole events on any host; a kill that lands inside a
# write of several pages may cut it short, which the viewers survive but json.loads does not
kill -STOP "$pid" 2>/dev/null; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
if r=$(trace_check "$TMP/kill.trace" 3 2>&1); then ok "trace after kill -9: $r"
else bad "trace after kill -9: $r"; fi

# every weight x 1e30: each step's loss and gradient norm are NaN/Inf (as in bad_input.sh)
"$UPIPE" train $A --quiet --steps 1 --lr 0 --save "$TMP/w.st" >/dev/null 2>&1 \
  && "$BUILD/tests/st_sum" "$TMP/huge.st" 1e30 "$TMP/w.st" || bad "huge weights"
rc=0
"$UPIPE" train $A --quiet --steps 8 --init "$TMP/huge.st" --on-nonfinite skip --max-skips 2 \
  --trace "$TMP/nan.trace" >"$TMP/nan.out" 2>&1 || rc=$?
if [ "$rc" = 1 ] && grep -q "2 steps in a row skipped" "$TMP/nan.out" && r=$(trace_check "$TMP/nan.trace" 1 2>&1); then
  ok "trace after a non-finite stop (step 2): $r"
else bad "trace after a non-finite stop: exit $rc: $r"; cat "$TMP/nan.out"; fi

# rank 1 stalled (SIGSTOP): rank 0's watchdog stops the job and closes the trace
mpirun_n 2 "$UPIPE" train $T --watchdog 5 --trace "$TMP/wd.trace" --log "$TMP/wd.jsonl" >"$TMP/wd.out" 2>&1 &
job=$!
PIDS+=("$job")
wait_until "$job" test -s "$TMP/wd.jsonl"
rank1() { # the upipe process of rank 1 of that job
  local p
  for p in $(pgrep -f -- "--log $TMP/wd.jsonl"); do
    [ "$(ps -o comm= -p "$p")" = upipe ] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qE '^(PMI_RANK|OMPI_COMM_WORLD_RANK)=1$' && echo "$p"
  done
}
victim=$(rank1)
[ -n "$victim" ] && kill -STOP "$victim"
rc=0; wait "$job" || rc=$?
[ -n "$victim" ] && { kill -CONT "$victim"; kill -9 "$victim"; } 2>/dev/null
if [ -n "$victim" ] && [ "$rc" != 0 ] && grep -q "watchdog: step" "$TMP/wd.out" && r=$(trace_check "$TMP/wd.trace" 1 2>&1); then
  ok "trace after a watchdog stop: $r"
else bad "trace after a watchdog stop: victim '$victim', exit $rc: $r"; cat "$TMP/wd.out"; fi
left=$(ls -A "$TMP" | grep -e '\.tmp\.' || true)
[ -z "$left" ] && ok "no temporary file left" || bad "left: $left"
finish
