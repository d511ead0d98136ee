#!/usr/bin/env bash
# Ranks on a GPU exchange through host memory (DESIGN.md §11 "Ranks on a GPU"): each tensor of an
# exchange goes out to a host stage, MPI moves the stages, and it comes back. UPIPE_COMM_STAGE=1
# routes a CPU run through the same code (the copies are memcpy), so the staged run must give the
# plain run's bits: the weights after 3 AdamW steps and the first step's gradients, with the
# Ulysses exchanges (--cp 2, --cp 4 with the KV heads replicated), UPipe's stages, the pipe asked
# for (off when staged: the plain run runs it, and the pipe gives the same bits), checkpointing,
# bf16, FSDP's gathers and reduce-scatters (a tied unit, micro-batches, and with --cp), and the
# data-parallel all-reduce. Also: eval's loss, the staged buffers in the plan (the plan equals the
# measured peak), and the plan of ranks sharing one GPU (planned with --device-mem): each rank's
# share of its free memory, and the line that refuses a plan over that share.
source "$(dirname "$0")/lib.sh"
GQA=$FIX/golden_gqa
TIED=$FIX/golden_tied
G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"
T3="--config $TIED/config.json --data $TIED/tokens.bin --init $TIED/weights.safetensors --seq-len 33"

# A case: the plain run and the staged one (the same flags), weights after 3 steps and gradients
# of the first.
staged() { # name ranks args...
  local name=$1 n=$2
  shift 2
  train_run "$name" "$n" "$@" --steps 3 --lr 1e-3 --save "$TMP/$name.w.st" \
    && UPIPE_COMM_STAGE=1 train_run "${name}_s" "$n" "$@" --steps 3 --lr 1e-3 --save "$TMP/${name}_s.w.st" \
    && same_file "$name: weights after 3 steps" "$TMP/$name.w.st" "$TMP/${name}_s.w.st"
  train_run "$name.g" "$n" "$@" --steps 1 --lr 0 --save-grads "$TMP/$name.g.st" \
    && UPIPE_COMM_STAGE=1 train_run "${name}_s.g" "$n" "$@" --steps 1 --lr 0 --save-grads "$TMP/${name}_s.g.st" \
    && same_file "$name: gradients" "$TMP/$name.g.st" "$TMP/${name}_s.g.st"
}

staged cp2 2 $G --cp 2
staged cp4_upipe_bf16 4 $G --cp 4 --upipe-heads 4 --dtype bf16 # 2 KV heads on 4 ranks
staged cp2_pipe_ckpt 2 $G --cp 2 --upipe-heads 2 --upipe-overlap-on-node --checkpoint
staged fsdp_tied_accum 2 $T3 --cp 1 --dtype bf16 --fsdp --grad-accum 2
staged fsdp_cp2 4 $G --cp 2 --fsdp
staged dp2_accum 2 $G --cp 1 --grad-accum 2

# The pipe: the plain run ran it, the staged one did not (nothing runs beside a staged exchange's
# copies) and says its exchanges are staged; its comm category holds the host stages.
mem_comm() { json_field "$(tr -d '\n' <"$1")" comm; }
for f in "" UPIPE_COMM_STAGE=1; do
  name=pipe${f:+_s}
  env $f timeout 300 $MPIEXEC -n 2 "$UPIPE" train $G --cp 2 --upipe-heads 2 --upipe-overlap-on-node \
    --steps 1 --threads 1 --mem-report "$TMP/$name.mem" >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; }
done
if grep -q "exchanges overlapped with attention" "$TMP/pipe.out" && ! grep -q "staged" "$TMP/pipe.out" \
  && grep -q "exchanges staged through host memory, UPipe stages of 2 heads$" "$TMP/pipe_s.out"; then
  ok "the pipe runs plain, not staged: $(grep -o 'exchanges staged.*' "$TMP/pipe_s.out")"
else bad "the pipe or the staged line"; grep layout "$TMP/pipe.out" "$TMP/pipe_s.out"; fi
p=$(mem_comm "$TMP/pipe.mem"); s=$(mem_comm "$TMP/pipe_s.mem")
if is_num "$p" && is_num "$s" && [ "$s" -gt "$p" ]; then ok "staged: comm holds the host stages ($s bytes against $p)"
else bad "staged: comm '$s' not above the plain run's '$p'"; fi

# eval over 2 ranks: the same loss staged.
for f in "" UPIPE_COMM_STAGE=1; do
  name=eval${f:+_s}
  env $f timeout 300 $MPIEXEC -n 2 "$UPIPE" eval $G --cp 2 --threads 1 --quiet --report "$TMP/$name.json" \
    >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; }
done
same_file "eval --cp 2: the report" "$TMP/eval.json" "$TMP/eval_s.json"

