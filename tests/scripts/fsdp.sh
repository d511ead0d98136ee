#!/usr/bin/env bash
# FSDP / ZeRO-3 (--fsdp): with 2 and 4 ranks, with and without --cp, gradients equal the
# unsharded run; three AdamW steps end with the same weights; per-rank model state is 1/R of the
# unsharded figure (plus padding) with the gather buffers in `comm`; the plan knows about --fsdp.
source "$(dirname "$0")/lib.sh"
ST_COMPARE=$BUILD/tests/st_compare
GQA=$FIX/golden_gqa
TIED=$FIX/golden_tied
G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"

# Sharding changes the reduction (reduce-scatter per unit instead of one all-reduce) and nothing
# else: fp32 reassociation of R partial sums, measured <= 6e-7 of a tensor's scale. 1e-5 as in
# the other invariance tests.
RTOL=1e-5

run() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 "$@" >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
cmp_st() { # name a b
  if "$ST_COMPARE" "$2" "$3" --rtol "$RTOL" >"$TMP/$1.cmp" 2>&1; then ok "$1: $(tail -n1 "$TMP/$1.cmp")"
  else bad "$1"; cat "$TMP/$1.cmp"; fi
}

for n in 2 4; do
  for cp in 1 2; do
    [ "$cp" -le "$n" ] || continue
    tag=n${n}_cp$cp
    run plain_$tag $n $G --cp $cp --steps 1 --lr 0 --save-grads "$TMP/g_plain_$tag.st" \
      && run fsdp_$tag $n $G --cp $cp --steps 1 --lr 0 --fsdp --save-grads "$TMP/g_fsdp_$tag.st" \
      && cmp_st "gradients $tag" "$TMP/g_fsdp_$tag.st" "$TMP/g_plain_$tag.st"
    # Three AdamW steps. eps = 1e-4 keeps elements whose gradient is rounding noise (|g| ~ 1e-9)
    # from being pushed by ~lr in a noise-chosen direction (Adam normalises every update to about
    # lr whatever |g| is); real gradients here are >= 1e-4, so a stale or misplaced shard still
    # moves weights by ~lr = 1e-3 of their scale, 100x the tolerance.
    A="--steps 3 --lr 1e-3 --adam-eps 1e-4"
    run plain3_$tag $n $G --cp $cp $A --save "$TMP/w_plain_$tag.st" \
      && run fsdp3_$tag $n $G --cp $cp $A --fsdp --save "$TMP/w_fsdp_$tag.st" \
      && cmp_st "weights after 3 steps $tag" "$TMP/w_fsdp_$tag.st" "$TMP/w_plain_$tag.st"
  done
done
# Tied embeddings (the LM head reuses the embedding unit), 3 ranks.
T3="--config $TIED/config.json --data $TIED/tokens.bin --init $TIED/weights.safetensors --seq-len 33"
run tied_plain 3 $T3 --steps 1 --lr 0 --save-grads "$TMP/g_tied_plain.st" \
  && run tied_fsdp 3 $T3 --steps 1 --lr 0 --fsdp --save-grads "$TMP/g_tied_fsdp.st" \
  && cmp_st "tied gradients, 3 ranks" "$TMP/g_tied_fsdp.st" "$TMP/g_tied_plain.st"
# Gradient accumulation with a tied embedding: two micro-batches per step, 3 ranks.
run tied_acc_plain 3 $T3 --steps 2 --lr 1e-3 --adam-eps 1e-4 --grad-accum 2 --save "$TMP/w_tacc_plain.st" \
  && run tied_acc_fsdp 3 $T3 --steps 2 --lr 1e-3 --adam-eps 1e-4 --grad-accum 2 --fsdp --save "$TMP/w_tacc_fsdp.st" \
  && cmp_st "tied + grad-accum, weights after 2 steps" "$TMP/w_tacc_fsdp.st" "$TMP/w_tacc_plain.st"
