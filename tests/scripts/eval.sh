#!/usr/bin/env bash
# `upipe eval`: its loss on a window is the first training step's loss on that window with --lr 0
# (the same digits on one rank, with packed documents and a loss mask too; within 1e-6 on 2 and 4
# ranks with Ulysses, UPipe, FSDP and tiles, and over data-parallel replicas); the buckets'
# token-weighted mean is the loss; recall on a recall corpus only; --ckpt reads a checkpoint;
# the plan equals the measured peak and is below training's; the SVGs are XML; bad input.
source "$(dirname "$0")/lib.sh"
GQA=$FIX/golden_gqa
G="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80"
EVAL="$UPIPE eval --quiet --threads 1"

eval_case() { # name ranks args... : the JSON report in $TMP/name.json
  local name=$1 n=$2
  shift 2
  if ! mpirun_n "$n" $EVAL "$@" --report "$TMP/$name.json" >"$TMP/$name.out" 2>&1; then
    bad "$name: eval failed"; cat "$TMP/$name.out"; return 1
  fi
}
report_loss() { sed -n 's/^  "loss": *\([-+0-9.eE]*\).*/\1/p' "$TMP/$1.json"; }
train_loss() { json_field "$(head -n1 "$TMP/$1.jsonl")" loss; }

# ---- eval loss = the first training step's loss (--lr 0) on the same window ----
# One rank: the same forward, the same float operations in the same order, so the same 9 digits
# (the log's and the report's precision). More ranks: only the order of fp32 sums changes (the
# all-to-all layout, sharded gathers, tiles), within the 1e-6 of the other invariance tests.
run_case train_1 1 $G
eval_case eval_1 1 $G --windows 1
[ -n "$(report_loss eval_1)" ] && [ "$(report_loss eval_1)" = "$(train_loss train_1)" ] \
  && ok "1 rank: eval loss $(report_loss eval_1) = training loss" \
  || bad "1 rank: eval loss '$(report_loss eval_1)' vs training '$(train_loss train_1)'"
every() { # name ranks args...: eval with techniques against the one-rank training loss
  local name=$1
  eval_case "$@" --windows 1 || return
  close "$(report_loss "$name")" "$(train_loss train_1)" 1e-6 \
    && ok "$name: eval loss $(report_loss "$name") vs training $(train_loss train_1)" \
    || bad "$name: eval loss '$(report_loss "$name")' vs training $(train_loss train_1)"
}
every ulysses_2 2 $G
every stack_2 2 $G --fsdp --upipe-heads 2 --tile-mlp 16 --tile-loss 7 --checkpoint
every ulysses_4 4 $G --tile-loss 9                              # P > NKV
every stack_4 4 $G --fsdp --upipe-heads 4 --tile-mlp 8 --tile-loss 5
every mesh_4 4 $G --cp 2 --fsdp --upipe-heads 2                 # 2 replicas, one window

# Packed documents and a loss mask: training's semantics (golden_docs: T = 300, 5 documents).
D=$FIX/golden_docs
DOCS="--config $D/config.json --data $D/tokens.bin --init $D/weights.safetensors --seq-len 300 --doc-sep 256 --loss-mask $D/mask.bin"
run_case train_docs 1 $DOCS
eval_case eval_docs 1 $DOCS
[ -n "$(report_loss eval_docs)" ] && [ "$(report_loss eval_docs)" = "$(train_loss train_docs)" ] \
  && ok "documents and mask, 1 rank: eval loss $(report_loss eval_docs) = training loss" \
  || bad "documents and mask: eval '$(report_loss eval_docs)' vs training '$(train_loss train_docs)'"
eval_case eval_docs_4 4 $DOCS --upipe-heads 4 --fsdp --tile-loss 48 && \
  { close "$(report_loss eval_docs_4)" "$(train_loss train_docs)" 1e-6 \
    && ok "documents and mask, 4 ranks: $(report_loss eval_docs_4)" || bad "documents, 4 ranks: $(report_loss eval_docs_4)"; }

