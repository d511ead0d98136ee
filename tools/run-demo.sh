#!/usr/bin/env bash
# The README's main job (`make run`): show that a model trained on long windows uses what lies
# far back in its context, and what the memory stack costs and saves on the way.
#
# The task is `upipe data recall --echo`: facts "=KVK;" (a one-token key K, one of 16 value
# symbols V, the key again) and, 4 .. 2520 tokens later, questions "?KVK;" whose answer V only
# the fact reveals (chance: 1/16). The loss counts the answers and the echoed keys (the echo
# teaches the model to carry each token's predecessor forward: half of the lookup).
#
# Both models start from configs/demo-short.safetensors: configs/demo.json (2 layers, 2 heads,
# 0.2M parameters) trained for 4000 steps on 64-token windows of that task with facts at most
# 60 tokens back, where it answers 84% right. Reaching that point from scratch takes 3,000 to
# more than 8,000 such steps depending on the seed (the lookup appears suddenly), too long and
# too uncertain for this job; DEMO_FROM_SCRATCH=1 does it anyway (8000 steps first).
#
#   1. long windows: T=4096 on 2 ranks with the whole stack: Ulysses (each sequence split over
#      both ranks), UPipe (stages of 2 heads: with 2 heads over 2 ranks, one stage), FSDP,
#      checkpoints offloaded to a file, tiled MLP and loss;
#   2. the twin: as many steps and tokens on the same corpus in 64-token windows (64 per step),
#      on 2 ranks as 2 data-parallel replicas;
#   3. both on 16 held-out 4096-token windows: recall accuracy by distance, side by side, and
#      the pictures (SVG).
#
# About two minutes on two cores. OUT_DIR (default out/) holds everything it
# writes.
set -euo pipefail
upipe=${1:-build/upipe}
scratch=${DEMO_FROM_SCRATCH:-0}
out=${OUT_DIR:-out}
cfg=configs/demo.json
mkdir -p "$out"
MPIEXEC=${MPIEXEC:-mpiexec}
if "$MPIEXEC" --version 2>/dev/null | grep -qi "open mpi"; then
  MPIEXEC="$MPIEXEC --oversubscribe --allow-run-as-root"
fi
run2() { $MPIEXEC -n 2 "$upipe" "$@"; }
say() { printf '\n== %s\n' "$*"; }

T_SHORT=64
T_LONG=${DEMO_T:-4096}
D_LONG=2520 # the farthest fact
KEYS=512
STEPS=${DEMO_STEPS:-600}
COMMON="--threads 1 --grad-clip 0 --weight-decay 0 --lr 3e-3"
STACK="--cp 2 --upipe-heads 2 --fsdp --checkpoint --offload $out --tile-mlp --tile-loss"

say "data: recall corpora with the echo ($KEYS one-token keys, facts 4 .. $D_LONG tokens back)"
"$upipe" data recall --output "$out/long.bin" --mask-output "$out/long.mask" --echo \
  --keys $KEYS --distance $D_LONG --min-distance 4 --seed 2 \
  --tokens $((STEPS * (T_LONG + 1) + 1))
"$upipe" data recall --output "$out/heldout.bin" --mask-output "$out/heldout.mask" --echo \
  --keys $KEYS --distance $D_LONG \
  --min-distance 4 --seed 3 --tokens $((16 * T_LONG + 1))

init=configs/demo-short.safetensors
if [ $scratch = 1 ]; then
  say "0. from scratch: 64-token windows, facts 4 .. 60 tokens back, 8000 steps of 16 windows"
  "$upipe" data recall --output "$out/short.bin" --mask-output "$out/short.mask" --echo \
    --keys $KEYS --distance 60 --min-distance 4 --seed 1 --tokens $((8000 * 16 * 65 + 1))
  run2 train --config $cfg --data "$out/short.bin" --loss-mask "$out/short.mask" --cp 1 \
    --seq-len $T_SHORT --grad-accum 16 --steps 8000 $COMMON --print-every 500 \
    --save "$out/short.safetensors"
  init=$out/short.safetensors
fi

say "memory per rank (--dry-run: planned before allocating, exact for the buffers)"
plan() { # ranks T flags...: the plan's peak
  local n=$1 T=$2
  shift 2
  $MPIEXEC -n "$n" "$upipe" train --config $cfg --data "$out/long.bin" --seq-len "$T" --dry-run \
    "$@" | sed -n 's/^  peak *\([0-9.]* [KMGT]*i*B\).*/\1/p'
}
printf '  %-10s %18s %18s %18s\n' "T" "1 rank, plain" "2 ranks, Ulysses" "2 ranks, stack"
for T in $T_LONG 1048576; do
  printf '  %-10s %18s %18s %18s\n' $T "$(plan 1 $T)" "$(plan 2 $T --cp 2)" "$(plan 2 $T $STACK)"
done

say "1. long windows: T=$T_LONG, $STEPS steps on 2 ranks with the whole stack"
run2 train --config $cfg --init $init --data "$out/long.bin" --loss-mask "$out/long.mask" \
  --seq-len $T_LONG --steps $STEPS $COMMON --print-every 100 $STACK --save "$out/long.safetensors" \
  --log "$out/long.jsonl" --mem-report "$out/long-mem.json"

say "2. the twin: $STEPS steps of $((T_LONG / T_SHORT)) windows of T=$T_SHORT on the same corpus"
run2 train --config $cfg --init $init --data "$out/long.bin" --loss-mask "$out/long.mask" \
  --cp 1 --seq-len $T_SHORT --grad-accum $((T_LONG / T_SHORT)) --steps $STEPS $COMMON \
  --print-every 100 --save "$out/twin.safetensors" --log "$out/twin.jsonl"

say "3. recall on 16 held-out windows of T=$T_LONG, by distance from question to fact"
for m in long twin; do
  run2 eval --config $cfg --init "$out/$m.safetensors" --data "$out/heldout.bin" \
    --loss-mask "$out/heldout.mask" --seq-len $T_LONG --threads 1 --report "$out/eval-$m.json" \
    --svg "$out/loss-$m.svg" --recall-svg "$out/recall-$m.svg" >"$out/eval-$m.txt"
done
"$upipe" plot --log "$out/long.jsonl" --svg "$out/train-long.svg" >/dev/null
# The two tables side by side: the rows after each "distance" header.
rows() { sed -n '/^  distance/,$p' "$1" | tail -n +2; }
printf '  %-18s %9s %14s %14s\n' "distance" "questions" "long windows" "short twin"
paste <(rows "$out/eval-long.txt") <(rows "$out/eval-twin.txt" | awk '{print $NF}') |
  awk '{ printf "  %-18s %9s %14s %14s\n", $1 " " $2, $3, $4, $5 }'
printf '  %-18s %9s %14s %14s\n' "all" "" \
  "$(sed -n 's/^recall: .*accuracy \([0-9.]*\).*/\1/p' "$out/eval-long.txt")" \
  "$(sed -n 's/^recall: .*accuracy \([0-9.]*\).*/\1/p' "$out/eval-twin.txt")"
echo "  chance: 0.062 (16 values)"
echo
echo "wrote $out/: recall-long.svg and recall-twin.svg (accuracy by distance and position),"
echo "loss-*.svg (loss by position in the window), train-long.svg (the training curve),"
echo "eval-*.json (the reports), and the logs and weights of both runs"
