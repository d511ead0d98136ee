"""--dtype bf16 against fp32 (issue 15): training speed, and the loss curve.

speed: configs/bench.json on 1 rank with 2 threads, fp32 and bf16 tokens/s (median over the steps
  after the first) at each T, run alternately --reps times on this machine's best kernel path
  and forced onto AVX2 (UPIPE_KERNEL=avx2 and UPIPE_BLAS_CORE=Haswell: what an AVX2-only host
  runs), medians of the runs;
  the ratio bf16 / fp32 per path. Targets: at least 1.6x on an AVX512_BF16 host, at least 1.0x on
  AVX2. Also the peak accounted memory of each run.
curve: configs/tiny.json for --curve-steps steps on a byte-level text shard made from the
  repository's documentation, fp32 and bf16 from the same seed: the curve (mean loss of the last
  10 steps) every 25 steps and its largest relative difference from step 50 on (target: within
  2%), the single steps beside it, and an SVG of both curves.

usage: python3 bench/bench_bf16.py [--upipe build/upipe] [--reps 3] [--T 4096 16384]
                                   [--no-avx2] [--curve-steps 300] [--svg bf16_curve.svg]
                                   [--skip-speed] [--skip-curve]
"""
import argparse, glob, json, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, run, make_data, train  # noqa: E402


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def version(upipe, env):
    r = subprocess.run([upipe, "--version"], capture_output=True, text=True, env=env)
    return r.stdout.strip().replace("\n", "; ")


