#!/usr/bin/env bash
# Training test: on a learnable sequence (a repeated byte-level text) the loss falls well below
# its start, and --save writes weights that --init loads back to the same loss.
source "$(dirname "$0")/lib.sh"
printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 1 400) >"$TMP/text.txt"
"$UPIPE" data text --input "$TMP/text.txt" --output "$TMP/text.bin" >/dev/null || bad "data text"
if "$UPIPE" train --config "$SRC/configs/tiny.json" --data "$TMP/text.bin" --seq-len 128 \
    --steps 40 --lr 3e-3 --warmup 4 --threads 2 --quiet --log "$TMP/log.jsonl" \
    --save "$TMP/w.safetensors" >"$TMP/out" 2>&1; then
  first=$(json_field "$(head -n1 "$TMP/log.jsonl")" loss)
  last=$(json_field "$(tail -n1 "$TMP/log.jsonl")" loss)
  # Start: ~ln(256) = 5.55 for a random init. A model that learns the 45-byte period reaches
  # well under 1.0 in 40 steps; require last < 0.3 * first.
  if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.3 * a) }'; then
    ok "loss falls: $first -> $last"
  else
    bad "loss did not fall enough: $first -> $last"
  fi
  n=$(wc -l <"$TMP/log.jsonl")
  [ "$n" -eq 40 ] && ok "log has 40 lines" || bad "log has $n lines, expected 40"
  for k in step loss lr grad_norm tokens_per_s peak_bytes; do
    v=$(json_field "$(tail -n1 "$TMP/log.jsonl")" $k)
    [ -n "$v" ] && ok "log field $k=$v" || bad "log field $k missing"
  done
  # The round trip: --init of the saved weights, no update, --save again gives the same bytes,
  # and the first loss from them is the loss the trained model has on that window.
  if "$UPIPE" train --config "$SRC/configs/tiny.json" --data "$TMP/text.bin" --seq-len 128 \
      --steps 1 --lr 0 --threads 2 --quiet --init "$TMP/w.safetensors" --save "$TMP/w2.safetensors" \
      --log "$TMP/rt.jsonl" >"$TMP/rt.out" 2>&1 && cmp -s "$TMP/w.safetensors" "$TMP/w2.safetensors"; then
    l=$(json_field "$(head -n1 "$TMP/rt.jsonl")" loss)
    awk -v a="$l" -v b="$first" 'BEGIN { exit !(a < 0.3 * b) }' && ok "--save / --init round trip: same bytes, loss $l" \
      || bad "round trip: loss $l is not the trained model's"
  else
    bad "--save / --init round trip"; cat "$TMP/rt.out"
  fi
else
  bad "training run failed"; cat "$TMP/out"
fi
# --print-every 3 over 7 steps: the terminal shows steps 1, 3, 6 and 7; the log has all 7.
if "$UPIPE" train --config "$SRC/configs/tiny.json" --data "$TMP/text.bin" --seq-len 32 \
    --steps 7 --threads 1 --print-every 3 --log "$TMP/pe.jsonl" >"$TMP/pe.out" 2>&1; then
  shown=$(sed -n 's/^step *\([0-9]*\)\/7 .*/\1/p' "$TMP/pe.out" | tr '\n' ' ')
  [ "$shown" = "1 3 6 7 " ] && [ "$(wc -l <"$TMP/pe.jsonl")" -eq 7 ] &&
    ok "--print-every 3: steps $shown on the terminal, 7 log records" ||
    bad "--print-every 3: steps \"$shown\" on the terminal, $(wc -l <"$TMP/pe.jsonl") log records"
else
  bad "--print-every run failed"; cat "$TMP/pe.out"
fi
finish
