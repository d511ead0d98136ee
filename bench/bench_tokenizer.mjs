// bench_tokenizer.mjs — the reference speed for bench/bench_tokenizer.sh: HF's Rust library (its
// Node binding, npm `tokenizers`) encoding the documents of a JSON Lines file ({"text": s} per
// line) with encodeBatch, without the post-processor's tokens, on RAYON_NUM_THREADS threads (set
// by the caller: the library's thread pool reads it once). One warm-up batch (the library keeps
// no cache between calls), then the median of ROUNDS (default 5) timed batches; prints one line:
// "MB/s TOKENS SECONDS".
// usage: RAYON_NUM_THREADS=N node bench_tokenizer.mjs NODE_MODULES TOKENIZER_DIR DOCS.jsonl
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [nm, dir, docsPath] = process.argv.slice(2);
const require = createRequire(path.resolve(nm, "x.js"));
const { Tokenizer } = require("tokenizers");
const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
const docs = fs
  .readFileSync(docsPath, "utf8")
  .split("\n")
  .filter((l) => l !== "")
  .map((l) => JSON.parse(l).text);
const mb = docs.reduce((s, d) => s + Buffer.byteLength(d, "utf8"), 0) / 1e6;
const opts = { addSpecialTokens: false };
const run = async () => {
  const t0 = process.hrtime.bigint();
  const encs = await tok.encodeBatch(docs, opts);
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  return [s, encs.reduce((k, e) => k + e.getIds().length, 0)];
};
await run();
const times = [];
let ntok = 0;
for (let r = 0; r < Number(process.env.ROUNDS || 5); r++) {
  const [s, n] = await run();
  times.push(s);
  ntok = n;
}
times.sort((a, b) => a - b);
const med = times[Math.floor(times.length / 2)];
console.log(`${(mb / med).toFixed(2)} ${ntok} ${med.toFixed(3)}`);
