"""Cost of --trace: the engine model (configs/bench.json) at T = 4096, the median step time with
and without --trace, runs alternating (plain, traced, plain, traced, ...) so that the shared
machine's drift falls on both; on 1 rank x 2 threads (plain) and 2 ranks x 1 thread with the whole
stack (FSDP, offload, tiled MLP and loss, UPipe U = 2: the most spans per step). On a shared,
noisy machine the measured difference is mostly noise; the estimate beside it is the spans per step
and rank (counted in the trace) times the cost of one span (build/tests/test_trace measures it)
over the step time. Step times: the median and the fastest of the steps after the first, over
all runs of a kind (the fastest is the least disturbed by the other users of the machine). Also
the size of the trace file.
usage: bench/bench_trace.py [--upipe build/upipe] [--steps N] [--pairs K] [T]"""
import argparse, json, os, re, statistics, subprocess, tempfile
from common import ROOT, make_data, train


def span_ns():
    """ns per span with --trace, from the unit test's own measurement."""
    out = subprocess.run([os.path.join(ROOT, "build/tests/test_trace")], capture_output=True,
                         text=True).stdout
    m = re.search(r"span cost: ([\d.]+) ns off, ([\d.]+) ns on", out)
    return float(m.group(2)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("T", type=int, nargs="?", default=4096)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-trace.")
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    data = make_data(a.upipe, 4 * a.T * (a.steps + 1), tmp)
    cfg = os.path.join(ROOT, "configs/bench.json")
    setups = [("1 rank x 2 threads, plain", 1, 2, []),
              ("2 ranks x 1 thread, full stack", 2, 1,
               ["--fsdp", "--offload", store, "--tile-mlp", "--tile-loss", "--upipe-heads", "2"])]
    ns = span_ns()
    print(f"span cost with --trace: {ns:.1f} ns (build/tests/test_trace)")
    print(f"{'setup, step statistic':>40} | {'plain step s':>12} | {'traced step s':>13} | {'measured':>8} | "
          f"{'spans/step/rank':>15} | {'estimate':>9} | {'trace MiB':>9}")
    for name, ranks, threads, extra in setups:
        plain, traced = [], []
        trace = os.path.join(tmp, "t.json")
        for k in range(a.pairs):
            for on, out in ((0, plain), (1, traced)):
                more = extra + (["--trace", trace] if on else [])
                tag = f"{name[:1]}{k}{on}"
                train(a.upipe, cfg, data, a.T, ranks=ranks, threads=threads, steps=a.steps,
                      extra=more, tag=tag, tmp=tmp)
                lines = [json.loads(l) for l in open(os.path.join(tmp, f"{tag}.jsonl"))]
                out += [l["step_s"] for l in lines[1:]]  # the steps after the first
        doc = json.load(open(trace))
        spans = doc["otherData"]["events"] / a.steps / ranks
        for stat, f in (("median", statistics.median), ("fastest", min)):
            p, t = f(plain), f(traced)
            est = spans * ns * 1e-9 / p
            print(f"{name + ', ' + stat:>40} | {p:12.3f} | {t:13.3f} | {100 * (t / p - 1):+7.2f}% | "
                  f"{spans:15.0f} | {100 * est:8.5f}% | {os.path.getsize(trace) / 2**20:9.2f}")


if __name__ == "__main__":
    main()
