#!/usr/bin/env bash
# The offloads on one GPU against the checkpoints kept on it, in one sitting: the Llama-3.2-1B
# layer shape with LAYERS layers (default 4) at T (default 32768), bf16, tiled loss, the same
# random ids; per row the median tokens/s of STEPS timed steps after one warm-up, the ratio to
# --checkpoint, and the accounted device and pinned peaks. Issue 37 asks for --offload within 5%
# of --checkpoint at T >= 32768 (the copies hidden behind the layers).
# usage: bench/bench_gpu_offload.sh [build/upipe]   (LAYERS=4 T=32768 STEPS=3 CONFIG=...;
#        DEVICE=cpu checks the script on a machine without a GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
upipe=${1:-build/upipe}
LAYERS=${LAYERS:-4} T=${T:-32768} STEPS=${STEPS:-3} DEVICE=${DEVICE:-cuda}
CONFIG=${CONFIG:-configs/llama3.2-1b.json}
tmp=$(mktemp -d /tmp/upipe-bench-off.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$upipe" --version | sed -n 's/^cuda: //p'
sed "s/\"num_hidden_layers\": *[0-9]*/\"num_hidden_layers\": $LAYERS/" "$CONFIG" >"$tmp/c.json"
V=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$tmp/c.json")
python3 bench/random_shard.py "$tmp/d.bin" $((T * (STEPS + 2) + 1)) "$V"
echo "$(basename "$CONFIG") with $LAYERS layers, T = $T, bf16, --tile-loss; median of $STEPS steps"
printf '%-34s %10s %7s %12s %12s\n' row "tok/s" ratio "GPU peak" "pinned peak"
base=
for row in "--checkpoint" "--offload $tmp" "--checkpoint --offload-optimizer" \
  "--offload $tmp --offload-optimizer"; do
  # shellcheck disable=SC2086
  "$upipe" train --device "$DEVICE" --config "$tmp/c.json" --data "$tmp/d.bin" --seq-len "$T" \
    --dtype bf16 --tile-loss $row --steps $((STEPS + 1)) --lr 1e-5 --log "$tmp/u.jsonl" \
    --mem-report "$tmp/u.mem" >"$tmp/u.out" 2>&1 || { tail -n 3 "$tmp/u.out"; continue; }
  ut=$(tail -n +2 "$tmp/u.jsonl" | sed -n 's/.*"tokens_per_s": *\([0-9.eE+-]*\).*/\1/p' |
    sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
  [ -n "$base" ] || base=$ut
  dp=$(sed -n 's/.*"device_peak_bytes": *\([0-9]*\).*/\1/p' "$tmp/u.mem")
  pp=$(sed -n 's/.*"pinned_peak_bytes": *\([0-9]*\).*/\1/p' "$tmp/u.mem")
  printf '%-34s %10.0f %6.3fx %8.2f GiB %8.2f GiB\n' "${row//$tmp/DIR}" "${ut:-0}" \
    "$(awk -v a="${ut:-0}" -v b="${base:-1}" 'BEGIN { print a / b }')" \
    "$(awk -v b="${dp:-0}" 'BEGIN { print b / 1073741824 }')" \
    "$(awk -v b="${pp:-0}" 'BEGIN { print b / 1073741824 }')"
done
