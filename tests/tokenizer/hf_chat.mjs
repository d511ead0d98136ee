// hf_chat.mjs — HF's @huggingface/tokenizers for the chat data test (chat_data.py): "encode"
// writes the ids of each text of a JSON list without the post-processor's tokens (as
// apply_chat_template(tokenize=True) encodes a rendered conversation); "decode" writes the
// text of each id list of a JSON list (special tokens kept). Output: a JSON list.
// usage: node hf_chat.mjs NODE_MODULES TOKENIZER_DIR encode|decode IN.json OUT.json
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nm, dir, mode, inPath, outPath] = process.argv.slice(2);
const lib = path.join(nm, "@huggingface/tokenizers/dist/tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(lib).href);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
const tok = new Tokenizer(tj, cfg);
const items = JSON.parse(fs.readFileSync(inPath, "utf8"));
const out = items.map((x) =>
  mode === "encode"
    ? tok.encode(x, { add_special_tokens: false }).ids
    : tok.decode(x, { skip_special_tokens: false }),
);
fs.writeFileSync(outPath, JSON.stringify(out));
