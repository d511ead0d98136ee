"""The machine's own speed (issue 25): how close upipe runs to this host's FMA peak.

Prints the CPU model and the kernels line, then, in one run on this machine:
  peak      bench_bf16dot: fp32 FMA GFLOP/s of one core (x threads = the FMA peak) and
            VDPBF16PS's rate over it;
  sgemm     bench_sgemm at 16384x512x1408 on the core upipe chose, and on OpenBLAS's Haswell
            core (UPIPE_BLAS_CORE=Haswell), as fractions of the peak;
  attention bench_attention at T (8 heads, 4 KV heads, 64 wide), forward and backward GFLOP/s of
            fp32 and bf16 as fractions of the FMA peak;
  roofline  bench_typed at T (one layer of configs/bench.json and its LM head, every operation
            outside attention, fp32 and bf16 taking turns): each product's GFLOP/s as a fraction
            of the FMA peak, each element-wise operation's GB/s (the bytes it must move) as a
            fraction of this host's memory bandwidth (an update in place of 512 MiB, read and
            written: bench_typed; an operation that writes a fresh buffer also pays a
            write-allocate read its byte count leaves out);
  training  configs/bench.json at T, fp32 and bf16 taking turns --reps times: model GFLOP/s
            (the log's flops_per_s) as a fraction of the peak, tokens/s, bf16 over fp32;
            medians over the steps after the first, then over the runs.
Targets of the issue on a host whose dot product is >= 1.8x FMA: fp32 >= 0.60 of the peak,
bf16 >= 1.7x fp32 tokens/s, attention forward and backward >= 0.50 of the peak.
usage: python3 bench/bench_peak.py [--upipe build/upipe] [--T 16384] [--threads 2] [--reps 2]
                                   [--steps 3] [--skip-train] [--skip-roofline]
"""
import argparse, os, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, make_data, train  # noqa: E402


