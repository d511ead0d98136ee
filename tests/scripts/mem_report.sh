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
# A plan reads no data: without --data it is the plan with it (every category but the process's
# own resident bytes, runtime, measured in each run).
P1="--config $SRC/configs/tiny.json --seq-len 1024 --threads 2 --quiet --dry-run"
cats() { python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["categories"]; c.pop("runtime"); print(c)' "$1"; }
# shellcheck disable=SC2086
if "$UPIPE" train $P1 --data "$TMP/d.bin" --mem-report "$TMP/plan.data" >/dev/null 2>&1 \
  && "$UPIPE" train $P1 --mem-report "$TMP/plan.nodata" >"$TMP/plan.out" 2>&1 \
  && [ "$(cats "$TMP/plan.data")" = "$(cats "$TMP/plan.nodata")" ]; then
  ok "--dry-run without --data: the same plan"
else
  bad "--dry-run without --data"; cat "$TMP/plan.out"
fi
# A GPU planned on a machine without one (--device-mem): the model's state, checkpoints and
# activations take on the device what they take on the CPU (the attention and workspace scratch
# are each backend's own); the plan fits a device of exactly its bytes and the module's (64 MiB
# of cuBLASLt workspace, 64 MiB of product panel) and not one byte less.
# shellcheck disable=SC2086
if "$UPIPE" train $P1 --mem-report "$TMP/cpu.plan" >/dev/null 2>&1 \
  && "$UPIPE" train $P1 --device cuda --device-mem 1GiB --mem-report "$TMP/gpu.plan" >"$TMP/gpu.out" 2>&1; then
  cmpcat=$(python3 - "$TMP/cpu.plan" "$TMP/gpu.plan" <<'PY'
import json, sys
c, g = (json.load(open(f)) for f in sys.argv[1:3])
same = [k for k in ("params", "grads", "optimizer", "checkpoints", "activations")
        if c["categories"][k] != g["device_categories"][k]]
print(" ".join(same) or "same", g["device_peak_bytes"])
PY
)
  read -r verdict dev <<<"$cmpcat"
  [ "$verdict" = same ] && ok "planned GPU: state, checkpoints and activations as on the CPU" \
    || bad "planned GPU: $verdict differ from the CPU's plan"
  need=$((dev + (128 << 20)))
  # shellcheck disable=SC2086
  "$UPIPE" train $P1 --device cuda --device-mem "$need" >"$TMP/fit.out" 2>&1
  # shellcheck disable=SC2086
  "$UPIPE" train $P1 --device cuda --device-mem "$((need - 1))" >"$TMP/nofit.out" 2>&1
  if grep -q "^GPU (no GPU: planned with --device-mem): the plan's .* fit in" "$TMP/fit.out" \
    && grep -q "^GPU (no GPU: planned with --device-mem): does not fit: the run plans .* but the GPU has free" "$TMP/nofit.out"; then
    ok "planned GPU: fits in $need bytes, not in one less"
  else
    bad "planned GPU: the fit line"; cat "$TMP/fit.out" "$TMP/nofit.out"
  fi
else
  bad "planned GPU: the plan failed"; cat "$TMP/gpu.out"
fi
# --device-mem only plans: outside --dry-run --device cuda it is refused, in one line.
# shellcheck disable=SC2086
for extra in "--device cuda --device-mem 1GiB --data $TMP/d.bin --steps 1" "--dry-run --device-mem 1GiB"; do
  P2=${P1/--dry-run/}
  # shellcheck disable=SC2086
  if "$UPIPE" train $P2 $extra >"$TMP/dm.out" 2>&1; then
    bad "--device-mem accepted with: $extra"
  elif [ "$(wc -l <"$TMP/dm.out")" -eq 1 ] && grep -q "^upipe: error: --device-mem plans a GPU without one" "$TMP/dm.out"; then
    ok "--device-mem refused with: $extra"
  else
    bad "--device-mem with $extra: not one line"; cat "$TMP/dm.out"
  fi
done
finish
