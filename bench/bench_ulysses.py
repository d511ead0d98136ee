"""Ulysses benchmark (issue: context parallelism).

For each T: 1 rank x 2 threads against 2 ranks x 1 thread (--cp 2) in one run: tokens/s (median
over the steps after the first), per-rank accounted peak and RSS, communication share of the step
time, and the all-to-all bandwidth achieved inside the step against a plain MPI_Alltoall of the
block size of the largest exchange (q and o: T_loc * NH/P * HS floats per peer).
usage: bench/bench_ulysses.py [--upipe build/upipe] [T ...]   (default T: 16384 32768)
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit(1)
    return r.stdout


def train(a, tmp, data, T, ranks, threads, steps):
    tag = f"{T}_{ranks}"
    log, rep = os.path.join(tmp, f"l{tag}.jsonl"), os.path.join(tmp, f"m{tag}.json")
    cmd = ["mpiexec", "-n", str(ranks), a.upipe, "train", "--config", a.config, "--data", data,
           "--seq-len", str(T), "--steps", str(steps), "--lr", "1e-4", "--threads",
           str(threads), "--quiet", "--log", log, "--mem-report", rep]
    run(cmd)
    lines = [json.loads(l) for l in open(log)][1:]
    m = json.load(open(rep))
    med = lambda k: statistics.median(l[k] for l in lines)
    return {"tps": med("tokens_per_s"), "step_s": med("step_s"), "comm_s": med("comm_s"),
            "a2a_s": med("a2a_s"), "a2a_bytes": med("a2a_bytes"), "peak": m["peak_bytes"],
            "rss": m["rss_peak_bytes"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/bench.json"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("T", nargs="*", type=int, default=[16384, 32768])
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    nh, hs = cfg["num_attention_heads"], cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    bdir = os.path.dirname(os.path.abspath(a.upipe))
    tmp = tempfile.mkdtemp(prefix="upipe-bench-ulysses.")
    data = os.path.join(tmp, "d.bin")
    run([a.upipe, "data", "recall", "--output", data, "--tokens", str(max(a.T) * 4), "--distance", "1024"])
    print(f"{'T':>6} | {'1x2 tok/s':>9} | {'2x1 tok/s':>9} | {'ratio':>5} | {'1x2 peak':>8} | "
          f"{'2x1 peak/rank':>13} | {'ratio':>5} | {'comm %':>6} | {'a2a GB/s':>8} | {'MPI GB/s':>8}")
    for T in a.T:
        one = train(a, tmp, data, T, 1, 2, a.steps)
        two = train(a, tmp, data, T, 2, 1, a.steps)
        block = T // 2 * (nh // 2) * hs
        ref = json.loads(run(["mpiexec", "-n", "2", os.path.join(bdir, "bench_alltoall"), str(block)]))
        a2a = two["a2a_bytes"] / two["a2a_s"] / 1e9 if two["a2a_s"] > 0 else 0
        print(f"{T:>6} | {one['tps']:>9.0f} | {two['tps']:>9.0f} | {two['tps'] / one['tps']:>5.2f} | "
              f"{one['peak'] / 2**30:>7.2f}G | {two['peak'] / 2**30:>12.2f}G | {two['peak'] / one['peak']:>5.2f} | "
              f"{100 * two['comm_s'] / two['step_s']:>5.1f}% | {a2a:>8.2f} | {ref['gbps']:>8.2f}", flush=True)
        print(f"       RSS: 1x2 {one['rss'] / 2**30:.2f} GiB, 2x1 {two['rss'] / 2**30:.2f} GiB per rank", flush=True)


if __name__ == "__main__":
    main()
