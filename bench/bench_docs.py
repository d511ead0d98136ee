"""Packed-document benchmark: configs/bench.json at T = 32768 (default), 2 threads, one run of
each window: one document, 8 documents of T/8 tokens, and documents of random lengths with mean
T/8 (exponential, at least 16 tokens). tokens/s and the attention kernels' share of the step,
medians over the steps after the first; the speed-up against the single document.
usage: bench/bench_docs.py [--upipe build/upipe] [--threads 2] [--steps 3] [T ...]"""
import argparse, json, os, random, statistics, struct, tempfile
from common import ROOT, run

SEP = 256


def write_shard(path, tokens):
    hdr = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def window(T, lengths, rng):
    """T + 1 tokens per step (the step's targets reach one past T): documents of the given
    lengths, each opened by SEP, random bytes inside."""
    toks = []
    for n in lengths:
        toks += [SEP] + [rng.randrange(256) for _ in range(n - 1)]
    return toks[: T + 1] + [rng.randrange(256) for _ in range(T + 1 - len(toks))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("T", nargs="*", type=int, default=[32768])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-docs.")
    rng = random.Random(7)
    print(f"{'T':>6} | {'window':>24} | {'docs':>5} | {'tok/s':>7} | {'attention':>9} | "
          f"{'vs 1 doc':>8}", flush=True)
    for T in a.T:
        mean = T // 8
        rand = []
        while sum(rand) < T + 1:
            rand.append(max(16, int(rng.expovariate(1.0 / mean))))
        cases = [("one document", [T + 1]), (f"8 documents of {mean}", [mean] * 9),
                 (f"random lengths, mean {mean}", rand)]
        base = None
        for name, lengths in cases:
            steps = [window(T, lengths, rng) for _ in range(a.steps)]
            data = os.path.join(tmp, "docs.bin")
            # step k reads tokens k*T .. k*T + T: windows laid end to end, one token overlapping
            flat = []
            for w in steps:
                flat = flat[:-1] + w if flat else w
            write_shard(data, flat)
            log = os.path.join(tmp, "log.jsonl")
            run([a.upipe, "train", "--config", os.path.join(ROOT, "configs/bench.json"),
                 "--data", data, "--seq-len", str(T), "--steps", str(a.steps), "--lr", "1e-4",
                 "--threads", str(a.threads), "--doc-sep", str(SEP), "--quiet", "--log", log])
            recs = [json.loads(l) for l in open(log)]
            later = recs[1:] if len(recs) > 1 else recs
            tps = statistics.median(r["tokens_per_s"] for r in later)
            share = statistics.median(r["attn_s"] / r["step_s"] for r in later)
            docs = statistics.median(r["documents"] for r in later)
            base = base or tps
            print(f"{T:>6} | {name:>24} | {docs:>5.0f} | {tps:>7.0f} | {100 * share:>8.1f}% | "
                  f"{tps / base:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
