"""Evaluation against training, per token (issue 12).

At each T: `upipe eval` (forward only: loss, per-position loss and top prediction, recall
scoring) tokens/s over --windows windows, against `upipe train` tokens/s (median over the steps
after the first) on the same model, data and threads; the ratio, and both memory plans. One run
each; the machine is shared, so read the ratio rather than the absolute rates. Target: eval at
least 2.5x faster per token than a training step.

usage: python3 bench/bench_eval.py [--upipe build/upipe] [--threads 2] [--windows 2] [T ...]
"""
import argparse, json, os, re, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, run, make_data, train, gib  # noqa: E402


def evaluate(upipe, config, data, T, weights, threads, windows, tmp, extra=()):
    rep = os.path.join(tmp, f"eval{T}.mem.json")
    cmd = [upipe, "eval", "--config", config, "--data", data, "--init", weights, "--seq-len",
           str(T), "--windows", str(windows), "--threads", str(threads)] + list(extra)
    out = run(cmd + ["--mem-report", rep]).stdout
    m = re.search(r"^eval: .*\(([0-9.]+) s, ([0-9.]+) tokens/s\)", out, re.M)
    if not m:
        sys.stderr.write(out)
        raise SystemExit("bench_eval: no timing line in the eval output")
    plan = os.path.join(tmp, f"eval{T}.plan.json")
    run(cmd + ["--dry-run", "--mem-report", plan])
    return {"tokens_per_s": float(m.group(2)), "seconds": float(m.group(1)),
            "mem": json.load(open(rep)), "plan": json.load(open(plan))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/bench.json"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("T", nargs="*", type=int, default=[16384])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-eval.")
    rows = []
    print(f"{'T':>7} {'train tok/s':>12} {'eval tok/s':>11} {'ratio':>6} {'train plan':>11} "
          f"{'eval plan':>10}")
    for T in a.T:
        data = make_data(a.upipe, max(T * (a.windows + a.steps) + 1, 3 * T + 1), tmp)
        weights = os.path.join(tmp, f"w{T}.st")
        tr = train(a.upipe, a.config, data, T, threads=a.threads, steps=a.steps, tmp=tmp,
                   tag=f"train{T}", extra=["--save", weights])
        trp = train(a.upipe, a.config, data, T, threads=a.threads, tmp=tmp, tag=f"plan{T}",
                    dry_run=True)
        ev = evaluate(a.upipe, a.config, data, T, weights, a.threads, a.windows, tmp)
        row = {"T": T, "train_tps": tr["tokens_per_s"], "eval_tps": ev["tokens_per_s"],
               "ratio": ev["tokens_per_s"] / tr["tokens_per_s"],
               "train_plan": trp["mem"]["peak_bytes"], "eval_plan": ev["plan"]["peak_bytes"],
               "eval_measured": ev["mem"]["peak_bytes"]}
        rows.append(row)
        print(f"{T:>7} {row['train_tps']:>12.0f} {row['eval_tps']:>11.0f} {row['ratio']:>5.2f}x "
              f"{gib(row['train_plan']):>9.2f}G {gib(row['eval_plan']):>8.2f}G")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
