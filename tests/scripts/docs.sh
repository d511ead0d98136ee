#!/usr/bin/env bash
# Packed documents (--doc-sep) and loss masks (--loss-mask) against the float64 PyTorch reference
# (fixture golden_docs: a window of 300 tokens that starts mid-document, then documents of 20,
# 130, 1 and 110 tokens, crossing tile and rank boundaries), on 1 rank, --cp 2 and --cp 4
# (P > NKV), every valid --upipe-heads, and FSDP with checkpointing, offload and tiles; a packed
# window equals its documents run one by one; the plan equals the measured peak; bad input.
source "$(dirname "$0")/lib.sh"
ST_COMPARE=$BUILD/tests/st_compare
D=$FIX/golden_docs
DOCS="--config $D/config.json --data $D/tokens.bin --init $D/weights.safetensors --seq-len 300 --doc-sep 256"

# The tolerances of golden.sh: upipe in fp32 against float64, so the difference is upipe's
# rounding alone (~1e-6 of a tensor's scale over 2 layers); a token attending across a document
# boundary, a position not restarted or a separator target counted moves the loss by ~1e-2 and
# the gradients by O(1) of their scale.
GRAD_RTOL=1e-4
LOSS_RTOL=1e-5

against_ref() { # name expected-json expected-grads ranks args...
  local name=$1 ej=$2 eg=$3 n=$4
  shift 4
  run_case "$name" "$n" "$@" && check_ref "$name" "$ej" "$eg" "$GRAD_RTOL" "$LOSS_RTOL"
}
E=$D/expected.json
EG=$D/expected_grads.safetensors
against_ref docs_1 "$E" "$EG" 1 $DOCS
against_ref docs_cp2 "$E" "$EG" 2 $DOCS
against_ref docs_cp4 "$E" "$EG" 4 $DOCS                                  # P > NKV
for U in 1 2 4; do against_ref docs_u${U}_1 "$E" "$EG" 1 $DOCS --upipe-heads $U; done
for U in 2 4; do against_ref docs_u${U}_2 "$E" "$EG" 2 $DOCS --upipe-heads $U; done
against_ref docs_u4_4 "$E" "$EG" 4 $DOCS --upipe-heads 4
against_ref docs_stack_2 "$E" "$EG" 2 $DOCS --fsdp --checkpoint --offload "$TMP" --tile-mlp 64 --tile-loss 48
# with the loss mask as well
EM=$D/expected_mask.json
EMG=$D/expected_mask_grads.safetensors
against_ref mask_1 "$EM" "$EMG" 1 $DOCS --loss-mask "$D/mask.bin"
against_ref mask_cp4_u4 "$EM" "$EMG" 4 $DOCS --loss-mask "$D/mask.bin" --upipe-heads 4
against_ref mask_stack "$EM" "$EMG" 2 $DOCS --loss-mask "$D/mask.bin" --fsdp --offload "$TMP" --tile-mlp 64 --tile-loss 48
# the loss mask without documents, and a mask with no counted target (the step adds nothing,
# divides by nothing: loss 0, gradients 0, no NaN)
against_ref maskonly_cp2 "$D/expected_maskonly.json" "$D/expected_maskonly_grads.safetensors" 2 \
  --config "$D/config.json" --data "$D/tokens.bin" --init "$D/weights.safetensors" --seq-len 300 \
  --loss-mask "$D/mask.bin"
cp "$D/mask.bin" "$TMP/zero_mask.bin"
dd if=/dev/zero of="$TMP/zero_mask.bin" bs=1 seek=1024 count=301 conv=notrunc status=none
run_case zero_mask 2 $DOCS --loss-mask "$TMP/zero_mask.bin" && {
  l=$(json_field "$(head -n1 "$TMP/zero_mask.jsonl")" loss); n=$(json_field "$(head -n1 "$TMP/zero_mask.jsonl")" grad_norm)
  [ "$l" = "0.0" ] && [ "$n" = "0.0" ] && ok "no counted target: loss $l, gradient norm $n" || bad "no counted target: loss $l norm $n"; }
grep -q '"documents": 5' "$TMP/docs_1.jsonl" && grep -q '"targets": 296' "$TMP/docs_1.jsonl" \
  && ok "log: 5 documents, 296 counted targets (4 separator targets skipped)" || bad "log: $(head -c 300 "$TMP/docs_1.jsonl")"

