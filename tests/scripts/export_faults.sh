#!/usr/bin/env bash
# `upipe export` never harms a checkpoint and never leaves a half export: an --output that is or
# lies inside a checkpoint folder or a --ckpt-dir is refused (by resolved path: symbolic links,
# "..", a folder that does not exist yet); a folder that is not empty needs --force; a re-export
# killed with SIGKILL or SIGTERM in the middle leaves OUT whole (all files of one export) and no
# temporary folder behind once the next export ran.
source "$(dirname "$0")/lib.sh"
CFG=$SRC/configs/tiny.json
EXPORT="$UPIPE export"
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 3000 --distance 64 >/dev/null || bad "data recall"

refuse() { # name phrase -- command...: status 1, one 'upipe: error' line with phrase
  local name=$1 phrase=$2 rc=0
  shift 3
  timeout 120 "$@" >"$TMP/$name.out" 2>&1 || rc=$?
  if [ "$rc" -eq 1 ] && [ "$(grep -c 'upipe: error' "$TMP/$name.out")" -eq 1 ] && grep -qF -- "$phrase" "$TMP/$name.out"; then
    ok "$name: $(grep 'upipe: error' "$TMP/$name.out")"
  else bad "$name: exit $rc, expected '$phrase'"; cat "$TMP/$name.out"; fi
}

# ---- an export into a checkpoint: refused, the checkpoint's files untouched ----
"$UPIPE" train --quiet --threads 1 --config "$CFG" --data "$TMP/d.bin" --seq-len 64 --steps 4 --ckpt-dir "$TMP/ck" \
  --ckpt-every 2 --ckpt-keep 2 >/dev/null 2>&1 || bad "train with --ckpt-dir"
S4=$TMP/ck/step-00000004
(cd "$TMP/ck" && find . -type f | sort | xargs md5sum) >"$TMP/ck.sum"
ln -s "$S4" "$TMP/s4.link"
refuse into_itself "--output $S4 is the checkpoint folder $S4" -- $EXPORT --ckpt "$S4" --output "$S4" --dtype bf16
refuse into_other_step "is the checkpoint folder $TMP/ck/step-00000002" -- $EXPORT --ckpt "$S4" --output "$TMP/ck/step-00000002" --force
refuse into_ckpt_dir "--output $TMP/ck is the --ckpt-dir $TMP/ck" -- $EXPORT --ckpt "$TMP/ck" --output "$TMP/ck" --force
refuse inside_ckpt_dir "lies inside the --ckpt-dir $TMP/ck" -- $EXPORT --ckpt "$TMP/ck" --output "$TMP/ck/hf"
refuse inside_new_folders "lies inside the checkpoint folder $S4" -- $EXPORT --ckpt "$TMP/ck" --output "$S4/a/b"
refuse via_symlink "--output $TMP/s4.link is the checkpoint folder $S4" -- $EXPORT --ckpt "$TMP/ck" --output "$TMP/s4.link" --force
refuse via_dotdot "is the checkpoint folder $S4" -- $EXPORT --ckpt "$TMP/ck" --output "$TMP/s4.link/../step-00000004/" --force
(cd "$TMP/ck" && find . -type f | sort | xargs md5sum) | cmp -s - "$TMP/ck.sum" && [ -z "$(ls "$TMP/ck" | grep -v '^step-0000000[24]$')" ] \
  && ok "the checkpoints are untouched" || bad "a checkpoint changed: $(ls -R "$TMP/ck")"

# ---- a folder that is not empty: --force, and only a folder of files ----
$EXPORT --ckpt "$TMP/ck" --output "$TMP/hf" >/dev/null || bad "export into a new folder"
refuse not_empty "--output $TMP/hf is not empty (2 entries): add --force" -- $EXPORT --ckpt "$TMP/ck" --output "$TMP/hf" --dtype bf16
mkdir -p "$TMP/home/notes"
refuse force_not_an_export "holds notes, which is not a file" -- $EXPORT --ckpt "$TMP/ck" --output "$TMP/home" --force
[ -d "$TMP/home/notes" ] && ok "a folder with subfolders is left alone" || bad "--force removed $TMP/home/notes"
if $EXPORT --ckpt "$TMP/ck/step-00000002" --output "$TMP/hf" --force --max-shard-size 1MB >"$TMP/force.out" 2>&1 \
  && [ -e "$TMP/hf/model.safetensors.index.json" ] && [ ! -e "$TMP/hf/model.safetensors" ] \
  && [ -z "$(ls -A "$TMP" | grep -E '^(hf\.tmp\.|\.hf\.old\.)')" ]; then
  ok "--force: $(cat "$TMP/force.out"); the single file gone, nothing left beside"
