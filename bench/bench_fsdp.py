"""FSDP benchmark: 4 ranks, C=512, L=8, NH=8, F=1376, V=32000 at T=4096: per-rank model-state
bytes (params + grads + optimizer), comm (gather buffers), peak, tokens/s with and without --fsdp,
and the share of step time in gathers and reduce-scatters.
usage: bench/bench_fsdp.py [--upipe build/upipe] [--T 4096] [--cp 1]"""
import argparse, os, tempfile
from common import ROOT, make_data, write_config, train, gib


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--T", type=int, default=4096)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--cp", type=int, default=1, help="context-parallel degree (1: pure DP)")
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-fsdp.")
    cfg = write_config(tmp, "fsdp.json", hidden_size=512, intermediate_size=1376,
                       num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8,
                       head_dim=64, vocab_size=32000)
    data = make_data(a.upipe, a.T * (a.steps + 1) * a.ranks + 1, tmp)
    res = {}
    for name, extra in (("unsharded", []), ("fsdp", ["--fsdp"])):
        res[name] = train(a.upipe, cfg, data, a.T, ranks=a.ranks, threads=1, steps=a.steps,
                          extra=["--cp", str(a.cp)] + extra, tag=name, tmp=tmp)
    print(f"{'run':>9} | {'state MiB':>9} | {'comm MiB':>8} | {'peak GiB':>8} | {'RSS GiB':>7} | "
          f"{'tok/s':>7} | {'gather+RS %':>11} | {'all-reduce %':>12}")
    for name, r in res.items():
        c = r["mem"]["categories"]
        state = c["params"] + c["grads"] + c["optimizer"]
        print(f"{name:>9} | {state / 2**20:>9.1f} | {c['comm'] / 2**20:>8.1f} | "
              f"{gib(r['mem']['peak_bytes']):>8.2f} | {gib(r['mem']['rss_peak_bytes']):>7.2f} | "
              f"{r['tokens_per_s']:>7.0f} | {100 * r['fsdp_s'] / r['step_s']:>10.1f}% | "
              f"{100 * r['grad_reduce_s'] / r['step_s']:>11.1f}%")
    u, f = res["unsharded"], res["fsdp"]
    su = sum(u["mem"]["categories"][k] for k in ("params", "grads", "optimizer"))
    sf = sum(f["mem"]["categories"][k] for k in ("params", "grads", "optimizer"))
    print(f"model state per rank: {sf / su:.3f}x unsharded "
          f"({(sf + f['mem']['categories']['comm']) / su:.3f}x with the gather buffers); "
          f"tokens/s {f['tokens_per_s'] / u['tokens_per_s']:.3f}x unsharded")


if __name__ == "__main__":
    main()
