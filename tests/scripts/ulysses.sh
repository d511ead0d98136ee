#!/usr/bin/env bash
# Ulysses context parallelism: with R real mpiexec ranks the loss and every gradient equal the
# single-rank run, for MHA, GQA with NKV % P == 0, GQA with P > NKV (KV replication) and a
# DP x CP mesh; and invalid layouts stop every rank within seconds with one message.
source "$(dirname "$0")/lib.sh"
GQA=$FIX/golden_gqa
TIED=$FIX/golden_tied
sed 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$SRC/configs/tiny.json" >"$TMP/mha.json"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 4000 --distance 64 >/dev/null || bad "data recall"

# Tolerance of the comparison with one rank. Splitting the sequence changes only the order of
# floating-point sums: the projections run on T_loc-row blocks (sgemm blocking) and each weight
# gradient is P partial sums over T_loc tokens added by the all-reduce. fp32 reassociation of
# sums of <= T*C ~ 1e4 terms moves results by ~1e-7..1e-6 of a tensor's scale (measured: <= 4e-7);
# 1e-5 leaves room for other reduction trees (Open MPI) while a misplaced head, a wrong position
# or a missing replica sum changes gradients by O(1) of their scale.
GRAD_RTOL=1e-5
LOSS_RTOL=1e-6



MHA="--config $TMP/mha.json --data $TMP/d.bin --seq-len 64 --seed 7"
run_case mha_1 1 $MHA && for n in 2 4; do run_case mha_$n $n $MHA && compare mha_$n mha_1; done

G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"
run_case gqa_1 1 $G
run_case gqa_2 2 $G && compare gqa_2 gqa_1          # NKV % P == 0: one KV head per rank
run_case gqa_4 4 $G && compare gqa_4 gqa_1          # P > NKV: each KV head on 2 ranks

T3="--config $TIED/config.json --data $TIED/tokens.bin --init $TIED/weights.safetensors --seq-len 33"
run_case tied_1 1 $T3 && run_case tied_3 3 $T3 && compare tied_3 tied_1   # 3 ranks, MHA, tied

# DP x CP mesh: 4 ranks as 2 replicas x 2 context-parallel ranks read sequences 0 and 1; one
# rank with --grad-accum 2 trains on the same two sequences.
run_case mesh_ref 1 $G --grad-accum 2
run_case mesh_4 4 $G --cp 2 && compare mesh_4 mesh_ref
run_case dp_2 2 $G --cp 1 && compare dp_2 mesh_ref

# Invalid layouts: every rank exits non-zero within seconds, the message is printed once. "Within
# seconds" is measured against launching 4 ranks that do nothing (upipe --version) on this host
# and load: 20 s plus 10 times that, below mpirun_n's 300 s (a hang) in any case.
t0=$SECONDS
mpirun_n 4 "$UPIPE" --version >/dev/null 2>&1
LAYOUT_LIMIT=$((20 + 10 * (SECONDS - t0)))
[ "$LAYOUT_LIMIT" -gt 250 ] && LAYOUT_LIMIT=250
bad_layout() { # name phrase ranks args...
  local name=$1 phrase=$2 n=$3 rc=0
  shift 3
  local t0=$SECONDS
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 "$@" >"$TMP/$name.out" 2>&1 || rc=$?
  local dt=$((SECONDS - t0)) count
  count=$(grep -c "upipe: error" "$TMP/$name.out" || true)
  if [ "$rc" -ne 0 ] && [ "$dt" -le "$LAYOUT_LIMIT" ] && [ "$count" -eq 1 ] && grep -q -- "$phrase" "$TMP/$name.out"; then
    ok "$name: exit $rc in ${dt}s: $(grep 'upipe: error' "$TMP/$name.out")"
  else
    bad "$name: exit $rc in ${dt}s, $count messages"; cat "$TMP/$name.out"
  fi
}
bad_layout heads_vs_cp "num_attention_heads (3)" 2 $T3
sed 's/"num_key_value_heads": 2/"num_key_value_heads": 3/; s/"num_attention_heads": 4/"num_attention_heads": 6/' \
  "$SRC/configs/tiny.json" >"$TMP/kv3.json"
bad_layout kv_vs_cp "num_key_value_heads (3)" 2 --config "$TMP/kv3.json" --data "$TMP/d.bin" --seq-len 64
bad_layout seq_vs_cp "--seq-len 66" 4 $MHA --seq-len 66
bad_layout cp_vs_ranks "--cp 3" 4 $MHA --cp 3

# Ranks whose start-up measurement of VDPBF16PS went different ways (a close call on loaded
# cores; UPIPE_TEST_DOT_RATIO stands for it) agree on the row without it and run, with the plain
# 2-rank run's gradients; only where the CPU has AVX512_BF16 (elsewhere no row depends on it).
if [ -z "${UPIPE_KERNEL:-}" ] && "$UPIPE" --version | grep -q "vdpbf16ps"; then
  A="train --quiet --threads 1 --steps 1 --lr 0 $G --cp 2"
  # shellcheck disable=SC2086
  if timeout 300 $MPIEXEC -n 1 env UPIPE_TEST_DOT_RATIO=2 "$UPIPE" $A --save-grads "$TMP/dot.st" \
      : -n 1 env UPIPE_TEST_DOT_RATIO=0.5 "$UPIPE" $A --save-grads "$TMP/dot.st" >"$TMP/dot.out" 2>&1 \
    && UPIPE_KERNEL=avx512 run_case dot_ref 2 $G --cp 2 && cmp -s "$TMP/dot.st" "$TMP/dot_ref.st"; then
    ok "ranks whose VDPBF16PS measurements differ agree on avx512: the forced avx512 run's gradients"
  else bad "ranks whose VDPBF16PS measurements differ"; cat "$TMP/dot.out"; fi
else echo "skipped: ranks that measured VDPBF16PS differently (no AVX512_BF16 here, or UPIPE_KERNEL set)"; fi
finish
