#!/usr/bin/env bash
# --offload through model/ckpt_tier.h: each moved layer's input copied out while the layer runs
# (to a host slot, or past --offload-host-limit in pieces through two store buffers to the
# offload file) and
# back in one layer ahead of the backward; the last --offload-keep stay in the backend's space.
# A GPU run takes this path under --offload (pinned slots, its copy stream); on the CPU
# --offload-host-limit sends the inputs through it too (memcpy), which is how it is tested here.
# The copies move the checkpoints and nothing else, so the gradients and the weights after three
# AdamW steps equal --checkpoint's to the bit: fp32 and bf16, five layers with three moved (all
# in host slots; one slot and two in the file; all in the file with a layer kept in a buffer of
# its own), with the optimizer offloaded too, and over two context-parallel ranks. A folder that
# cannot hold the file is refused in one line; a measured run's accounted peak equals its plan;
# the plan of a GPU run puts each input where the flags say, to the byte; the trace has one copy
# out and one in per moved layer and step.
source "$(dirname "$0")/lib.sh"
sed 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 5/' "$SRC/configs/tiny.json" >"$TMP/t5.json"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null
M="--config $TMP/t5.json --data $TMP/d.bin --seq-len 128"
H="--offload $TMP --offload-host-limit 1GiB"

pair() { # name ranks args...
  local name=$1 n=$2
  shift 2
  same_bits "$name" "$n" --checkpoint "$H" $M "$@"
}
pair f32 1
pair bf16 1 --dtype bf16
pair bf16_opt 1 --dtype bf16 --offload-optimizer --tile-mlp 32
pair cp2 2 --cp 2 --upipe-heads 2
# bf16 slots of 128 x 128 (32 KiB): 40 KiB holds one, the other two go to the file
H="--offload $TMP --offload-host-limit 40KiB"
pair bf16_file 1 --dtype bf16
pair cp2_file_accum 2 --cp 2 --grad-accum 2
H="--offload $TMP --offload-host-limit 1KiB --offload-keep 3"
pair bf16_all_file_keep3 1 --dtype bf16
# the file in pieces: 12 KiB (three a layer input, the last shorter), through two store buffers
UPIPE_OFFLOAD_PIECE=12288 pair bf16_all_file_pieces 1 --dtype bf16
H="--offload $TMP --offload-host-limit 1GiB"

# A folder that cannot hold the file: one line, status 1, no output.
if "$UPIPE" train $M --dtype bf16 --offload "$TMP/none" --offload-host-limit 40KiB --steps 1 \
  --save "$TMP/never.st" >"$TMP/dir.out" 2>&1; then
  bad "a missing --offload folder was accepted"
elif [ "$(wc -l <"$TMP/dir.out")" -eq 1 ] && grep -q "$TMP/none" "$TMP/dir.out" && [ ! -e "$TMP/never.st" ]; then
  ok "refused: $(cut -c1-110 "$TMP/dir.out")..."
else bad "a missing --offload folder: unexpected"; cat "$TMP/dir.out"; fi

# The trace: per step, one copy out and one copy in for each of the L - 2 = 3 slots.
train_run trace 1 $M $H --dtype bf16 --steps 2 --trace "$TMP/trace.json"
if python3 - "$TMP/trace.json" >"$TMP/trace.why" 2>&1 <<'EOF'; then ok "trace: $(cat "$TMP/trace.why")"; else bad "trace"; cat "$TMP/trace.why"; fi
import collections, json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
n = collections.Counter((e.get("name"), e.get("args", {}).get("layer")) for e in ev if e.get("cat") == "offload")
want = {(k, l): 2 for k in ("ckpt_out", "ckpt_in") for l in range(3)}
print(dict(n) if dict(n) != want else "2 steps x 3 slots, out and in")
sys.exit(0 if dict(n) == want else 1)
EOF

# Measured = plan (the CPU: everything in host memory; the file's bytes as offloaded).
for lim in 1GiB 40KiB; do
  Q="$M --dtype bf16 --offload $TMP --offload-host-limit $lim --steps 1 --threads 1 --quiet"
  "$UPIPE" train $Q --mem-report "$TMP/h.mem" >"$TMP/h.out" 2>&1 \
    && "$UPIPE" train $Q --dry-run --mem-report "$TMP/h.plan" >/dev/null 2>&1 \
    || { bad "measured run failed"; cat "$TMP/h.out"; }
  m=$(buffer_peak "$TMP/h.mem"); p=$(buffer_peak "$TMP/h.plan")
  mo=$(json_field "$(tr -d '\n' <"$TMP/h.mem")" offloaded_peak_bytes)
  po=$(json_field "$(tr -d '\n' <"$TMP/h.plan")" offloaded_peak_bytes)
  if [ -n "$m" ] && [ "$m" = "$p" ] && [ -n "$mo" ] && [ "$mo" = "$po" ]; then
    ok "host limit $lim: measured peak $m = plan, offloaded $mo = plan"
  else bad "host limit $lim: measured peak '$m' vs plan '$p', offloaded '$mo' vs '$po'"; fi
done

# A GPU run's plan (without one): --checkpoint keeps all five inputs on the GPU; --offload two
# on the GPU and three pinned; with a limit of one slot (1 MiB each here) one pinned and two in
# the file (whose two store buffers are pinned too); --offload-keep 3 keeps a third on the GPU.
P="--config $TMP/t5.json --seq-len 4096 --dtype bf16 --dry-run --device cuda --device-mem 139GiB"
plan() { # name args...
  local name=$1
  shift
  "$UPIPE" train $P "$@" --mem-report "$TMP/$name.plan" >"$TMP/$name.plan.out" 2>&1 \
    || { bad "GPU plan $name failed"; cat "$TMP/$name.plan.out"; }
}
plan ck --checkpoint
plan all --offload "$TMP"
plan lim --offload "$TMP" --offload-host-limit 1536KiB
plan keep --offload "$TMP" --offload-host-limit 1536KiB --offload-keep 3
if python3 - "$TMP" "$TMP/t5.json" >"$TMP/plan.why" 2>&1 <<'EOF'; then ok "GPU plans: $(cat "$TMP/plan.why")"; else bad "GPU plans"; cat "$TMP/plan.why"; fi
import json, os, sys
cfg = json.load(open(sys.argv[2]))
slot = 4096 * cfg["hidden_size"] * 2  # T x C bf16
store = min(slot, 64 << 20) * 2 + 4096 - 64  # two pieces of the store, aligned (offload.c)
L = cfg["num_hidden_layers"]
want = {"ck": (L * slot, 0, 0, 0), "all": (2 * slot, (L - 2) * slot, 0, 0),
        "lim": (2 * slot, slot + store, 0, 2 * slot), "keep": (3 * slot, slot + store, 0, slot)}
bad = []
for name, w in want.items():
    r = json.load(open(os.path.join(sys.argv[1], name + ".plan")))
    host = r["categories"]["checkpoints"] - r["device_categories"]["checkpoints"] - r["pinned_categories"]["checkpoints"]
    got = (r["device_categories"]["checkpoints"], r["pinned_categories"]["checkpoints"], host,
           r["offloaded_peak_bytes"])
    if got != w:
        bad.append(f"{name}: (device, pinned, host, file) {got} want {w}")
print("; ".join(bad) if bad else "device, pinned, host and file bytes of the checkpoints as the flags say, 4 plans")
sys.exit(1 if bad else 0)
EOF
finish