def speed(a, tmp):
    cfg = os.path.join(ROOT, "configs/bench.json")
    paths = [None] + ([] if a.no_avx2 else ["avx2"])
    print(f"speed: configs/bench.json, 1 rank, {a.threads} threads, {a.reps} runs each "
          f"(alternating), median tokens/s")
    print(f"| path | T | fp32 tok/s | bf16 tok/s | bf16 / fp32 | fp32 peak MiB | bf16 peak MiB |")
    print(f"|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for path in paths:
        env = dict(os.environ)
        if path:  # what an AVX2-only host runs: upipe's avx2 kernels and OpenBLAS's Haswell ones
            env["UPIPE_KERNEL"] = path
            env["UPIPE_BLAS_CORE"] = "Haswell"
        else:
            env.pop("UPIPE_KERNEL", None)
        old = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            for T in a.T:
                data = make_data(a.upipe, T * (a.steps + 1) + 1, tmp)
                tps = {"f32": [], "bf16": []}
                peak = {}
                for r in range(a.reps):
                    for dt in ("f32", "bf16"):
                        o = train(a.upipe, cfg, data, T, threads=a.threads, steps=a.steps,
                                  extra=["--dtype", dt], tag=f"{dt}{T}{path}{r}", tmp=tmp)
                        tps[dt].append(o["tokens_per_s"])
                        peak[dt] = o["mem"]["peak_bytes"] / 2**20
                f, b = statistics.median(tps["f32"]), statistics.median(tps["bf16"])
                v = version(a.upipe, env)
                name = v.split("kernels: ")[-1].split(";")[0] if "kernels: " in v else (path or "best")
                print(f"| {name} | {T} | {f:.0f} | {b:.0f} | {b / f:.2f}x | {peak['f32']:.1f} | "
                      f"{peak['bf16']:.1f} |", flush=True)
                rows.append({"path": name, "T": T, "f32": tps["f32"], "bf16": tps["bf16"],
                             "ratio": b / f})
        finally:
            os.environ.clear()
            os.environ.update(old)
    return rows


def text_shard(upipe, tmp):
    txt = os.path.join(tmp, "docs.txt")
    with open(txt, "w") as out:
        for p in sorted(glob.glob(os.path.join(ROOT, "docs/*.md"))) + [os.path.join(ROOT,
                                                                                  "README.md")]:
            out.write(open(p, encoding="utf-8").read())
    shard = os.path.join(tmp, "docs.bin")
    run([upipe, "data", "text", "--input", txt, "--output", shard])
    return shard


def curve(a, tmp):
    cfg = os.path.join(ROOT, "configs/tiny.json")
    data = text_shard(a.upipe, tmp)
    loss = {}
    for dt in ("f32", "bf16"):
        log = os.path.join(tmp, f"curve_{dt}.jsonl")
        run(["mpiexec", "-n", "1", a.upipe, "train", "--config", cfg, "--data", data,
             "--seq-len", "256", "--steps", str(a.curve_steps), "--threads", str(a.threads), "--quiet", "--dtype", dt, "--log", log])
        loss[dt] = [json.loads(l)["loss"] for l in open(log)]
    f, b = loss["f32"], loss["bf16"]
    # The loss of one step is one window's (both dtypes see the same windows in the same order),
    # so a step's value carries that window's difficulty: the curve is the mean of the last
    # SMOOTH steps, as a training dashboard draws it; single steps are shown too.
    SMOOTH = 10
    sm = lambda ys: [statistics.mean(ys[max(0, i - SMOOTH + 1):i + 1]) for i in range(len(ys))]
    fs, bs = sm(f), sm(b)
    rel = [abs(bs[i] - fs[i]) / fs[i] for i in range(len(f))]
    rel1 = [abs(b[i] - f[i]) / f[i] for i in range(len(f))]
    print(f"\ncurve: configs/tiny.json, T = 256, {a.curve_steps} steps (default lr and schedule), "
          f"a byte-level shard of the repository's documentation; the curve is the mean over the "
          f"last {SMOOTH} steps")
    print("| step | fp32 curve | bf16 curve | relative difference | fp32 step | bf16 step |")
    print("|---:|---:|---:|---:|---:|---:|")
    for i in list(range(0, len(f), 25)) + [len(f) - 1]:
        print(f"| {i + 1} | {fs[i]:.4f} | {bs[i]:.4f} | {rel[i]:.4f} | {f[i]:.4f} | {b[i]:.4f} |")
    worst = max(range(49, len(f)), key=lambda i: rel[i])
    worst1 = max(range(49, len(f)), key=lambda i: rel1[i])
    print(f"\nlargest relative difference of the curves from step 50 on: {rel[worst]:.4f} at step "
          f"{worst + 1} (target: at most 0.02); single steps: {rel1[worst1]:.4f} at step "
          f"{worst1 + 1}, mean {statistics.mean(rel1[49:]):.4f}")
    if a.svg:
        write_svg(a.svg, fs, bs)
        print(f"wrote {a.svg}")
    return {"f32": f, "bf16": b, "worst": rel[worst], "worst_step": worst + 1,
            "worst_single": rel1[worst1]}


def write_svg(path, f, b):
    W, H, m = 640, 360, 48
    n, lo, hi = len(f), min(min(f), min(b)), max(max(f), max(b))
    X = lambda i: m + (W - 2 * m) * i / max(n - 1, 1)
    Y = lambda v: H - m - (H - 2 * m) * (v - lo) / max(hi - lo, 1e-9)
    line = lambda ys: " ".join(f"{X(i):.1f},{Y(v):.1f}" for i, v in enumerate(ys))
    with open(path, "w") as out:
        out.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}">\n'
                  f'<rect width="{W}" height="{H}" fill="white"/>\n'
                  f'<text x="{W / 2}" y="24" text-anchor="middle" font-size="14">training loss, '
                  f'configs/tiny.json (mean of 10 steps): fp32 (blue) and bf16 (red)</text>\n'
                  f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{line(f)}"/>\n'
                  f'<polyline fill="none" stroke="#d62728" stroke-width="1" points="{line(b)}"/>\n'
                  f'<text x="{m}" y="{H - 16}" font-size="12">step 1</text>\n'
                  f'<text x="{W - m}" y="{H - 16}" font-size="12" text-anchor="end">step {n}</text>\n'
                  f'<text x="8" y="{Y(hi):.0f}" font-size="12">{hi:.2f}</text>\n'
                  f'<text x="8" y="{Y(lo):.0f}" font-size="12">{lo:.2f}</text>\n</svg>\n')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--T", type=int, nargs="+", default=[4096, 16384])
    ap.add_argument("--no-avx2", action="store_true")
    ap.add_argument("--curve-steps", type=int, default=300)
    ap.add_argument("--svg", default=None)
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-curve", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-bf16.")
    print(f"CPU: {cpu_model()}; {version(a.upipe, dict(os.environ))}")
    out = {}
    if not a.skip_speed:
        out["speed"] = speed(a, tmp)
    if not a.skip_curve:
        out["curve"] = curve(a, tmp)
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
