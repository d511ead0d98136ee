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
sed 's/"max_position_embeddings": 4096/"max_position_embeddings": 8192/' "$SRC/configs/tiny.json" >"$TMP/tiny.json"
A="--config $TMP/tiny.json --data $TMP/d.bin --seq-len 8192 --steps 2 --lr 1e-3"
# -hosts without -ppn: hydra deals ranks round-robin (MPI ranks 0, 2 on upn0; 1, 3 on upn1), the
# order in which consecutive ranks would put every --cp 2 group across the nodes
RR="$CLUSTER run upn0 mpiexec -hosts upn0,upn1"
job() { # name cp mpiexec... : one run; its wire bytes in $WIRE
  local name=$1 cp=$2 b0 b1
  shift 2
  b0=$(wire_bytes)
  if ! timeout 300 "$JOB" "$@" -n 4 "$UPIPE" train --threads 1 $A --cp "$cp" --save "$TMP/$name.st" \
    --log "$TMP/$name.jsonl" \
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

# The pipe across nodes (DESIGN.md §3): --cp 4 groups span both nodes, so --upipe-overlap runs
# it (the layout line says so) and the weights are those of the run without it, byte for byte
# (the same launch and layout; the pipe moves the same data and sums nothing differently). NH =
# NKV = 8 with U = 4: two stages, each its own KV chunk, so o, q, k, v go out and o, dq, dk, dv
# come back while the other stage's attention runs.
sed 's/"num_attention_heads": 4/"num_attention_heads": 8/; s/"num_key_value_heads": 2/"num_key_value_heads": 8/' \
  "$SRC/configs/tiny.json" >"$TMP/mha.json"
PIPE="--threads 1 --config $TMP/mha.json --data $TMP/d.bin --seq-len 1024 --steps 2 --lr 1e-3 --cp 4 --upipe-heads 4"
for ov in no-upipe-overlap upipe-overlap; do
  timeout 300 "$JOB" $RR -n 4 "$UPIPE" train $PIPE --$ov --save "$TMP/$ov.st" >"$TMP/$ov.out" 2>&1 \
    || { bad "--$ov across nodes: run failed"; tail -n 5 "$TMP/$ov.out"; }
done
lp=$(grep "layout" "$TMP/upipe-overlap.out")
[[ "$lp" == *"across nodes, UPipe stages of 4 heads, exchanges overlapped with attention"* ]] \
  && [ -s "$TMP/upipe-overlap.st" ] && cmp -s "$TMP/no-upipe-overlap.st" "$TMP/upipe-overlap.st" \
  && ok "--upipe-overlap across nodes: on, the same weights to the byte" \
  || bad "--upipe-overlap across nodes: ${lp#*T_loc=}; weights $(cmp "$TMP/no-upipe-overlap.st" "$TMP/upipe-overlap.st" 2>&1)"

# --dry-run's table: the bytes per step of each collective inside a node and across nodes. The
# all-to-all stays inside the nodes with --cp 2 and sends 2 of each rank's 3 blocks across with
# --cp 4; the table's totals are what the runs above counted (the log: one rank's bytes of the
# last step, the same on every rank; the table rounds to 3 digits). With --fsdp as well.
table() { # name cp extra...: the dry-run's table as "kind inside across" in bytes
  local name=$1 cp=$2
  shift 2
  timeout 300 "$JOB" $RR -n 4 "$UPIPE" train --threads 1 $A --cp "$cp" "$@" --dry-run >"$TMP/$name.dry" 2>&1 \
    || { bad "$name: dry run failed"; tail -n 5 "$TMP/$name.dry"; return 1; }
  sed -n '/^communication per step/,$p' "$TMP/$name.dry" | awk '
    function b(v, u) { return v * (u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1) }
    NF == 5 { printf "%s %.0f %.0f\n", $1, b($2, $3), b($4, $5) }' >"$TMP/$name.tab"
}
row() { awk -v k="$2" '$1 == k { print $2, $3 }' "$TMP/$1.tab"; } # name kind: inside across
within() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01 * b + 1) }'; }
for cp in 2 4; do
  table dry$cp $cp || continue
  read -r s_in s_out <<<"$(row dry$cp seq_to_head)"
  read -r h_in h_out <<<"$(row dry$cp head_to_seq)"
  read -r g_in g_out <<<"$(row dry$cp grad_reduce)"
  a2a=$((s_in + s_out + h_in + h_out))
  m=$(json_field "$(tail -n1 "$TMP/rr$cp.jsonl")" a2a_bytes)
  mg=$(json_field "$(tail -n1 "$TMP/rr$cp.jsonl")" grad_reduce_bytes)
  within "$a2a" "$(awk -v m="$m" 'BEGIN { printf "%.0f", 4 * m }')" \
    && within "$((g_in + g_out))" "$(awk -v m="$mg" 'BEGIN { printf "%.0f", 4 * m }')" \
    && ok "--cp $cp dry run: all-to-all $a2a B, gradients $((g_in + g_out)) B per step = the run's counters x 4 ranks" \
    || bad "--cp $cp dry run: all-to-all $a2a B vs 4 x $m, gradients $((g_in + g_out)) vs 4 x $mg"
  want=$([ "$cp" = 2 ] && echo 0 || awk -v a="$a2a" 'BEGIN { printf "%.0f", a * 2 / 3 }')
  within "$((s_out + h_out))" "$want" && ok "--cp $cp dry run: all-to-all across nodes $((s_out + h_out)) B of $a2a" \
    || bad "--cp $cp dry run: all-to-all across nodes $((s_out + h_out)) B, want $want of $a2a"
done
table dryf 2 --fsdp && {
  read -r f_in f_out <<<"$(row dryf fsdp_gather)"
  read -r r_in r_out <<<"$(row dryf fsdp_reduce)"
  timeout 300 "$JOB" $RR -n 4 "$UPIPE" train --threads 1 $A --steps 1 --cp 2 --fsdp --log "$TMP/f.jsonl" >"$TMP/f.out" 2>&1 || bad "fsdp run"
  mf=$(json_field "$(tail -n1 "$TMP/f.jsonl")" fsdp_bytes)
  # every rank's shard goes to the 3 others, 2 of them on the other node
  within "$((f_in + f_out + r_in + r_out))" "$(awk -v m="$mf" 'BEGIN { printf "%.0f", 4 * m }')" \
    && within "$((f_out + r_out))" "$(( (f_in + f_out + r_in + r_out) * 2 / 3 ))" \
    && ok "--fsdp dry run: gathers and reduce-scatters $((f_in + f_out + r_in + r_out)) B, $((f_out + r_out)) across nodes" \
    || bad "--fsdp dry run: $f_in $f_out $r_in $r_out vs 4 x $mf"
}
finish
