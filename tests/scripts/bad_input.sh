#!/usr/bin/env bash
# Bad input: each case exits with status 1 (not a crash: no signal, no abort), within seconds,
# with one "upipe: error:" line naming the problem, and leaves no output file behind.
source "$(dirname "$0")/lib.sh"
CFG=$SRC/configs/tiny.json
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 3000 --distance 64 >/dev/null || bad "data recall"

expect_error() { # name phrase -- command...
  local name=$1 phrase=$2
  shift 3
  local rc=0
  timeout 60 "$@" >"$TMP/out" 2>&1 || rc=$?
  if [ "$rc" -ne 1 ]; then
    bad "$name: exit status $rc, expected 1"; cat "$TMP/out"; return
  fi
  if ! grep -q "upipe: error" "$TMP/out"; then bad "$name: no 'upipe: error' line"; cat "$TMP/out"; return; fi
  if ! grep -qi -- "$phrase" "$TMP/out"; then bad "$name: message lacks '$phrase'"; cat "$TMP/out"; return; fi
  ok "$name: $(grep 'upipe: error' "$TMP/out" | head -n1)"
}

TRAIN="$UPIPE train --threads 1 --quiet"

expect_error missing_config "no such file" -- $TRAIN --config "$TMP/nope.json" --data "$TMP/d.bin"
expect_error missing_data "no such file" -- $TRAIN --config "$CFG" --data "$TMP/nope.bin"
expect_error no_config_flag "--config" -- $TRAIN --data "$TMP/d.bin"
expect_error unknown_flag "unknown flag" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --frobnicate 3
expect_error bad_number "--seq-len" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 12x
expect_error seq_longer_than_data "--seq-len" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 5000
expect_error recall_keys_too_few "--keys 10 is out of range" -- \
  "$UPIPE" data recall --output "$TMP/k.bin" --tokens 3000 --distance 64 --keys 10
[ -e "$TMP/k.bin" ] && bad "refused recall corpus was written"
# A flag where a value belongs ("--offload --tile-mlp" once took --tile-mlp as the directory).
expect_error flag_as_value "--offload needs a value but is followed by the flag --tile-mlp" -- \
  $TRAIN --config "$CFG" --data "$TMP/d.bin" --offload --tile-mlp --seq-len 64
expect_error eval_flag_as_value "--init needs a value but is followed by the flag --data" -- \
  "$UPIPE" eval --threads 1 --config "$CFG" --init --data "$TMP/d.bin" --seq-len 64
# --dtype: f32 or bf16; bf16 has no kernels yet, so only its plan (--dry-run) runs.
expect_error dtype_unknown "--dtype expects f32 or bf16, got 'fp8'" -- \
  $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --dtype fp8
expect_error eval_dtype_unknown "--dtype expects f32 or bf16, got 'fp8'" -- \
  "$UPIPE" eval --threads 1 --config "$CFG" --init /dev/null --data "$TMP/d.bin" --seq-len 64 --dtype fp8
expect_error save_dtype_unknown "--save-dtype expects f32 or bf16, got 'bf8'" -- \
  $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --save-dtype bf8
# UPIPE_KERNEL names a kernel path; an unknown one is refused, by train and by --version.
expect_error kernel_unknown "UPIPE_KERNEL: unknown kernel path 'avx9000': use " -- \
  env UPIPE_KERNEL=avx9000 $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --steps 1
expect_error kernel_unknown_version "UPIPE_KERNEL: unknown kernel path 'avx9000'" -- \
  env UPIPE_KERNEL=avx9000 "$UPIPE" --version
# ... before --version prints anything: the refusal is a line of its own, nothing on stdout.
if out=$(UPIPE_KERNEL=avx9000 "$UPIPE" --version 2>/dev/null) || [ -n "$out" ]; then
  bad "kernel_unknown_version: printed '$out' before the refusal"
else
  ok "kernel_unknown_version: nothing on stdout before the refusal"
fi

sed 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' "$CFG" >"$TMP/heads.json"
expect_error heads_do_not_divide "num_key_value_heads" -- $TRAIN --config "$TMP/heads.json" --data "$TMP/d.bin"
printf '{"hidden_size": 128,' >"$TMP/broken.json"
expect_error invalid_json "json" -- $TRAIN --config "$TMP/broken.json" --data "$TMP/d.bin"

