#!/usr/bin/env bash
# Refactor guard: a change that claims to leave the mathematics alone must leave every byte of the
# gradients and weights alone too. This script trains 3 steps of a set of configurations that
# covers every technique and combination the tests use (1, 2, 3 and 4 ranks; MHA, GQA with
# NKV % P == 0 and with P > NKV; tied embeddings; every valid UPipe U; FSDP; checkpoint, offload,
# tiles; grad-accum and a DP x CP mesh; multi-tile attention) and writes, per configuration, the
# first step's raw gradients (--save-grads) and the weights after 3 steps (--save).
#
# usage: tools/refactor_guard.sh run BIN OUTDIR      outputs of one binary, with SHA256SUMS, in
#                                                    OUTDIR/PATH for each kernel path
#        tools/refactor_guard.sh check REFDIR [BIN]  runs BIN (default build/upipe) and requires
#                                                    the files of REFDIR (an earlier `run`)
#        tools/refactor_guard.sh against REV [BIN]   builds REV (e.g. main, HEAD~3) in a temporary
#                                                    worktree, runs both, and requires identical
#                                                    files (BIN default build/upipe)
# Each configuration runs once per kernel path this CPU runs (UPIPE_KERNEL=avx512, avx2,
# portable; GUARD_KERNELS="..." names a subset). Results depend on the kernel path and the
# thread count, so compare two binaries on one machine in one sitting; every rank runs one thread.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
MPIEXEC=${MPIEXEC:-mpiexec}
if "$MPIEXEC" --version 2>/dev/null | grep -qi "open mpi"; then
  MPIEXEC="$MPIEXEC --oversubscribe --allow-run-as-root"
fi

run_all() { # BIN OUT
  local bin=$1 out=$2 fix=$SRC/tests/fixtures
  mkdir -p "$out"
  local tmp
  tmp=$(mktemp -d /tmp/upipe-guard.XXXXXX)
  sed 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' configs/tiny.json >"$tmp/mha.json"
  sed 's/"vocab_size": 256/"vocab_size": 4096/' configs/tiny.json >"$tmp/v4k.json"
  "$bin" data recall --output "$tmp/d.bin" --tokens 20000 --distance 64 >/dev/null
  local G="--config $fix/golden_gqa/config.json --data $fix/golden_gqa/tokens.bin --init $fix/golden_gqa/weights.safetensors --seq-len 80"
  local T3="--config $fix/golden_tied/config.json --data $fix/golden_tied/tokens.bin --init $fix/golden_tied/weights.safetensors --seq-len 33"
  local M="--config $tmp/mha.json --data $tmp/d.bin --seq-len 64 --seed 7"
  local GL="--config configs/tiny.json --data $tmp/d.bin --seq-len 512 --seed 3" # multi-tile attention
  local V="--config $tmp/v4k.json --data $tmp/d.bin --seq-len 256 --seed 5"
  local n=0
  case_() { # name ranks args...
    local name=$1 r=$2
    shift 2
    n=$((n + 1))
    if ! timeout 600 $MPIEXEC -n "$r" "$bin" train --quiet --threads 1 --steps 3 --lr 1e-3 "$@" \
        --save-grads "$out/$name.grads.st" --save "$out/$name.weights.st" >"$tmp/$name.out" 2>&1; then
      echo "refactor_guard: $name failed:" >&2
      cat "$tmp/$name.out" >&2
      exit 1
    fi
  }
  for r in 1 2 4; do case_ mha_$r $r $M; done
  for r in 1 2 4; do case_ gqa_$r $r $G; done                       # P > NKV at 4 ranks
  case_ tied_1 1 $T3
  case_ tied_3 3 $T3
  case_ mesh_4 4 $G --cp 2
  case_ dp_2 2 $G --cp 1
  case_ accum_1 1 $G --grad-accum 2
  for U in 1 2 4; do case_ upipe_mha_u${U}_1 1 $M --upipe-heads $U; done
  for U in 2 4; do case_ upipe_mha_u${U}_2 2 $M --upipe-heads $U; done
  case_ upipe_mha_u4_4 4 $M --upipe-heads 4
  for U in 1 2 4; do case_ upipe_gqa_u${U}_1 1 $G --upipe-heads $U; done
  for U in 2 4; do case_ upipe_gqa_u${U}_2 2 $G --upipe-heads $U; done
  case_ upipe_gqa_u4_4 4 $G --upipe-heads 4                        # P > NKV, staged
  case_ upipe_tied_u1_1 1 $T3 --upipe-heads 1
  case_ upipe_tied_u3_3 3 $T3 --upipe-heads 3
  case_ long_1 1 $GL
  case_ long_2 2 $GL
  case_ long_u2_2 2 $GL --upipe-heads 2
  case_ ckpt_1 1 $V --checkpoint
  case_ offload_2 2 $V --offload "$tmp"
  case_ tiles_1 1 $V --tile-mlp 100 --tile-loss 64
  case_ stack_2 2 $V --offload "$tmp" --tile-mlp --tile-loss --upipe-heads 2
  case_ stack_4 4 $V --checkpoint --tile-mlp 96 --tile-loss 80 --upipe-heads 4
  for r in 2 4; do case_ fsdp_$r $r $G --fsdp; done
  case_ fsdp_cp2_4 4 $G --fsdp --cp 2 --grad-accum 2
  case_ fsdp_tied_3 3 $T3 --fsdp --grad-accum 2
  case_ fsdp_stack_2 2 $V --fsdp --offload "$tmp" --tile-mlp --tile-loss --upipe-heads 2
  case_ fsdp_upipe_4 4 $G --fsdp --cp 2 --upipe-heads 2 --checkpoint
  # bf16: storage, exchanges, FSDP's gathered copy and the products in the run's type
  case_ bf16_1 1 $V --dtype bf16
  case_ bf16_long_2 2 $GL --dtype bf16                              # multi-tile attention
  case_ bf16_stack_2 2 $V --dtype bf16 --offload "$tmp" --tile-mlp --tile-loss --upipe-heads 2
  case_ bf16_stack_4 4 $V --dtype bf16 --checkpoint --tile-mlp 96 --tile-loss 80 --upipe-heads 4
  case_ bf16_fsdp_4 4 $G --dtype bf16 --fsdp --cp 2 --upipe-heads 2 --checkpoint --grad-accum 2
  case_ bf16_fsdp_stack_2 2 $V --dtype bf16 --fsdp --offload "$tmp" --tile-mlp --tile-loss --upipe-heads 2
  case_ bf16_save_1 1 $M --dtype bf16 --save-dtype bf16 --upipe-heads 2
  rm -rf "$tmp"
  (cd "$out" && sha256sum -- *.st >SHA256SUMS)
  echo "refactor_guard: $n configurations, outputs in $out"
}