# ---- several windows: replicas share them, the buckets add up to the loss ----
sed 's/"vocab_size": 256/"vocab_size": 4096/' "$SRC/configs/tiny.json" >"$TMP/v4k.json"
"$UPIPE" data recall --output "$TMP/r.bin" --tokens 9000 --distance 100 >/dev/null
"$UPIPE" train --quiet --threads 1 --config "$SRC/configs/tiny.json" --data "$TMP/r.bin" --seq-len 256 \
  --steps 2 --save "$TMP/w.st" >/dev/null 2>&1 || bad "train the small model"
R="--config $SRC/configs/tiny.json --data $TMP/r.bin --init $TMP/w.st --seq-len 512"
eval_case win_1 1 $R --windows 5 --svg "$TMP/loss.svg" --recall-svg "$TMP/recall.svg"
eval_case win_dp 2 $R --windows 5 --cp 1      # replica 1 has no 3rd window: it runs, uncounted
eval_case win_mesh 4 $R --windows 5 --cp 2 --fsdp --tile-mlp --tile-loss 64
for c in win_dp win_mesh; do
  close "$(report_loss $c)" "$(report_loss win_1)" 1e-6 && ok "$c: 5 windows, loss $(report_loss $c) = one rank's" \
    || bad "$c: loss '$(report_loss $c)' vs one rank's '$(report_loss win_1)'"
done
python3 - "$TMP/win_1.json" "$TMP/loss.svg" "$TMP/recall.svg" >"$TMP/py.out" 2>&1 <<'EOF' && ok "$(cat "$TMP/py.out")" || { bad "report or SVG"; cat "$TMP/py.out"; }
import json, sys, xml.etree.ElementTree as ET
r = json.load(open(sys.argv[1]))
assert set(r) == {"loss", "perplexity", "tokens", "windows", "buckets", "recall"}, r.keys()
assert r["windows"] == 5 and r["tokens"] == 5 * 512, (r["windows"], r["tokens"])
# every target in one bucket: the token-weighted mean of the buckets is the loss
n = sum(b["end"] - b["start"] for b in r["buckets"]) * r["windows"]
m = sum((b["end"] - b["start"]) * r["windows"] * b["loss"] for b in r["buckets"]) / n
assert n == r["tokens"] and abs(m - r["loss"]) <= 1e-7 * r["loss"], (m, r["loss"])
assert [b["start"] for b in r["buckets"]] == [0, 8, 16, 32, 64, 128, 256], r["buckets"]
q = r["recall"]
assert q["questions"] > 50 and q["questions"] == sum(b["n"] for b in q["by_distance"]), q
assert all(b["lo"] < b["hi"] and 0 <= b["accuracy"] <= 1 for b in q["by_distance"]), q
for f in sys.argv[2:]:
    assert ET.parse(f).getroot().tag.endswith("svg"), f
print(f"report schema; buckets' mean {m:.9g} = loss {r['loss']}; {q['questions']} questions; SVGs are XML")
EOF
grep -q '"recall"' "$TMP/eval_1.json" && bad "recall reported on a text shard" || ok "no recall section on a shard that is not a recall corpus"

# ---- --ckpt: a checkpoint's weights (and its config.json) ----
mpirun_n 2 "$UPIPE" train --quiet --threads 1 $G --steps 2 --fsdp --ckpt-dir "$TMP/ck" --save "$TMP/ck.st" >/dev/null 2>&1 \
  || bad "train with --ckpt-dir"
eval_case from_ckpt 1 --ckpt "$TMP/ck" --data "$GQA/tokens.bin" --seq-len 80
eval_case from_save 1 $G --init "$TMP/ck.st"
[ -n "$(report_loss from_ckpt)" ] && [ "$(report_loss from_ckpt)" = "$(report_loss from_save)" ] \
  && ok "--ckpt DIR: loss $(report_loss from_ckpt) = --init of the saved weights" \
  || bad "--ckpt: '$(report_loss from_ckpt)' vs '$(report_loss from_save)'"