# Safetensors: make a valid file, then truncate and corrupt it.
$TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --steps 1 --lr 0 --save "$TMP/w.safetensors" >/dev/null 2>&1 \
  || bad "could not write weights"
size=$(stat -c %s "$TMP/w.safetensors")
head -c $((size / 2)) "$TMP/w.safetensors" >"$TMP/trunc.safetensors"
expect_error truncated_safetensors "safetensors" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --init "$TMP/trunc.safetensors"
head -c 7 "$TMP/w.safetensors" >"$TMP/tiny.safetensors"
expect_error tiny_safetensors "safetensors" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --init "$TMP/tiny.safetensors"
{ printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a": [1, 2, 3'; cat /dev/zero | head -c 100; } >"$TMP/garbage.safetensors"
expect_error malformed_header "safetensors" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --init "$TMP/garbage.safetensors"
sed 's/"hidden_size": 128/"hidden_size": 96/; s/"head_dim": 32/"head_dim": 24/' "$CFG" >"$TMP/other.json"
expect_error wrong_shapes "shape" -- $TRAIN --config "$TMP/other.json" --data "$TMP/d.bin" --seq-len 64 --init "$TMP/w.safetensors"
# A NaN in the embedding row of token 200, which the recall data never uses (its tokens are
# below 123), so only the load can see it: the F32 value of row 200, column 5 is patched in place.
# Data offsets are relative to the data section, which starts after the 8-byte length and the
# JSON header.
hlen=$(od -An -t u8 -N 8 "$TMP/w.safetensors" | tr -d ' ')
emb=$(head -c $((8 + hlen)) "$TMP/w.safetensors" | grep -o '"model.embed_tokens.weight":{[^}]*}' \
  | sed -n 's/.*"data_offsets":\[\([0-9]*\),.*/\1/p')
cp "$TMP/w.safetensors" "$TMP/nan.safetensors"
printf '\x00\x00\xc0\x7f' | dd of="$TMP/nan.safetensors" bs=1 seek=$((8 + hlen + emb + (200 * 128 + 5) * 4)) \
  conv=notrunc status=none
expect_error nan_weights "model.embed_tokens.weight at row 200, column 5 is nan: the file holds NaN/Inf" -- \
  $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --init "$TMP/nan.safetensors"
# A 4-layer file for a 2-layer config: every tensor the config needs is there, the rest is not used.
sed 's/"num_hidden_layers": 4/"num_hidden_layers": 2/' "$CFG" >"$TMP/l2.json"
expect_error unexpected_tensor "tensor model.layers.2.input_layernorm.weight is not used by the config" -- \
  $TRAIN --config "$TMP/l2.json" --data "$TMP/d.bin" --seq-len 64 --init "$TMP/w.safetensors"

# Non-finite steps: every weight times 1e30 is finite in the file, but the first forward overflows
# (q and k of order 1e58), so every step's loss and gradient norm are NaN/Inf.
"$BUILD/tests/st_sum" "$TMP/huge.safetensors" 1e30 "$TMP/w.safetensors" || bad "st_sum"
HUGE="--config $CFG --data $TMP/d.bin --seq-len 64 --init $TMP/huge.safetensors"
expect_error nonfinite_stop "step 1: loss .*first NaN/Inf gradient in model.embed_tokens.weight" -- \
  $TRAIN $HUGE --steps 8
expect_error nonfinite_skip_max "step 5: 5 steps in a row skipped (--max-skips 5)" -- \
  $TRAIN $HUGE --steps 8 --on-nonfinite skip --log "$TMP/skip.jsonl"
n=$(grep -c '"skipped": 1' "$TMP/skip.jsonl")
[ "$n" -eq 4 ] && ok "nonfinite_skip_max: 4 steps logged as skipped before the stop" || bad "skipped lines: $n"
expect_error max_skips_without_skip "--max-skips needs --on-nonfinite skip" -- $TRAIN $HUGE --max-skips 3
# skip: the run goes on (exit 0), each step logged as skipped and not applied: the saved weights
# are the loaded ones, bit for bit.
rc=0
$TRAIN $HUGE --steps 3 --on-nonfinite skip --log "$TMP/skip3.jsonl" --save "$TMP/after.safetensors" \
  >"$TMP/skip3.out" 2>&1 || rc=$?
n=$(grep -c '"skipped": 1, "skipped_total": ' "$TMP/skip3.jsonl")
if [ "$rc" -eq 0 ] && [ "$n" -eq 3 ] && cmp -s "$TMP/huge.safetensors" "$TMP/after.safetensors"; then
  ok "nonfinite_skip: 3 steps skipped, exit 0, weights unchanged"
else
  bad "nonfinite_skip: rc $rc, $n skipped lines"; cat "$TMP/skip3.out"
fi

# More threads than cores: a warning with the better setting, and the run goes on (exit 0).
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) # nproc obeys OMP_NUM_THREADS
rc=0
"$UPIPE" train --quiet --threads $((2 * cores)) --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --steps 1 \
  >"$TMP/threads.out" 2>&1 || rc=$?
