#!/usr/bin/env bash
# Checkpoints and resume: a run stopped and resumed ends with the same weights, byte for byte, as
# one that ran straight through (1 rank; 2 ranks --cp 2; 4 ranks with FSDP, UPipe, offload,
# tiles and grad-accum); a checkpoint resumes on another rank layout of the same global batch;
# SIGKILL at random moments never leaves a half checkpoint that is taken for a whole one;
# SIGTERM writes one and exits; a full disk stops with a message and leaves the previous one
# intact; export to an HF folder (single file and shards, F32 and BF16) loads back with --init;
# bad checkpoints and mismatched runs are refused with one line: a flipped bit in a data file
# (CRC-32C in state.json, checked on resume on any layout, by export and eval), an edited or
# malformed state.json, other --data, --doc-sep or --loss-mask (unless --data-changed).
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
# the job is stopped while it is sent, so it lands before the last step on any host or load;
# a second SIGTERM follows, as SLURM's preemption sends it (tests/slurm), and changes nothing
while kill -0 "$pid" 2>/dev/null && [ ! -s "$TMP/term.jsonl" ]; do sleep 0.02; done
kill -STOP "$pid"; kill -TERM "$pid"; kill -CONT "$pid"; sleep 0.01; kill -TERM "$pid" 2>/dev/null
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

# ---- integrity: a flipped bit anywhere in a data file is refused on resume and by export ----
# The base: 1 rank stopped at step 4 of 6; each case works on a copy of it.
train v_stop 1 $G --steps 6 --ckpt-dir "$TMP/ck_v" --stop-at 4
V=step-00000004
copy() { rm -rf "$TMP/$1"; cp -r "$TMP/ck_v" "$TMP/$1"; }
flip() { # file: one exponent bit of the float in the middle of the file (a finite value stays finite)
  python3 - "$1" <<'PY'
import sys
f = open(sys.argv[1], "r+b"); f.seek(0, 2); at = f.tell() // 8 * 4 + 3
f.seek(at); b = f.read(1)[0]; f.seek(at); f.write(bytes([b ^ 0x04])); f.close()
PY
}
crc_of() { # file: its CRC-32C (Castagnoli), computed here independently of upipe
  python3 - "$1" <<'PY'
import sys
t = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    t.append(c)
c = 0xFFFFFFFF
for b in open(sys.argv[1], "rb").read(): c = t[(c ^ b) & 0xFF] ^ (c >> 8)
print("%08x" % (c ^ 0xFFFFFFFF))
PY
}
for f in model optimizer; do
  want=$(crc_of "$TMP/ck_v/$V/$f.safetensors")
  tr -d ' \n' <"$TMP/ck_v/$V/state.json" | grep -q "\"$f.safetensors\":{\"bytes\":[0-9]*,\"crc32c\":\"$want\"}" \
    && ok "state.json records the CRC-32C of $f.safetensors: $want" || bad "$f.safetensors: crc32c $want not in state.json"
done
copy ck_flip_o; flip "$TMP/ck_flip_o/$V/optimizer.safetensors"
cp -r "$TMP/ck_flip_o" "$TMP/ck_flip_o2"
refuse flip_opt_fsdp "optimizer.safetensors does not match its checksum" 2 $G --steps 6 --fsdp \
  --ckpt-dir "$TMP/ck_flip_o" --resume
refuse flip_opt_1 "optimizer.safetensors does not match its checksum" 1 $G --steps 6 \
  --ckpt-dir "$TMP/ck_flip_o2" --resume
copy ck_flip_m; flip "$TMP/ck_flip_m/$V/model.safetensors"
refuse flip_model_2 "model.safetensors does not match its checksum" 2 $G --steps 6 --cp 2 \
  --ckpt-dir "$TMP/ck_flip_m" --resume
rc=0; "$UPIPE" export --ckpt "$TMP/ck_flip_m" --output "$TMP/hf_flip" >"$TMP/exp_flip.out" 2>&1 || rc=$?
if [ "$rc" = 1 ] && grep -q "upipe: error: .*model.safetensors: does not match its checksum" "$TMP/exp_flip.out"; then
  ok "export of a flipped bit: $(cut -c1-160 "$TMP/exp_flip.out")"
else bad "export of a flipped bit: exit $rc"; cat "$TMP/exp_flip.out"; fi
rc=0; mpirun_n 2 "$UPIPE" eval --ckpt "$TMP/ck_flip_m" --data "$TMP/d.bin" --seq-len 80 >"$TMP/eval_flip.out" 2>&1 || rc=$?
if [ "$rc" = 1 ] && [ "$(grep -c "upipe: error: .*model.safetensors: does not match its checksum" "$TMP/eval_flip.out")" = 1 ]; then
  ok "eval of a flipped bit: $(cut -c1-100 "$TMP/eval_flip.out")"
else bad "eval of a flipped bit: exit $rc"; cat "$TMP/eval_flip.out"; fi
copy ck_vf # written with FSDP (the ranks' CRCs combined), read without and with
train v_fsdp 2 $G --steps 6 --fsdp --ckpt-dir "$TMP/ck_vf" --resume --stop-at 5
train v_res 2 $G --steps 6 --cp 2 --ckpt-dir "$TMP/ck_vf" --resume --save "$TMP/v_res.st"
if "$ST_COMPARE" "$TMP/v_res.st" "$TMP/r1_full.st" --rtol 1e-5 >"$TMP/v_res.cmp" 2>&1; then
  ok "sound checkpoints verify on FSDP and --cp layouts: $(tail -n1 "$TMP/v_res.cmp")"
