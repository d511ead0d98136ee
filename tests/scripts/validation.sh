#!/usr/bin/env bash
# Validation during training (--val-data): it changes nothing training computes (the weights
# after AdamW steps are the same bytes with and without it, plain and with the whole stack on 2
# ranks); its loss is `upipe eval`'s on the same weights and windows; the log, the terminal and
# the closing line carry it; `upipe plot` draws the log as well-formed SVG; bad input.
source "$(dirname "$0")/lib.sh"
CFG=$SRC/configs/tiny.json
"$UPIPE" data recall --output "$TMP/train.bin" --tokens 8000 --distance 100 >/dev/null
"$UPIPE" data recall --output "$TMP/val.bin" --tokens 3000 --distance 100 --seed 5 >/dev/null
T="--config $CFG --data $TMP/train.bin --seq-len 256 --steps 4 --lr 1e-3 --quiet --threads 1"

train() { # name ranks args...
  local name=$1 n=$2
  shift 2
  mpirun_n "$n" "$UPIPE" train $T "$@" --save "$TMP/$name.st" --log "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1 \
    || { bad "$name: run failed"; cat "$TMP/$name.out"; return 1; }
}
same_weights() { # a b
  cmp -s "$TMP/$1.st" "$TMP/$2.st" && ok "$1: the weights after 4 steps are the bytes of $2's" \
    || bad "$1: weights differ from $2's"
}
train plain 1
train val 1 --val-data "$TMP/val.bin" --val-every 2 && same_weights val plain
STACK="--fsdp --offload $TMP --tile-mlp 64 --tile-loss 48 --upipe-heads 2"
train stack 2 $STACK
train stack_val 2 $STACK --val-data "$TMP/val.bin" --val-every 1 --val-windows 3 && same_weights stack_val stack

# the log: val_loss on steps 2 and 4 only, recall on this recall corpus
n=$(grep -c '"val_loss"' "$TMP/val.jsonl")
[ "$n" = 2 ] && sed -n 2p "$TMP/val.jsonl" | grep -q '"val_loss"' && grep -q '"val_recall_accuracy"' "$TMP/val.jsonl" \
  && ok "log: val_loss on steps 2 and 4, with recall accuracy" || bad "log: $n val records"
# the last validation is `upipe eval` of the final weights on the same windows (default 4)
"$UPIPE" eval --quiet --threads 1 --config "$CFG" --data "$TMP/val.bin" --init "$TMP/val.st" --seq-len 256 \
  --windows 4 --report "$TMP/e.json" >/dev/null 2>&1 || bad "eval of the final weights"
lv=$(json_field "$(tail -n1 "$TMP/val.jsonl")" val_loss)
le=$(sed -n 's/^  "loss": *\([-+0-9.eE]*\).*/\1/p' "$TMP/e.json")
[ -n "$lv" ] && [ "$lv" = "$le" ] && ok "last validation loss $lv = upipe eval of the final weights" \
  || bad "last validation loss '$lv' vs eval '$le'"
# the terminal: a val line per validation, and the closing line
"$UPIPE" train ${T/--quiet/} --val-data "$TMP/val.bin" --val-every 2 >"$TMP/term.out" 2>&1
[ "$(grep -c '^val ' "$TMP/term.out")" = 2 ] && grep -q "^validation: loss $(printf %.4f "$lv") .*after step 4, recall accuracy" "$TMP/term.out" \
  && ok "terminal: $(tail -n1 "$TMP/term.out")" || { bad "terminal lines"; cat "$TMP/term.out"; }
# the plan counts the validation buffers: plan = measured peak
mpirun_n 2 "$UPIPE" train $T --val-data "$TMP/val.bin" --dry-run --mem-report "$TMP/p.json" >/dev/null 2>&1
mpirun_n 2 "$UPIPE" train $T --val-data "$TMP/val.bin" --mem-report "$TMP/m.json" >/dev/null 2>&1
p=$(buffer_peak "$TMP/p.json"); m=$(buffer_peak "$TMP/m.json")
[ -n "$p" ] && [ "$p" = "$m" ] && ok "plan = measured peak with validation: $p" || bad "plan '$p' vs measured '$m'"

# ---- upipe plot ----
if "$UPIPE" plot --log "$TMP/val.jsonl" --svg "$TMP/loss.svg" >"$TMP/plot.out" 2>&1 && python3 - "$TMP/loss.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
lines = [e for e in root.iter() if e.tag.endswith("polyline")]
assert root.tag.endswith("svg") and len(lines) == 2, len(lines)
assert len(lines[0].get("points").split()) == 4 and len(lines[1].get("points").split()) == 2
EOF
then ok "plot: $(cat "$TMP/plot.out"); XML with a training and a validation curve"
else bad "plot"; cat "$TMP/plot.out"; fi

# ---- bad input ----
refuse() { # name phrase command...
  local name=$1 phrase=$2 rc=0
  shift 2
  "$@" >"$TMP/$name.err" 2>&1 || rc=$?
  if [ "$rc" -eq 1 ] && [ "$(grep -c 'upipe: error' "$TMP/$name.err")" -eq 1 ] && grep -qi -- "$phrase" "$TMP/$name.err"; then
    ok "$name: $(grep 'upipe: error' "$TMP/$name.err")"
  else bad "$name: exit $rc"; cat "$TMP/$name.err"; fi
}
refuse val_every_alone "--val-data" "$UPIPE" train $T --val-every 2
refuse val_windows_too_many "--val-windows 99" "$UPIPE" train $T --val-data "$TMP/val.bin" --val-windows 99
"$UPIPE" data recall --output "$TMP/small.bin" --tokens 100 --distance 10 >/dev/null
refuse val_too_small "fewer than one window" "$UPIPE" train $T --val-data "$TMP/small.bin"
refuse val_missing "--val-data" "$UPIPE" train $T --val-data "$TMP/nope.bin"
printf '{"step": 1, "loss": 2.0}\nnot json\n' >"$TMP/bad.jsonl"
refuse plot_bad_line "line 2" "$UPIPE" plot --log "$TMP/bad.jsonl" --svg "$TMP/x.svg"
refuse plot_no_svg "--svg" "$UPIPE" plot --log "$TMP/val.jsonl"
[ ! -e "$TMP/x.svg" ] && ok "a refused plot writes nothing" || bad "a refused plot left a file"
finish
