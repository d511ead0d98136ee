#!/usr/bin/env bash
# --offload-optimizer: the masters, gradients and AdamW moments in host memory and AdamW on the
# CPU, the backend's space holding the units at hand (model/store.h). Here, on the CPU backend,
# it runs the same store path (the units' weights sent into their slots, each unit's gradients
# loaded into one buffer and written back after its backward, the optimizer on the host slabs),
# so the weights after three AdamW steps and the first step's gradients must equal the plain
# run's to the bit: with fp32 and bf16 weights, a tied embedding with two micro-batches and
# checkpointing, context parallelism with UPipe stages, data parallelism over two replicas, and
# a checkpoint written with the flag and resumed without it (and the reverse). The clipping norm
# is active in every case (the default --grad-clip 1 against these gradients' norms). The plan
# of a GPU run moves the fp32 state to the pinned column, --host-mem-limit holds the host's
# part, and a measured run's accounted peak equals its plan.
source "$(dirname "$0")/lib.sh"
GQA=$FIX/golden_gqa
TIED=$FIX/golden_tied
G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"
T3="--config $TIED/config.json --data $TIED/tokens.bin --init $TIED/weights.safetensors --seq-len 33"
A="--steps 3 --lr 1e-3"
# A case: the plain run and the offloaded one, weights after 3 steps and gradients of the first.
pair() { # name ranks args...
  local name=$1 n=$2
  shift 2
  same_bits "$name" "$n" "" --offload-optimizer "$@"
}

pair f32 1 $G
pair bf16 1 $G --dtype bf16
pair tied_accum_ckpt 1 $T3 --dtype bf16 --grad-accum 2 --checkpoint
pair cp2_upipe 2 $G --cp 2 --upipe-heads 2
pair dp2_tied 2 $T3 --cp 1 --grad-accum 2
# --grads-on-device: the gradients stay in the backend's space (where the backward accumulates)
# and pass through a host buffer a unit at a time for AdamW (memcpy here: the same path)
gdev() { # name ranks args...
  local name=$1 n=$2
  shift 2
  same_bits "$name" "$n" "" "--offload-optimizer --grads-on-device" "$@"
}
gdev gdev_bf16 1 $G --dtype bf16
gdev gdev_tied_accum_ckpt 1 $T3 --dtype bf16 --grad-accum 2 --checkpoint
gdev gdev_dp2_tied 2 $T3 --cp 1 --grad-accum 2
if "$UPIPE" train $G --steps 1 --grads-on-device >"$TMP/gdev.out" 2>&1; then
  bad "--grads-on-device without --offload-optimizer was accepted"
elif grep -q "goes with --offload-optimizer" "$TMP/gdev.out" && [ "$(wc -l <"$TMP/gdev.out")" -eq 1 ]; then
  ok "--grads-on-device alone refused: $(cat "$TMP/gdev.out")"
else bad "--grads-on-device alone: unexpected output"; cat "$TMP/gdev.out"; fi

# The clipping norm was in play (a run whose norm never passed --grad-clip would not test it).
norm=$(json_field "$(head -n1 "$TMP/bf16.jsonl")" grad_norm)
if is_num "$norm" && awk -v n="$norm" 'BEGIN { exit !(n > 1) }'; then ok "bf16: grad_norm $norm > --grad-clip 1"
else bad "bf16: grad_norm '$norm' does not pass --grad-clip 1: the clip is not tested"; fi

# A checkpoint written with the flag resumes without it, and the reverse: the straight run's
# weights (the checkpoint holds the same masters and moments either way).
for first in with without; do
  f1=; f2=--offload-optimizer
  [ "$first" = with ] && { f1=--offload-optimizer; f2=; }
  rm -rf "$TMP/ck_$first"
  train_run "ck_${first}_a" 1 $G --dtype bf16 $A $f1 --ckpt-dir "$TMP/ck_$first" --stop-at 2 \
    && train_run "ck_${first}_b" 1 $G --dtype bf16 $A $f2 --ckpt-dir "$TMP/ck_$first" --resume \
      --save "$TMP/ck_$first.w.st" \
    && same_file "checkpoint written $first the flag, resumed $([ "$first" = with ] && echo without || echo with) it" \
      "$TMP/bf16.w.st" "$TMP/ck_$first.w.st"
done

# Refused with --fsdp (the sharded state stays where the step runs): one line, status 1.
if "$UPIPE" train $G --steps 1 --offload-optimizer --fsdp >"$TMP/fsdp.out" 2>&1; then
  bad "--offload-optimizer --fsdp was accepted"
elif grep -q "does not go with --fsdp" "$TMP/fsdp.out" && [ "$(wc -l <"$TMP/fsdp.out")" -eq 1 ]; then
  ok "--offload-optimizer --fsdp refused: $(cat "$TMP/fsdp.out")"
else bad "--offload-optimizer --fsdp: unexpected output"; cat "$TMP/fsdp.out"; fi

# The plan of a GPU run (planned without one): the moments leave the device for pinned memory, the
# fp32 gradients and masters too (pinned: the masters, the gradients and a bf16 stage per slot;
# the device: two units' and the tied unit's bf16 weights, two units' and the tied unit's
# gradients).
P="--config $TIED/config.json --seq-len 4096 --dtype bf16 --dry-run --device cuda --device-mem 139GiB"
"$UPIPE" train $P --mem-report "$TMP/plain.plan" >/dev/null 2>&1 \
  && "$UPIPE" train $P --offload-optimizer --mem-report "$TMP/off.plan" >"$TMP/off.plan.out" 2>&1 \
  && "$UPIPE" train $P --offload-optimizer --grads-on-device --mem-report "$TMP/gdev.plan" >"$TMP/off.plan.out" 2>&1 \
  || { bad "plans failed"; cat "$TMP/off.plan.out"; }
