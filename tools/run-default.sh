#!/usr/bin/env bash
# The README's main job: make a byte-level shard from a text every Debian system has (or a
# synthetic recall corpus when it is missing) and train the tiny model on it for a few hundred
# steps, so the loss visibly falls.
set -euo pipefail
upipe=${1:-build/upipe}
out=${OUT_DIR:-out}
mkdir -p "$out"
text=/usr/share/common-licenses/GPL-3
if [ -r "$text" ]; then
  "$upipe" data text --input "$text" --output "$out/text.bin"
else
  "$upipe" data recall --output "$out/text.bin" --tokens 200000 --distance 256
fi
"$upipe" train --config configs/tiny.json --data "$out/text.bin" --seq-len 512 --steps 200 \
  --lr 2e-3 --log "$out/train.jsonl" --mem-report "$out/mem.json" --save "$out/model.safetensors"
echo "wrote $out/train.jsonl, $out/mem.json and $out/model.safetensors"