want="upipe: warning: --threads $((2 * cores)) x 1 rank on this node = $((2 * cores)) threads on $cores cores: use --threads $cores"
if [ "$rc" -eq 0 ] && grep -qF -- "$want" "$TMP/threads.out"; then
  ok "threads_oversubscribed: $(head -n1 "$TMP/threads.out")"
else
  bad "threads_oversubscribed: rc $rc, expected '$want'"; cat "$TMP/threads.out"
fi

# Token shard: truncated.
head -c 2000 "$TMP/d.bin" >"$TMP/short.bin"
expect_error truncated_shard "truncated" -- $TRAIN --config "$CFG" --data "$TMP/short.bin" --seq-len 64

# Token shard changed underneath a running job: it stops (exit 1) with one line within seconds,
# by the check before each step or, when the truncation lands in a step's reads, the SIGBUS
# handler. A SIGBUS sent from outside shows the handler's own line.
bg_train() { # name data -- starts a long run in the background; returns once it logs step 1,
  # with START_S: the seconds that took (start-up and a step, measured on this host and load)
  local t0=$SECONDS
  $TRAIN --config "$CFG" --data "$2" --seq-len 64 --steps 1000000 --lr 0 --log "$TMP/$1.jsonl" \
    >"$TMP/$1.out" 2>&1 &
  PID=$!
  while kill -0 "$PID" 2>/dev/null && [ ! -s "$TMP/$1.jsonl" ]; do sleep 0.05; done
  START_S=$((SECONDS - t0 + 1))
}
wait_exit() { # name phrase -- waits for PID to stop, then checks its status and message; the
  # stop comes at the next step's check, so 10 s plus 10 x the start measured by bg_train is ample
  local rc=0 limit=$((10 + 10 * START_S))
  for _ in $(seq $((limit * 10))); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$PID" 2>/dev/null; then kill "$PID"; wait "$PID"; bad "$1: still running"; return; fi
  wait "$PID" || rc=$?
  if [ "$rc" -eq 1 ] && grep -qE -- "$2" "$TMP/$1.out" && [ "$(wc -l <"$TMP/$1.out")" -eq 1 ]; then
    ok "$1: $(cat "$TMP/$1.out")"
  else
    bad "$1: rc $rc, expected '$2'"; cat "$TMP/$1.out"
  fi
}
cp "$TMP/d.bin" "$TMP/moving.bin"
bg_train shard_truncated "$TMP/moving.bin"
truncate -s 3000 "$TMP/moving.bin"
wait_exit shard_truncated "--data $TMP/moving.bin changed size while the job runs \(was 7024 bytes, now 3000\)|SIGBUS: a mapped input file"
bg_train sigbus "$TMP/d.bin"
kill -BUS "$PID"
wait_exit sigbus "upipe: error: SIGBUS: a mapped input file \(the --data token shard or the --loss-mask\) was truncated"