# ---- a packed window is the sum of its documents run one by one ----
# Document d alone (its tokens and the next separator, so its last target is skipped as in the
# window) gives loss_d over n_d targets and gradient g_d; the window's gradient is
# sum(n_d g_d) / sum(n_d). Only the order of fp32 sums differs (tiles, matmul row blocks).
lens=(40 20 130 1 110)
start=0 args=() total=0 lsum=0
for i in "${!lens[@]}"; do
  len=${lens[$i]}
  "$BUILD/tests/shard_slice" "$D/tokens.bin" "$start" "$len" 256 "$TMP/doc$i.bin" || bad "slice $i"
  start=$((start + len))
  [ "$len" -gt 1 ] || continue   # the lone separator predicts nothing that counts
  run_case doc$i 1 --config "$D/config.json" --data "$TMP/doc$i.bin" --init "$D/weights.safetensors" \
    --seq-len "$len" --doc-sep 256 || continue
  nd=$(json_field "$(head -n1 "$TMP/doc$i.jsonl")" targets)
  ld=$(json_field "$(head -n1 "$TMP/doc$i.jsonl")" loss)
  args+=("$nd" "$TMP/doc$i.st")
  total=$((total + nd))
  lsum=$(awk -v a="$lsum" -v l="$ld" -v n="$nd" 'BEGIN { printf "%.12g", a + l * n }')
done
w=()
for ((k = 0; k < ${#args[@]}; k += 2)); do
  w+=("$(awk -v n="${args[k]}" -v t="$total" 'BEGIN { printf "%.17g", n / t }')" "${args[k + 1]}")
done
"$BUILD/tests/st_sum" "$TMP/sum.st" "${w[@]}" || bad "st_sum"
lw=$(awk -v a="$lsum" -v t="$total" 'BEGIN { printf "%.12g", a / t }')
l1=$(json_field "$(head -n1 "$TMP/docs_1.jsonl")" loss)
close "$l1" "$lw" 1e-6 && ok "packed loss $l1 = documents one by one $lw ($total targets)" \
  || bad "packed loss $l1 vs documents one by one $lw"
if "$ST_COMPARE" "$TMP/docs_1.st" "$TMP/sum.st" --rtol 1e-5 >"$TMP/sum.cmp" 2>&1; then
  ok "packed gradients = documents one by one: $(tail -n1 "$TMP/sum.cmp")"
else bad "packed gradients vs documents one by one"; cat "$TMP/sum.cmp"; fi

# ---- the plan still equals the measured peak ----
mpirun_n 2 "$UPIPE" train --quiet --threads 1 $DOCS --steps 1 --dry-run --mem-report "$TMP/p.json" >/dev/null 2>&1
mpirun_n 2 "$UPIPE" train --quiet --threads 1 $DOCS --steps 1 --mem-report "$TMP/m.json" >/dev/null 2>&1
p=$(buffer_peak "$TMP/p.json"); q=$(buffer_peak "$TMP/m.json")
[ -n "$p" ] && [ "$p" = "$q" ] && ok "plan = measured peak with documents: $p" || bad "plan $p vs measured $q"

# ---- bad input ----
rc=0
"$UPIPE" train --quiet $DOCS --doc-sep 260 --steps 1 >"$TMP/sep.out" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q "outside the vocabulary" "$TMP/sep.out" && ok "separator outside the vocabulary refused" \
  || { bad "separator outside the vocabulary: exit $rc"; cat "$TMP/sep.out"; }
refuse_mask() { # name phrase mask
  local rc=0
  "$UPIPE" train --quiet $DOCS --steps 1 --loss-mask "$3" >"$TMP/$1.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] && grep -q "upipe: error" "$TMP/$1.out" && grep -qi -- "$2" "$TMP/$1.out" \
    && ok "$1: $(grep 'upipe: error' "$TMP/$1.out" | cut -c1-150)" || { bad "$1: exit $rc"; cat "$TMP/$1.out"; }
}
"$UPIPE" data recall --output "$TMP/r.bin" --tokens 500 --distance 16 >/dev/null
"$UPIPE" data jsonl --input /dev/null --output "$TMP/x.bin" --doc-sep 256 >/dev/null 2>&1 || true
head -c 1200 "$D/mask.bin" >"$TMP/short_mask.bin"
refuse_mask mask_truncated "mask" "$TMP/short_mask.bin"
cp "$D/mask.bin" "$TMP/magic_mask.bin"; printf 'XXXX' | dd of="$TMP/magic_mask.bin" conv=notrunc status=none
refuse_mask mask_bad_magic "magic" "$TMP/magic_mask.bin"
cp "$D/mask.bin" "$TMP/byte_mask.bin"; printf '\x02' | dd of="$TMP/byte_mask.bin" bs=1 seek=1100 conv=notrunc status=none
refuse_mask mask_bad_byte "1100\|byte\|0 or 1" "$TMP/byte_mask.bin"
finish
