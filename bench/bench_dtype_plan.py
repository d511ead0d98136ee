"""The memory plan of a bf16 run (issue 15, PLAN.md 4a): --dry-run --dtype bf16 plans it exactly
before any bf16 kernel exists, without allocating, so these figures take seconds.

1. Llama 3 8B (configs/llama3-8b.json: C=4096, L=32, NH=32, NKV=8, F=14336, V=128256) on 8 ranks
   with --fsdp (one thread per rank) at T = 1M, 3M and 5M tokens, for each rung of the memory stack (plain: every rank
   holds a whole sequence, --cp 1; +Ulysses: --cp 8; +checkpoint; +offload; +tiles; +UPipe U=8):
   per-rank GiB by category (the --mem-report plan: each figure the max over ranks).
2. configs/bench.json, the full stack (--offload --tile-mlp --tile-loss --upipe-heads 1) on one
   rank with 2 threads at T = 1,048,576: bytes per token by category in fp32 and bf16 (issue target: bf16 peak
   at most 0.55x fp32).

The 8 ranks run under mpiexec -n 8 (oversubscribed is fine: a dry run computes nothing).
usage: bench/bench_dtype_plan.py [--upipe build/upipe] [--dtype bf16] [--T 1048576 3145728 5242880]
"""
import argparse, os, shutil, tempfile
from common import ROOT, make_data, train, gib

CATS = ["params", "grads", "optimizer", "checkpoints", "activations", "attention", "workspace",
        "comm", "runtime"]


def rungs(store):
    """The memory stack, one technique added per rung (all with --fsdp)."""
    uly = ["--fsdp"]  # the default --cp is all ranks
    ckpt = uly + ["--checkpoint"]
    off = ckpt + ["--offload", store]
    tiles = off + ["--tile-mlp", "--tile-loss"]
    return [("plain (--cp 1)", ["--fsdp", "--cp", "1"]), ("+Ulysses (--cp 8)", uly),
            ("+checkpoint", ckpt), ("+offload", off), ("+tiles", tiles),
            ("+UPipe U=8", tiles + ["--upipe-heads", "8"])]


def plan(upipe, cfg, data, T, ranks, threads, extra, tmp):
    return train(upipe, cfg, data, T, ranks=ranks, threads=threads, extra=extra, tmp=tmp,
                 tag="plan", dry_run=True)["mem"]


def llama_table(a, tmp):
    cfg = os.path.join(ROOT, "configs", "llama3-8b.json")
    data = make_data(a.upipe, max(a.T) + 1, tmp)
    print(f"Llama 3 8B, --dtype {a.dtype}, {a.ranks} ranks, --fsdp: per-rank GiB by category "
          f"(offloaded: the store file per rank)\n")
    for T in a.T:
        print(f"T = {T} ({T / 2**20:g}M tokens)\n")
        print("| rung | " + " | ".join(CATS) + " | peak | offloaded |")
        print("|---|" + "---:|" * (len(CATS) + 2))
        for name, extra in rungs(tmp):
            p = plan(a.upipe, cfg, data, T, a.ranks, 1, extra + ["--dtype", a.dtype], tmp)
            cells = [f"{gib(p['categories'][c]):.2f}" for c in CATS]
            cells += [f"{gib(p['peak_bytes']):.2f}", f"{gib(p['offloaded_peak_bytes']):.2f}"]
            print(f"| {name} | " + " | ".join(cells) + " |")
        print()


def bench_bytes(a, tmp):
    T = 1 << 20
    cfg = os.path.join(ROOT, "configs", "bench.json")
    data = make_data(a.upipe, T + 1, tmp)
    full = ["--offload", tmp, "--tile-mlp", "--tile-loss", "--upipe-heads", "1"]
    # 2 threads, as the benchmark: the attention workspace holds a dQ buffer per extra
    # thread (fp32 in both)
    p = {dt: plan(a.upipe, cfg, data, T, 1, 2, full + ["--dtype", dt], tmp)
         for dt in ("f32", "bf16")}
    print(f"configs/bench.json, full stack, 1 rank, 2 threads, T = {T}: bytes per token\n")
    print("| category | f32 | bf16 | bf16 / f32 |")
    print("|---|---:|---:|---:|")
    for c in CATS + ["peak", "offloaded"]:
        key = {"peak": "peak_bytes", "offloaded": "offloaded_peak_bytes"}.get(c)
        v = {dt: (p[dt][key] if key else p[dt]["categories"][c]) / T for dt in p}
        ratio = f"{v['bf16'] / v['f32']:.3f}" if v["f32"] else "-"
        print(f"| {c} | {v['f32']:.0f} | {v['bf16']:.0f} | {ratio} |")
    r = p["bf16"]["peak_bytes"] / p["f32"]["peak_bytes"]
    print(f"\nbf16 peak = {r:.3f}x fp32 (target: at most 0.55x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build", "upipe"))
    ap.add_argument("--dtype", default="bf16", choices=["f32", "bf16"])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--T", type=int, nargs="+", default=[1 << 20, 3 << 20, 5 << 20])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-dtype.")
    try:
        llama_table(a, tmp)
        bench_bytes(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
