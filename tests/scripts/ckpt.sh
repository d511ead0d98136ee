#!/usr/bin/env bash
# Checkpoints and resume: a run stopped and resumed ends with the same weights, byte for byte, as
# one that ran straight through (1 rank; 2 ranks --cp 2; 4 ranks with FSDP, UPipe, offload,
# tiles and grad-accum); a checkpoint resumes on another rank layout of the same global batch;
# SIGKILL at random moments never leaves a half checkpoint that is taken for a whole one;
# SIGTERM writes one and exits; a full disk stops with a message and leaves the previous one
# intact; export to an HF folder (single file and shards, F32 and BF16) loads back with --init;
# bad checkpoints and mismatched runs are refused with one line.
source "$(dirname "$0")/lib.sh"
ST_COMPARE=$BUILD/tests/st_compare
GQA=$FIX/golden_gqa
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 40000 --distance 64 >/dev/null || bad "data recall"
G="--config $GQA/config.json --data $TMP/d.bin --init $GQA/weights.safetensors --seq-len 80 --lr 1e-3"

train() { # name ranks args...   (exit status kept in $RC)
  local name=$1 n=$2
  shift 2
  RC=0
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 "$@" >"$TMP/$name.out" 2>&1 || RC=$?
  if [ "$RC" -ne 0 ]; then bad "$name: exit status $RC"; cat "$TMP/$name.out"; fi
}
same() { # name a b: byte-identical files
  if cmp -s "$2" "$3"; then ok "$1: identical"; else bad "$1: files differ"; fi
}

# ---- exact resume: --steps 6 straight vs --stop-at 3 then --resume ----
exact() { # name ranks args...
  local name=$1 n=$2
  shift 2
  train ${name}_full $n $G --steps 6 "$@" --save "$TMP/${name}_full.st"
  train ${name}_stop $n $G --steps 6 "$@" --ckpt-dir "$TMP/ck_$name" --stop-at 3
  grep -q "stopped at --stop-at: checkpoint .*step-00000003" "$TMP/${name}_stop.out" \
    || bad "$name: no stop message"
  train ${name}_res $n $G --steps 6 "$@" --ckpt-dir "$TMP/ck_$name" --resume --save "$TMP/${name}_res.st"
  same "resume $name" "$TMP/${name}_full.st" "$TMP/${name}_res.st"
}
exact r1 1
exact cp2 2 --cp 2
exact stack4 4 --fsdp --cp 2 --upipe-heads 2 --offload "$TMP" --tile-mlp --tile-loss --grad-accum 2
[ -d "$TMP/ck_r1/step-00000006" ] && [ -d "$TMP/ck_r1/step-00000003" ] && ok "end-of-run checkpoint kept beside the stop one" \
  || bad "checkpoints after resume: $(ls "$TMP/ck_r1")"

# ---- another layout of the same global batch (4 sequences per step) ----
# 4 ranks (--cp 2: 2 replicas x --grad-accum 2) stop at step 3; the continuation on 4, 2 (--cp 2,
# --grad-accum 4) and 1 rank (--grad-accum 4) reads the same sequences. Only the order in which
# the 4 sequences' gradients are summed changes (an all-reduce over replicas against micro-batch
# accumulation): fp32 reassociation, measured ~5e-8 of a tensor's scale after three AdamW steps.
# The same comparison against the weights at step 3 (three steps of training apart) must fail,
# so 1e-5 tells a right continuation from a wrong data position or a lost optimizer state.
train lay_stop 4 $G --steps 6 --cp 2 --grad-accum 2 --ckpt-dir "$TMP/ck_lay" --stop-at 3
cp -r "$TMP/ck_lay" "$TMP/ck_lay2"
cp -r "$TMP/ck_lay" "$TMP/ck_lay1"
train lay_4 4 $G --steps 6 --cp 2 --grad-accum 2 --ckpt-dir "$TMP/ck_lay" --resume --save "$TMP/lay4.st"
train lay_2 2 $G --steps 6 --cp 2 --grad-accum 4 --ckpt-dir "$TMP/ck_lay2" --resume --save "$TMP/lay2.st"
train lay_1 1 $G --steps 6 --grad-accum 4 --ckpt-dir "$TMP/ck_lay1" --resume --save "$TMP/lay1.st"
for n in 2 1; do
  if "$ST_COMPARE" "$TMP/lay$n.st" "$TMP/lay4.st" --rtol 1e-5 >"$TMP/lay$n.cmp" 2>&1; then
    ok "resume on $n rank(s): $(tail -n1 "$TMP/lay$n.cmp")"
  else bad "resume on $n rank(s)"; cat "$TMP/lay$n.cmp"; fi
