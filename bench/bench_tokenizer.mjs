// bench_tokenizer.mjs — the reference speeds for bench/bench_tokenizer.sh: encode MB/s of one
// text in node (one thread) with tiktoken (WASM, cl100k_base: the pattern family of Llama 3) and
// with HF's @huggingface/tokenizers on the given tokenizer folders; best of 2 runs each.
// usage: node bench_tokenizer.mjs NODE_MODULES TEXT TOKENIZER_DIR ...
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [nm, textPath, ...dirs] = process.argv.slice(2);
const text = fs.readFileSync(textPath, "utf8");
const mb = Buffer.byteLength(text, "utf8") / 1e6;
const best = (f) => {
  let b = Infinity, n = 0;
  for (let r = 0; r < 2; r++) {
    const t0 = process.hrtime.bigint();
    n = f();
    b = Math.min(b, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return [b, n];
};
const parts = [];
for (let at = 0; at < text.length; ) {
  let end = text.indexOf("\n", at + 65536);
  end = end < 0 ? text.length : end + 1;
  parts.push(text.slice(at, end));
  at = end;
}
const hfParts = parts.slice(0, 16);
const hfMb = Buffer.byteLength(hfParts.join(""), "utf8") / 1e6;
const require = createRequire(path.join(nm, "x.js"));
const { get_encoding } = require("tiktoken");
const enc = get_encoding("cl100k_base");
let [s, n] = best(() => enc.encode(text, [], []).length);
console.log(`  tiktoken cl100k_base (WASM):  ${(mb / s).toFixed(2)} MB/s  (${n} tokens, ${s.toFixed(2)} s)`);
enc.free();
const { Tokenizer } = await import(pathToFileURL(path.join(nm, "@huggingface/tokenizers/dist/tokenizers.mjs")).href);
for (const dir of dirs) {
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = path.join(dir, "tokenizer_config.json");
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
  const tok = new Tokenizer(tj, cfg);
  [s, n] = best(() => {
    let k = 0;
    for (const part of hfParts) k += tok.encode(part, { add_special_tokens: false }).ids.length;
    return k;
  });
  console.log(`  @huggingface/tokenizers ${path.basename(path.dirname(dir))}: ${(hfMb / s).toFixed(2)} MB/s  (${hfMb.toFixed(2)} MB, ${n} tokens, ${s.toFixed(2)} s)`);
}
