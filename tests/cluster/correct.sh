#!/usr/bin/env bash
# Correct across nodes: on 2 nodes x 2 ranks (tools/cluster.sh; ranks 0, 1 on upn0, 2, 3 on upn1)
# the full stack (--cp 2: 2 replicas x 2 context-parallel ranks, --fsdp over the 4, UPipe,
# checkpoint, offload, tiles) gives the loss and gradients of one rank, in fp32 and bf16, with its
# collectives on the wire; and the README's cluster commands run as written (hostfile form).
source "$(dirname "$0")/lib.sh"
cluster_up 2
GQA=$FIX/golden_gqa
G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"
mkdir -p "$TMP/store"
STACK="--cp 2 --fsdp --upipe-heads 2 --checkpoint --offload $TMP/store --tile-mlp --tile-loss"

# fp32: the tolerances of the mpi tests (ulysses.sh, upipe.sh, fsdp.sh): the split and the
# sharding change only the order of fp32 sums (measured <= 1.1e-6 of a tensor's scale), and the
# wire changes nothing of the arithmetic; a misplaced head, position, shard or replica sum is O(1).
GRAD_RTOL=1e-5
LOSS_RTOL=1e-6
# The 2 replicas read sequences 0 and 1: one rank with --grad-accum 2 trains on the same two.
run_case ref 1 $G --grad-accum 2
b0=$(wire_bytes)
on_cluster run_case stack 4 $G $STACK && compare stack ref
b1=$(wire_bytes)
# FSDP's gathers alone bring each node the other node's half of every unit: at least half the
# parameters' bytes (the fp32 weights file, 0.14M parameters) cross the wire
pbytes=$(stat -c %s "$GQA/weights.safetensors")
[ $((b1 - b0)) -ge $((pbytes / 2)) ] && ok "the job moved $((b1 - b0)) bytes over the links (parameters: $pbytes)" \
  || bad "the links carried $((b1 - b0)) bytes, parameters $pbytes"

# bf16: the bound of bf16.sh (8 significant bits per stored tensor, about 15 roundings per layer
# on a gradient's longest path: 0.06 of each tensor's scale, the loss 0.021), against one bf16 rank
GRAD_RTOL=0.06
LOSS_RTOL=0.021
run_case bref 1 $G --grad-accum 2 --dtype bf16
on_cluster run_case bstack 4 $G $STACK --dtype bf16 && compare bstack bref
[ -z "$(ls -A "$TMP/store")" ] && ok "offload store left empty" || bad "files left: $(ls "$TMP/store")"

# The README's cluster commands (hostfile form and hosts form), as written, with the names of
# this cluster: node1,node2 -> upn0,upn1, 8 ranks per node -> 2, "..." -> a run's flags.
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null || bad "data recall"
R="--config $GQA/config.json --data $TMP/d.bin --seq-len 80 --threads 1 --steps 2 --cp 2"
mapfile -t lines < <(sed -n '/^## On a cluster/,/^## /p' "$SRC/README.md" | grep -E '^    mpiexec ')
[ "${#lines[@]}" -ge 2 ] || bad "README: expected the cluster's mpiexec lines, found ${#lines[@]}"
i=0
for line in "${lines[@]}"; do
  i=$((i + 1))
  cmd=$(sed -e "s|hostfile|$HOSTFILE|" -e 's/node1,node2/upn0,upn1/' -e 's/-ppn 8/-ppn 2/' \
    -e 's/-n 16/-n 4/' -e "s|build/upipe|$UPIPE|" -e "s|/shared/ckpt|$TMP/ckpt$i|" \
    -e "s|\.\.\.|$R|" <<<"$line")
  mkdir -p "$TMP/ckpt$i"
  # --resume on an empty folder starts afresh; a second time it continues (nothing to train)
  if (cd "$SRC" && timeout 300 "$JOB" "$CLUSTER" run upn0 $cmd) >"$TMP/readme$i.out" 2>&1 \
    && grep -q "^done:" "$TMP/readme$i.out" && grep -q "layout  4 ranks" "$TMP/readme$i.out"; then
    ok "README: $(sed 's/^ *//' <<<"$line")"
  else bad "README: $cmd"; tail -n 5 "$TMP/readme$i.out"; fi
done
finish
