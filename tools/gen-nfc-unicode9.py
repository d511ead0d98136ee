#!/usr/bin/env python3
"""Writes src/tokenizer/tok_nfc_table.c: the characters whose normalization utf8proc knows and HF's
Rust library does not.

HF's tokenizers normalize with the crate unicode-normalization-alignments (0.1.12), whose tables
are Unicode 9.0 (its src/tables.rs: UNICODE_VERSION = (9, 0, 0)). A character outside those
tables has combining class 0, no decomposition and no composition there: it stays as it is and
neither reorders nor composes with its neighbours, so NFC treats it as a barrier. utf8proc (the
tokenizer's NFC) has a later Unicode, where characters assigned after 9.0 may be marks (U+07FD,
class 220), decompose or compose. This script lists, as ranges, every code point that utf8proc
does not leave alone (a non-zero combining class, a canonical decomposition, or a part of one)
and that the crate's tables do not name; tok_nfc.c normalizes the text between them with
utf8proc and copies them as they are.

It also checks the rule's premise: every code point the crate's tables name has, in utf8proc, the
same combining class and the same full canonical decomposition (Unicode's stability policy).

usage: tools/gen-nfc-unicode9.py TABLES_RS [OUT.c]
  TABLES_RS: src/tables.rs of github.com/n1t0/unicode-normalization at
  9ca696060d7bedd591f903b6285c29abaab716fa (the crate's 0.1.12 source); OUT.c defaults to
  src/tokenizer/tok_nfc_table.c."""
import ctypes
import ctypes.util
import os
import re
import sys

HANGUL = [(0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2), (0xAC00, 0xD7A3)]  # algorithmic


def crate_tables(path):
    """(combining classes, full canonical decompositions, code points of the composition pairs)"""
    src = open(path, encoding="utf-8").read()
    m = re.search(r"UNICODE_VERSION: \(u64, u64, u64\) = \((\d+), (\d+), (\d+)\)", src)
    if m is None or m.groups() != ("9", "0", "0"):
        sys.exit("gen-nfc-unicode9: %s is not the crate's Unicode 9.0 tables" % path)

    def body(name):
        at = src.index("const %s" % name)
        return src[at:src.index("];", at)]

    ccc = {}
    for v in re.findall(r"0x([0-9A-Fa-f]+)", body("CANONICAL_COMBINING_CLASS_KV")):
        kv = int(v, 16)
        ccc[kv >> 8] = kv & 0xFF
    char = re.compile(r"'\\u\{([0-9A-Fa-f]+)\}'")
    decomp = {}
    for key, chars in re.findall(r"\(0x([0-9a-fA-F]+), &\[([^\]]*)\]\)",
                                 body("CANONICAL_DECOMPOSED_KV")):
        decomp[int(key, 16)] = [int(c, 16) for c in char.findall(chars)]
    comp = set()
    for pair, res in re.findall(r"\(0x([0-9A-Fa-f]+), '\\u\{([0-9A-Fa-f]+)\}'\)",
                                body("COMPOSITION_TABLE_KV")):
        p = int(pair, 16)
        comp |= {p >> 16, p & 0xFFFF, int(res, 16)}
    astral = src[src.index("fn composition_table_astral"):]
    astral = astral[:astral.index("_ => None")]
    comp |= {int(c, 16) for c in char.findall(astral)}
    return ccc, decomp, comp


class Utf8proc:
    def __init__(self):
        lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
        lib.utf8proc_version.restype = ctypes.c_char_p
        lib.utf8proc_unicode_version.restype = ctypes.c_char_p
        lib.utf8proc_get_property.restype = ctypes.POINTER(ctypes.c_int16)
        lib.utf8proc_decompose_char.restype = ctypes.c_ssize_t
        self.lib = lib
        self.buf = (ctypes.c_int32 * 32)()
        self.version = lib.utf8proc_unicode_version().decode()

    def ccc(self, cp):  # utf8proc_property_t: category, combining_class, ... (int16 each)
        return self.lib.utf8proc_get_property(cp)[1]

    def decomp(self, cp):
        bound = ctypes.c_int(0)
        n = self.lib.utf8proc_decompose_char(cp, self.buf, 32, 1 << 3, ctypes.byref(bound))
        return list(self.buf[:n])  # 1 << 3: UTF8PROC_DECOMPOSE (canonical, full)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(here, "..", "src", "tokenizer",
                                                               "tok_nfc_table.c")
    ccc9, decomp9, comp9 = crate_tables(sys.argv[1])
    u = Utf8proc()
    known = set(ccc9) | set(decomp9) | comp9
    for lo, hi in HANGUL:
        known |= set(range(lo, hi + 1))
    # code points utf8proc's NFC does not leave alone: a class, a decomposition, or a part of the
    # decomposition of a character the crate does not know (the parts of a known one compose
    # alike in both: its decomposition and its exclusion from composition are stable)
    active = set()
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        d = u.decomp(cp)
        if u.ccc(cp) != 0 or d != [cp]:
            active.add(cp)
            if d != [cp] and cp not in known:
                active |= set(d)
    bad = [cp for cp in sorted(known) if not 0xAC00 <= cp <= 0xD7A3 and
           (u.ccc(cp) != ccc9.get(cp, 0) or u.decomp(cp) != decomp9.get(cp, [cp]))]
    if bad:
        sys.exit("gen-nfc-unicode9: utf8proc and the crate differ on known code points: %s" %
                 " ".join("U+%04X" % cp for cp in bad[:20]))
    unknown = sorted(active - known)
    ranges = []
    for cp in unknown:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    lines = ["    {0x%05X, 0x%05X}," % (lo, hi) for lo, hi in ranges]
    with open(out, "w", encoding="utf-8") as f:
        f.write("/* tok_nfc_table.c — generated by tools/gen-nfc-unicode9.py; do not edit.\n"
                " * The %d code points (%d ranges) that utf8proc %s (Unicode %s) normalizes and\n"
                " * the Unicode 9.0 tables of HF's Rust library (unicode-normalization-alignments)\n"
                " * do not know: NFC leaves them as they are (tok_nfc.c). */\n"
                % (len(unknown), len(ranges), u.lib.utf8proc_version().decode(), u.version))
        f.write('#include "tokenizer/tok_internal.h"\n\n')
        f.write("/* clang-format off */\nconst uint32_t tok_nfc_unknown[][2] = {\n%s\n};\n"
                "/* clang-format on */\n" % "\n".join(lines))
        f.write("const size_t tok_nfc_nunknown = sizeof tok_nfc_unknown / sizeof "
                "tok_nfc_unknown[0];\n")
        f.write("const char tok_nfc_unicode[] = \"%s\"; /* utf8proc's, when generated */\n"
                % u.version)
    print("gen-nfc-unicode9: %d code points in %d ranges -> %s" % (len(unknown), len(ranges),
                                                               os.path.normpath(out)))


main()