# The kernel paths to run: GUARD_KERNELS, or every path BIN's CPU runs.
kernels_of() { # BIN
  local k
  for k in ${GUARD_KERNELS:-avx512 avx2 portable}; do
    if UPIPE_KERNEL=$k "$1" --version >/dev/null 2>&1; then echo "$k"; fi
  done
}

run_paths() { # BIN OUT
  local k
  for k in $(kernels_of "$1"); do
    echo "refactor_guard: kernel path $k"
    UPIPE_KERNEL=$k run_all "$1" "$2/$k"
  done
}

compare() { # REFDIR NEWDIR LABEL
  local k bad=0 seen=0
  for k in $(kernels_of "$bin"); do
    seen=$((seen + 1))
    if ! diff "$1/$k/SHA256SUMS" "$2/$k/SHA256SUMS"; then
      echo "refactor_guard: kernel path $k: outputs differ from $3 (files above)" >&2
      bad=1
    fi
  done
  [ "$seen" -gt 0 ] || { echo "refactor_guard: no kernel path ran" >&2; exit 1; }
  [ "$bad" -eq 0 ] || exit 1
  echo "refactor_guard: byte-identical to $3 on $(kernels_of "$bin" | tr '\n' ' ')"
}

case "${1:-}" in
run)
  [ $# -eq 3 ] || { echo "usage: $0 run BIN OUTDIR" >&2; exit 2; }
  run_paths "$(realpath "$2")" "$3"
  ;;
check)
  [ $# -ge 2 ] || { echo "usage: $0 check REFDIR [BIN]" >&2; exit 2; }
  ref=$(realpath "$2")
  bin=$(realpath "${3:-build/upipe}")
  work=$(mktemp -d /tmp/upipe-guard-new.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  run_paths "$bin" "$work"
  compare "$ref" "$work" "$ref"
  ;;
against)
  [ $# -ge 2 ] || { echo "usage: $0 against REV [BIN]" >&2; exit 2; }
  rev=$2
  bin=$(realpath "${3:-build/upipe}")
  work=$(mktemp -d /tmp/upipe-guard-ref.XXXXXX)
  git worktree add --detach "$work/src" "$rev" >/dev/null
  trap 'git worktree remove --force "$work/src" >/dev/null 2>&1; rm -rf "$work"' EXIT
  cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DUPIPE_CUDA=OFF >/dev/null
  cmake --build "$work/build" -j "$(nproc)" --target upipe >/dev/null
  run_paths "$work/build/upipe" "$work/ref"
  run_paths "$bin" "$work/new"
  compare "$work/ref" "$work/new" "$rev"
  ;;
*)
  echo "usage: $0 run BIN OUTDIR | $0 check REFDIR [BIN] | $0 against REV [BIN]" >&2
  exit 2
  ;;
esac
