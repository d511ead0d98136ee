#!/usr/bin/env bash
# The kernel choices made by measurement: the OpenBLAS core of the fp32 products (blas_check_core,
# src/kernels/blas_core.c) forced by UPIPE_BLAS_CORE, calibrated where OPENBLAS_CORETYPE names a
# core narrower than the CPU, a candidate whose products are wrong refused; oneDNN's sgemm
# (UPIPE_SGEMM); the bf16 products' route (gemm_bf16.c); ranks that chose differently stopped.
source "$(dirname "$0")/lib.sh" "$@"

core_line() { env "$@" "$UPIPE" --version | sed -n 's/.*openblas \([A-Za-z0-9]*\) (\([^)]*\)).*/\1 \2/p'; }

# The probe a calibration runs in its child: the core's name and a positive rate.
out=$(UPIPE_BLAS_PROBE=1 "$UPIPE")
if [[ $out =~ ^[A-Za-z0-9]+\ ([0-9.]+)$ ]] && awk "BEGIN{exit !(${BASH_REMATCH[1]} > 0)}"; then
  ok "probe: $out"
else
  bad "probe printed '$out'"
fi
out=$(UPIPE_BLAS_PROBE=1 UPIPE_BLAS_PROBE_FAULT=1 "$UPIPE")
[[ $out =~ \ 0\.000$ ]] && ok "a probe with wrong products reports rate 0: $out" ||
  bad "a probe with wrong products printed '$out'"

l=$(core_line UPIPE_BLAS_CORE=Haswell)
[ "$l" = "Haswell UPIPE_BLAS_CORE" ] && ok "UPIPE_BLAS_CORE=Haswell: $l" || bad "UPIPE_BLAS_CORE=Haswell gave '$l'"

# The fp32 products on oneDNN's sgemm (UPIPE_SGEMM): named, and the model's golden figures hold.
l=$(UPIPE_SGEMM=onednn "$UPIPE" --version | grep -o 'fp32 gemm [a-z]* ([^)]*)')
[ "$l" = "fp32 gemm onednn (UPIPE_SGEMM)" ] && ok "UPIPE_SGEMM=onednn: $l" || bad "UPIPE_SGEMM=onednn gave '$l'"
if UPIPE_SGEMM=onednn bash "$SRC/tests/scripts/golden.sh" "$UPIPE" "$BUILD" "$SRC" >"$TMP/golden.out" 2>&1; then
  ok "the golden model on oneDNN's sgemm: $(tail -n 1 "$TMP/golden.out")"
else
  bad "the golden model on oneDNN's sgemm"; cat "$TMP/golden.out"
fi
out=$(UPIPE_SGEMM=mkl "$UPIPE" --version 2>&1) && bad "UPIPE_SGEMM=mkl accepted" ||
  ok "UPIPE_SGEMM=mkl refused: $out"

# Ranks that chose different kernels (here forced: UPIPE_KERNEL on one of two) stop together
# before the first step, with the line that says how to force the same choice on all.
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 8192 >/dev/null
timeout 120 $MPIEXEC -n 1 env UPIPE_KERNEL=portable "$UPIPE" train --config "$SRC/configs/tiny.json" \
  --data "$TMP/d.bin" --seq-len 64 --steps 1 --quiet : -n 1 "$UPIPE" train \
  --config "$SRC/configs/tiny.json" --data "$TMP/d.bin" --seq-len 64 --steps 1 --quiet >"$TMP/mix.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "the ranks chose different kernels" "$TMP/mix.out"; then
  ok "ranks with different kernels refused (rc $rc): $(grep -m1 'different kernels' "$TMP/mix.out" | cut -c1-90)..."
else
  bad "ranks with different kernels: rc $rc"; cat "$TMP/mix.out"
fi

# The bf16 products' route measured (where the CPU has AMX-BF16; here forced): named with its
# ratio, and oneDNN's taken exactly when that ratio reaches 1.5.
grep -qw amx_bf16 /proc/cpuinfo || echo "note: this CPU has no AMX-BF16; the route is measured only under UPIPE_BF16_CALIBRATE=1 here"
l=$(UPIPE_BF16_CALIBRATE=1 "$UPIPE" --version | grep -o 'bf16 gemm [a-z]* ([^)]*)')
if [[ $l =~ ^bf16\ gemm\ ([a-z]+)\ \(onednn\ ([0-9.]+)x\ packed,\ measured\)$ ]]; then
  want=$(awk "BEGIN{print (${BASH_REMATCH[2]} >= 1.5) ? \"onednn\" : \"packed\"}")
  [ "${BASH_REMATCH[1]}" = "$want" ] && ok "bf16 route measured: $l" || bad "bf16 route: $l"
elif UPIPE_BF16_CALIBRATE=1 "$UPIPE" --version | grep -q 'bf16 gemm packed,'; then
  ok "oneDNN's bf16 gemm does not run on this CPU: packed, not measured"
else
  bad "bf16 route under UPIPE_BF16_CALIBRATE=1: '$l'"
fi

avx512=1
for f in avx512f avx512bw avx512dq avx512vl; do grep -qw $f /proc/cpuinfo || avx512=0; done
if [ $avx512 = 0 ]; then
  echo "skip: this CPU lacks AVX-512, so no core is narrower than it under OPENBLAS_CORETYPE=Haswell"
  finish; exit
fi
l=$(core_line UPIPE_BLAS_CORE=SkylakeX)
[ "$l" = "SkylakeX UPIPE_BLAS_CORE" ] && ok "UPIPE_BLAS_CORE=SkylakeX: $l" || bad "UPIPE_BLAS_CORE=SkylakeX gave '$l'"
# Haswell's kernels on an AVX-512 CPU: SkylakeX is measured against them and taken unless it
# measures below 0.8x.
l=$(core_line OPENBLAS_CORETYPE=Haswell)
if [[ $l =~ ^SkylakeX\ calibrated:\ ([0-9.]+)x\ Haswell ]]; then
  awk "BEGIN{exit !(${BASH_REMATCH[1]} >= 0.8)}" && ok "calibrated: $l" || bad "taken below the margin: $l"
elif [ "$l" = "Haswell OPENBLAS_CORETYPE" ]; then
  ok "SkylakeX measured below 0.8x Haswell here: kept $l"
else
  bad "OPENBLAS_CORETYPE=Haswell gave '$l'"
fi
# The same with the candidate's products wrong: never taken.
l=$(core_line OPENBLAS_CORETYPE=Haswell UPIPE_BLAS_PROBE_FAULT=1)
[ "$l" = "Haswell OPENBLAS_CORETYPE" ] && ok "a candidate with wrong products is refused: $l" ||
  bad "a candidate with wrong products gave '$l'"
finish
