#!/usr/bin/env bash
# The whole step on one GPU (--device cuda, DESIGN.md §11): the loss and every gradient against
# the float64 PyTorch reference at the CPU's tolerances (golden.sh, docs.sh, bf16.sh), with GQA,
# a tied embedding, packed documents, a loss mask, UPipe's head stages, checkpointing and both
# tiles; two runs give the same bytes; a checkpoint written on the GPU resumes on the CPU and the
# reverse; --offload-optimizer gives the on-GPU optimizer's weights and --offload (to pinned
# memory) --checkpoint's; ranks that share the GPU give one rank's gradients; the plans equal the
# measured peaks; a hung kernel is named by the watchdog. Without a GPU (or without the module) it says why in one line and is skipped (77).
source "$(dirname "$0")/lib.sh"
ST_COMPARE=$BUILD/tests/st_compare
GQA=$FIX/golden_gqa
TIED=$FIX/golden_tied
D=$FIX/golden_docs

if ! "$UPIPE" --version >"$TMP/version" 2>&1 || ! grep -q '^cuda: NVIDIA\|^cuda: .*sm_' "$TMP/version"; then
  echo "gpu: skipped: $(grep '^cuda:' "$TMP/version" || tail -n1 "$TMP/version")"
  exit 77
fi
grep '^cuda:' "$TMP/version"

# One step on the GPU, one rank (no mpiexec: a singleton), writing gradients and the log.
run_gpu() { # name args...
  local name=$1
  shift
  if ! timeout 300 "$UPIPE" train --quiet --device cuda --steps 1 --lr 0 "$@" \
      --save-grads "$TMP/$name.st" --log "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1; then
    bad "$name: run failed"; cat "$TMP/$name.out"; return 1
  fi
}
against_ref() { # name expected-json expected-grads rtol loss-rtol args...
  local name=$1 ej=$2 eg=$3 grtol=$4 lrtol=$5
  shift 5
  run_gpu "$name" "$@" && check_ref "$name" "$ej" "$eg" "$grtol" "$lrtol"
}

# fp32: golden.sh's and docs.sh's bound. The GPU sums in another order than the CPU (cuBLASLt's
# blocking, the attention's tiles), both in fp32 against float64: the difference from the
# reference is still fp32 rounding alone, ~1e-6 of a tensor's scale over 2 layers, below 1e-4;
# any wrong index, sign, mask or missing term moves a gradient by O(1) of its scale.
F_G=1e-4
F_L=1e-5
G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"
T3="--config $TIED/config.json --data $TIED/tokens.bin --init $TIED/weights.safetensors --seq-len 33"
DOCS="--config $D/config.json --data $D/tokens.bin --init $D/weights.safetensors --seq-len 300 --doc-sep 256"
EG=$GQA/expected_grads.safetensors
EJ=$GQA/expected.json
against_ref gqa "$EJ" "$EG" $F_G $F_L $G
against_ref gqa_u1 "$EJ" "$EG" $F_G $F_L $G --upipe-heads 1
against_ref gqa_u2 "$EJ" "$EG" $F_G $F_L $G --upipe-heads 2
against_ref gqa_stack "$EJ" "$EG" $F_G $F_L $G --checkpoint --tile-mlp 16 --tile-loss 7 --upipe-heads 2
against_ref tied "$TIED/expected.json" "$TIED/expected_grads.safetensors" $F_G $F_L $T3
against_ref docs "$D/expected.json" "$D/expected_grads.safetensors" $F_G $F_L $DOCS
against_ref docs_u4 "$D/expected.json" "$D/expected_grads.safetensors" $F_G $F_L $DOCS --upipe-heads 4
against_ref mask "$D/expected_mask.json" "$D/expected_mask_grads.safetensors" $F_G $F_L $DOCS \
  --loss-mask "$D/mask.bin" --checkpoint --tile-mlp 64 --tile-loss 48