# ---- memory: the plan is the measured peak, and below training's ----
peak() { buffer_peak "$1"; }
"$UPIPE" train --quiet --threads 1 --config "$TMP/v4k.json" --data "$TMP/r.bin" --seq-len 64 --steps 1 \
  --save "$TMP/v4k.st" >/dev/null 2>&1 || bad "train the vocabulary-4096 model"
mem_case() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" $EVAL --config "$TMP/v4k.json" --data "$TMP/r.bin" --init /dev/null --windows 2 "$@" \
    --dry-run --mem-report "$TMP/$name.plan.json" >/dev/null 2>&1 || { bad "$name: eval dry run"; return; }
  mpirun_n "$n" "$UPIPE" train --quiet --threads 1 --config "$TMP/v4k.json" --data "$TMP/r.bin" "$@" \
    --dry-run --mem-report "$TMP/$name.train.json" >/dev/null 2>&1 || { bad "$name: train dry run"; return; }
  mpirun_n "$n" $EVAL --config "$TMP/v4k.json" --data "$TMP/r.bin" --init "$TMP/v4k.st" --windows 2 "$@" \
    --mem-report "$TMP/$name.json" >/dev/null 2>&1 || { bad "$name: eval run"; return; }
  local p m t
  p=$(peak "$TMP/$name.plan.json"); m=$(peak "$TMP/$name.json"); t=$(peak "$TMP/$name.train.json")
  [ -n "$p" ] && [ "$p" = "$m" ] && [ "$p" -lt "$t" ] && ok "$name: eval plan $p = measured $m < training's $t" \
    || bad "$name: eval plan '$p', measured '$m', training '$t'"
}
mem_case mem_plain 1 --seq-len 2048
mem_case mem_stack 2 --seq-len 2048 --fsdp --upipe-heads 2 --tile-mlp --tile-loss 256 --checkpoint
mem_case mem_ulysses 2 --seq-len 1024
grep -q "grads *0 B" <("$UPIPE" eval --threads 1 --config "$TMP/v4k.json" --data "$TMP/r.bin" --init /dev/null --seq-len 512 --dry-run) \
  && ok "the eval plan holds no gradients" || bad "eval plan: gradients"
# A plan reads no data: without --data, and with --recall (which the recall corpus r.bin turns
# on by itself), the plan with it, to the byte.
$EVAL --config "$TMP/v4k.json" --data "$TMP/r.bin" --init /dev/null --seq-len 512 --dry-run \
  --mem-report "$TMP/withdata.json" >/dev/null 2>&1
$EVAL --config "$TMP/v4k.json" --init /dev/null --seq-len 512 --recall --dry-run \
  --mem-report "$TMP/nodata.json" >/dev/null 2>&1
a=$(peak "$TMP/withdata.json"); b=$(peak "$TMP/nodata.json")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "eval --dry-run without --data: the same plan ($a)" \
  || bad "eval --dry-run without --data: '$b', with: '$a'"

# ---- bad input: one line, status 1 ----
refuse() { # name phrase ranks args...
  local name=$1 phrase=$2 n=$3 rc=0
  shift 3
  mpirun_n "$n" $EVAL "$@" >"$TMP/$name.err" 2>&1 || rc=$?
  if [ "$rc" -eq 1 ] && [ "$(grep -c 'upipe: error' "$TMP/$name.err")" -eq 1 ] && grep -qi -- "$phrase" "$TMP/$name.err"; then
    ok "$name: $(grep 'upipe: error' "$TMP/$name.err")"
  else bad "$name: exit $rc"; cat "$TMP/$name.err"; fi
}
NOW="--config $GQA/config.json --data $GQA/tokens.bin"
refuse no_weights "--init FILE" 1 $NOW --seq-len 80
refuse both_weights "not both" 1 $G --ckpt "$TMP/ck"
refuse no_data "--data" 1 --config "$GQA/config.json" --init "$GQA/weights.safetensors"
refuse t_not_dividing "--seq-len 81" 2 $NOW --init "$GQA/weights.safetensors" --seq-len 81
refuse too_many_windows "--windows 9" 1 $G --windows 9
refuse window_too_long "--seq-len 5000" 1 $NOW --init "$GQA/weights.safetensors" --seq-len 5000
refuse recall_svg_on_text "not a recall corpus" 1 $G --recall-svg "$TMP/x.svg"
refuse not_a_ckpt "neither a checkpoint" 1 --ckpt "$TMP" --data "$GQA/tokens.bin"
refuse bad_upipe "--upipe-heads 3" 2 $G --upipe-heads 3
refuse unwritable_report "does not exist" 1 $G --report "$TMP/no/such/r.json"
[ ! -e "$TMP/x.svg" ] && ok "a refused run writes nothing" || bad "a refused run left $TMP/x.svg"