# upipe data jsonl: a bad line is refused with its file and line number; nothing is written.
# (A loss mask of the wrong length for `train --loss-mask` belongs here once that flag exists.)
printf '{"text": "fine"}\n\n{"prompt": "p", "reply": "r"}\n' >"$TMP/bad.jsonl"
expect_error jsonl_bad_line "bad.jsonl:3: \"prompt\" without \"response\"" -- "$UPIPE" data jsonl --input "$TMP/bad.jsonl" \
  --output "$TMP/j.bin" --doc-sep 256 --mask-output "$TMP/j.mask"
printf '{"text": "fine"}\n{"text": "cut' >"$TMP/cut.jsonl"
expect_error jsonl_invalid_json "cut.jsonl:2: invalid JSON" -- "$UPIPE" data jsonl --input "$TMP/cut.jsonl" --output "$TMP/j.bin" --doc-sep 256
expect_error jsonl_no_doc_sep "--doc-sep is required" -- "$UPIPE" data jsonl --input "$TMP/bad.jsonl" --output "$TMP/j.bin"
expect_error doc_sep_negative "--doc-sep" -- "$UPIPE" data text --input "$TMP/bad.jsonl" --output "$TMP/j.bin" --doc-sep -5
if [ -e "$TMP/j.bin" ] || [ -e "$TMP/j.mask" ]; then bad "refused data left output: $(ls "$TMP")"; else ok "refused data leaves nothing"; fi

# No half-written output: a save into a missing directory fails cleanly; a save that fails in the
# middle of writing (a 64 MB model under a 10 MB file-size limit; MPI's own files need less)
# leaves neither the file nor its temporary behind.
expect_error save_bad_dir "$TMP/nodir" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --steps 1 --save "$TMP/nodir/w.safetensors"
mkdir -p "$TMP/outdir"
rc=0
( ulimit -f 10000; trap '' XFSZ; $TRAIN --config "$SRC/configs/bench.json" --data "$TMP/d.bin" --seq-len 32 --steps 1 \
    --save "$TMP/outdir/w.safetensors" ) >"$TMP/save.out" 2>&1 || rc=$?
if [ "$rc" -eq 1 ] && grep -q "upipe: error" "$TMP/save.out" && [ -z "$(ls -A "$TMP/outdir")" ]; then
  ok "failed save leaves nothing: $(grep 'upipe: error' "$TMP/save.out")"
else
  bad "failed save: rc $rc, left: $(ls "$TMP/outdir")"; cat "$TMP/save.out"
fi


# `upipe data`: an output that is one of the inputs (or the other output) is refused before
# anything is written: the source stays as it was. Same file by inode (a symbolic link, ./name)
# or, for an output that does not exist yet, by its resolved path.
printf 'the source text\n' >"$TMP/src.txt"; cp "$TMP/src.txt" "$TMP/src.orig"; ln -s src.txt "$TMP/src.link"
printf '{"text": "fine"}\n' >"$TMP/src.jsonl"; cp "$TMP/src.jsonl" "$TMP/src.jsonl.orig"
expect_error data_output_is_input "--output $TMP/src.txt is the input $TMP/src.txt" -- \
  "$UPIPE" data text --input "$TMP/src.txt" --output "$TMP/src.txt"
expect_error data_output_links_input "--output $TMP/src.link is the input" -- \
  "$UPIPE" data text --input "$TMP/d.bin" "$TMP/src.txt" --output "$TMP/src.link"
expect_error jsonl_output_is_input "--output $TMP/./src.jsonl is the input" -- \
  "$UPIPE" data jsonl --input "$TMP/src.jsonl" --output "$TMP/./src.jsonl" --doc-sep 256
expect_error jsonl_mask_is_input "--mask-output $TMP/src.jsonl is the input" -- \
  "$UPIPE" data jsonl --input "$TMP/src.jsonl" --output "$TMP/j2.bin" --doc-sep 256 --mask-output "$TMP/src.jsonl"
expect_error recall_mask_is_output "--mask-output $TMP/../${TMP##*/}/r2.bin and --output $TMP/r2.bin are the same file" -- \
  "$UPIPE" data recall --output "$TMP/r2.bin" --tokens 100 --mask-output "$TMP/../${TMP##*/}/r2.bin"
