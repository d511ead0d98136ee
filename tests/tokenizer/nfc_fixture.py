#!/usr/bin/env python3
"""Writes tests/tokenizer/nfc_unicode15.txt, the fixture of tests/unit/test_tok_nfc.c: HF's Rust
library's NFC (npm `tokenizers`, tools/install-tokenizer-fixtures.sh) of every combining mark of
Unicode 15 (General_Category M, as utf8proc 2.8 knows them) placed before and after a mark of
each other combining class.

The file: a line "reps" with the representatives (the first mark of each combining class, class 0
included), then one line per mark M: "M BASE HASH", code points in hex. The text of M's line is,
for every representative N other than M, BASE M N BASE N M (BASE: a starter that composes with M
when Unicode 15 has one, else "a"); HASH is the FNV-1a 64 of the UTF-8 of the library's NFC of
that text, so the fixture stays small and the test needs neither node nor npm.
usage: nfc_fixture.py [NODE_MODULES]"""
import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
nm = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ.get("UPIPE_TOKENIZER_FIXTURES", os.path.expanduser("~/.cache/upipe/tokenizer-fixtures")),
    "node_modules")
lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
lib.utf8proc_get_property.restype = ctypes.POINTER(ctypes.c_int16)
lib.utf8proc_unicode_version.restype = ctypes.c_char_p
if lib.utf8proc_unicode_version() != b"15.0.0":
    sys.exit("nfc_fixture: utf8proc has Unicode %s, not 15.0.0" % lib.utf8proc_unicode_version())
MN, MC, ME = 6, 7, 8  # utf8proc_category_t
buf = (ctypes.c_int32 * 32)()


def decomp(cp):
    b = ctypes.c_int(0)
    n = lib.utf8proc_decompose_char(cp, buf, 32, 1 << 3, ctypes.byref(b))  # canonical, full
    return list(buf[:n])


marks, ccc = [], {}
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    p = lib.utf8proc_get_property(cp)
    if p[0] in (MN, MC, ME):
        marks.append(cp)
        ccc[cp] = p[1]
reps = {}
for m in marks:
    reps.setdefault(ccc[m], m)
reps = [reps[c] for c in sorted(reps)]
base = {}
for cp in range(0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    d = decomp(cp)
    if len(d) == 2 and d[1] in ccc and lib.utf8proc_get_property(d[0])[1] == 0:
        base.setdefault(d[1], d[0])


def text(m):
    b = chr(base.get(m, 0x61))
    return "".join(b + chr(m) + chr(n) + b + chr(n) + chr(m) for n in reps if n != m)


def fnv(s):
    h = 0xCBF29CE484222325
    for c in s.encode("utf-8"):
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


js = r"""
const { createRequire } = require("node:module");
const fs = require("node:fs");
const { nfcNormalizer } = createRequire(process.argv[1] + "/x.js")("tokenizers");
const n = nfcNormalizer();
const items = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
fs.writeFileSync(process.argv[3], JSON.stringify(items.map((s) => n.normalizeString(s))));
"""
with tempfile.TemporaryDirectory() as tmp:
    src, dst = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
    json.dump([text(m) for m in marks], open(src, "w", encoding="utf-8"))
    subprocess.run(["node", "-e", js, os.path.abspath(nm), src, dst], check=True)
    out = json.load(open(dst, encoding="utf-8"))
with open(os.path.join(here, "nfc_unicode15.txt"), "w", encoding="ascii") as f:
    f.write("reps %s\n" % " ".join("%X" % r for r in reps))
    for m, s in zip(marks, out):
        f.write("%X %X %016x\n" % (m, base.get(m, 0x61), fnv(s)))
print("nfc_fixture: %d marks, %d classes" % (len(marks), len(reps)))