# The plan of a staged run is its measured peak, to the byte (the stages are counted where they
# are allocated).
F="$G --cp 2 --upipe-heads 2 --fsdp --threads 1 --steps 1"
UPIPE_COMM_STAGE=1 timeout 300 $MPIEXEC -n 2 "$UPIPE" train $F --dry-run --mem-report "$TMP/plan.mem" >"$TMP/plan.out" 2>&1 \
  && UPIPE_COMM_STAGE=1 timeout 300 $MPIEXEC -n 2 "$UPIPE" train $F --mem-report "$TMP/run.mem" >"$TMP/run.out" 2>&1 \
  || { bad "plan or run failed"; cat "$TMP/plan.out" "$TMP/run.out"; }
a=$(buffer_peak "$TMP/plan.mem"); b=$(buffer_peak "$TMP/run.mem")
if is_num "$a" && [ "$a" = "$b" ]; then ok "staged: plan = measured peak ($a bytes)"; else bad "staged: plan '$a' vs measured '$b'"; fi

# Two ranks planned on one GPU (--device-mem: a login node's plan): each plans against half of
# its free memory, the stages in pinned memory; a GPU that holds one rank's plan but not two
# is refused with the share named.
P="--config $TIED/config.json --seq-len 4096 --dtype bf16 --dry-run --device cuda --cp 1 --fsdp"
timeout 300 $MPIEXEC -n 2 "$UPIPE" train $P --device-mem 8GiB --mem-report "$TMP/gpu2.mem" >"$TMP/gpu2.out" 2>&1 \
  || { bad "2-rank GPU plan failed"; cat "$TMP/gpu2.out"; }
if grep -q "^GPU (no GPU: planned with --device-mem): the plan's .* fit in 4.00 GiB (its share: 2 ranks on this GPU)" "$TMP/gpu2.out"; then
  ok "2 ranks on one GPU: $(grep '^GPU' "$TMP/gpu2.out" | head -n1)"
else bad "2 ranks on one GPU: no share in the fit line"; cat "$TMP/gpu2.out"; fi
if python3 - "$TMP/gpu2.mem" >"$TMP/gpu2.why" 2>&1 <<'EOF'; then ok "2 ranks on one GPU: $(cat "$TMP/gpu2.why")"; else bad "2 ranks on one GPU: the stages"; cat "$TMP/gpu2.why"; fi
import json, sys
r = json.load(open(sys.argv[1]))
pin = r["pinned_categories"]["comm"]
assert pin > 0, "no host stages in pinned memory: %s" % r["pinned_categories"]
print("the host stages in pinned memory (comm %d bytes)" % pin)
EOF
need=$(sed -n "s/^GPU ([^)]*): the plan's \([0-9.]*\) MiB.*/\1/p" "$TMP/gpu2.out" | head -n1)
# a GPU with 1.5 times one rank's plan and the backend's 128 MiB: it holds one rank, not two
if is_num "$need"; then
  mib=$(awk -v n="$need" 'BEGIN { printf "%d", (n + 129) * 3 / 2 }')
  timeout 300 $MPIEXEC -n 2 "$UPIPE" train $P --device-mem "${mib}MiB" >"$TMP/gpu2no.out" 2>&1
  "$UPIPE" train $P --device-mem "${mib}MiB" >"$TMP/gpu1.out" 2>&1
  if grep -q "does not fit: .* (for each of the 2 ranks that share it: fewer ranks per GPU)" "$TMP/gpu2no.out" \
    && grep -q "the plan's .* fit in" "$TMP/gpu1.out"; then
    ok "2 ranks on one GPU: over the share: $(grep -o 'does not fit: .*' "$TMP/gpu2no.out" | head -n1 | cut -c1-160)"
  else bad "2 ranks on one GPU: a plan over the share"; cat "$TMP/gpu2no.out" "$TMP/gpu1.out"; fi
else bad "2 ranks on one GPU: no plan size in '$(grep '^GPU' "$TMP/gpu2.out")'"; fi

# UPIPE_COMM names the transport of a GPU run: a misspelt one, or NCCL without a GPU, is refused
# in one line.
for v in bogus nccl; do
  if UPIPE_COMM=$v "$UPIPE" train $G --steps 1 >"$TMP/uc_$v.out" 2>&1; then bad "UPIPE_COMM=$v accepted"
  elif [ "$(wc -l <"$TMP/uc_$v.out")" -eq 1 ] && grep -q "^upipe: error: UPIPE_COMM=" "$TMP/uc_$v.out"; then
    ok "UPIPE_COMM=$v refused: $(cat "$TMP/uc_$v.out")"
  else bad "UPIPE_COMM=$v: unexpected output"; cat "$TMP/uc_$v.out"; fi
done
finish
