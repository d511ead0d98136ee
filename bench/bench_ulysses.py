"""Ulysses benchmark: for each T, 1 rank x 2 threads against 2 ranks x 1 thread (--cp 2) in one
run: tokens/s (median over the steps after the first), per-rank accounted peak and RSS, the
communication share of the step time, and the all-to-all bandwidth achieved inside the step
against a plain MPI_Alltoall of the block size of the largest exchange (q and o: T_loc * NH/P * HS
floats per peer).
usage: bench/bench_ulysses.py [--upipe build/upipe] [T ...]   (default T: 16384 32768)"""
import argparse, json, os, tempfile
from common import ROOT, make_data, run, train, gib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/bench.json"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("T", nargs="*", type=int, default=[16384, 32768])
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    nh = cfg["num_attention_heads"]
    hs = cfg.get("head_dim") or cfg["hidden_size"] // nh
    bdir = os.path.dirname(os.path.abspath(a.upipe))
    tmp = tempfile.mkdtemp(prefix="upipe-bench-ulysses.")
    data = make_data(a.upipe, max(a.T) * 4, tmp)
    print(f"{'T':>6} | {'1x2 tok/s':>9} | {'2x1 tok/s':>9} | {'ratio':>5} | {'1x2 peak':>8} | "
          f"{'2x1 peak/rank':>13} | {'ratio':>5} | {'comm %':>6} | {'a2a GB/s':>8} | "
          f"{'in MPI':>6} | {'plain MPI':>9}",
          flush=True)
    for T in a.T:
        one = train(a.upipe, a.config, data, T, ranks=1, threads=2, steps=a.steps, tag=f"one{T}", tmp=tmp)
        two = train(a.upipe, a.config, data, T, ranks=2, threads=1, steps=a.steps, tag=f"two{T}", tmp=tmp)
        block = T // 2 * (nh // 2) * hs
        ref = json.loads(run(["mpiexec", "-n", "2", os.path.join(bdir, "bench_alltoall"),
                              str(block)]).stdout)
        a2a = two["a2a_bytes"] / two["a2a_s"] / 1e9 if two["a2a_s"] > 0 else 0
        a2a_mpi = two["a2a_bytes"] / two["a2a_mpi_s"] / 1e9 if two["a2a_mpi_s"] > 0 else 0
        p1, p2 = one["mem"]["peak_bytes"], two["mem"]["peak_bytes"]
        print(f"{T:>6} | {one['tokens_per_s']:>9.0f} | {two['tokens_per_s']:>9.0f} | "
              f"{two['tokens_per_s'] / one['tokens_per_s']:>5.2f} | {gib(p1):>7.2f}G | "
              f"{gib(p2):>12.2f}G | {p2 / p1:>5.2f} | {100 * two['comm_s'] / two['step_s']:>5.1f}% | "
              f"{a2a:>8.2f} | {a2a_mpi:>6.2f} | {ref['gbps']:>9.2f}", flush=True)
        print(f"       RSS: 1x2 {gib(one['mem']['rss_peak_bytes']):.2f} GiB, "
              f"2x1 {gib(two['mem']['rss_peak_bytes']):.2f} GiB per rank", flush=True)


if __name__ == "__main__":
    main()
