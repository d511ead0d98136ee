#!/usr/bin/env bash
# Faults injected on purpose: a signal while the weights are being written leaves no temporary
# file; a log on a full disk stops the run with a message; a stalled rank (SIGSTOP) ends the job
# through the other's watchdog with a message naming it (it does not answer a probe) instead of a
# hang, and a healthy job whose start-up, first step, checkpoints and validation each outlast the
# floor is not stopped.
source "$(dirname "$0")/lib.sh"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null || bad "data recall"
# a vocabulary of 64K makes --save write ~70 MB, long enough to be caught in the middle
sed 's/"vocab_size": 256/"vocab_size": 65536/; s/"hidden_size": 128/"hidden_size": 256/' \
  "$SRC/configs/tiny.json" >"$TMP/big.json"

# ---- SIGTERM / SIGINT in the middle of --save: no *.tmp.* left, no half file at the path ----
for sig in TERM INT; do
  mkdir -p "$TMP/save_$sig"
  "$UPIPE" train --quiet --threads 1 --config "$TMP/big.json" --data "$TMP/d.bin" --seq-len 16 \
    --steps 1 --lr 0 --save "$TMP/save_$sig/w.st" >/dev/null 2>&1 &
  pid=$!
  caught=0
  while kill -0 "$pid" 2>/dev/null; do # until the save begins, however slow the start
    if ls "$TMP/save_$sig"/w.st.tmp.* >/dev/null 2>&1; then kill -$sig "$pid"; caught=1; break; fi
    sleep 0.005
  done
  wait "$pid" 2>/dev/null
  # the signal may still land just after the rename: then the whole file is there, complete
  left=$(ls -A "$TMP/save_$sig" | grep '\.tmp\.' || true)
  whole=$(ls -A "$TMP/save_$sig" | grep -v '\.tmp\.' || true)
  if [ -n "$whole" ] && ! "$BUILD/tests/st_compare" "$TMP/save_$sig/w.st" "$TMP/save_$sig/w.st" --rtol 0 >/dev/null 2>&1; then
    bad "SIG$sig during --save left a broken $whole"
  elif [ -z "$left" ]; then ok "SIG$sig during --save (caught $caught): no temporary file${whole:+, the complete $whole}"
  else bad "SIG$sig during --save left: $left"; fi
done

# ---- --log on a full disk: the first failed line stops the run, status 1, one message ----
rc=0
"$UPIPE" train --quiet --threads 1 --config "$SRC/configs/tiny.json" --data "$TMP/d.bin" --seq-len 64 \
  --steps 3 --log /dev/full >"$TMP/full.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "upipe: error.*--log /dev/full.*write failed" "$TMP/full.out" \
  && ok "--log on a full disk: $(grep error "$TMP/full.out")" || { bad "--log /dev/full: exit $rc"; cat "$TMP/full.out"; }
# ---- a stalled rank (SIGSTOP): the other's watchdog names the step, the collective and the
# stalled rank, and stops the job ----
mpirun_n 2 "$UPIPE" train --quiet --threads 1 --config "$SRC/configs/tiny.json" --data "$TMP/d.bin" \
  --seq-len 256 --steps 100000 --lr 1e-3 --watchdog 2.5 --log "$TMP/wd2.jsonl" >"$TMP/wd.out" 2>&1 &
job=$!
# stop a rank once step 1 is logged (however long start-up takes on a busy host: stopped during
# start-up, the peers would wait WATCHDOG_UNMEASURED_S, as a slow loader may)
while kill -0 "$job" 2>/dev/null && [ ! -s "$TMP/wd2.jsonl" ]; do sleep 0.05; done
victim=$(pgrep -f -- "--log $TMP/wd2.jsonl" | while read p; do
  [ "$(ps -o comm= -p "$p")" = upipe ] && echo "$p"; done | tail -n1)
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -STOP "$victim"
rc=0; wait "$job" || rc=$?
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null
# a survivor's one line names the step, the collective, the stopped rank (it does not answer the
# probe) and the floor as it was set (2.5, not "2")
line=$(grep -m1 "upipe: error (rank [0-9]*): watchdog: step [0-9]*: no progress for .* in MPI_[A-Za-z_/]* (comm_[a-z0-9_]*, 2 ranks; limit .*, --watchdog 2.5): no answer from rank [0-9]" "$TMP/wd.out")
me=$(sed -n 's/^upipe: error (rank \([0-9]*\)).*/\1/p' <<<"$line")
peer=$(sed -n 's/.*no answer from rank \([0-9]*\) .*/\1/p' <<<"$line")
if [ "$rc" -ne 0 ] && [ -n "$line" ] && [ "$me" != "$peer" ]; then
  ok "stalled rank: job stopped in ${dt} s: ${line#upipe: error }"
