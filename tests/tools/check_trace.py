#!/usr/bin/env python3
"""Checks a --trace file (Chrome / Perfetto JSON trace-event format) of `upipe train` or `eval`.

usage: check_trace.py FILE --ranks R --layers L [--names a,b,...] [--bytes a,b,...]
                      [--io] [--dropped] [--counts]

- FILE parses as JSON: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
- Every span has ph "X", a name, a category, ts >= 0, dur >= 0, pid in 0..R-1, an integer tid
  and integer args; every pid 0..R-1 has spans, a process_name, and every (pid, tid) a
  thread_name.
- Every name of --names appears on every rank; forward and backward (when named) for every layer
  0..L-1 on every rank; every span named in --bytes carries "bytes" > 0.
- --io: offload_write and offload_read run on a thread of their own ("offload I/O"), not on the
  one with the layer spans.
- The spans of one thread nest or follow each other (never a partial overlap).
- otherData.events counts the spans; dropped_events is 0, or > 0 with --dropped.
- --counts prints "name count" per span name (rank 0), for comparisons between runs.
Exits 0 when every check holds, else prints each failure and exits 1.
"""
import argparse
import collections
import json
import sys

# ts and dur are printed in microseconds with three decimals (ns); sums of two such values differ
# from the exact nanosecond sum by float rounding only, far below 1 ns.
EPS = 1e-4


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--names", default="")
    ap.add_argument("--bytes", default="")
    ap.add_argument("--io", action="store_true")
    ap.add_argument("--dropped", action="store_true")
    ap.add_argument("--counts", action="store_true")
    a = ap.parse_args()
    fails = []

    def fail(msg):
        if len(fails) < 20:
            print("trace check: " + msg)
        fails.append(msg)

    try:
        with open(a.file) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        print("trace check: %s does not parse: %s" % (a.file, e))
        return 1
    if doc.get("displayTimeUnit") != "ms":
        fail("displayTimeUnit is %r" % doc.get("displayTimeUnit"))
    evs = doc.get("traceEvents")
    if not isinstance(evs, list):
        print("trace check: no traceEvents list")
        return 1
    spans = [e for e in evs if e.get("ph") != "M"]
    meta = [e for e in evs if e.get("ph") == "M"]
    proc_named = {e["pid"] for e in meta if e.get("name") == "process_name"}
    thread_named = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
                    if e.get("name") == "thread_name"}
    for e in spans:
        ok = (e.get("ph") == "X" and isinstance(e.get("name"), str) and
              isinstance(e.get("cat"), str) and isinstance(e.get("ts"), (int, float)) and
              isinstance(e.get("dur"), (int, float)) and e["ts"] >= 0 and e["dur"] >= 0 and
              e.get("pid") in range(a.ranks) and isinstance(e.get("tid"), int) and
              isinstance(e.get("args"), dict) and
              all(isinstance(v, int) for v in e["args"].values()))
        if not ok:
            fail("bad span %s" % json.dumps(e))
    pids = {e["pid"] for e in spans if isinstance(e.get("pid"), int)}
    if pids != set(range(a.ranks)):
        fail("spans of ranks %s, expected 0..%d" % (sorted(pids), a.ranks - 1))
    for p in range(a.ranks):
        if p not in proc_named:
            fail("rank %d has no process_name" % p)
    for key in {(e["pid"], e["tid"]) for e in spans}:
        if key not in thread_named:
            fail("pid %d tid %d has no thread_name" % key)

    by_rank = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in spans:
        by_rank[e["pid"]][e["name"]].append(e)
    names = [n for n in a.names.split(",") if n]
    for p in range(a.ranks):
        for n in names:
            if not by_rank[p][n]:
                fail("rank %d: no %s span" % (p, n))
        for n in ("forward", "backward", "recompute"):
            if n in names:
                layers = {e["args"].get("layer") for e in by_rank[p][n]}
                if layers != set(range(a.layers)):
                    fail("rank %d: %s spans of layers %s, expected 0..%d" %
                         (p, n, sorted(layers, key=str), a.layers - 1))
    for n in [n for n in a.bytes.split(",") if n]:
        for e in (e for e in spans if e["name"] == n):
            if not e["args"].get("bytes", 0) > 0:
                fail("%s without bytes > 0: %s" % (n, json.dumps(e)))
                break
    if a.io:
        for p in range(a.ranks):
            main_tids = {e["tid"] for e in by_rank[p]["forward"]}
            io_tids = {e["tid"] for n in ("offload_write", "offload_read") for e in by_rank[p][n]}
            if not io_tids or io_tids & main_tids or len(io_tids) != 1:
                fail("rank %d: offload I/O on threads %s, layers on %s" % (p, io_tids, main_tids))
            elif thread_named.get((p, io_tids.pop())) != "offload I/O":
                fail("rank %d: the I/O thread is not named 'offload I/O'" % p)

    # nesting per thread: sorted by start (longer first on a tie), each span ends before the
    # innermost open span that contains its start ends
    threads = collections.defaultdict(list)
    for e in spans:
        threads[(e["pid"], e["tid"])].append(e)
    for key, es in threads.items():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + EPS:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS:
                fail("pid %d tid %d: %s at %.3f+%.3f overlaps %s at %.3f+%.3f" %
                     (key[0], key[1], e["name"], e["ts"], e["dur"], stack[-1]["name"],
                      stack[-1]["ts"], stack[-1]["dur"]))
            stack.append(e)

    other = doc.get("otherData", {})
    if other.get("events") != len(spans):
        fail("otherData.events %r, the file holds %d spans" % (other.get("events"), len(spans)))
    dropped = other.get("dropped_events")
    if not isinstance(dropped, int) or (dropped > 0) != a.dropped:
        fail("dropped_events %r (expected %s)" % (dropped, "> 0" if a.dropped else "0"))
    if a.counts:
        c = collections.Counter(e["name"] for e in spans if e["pid"] == 0)
        for n in sorted(c):
            print(n, c[n])
    if fails:
        print("trace check: %d failure(s) in %s" % (len(fails), a.file))
        return 1
    print("trace check: %s: %d spans on %d thread(s) of %d rank(s), nested, dropped %d" %
          (a.file, len(spans), len(threads), a.ranks, dropped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