else bad "resume of sound checkpoints"; cat "$TMP/v_res.cmp"; fi

# ---- state.json: every field checked, the step against the folder's name ----
edit() { # case sed-expression: a copy of the base whose state.json is edited
  copy "$1"; sed -i "$2" "$TMP/$1/$V/state.json"
  grep -q . "$TMP/$1/$V/state.json" || bad "$1: empty state.json"
  # an edit that matched nothing would test the unedited checkpoint (step 4.0 would pass vacuously)
  cmp -s "$TMP/$1/$V/state.json" "$TMP/ck_v/$V/state.json" && bad "$1: the edit '$2' changed nothing"
}
edit ck_s6 's/"step": 4,/"step": 6,/'
refuse state_step_6 "differs from the folder's step-00000004" 1 $G --steps 6 --ckpt-dir "$TMP/ck_s6" --resume
edit ck_sneg 's/"step": 4,/"step": -3,/'
refuse state_step_neg '"step" must be >= 0, got -3' 1 $G --steps 6 --ckpt-dir "$TMP/ck_sneg" --resume
edit ck_sreal 's/"step": 4,/"step": 4.5,/'
refuse state_step_real '"step" must be an integer, got 4.5' 1 $G --steps 6 --ckpt-dir "$TMP/ck_sreal" --resume
edit ck_slr 's/"lr": \([0-9.e-]*\),/"lr": "\1",/'
refuse state_lr_string '"lr" must be a number, got a string' 1 $G --steps 6 --ckpt-dir "$TMP/ck_slr" --resume
edit ck_sgb 's/"global_batch": \([0-9]*\),/"global_batch": 7777777777777777772,/'
refuse state_batch_overflow '"next_sequence" [0-9]* is not step 4 x global_batch 7777777777777777772' 1 $G --steps 6 --ckpt-dir "$TMP/ck_sgb" --resume
edit ck_sver 's/"version": 2,/"version": 1,/'
refuse state_version "checkpoint version 1 .*start a new --ckpt-dir" 1 $G --steps 6 --ckpt-dir "$TMP/ck_sver" --resume
edit ck_sfmt '/"format"/d'
refuse state_format 'no "format": "upipe-checkpoint"' 1 $G --steps 6 --ckpt-dir "$TMP/ck_sfmt" --resume
edit ck_s40 's/"step": 4,/"step": 4.0,/'
train state_step_40 1 $G --steps 6 --ckpt-dir "$TMP/ck_s40" --resume --save "$TMP/s40.st"
same "\"step\": 4.0 resumes as 4" "$TMP/r1_full.st" "$TMP/s40.st"

# ---- the data: other --data, --doc-sep or --loss-mask is refused unless --data-changed ----
# d2.bin: the same size and token count as d.bin, other tokens (the sampled hash tells them apart)
"$UPIPE" data recall --output "$TMP/d2.bin" --tokens 40000 --distance 32 >/dev/null || bad "data recall d2"
copy ck_d2
refuse other_data "it was trained on --data $TMP/d.bin" 1 --config "$GQA/config.json" --data "$TMP/d2.bin" \
  --seq-len 80 --lr 1e-3 --steps 6 --ckpt-dir "$TMP/ck_d2" --resume
train data_changed 1 --config "$GQA/config.json" --data "$TMP/d2.bin" --seq-len 80 --lr 1e-3 --steps 6 \
  --ckpt-dir "$TMP/ck_d2" --resume --data-changed
grep -q "^upipe: note: --data-changed: it was trained on --data" "$TMP/data_changed.out" \
  && ok "--data-changed: $(head -n1 "$TMP/data_changed.out" | cut -c1-140)" || { bad "--data-changed: no note"; cat "$TMP/data_changed.out"; }
mkdir -p "$TMP/moved" && cp "$TMP/d.bin" "$TMP/moved/d.bin"
copy ck_mv
train data_moved 1 --config "$GQA/config.json" --data "$TMP/moved/d.bin" --seq-len 80 --lr 1e-3 --steps 6 \
  --ckpt-dir "$TMP/ck_mv" --resume --save "$TMP/mv.st"
grep -q "is the data of the checkpoint .* at a new path" "$TMP/data_moved.out" \
  && ok "same data at a new path: $(head -n1 "$TMP/data_moved.out" | cut -c1-140)" || { bad "data moved: no note"; cat "$TMP/data_moved.out"; }
same "same data at a new path resumes exactly" "$TMP/r1_full.st" "$TMP/mv.st"
DD=$FIX/golden_docs
DOCS="--config $DD/config.json --data $DD/tokens.bin --init $DD/weights.safetensors --seq-len 300 --lr 1e-3 --steps 3"
train docs_stop 1 $DOCS --doc-sep 256 --loss-mask "$DD/mask.bin" --ckpt-dir "$TMP/ck_docs" --stop-at 2
refuse no_loss_mask "this run has no --loss-mask" 1 $DOCS --doc-sep 256 --ckpt-dir "$TMP/ck_docs" --resume
refuse other_doc_sep "it was trained with --doc-sep 256, this run has --doc-sep 255" 1 $DOCS --doc-sep 255 \
  --loss-mask "$DD/mask.bin" --ckpt-dir "$TMP/ck_docs" --resume
refuse no_doc_sep "it was trained with --doc-sep 256, this run has none" 1 $DOCS \
  --loss-mask "$DD/mask.bin" --ckpt-dir "$TMP/ck_docs" --resume
refuse data_changed_alone "--data-changed goes with --resume" 1 $DOCS --data-changed
finish