# ---- nothing to measure: a mask of zeros stops with one line and writes no report; a recall
# scoring without questions says so (accuracy null, not 0) ----
"$UPIPE" data recall --output "$TMP/rm.bin" --tokens 9000 --distance 100 --mask-output "$TMP/rm.mask" >/dev/null
{ head -c 1024 "$TMP/rm.mask"; head -c 9000 /dev/zero; } >"$TMP/zero.mask"
refuse zero_mask "no target counted: the loss mask is zero over the evaluated windows" 2 $R --windows 2 \
  --loss-mask "$TMP/zero.mask" --report "$TMP/zero.json"
[ ! -e "$TMP/zero.json" ] && ok "zero_mask: no report" || bad "zero_mask: a report with $(tr -d '\n' <"$TMP/zero.json")"
"$UPIPE" data text --input "$SRC/README.md" --output "$TMP/text.bin" >/dev/null
rc=0
"$UPIPE" eval --threads 1 --config "$SRC/configs/tiny.json" --init "$TMP/w.st" --data "$TMP/text.bin" --seq-len 64 \
  --windows 2 --recall --report "$TMP/noq.json" >"$TMP/noq.out" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] && grep -qxF "recall: no question found in the evaluated windows: is this a recall corpus (upipe data recall)?" "$TMP/noq.out" \
  && ! grep -q "accuracy 0.000" "$TMP/noq.out" \
  && python3 -c 'import json, sys; q = json.load(open(sys.argv[1]))["recall"]; assert q["questions"] == 0 and q["accuracy"] is None, q' "$TMP/noq.json"; then
  ok "--recall without questions: $(grep '^recall:' "$TMP/noq.out"); accuracy null in the report"
else bad "--recall without questions: exit $rc"; cat "$TMP/noq.out" "$TMP/noq.json"; fi

# ---- warnings, once (rank 0) and the run goes on: a window beyond max_position_embeddings, a
# --doc-sep the shard never holds ----
sed 's/"max_position_embeddings": 4096/"max_position_embeddings": 256/' "$SRC/configs/tiny.json" >"$TMP/pos256.json"
warns() { # name phrase ranks args...
  local name=$1 phrase=$2 n=$3 rc=0
  shift 3
  mpirun_n "$n" $EVAL "$@" >"$TMP/$name.err" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ] && [ "$(grep -c '^upipe: warning' "$TMP/$name.err")" -eq 1 ] && grep -q -- "^upipe: warning: $phrase" "$TMP/$name.err"; then
    ok "$name: $(grep 'upipe: warning' "$TMP/$name.err")"
  else bad "$name: exit $rc"; cat "$TMP/$name.err"; fi
}
warns eval_seq_beyond "--seq-len 512 is above max_position_embeddings 256 of the config (rope_scaling: none): positions beyond it were never trained" \
  2 --config "$TMP/pos256.json" --data "$TMP/r.bin" --init "$TMP/w.st" --seq-len 512 --windows 2
warns eval_doc_sep_absent "--doc-sep 250 never occurs in $TMP/r.bin" 2 $R --windows 2 --doc-sep 250
finish