def out(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


# One layer of configs/bench.json (C 512, F 1408, 8 heads and 4 KV heads of 64) and its LM head
# (V 4096) at T tokens: ("flop", count) for a product, ("byte", count per element size e) for an
# element-wise operation (what it must read and write once; the tables of rope and the fp32
# statistics of rmsnorm are left out: small).
def op_work(T):
    C, F, Q, K, V = 512, 1408, 512, 256, 4096
    return {
        "rmsnorm fwd": ("byte", lambda e: 2 * T * C * e),
        "q,k,v fwd": ("flop", 2 * T * C * (Q + 2 * K)),
        "rope fwd": ("byte", lambda e: 2 * T * (Q + K) * e),
        "o fwd": ("flop", 2 * T * Q * C),
        "gate,up fwd": ("flop", 2 * T * C * 2 * F),
        "swiglu fwd": ("byte", lambda e: 3 * T * F * e),
        "down fwd": ("flop", 2 * T * F * C),
        "residual add": ("byte", lambda e: 3 * T * C * e),
        "lm head fwd": ("flop", 2 * T * C * V),
        # fp32 in both types: a copy of the tile's logits (as the step's tile is fresh), then
        # the fused softmax / loss / gradient reading and writing it
        "loss tile": ("byte", lambda e: 4 * T * V * 4),
        "lm head bwd": ("flop", 4 * T * C * V),
        "down bwd": ("flop", 4 * T * F * C),
        "swiglu bwd": ("byte", lambda e: 5 * T * F * e),
        "gate,up bwd": ("flop", 4 * T * C * 2 * F),
        "o bwd": ("flop", 4 * T * Q * C),
        "rope bwd": ("byte", lambda e: 2 * T * (Q + K) * e),
        "q,k,v bwd": ("flop", 4 * T * C * (Q + 2 * K)),
        "rmsnorm bwd": ("byte", lambda e: 4 * T * C * e),
    }


def roofline(a, bdir, peak):
    T = a.T
    txt = out([os.path.join(bdir, "bench_typed"), str(T), str(a.threads), "5"])
    bw = float(re.search(r"update in place ([0-9.]+) GB/s", txt).group(1))
    print("\n" + next(l for l in txt.splitlines() if l.startswith("memory:")))
    print(f"\nroofline: one layer of configs/bench.json + LM head, T={T}, {a.threads} threads, "
          f"median of 5 (bench_typed); FMA peak {peak:.1f} GFLOP/s, memory roof {bw:.1f} GB/s "
          f"(an update in place)")
    print(next(l for l in txt.splitlines() if l.startswith("GEMM 1:")))
    print("| operation | kind | fp32 ms | fp32 rate | fp32 of roof | bf16 ms | bf16 rate | "
          "bf16 of roof |\n|---|---|---:|---:|---:|---:|---:|---:|")
    work = op_work(T)
    for line in txt.splitlines():
        m = re.match(r"\| ([a-z ,]+) \| ([0-9.]+) \| ([0-9.]+) \|", line)
        if not m or m.group(1) not in work:
            continue
        name, f_ms, b_ms = m.group(1), float(m.group(2)), float(m.group(3))
        kind, w = work[name]
        cells = []
        for ms, e in ((f_ms, 4), (b_ms, 2)):
            if kind == "flop":
                rate = w / (ms / 1e3) / 1e9
                cells += [f"{ms:.2f}", f"{rate:.0f} GFLOP/s", f"{rate / peak:.2f}"]
            else:
                rate = w(e) / (ms / 1e3) / 1e9
                cells += [f"{ms:.2f}", f"{rate:.1f} GB/s", f"{rate / bw:.2f}"]
        print(f"| {name} | {'product' if kind == 'flop' else 'memory'} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-roofline", action="store_true")
    a = ap.parse_args()
    bdir = os.path.dirname(os.path.abspath(a.upipe))
    ver = out([a.upipe, "--version"])
    kern = next(l for l in ver.splitlines() if l.startswith("kernels:"))
    print(f"CPU: {cpu_model()}\n{kern}")

    dot = out([os.path.join(bdir, "bench_bf16dot")])
    fma = float(re.search(r"vfmadd231ps zmm:.*?([0-9.]+) GFLOP/s", dot).group(1))
    m = re.search(r"fma GFLOP/s: ([0-9.]+)", dot)
    ratio = float(m.group(1)) if m else 0.0
    peak = fma * a.threads
    print(f"FMA peak: {fma:.1f} GFLOP/s a core, {peak:.1f} on {a.threads} threads; "
          f"vdpbf16ps {ratio:.2f}x fma")
    rows = []

    def sgemm(env):
        return float(re.search(r'"gflops": ([0-9.]+)',
                               out([os.path.join(bdir, "bench_sgemm"), str(a.threads)], env)).group(1))

    env_h = dict(os.environ, UPIPE_BLAS_CORE="Haswell")
    g, h = sgemm(None), sgemm(env_h)
    rows += [("sgemm 16384x512x1408, chosen core", g), ("sgemm, OpenBLAS Haswell core", h)]

    att = out([os.path.join(bdir, "bench_attention"), str(a.T), "8", "4", "64", str(a.threads),
               "3", "1", "both"])
    dt = None
    for line in att.splitlines():
        m = re.match(r"\s*(fp32|bf16) ws=", line)
        if m:
            dt = m.group(1)
        m = re.match(r"\s*(forward|backward)\s*:\s*[0-9.]+ s\s+([0-9.]+) GFLOP/s", line)
        if m and dt:
            rows.append((f"attention {dt} {m.group(1)}, T={a.T}", float(m.group(2))))

    print(f"\n| operation | GFLOP/s | of FMA peak |\n|---|---:|---:|")
    for name, v in rows:
        print(f"| {name} | {v:.1f} | {v / peak:.2f} |")
    if not a.skip_roofline:
        roofline(a, bdir, peak)
    if a.skip_train:
        return
    tmp = tempfile.mkdtemp(prefix="upipe-bench-peak.")
    cfg = os.path.join(ROOT, "configs/bench.json")
    data = make_data(a.upipe, a.T * (a.steps + 1) + 1, tmp)
    res = {"f32": [], "bf16": []}
    for r in range(a.reps):
        for d in ("f32", "bf16"):
            o = train(a.upipe, cfg, data, a.T, threads=a.threads, steps=a.steps,
                      extra=["--dtype", d], tag=f"{d}{r}", tmp=tmp)
            res[d].append(o)
    print(f"\ntraining: configs/bench.json T={a.T}, 1 rank, {a.threads} threads, {a.reps} runs "
          f"each (taking turns), {a.steps} steps (medians after the first)")
    print("| dtype | tokens/s | model GFLOP/s | of FMA peak | vs fp32 |\n|---|---:|---:|---:|---:|")
    base = statistics.median(o["tokens_per_s"] for o in res["f32"])
    for d in ("f32", "bf16"):
        tps = statistics.median(o["tokens_per_s"] for o in res[d])
        fl = statistics.median(o["flops_per_s"] for o in res[d]) / 1e9
        print(f"| {d} | {tps:.0f} | {fl:.1f} | {fl / peak:.2f} | {tps / base:.2f}x |")


if __name__ == "__main__":
    main()