# bf16: bf16.sh's bound (each stored tensor rounded once to 8 significant bits, sums in fp32:
# 15 L u = 0.06 of a tensor's scale for the gradients, 11 u = 0.021 for the loss).
B_G=0.06
B_L=0.021
against_ref gqa_bf16 "$EJ" "$EG" $B_G $B_L $G --dtype bf16
against_ref stack_bf16 "$EJ" "$EG" $B_G $B_L $G --dtype bf16 --checkpoint --tile-mlp 16 \
  --tile-loss 7 --upipe-heads 2
against_ref tied_bf16 "$TIED/expected.json" "$TIED/expected_grads.safetensors" $B_G $B_L $T3 --dtype bf16
against_ref docs_bf16 "$D/expected.json" "$D/expected_grads.safetensors" $B_G $B_L $DOCS --dtype bf16

# Deterministic: the same run twice gives the same bytes (fp32 and bf16), and checkpointing
# recomputes the forward exactly.
same() { # a b what
  if cmp -s "$TMP/$1.st" "$TMP/$2.st"; then ok "$3"; else bad "$3"; fi
}
run_gpu gqa_again $G && same gqa gqa_again "fp32: two runs give the same gradients, byte for byte"
run_gpu docs_bf16_again $DOCS --dtype bf16 &&
  same docs_bf16 docs_bf16_again "bf16: two runs give the same gradients, byte for byte"
run_gpu gqa_ckpt $G --checkpoint && same gqa gqa_ckpt "--checkpoint: the same gradients as without"

# Checkpoints move between the devices in one format: 4 steps on the GPU saved at step 2 and
# resumed on the GPU equal the straight run; the same checkpoint resumed on the CPU stays within
# the fp32 bound of the GPU's weights, and a CPU checkpoint resumes on the GPU.
train4() { # name device args...
  local name=$1 dev=$2
  shift 2
  timeout 300 "$UPIPE" train --quiet --device "$dev" $G --steps 4 --lr 1e-3 --ckpt-every 2 \
    --ckpt-dir "$TMP/$name.ck" --save "$TMP/$name.st" --log "$TMP/$name.jsonl" "$@" \
    >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
if train4 straight cuda && train4 stopped cuda --stop-at 2 &&
  cp -r "$TMP/stopped.ck" "$TMP/back.ck" && train4 stopped cuda --resume; then
  same straight stopped "a GPU run resumed at step 2 equals the straight run, byte for byte"
fi
if train4 cpu_half cpu --stop-at 2 && cp -r "$TMP/cpu_half.ck" "$TMP/mixed.ck" &&
  train4 mixed cuda --resume; then
  if "$ST_COMPARE" "$TMP/mixed.st" "$TMP/straight.st" --rtol 1e-4 >"$TMP/mixed.cmp" 2>&1; then
    ok "a CPU checkpoint resumes on the GPU: $(tail -n1 "$TMP/mixed.cmp")"
  else bad "a CPU checkpoint resumed on the GPU"; cat "$TMP/mixed.cmp"; fi
fi
if [ -d "$TMP/back.ck" ] && train4 back cpu --resume; then
  if "$ST_COMPARE" "$TMP/back.st" "$TMP/straight.st" --rtol 1e-4 >"$TMP/back.cmp" 2>&1; then
    ok "a GPU checkpoint resumes on the CPU: $(tail -n1 "$TMP/back.cmp")"
  else bad "a GPU checkpoint resumed on the CPU"; cat "$TMP/back.cmp"; fi
fi
# --offload-optimizer: masters, gradients and moments in pinned host memory, AdamW on the CPU
# cores. Its ops give the device's bits (the same sum of squares, AdamW without contraction:
# backend.h), so three steps end with the on-GPU optimizer's weights, byte for byte: fp32, and
# bf16 with a tied embedding and two micro-batches.
offload3() { # name args...
  local name=$1
  shift
  timeout 300 "$UPIPE" train --quiet --device cuda --steps 3 --lr 1e-3 --save "$TMP/$name.st" \
    "$@" >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
offload3 opt_dev $G && offload3 opt_off $G --offload-optimizer &&
  same opt_dev opt_off "--offload-optimizer: the on-GPU optimizer's weights, byte for byte (fp32)"
offload3 opt_dev_t $T3 --dtype bf16 --grad-accum 2 &&
  offload3 opt_off_t $T3 --dtype bf16 --grad-accum 2 --offload-optimizer &&
  same opt_dev_t opt_off_t "--offload-optimizer: the same, bf16, tied, two micro-batches"
offload3 opt_gdev_t $T3 --dtype bf16 --grad-accum 2 --offload-optimizer --grads-on-device &&
  same opt_dev_t opt_gdev_t "--offload-optimizer --grads-on-device: the same, byte for byte"

# The plan made without a GPU (--device-mem, a login node's plan) is the plan the GPU makes, each
# device and pinned category to the byte, and a real step's accounted device and pinned peaks
# equal it; with the optimizer on the device and offloaded.
PL="--config $SRC/configs/tiny.json --seq-len 1024 --threads 2 --quiet --device cuda"
"$UPIPE" data recall --output "$TMP/recall_small.bin" --tokens 20000 --distance 64 >/dev/null
plans() { # tag args...
  local tag=$1
  shift
  # shellcheck disable=SC2086
  if "$UPIPE" train $PL "$@" --dry-run --device-mem 1GiB --mem-report "$TMP/planned$tag.json" >/dev/null 2>&1 \
    && "$UPIPE" train $PL "$@" --dry-run --mem-report "$TMP/gpuplan$tag.json" >/dev/null 2>&1 \
    && "$UPIPE" train $PL "$@" --data "$TMP/recall_small.bin" --steps 1 --mem-report "$TMP/gpurun$tag.json" \
      >"$TMP/gpurun$tag.out" 2>&1; then
    if python3 - "$TMP/planned$tag.json" "$TMP/gpuplan$tag.json" "$TMP/gpurun$tag.json" <<'PY'; then
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:4])
for sp in ("device", "pinned"):
    print("  %s plan %d (without a GPU) / %d (on it), measured %d" %
          (sp, a[sp + "_peak_bytes"], b[sp + "_peak_bytes"], c[sp + "_peak_bytes"]))
sys.exit(0 if all(a[sp + "_categories"] == b[sp + "_categories"]
                  and a[sp + "_peak_bytes"] == b[sp + "_peak_bytes"] == c[sp + "_peak_bytes"]
                  for sp in ("device", "pinned")) else 1)
PY
      ok "--device-mem's plan = the GPU's plan = the measured peaks$tag"
    else
      bad "--device-mem's plan, the GPU's plan and the measured peaks differ$tag"
    fi
  else
    bad "device plans$tag: a run failed"; cat "$TMP/gpurun$tag.out"
  fi
}
plans ""
plans " (--offload-optimizer, bf16)" --offload-optimizer --dtype bf16
plans " (--grads-on-device, bf16)" --offload-optimizer --grads-on-device --dtype bf16
plans " (--offload, bf16)" --offload "$TMP" --dtype bf16