done
if "$ST_COMPARE" "$TMP/ck_lay1/step-00000003/model.safetensors" "$TMP/lay4.st" --rtol 1e-5 >/dev/null 2>&1; then
  bad "the comparison cannot tell step 3 from step 6"
else ok "step 3 and step 6 weights differ beyond the tolerance"; fi

# ---- SIGKILL at random moments, again and again, until the run finishes ----
K="--config $SRC/configs/tiny.json --data $TMP/d.bin --seq-len 512 --steps 40 --lr 1e-3 --threads 1 --quiet"
"$UPIPE" train $K --save "$TMP/kill_full.st" >/dev/null 2>&1 || bad "kill: straight run"
kills=0 finished=0
: >"$TMP/kill.jsonl"
for attempt in $(seq 1 80); do
  before=$(wc -l <"$TMP/kill.jsonl")
  "$UPIPE" train $K --ckpt-dir "$TMP/ck_kill" --ckpt-every 1 --resume --save "$TMP/kill_res.st" \
    --log "$TMP/kill.jsonl" >"$TMP/kill.out" 2>&1 &
  pid=$!
  # once this attempt has made progress (a logged step: its checkpoint is complete by then, so
  # the test finishes however slow the machine is), kill it at a random moment
  while kill -0 "$pid" 2>/dev/null && [ "$(wc -l <"$TMP/kill.jsonl")" -le "$before" ]; do sleep 0.02; done
  sleep "0.$((RANDOM % 25))"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" && { finished=1; break; }
  # whatever is visible now must be complete: every step folder resumes (checked by the next
  # attempt) and holds all four files; temporary folders are hidden
  for d in "$TMP"/ck_kill/step-*; do
    [ -d "$d" ] || continue
    for f in model.safetensors optimizer.safetensors state.json config.json; do
      [ -s "$d/$f" ] || bad "kill: $d lacks $f"
    done
  done
done
if [ "$finished" = 1 ] && [ "$kills" -ge 3 ]; then
  ok "kill: finished after $kills SIGKILLs"
  same "kill: final weights" "$TMP/kill_full.st" "$TMP/kill_res.st"
else bad "kill: finished $finished after $kills SIGKILLs (want a finish after at least 3)"; fi

# ---- SIGTERM: checkpoint, message, exit 0; the resume ends where the straight run does ----
"$UPIPE" train $K --ckpt-dir "$TMP/ck_term" --ckpt-every 100 --log "$TMP/term.jsonl" >"$TMP/term.out" 2>&1 &
pid=$!
# the signal lands once training runs (handlers are installed by then), however slow the start;
# the job is stopped while it is sent, so it lands before the last step on any host or load
while kill -0 "$pid" 2>/dev/null && [ ! -s "$TMP/term.jsonl" ]; do sleep 0.02; done
kill -STOP "$pid"; kill -TERM "$pid"; kill -CONT "$pid"
rc=0; wait "$pid" || rc=$?
if [ "$rc" = 0 ] && grep -q "stopped on SIGTERM: checkpoint" "$TMP/term.out"; then
  ok "SIGTERM: $(grep stopped "$TMP/term.out")"
  "$UPIPE" train $K --ckpt-dir "$TMP/ck_term" --resume --save "$TMP/term_res.st" >/dev/null 2>&1
  same "SIGTERM then resume" "$TMP/kill_full.st" "$TMP/term_res.st"
