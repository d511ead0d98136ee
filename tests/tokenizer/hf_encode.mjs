// hf_encode.mjs — the reference: HF's @huggingface/tokenizers on a local tokenizer.json.
// Corpus mode (tokenizer_exact): encodes every line of a corpus (JSON Lines, {"text": s}) with
// add_special_tokens: true and writes one line of space-separated ids per corpus line.
// JSON modes (chat_data.py): "encode" writes the ids of each text of a JSON list without the
// post-processor's tokens (as apply_chat_template(tokenize=True) encodes a rendered
// conversation); "decode" the text of each id list of a JSON list (special tokens kept),
// "rawdecode" the same as the tokenizers library writes it (transformers' clean-up of spaces
// before punctuation, which tokenizer_config.json may ask for, not applied).
// usage: node hf_encode.mjs NODE_MODULES TOKENIZER_DIR CORPUS.jsonl OUT.txt
//        node hf_encode.mjs NODE_MODULES TOKENIZER_DIR encode|decode|rawdecode IN.json OUT.json
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const args = process.argv.slice(2);
const [nm, dir] = args;
const lib = path.join(nm, "@huggingface/tokenizers/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib).href);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tj, cfg);
if (args.length === 5) {
  const [, , mode, inPath, outPath] = args;
  const items = JSON.parse(fs.readFileSync(inPath, "utf8"));
  const out = items.map((x) =>
    mode === "encode"
      ? tok.encode(x, { add_special_tokens: false }).ids
      : tok.decode(x, { skip_special_tokens: false, clean_up_tokenization_spaces: mode === "decode" ? undefined : false }),
  );
  fs.writeFileSync(outPath, JSON.stringify(out));
} else {
  const [, , corpus, out] = args;
  const lines = [];
  for (const line of fs.readFileSync(corpus, "utf8").split("\n")) {
    if (line === "") continue;
    const { text } = JSON.parse(line);
    lines.push(tok.encode(text, { add_special_tokens: true }).ids.join(" "));
  }
  fs.writeFileSync(out, lines.join("\n") + "\n");
}
