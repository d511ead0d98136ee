#!/usr/bin/env bash
# gpu-check.sh — what the GPU proves, in one prepared run on the GPU machine (DESIGN.md §11).
#
#   tools/gpu-check.sh bundle [DIR]   here, after `make`: the binaries (upipe, libupipe_cuda.so,
#                                     test_backend, st_compare) and every shared library they
#                                     need that a bare machine lacks, packed into DIR/bundle.tar.xz
#                                     (default DIR: gpu/, ignored by git)
#   tools/gpu-check.sh run [DIR] [OUT]  there, from the repository root: unpacks the bundle,
#                                     prints the GPU and --version, runs test_backend (every op
#                                     against the CPU's), tests/scripts/gpu.sh (the whole step
#                                     against the float64 reference, determinism, checkpoints
#                                     across devices, ranks sharing the GPU), bench_gpu_ops (each op's time at the
#                                     1B and 8B shapes) and bench/bench_gpu.sh (speed against
#                                     PyTorch where it is installed), each bounded in time, and
#                                     writes their outputs under OUT (default $OUT, else /tmp).
#                                     ONLY="NAME ..." runs those steps alone (test_backend,
#                                     test_backend_tc, gpu, gpu_tc, bench_gpu_offload,
#                                     bench_gpu_ops, bench_gpu_ops_tc, bench_gpu, bench_gpu_tc);
#                                     each step's limit is NAME_SECONDS-like (see run()).
#   tools/gpu-check.sh long [DIR] [OUT]  there: issue 37's long lengths, one real step each
#                                     (bench/bench_gpu_long.sh: 2-layer 8B shape at 524,288
#                                     tokens, 2-layer 1B shape at 1,048,576), plan and measured
#                                     peaks side by side; minutes of device time, so apart.
# The CUDA libraries are the machine's (/usr/local/cuda/lib64 and the Python wheels' folders).
set -uo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
DIR=${2:-gpu}

bundle() {
  local b=build stage
  [ -x $b/upipe ] && [ -f $b/libupipe_cuda.so ] || { echo "gpu-check: build first (make)"; exit 1; }
  stage=$(mktemp -d /tmp/upipe-bundle.XXXXXX)
  mkdir -p "$stage/build/tests" "$stage/lib" "$stage/bin" "$DIR"
  cp $b/upipe $b/libupipe_cuda.so "$stage/build/"
  cp $b/tests/test_backend $b/tests/st_compare "$stage/build/tests/"
  cp $b/bench_gpu_ops "$stage/build/"
  # MPICH's launcher and its proxy (found beside it, or on PATH), for the ranks that share the GPU
  local hydra
  hydra=$(readlink -f "$(command -v mpiexec)")
  cp "$hydra" "$stage/bin/mpiexec.hydra"
  cp "$(dirname "$hydra")/hydra_pmi_proxy" "$stage/bin/"
  # the libraries of our own build that a machine without Debian's packages lacks (not libc's,
  # not CUDA's: the machine has its own)
  for f in $b/upipe $b/tests/test_backend "$stage"/bin/*; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' |
    sort -u | grep -vE '/(libc|libm|libmvec|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so' |
    grep -vE 'libcu|libnv|libcudnn' | while read -r l; do cp -L "$l" "$stage/lib/"; done
  tar -C "$stage" -cJf "$DIR/bundle.tar.xz" build lib bin
  rm -rf "$stage"
  ls -la "$DIR/bundle.tar.xz"
}

# Runs a step with a time limit, its output to OUT/name.log and the terminal's tail.
step() { # name seconds command...
  local name=$1 secs=$2
  shift 2
  # ONLY="gpu bench_gpu_offload": these steps alone (a sitting's device time is short)
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
  local t0=$SECONDS
  timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - t0)) s"
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}

# Unpacks the bundle and sets the paths (OUT, u: the bundle's root).
unpack() {
  OUT=${3:-${OUT:-/tmp}}
  u=/tmp/upipe-gpu
  rm -rf "$u" && mkdir -p "$u" && tar -C "$u" -xJf "$DIR/bundle.tar.xz" || exit 1
  local wheels
  wheels=$(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(":".join(os.path.join(p, d, "lib") for d in sorted(os.listdir(p))))' 2>/dev/null)
  export TORCH_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  export LD_LIBRARY_PATH="$u/lib:/usr/local/cuda/lib64${wheels:+:$wheels}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export UPIPE_CUDA_MODULE=$u/build/libupipe_cuda.so
  export PATH="$u/bin:$PATH" MPIEXEC="$u/bin/mpiexec.hydra"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
}

long() {
  unpack "$@"
  TAIL=20 step bench_gpu_long "${LONG_SECONDS:-590}" env UPIPE_CUDA_ATTENTION=tc bash bench/bench_gpu_long.sh "$u/build/upipe"
}

run() {
  unpack "$@"
  "$u/build/upipe" --version | tee "$OUT/version.log"
  step test_backend "${BACKEND_SECONDS:-150}" "$u/build/tests/test_backend"
  # the tensor-core attention route (bf16): its ops, then the whole step (the fp32 cases keep
  # the fp32 kernel whatever the route)
  step test_backend_tc "${BACKEND_SECONDS:-150}" env UPIPE_CUDA_ATTENTION=tc "$u/build/tests/test_backend"
  TAIL=40 step gpu "${GPU_SECONDS:-420}" bash tests/scripts/gpu.sh "$u/build/upipe" "$u/build" "$PWD"
  TAIL=40 step gpu_tc "${GPU_SECONDS:-300}" env UPIPE_CUDA_ATTENTION=tc bash tests/scripts/gpu.sh "$u/build/upipe" "$u/build" "$PWD"
  # the offloads against the checkpoints kept on the GPU (tensor-core attention: the step's speed)
  step bench_gpu_offload "${OFFLOAD_SECONDS:-150}" env UPIPE_CUDA_ATTENTION=tc bash bench/bench_gpu_offload.sh "$u/build/upipe"
  TAIL=60 step bench_gpu_ops "${OPS_SECONDS:-120}" sh -c "'$u/build/bench_gpu_ops' 8192 && '$u/build/bench_gpu_ops' 8192 4096 14336 32 8 128 128256"
  TAIL=30 step bench_gpu_ops_tc "${OPS_SECONDS:-120}" env UPIPE_CUDA_ATTENTION=tc sh -c "'$u/build/bench_gpu_ops' 8192 && '$u/build/bench_gpu_ops' 8192 4096 14336 32 8 128 128256"
  [ -f bench/bench_gpu.sh ] && step bench_gpu "${BENCH_SECONDS:-240}" bash bench/bench_gpu.sh "$u/build/upipe"
  [ -f bench/bench_gpu.sh ] && step bench_gpu_tc "${BENCH_SECONDS:-240}" env UPIPE_CUDA_ATTENTION=tc SKIP_TORCH=1 bash bench/bench_gpu.sh "$u/build/upipe"
  return 0
}

case "$cmd" in
  bundle) bundle ;;
  run) run "$@" ;;
  long) long "$@" ;;
  *) sed -n '2,20p' "$0"; exit 1 ;;
esac