else bad "SIGTERM: exit $rc"; cat "$TMP/term.out"; fi

# ---- full disk while writing (file-size limit): message, previous checkpoint intact ----
# vocab 4096: the optimizer file (~15 MB) is over a 10 MB limit that MPI's start-up stays under
sed 's/"vocab_size": 256/"vocab_size": 4096/' "$SRC/configs/tiny.json" >"$TMP/v4k.json"
F="--config $TMP/v4k.json --data $TMP/d.bin --seq-len 64 --steps 6 --lr 1e-3"
train fd_first 1 $F --ckpt-dir "$TMP/ck_full" --stop-at 2
rc=0
( ulimit -f 10000; "$UPIPE" train --quiet --threads 1 $F --ckpt-dir "$TMP/ck_full" --resume \
    --ckpt-every 1 ) >"$TMP/full.out" 2>&1 || rc=$?
if [ "$rc" = 1 ] && grep -q "not written.*intact" "$TMP/full.out"; then ok "full disk: $(grep error "$TMP/full.out" | head -n1 | cut -c1-200)"
else bad "full disk: exit $rc"; cat "$TMP/full.out"; fi
left=$(ls -A "$TMP/ck_full" | grep -vx .lock) # the lock file is no checkpoint
[ "$left" = "step-00000002" ] && ok "full disk: only step-00000002 remains" || bad "full disk left: $left"
train fd_after 1 $F --ckpt-dir "$TMP/ck_full" --resume --save "$TMP/fd.st"
train fd_full 1 $F --save "$TMP/fd_full.st"
same "full disk: resume from the intact checkpoint" "$TMP/fd_full.st" "$TMP/fd.st"

# ---- export: HF folders load back with --init ----
loss_of() { # init -> first-step loss
  "$UPIPE" train --quiet --threads 1 --config "$GQA/config.json" --data "$TMP/d.bin" --seq-len 80 \
    --steps 1 --lr 0 --init "$1" --log "$TMP/l.jsonl" >/dev/null 2>&1 || { echo fail; return; }
  json_field "$(head -n1 "$TMP/l.jsonl")" loss
}
CK=$TMP/ck_r1/step-00000006
"$UPIPE" export --ckpt "$TMP/ck_r1" --output "$TMP/hf32" >/dev/null || bad "export f32"
"$UPIPE" export --ckpt "$CK" --output "$TMP/hf32s" --max-shard-size 20KB >/dev/null || bad "export f32 sharded"
"$UPIPE" export --ckpt "$CK" --output "$TMP/hf16" --dtype bf16 >/dev/null || bad "export bf16"
"$UPIPE" export --ckpt "$CK" --output "$TMP/hf16s" --dtype bf16 --max-shard-size 20KB >/dev/null || bad "export bf16 sharded"
same "export f32 single file = the run's --save" "$TMP/r1_full.st" "$TMP/hf32/model.safetensors"
l_ck=$(loss_of "$CK/model.safetensors")
for f in hf32 hf32s hf32s/model.safetensors.index.json; do
  l=$(loss_of "$TMP/$f"); [ "$l" = "$l_ck" ] && ok "--init $f: loss $l" || bad "--init $f: loss $l vs $l_ck"
