#!/usr/bin/env bash
# Issue 37's long lengths, one real step each on the GPU: a 2-layer model of Llama-3-8B's layer
# shape at T = 524,288 and of Llama-3.2-1B's at T = 1,048,576, bf16, with the stack (checkpoints,
# tiled MLP and loss, UPipe heads, the optimizer offloaded). For each: the plan (--dry-run) and
# the measured step's accounted device and pinned peaks side by side (issue 37: within 1%), the
# step's time and tokens/s. The full 32- and 16-layer models are planned, not run
# (bench/bench_gpu_plan.py). Random ids; the tensor-core attention (UPIPE_CUDA_ATTENTION=tc) is
# the caller's choice.
# usage: bench/bench_gpu_long.sh [build/upipe]   (CASES="configs/llama3-8b.json:524288 ..."
#        LAYERS=2 U=4 SECONDS_EACH=280 DEVICE=cuda; DEVICE=cpu with small CASES checks the script;
#        EXTRA="--grads-on-device" adds flags: the 8B's row that leaves its host room, BENCHMARKS.md)
set -uo pipefail
cd "$(dirname "$0")/.."
upipe=${1:-build/upipe}
LAYERS=${LAYERS:-2} U=${U:-4} SECONDS_EACH=${SECONDS_EACH:-280} DEVICE=${DEVICE:-cuda} EXTRA=${EXTRA:-}
CASES=${CASES:-"configs/llama3-8b.json:524288 configs/llama3.2-1b.json:1048576"}
tmp=$(mktemp -d /tmp/upipe-bench-long.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$upipe" --version | sed -n 's/^cuda: //p'
printf '%-22s %9s %13s %13s %13s %13s %8s %9s\n' shape T "GPU plan" "GPU measured" "pinned plan" \
  "pinned meas." "step s" "tok/s"
for c in $CASES; do
  cfg=${c%%:*} T=${c##*:}
  sed "s/\"num_hidden_layers\": *[0-9]*/\"num_hidden_layers\": $LAYERS/" "$cfg" >"$tmp/c.json"
  V=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$tmp/c.json")
  python3 bench/random_shard.py "$tmp/d.bin" $((T + 1)) "$V"
  A="--device $DEVICE --config $tmp/c.json --data $tmp/d.bin --seq-len $T --dtype bf16 --checkpoint
     --tile-mlp --tile-loss --upipe-heads $U --offload-optimizer $EXTRA --steps 1 --lr 1e-5"
  # shellcheck disable=SC2086
  "$upipe" train $A --dry-run --mem-report "$tmp/plan.json" >"$tmp/plan.out" 2>&1 ||
    { tail -n 3 "$tmp/plan.out"; continue; }
  # shellcheck disable=SC2086
  timeout "$SECONDS_EACH" "$upipe" train $A --log "$tmp/u.jsonl" --mem-report "$tmp/run.json" \
    >"$tmp/run.out" 2>&1 || { echo "$(basename "$cfg") T=$T: the step did not finish"; tail -n 3 "$tmp/run.out"; }
  field() { sed -n "s/.*\"$2\": *\([0-9.eE+-]*\).*/\1/p" "$1" 2>/dev/null | head -n1; }
  g() { awk -v b="${1:-0}" 'BEGIN { if (b > 0) printf "%.2f GiB", b / 1073741824; else print "-" }'; }
  printf '%-22s %9s %13s %13s %13s %13s %8s %9s\n' "$(basename "$cfg" .json) x$LAYERS" "$T" \
    "$(g "$(field "$tmp/plan.json" device_peak_bytes)")" "$(g "$(field "$tmp/run.json" device_peak_bytes)")" \
    "$(g "$(field "$tmp/plan.json" pinned_peak_bytes)")" "$(g "$(field "$tmp/run.json" pinned_peak_bytes)")" \
    "$(field "$tmp/u.jsonl" step_s)" "$(field "$tmp/u.jsonl" tokens_per_s)"
done
