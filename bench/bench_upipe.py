"""UPipe benchmark: 2 ranks, the engine config with NH = NKV = 16 (HS = 32), every valid U at each
T: tokens/s, attention peak, total peak and peak RSS per rank, as one table.
usage: bench/bench_upipe.py [--upipe build/upipe] [T ...]   (default T: 16384 32768)"""
import argparse, os, tempfile
from common import ROOT, make_data, write_config, train, gib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("T", nargs="*", type=int, default=[16384, 32768])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-upipe.")
    cfg = write_config(tmp, "mha16.json", hidden_size=512, intermediate_size=1408,
                       num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=16,
                       head_dim=32, vocab_size=4096)
    data = make_data(a.upipe, max(a.T) * 4, tmp)
    P, NH = 2, 16
    Us = [u for u in range(P, NH + 1) if NH % u == 0 and u % P == 0]
    print(f"{'T':>6} | {'U':>3} | {'tok/s':>7} | {'vs U=16':>7} | {'attention MiB':>13} | "
          f"{'vs U=16':>7} | {'peak GiB':>8} | {'RSS GiB':>7}", flush=True)
    for T in a.T:
        rows = {}
        for U in reversed(Us):
            r = train(a.upipe, cfg, data, T, ranks=P, threads=1, steps=a.steps,
                      extra=["--upipe-heads", str(U)], tag=f"u{U}_{T}", tmp=tmp)
            rows[U] = r
            base = rows[NH]
            m = r["mem"]
            print(f"{T:>6} | {U:>3} | {r['tokens_per_s']:>7.0f} | "
                  f"{r['tokens_per_s'] / base['tokens_per_s']:>7.2f} | "
                  f"{m['categories']['attention'] / 2**20:>13.1f} | "
                  f"{m['categories']['attention'] / base['mem']['categories']['attention']:>7.3f} | "
                  f"{gib(m['peak_bytes']):>8.2f} | {gib(m['rss_peak_bytes']):>7.2f}", flush=True)


if __name__ == "__main__":
    main()
