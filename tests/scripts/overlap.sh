#!/usr/bin/env bash
# The UPipe pipe (--upipe-overlap, DESIGN.md §3): the next stage's exchange in flight during this
# stage's attention moves the same data into a second set of buffers and sums nothing
# differently, so weights after two steps and the last step's gradients are the same bytes as
# without it, on 2 and 4 ranks, GQA (several stages per KV chunk, several chunks, replicated KV
# heads) and MHA, with checkpointing, offload, FSDP, tiles and 2 threads; evaluation gives the
# same report; the plan (with its extra stage buffers) equals the measured peak.
source "$(dirname "$0")/lib.sh"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 4000 --distance 64 >/dev/null || bad "data recall"
mkdir -p "$TMP/store"
# NH = 8 with NKV = 4 (GQA), 2 (GQA, replicated on 4 ranks) and 8 (MHA); head_dim 32 as tiny.json
cfg() { sed "s/\"num_attention_heads\": 4/\"num_attention_heads\": 8/; s/\"num_key_value_heads\": 2/\"num_key_value_heads\": $1/" \
  "$SRC/configs/tiny.json" >"$TMP/$2.json"; }
cfg 4 gqa
cfg 2 rep
cfg 8 mha

# Two steps that update the weights; weights and the last step's gradients saved. T = 512: long
# enough that the exchanges really are in flight during attention (sharing one q buffer between
# consecutive stages, on purpose, changed the weights here; at T = 128 it went unnoticed).
two_steps() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 --steps 2 --lr 1e-3 --data "$TMP/d.bin" \
    --seq-len 512 "$@" --save "$TMP/$name.w.st" --save-grads "$TMP/$name.g.st" \
    --log "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
same() { # name ranks args...: with and without the pipe, byte for byte
  local name=$1 n=$2
  shift 2
  two_steps ${name}_off "$n" "$@" --no-upipe-overlap || return
  two_steps ${name}_on "$n" "$@" --upipe-overlap-on-node || return
  if cmp -s "$TMP/${name}_off.w.st" "$TMP/${name}_on.w.st" && cmp -s "$TMP/${name}_off.g.st" "$TMP/${name}_on.g.st"; then
    ok "$name: weights and gradients identical with --upipe-overlap"
  else
    bad "$name: --upipe-overlap changed the weights or gradients"
  fi
}
# (U/P per rank, stages per KV chunk, KV chunks)
same gqa_2 2 --config "$TMP/gqa.json" --upipe-heads 2                 # 1, 2, 2
same gqa_4 4 --config "$TMP/gqa.json" --upipe-heads 4                 # 1, 2, 1
same rep_4 4 --config "$TMP/rep.json" --upipe-heads 4                 # KV heads replicated
same mha_2 2 --config "$TMP/mha.json" --upipe-heads 2 --checkpoint    # 1, 1, 4
same mha_4 4 --config "$TMP/mha.json" --upipe-heads 4 --offload "$TMP/store" --fsdp
same gqa_stack 2 --config "$TMP/gqa.json" --upipe-heads 4 --fsdp --checkpoint --tile-mlp 16 --tile-loss 7
same gqa_docs 2 --config "$TMP/gqa.json" --upipe-heads 2 --doc-sep 59 --grad-accum 2
# the hook on thread 0 of a team of two (oversubscribed here; the sums do not depend on it)
same gqa_threads 2 --config "$TMP/gqa.json" --upipe-heads 2 --threads 2

# Evaluation (forward only): the same report.
for ov in no-upipe-overlap upipe-overlap-on-node; do
  mpirun_n 2 "$UPIPE" eval --quiet --threads 1 --config "$TMP/gqa.json" --init "$TMP/gqa_2_off.w.st" \
    --data "$TMP/d.bin" --seq-len 512 --windows 2 --upipe-heads 2 --$ov --report "$TMP/eval_$ov.json" \
    >"$TMP/eval_$ov.out" 2>&1 || { bad "eval --$ov failed"; cat "$TMP/eval_$ov.out"; }
done
[ -s "$TMP/eval_upipe-overlap-on-node.json" ] && cmp -s "$TMP/eval_no-upipe-overlap.json" "$TMP/eval_upipe-overlap-on-node.json" \
  && ok "eval: the same report with --upipe-overlap" || bad "eval: reports differ with --upipe-overlap"

# The plan counts the second set of stage buffers and packs (category attention) and equals
# the measured peak, training and evaluation; without P > 1 there is no pipe and no extra byte.
att() { tr -d '\n' <"$1" | sed -n 's/.*"attention": *\([0-9]*\).*/\1/p'; }
plan_vs_run() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" "$UPIPE" "$@" --dry-run --mem-report "$TMP/$name.plan.json" >/dev/null 2>&1 || { bad "$name: dry run failed"; return; }
  mpirun_n "$n" "$UPIPE" "$@" --mem-report "$TMP/$name.json" >"$TMP/$name.out" 2>&1 || { bad "$name: run failed"; cat "$TMP/$name.out"; return; }
  local p m
  p=$(buffer_peak "$TMP/$name.plan.json"); m=$(buffer_peak "$TMP/$name.json")
  if [ -n "$p" ] && [ "$p" = "$m" ]; then ok "$name: plan $p = measured"; else bad "$name: plan $p vs measured $m"; fi
}
TR="train --quiet --threads 1 --steps 1 --data $TMP/d.bin --seq-len 1024"
for ov in no-upipe-overlap upipe-overlap-on-node upipe-overlap; do
  plan_vs_run train_$ov 2 $TR --config "$TMP/gqa.json" --upipe-heads 2 --$ov
  plan_vs_run eval_$ov 2 eval --quiet --threads 1 --config "$TMP/gqa.json" --init "$TMP/gqa_2_off.w.st" \
    --data "$TMP/d.bin" --seq-len 1024 --windows 1 --upipe-heads 2 --$ov
  plan_vs_run one_$ov 1 $TR --config "$TMP/gqa.json" --upipe-heads 2 --$ov
done
a0=$(att "$TMP/train_no-upipe-overlap.json"); a1=$(att "$TMP/train_upipe-overlap-on-node.json")
is_num "$a0" && is_num "$a1" && [ "$a1" -gt "$a0" ] && ok "attention category grows with the pipe: $a0 -> $a1 B" \
  || bad "attention category with the pipe: $a0 -> $a1 B"
[ "$(att "$TMP/one_no-upipe-overlap.json")" = "$(att "$TMP/one_upipe-overlap-on-node.json")" ] \
  && ok "one rank: no pipe, no extra buffer" || bad "one rank: the pipe changed the plan"
# --upipe-overlap where the group shares a node (every rank here): no pipe, the plan of a run
# without it, and the layout line says why
mpirun_n 2 "$UPIPE" ${TR/--quiet/} --config "$TMP/gqa.json" --upipe-heads 2 --upipe-overlap \
  >"$TMP/layout.out" 2>&1 || bad "a run with --upipe-overlap"
[ "$(att "$TMP/train_no-upipe-overlap.json")" = "$(att "$TMP/train_upipe-overlap.json")" ] \
  && grep -q "no overlap within a node (--upipe-overlap-on-node forces it)" "$TMP/layout.out" \
  && ok "--upipe-overlap within a node: no pipe, no extra buffer, said on the layout line" \
  || bad "--upipe-overlap within a node: $(grep -o 'UPipe.*' "$TMP/layout.out")"
finish