# --offload on the GPU: the layer inputs in pinned memory, copied on the copy stream while the
# layers run (model/ckpt_tier.h); the same weights as --checkpoint, byte for byte, with five
# layers (three in pinned memory), fp32 and bf16.
sed 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 5/' "$SRC/configs/tiny.json" >"$TMP/t5.json"
T5="--config $TMP/t5.json --data $TMP/recall_small.bin --seq-len 512"
offload3 ck5 $T5 --checkpoint && offload3 off5 $T5 --offload "$TMP" &&
  same ck5 off5 "--offload to pinned memory: --checkpoint's weights, byte for byte (fp32)"
offload3 ck5b $T5 --checkpoint --dtype bf16 && offload3 off5b $T5 --offload "$TMP" --dtype bf16 &&
  same ck5b off5b "--offload to pinned memory: the same, bf16"
# one slot pinned (512 x 128 bf16 = 128 KiB), two in the offload file; then all three in the
# file with a third layer kept on the GPU
offload3 off5f $T5 --offload "$TMP" --dtype bf16 --offload-host-limit 130KiB &&
  same ck5b off5f "--offload past --offload-host-limit to the file: the same, bf16"
offload3 off5k $T5 --offload "$TMP" --dtype bf16 --offload-host-limit 1KiB --offload-keep 3 &&
  same ck5b off5k "--offload all to the file, --offload-keep 3: the same, bf16"