if cmp -s "$TMP/src.txt" "$TMP/src.orig" && cmp -s "$TMP/src.jsonl" "$TMP/src.jsonl.orig" && [ ! -e "$TMP/j2.bin" ] \
  && [ ! -e "$TMP/r2.bin" ]; then ok "data: the inputs are intact, nothing written"; else bad "data: an input was replaced"; fi

# Warnings (one line on stderr, rank 0 only, once per run; the run goes on with status 0).
expect_warning() { # name count phrase -- command...: exactly count lines 'upipe: warning: ...phrase'
  local name=$1 want=$2 phrase=$3 rc=0 n
  shift 4
  timeout 120 "$@" >"$TMP/warn.out" 2>&1 || rc=$?
  n=$(grep -c -- "^upipe: warning: .*$phrase" "$TMP/warn.out")
  if [ "$rc" -eq 0 ] && [ "$n" -eq "$want" ]; then
    ok "$name: $want warning(s) $(grep -m1 -- "$phrase" "$TMP/warn.out")"
  else bad "$name: exit $rc, $n warning(s) '$phrase', expected $want"; cat "$TMP/warn.out"; fi
}
# A loss mask of zeros over a step's tokens: loss 0, norm 0, only weight decay moves the weights.
# The mask's header from `data recall --mask-output`; mask h0 is zero over window 0's targets
# (tokens 1..64), one elsewhere. One rank: step 1 reads window 0 alone and counts nothing (one
# warning for three steps); two replicas: step 1 reads windows 0 and 1, and the global count is
# not zero, so rank 0, whose own window counts nothing, stays silent.
"$UPIPE" data recall --output "$TMP/m.bin" --tokens 3000 --distance 64 --mask-output "$TMP/m.mask" >/dev/null
{ head -c 1024 "$TMP/m.mask"; head -c 3000 /dev/zero; } >"$TMP/zero.mask"
{ head -c 1024 "$TMP/m.mask"; head -c 65 /dev/zero; head -c 2935 /dev/zero | tr '\0' '\1'; } >"$TMP/h0.mask"
MASKED="--config $CFG --data $TMP/m.bin --seq-len 64 --steps 3"
expect_warning zero_mask 1 "step 1 counts no target (the loss mask is zero over its tokens): the step only applies weight decay; check --loss-mask" -- \
  $TRAIN $MASKED --loss-mask "$TMP/zero.mask"
expect_warning zero_mask_window 1 "step 1 counts no target" -- $TRAIN $MASKED --loss-mask "$TMP/h0.mask"
expect_warning zero_mask_one_replica 0 "counts no target" -- $MPIEXEC -n 2 $TRAIN $MASKED --cp 1 --loss-mask "$TMP/h0.mask"
# --seq-len beyond max_position_embeddings, with the rope scaling in force; a --doc-sep that the
# shard never holds (the recall corpus has no token 250). Two ranks: rank 0 alone warns.
sed 's/"max_position_embeddings": 4096/"max_position_embeddings": 32/' "$CFG" >"$TMP/pos32.json"
expect_warning seq_beyond_positions 1 "--seq-len 64 is above max_position_embeddings 32 of the config (rope_scaling: none): positions beyond it were never trained" -- \
  $MPIEXEC -n 2 $TRAIN --config "$TMP/pos32.json" --data "$TMP/d.bin" --seq-len 64 --steps 1
sed 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}/' \
  "$TMP/pos32.json" >"$TMP/pos32l3.json"
expect_warning seq_beyond_positions_llama3 1 "(rope_scaling: llama3 factor 8, original_max_position_embeddings 16)" -- \
  $TRAIN --config "$TMP/pos32l3.json" --data "$TMP/d.bin" --seq-len 64 --steps 1
expect_warning seq_within_positions 0 "max_position_embeddings" -- $TRAIN --config "$TMP/pos32.json" --data "$TMP/d.bin" --seq-len 32 --steps 1
expect_warning doc_sep_absent 1 "--doc-sep 250 never occurs in $TMP/d.bin" -- \
  $MPIEXEC -n 2 $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --steps 1 --doc-sep 250
expect_warning doc_sep_present 0 "--doc-sep" -- $TRAIN --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --steps 1 --doc-sep 59

finish
