#!/usr/bin/env bash
# --dtype bf16 plans (DESIGN.md §5.1): for each configuration the bf16 plan equals the fp32 plan
# (itself checked against measured peaks in memory.sh, fsdp.sh, eval.sh) plus what bf16 changes,
# derived here by hand from the config's sizes and the buffer list of §5.1: every buffer stored in
# bf16 gives back 2 of its 4 bytes per element, fp32 ones (master weights, gradients, AdamW
# moments, gradient reduce buffers, log-sum-exp, rstd, RoPE tables, loss tiles) do not change,
# the attention kernels' fp32 workspace grows (attn_ws_delta), without FSDP a bf16 copy of the weights adds 2 bytes per parameter,
# and the bf16 kernels' fp32 row tiles add a fixed workspace. Also: the table names the dtype.
source "$(dirname "$0")/lib.sh"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 5000 --distance 64 >/dev/null || bad "data recall"
mkdir -p "$TMP/store"
CATS="params grads optimizer checkpoints activations attention workspace comm"

# The dims of an HF config (integers only).
dim() { tr -d '\n ' <"$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"; }
load_dims() {
  C=$(dim "$1" hidden_size); F=$(dim "$1" intermediate_size); L=$(dim "$1" num_hidden_layers)
  NH=$(dim "$1" num_attention_heads); NKV=$(dim "$1" num_key_value_heads); HS=$(dim "$1" head_dim)
  V=$(dim "$1" vocab_size)
  # parameters: embedding, per layer two norms, q, k, v, o and the three MLP matrices, final
  # norm and (untied) LM head; FSDP units: the embedding, each layer, norm + head
  LAYER=$((2 * C + 2 * NH * HS * C + 2 * NKV * HS * C + 3 * C * F))
  NPARAM=$((V * C + L * LAYER + C + V * C))
  HEAD=$((C + V * C))
}
# The fp32 workspace of the bf16 kernels on stored tensors (src/kernels/typed.c,
# typed_workspace_floats): 1024 rows of the widest of C, F and NH*HS (a matmul's staging tile; it
# also holds three 256-row element-wise tiles or a 256-row panel of C) and the GEMM's own
# GEMM_BF16_WS_FLOATS (kernels.h), in bytes. Category workspace, bf16 runs only.
GEMM_WS=$((2 * 1024 * 1024))
typed_ws() {
  local w=$C
  [ "$F" -gt "$w" ] && w=$F
  [ $((NH * HS)) -gt "$w" ] && w=$((NH * HS))
  echo $((4 * (1024 * w + GEMM_WS)))
}
# What the attention kernels' fp32 workspace grows by under bf16 (bytes) for a stage of nh query
# and nkv KV heads per rank over Tg tokens, one thread: the bf16 kernels add widened tiles and an
# fp32 dQ accumulator (DESIGN.md §5.1), sized by the kernel path (tests/tools/attn_ws).
attn_ws_delta() { # Tg nh nkv
  local w
  w=$("$BUILD/tests/attn_ws" "$1" "$2" "$3" "$HS" 1) || { echo 0; return; }
  echo $((4 * (${w#* } - ${w% *})))
}
# Largest FSDP shard (elements) over R ranks: ceil(unit / R) of the largest unit.
max_shard() {
  local m=$((V * C)) u
  for u in $LAYER $HEAD; do [ "$u" -gt "$m" ] && m=$u; done
  echo $(((m + $1 - 1) / $1))
}

# The plan of one configuration in both dtypes: $TMP/NAME.f32.json, $TMP/NAME.bf16.json (and the
# bf16 table on $TMP/NAME.bf16.out).
plans() { # name ranks cmd args...
  local name=$1 n=$2 dt
  shift 2
  for dt in f32 bf16; do
    mpirun_n "$n" "$UPIPE" "$@" --threads 1 --quiet --dry-run --dtype $dt \
      --mem-report "$TMP/$name.$dt.json" >"$TMP/$name.$dt.out" 2>&1 || { bad "$name: $dt dry run"; cat "$TMP/$name.$dt.out"; return 1; }
  done
}
field() { json_field "$(tr -d '\n' <"$1")" "$2"; }
# Every category and the offloaded bytes: bf16 == fp32 + the given deltas (bytes, one per
# category of CATS, then offloaded); and the peak less runtime: a plan's peak is the sum of its
# categories, so its delta is theirs.
check() { # name d_params d_grads d_optimizer d_checkpoints d_activations d_attention d_workspace d_comm d_offloaded
  local name=$1 c f b want sum=0 good=1
  shift
  for c in $CATS offloaded_peak_bytes; do
    f=$(field "$TMP/$name.f32.json" "$c"); b=$(field "$TMP/$name.bf16.json" "$c")
    want=$((f + $1))
    [ "$c" != offloaded_peak_bytes ] && sum=$((sum + $1))
    if ! is_num "$b" || [ "$b" -ne "$want" ]; then bad "$name: $c bf16 $b, expected $want (fp32 $f + $1)"; good=0; fi
    shift
  done
  f=$(buffer_peak "$TMP/$name.f32.json"); b=$(buffer_peak "$TMP/$name.bf16.json")
  [ "$b" -eq $((f + sum)) ] || { bad "$name: peak less runtime bf16 $b, expected $((f + sum))"; good=0; }
  [ "$good" = 1 ] && ok "$name: bf16 plan = fp32 plan + the hand-derived changes (peak $f -> $b bytes)"
}

TINY=$SRC/configs/tiny.json
BENCH=$SRC/configs/bench.json
TRAIN="train --data $TMP/d.bin"

# 1 rank, plain (plain Ulysses keeps q, k, v per layer; P = 1: no exchange buffers, o read in place).
load_dims "$TINY"; T=256
plans tiny_plain 1 $TRAIN --config "$TINY" --seq-len $T && check tiny_plain \
  $((2 * 2 * $(max_shard 1))) 0 0 \
  $((-2 * L * T * C)) \
  $((-2 * L * T * (NH * HS + C + 3 * F))) \
  $((-2 * ((L + 1) * T * (NH + 2 * NKV) * HS + T * NH * HS) + $(attn_ws_delta $T $NH $NKV))) \
  $((-2 * (3 * T * C + T * F) + $(typed_ws))) \
  0 0
# x_in per layer; o, x_mid, gate, up, act per layer (lse fp32); q, k, v per layer, the stage's
# q, k, v projections and d att; h, dres, dh and the untiled MLP's d act (loss tiles fp32).

# 1 rank, checkpoint + tiles + UPipe U=1: one shared set, x_mid in dh, MLP tiles of 64 tokens.
# Stages of one query head: q, k, v projections, o in head layout, d att, dq, dk, dv and a
# stage's dk, dv (two stages per KV head): 10 (T, HS) tensors.
TM=64
plans tiny_stack 1 $TRAIN --config "$TINY" --seq-len $T --checkpoint --tile-mlp $TM --tile-loss 64 --upipe-heads 1 \
  && check tiny_stack $((2 * 2 * $(max_shard 1))) 0 0 \
    $((-2 * L * T * C)) \
    $((-2 * T * NH * HS)) \
    $((-2 * 10 * T * HS + $(attn_ws_delta $T 1 1))) \
    $((-2 * (3 * T * C + 4 * TM * F + TM * C) + $(typed_ws))) \
    0 0

# 2 ranks, FSDP + offload + tiles + UPipe U=2 with the pipe: T_loc = 256, P = 2; a stage is one
# query head of each KV head (one chunk of both, two stages), in head layout one query and one
# KV head per rank over Tg = T = 512 rows. In units of (Tg, HS): q, k, v projections 3 (T_loc rows of 2 heads); q and o, do twice (the pipe's second
# set), k and v once (one chunk): 8; d att 1; dq twice (one in flight back), dk, dv once: 4; a
# stage's dk, dv 2 (two stages); the exchange pack 1, the pipe's o, do packs 2 and the packs its
# exchanges back arrive in (o or dq, dk, dv) 3: 24. The model state stays fp32 and sharded;
# the two gather slots (R x the largest shard) halve; the offload buffer and slots halve
# (T_loc * C * 2 bytes is a multiple of the store's 4096-byte rounding).
T=512; TL=$((T / 2)); R=2; MS=$(max_shard $R)
plans tiny_fsdp 2 $TRAIN --config "$TINY" --seq-len $T --fsdp --offload "$TMP/store" --tile-mlp $TM \
  --tile-loss 64 --upipe-heads 2 --upipe-overlap-on-node \
  && check tiny_fsdp 0 0 0 \
    $((-2 * TL * C)) \
    $((-2 * TL * NH * HS)) \
    $((-2 * 24 * T * HS + $(attn_ws_delta $T 1 1))) \
    $((-2 * (3 * TL * C + 4 * TM * F + TM * C) + $(typed_ws))) \
    $((-2 * 2 * MS * R)) \
    $((-2 * L * TL * C))

# 1 rank, bench.json, the full stack (offload, tiles of C tokens, UPipe U=1): as tiny_stack,
# with the offload buffer and store instead of resident checkpoints.
load_dims "$BENCH"; T=4096
plans bench_stack 1 $TRAIN --config "$BENCH" --seq-len $T --offload "$TMP/store" --tile-mlp --tile-loss --upipe-heads 1 \
  && check bench_stack $((2 * 2 * $(max_shard 1))) 0 0 \
    $((-2 * T * C)) \
    $((-2 * T * NH * HS)) \
    $((-2 * 10 * T * HS + $(attn_ws_delta $T 1 1))) \
    $((-2 * (3 * T * C + 4 * C * F + C * C) + $(typed_ws))) \
    0 \
    $((-2 * L * T * C))

# 2 ranks, bench.json, FSDP + checkpoint, plain Ulysses: one shared set keeps q, k, v in head
# layout. In units of (T_loc, HS): saved q 8 (NH), k, v 4 + 4; projections q 8, k, v 4 + 4; o
# and do in head layout 8 + 8; d att 8; dq 8, dk, dv 4 + 4; the pack 8 (all query heads): 80.
TL=$((T / 2)); MS=$(max_shard $R)
plans bench_fsdp 2 $TRAIN --config "$BENCH" --seq-len $T --fsdp --checkpoint \
  && check bench_fsdp 0 0 0 \
    $((-2 * L * TL * C)) \
    $((-2 * TL * (NH * HS + C + 3 * F))) \
    $((-2 * 80 * TL * HS + $(attn_ws_delta $T $((NH / 2)) $((NKV / 2))))) \
    $((-2 * (3 * TL * C + TL * F) + $(typed_ws))) \
    $((-2 * 2 * MS * R)) \
    0

# Evaluation (forward only), 1 rank: the weights' bf16 copy; one layer's o, gate, up, act; the
# saved q, k, v (P = 1: the stage needs nothing else); h and the residual stream (dres).
load_dims "$TINY"; T=256
plans tiny_eval 1 eval --data "$TMP/d.bin" --config "$TINY" --init /dev/null --seq-len $T \
  && check tiny_eval $((2 * 2 * $(max_shard 1))) 0 0 0 \
    $((-2 * T * (NH * HS + 3 * F))) \
    $((-2 * T * (NH + 2 * NKV) * HS + $(attn_ws_delta $T $NH $NKV))) \
    $((-2 * 2 * T * C + $(typed_ws))) \
    0 0

# The table names the dtype and keeps the per-token column.
if grep -q "^memory plan per rank: .*dtype bf16$" "$TMP/tiny_plain.bf16.out" && grep -q "per token" "$TMP/tiny_plain.bf16.out" \
    && grep -q "dtype f32$" "$TMP/tiny_plain.f32.out"; then
  ok "the plan table names the dtype: $(head -n1 "$TMP/tiny_plain.bf16.out")"
else
  bad "plan table header"; cat "$TMP/tiny_plain.bf16.out"
fi

finish