if python3 - "$TMP/plain.plan" "$TMP/off.plan" "$TIED/config.json" "$TMP/gdev.plan" >"$TMP/plan.why" 2>&1 <<'EOF'; then ok "GPU plan: $(cat "$TMP/plan.why")"; else bad "GPU plan"; cat "$TMP/plan.why"; fi
import json, sys
a, b, cfg, g = (json.load(open(p)) for p in sys.argv[1:5])
C, F, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
H = cfg["num_attention_heads"]
KV = cfg.get("num_key_value_heads", H)
hs = C // H
layer = 2 * C + C * C + 2 * C * KV * hs + C * C + 3 * C * F  # norms, q, k, v, o, mlp
units = [V * C] + [layer] * L + [C]  # tied: the head unit is the final norm alone
n = sum(units)
big = max(units[1:])  # the slots' unit (the tied unit has its own)
dev, pin = b["device_categories"], b["pinned_categories"]
want = {
    ("device", "optimizer"): 0,
    ("pinned", "optimizer"): 2 * 4 * n,
    ("pinned", "grads"): 4 * n,
    ("pinned", "params"): 4 * n + 2 * (2 * big) + 2 * V * C,
    ("device", "params"): 2 * (2 * big) + 2 * V * C,
    ("device", "grads"): 2 * (4 * big) + 4 * V * C,
}
got = {k: (dev if k[0] == "device" else pin)[k[1]] for k in want}
bad = [f"{k}: {got[k]} want {want[k]}" for k in want if got[k] != want[k]]
if a["device_categories"]["optimizer"] != 2 * 4 * n:
    bad.append(f"plain plan's device optimizer {a['device_categories']['optimizer']} != {2 * 4 * n}")
# the plain plan holds no host copy of the slabs: its host memory sees one unit at a time (the
# largest, the embedding, in workspace)
for c in ("params", "grads", "optimizer"):
    h = a["categories"][c] - a["device_categories"][c] - a["pinned_categories"][c]
    if h:
        bad.append(f"plain plan: {h} bytes of {c} in host memory")
# --grads-on-device: the gradients on the device whole, one unit's (the largest) in pinned memory
# for AdamW, the rest as offloaded
gw = {("device", "grads"): 4 * n, ("pinned", "grads"): 4 * max(units),
      ("pinned", "optimizer"): 2 * 4 * n, ("device", "optimizer"): 0}
for k, v in gw.items():
    got = g[k[0] + "_categories"][k[1]]
    if got != v:
        bad.append(f"--grads-on-device {k}: {got} want {v}")
if not b["device_peak_bytes"] < a["device_peak_bytes"]:
    bad.append("the device peak did not fall")
if bad:
    print("; ".join(bad))
    sys.exit(1)
print(f"device {a['device_peak_bytes']} -> {b['device_peak_bytes']} bytes, pinned {b['pinned_peak_bytes']}, "
      "each category to the byte")
EOF

# --host-mem-limit: a GPU plan prints the host's line against it (and says when it does not fit);
# on the CPU, where everything is host memory, a run over it is refused before allocating, in one
# line naming the flag.
"$UPIPE" train $P --offload-optimizer --host-mem-limit 1GiB >"$TMP/hl.out" 2>&1
if grep -q "^host: the plan's .* pinned) fit in 1.00 GiB (--host-mem-limit)" "$TMP/hl.out"; then
  ok "host line: $(grep '^host:' "$TMP/hl.out")"
else bad "host line under --host-mem-limit 1GiB"; cat "$TMP/hl.out"; fi
"$UPIPE" train $P --offload-optimizer --host-mem-limit 100KiB >"$TMP/hs.out" 2>&1
if grep -q "^host: does not fit: the run plans .* of host memory (.* pinned) but --host-mem-limit is 100.00 KiB" "$TMP/hs.out"; then
  ok "host line, short: $(grep '^host:' "$TMP/hs.out" | cut -c1-120)..."
else bad "host line under --host-mem-limit 100KiB"; cat "$TMP/hs.out"; fi
if "$UPIPE" train $G --steps 1 --host-mem-limit 1MiB --save "$TMP/never.st" >"$TMP/hr.out" 2>&1; then
  bad "a CPU run over --host-mem-limit ran"
elif grep -q "but --host-mem-limit is 1.00 MiB" "$TMP/hr.out" && [ "$(wc -l <"$TMP/hr.out")" -eq 1 ] \
  && [ ! -e "$TMP/never.st" ]; then
  ok "refused: $(cut -c1-100 "$TMP/hr.out")..."
else bad "a CPU run over --host-mem-limit"; cat "$TMP/hr.out"; fi

# A measured run's accounted peak equals its plan (the CPU: every buffer in host memory).
Q="$G --steps 1 --dtype bf16 --offload-optimizer"
"$UPIPE" train $Q --threads 1 --quiet --mem-report "$TMP/off.mem" >"$TMP/off.mem.out" 2>&1 \
  && "$UPIPE" train $Q --threads 1 --quiet --dry-run --mem-report "$TMP/off.mem.plan" >/dev/null 2>&1 \
  || { bad "measured run failed"; cat "$TMP/off.mem.out"; }
m=$(buffer_peak "$TMP/off.mem"); p=$(buffer_peak "$TMP/off.mem.plan")
if [ -n "$m" ] && [ "$m" = "$p" ]; then ok "measured peak $m = plan"; else bad "measured peak '$m' vs plan '$p'"; fi
finish
