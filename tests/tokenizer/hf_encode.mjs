// hf_encode.mjs — the reference ids: encodes every line of a corpus (JSON Lines, {"text": s})
// with HF's @huggingface/tokenizers (add_special_tokens: true) and writes one line of
// space-separated ids per corpus line.
// usage: node hf_encode.mjs NODE_MODULES TOKENIZER_DIR CORPUS.jsonl OUT.txt
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nm, dir, corpus, out] = process.argv.slice(2);
const lib = path.join(nm, "@huggingface/tokenizers/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib).href);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tj, cfg);
const lines = [];
for (const line of fs.readFileSync(corpus, "utf8").split("\n")) {
  if (line === "") continue;
  const { text } = JSON.parse(line);
  lines.push(tok.encode(text, { add_special_tokens: true }).ids.join(" "));
}
fs.writeFileSync(out, lines.join("\n") + "\n");