# Ranks that share the GPU (DESIGN.md §11 "Ranks on a GPU"): each takes the GPU, their
# exchanges go through pinned host memory over MPI. The loss and gradients equal one rank's within
# the mpi tests' bound (ulysses.sh, fsdp.sh: splitting the sequence or the units changes only the
# order of fp32 sums, ~1e-7..1e-6 of a tensor's scale; a misplaced head or a missing replica sum
# moves them by O(1)): --cp 2, --cp 4 with UPipe stages (KV heads replicated), FSDP over 2 ranks
# and over 4 with --cp 2 against one rank's two micro-batches; and the 2-rank run's device and
# pinned peaks equal its plan. Once (the tensor-core pass repeats none of it).
run_gpu_n() { # name ranks args...
  local name=$1 n=$2
  shift 2
  if ! mpirun_n "$n" "$UPIPE" train --device cuda --threads 2 --steps 1 --lr 0 "$@" \
      --save-grads "$TMP/$name.st" --log "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1; then
    bad "$name: run failed"; tail -n 5 "$TMP/$name.out"; return 1
  fi
}
if [ -z "${UPIPE_CUDA_ATTENTION:-}" ] && command -v "${MPIEXEC%% *}" >/dev/null 2>&1; then
  GRAD_RTOL=1e-5
  LOSS_RTOL=1e-6
  run_gpu_n r_cp2 2 $G --cp 2 && compare r_cp2 gqa
  if grep -q "exchanges staged through host memory (2 ranks share this GPU)" "$TMP/r_cp2.out"; then
    ok "2 ranks on the GPU: $(grep -o 'exchanges staged.*' "$TMP/r_cp2.out")"
  else bad "2 ranks on the GPU: no staged line"; grep layout "$TMP/r_cp2.out"; fi
  run_gpu_n r_cp4 4 $G --cp 4 --upipe-heads 4 && compare r_cp4 gqa
  run_gpu g_accum $G --grad-accum 2
  run_gpu_n r_fsdp2 2 $G --cp 1 --fsdp && compare r_fsdp2 g_accum
  run_gpu_n r_fsdp4 4 $G --cp 2 --fsdp && compare r_fsdp4 g_accum
  # NCCL on one rank (UPIPE_COMM=nccl: the world's communicator, its all-reduce of one, the
  # polled waits): the bytes of the run without it; on two ranks that share the GPU NCCL refuses,
  # in one line that names the way out
  UPIPE_COMM=nccl run_gpu gqa_nccl $G --threads 2 && run_gpu gqa_plain $G --threads 2 \
    && same_file "UPIPE_COMM=nccl, one rank: the gradients" "$TMP/gqa_plain.st" "$TMP/gqa_nccl.st"
  if UPIPE_COMM=nccl timeout 60 $MPIEXEC -n 2 "$UPIPE" train --device cuda --threads 2 --steps 1 $G --cp 2 >"$TMP/nccl2.out" 2>&1; then
    bad "NCCL with 2 ranks on one GPU was accepted"
  elif grep -q "UPIPE_COMM=host exchanges through host memory instead" "$TMP/nccl2.out"; then
    ok "NCCL, 2 ranks on one GPU: $(grep -m1 'upipe: error' "$TMP/nccl2.out" | cut -c1-200)"
  else bad "NCCL, 2 ranks on one GPU: unexpected output"; tail -n 5 "$TMP/nccl2.out"; fi
  F2="--config $SRC/configs/tiny.json --seq-len 1024 --threads 2 --quiet --device cuda --cp 2 --upipe-heads 2 --fsdp"
  if mpirun_n 2 "$UPIPE" train $F2 --dry-run --mem-report "$TMP/r_plan.json" >/dev/null 2>&1 \
    && mpirun_n 2 "$UPIPE" train $F2 --data "$TMP/recall_small.bin" --steps 1 --mem-report "$TMP/r_run.json" \
      >"$TMP/r_run.out" 2>&1 \
    && python3 - "$TMP/r_plan.json" "$TMP/r_run.json" >"$TMP/r_mem.why" 2>&1 <<'PY'; then
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for sp in ("device", "pinned"):
    print("%s plan %d measured %d;" % (sp, a[sp + "_peak_bytes"], b[sp + "_peak_bytes"]), end=" ")
