#!/usr/bin/env bash
# `upipe data` with a tokenizer on awkward inputs, and the flags of data, export and plot:
#   text that is not UTF-8: a warning with the count, the first offset and what became of the
#   bytes; --strict-utf8 refuses the file (one line, exit 1, no output);
#   empty files among many are skipped and counted; all of them empty is refused;
#   a killed run's OUT.tmp.<pid> goes at the next write of OUT (a live process's stays);
#   the first progress line of a long input (no rate yet) shows no ETA;
#   --help of every subcommand, and bad flag values in train's one-line wording.
# The tokenizer is a small byte-level BPE written here (Llama 3's split pattern, so long text is
# cut into blocks), so the test needs no fixture.
source "$(dirname "$0")/lib.sh"
python3 - "$TMP/tok.json" <<'EOF'
import json, sys
bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b), cs.append(256 + n)
        n += 1
alpha = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {alpha[b]: b for b in range(256)}
merges = []
for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"),
             ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld")]:
    vocab[a + b] = len(vocab)
    merges.append(a + " " + b)
pat = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
       " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
json.dump({
    "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>", "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": vocab, "merges": merges}}, open(sys.argv[1], "w"))
EOF
TOK=$TMP/tok.json
D="$UPIPE data"

# stderr must hold want (an ERE); exit 1, one line, and no file at out (nor out.tmp.*)
refuse() { # name want out -- cmd...
  local name=$1 want=$2 out=$3
  shift 4
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  local rc=$?
  if [ $rc -eq 1 ] && grep -Eq -- "$want" "$TMP/$name.err" && [ "$(wc -l <"$TMP/$name.err")" -eq 1 ] &&
    ! ls "$out" "$out".tmp.* >/dev/null 2>&1; then
    ok "$name: $(cat "$TMP/$name.err")"
  else
    bad "$name: rc $rc, stderr: $(cat "$TMP/$name.err"), files: $(ls "$TMP" | grep -F "${out##*/}")"
  fi
}

# ---- text that is not UTF-8 ----
printf 'hello world\n' >"$TMP/a.txt"
# three invalid sequences: a stray run at byte 2, a cut 3-byte character, a surrogate
printf 'ab\xff\xfe cd \xe2\x82 x\xed\xa0\x80\n' >"$TMP/bad.txt"
if $D text --tokenizer "$TOK" --input "$TMP/a.txt" "$TMP/bad.txt" --output "$TMP/u.bin" >"$TMP/u.out" 2>"$TMP/u.err"; then
  want="warning: $TMP/bad.txt is not valid UTF-8: 3 invalid sequences, the first at byte offset 2; their bytes were kept as byte tokens, which decode back to the same bytes"
  if grep -qF -- "$want" "$TMP/u.err" && [ "$(wc -l <"$TMP/u.err")" -eq 1 ]; then
    ok "invalid UTF-8 warned once: $(cat "$TMP/u.err")"
  else bad "invalid UTF-8 warning: $(cat "$TMP/u.err")"; fi
else bad "invalid UTF-8 without --strict-utf8 refused: $(cat "$TMP/u.err")"; fi
# the bytes are kept: byte-level ids are the byte values here, so 0xff 0xfe are two ids in a row
python3 - "$TMP/u.bin" <<'EOF' && ok "the invalid bytes are in the shard" || bad "the invalid bytes are not in the shard"
import struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<3i", raw[:12])[2]
ids = struct.unpack("<%dH" % n, raw[1024:1024 + 2 * n])
sys.exit(0 if any(ids[i:i + 2] == (0xff, 0xfe) for i in range(n - 1)) else 1)
EOF
refuse strict_utf8 "^upipe: error: $TMP/bad.txt: not valid UTF-8 at byte offset 2 \(--strict-utf8\)" "$TMP/st.bin" -- \
  $D text --tokenizer "$TOK" --input "$TMP/a.txt" "$TMP/bad.txt" --output "$TMP/st.bin" --strict-utf8
refuse strict_utf8_needs_tokenizer "--strict-utf8 needs --tokenizer" "$TMP/st.bin" -- \
  $D text --input "$TMP/a.txt" --output "$TMP/st.bin" --strict-utf8
$D text --tokenizer "$TOK" --input "$TMP/a.txt" --output "$TMP/st.bin" --strict-utf8 >/dev/null 2>"$TMP/st.err" &&
  [ ! -s "$TMP/st.err" ] && ok "--strict-utf8 takes valid UTF-8 silently" || bad "--strict-utf8 on valid text: $(cat "$TMP/st.err")"

# ---- empty files ----
: >"$TMP/e1.txt"
: >"$TMP/e2.txt"
if $D text --tokenizer "$TOK" --input "$TMP/e1.txt" "$TMP/a.txt" "$TMP/e2.txt" --output "$TMP/e.bin" >"$TMP/e.out" 2>&1 &&
  grep -q "wrote 4 tokens (1 document of 1 file, 2 empty files skipped" "$TMP/e.out"; then
  ok "empty text files skipped and counted: $(head -1 "$TMP/e.out")"
else bad "empty text files among others: $(cat "$TMP/e.out")"; fi
printf '\n\n' >"$TMP/blank.jsonl"
: >"$TMP/e.jsonl"
printf '{"text": "hello"}\n' >"$TMP/t.jsonl"
if $D jsonl --tokenizer "$TOK" --input "$TMP/blank.jsonl" "$TMP/t.jsonl" "$TMP/e.jsonl" --output "$TMP/j.bin" >"$TMP/j.out" 2>&1 &&
  grep -q "(1 document of 1 file, 2 empty files skipped" "$TMP/j.out"; then
  ok "JSON Lines files without a document skipped and counted: $(head -1 "$TMP/j.out")"
else bad "empty JSON Lines files among others: $(cat "$TMP/j.out")"; fi
refuse all_empty "data text: all 2 inputs are empty: nothing to write" "$TMP/ae.bin" -- \
  $D text --tokenizer "$TOK" --input "$TMP/e1.txt" "$TMP/e2.txt" --output "$TMP/ae.bin"
refuse one_empty "e1.txt: the file is empty: nothing to write" "$TMP/ae.bin" -- \
  $D text --tokenizer "$TOK" --input "$TMP/e1.txt" --output "$TMP/ae.bin"
refuse all_empty_jsonl "data jsonl: all 2 inputs are empty \(or only empty lines\)" "$TMP/ae.bin" -- \
  $D jsonl --tokenizer "$TOK" --input "$TMP/blank.jsonl" "$TMP/e.jsonl" --output "$TMP/ae.bin"

# ---- a long input: no ETA before a rate; killed, its temporary file goes at the next write ----
yes 'hello world, hello again' | head -c $((64 << 20)) >"$TMP/big.txt"
$D text --tokenizer "$TOK" --input "$TMP/big.txt" --output "$TMP/big.bin" --threads 1 >/dev/null 2>"$TMP/big.err" &
pid=$!
for _ in $(seq 600); do grep -q "upipe data:" "$TMP/big.err" && break; sleep 0.1; done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
first=$(head -1 "$TMP/big.err")
if [[ "$first" == "upipe data: 0 B of 64.00 MiB, 0.0 MB/s" ]]; then ok "first progress line without an ETA: $first"
else bad "first progress line: '$first'"; fi
[ -e "$TMP/big.bin.tmp.$pid" ] || echo "note: the run ended before it was killed; a temporary file is made by hand"
: >"$TMP/big.bin.tmp.$pid"
sh -c 'exit 0' &
dead=$!
wait $dead
: >"$TMP/big.bin.tmp.$dead"
: >"$TMP/big.bin.tmp.$$" # a live process's (this shell's): kept
: >"$TMP/big.bin.tmp.x1" # not a pid: kept
if $D text --tokenizer "$TOK" --input "$TMP/a.txt" --output "$TMP/big.bin" >/dev/null 2>"$TMP/sweep.err" &&
  grep -q "removed 2 temporary files of $TMP/big.bin left by a run that was killed" "$TMP/sweep.err" &&
  [ ! -e "$TMP/big.bin.tmp.$pid" ] && [ ! -e "$TMP/big.bin.tmp.$dead" ] &&
  [ -e "$TMP/big.bin.tmp.$$" ] && [ -e "$TMP/big.bin.tmp.x1" ]; then
  ok "stale temporary files swept, a live one kept: $(cat "$TMP/sweep.err")"
else bad "sweep: $(cat "$TMP/sweep.err"); left: $(ls "$TMP" | grep big.bin)"; fi
rm -f "$TMP/big.txt"

# ---- --help: every flag of every table is on its page (flags_print_help checks it) ----
for cmd in "data" "data text" "data jsonl" "data recall" "data decode" "export" "plot"; do
  for h in --help -h; do
    # shellcheck disable=SC2086
    if "$UPIPE" $cmd $h >"$TMP/help.out" 2>&1 && grep -q -- "--help" "$TMP/help.out"; then :
    else bad "upipe $cmd $h: $(tail -3 "$TMP/help.out")"; fi
  done
done
"$UPIPE" data text --help | grep -q -- "--strict-utf8" && ok "help of data, export and plot" || bad "data text --help lacks --strict-utf8"
"$UPIPE" --help | grep -q "upipe data decode" && ok "upipe --help lists every data subcommand" || bad "upipe --help: $("$UPIPE" --help)"

# ---- bad values: train's wording ----
refuse bad_threads "^upipe: error: --threads expects an integer in \[1, 4096\], got '0'$" "$TMP/x.bin" -- \
  $D text --tokenizer "$TOK" --input "$TMP/a.txt" --output "$TMP/x.bin" --threads 0
refuse bad_doc_sep "^upipe: error: --doc-sep expects an integer in \[0, 2147483647\], got '-5'$" "$TMP/x.bin" -- \
  $D text --input "$TMP/a.txt" --output "$TMP/x.bin" --doc-sep -5
refuse bad_tokens "^upipe: error: --tokens expects an integer in \[16, 2147483647\], got '5'$" "$TMP/x.bin" -- \
  $D recall --output "$TMP/x.bin" --tokens 5
refuse bad_count "--count expects an integer in \[1, " "$TMP/x.bin" -- \
  $D decode --tokenizer "$TOK" --input "$TMP/e.bin" --count 0
refuse no_value "^upipe: error: --output needs a value: see upipe data text --help$" "$TMP/x.bin" -- \
  $D text --input "$TMP/a.txt" --output
refuse flag_as_value "--output needs a value but is followed by the flag --doc-sep" "$TMP/x.bin" -- \
  $D text --input "$TMP/a.txt" --output --doc-sep 3
refuse unknown_data "^upipe: error: unknown flag '--echo': see upipe data text --help$" "$TMP/x.bin" -- \
  $D text --input "$TMP/a.txt" --output "$TMP/x.bin" --echo
refuse stray "unexpected argument 'stray'" "$TMP/x.bin" -- $D recall --output "$TMP/x.bin" stray --tokens 100
refuse bad_dtype "^upipe: error: --dtype expects f32 or bf16, got 'fp8'$" "$TMP/x.bin" -- \
  "$UPIPE" export --ckpt "$TMP" --output "$TMP/x.bin" --dtype fp8
refuse bad_size "^upipe: error: --max-shard-size expects a size such as" "$TMP/x.bin" -- \
  "$UPIPE" export --ckpt "$TMP" --output "$TMP/x.bin" --max-shard-size lots
refuse unknown_plot "^upipe: error: unknown flag '--bogus': see upipe plot --help$" "$TMP/x.bin" -- \
  "$UPIPE" plot --log "$TMP/l.jsonl" --svg "$TMP/x.bin" --bogus
# --input takes the values up to the next flag, and may be repeated
if $D text --input "$TMP/a.txt" "$TMP/a.txt" --output "$TMP/r.bin" --input "$TMP/a.txt" >"$TMP/r.out" 2>&1 &&
  grep -q "wrote 36 tokens (bytes of 3 files)" "$TMP/r.out"; then ok "--input A B ... --input C: $(head -1 "$TMP/r.out")"
else bad "--input lists: $(cat "$TMP/r.out")"; fi
finish
