#!/usr/bin/env bash
# --trace: the Chrome / Perfetto trace of a run on 1 and 2 ranks with the whole stack (FSDP,
# checkpointing, offload, tiled MLP and loss, UPipe) parses and holds the expected spans per rank
# and thread, nested, with bytes (tests/tools/check_trace.py); the weights and losses are the bytes
# of the same run without it; the plan still equals the measured peak; the flush between steps
# and the drops of a full buffer; `upipe eval --trace`; an unwritable path is refused with one
# line before anything runs; no temporary file is left anywhere, not even by a killed run (which
# leaves the trace so far).
source "$(dirname "$0")/lib.sh"
CHECK="python3 $SRC/tests/tools/check_trace.py"
CFG=$SRC/configs/tiny.json # 4 layers
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null
mkdir -p "$TMP/store" "$TMP/out"
BASE="--config $CFG --data $TMP/d.bin --seq-len 256 --steps 2 --lr 1e-3 --threads 1 --quiet"
STACK="--checkpoint --offload $TMP/store --tile-mlp --tile-loss 64"
LAYER=forward,recompute,backward,stage_forward,stage_backward,flash_forward,flash_backward
COMMON=$LAYER,offload_write,offload_read,offload_wait,loss_tile,optimizer_step,step

run() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" "$UPIPE" train $BASE "$@" --save "$TMP/$name.st" --log "$TMP/$name.jsonl" \
    >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
# The tracer only watches: the same weights (bytes) and per-step loss and gradient norm.
same_math() { # traced plain
  local a b
  a=$(sed 's/.*"loss": *\([^,]*\),.*"grad_norm": *\([^,]*\),.*/\1 \2/' "$TMP/$1.jsonl")
  b=$(sed 's/.*"loss": *\([^,]*\),.*"grad_norm": *\([^,]*\),.*/\1 \2/' "$TMP/$2.jsonl")
  if cmp -s "$TMP/$1.st" "$TMP/$2.st" && [ -n "$a" ] && [ "$a" = "$b" ]; then
    ok "$1: weights and losses are the bytes of the run without --trace ($(echo $a | head -c 40))"
  else
    bad "$1: differs from $2 (loss/norm '$a' vs '$b')"
  fi
}
check() { # name args...
  local name=$1
  shift
  if $CHECK "$@" >"$TMP/$name.check" 2>&1; then ok "$name: $(tail -n1 "$TMP/$name.check")"
  else bad "$name"; cat "$TMP/$name.check"; fi
}

# One rank: no all-to-all or FSDP (P = R = 1); the I/O thread has its own track.
run plain_1 1 $STACK --upipe-heads 1
run trace_1 1 $STACK --upipe-heads 1 --trace "$TMP/out/t1.json" && same_math trace_1 plain_1
check trace_1 "$TMP/out/t1.json" --ranks 1 --layers 4 --io --names $COMMON \
  --bytes offload_write,offload_read,offload_wait,optimizer_step

# Two ranks, FSDP: all-to-alls, gathers and reduce-scatters with bytes on both ranks.
run plain_2 2 $STACK --fsdp --upipe-heads 2
run trace_2 2 $STACK --fsdp --upipe-heads 2 --trace "$TMP/out/t2.json" && same_math trace_2 plain_2
check trace_2 "$TMP/out/t2.json" --ranks 2 --layers 4 --io \
  --names $COMMON,a2a_seq_to_head,a2a_head_to_seq,fsdp_gather,fsdp_reduce_scatter \
  --bytes a2a_seq_to_head,a2a_head_to_seq,fsdp_gather,fsdp_reduce_scatter,offload_write,offload_read,optimizer_step

# Two replicas without FSDP: the gradient all-reduce.
run plain_dp 2 --cp 1 --tile-loss 64
run trace_dp 2 --cp 1 --tile-loss 64 --trace "$TMP/out/tdp.json" && same_math trace_dp plain_dp
check trace_dp "$TMP/out/tdp.json" --ranks 2 --layers 4 --names forward,backward,grad_all_reduce,loss_tile,optimizer_step \
  --bytes grad_all_reduce

# A small buffer: written out between steps when half full (a trace_flush span, every span of
# every step kept, 3 steps); a tiny one drops spans, says so, and still writes a valid file.
UPIPE_TRACE_EVENTS=1024 run flush_2 2 $STACK --fsdp --upipe-heads 2 --steps 3 --trace "$TMP/out/tf.json"
run full_2 2 $STACK --fsdp --upipe-heads 2 --steps 3 --trace "$TMP/out/tfull.json"
$CHECK "$TMP/out/tf.json" --ranks 2 --layers 4 --io --names $COMMON,trace_flush --counts >"$TMP/tf.counts" 2>&1 \
  && $CHECK "$TMP/out/tfull.json" --ranks 2 --layers 4 --io --names $COMMON --counts >"$TMP/tfull.counts" 2>&1 \
  && diff <(grep -v -e trace_flush -e 'trace check' "$TMP/tf.counts") <(grep -v -e trace_flush -e 'trace check' "$TMP/tfull.counts") >/dev/null \
  && ok "flush between steps: $(grep -vc "trace check" "$TMP/tfull.counts") span names, the same counts as with the full buffer" \
  || { bad "flush between steps"; cat "$TMP/tf.counts" "$TMP/tfull.counts"; }