sys.exit(0 if all(a[sp + "_peak_bytes"] == b[sp + "_peak_bytes"] for sp in ("device", "pinned")) else 1)
PY
    ok "2 ranks on the GPU: the plan's peaks measured: $(cat "$TMP/r_mem.why")"
  else bad "2 ranks on the GPU: plan and peaks"; cat "$TMP/r_mem.why" "$TMP/r_run.out" 2>/dev/null | tail -n 8; fi
else echo "ranks on the GPU: skipped (${UPIPE_CUDA_ATTENTION:+the tc pass}${UPIPE_CUDA_ATTENTION:-no $MPIEXEC})"; fi

# A hung kernel (UPIPE_CUDA_TEST_HANG=3: step 3's backward starts a kernel that never ends): the
# watchdog names the GPU's op it waits for and stops the run with status 1, within its limit
# (10 x the longest step after the first, at least --watchdog 1) and well inside the timeout.
if [ -z "${UPIPE_CUDA_ATTENTION:-}" ]; then
  t0=$SECONDS
  UPIPE_CUDA_TEST_HANG=3 timeout 120 "$UPIPE" train --device cuda $G --steps 6 --watchdog 1 \
    --quiet >"$TMP/hang.out" 2>&1
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q "watchdog: step 3 has waited .* in the GPU (waiting for .*): a GPU kernel or copy hangs" "$TMP/hang.out"; then
    ok "a hung kernel: stopped in $((SECONDS - t0)) s: $(grep -o 'watchdog: .*hangs' "$TMP/hang.out")"
  else bad "a hung kernel: exit $rc"; tail -n 3 "$TMP/hang.out"; fi
fi

# Training: 300 steps of tiny.json on the recall corpus, CPU and GPU from the same seed. The runs
# sum in different orders, so their weights part after a few steps as any two fp32 runs do; what
# must agree is the curve: the mean loss of every 25 steps within 2% of the CPU's (a missing
# term or a wrong gradient bends it by far more once the model learns: the loss falls from 5.5
# to about 2 here).
"$UPIPE" data recall --output "$TMP/recall.bin" --tokens 200000 --distance 64 >/dev/null
curve() { # name device dtype
  timeout 300 "$UPIPE" train --quiet --device "$2" --config "$SRC/configs/tiny.json" \
    --data "$TMP/recall.bin" --seq-len 256 --steps 300 --lr 3e-3 --seed 11 --dtype "$3" \
    --log "$TMP/$1.jsonl" >"$TMP/$1.out" 2>&1 || { bad "$1: run failed"; cat "$TMP/$1.out"; return 1; }
}
curves_close() { # a b what
  if python3 - "$TMP/$1.jsonl" "$TMP/$2.jsonl" <<'PY'; then ok "$3"; else bad "$3"; fi
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
assert len(a) == len(b) == 300, (len(a), len(b))
worst = 0
for i in range(0, 300, 25):
    ma, mb = sum(a[i:i + 25]) / 25, sum(b[i:i + 25]) / 25
    worst = max(worst, abs(ma - mb) / mb)
print("  loss curves: first %.4f / %.4f, last 25 steps %.4f / %.4f, worst window %.4f" %
      (a[0], b[0], sum(a[-25:]) / 25, sum(b[-25:]) / 25, worst))
sys.exit(0 if worst <= 0.02 and b[-1] < 0.8 * b[0] else 1)
PY
}
curve cpu_f32 cpu f32 && curve gpu_f32 cuda f32 &&
  curves_close gpu_f32 cpu_f32 "fp32: 300 steps on the GPU follow the CPU's loss curve within 2%"
curve cpu_bf16 cpu bf16 && curve gpu_bf16 cuda bf16 &&
  curves_close gpu_bf16 cpu_bf16 "bf16: 300 steps on the GPU follow the CPU's loss curve within 2%"
finish
