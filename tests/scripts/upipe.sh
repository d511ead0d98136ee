#!/usr/bin/env bash
# UPipe (--upipe-heads U): every valid U gives the loss and gradients of the single-rank plain
# run, with 1, 2 and 4 ranks, for MHA, GQA and P > NKV; a loaded HF checkpoint gives the same loss
# for every U; the accounted attention peak scales with U.
source "$(dirname "$0")/lib.sh"
GQA=$FIX/golden_gqa
sed 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$SRC/configs/tiny.json" >"$TMP/mha.json"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 4000 --distance 64 >/dev/null || bad "data recall"

# Staging changes only the order of floating-point sums (per-stage projections, dk/dv summed
# over the stages of a KV chunk, weight gradients accumulated stage by stage): fp32
# reassociation, measured <= 1.1e-6 of each tensor's scale; 1e-5 as in the Ulysses test. A
# head put back in the wrong place or a KV head paired with the wrong queries is O(1).
GRAD_RTOL=1e-5
LOSS_RTOL=1e-6


# Every valid U (1, 2, 4) with 1, 2 and 4 ranks against the plain single-rank run.
sweep() { # name args...
  local name=$1
  shift
  run_case ${name}_ref 1 "$@"
  for n in 1 2 4; do
    for U in 1 2 4; do
      [ $((U % n)) -eq 0 ] || continue
      run_case ${name}_n${n}_u$U $n "$@" --upipe-heads $U && compare ${name}_n${n}_u$U ${name}_ref
    done
  done
}

# MHA: NH = NKV = 4
MHA="--config $TMP/mha.json --data $TMP/d.bin --seq-len 64 --seed 7"
sweep mha $MHA
# GQA: NH = 4, NKV = 2 (G = 2); with 4 ranks P > NKV (replicated KV heads). Loaded HF weights.
G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"
sweep gqa $G

# Attention memory scales with U (MHA, fixed T): U = P is at most 1.25 x (U/NH) of U = NH.
att() { sed -n 's/.*"attention": *\([0-9]*\).*/\1/p' "$1" | head -n1; }
for U in 2 4; do
  mpirun_n 2 "$UPIPE" train --quiet --threads 1 --config "$TMP/mha.json" --data "$TMP/d.bin" \
    --seq-len 512 --steps 1 --upipe-heads $U --mem-report "$TMP/att$U.json" >/dev/null 2>&1 || bad "U=$U run"
done
a2=$(att "$TMP/att2.json"); a4=$(att "$TMP/att4.json")
if [ -n "$a2" ] && [ -n "$a4" ] && awk -v a="$a2" -v b="$a4" 'BEGIN { exit !(a <= 1.25 * 0.5 * b) }'; then
  ok "attention peak U=2: $a2 B <= 1.25 x 2/4 x U=4: $a4 B"
else
  bad "attention peak U=2: $a2 B vs U=4: $a4 B"
fi

# Invalid U: a message on every rank's behalf, non-zero exit.
rc=0
mpirun_n 2 "$UPIPE" train --quiet --threads 1 $MHA --upipe-heads 3 >"$TMP/u3.out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] && grep -q "upipe-heads 3" "$TMP/u3.out"; then ok "U=3 refused: $(grep error "$TMP/u3.out")"
else bad "U=3 not refused (rc $rc)"; cat "$TMP/u3.out"; fi
finish
