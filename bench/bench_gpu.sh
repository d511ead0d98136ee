#!/usr/bin/env bash
# GPU benchmark: upipe --device cuda against PyTorch's usual recipe (bench/torch_gpu.py), the same
# model shape and T, in one sitting on one GPU; prints a table of tokens/s, their ratio and the
# peak GPU memory of each. The models start from random weights on random ids (speed does not
# depend on the values).
# usage: bench/bench_gpu.sh [build/upipe] [CONFIG:T ...]
#        (default: configs/llama3.2-1b.json at T = 8192; STEPS=4 timed steps after 2 warm-up;
#        SKIP_TORCH=1 leaves PyTorch out)
set -uo pipefail
cd "$(dirname "$0")/.."
upipe=${1:-build/upipe}
shift || true
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(configs/llama3.2-1b.json:8192)
STEPS=${STEPS:-4}
tmp=$(mktemp -d /tmp/upipe-bench-gpu.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$upipe" --version | sed -n 's/^cuda: //p'
printf '%-28s %7s %12s %12s %7s %11s %11s\n' config T "upipe tok/s" "torch tok/s" ratio \
  "upipe peak" "torch peak"
for c in "${cases[@]}"; do
  cfg=${c%%:*} T=${c##*:}
  V=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$cfg")
  python3 bench/random_shard.py "$tmp/d.bin" $((T * (STEPS + 3) + 1)) "$V"
  "$upipe" train --device cuda --config "$cfg" --data "$tmp/d.bin" --seq-len "$T" --dtype bf16 \
    --checkpoint --tile-loss --steps $((STEPS + 2)) --lr 1e-5 --log "$tmp/u.jsonl" \
    --mem-report "$tmp/u.mem" >"$tmp/u.out" 2>&1 || { tail -n 5 "$tmp/u.out"; }
  ut=$(tail -n +3 "$tmp/u.jsonl" 2>/dev/null | sed -n 's/.*"tokens_per_s": *\([0-9.eE+-]*\).*/\1/p' |
    sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
  up=$(sed -n 's/.*"device_peak_bytes": *\([0-9]*\).*/\1/p' "$tmp/u.mem" 2>/dev/null)
  # PyTorch with the machine's own libraries (not upipe's bundle: tools/gpu-check.sh)
  : >"$tmp/t.json"
  [ -n "${SKIP_TORCH:-}" ] ||
    LD_LIBRARY_PATH=${TORCH_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}} python3 bench/torch_gpu.py \
      --config "$cfg" --seq-len "$T" --steps "$STEPS" >"$tmp/t.json" 2>"$tmp/t.err" ||
    tail -n 3 "$tmp/t.err"
  tt=$(sed -n 's/.*"tokens_per_s": *\([0-9.eE+-]*\).*/\1/p' "$tmp/t.json")
  tp=$(sed -n 's/.*"peak_bytes": *\([0-9]*\).*/\1/p' "$tmp/t.json")
  ratio=$(awk -v a="${ut:-0}" -v b="${tt:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }')
  gib() { awk -v b="${1:-0}" 'BEGIN { if (b > 0) printf "%.1f GiB", b / 1073741824; else print "-" }'; }
  printf '%-28s %7s %12.0f %12.0f %7s %11s %11s\n' "$(basename "$cfg")" "$T" "${ut:-0}" "${tt:-0}" \
    "$ratio" "$(gib "$up")" "$(gib "$tp")"
  grep -m1 "^step" "$tmp/u.out"
done
