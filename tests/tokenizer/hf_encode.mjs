// hf_encode.mjs — the reference: HF's Rust library (its Node binding, npm `tokenizers`, the
// library transformers runs) on a local tokenizer.json.
// Corpus mode (tokenizer_exact): encodes every line of a corpus (JSON Lines, {"text": s}) with
// the post-processor's tokens and writes one line of space-separated ids per corpus line.
// JSON modes (chat_data.py): "encode" writes the ids of each text of a JSON list without the
// post-processor's tokens (as apply_chat_template(tokenize=True) encodes a rendered
// conversation); "decode" the text of each id list of a JSON list (special tokens kept) with
// transformers' clean-up of spaces before punctuation where tokenizer_config.json asks for it,
// "rawdecode" the same as the Rust library writes it (no clean-up).
// The binding matches every added token in the text, special or not (it has no switch for
// encode_special_tokens): lines holding special-token strings compare with upipe's
// --allow-special.
// usage: node hf_encode.mjs NODE_MODULES TOKENIZER_DIR CORPUS.jsonl OUT.txt
//        node hf_encode.mjs NODE_MODULES TOKENIZER_DIR encode|decode|rawdecode IN.json OUT.json
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
const [nm, dir] = args;
const require = createRequire(path.resolve(nm, "x.js"));
const { Tokenizer } = require("tokenizers");
const tok = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
const cfgPath = path.join(dir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};

// transformers' PreTrainedTokenizerBase.clean_up_tokenization
const cleanUp = (s) =>
  s
    .replaceAll(" .", ".")
    .replaceAll(" ?", "?")
    .replaceAll(" !", "!")
    .replaceAll(" ,", ",")
    .replaceAll(" ' ", "'")
    .replaceAll(" n't", "n't")
    .replaceAll(" 'm", "'m")
    .replaceAll(" 's", "'s")
    .replaceAll(" 've", "'ve")
    .replaceAll(" 're", "'re");

const encodeAll = async (texts, addSpecialTokens) =>
  (await tok.encodeBatch(texts, { addSpecialTokens })).map((e) => e.getIds());

const mode = args[2];
if (mode === "encode" || mode === "decode" || mode === "rawdecode") {
  const [, , , inPath, outPath] = args;
  const items = JSON.parse(fs.readFileSync(inPath, "utf8"));
  let out;
  if (mode === "encode") {
    out = await encodeAll(items, false);
  } else {
    out = [];
    for (const ids of items) {
      const s = await tok.decode(ids, false);
      out.push(mode === "decode" && cfg.clean_up_tokenization_spaces ? cleanUp(s) : s);
    }
  }
  fs.writeFileSync(outPath, JSON.stringify(out));
} else {
  const texts = fs
    .readFileSync(mode, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l).text);
  const ids = await encodeAll(texts, true);
  fs.writeFileSync(args[3], ids.map((x) => x.join(" ")).join("\n") + "\n");
}
