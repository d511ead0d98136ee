"""The UPipe pipe (--upipe-overlap) with and without, on shared memory and on TCP
(UCX_TLS=tcp,self on loopback; Debian's MPICH is ch4:ucx), 2 and 4 ranks of 1 thread: NH = NKV =
16 (HS = 32, hidden size 512 as configs/bench.json), U = 2 (4 on 4 ranks: U must be a multiple of
P), median step figures over the steps after the first.
a2a: rank 0's seconds in the exchanges (packing, the calls, the waits: what the pipe did not
hide), median and least over the steps; RSS-peak: peak RSS less the accounted peak (the plan).
usage: bench/bench_overlap.py [T] [--upipe build/upipe] [--layers 1] [--steps 4] [--ranks 2 4]
(T before --ranks: --ranks takes every number after it)"""
import argparse, json, os, tempfile
from common import ROOT, make_data, write_config, train

TRANSPORTS = {"shm": {}, "tcp": {"UCX_TLS": "tcp,self"}}


def stage_heads(U, P):
    """--upipe-heads must be a multiple of P: U, else P (U = 2 on 4 ranks runs U = 4)."""
    return U if U % P == 0 else P


def run(a, cfg, data, T, P, env, overlap, tmp, tag):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        flag = "--upipe-overlap" if overlap else "--no-upipe-overlap"
        r = train(a.upipe, cfg, data, T, ranks=P, threads=1, steps=a.steps,
                  extra=["--upipe-heads", str(stage_heads(a.U, P)), flag], tag=tag, tmp=tmp)
        # the least a2a of the steps after the first: the step whose ranks were least out of
        # step (on a shared machine the median is mostly one rank waiting for the other)
        steps = [json.loads(l) for l in open(os.path.join(tmp, f"{tag}.jsonl"))][1:]
        r["a2a_min_s"] = min(x["a2a_s"] for x in steps)
        r["rss_over_plan"] = r["mem"]["rss_peak_bytes"] - r["mem"]["peak_bytes"]
        return r
    finally:
        for k, v in saved.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--U", type=int, default=2)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--transports", nargs="+", default=["shm", "tcp"])
    ap.add_argument("T", nargs="?", type=int, default=16384)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-overlap.")
    cfg = write_config(tmp, "mha16.json", hidden_size=512, intermediate_size=1408,
                       num_hidden_layers=a.layers, num_attention_heads=16,
                       num_key_value_heads=16, head_dim=32, vocab_size=4096)
    data = make_data(a.upipe, a.T * 2 * a.steps, tmp)
    print(f"{'ranks':>5} | {'U':>2} | {'link':>4} | {'step s off':>10} | {'step s on':>9} | "
          f"{'on/off':>6} | {'a2a s off':>9} | {'a2a s on':>8} | {'a2a min off':>11} | "
          f"{'a2a min on':>10} | {'a2a % of step':>13} | {'attn s':>6} | "
          f"{'attention MiB off/on':>20} | {'RSS-peak MiB off/on':>19}", flush=True)
    for P in a.ranks:
        for link in a.transports:
            r = {ov: run(a, cfg, data, a.T, P, TRANSPORTS[link], ov, tmp, f"{link}{P}_{ov}")
                 for ov in (0, 1)}
            off, on = r[0], r[1]
            att = [x["mem"]["categories"]["attention"] / 2**20 for x in (off, on)]
            rss = [x["rss_over_plan"] / 2**20 for x in (off, on)]
            print(f"{P:>5} | {stage_heads(a.U, P):>2} | {link:>4} | {off['step_s']:>10.2f} | "
                  f"{on['step_s']:>9.2f} | {on['step_s'] / off['step_s']:>6.3f} | "
                  f"{off['a2a_s']:>9.3f} | {on['a2a_s']:>8.3f} | {off['a2a_min_s']:>11.3f} | "
                  f"{on['a2a_min_s']:>10.3f} | {off['a2a_s'] / off['step_s']:>13.1%} | "
                  f"{off['attn_s']:>6.2f} | {att[0]:>9.1f} / {att[1]:>8.1f} | "
                  f"{rss[0]:>8.1f} / {rss[1]:>8.1f}", flush=True)

if __name__ == "__main__":
    main()