UPIPE_TRACE_EVENTS=64 run drop_2 2 $STACK --fsdp --upipe-heads 2 --trace "$TMP/out/td.json"
check drop_2 "$TMP/out/td.json" --ranks 2 --layers 0 --dropped
grep -q "warning: --trace: [0-9]* spans dropped" "$TMP/drop_2.out" && ok "drops reported: $(cat "$TMP/drop_2.out")" \
  || { bad "no drop warning"; cat "$TMP/drop_2.out"; }

# The trace buffers are in the plan (workspace), which still equals the measured peak.
mpirun_n 2 "$UPIPE" train $BASE $STACK --fsdp --upipe-heads 2 --trace "$TMP/out/tp.json" --dry-run \
  --mem-report "$TMP/plan.json" >/dev/null 2>&1 || bad "dry run failed"
mpirun_n 2 "$UPIPE" train $BASE $STACK --fsdp --upipe-heads 2 --trace "$TMP/out/tp.json" \
  --mem-report "$TMP/meas.json" >/dev/null 2>&1 || bad "run failed"
mpirun_n 2 "$UPIPE" train $BASE $STACK --fsdp --upipe-heads 2 --dry-run --mem-report "$TMP/plan0.json" \
  >/dev/null 2>&1 || bad "dry run failed"
p=$(buffer_peak "$TMP/plan.json"); m=$(buffer_peak "$TMP/meas.json"); p0=$(buffer_peak "$TMP/plan0.json")
want=$((16 * 1024 * 1024 + 512 * 1024))
if [ -n "$p" ] && [ "$p" = "$m" ] && [ $((p - p0)) -eq "$want" ]; then
  ok "plan with --trace $p = measured, $((p - p0)) bytes more than without"
else
  bad "plan with --trace $p, measured $m, without $p0 (expected $want more)"
fi

# upipe eval --trace: forward only, 2 ranks.
if mpirun_n 2 "$UPIPE" eval --config "$CFG" --init "$TMP/plain_2.st" --data "$TMP/d.bin" --seq-len 256 \
    --windows 2 --threads 1 --quiet --upipe-heads 2 --tile-loss 64 --trace "$TMP/out/te.json" >"$TMP/eval.out" 2>&1; then
  check eval "$TMP/out/te.json" --ranks 2 --layers 4 --names forward,stage_forward,flash_forward,a2a_seq_to_head,loss_tile
else
  bad "eval --trace failed"; cat "$TMP/eval.out"
fi

# Bad paths: refused before the first step with one line and status 1.
expect_refusal() { # name phrase args...
  local name=$1 phrase=$2 rc=0
  shift 2
  mpirun_n 2 "$UPIPE" train $BASE "$@" >"$TMP/$name.out" 2>&1 || rc=$?
  if [ "$rc" -eq 1 ] && [ "$(wc -l <"$TMP/$name.out")" -eq 1 ] && grep -q -- "$phrase" "$TMP/$name.out"; then
    ok "$name: $(cat "$TMP/$name.out")"
  else
    bad "$name: rc $rc"; cat "$TMP/$name.out"
  fi
}
expect_refusal no_folder "--trace $TMP/nope/t.json: the folder $TMP/nope does not exist" --trace "$TMP/nope/t.json"
expect_refusal a_folder "--trace $TMP/out is a folder" --trace "$TMP/out"
mkdir -p "$TMP/ro"; chmod 500 "$TMP/ro"
if [ "$(id -u)" -ne 0 ]; then # root writes anywhere
  expect_refusal read_only "--trace $TMP/ro/t.json: the folder $TMP/ro is not writable" --trace "$TMP/ro/t.json"
fi
# A run killed mid-way leaves the trace so far (a JSON array the viewers load without its closing
# bracket; lifecycle.sh checks its spans) and nothing else in the trace's folder.
mkdir -p "$TMP/dead"
"$UPIPE" train $BASE --steps 100000 --trace "$TMP/dead/t.json" --log "$TMP/dead.jsonl" >/dev/null 2>&1 &
PID=$!
while kill -0 "$PID" 2>/dev/null && [ ! -s "$TMP/dead.jsonl" ]; do sleep 0.05; done # however slow
kill -STOP "$PID"; kill -KILL "$PID"; wait "$PID" 2>/dev/null # stopped first: whole events (lifecycle.sh)
[ -s "$TMP/dead.jsonl" ] && [ "$(ls -A "$TMP/dead")" = t.json ] \
  && python3 -c 'import json, sys; json.loads(open(sys.argv[1]).read() + "]")' "$TMP/dead/t.json" \
  && ok "a killed run leaves the trace so far, loadable, and nothing else" \
  || bad "killed run: log $(wc -l <"$TMP/dead.jsonl" 2>/dev/null) lines, left: $(ls -A "$TMP/dead")"
left=$(ls -A "$TMP/out" "$TMP/store" | grep -c -e '\.tmp\.' -e '\.spool\.' -e upipe-offload)
[ "$left" -eq 0 ] && ok "no temporary file left behind" || bad "temporary files left: $(ls -A "$TMP/out" "$TMP/store")"
finish