done
l16=$(loss_of "$TMP/hf16"); l16s=$(loss_of "$TMP/hf16s")
[ "$l16" = "$l16s" ] && ok "bf16 single file and shards: loss $l16" || bad "bf16: $l16 vs $l16s"
# bf16 keeps 8 significant bits: each weight moves by at most 2^-9 of itself, in random directions,
# so the loss moves far less than that (measured ~3e-4 relative); 2e-3 would pass only bf16
# rounding, a wrong or missing tensor changes the loss by O(1).
close "$l16" "$l_ck" 2e-3 && ok "bf16 loss $l16 within bf16 rounding of $l_ck" || bad "bf16 loss $l16 vs $l_ck"
n=$(ls "$TMP/hf32s"/model-*-of-*.safetensors | wc -l)
entries=$(grep -c '"model\.\|"lm_head' "$TMP/hf32s/model.safetensors.index.json")
[ "$n" -gt 1 ] && [ "$entries" = 21 ] && ok "index: $n shards, $entries tensors in weight_map" \
  || bad "index: $n shards, $entries entries"
grep -q '"torch_dtype": "bfloat16"' "$TMP/hf16/config.json" && ok "bf16 config says bfloat16" || bad "bf16 config dtype"

# ---- the plan counts the checkpoint writer's staging buffer: plan = measured peak ----
train plan_dry 2 $G --steps 2 --fsdp --ckpt-dir "$TMP/ck_plan" --dry-run --mem-report "$TMP/plan.json"
train plan_run 2 $G --steps 2 --fsdp --ckpt-dir "$TMP/ck_plan" --mem-report "$TMP/meas.json"
p=$(buffer_peak "$TMP/plan.json"); q=$(buffer_peak "$TMP/meas.json")
[ -n "$p" ] && [ "$p" = "$q" ] && ok "plan = measured peak with checkpoints: $p bytes" || bad "plan $p vs measured $q"

# ---- refusals: one line, every rank stops ----
refuse() { # name phrase ranks args...
  local name=$1 phrase=$2 n=$3
  shift 3
  local rc=0
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 "$@" >"$TMP/$name.out" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ] && grep -q "upipe: error" "$TMP/$name.out" && grep -qi -- "$phrase" "$TMP/$name.out" \
     && ! grep -q "^step" "$TMP/$name.out"; then
    ok "$name: $(grep 'upipe: error' "$TMP/$name.out" | head -n1 | cut -c1-160)"
  else bad "$name: exit $rc"; cat "$TMP/$name.out"; fi
}
refuse exists_no_resume "add --resume" 2 $G --steps 6 --ckpt-dir "$TMP/ck_r1"
refuse other_lr "--lr" 2 $G --steps 6 --lr 2e-3 --ckpt-dir "$TMP/ck_r1" --resume
refuse other_batch "sequences per step" 1 $G --steps 6 --ckpt-dir "$TMP/ck_r1" --resume --grad-accum 2
sed 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 1e-06/' "$GQA/config.json" >"$TMP/eps.json"
refuse other_config "rms_norm_eps" 2 --config "$TMP/eps.json" --data "$TMP/d.bin" --seq-len 80 --steps 6 \
  --lr 1e-3 --ckpt-dir "$TMP/ck_r1" --resume
cp -r "$TMP/ck_r1" "$TMP/ck_trunc"
f=$TMP/ck_trunc/step-00000006/optimizer.safetensors
head -c $(($(stat -c %s "$f") - 100)) "$f" >"$f.x" && mv "$f.x" "$f"
refuse truncated "optimizer.safetensors" 2 $G --steps 6 --ckpt-dir "$TMP/ck_trunc" --resume
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$GQA/config.json" >"$TMP/l3.json"
refuse missing_tensor "model.layers.2" 1 --config "$TMP/l3.json" --data "$TMP/d.bin" --seq-len 80 --init "$TMP/hf32"
refuse wrong_shape "has shape" 1 --config "$SRC/configs/tiny.json" --data "$TMP/d.bin" --seq-len 80 --init "$TMP/hf32"
rm "$TMP/hf32s/model-00002-of-"*.safetensors
refuse missing_shard "does not exist" 2 $G --steps 1 --init "$TMP/hf32s"
refuse save_dir_missing "does not exist" 2 $G --steps 1 --save "$TMP/nodir/w.st"
refuse ckpt_dir_is_file "not a folder" 1 $G --steps 1 --ckpt-dir "$TMP/d.bin"
finish
