#!/usr/bin/env bash
# The node-aware layout (DESIGN.md §8.3) on 2 nodes x 2 ranks: the ranks are ordered node by
# node whatever order the launcher gave them, so with --cp 2 each context-parallel group sits on
# one node and its all-to-all never touches the wire; only the replicas' gradient reduction
# crosses it: the links carry a small fraction of what they carry with --cp 4, whose groups span
# both nodes. The layout line names the nodes; a round-robin launch ends with the weights of a
# node-by-node one.
source "$(dirname "$0")/lib.sh"
cluster_up 2
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null || bad "data recall"
# T = 8192: a step's all-to-all outweighs the gradients' all-reduce between the replicas
A="--config $SRC/configs/tiny.json --data $TMP/d.bin --seq-len 8192 --steps 2 --lr 1e-3"
# -hosts without -ppn: hydra deals ranks round-robin (MPI ranks 0, 2 on upn0; 1, 3 on upn1), the
# order in which consecutive ranks would put every --cp 2 group across the nodes
RR="$CLUSTER run upn0 mpiexec -hosts upn0,upn1"
job() { # name cp mpiexec... : one run; its wire bytes in $WIRE
  local name=$1 cp=$2 b0 b1
  shift 2
  b0=$(wire_bytes)
  if ! timeout 300 "$JOB" "$@" -n 4 "$UPIPE" train --threads 1 $A --cp "$cp" --save "$TMP/$name.st" \
    >"$TMP/$name.out" 2>&1; then
    bad "$name: run failed"; tail -n 5 "$TMP/$name.out"; WIRE=0; return 1
  fi
  b1=$(wire_bytes)
  WIRE=$((b1 - b0))
}
job rr2 2 $RR && w2=$WIRE
job rr4 4 $RR && w4=$WIRE
l2=$(grep "layout" "$TMP/rr2.out"); l4=$(grep "layout" "$TMP/rr4.out")
[[ "$l2" == *"2 nodes: upn0 (ranks 0-1), upn1 (ranks 2-3); context-parallel groups within a node"* ]] \
  && ok "round-robin launch, --cp 2:${l2#*T_loc=*,}" || bad "layout --cp 2: $l2"
[[ "$l4" == *"context-parallel groups across nodes"* ]] && ok "--cp 4: groups across nodes" || bad "layout --cp 4: $l4"
# --cp 2 puts on the wire only the gradient all-reduce between the replicas (one per node);
# --cp 4 adds every all-to-all between the nodes' halves of each group. Measured: 0.08 of it.
# The bytes do not depend on timing; a fifth allows for MPI's own traffic and another reduction
# algorithm, while a --cp 2 group across the nodes (consecutive ranks of a round-robin launch
# without the node order) would add about half of --cp 4's exchange.
if [ -n "${w2:-}" ] && [ -n "${w4:-}" ] && [ "$w2" -gt 0 ] && [ $((5 * w2)) -lt "$w4" ]; then
  ok "bytes on the wire: --cp 2 $w2, --cp 4 $w4 ($(awk -v a="$w2" -v b="$w4" 'BEGIN { printf "%.3f", a / b }') of it)"
else bad "bytes on the wire: --cp 2 ${w2:-?}, --cp 4 ${w4:-?}"; fi
# the same job launched node by node (hostfile): the same layout ranks, so the same weights
# (within the cross-layout tolerance of ckpt.sh: only MPI's reduction trees may differ)
job hf2 2 "$CLUSTER" mpirun && {
  if "$BUILD/tests/st_compare" "$TMP/rr2.st" "$TMP/hf2.st" --rtol 1e-5 >"$TMP/w.cmp" 2>&1; then
    ok "round-robin and node-by-node launches: $(tail -n1 "$TMP/w.cmp")"
  else bad "round-robin vs node-by-node weights"; cat "$TMP/w.cmp"; fi
  echo "(wire bytes of the node-by-node launch, --cp 2: $WIRE)"
}
finish
