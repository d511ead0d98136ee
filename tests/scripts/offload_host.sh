#!/usr/bin/env bash
# --offload to host memory (model/ckpt_tier.h): each layer's input copied out to a host slot
# while the layer runs and back in one layer ahead of the backward, two kept in the backend's
# space. A GPU run takes this path under --offload (pinned slots, its copy stream); on the CPU
# --offload-host-limit sends the inputs through it too (memcpy), which is how it is tested here.
# The copies move the checkpoints and nothing else, so the gradients and the weights after three
# AdamW steps equal --checkpoint's to the bit: fp32 and bf16, five layers (three slots), with
# the optimizer offloaded too, and over two context-parallel ranks. A limit the slots do not fit
# is refused before anything runs; a measured run's accounted peak equals its plan; the plan of
# a GPU run puts two inputs on the GPU and L - 2 in pinned memory, to the byte; the trace has one
# copy out and one in per slot and step.
source "$(dirname "$0")/lib.sh"
sed 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 5/' "$SRC/configs/tiny.json" >"$TMP/t5.json"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null
M="--config $TMP/t5.json --data $TMP/d.bin --seq-len 128"
H="--offload $TMP --offload-host-limit 1GiB"

run() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 "$@" >"$TMP/$name.out" 2>&1 \
    || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
same() { # what file-a file-b
  if cmp -s "$2" "$3"; then ok "$1: identical"; else bad "$1: the files differ"; fi
}
pair() { # name ranks args...
  local name=$1 n=$2
  shift 2
  run "$name" "$n" $M "$@" --checkpoint --steps 3 --lr 1e-3 --save "$TMP/$name.w.st" \
    && run "${name}_h" "$n" $M "$@" $H --steps 3 --lr 1e-3 --save "$TMP/${name}_h.w.st" \
    && same "$name: weights after 3 steps" "$TMP/$name.w.st" "$TMP/${name}_h.w.st"
  run "$name.g" "$n" $M "$@" --checkpoint --steps 1 --lr 0 --save-grads "$TMP/$name.g.st" \
    && run "${name}_h.g" "$n" $M "$@" $H --steps 1 --lr 0 --save-grads "$TMP/${name}_h.g.st" \
    && same "$name: gradients" "$TMP/$name.g.st" "$TMP/${name}_h.g.st"
}
pair f32 1
pair bf16 1 --dtype bf16
pair bf16_opt 1 --dtype bf16 --offload-optimizer --tile-mlp 32
pair cp2 2 --cp 2 --upipe-heads 2

# Three slots of 128 x 128 bf16 (32 KiB each) do not fit 90 KiB: one line, status 1, no output.
if "$UPIPE" train $M --dtype bf16 --offload "$TMP" --offload-host-limit 90KiB --steps 1 \
  --save "$TMP/never.st" >"$TMP/lim.out" 2>&1; then
  bad "a limit the slots exceed was accepted"
elif grep -q "the layer inputs take 96.00 KiB of host memory but --offload-host-limit is 90.00 KiB" \
  "$TMP/lim.out" && [ "$(wc -l <"$TMP/lim.out")" -eq 1 ] && [ ! -e "$TMP/never.st" ]; then
  ok "refused: $(cut -c1-110 "$TMP/lim.out")..."
else bad "over the limit: unexpected"; cat "$TMP/lim.out"; fi

# The trace: per step, one copy out and one copy in for each of the L - 2 = 3 slots.
run trace 1 $M $H --dtype bf16 --steps 2 --trace "$TMP/trace.json"
if python3 - "$TMP/trace.json" >"$TMP/trace.why" 2>&1 <<'EOF'; then ok "trace: $(cat "$TMP/trace.why")"; else bad "trace"; cat "$TMP/trace.why"; fi
import collections, json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
n = collections.Counter((e.get("name"), e.get("args", {}).get("layer")) for e in ev if e.get("cat") == "offload")
want = {(k, l): 2 for k in ("ckpt_out", "ckpt_in") for l in range(3)}
print(dict(n) if dict(n) != want else "2 steps x 3 slots, out and in")
sys.exit(0 if dict(n) == want else 1)
EOF

# Measured = plan (the CPU: everything in host memory).
Q="$M --dtype bf16 $H --steps 1 --threads 1 --quiet"
"$UPIPE" train $Q --mem-report "$TMP/h.mem" >"$TMP/h.out" 2>&1 \
  && "$UPIPE" train $Q --dry-run --mem-report "$TMP/h.plan" >/dev/null 2>&1 \
  || { bad "measured run failed"; cat "$TMP/h.out"; }
m=$(buffer_peak "$TMP/h.mem"); p=$(buffer_peak "$TMP/h.plan")
if [ -n "$m" ] && [ "$m" = "$p" ]; then ok "measured peak $m = plan"; else bad "measured peak '$m' vs plan '$p'"; fi

# A GPU run's plan (without one): checkpoints on the GPU are two inputs, in pinned memory L - 2,
# where --checkpoint alone keeps all five on the GPU.
P="--config $TMP/t5.json --seq-len 4096 --dtype bf16 --dry-run --device cuda --device-mem 139GiB"
"$UPIPE" train $P --checkpoint --mem-report "$TMP/ck.plan" >/dev/null 2>&1 \
  && "$UPIPE" train $P --offload "$TMP" --mem-report "$TMP/off.plan" >"$TMP/off.plan.out" 2>&1 \
  || { bad "GPU plans failed"; cat "$TMP/off.plan.out"; }
if python3 - "$TMP/ck.plan" "$TMP/off.plan" "$TMP/t5.json" >"$TMP/plan.why" 2>&1 <<'EOF'; then ok "GPU plan: $(cat "$TMP/plan.why")"; else bad "GPU plan"; cat "$TMP/plan.why"; fi
import json, sys
a, b, cfg = (json.load(open(p)) for p in sys.argv[1:4])
slot = 4096 * cfg["hidden_size"] * 2  # T x C bf16
L = cfg["num_hidden_layers"]
got = (a["device_categories"]["checkpoints"], b["device_categories"]["checkpoints"],
       b["pinned_categories"]["checkpoints"])
want = (L * slot, 2 * slot, (L - 2) * slot)
print(f"checkpoints on the GPU {got[0]} -> {got[1]}, pinned {got[2]} (want {want})")
sys.exit(0 if got == want else 1)
EOF
finish
