#!/usr/bin/env bash
# CI under AddressSanitizer + UndefinedBehaviorSanitizer: the Debug build (CMakeLists.txt:
# -O0 -g -fsanitize=address,undefined) in build-asan/, the ctest labels unit, golden and errors,
# and 2-rank MPI cases (test_comm_np2; `upipe train --cp 2 --fsdp` stopped at step 2 with a
# checkpoint, then resumed from it to step 3; validation, `upipe eval` and `upipe plot`). Every sanitizer report is written to build-asan/sanitizer-logs/ and any
# report fails the run, also where a test expects a non-zero exit (tests/scripts/bad_input.sh
# accepts status 1, which is also ASan's). Third-party leaks: tests/sanitize/lsan.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${ASAN_BUILD:-build-asan}
JOBS=${JOBS:-$(nproc)}

t0=$(date +%s)
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DUPIPE_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j "$JOBS" >"$BUILD.build.log" 2>&1 || { tail -n 50 "$BUILD.build.log"; exit 1; }
t1=$(date +%s)
echo "sanitize: build $((t1 - t0)) s"

LOGS=$SRC/$BUILD/sanitizer-logs
rm -rf "$LOGS"
mkdir -p "$LOGS"
# One log_path for both (in one gcc binary the runtimes share it); a file appears only when
# something is reported. UBSan halts at the first report so the test that hit it fails.
export ASAN_OPTIONS="log_path=$LOGS/san:detect_leaks=1:check_initialization_order=1:strict_string_checks=1"
export UBSAN_OPTIONS="log_path=$LOGS/san:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$SRC/tests/sanitize/lsan.supp:print_suppressions=0"
export OMP_NUM_THREADS=1
export UPIPE_TEST_QUICK=1 # the unit tests' smaller case lists (test_attention_bf16)

failed=0
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS" -L 'unit|golden|errors' &&
  ctest --output-on-failure -R '^test_comm_np2$') || failed=1
t2=$(date +%s)
echo "sanitize: ctest unit, golden, errors, test_comm_np2: $((t2 - t1)) s"

MPIEXEC=${MPIEXEC:-mpiexec}
if "$MPIEXEC" --version 2>/dev/null | grep -qi "open mpi"; then
  MPIEXEC="$MPIEXEC --oversubscribe --allow-run-as-root"
fi
TMP=$(mktemp -d /tmp/upipe-sanitize.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
G=tests/fixtures/golden_gqa
train() { # extra-args...
  timeout 300 $MPIEXEC -n 2 "$BUILD/upipe" train --quiet --threads 1 --config $G/config.json \
    --data $G/tokens.bin --init $G/weights.safetensors --seq-len 80 --cp 2 --fsdp \
    --steps 3 --ckpt-dir "$TMP/ck" "$@" >>"$TMP/train.out" 2>&1
}
if train --stop-at 2 && train --resume; then
  echo "sanitize: 2-rank train --cp 2 --fsdp, checkpoint and resume: ok"
else
  echo "SANITIZE FAIL: 2-rank train"; cat "$TMP/train.out"; failed=1
fi
# bf16 (DESIGN.md §5.1): the typed kernels, bf16 exchanges and gather slots, the offload store
# in bf16, on 2 ranks with UPipe's pipe and tiles; and unsharded (the weights rounded into slots).
mkdir -p "$TMP/store"
B="--quiet --threads 1 --config $G/config.json --data $G/tokens.bin --init $G/weights.safetensors --seq-len 80 --steps 2 --dtype bf16"
if timeout 300 $MPIEXEC -n 2 "$BUILD/upipe" train $B --fsdp --offload "$TMP/store" --tile-mlp 16 \
     --tile-loss 7 --upipe-heads 2 --upipe-overlap-on-node >>"$TMP/bf16.out" 2>&1 &&
   timeout 300 $MPIEXEC -n 2 "$BUILD/upipe" train $B --checkpoint --save "$TMP/b.st" --save-dtype bf16 \
     >>"$TMP/bf16.out" 2>&1; then
  echo "sanitize: 2-rank bf16 train (FSDP, offload, tiles, the pipe; unsharded): ok"
else
  echo "SANITIZE FAIL: bf16 train"; cat "$TMP/bf16.out"; failed=1
fi
# Exchanges staged through host buffers (ranks on a GPU, DESIGN.md §11, here through the CPU's
# memcpy: the stages' sizes), and the optimizer offloaded with the gradients in the backend's
# space over 2 replicas.
if UPIPE_COMM_STAGE=1 timeout 300 $MPIEXEC -n 2 "$BUILD/upipe" train $B --cp 2 --fsdp \
     --upipe-heads 2 >>"$TMP/staged.out" 2>&1 &&
   UPIPE_COMM_STAGE=1 timeout 300 $MPIEXEC -n 2 "$BUILD/upipe" train $B --cp 1 --offload-optimizer \
     --grads-on-device --save "$TMP/g.st" >>"$TMP/staged.out" 2>&1; then
  echo "sanitize: 2-rank staged exchanges (FSDP, UPipe; replicas with the optimizer offloaded): ok"
else
  echo "SANITIZE FAIL: staged"; cat "$TMP/staged.out"; failed=1
fi
t3=$(date +%s)
echo "sanitize: 2-rank train $((t3 - t2)) s"

# Evaluation: 2-rank validation during training, `upipe eval` with FSDP, UPipe and loss tiles
# on a recall corpus (report and both pictures), and `upipe plot` of the log.
"$BUILD/upipe" data recall --output "$TMP/r.bin" --tokens 3000 --distance 64 >/dev/null
T1="--quiet --threads 1 --config configs/tiny.json --data $TMP/r.bin"
if timeout 300 $MPIEXEC -n 2 "$BUILD/upipe" train $T1 --seq-len 128 --steps 2 --fsdp \
     --val-data "$TMP/r.bin" --val-every 1 --log "$TMP/v.jsonl" --save "$TMP/w.st" >>"$TMP/eval.out" 2>&1 &&
   timeout 300 $MPIEXEC -n 2 "$BUILD/upipe" eval $T1 --init "$TMP/w.st" --seq-len 256 --windows 3 \
     --fsdp --upipe-heads 2 --tile-loss 64 --report "$TMP/r.json" --svg "$TMP/l.svg" \
     --recall-svg "$TMP/h.svg" >>"$TMP/eval.out" 2>&1 &&
   "$BUILD/upipe" plot --log "$TMP/v.jsonl" --svg "$TMP/p.svg" >>"$TMP/eval.out" 2>&1; then
  echo "sanitize: 2-rank validation, eval and plot: ok"
else
  echo "SANITIZE FAIL: eval"; cat "$TMP/eval.out"; failed=1
fi
echo "sanitize: eval $(($(date +%s) - t3)) s"

if [ -n "$(ls -A "$LOGS")" ]; then
  echo "SANITIZE FAIL: sanitizer reports in $LOGS:"
  for f in "$LOGS"/*; do echo "== $f"; head -n 40 "$f"; done
  failed=1
fi
echo "sanitize: total $((t3 - t0)) s, $([ $failed -eq 0 ] && echo ok || echo FAILED)"
exit $failed
