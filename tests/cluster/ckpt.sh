#!/usr/bin/env bash
# Checkpoints across nodes (tests/scripts/ckpt.sh's checks, with the ranks on 2 nodes): a run on
# 2 nodes x 2 ranks stopped and resumed on 2 nodes ends with the weights of one that ran straight
# through, byte for byte; a checkpoint written on 2 nodes resumes on 1 node (2 ranks) and one
# written on 1 node resumes on 2, both with the weights of the straight run within the
# cross-layout tolerance.
source "$(dirname "$0")/lib.sh"
cluster_up 2
ST_COMPARE=$BUILD/tests/st_compare
GQA=$FIX/golden_gqa
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 40000 --distance 64 >/dev/null || bad "data recall"
G="--config $GQA/config.json --data $TMP/d.bin --init $GQA/weights.safetensors --seq-len 80 --lr 1e-3 --steps 6"
mkdir -p "$TMP/store"
# the full stack; 4 sequences per step on either layout
STACK="--fsdp --cp 2 --upipe-heads 2 --offload $TMP/store --tile-mlp --tile-loss"
TWO="$STACK --grad-accum 2" # 2 nodes x 2 ranks: 2 replicas x 2 micro-batches
ONE="$STACK --grad-accum 4" # 1 node, 2 ranks: 1 replica x 4 micro-batches

train() { # name command... (mpirun_n through on_cluster / on_node)
  local name=$1
  shift
  "$@" >"$TMP/$name.out" 2>&1 || { bad "$name: exit status $?"; tail -n 5 "$TMP/$name.out"; }
}
two() { on_cluster mpirun_n 4 "$UPIPE" train --quiet --threads 1 $G $TWO "$@"; }
one() { on_node upn1 mpirun_n 2 "$UPIPE" train --quiet --threads 1 $G $ONE "$@"; }
near() { # name a b: the cross-layout tolerance of ckpt.sh (fp32 reassociation of the 4
  # sequences' sum, measured ~5e-8 of a tensor's scale; a wrong data position or a lost
  # optimizer state moves weights by three steps of training, far beyond 1e-5)
  if "$ST_COMPARE" "$2" "$3" --rtol 1e-5 >"$TMP/$1.cmp" 2>&1; then ok "$1: $(tail -n1 "$TMP/$1.cmp")"
  else bad "$1"; cat "$TMP/$1.cmp"; fi
}

train full two --save "$TMP/full.st"
# exact resume on the same 2 nodes
train stop2 two --ckpt-dir "$TMP/ck2" --stop-at 3
cp -r "$TMP/ck2" "$TMP/ck2to1"
train res2 two --ckpt-dir "$TMP/ck2" --resume --save "$TMP/res2.st"
cmp -s "$TMP/full.st" "$TMP/res2.st" && ok "stopped and resumed on 2 nodes: identical" || bad "resume on 2 nodes: files differ"
# written on 2 nodes, resumed on 1
train res21 one --ckpt-dir "$TMP/ck2to1" --resume --save "$TMP/res21.st"
near "written on 2 nodes, resumed on 1" "$TMP/res21.st" "$TMP/full.st"
# written on 1 node, resumed on 2
train stop1 one --ckpt-dir "$TMP/ck1" --stop-at 3
train res12 two --ckpt-dir "$TMP/ck1" --resume --save "$TMP/res12.st"
near "written on 1 node, resumed on 2" "$TMP/res12.st" "$TMP/full.st"
# the comparison tells step 3 from step 6
"$ST_COMPARE" "$TMP/ck1/step-00000003/model.safetensors" "$TMP/full.st" --rtol 1e-5 >/dev/null 2>&1 \
  && bad "the comparison cannot tell step 3 from step 6" || ok "step 3 and step 6 weights differ beyond the tolerance"
finish