# Gradient accumulation in more configurations: the reduce-scatter of every micro-batch adds into
# the shard (a shard that overwrote would keep only the last micro-batch and fail by O(1)).
# 2 ranks, 3 micro-batches, against one rank with the same 6 sequences per step.
run acc3_ref 1 $G --steps 1 --lr 0 --grad-accum 6 --save-grads "$TMP/g_acc3_ref.st" \
  && run acc3_fsdp 2 $G --cp 1 --steps 1 --lr 0 --grad-accum 3 --fsdp --save-grads "$TMP/g_acc3_fsdp.st" \
  && cmp_st "fsdp, 2 replicas x grad-accum 3 = 1 rank x 6" "$TMP/g_acc3_fsdp.st" "$TMP/g_acc3_ref.st"
# a 2 x 2 mesh (2 replicas, --cp 2) with 2 micro-batches, against one rank with 4
run acc_mesh_ref 1 $G --steps 1 --lr 0 --grad-accum 4 --save-grads "$TMP/g_accm_ref.st" \
  && run acc_mesh_fsdp 4 $G --cp 2 --steps 1 --lr 0 --grad-accum 2 --fsdp --save-grads "$TMP/g_accm_fsdp.st" \
  && cmp_st "fsdp, 2 x 2 mesh x grad-accum 2 = 1 rank x 4" "$TMP/g_accm_fsdp.st" "$TMP/g_accm_ref.st"
# All together: FSDP with UPipe, checkpoint offload and tiles on a 2 x 2 mesh.
mkdir -p "$TMP/store"
run all_plain 4 $G --cp 2 --steps 1 --lr 0 --save-grads "$TMP/g_all_plain.st" \
  && run all_fsdp 4 $G --cp 2 --steps 1 --lr 0 --fsdp --upipe-heads 2 --offload "$TMP/store" \
       --tile-mlp 16 --tile-loss 16 --save-grads "$TMP/g_all_fsdp.st" \
  && cmp_st "fsdp + upipe + offload + tiles" "$TMP/g_all_fsdp.st" "$TMP/g_all_plain.st"

# Model state per rank: params + grads + optimizer at most 1/R of the unsharded figure plus the
# padding of the shards (< R floats per unit and slab); the gather buffers are in `comm`.
cat_of() { sed -n "s/.*\"$2\": *\([0-9]*\).*/\1/p" "$1" | head -n1; }
state() { echo $(( $(cat_of "$1" params) + $(cat_of "$1" grads) + $(cat_of "$1" optimizer) )); }
for n in 2 4; do
  run mem_plain_$n $n $G --steps 1 --mem-report "$TMP/mem_plain_$n.json" \
    && run mem_fsdp_$n $n $G --steps 1 --fsdp --mem-report "$TMP/mem_fsdp_$n.json" || continue
  sp=$(state "$TMP/mem_plain_$n.json"); sf=$(state "$TMP/mem_fsdp_$n.json"); comm=$(cat_of "$TMP/mem_fsdp_$n.json" comm)
  units=4 # embedding, 2 layers, head
  if [ "$sf" -le $(( sp / n + 16 * n * units )) ] && [ "$comm" -gt 0 ]; then
    ok "model state with $n ranks: $sf B <= $sp B / $n (+ padding); gather buffers $comm B"
  else
    bad "model state with $n ranks: $sf B vs $sp B / $n; comm $comm B"
  fi
  run plan_fsdp_$n $n $G --steps 1 --fsdp --dry-run --mem-report "$TMP/plan_fsdp_$n.json" || continue
  p=$(buffer_peak "$TMP/plan_fsdp_$n.json"); m=$(buffer_peak "$TMP/mem_fsdp_$n.json")
  [ -n "$p" ] && [ "$p" = "$m" ] && ok "plan with --fsdp, $n ranks: $p = measured" || bad "plan with --fsdp: $p vs $m"
done
finish