else bad "--force"; cat "$TMP/force.out"; ls -A "$TMP" "$TMP/hf"; fi

# ---- killed in the middle of a re-export: OUT is the whole old export or the whole new one ----
# Two checkpoints of a 64K vocabulary (an export of ~70 MB in 20 MB shards, long enough to be
# caught in the middle), of steps 2 and 4 of one run: different weights, each file checksummed.
sed 's/"vocab_size": 256/"vocab_size": 65536/; s/"hidden_size": 128/"hidden_size": 256/' "$CFG" >"$TMP/big.json"
"$UPIPE" train --quiet --threads 1 --config "$TMP/big.json" --data "$TMP/d.bin" --seq-len 16 --steps 4 \
  --lr 1e-2 --ckpt-dir "$TMP/big" --ckpt-every 2 --ckpt-keep 2 >/dev/null 2>&1 || bad "train the 64K model"
for s in 2 4; do
  $EXPORT --ckpt "$TMP/big/step-0000000$s" --output "$TMP/ref$s" --max-shard-size 20MB >/dev/null || bad "export step $s"
done
[ -s "$TMP/ref2/model.safetensors.index.json" ] && ! diff -r -q "$TMP/ref2" "$TMP/ref4" >/dev/null \
  || bad "the exports of steps 2 and 4 are not two sharded exports that differ"
whole() { # folder: the same files, byte for byte, as ref2 or ref4
  diff -r -q "$1" "$TMP/ref2" >/dev/null 2>&1 && { echo "step 2"; return; }
  diff -r -q "$1" "$TMP/ref4" >/dev/null 2>&1 && { echo "step 4"; return; }
  return 1
}
for sig in KILL TERM; do
  rm -rf "$TMP/out"
  $EXPORT --ckpt "$TMP/big/step-00000002" --output "$TMP/out" --max-shard-size 20MB >/dev/null || bad "first export"
  $EXPORT --ckpt "$TMP/big/step-00000004" --output "$TMP/out" --max-shard-size 20MB --force >"$TMP/re.out" 2>&1 &
  pid=$!
  caught=0
  while kill -0 "$pid" 2>/dev/null; do # until the first shard of the new export is complete
    if ls "$TMP"/out.tmp.*/model-00001-of-*.safetensors >/dev/null 2>&1; then kill -$sig "$pid"; caught=1; break; fi
    sleep 0.01
  done
  rc=0; wait "$pid" 2>/dev/null || rc=$?
  # the kill may land after the swap: then OUT is the whole new export
  if [ "$caught" = 0 ] && [ "$rc" != 0 ]; then bad "SIG$sig: the export failed by itself (exit $rc)"; cat "$TMP/re.out"
  elif got=$(whole "$TMP/out"); then ok "SIG$sig during a re-export (caught $caught, exit $rc): $TMP/out is the whole export of $got"
  else bad "SIG$sig during a re-export (caught $caught): $TMP/out is a mix: $(ls "$TMP/out")"; fi
  # SIGTERM: the handler removed the temporary folder; SIGKILL: the next export removes it
  stale=$(ls -A "$TMP" | grep -cE '^out\.tmp\.' || true)
  [ "$sig" = KILL ] && $EXPORT --ckpt "$TMP/big/step-00000004" --output "$TMP/out" --max-shard-size 20MB --force >/dev/null
  left=$(ls -A "$TMP" | grep -E '^(out\.tmp\.|\.out\.old\.)' || true)
  [ -z "$left" ] && ok "SIG$sig: no temporary folder left beside $TMP/out ($stale after the signal)" || bad "SIG$sig: left $left"
done
# --init reads the export left by the interrupted one
"$UPIPE" train --quiet --threads 1 --config "$TMP/big.json" --data "$TMP/d.bin" --seq-len 16 --steps 1 --lr 0 \
  --init "$TMP/out" >"$TMP/init.out" 2>&1 && ok "--init $TMP/out loads the export of $(whole "$TMP/out")" \
  || { bad "--init $TMP/out"; cat "$TMP/init.out"; }
finish