else bad "stalled rank: exit $rc after ${dt} s"; cat "$TMP/wd.out"; fi
# ---- the same in FSDP's reduce-scatter (upipe's own, point to point and polled): rank 1 stops
# calling MPI in the middle of one; rank 0 names the call and rank 1 past its 1 s limit, within
# the probes' 2 s, and MPI_Abort ends the job (test_comm --stall) ----
t0=$(date +%s.%N)
rc=0
timeout 60 $MPIEXEC -n 2 "$BUILD/tests/test_comm" --stall >"$TMP/rs.out" 2>&1 || rc=$?
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
line=$(grep -m1 "upipe: error (rank 0): watchdog: step 3: no progress for .* in MPI_Irecv (comm_reduce_scatter, 2 ranks; limit 1.0 s, --watchdog 1): no answer from rank 1 " "$TMP/rs.out")
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ -n "$line" ]; then
  ok "stalled in a reduce-scatter: job stopped in ${dt} s: ${line#upipe: error }"
else bad "stalled in a reduce-scatter: exit $rc after ${dt} s"; cat "$TMP/rs.out"; fi
# ---- a chain of waits (test_comm --chain, 4 ranks, --cp 2): rank 3 stalls; ranks 0 and 2 wait on it
# in a loss reduction, rank 1 on rank 0 in an all-to-all. Rank 1's probes find rank 0 alive, so it
# waits on (2 x COMM_PROBE_S, twice the probes rank 0 and 2 take) and the line that ends the job
# names rank 3; a rank that stopped at once would win with a line naming no one (lost.sh met that
# across nodes under FSDP) ----
t0=$(date +%s.%N)
rc=0
timeout 60 $MPIEXEC -n 4 "$BUILD/tests/test_comm" --chain >"$TMP/chain.out" 2>&1 || rc=$?
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
line=$(grep -m1 "upipe: error (rank [02]): watchdog: step 4: no progress for .* in MPI_Iallreduce (comm_reduce_loss, 4 ranks; limit 1.0 s, --watchdog 1): no answer from rank 3 " "$TMP/chain.out")
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ -n "$line" ] && ! grep -q "every peer answered" "$TMP/chain.out"; then
  ok "a chain of waits: job stopped in ${dt} s: ${line#upipe: error }"
else bad "a chain of waits: exit $rc after ${dt} s"; cat "$TMP/chain.out"; fi
# ---- collectives called out of order (test_comm --disorder, 2 ranks): rank 0 reduces the loss,
# rank 1 calls an all-to-all; both answer both rounds of probes, and the line says so ----
rc=0
timeout 60 $MPIEXEC -n 2 "$BUILD/tests/test_comm" --disorder >"$TMP/disorder.out" 2>&1 || rc=$?
line=$(grep -m1 "upipe: error (rank [01]): watchdog: step 4: no progress for .* (comm_[a-z_]*, 2 ranks; limit 1.0 s, --watchdog 1): every peer answered a probe after [0-9.]* s and again now: the ranks are alive but one waits elsewhere" "$TMP/disorder.out")
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ -n "$line" ]; then
  ok "collectives out of order: ${line#upipe: error }"
else bad "collectives out of order: exit $rc"; cat "$TMP/disorder.out"; fi
# ---- a healthy job is never stopped, on any host or load: start-up (allocating and zeroing
# 850 MiB), the first step (its page faults; one step of configs/bench.json at T = 4096 on one
# thread takes seconds with no MPI call inside it) and the second are all longer than a floor of
# 0.5 s. Start-up and the first step are not judged by the floor; the second is judged against
# 10 x the first, and its attention tasks, layers and tiles tick (both stopped the job before) ----
"$UPIPE" data recall --output "$TMP/r4k.bin" --tokens 20000 --distance 256 >/dev/null
rc=0
"$UPIPE" train --quiet --threads 1 --config "$SRC/configs/bench.json" --data "$TMP/r4k.bin" \
  --seq-len 4096 --steps 2 --watchdog 0.5 >"$TMP/long.out" 2>&1 || rc=$?
[ "$rc" = 0 ] && ok "start-up and two long steps under --watchdog 0.5 run to the end" \
  || { bad "long step: exit $rc"; cat "$TMP/long.out"; }
# ---- checkpoint writes and validation are not judged by the step floor: a 64K vocabulary makes
# each checkpoint ~200 MB written and fsync'd after a step of milliseconds, on 2 ranks (the
# checkpoint's collectives wait for the slower writer) ----
rc=0
mpirun_n 2 "$UPIPE" train --quiet --threads 1 --config "$TMP/big.json" --data "$TMP/d.bin" \
  --seq-len 16 --steps 3 --lr 1e-3 --watchdog 0.5 --ckpt-dir "$TMP/wdck" --ckpt-every 1 \
  --val-data "$TMP/d.bin" --val-every 1 --val-windows 2 >"$TMP/wdck.out" 2>&1 || rc=$?
[ "$rc" = 0 ] && [ -d "$TMP/wdck/step-00000003" ] \
  && ok "checkpoint writes and validation under --watchdog 0.5 run to the end" \
  || { bad "checkpoints under the watchdog: exit $rc"; cat "$TMP/wdck.out"; }
finish
