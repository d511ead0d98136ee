#!/usr/bin/env python3
"""Chat templates rendered by upipe (tests/tools/chat_render) and by Jinja2 the way transformers
renders them (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, the
raise_exception and strftime_now globals, a tojson filter with ensure_ascii=False; messages,
tools=None, documents=None, add_generation_prompt and the special tokens as variables), over
the conversations of tests/fixtures/chat, both with and without the generation prompt: the
text must be equal byte for byte, or both must fail (raise_exception's message equal). Then
the trained spans of tests/fixtures/chat/spans.json (derived by hand) and the segments'
invariants (they cover the text in order; each span is content + end of turn).

Templates: the fixtures tests/fixtures/chat/*.jinja, and the real tokenizer_config.json files
that tools/chat-fixtures.sh fetched into $UPIPE_CHAT_FIXTURES (default
~/.cache/upipe/chat-fixtures); absent ones are skipped with a line.
Usage: chat_reference.py CHAT_RENDER SOURCE_DIR     (exit 0 pass, 1 fail, 77 no jinja2)"""
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile

try:
    import jinja2
    import jinja2.ext
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("chat_reference: skip: python3-jinja2 is not installed (apt-get install python3-jinja2)")
    sys.exit(77)

NOW = 1764633600  # 2025-12-02 00:00:00 UTC: strftime_now's time on both sides
TOKEN_KEYS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
              "mask_token"]


def token_text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def special_tokens(cfg):
    """transformers' special_tokens_map: the special tokens that are set."""
    out = {}
    for k in TOKEN_KEYS:
        s = token_text(cfg.get(k))
        if s:
            out[k] = s
    add = [token_text(v) for v in cfg.get("additional_special_tokens") or []]
    add = [a for a in add if a is not None]
    if add:
        out["additional_special_tokens"] = add
    return out


def environment():
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def reference(source, tokens, conv, gen):
    try:
        t = environment().from_string(source)
        kw = dict(tokens)
        kw.update(conv.get("kwargs") or {})
        return {"text": t.render(messages=conv["messages"], tools=None, documents=None,
                                 add_generation_prompt=gen, **kw)}
    except TemplateError as e:
        return {"error": str(e)}
    except Exception as e:  # a template's type errors (transformers raises them too)
        return {"error": type(e).__name__ + ": " + str(e)}


def templates(src_dir):
    """(name, source, tokens, args for chat_render)"""
    fx = os.path.join(src_dir, "tests", "fixtures", "chat")
    for path in sorted(glob.glob(os.path.join(fx, "*.jinja"))):
        name = os.path.basename(path)[:-6]
        tok_path = os.path.join(fx, name + ".tokens.json")
        tokens = json.load(open(tok_path)) if os.path.exists(tok_path) else {}
        args = ["--template", path] + (["--tokens", tok_path] if os.path.exists(tok_path) else [])
        yield name, open(path, encoding="utf-8").read(), special_tokens(tokens), args
    cache = os.environ.get("UPIPE_CHAT_FIXTURES",
                           os.path.expanduser("~/.cache/upipe/chat-fixtures"))
    for name in ["llama3", "llama3_1", "qwen3"]:
        cfg_path = os.path.join(cache, name, "tokenizer_config.json")
        if not os.path.exists(cfg_path):
            print(f"chat_reference: skip {name}: {cfg_path} is absent (tools/chat-fixtures.sh)")
            continue
        cfg = json.load(open(cfg_path, encoding="utf-8"))
        source = cfg["chat_template"]
        if isinstance(source, list):
            source = next(t["template"] for t in source if t.get("name") == "default")
        yield "npm-" + name, source, special_tokens(cfg), ["--config", cfg_path]


def main():
    chat_render, src_dir = sys.argv[1], sys.argv[2]
    convs = json.load(open(os.path.join(src_dir, "tests/fixtures/chat/conversations.json"),
                           encoding="utf-8"))
    spans = json.load(open(os.path.join(src_dir, "tests/fixtures/chat/spans.json"),
                           encoding="utf-8"))
    fails = 0
    checked = 0
    span_checks = 0
    for name, source, tokens, args in templates(src_dir):
        cases = []
        for conv in convs:
            for gen in (False, True):
                cases.append({"messages": conv["messages"], "add_generation_prompt": gen,
                              "now": NOW, "kwargs": conv.get("kwargs") or {}})
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cases, f, ensure_ascii=False)
            cases_path = f.name
        try:
            out = subprocess.run([chat_render] + args + ["--cases", cases_path],
                                 capture_output=True, check=False)
        finally:
            os.unlink(cases_path)
        if out.returncode != 0:
            print(f"FAIL {name}: chat_render exited {out.returncode}: {out.stderr.decode()}")
            fails += 1
            continue
        lines = out.stdout.decode("utf-8").splitlines()
        if len(lines) == 1 and "template_error" in json.loads(lines[0]):
            print(f"FAIL {name}: {json.loads(lines[0])['template_error']}")
            fails += 1
            continue
        results = [json.loads(l) for l in lines]
        k = 0
        for conv in convs:
            for gen in (False, True):
                got, want = results[k], reference(source, tokens, conv, gen)
                k += 1
                checked += 1
                what = f"{name} / {conv['name']} / add_generation_prompt={gen}"
                if "error" in want or "error" in got:
                    ok = "error" in want and "error" in got
                    if ok and "raise_exception: " in got["error"]:
                        ok = got["error"].endswith("raise_exception: " + want["error"][:300])
                    if not ok:
                        print(f"FAIL {what}: jinja2 {want}, upipe {got}")
                        fails += 1
                    continue
                if got["text"] != want["text"]:
                    print(f"FAIL {what}: text differs\n  jinja2: {want['text']!r}\n"
                          f"  upipe:  {got['text']!r}")
                    fails += 1
                    continue
                fails += check_segments(what, got, conv)
                exp = spans.get(name, {}).get(conv["name"])
                if exp is not None and not gen:
                    b = got["text"].encode("utf-8")
                    have = [b[s:e].decode("utf-8") for s, e in got["spans"]]
                    span_checks += 1
                    if have != exp:
                        print(f"FAIL {what}: spans\n  expected {exp!r}\n  got      {have!r}")
                        fails += 1
    print(f"chat_reference: {checked} renders compared with jinja2 {jinja2.__version__}, "
          f"{span_checks} span lists checked, {fails} failed")
    return 1 if fails else 0


def check_segments(what, got, conv):
    """segments cover the text in order; trained bytes are exactly the spans; assistant bytes
    are trained; spans start at an assistant segment or an empty content's end of turn."""
    b = got["text"].encode("utf-8")
    pos = 0
    trained = bytearray(len(b))
    for start, length, kind, msg, train in got["segments"]:
        if start != pos or length <= 0:
            print(f"FAIL {what}: segment at {start} (expected {pos})")
            return 1
        if kind == 2 and not train:
            print(f"FAIL {what}: assistant bytes at {start} not trained")
            return 1
        if train:
            trained[start:start + length] = b"\1" * length
        pos = start + length
    if pos != len(b):
        print(f"FAIL {what}: segments end at {pos} of {len(b)}")
        return 1
    want = bytearray(len(b))
    for s, e in got["spans"]:
        want[s:e] = b"\1" * (e - s)
    if want != trained:
        print(f"FAIL {what}: trained segments differ from spans")
        return 1
    n_assist = sum(1 for m in conv["messages"] if m["role"] == "assistant")
    if len(got["spans"]) > n_assist:  # fewer where a template drops a blank reply
        print(f"FAIL {what}: {len(got['spans'])} spans for {n_assist} assistant messages")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
