"""Bytes per token of the full stack (issue 13, part 2): the plan (--dry-run) of configs/bench.json
on one rank at T = 1,048,576 with --offload --tile-mlp --tile-loss --upipe-heads 1, per category
in GiB and in bytes per token, and the longest T whose plan fits a per-rank limit for plain
training, checkpointing with the tiles and UPipe, and the full stack. With --before BIN the same
figures of another build side by side (the plan is exact and machine-independent, so two builds
compare by their plans).
usage: bench/bench_bytes.py [--upipe build/upipe] [--before OLD_BIN] [--T 1048576]
                            [--limit-gib 22]"""
import argparse, os, tempfile
from common import ROOT, make_data, train, longest_fitting

CATS = ["params", "grads", "optimizer", "checkpoints", "activations", "attention", "workspace",
        "comm", "runtime"]


def stacks(store):
    tiles = ["--tile-mlp", "--tile-loss", "--upipe-heads", "1"]
    return [("plain", []), ("checkpoint + tiles + UPipe U=1", ["--checkpoint"] + tiles),
            ("full stack (offload)", ["--offload", store] + tiles)]


def plan(upipe, cfg, data, T, extra, tmp):
    return train(upipe, cfg, data, T, ranks=1, threads=2, extra=extra, tmp=tmp, tag="plan",
                 dry_run=True)["mem"]


def longest_T(upipe, cfg, data, extra, tmp, limit, ceiling):
    """Largest T (multiple of 1024) whose plan fits the limit."""
    return longest_fitting(lambda T: plan(upipe, cfg, data, T, extra, tmp)["peak_bytes"] <= limit,
                           ceiling)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build", "upipe"))
    ap.add_argument("--before", help="another build's binary, shown beside")
    ap.add_argument("--T", type=int, default=1 << 20)
    ap.add_argument("--limit-gib", type=float, default=22.0)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-bytes.")
    ceiling = 1 << 23
    data = make_data(a.upipe, ceiling + 1, tmp)
    cfg = os.path.join(ROOT, "configs", "bench.json")
    bins = [("after", a.upipe)] + ([("before", a.before)] if a.before else [])
    full = stacks(tmp)[2][1]
    plans = {name: plan(b, cfg, data, a.T, full, tmp) for name, b in bins}
    C = 512
    tensor = a.T * C * 4
    print(f"full stack plan at T = {a.T} (1 rank, configs/bench.json; a (T, C) fp32 tensor is "
          f"{tensor / 2**30:.2f} GiB)\n")
    head = "| category | " + " | ".join(f"{n} GiB | {n} B/token" for n, _ in bins) + " |"
    print(head)
    print("|---|" + "---:|---:|" * len(bins))
    for c in CATS + ["peak"]:
        cells = []
        for n, _ in bins:
            v = plans[n]["peak_bytes"] if c == "peak" else plans[n]["categories"].get(c, 0)
            cells.append(f"{v / 2**30:.2f} | {v / a.T:.0f}")
        print(f"| {c} | " + " | ".join(cells) + " |")
    print("| token-sized tensors | " + " | ".join(
        f"{plans[n]['peak_bytes'] / tensor:.1f} | " for n, _ in bins) + "|")
    limit = int(a.limit_gib * 2**30)
    print(f"\nlongest T whose plan fits {a.limit_gib:g} GiB on one rank\n")
    print("| stack | " + " | ".join(n for n, _ in bins) + " |")
    print("|---|" + "---:|" * len(bins))
    for name, extra in stacks(tmp):
        cells = [str(longest_T(b, cfg, data, extra, tmp, limit, ceiling)) for _, b in bins]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
