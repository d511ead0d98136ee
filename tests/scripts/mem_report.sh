#!/usr/bin/env bash
# Memory report: the schema is complete, the categories add up, and the accounted peak tracks the
# process's peak RSS (within 15% at a size where buffers dominate the fixed process overhead).
source "$(dirname "$0")/lib.sh"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 128 >/dev/null || bad "data recall"
if "$UPIPE" train --config "$SRC/configs/tiny.json" --data "$TMP/d.bin" --seq-len 8192 --steps 1 \
    --threads 2 --quiet --mem-report "$TMP/mem.json" >"$TMP/out" 2>&1; then
  rep=$(tr -d '\n' <"$TMP/mem.json")
  for k in peak_bytes rss_peak_bytes offloaded_peak_bytes params grads optimizer checkpoints \
      activations attention workspace comm; do
    v=$(json_field "$rep" $k)
    [ -n "$v" ] && ok "report has $k=$v" || bad "report lacks $k"
  done
  peak=$(json_field "$rep" peak_bytes)
  rss=$(json_field "$rep" rss_peak_bytes)
  if is_num "$peak" && is_num "$rss" && [ "$rss" -gt 0 ] &&
     awk -v p="$peak" -v r="$rss" 'BEGIN { d = p - r; if (d < 0) d = -d; exit !(d <= 0.15 * r) }'; then
    ok "accounted peak $peak within 15% of RSS peak $rss"
  else
    bad "accounted peak $peak vs RSS peak $rss: more than 15% apart"
  fi
else
  bad "run failed"; cat "$TMP/out"
fi
# A deep model (40 layers, every layer's tensors saved) allocates and trains; its plan matches.
sed 's/"num_hidden_layers": 4/"num_hidden_layers": 40/' "$SRC/configs/tiny.json" >"$TMP/deep.json"
if "$UPIPE" train --config "$TMP/deep.json" --data "$TMP/d.bin" --seq-len 32 --steps 1 --threads 2 \
    --quiet --mem-report "$TMP/deep.json.mem" >"$TMP/deep.out" 2>&1 \
  && "$UPIPE" train --config "$TMP/deep.json" --data "$TMP/d.bin" --seq-len 32 --steps 1 --threads 2 \
    --quiet --dry-run --mem-report "$TMP/deep.plan" >/dev/null 2>&1; then
  a=$(buffer_peak "$TMP/deep.json.mem"); b=$(buffer_peak "$TMP/deep.plan")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "40-layer model: measured peak $a = plan" || bad "40-layer model: measured $a vs plan $b"
else
  bad "40-layer model failed"; cat "$TMP/deep.out"
fi
# The plan sizes the attention workspace of the kernel path that runs (the paths' scratch
# differs): plan = measured on every path this CPU runs.
for path in avx512 avx2 portable; do
  if ! UPIPE_KERNEL=$path "$UPIPE" --version >/dev/null 2>&1; then
    ok "kernel path $path: this CPU cannot run it (skipped)"; continue
  fi
  if UPIPE_KERNEL=$path "$UPIPE" train --config "$SRC/configs/tiny.json" --data "$TMP/d.bin" \
      --seq-len 1024 --steps 1 --threads 2 --quiet --mem-report "$TMP/$path.mem" >"$TMP/$path.out" 2>&1 \
    && UPIPE_KERNEL=$path "$UPIPE" train --config "$SRC/configs/tiny.json" --data "$TMP/d.bin" \
      --seq-len 1024 --steps 1 --threads 2 --quiet --dry-run --mem-report "$TMP/$path.plan" >/dev/null 2>&1; then
    a=$(buffer_peak "$TMP/$path.mem"); b=$(buffer_peak "$TMP/$path.plan")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "kernel path $path: measured peak $a = plan" \
      || bad "kernel path $path: measured $a vs plan $b"
  else
    bad "kernel path $path: run failed"; cat "$TMP/$path.out"
  fi
done
finish
