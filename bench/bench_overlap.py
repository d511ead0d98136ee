"""The UPipe pipe (--upipe-overlap) with and without, within a node and across a network link.

Within a node (default): shared memory and TCP (UCX_TLS=tcp,self on loopback; Debian's MPICH
is ch4:ucx), 2 and 4 ranks of 1 thread: NH = NKV = 16 (HS = 32, hidden size 512 as
configs/bench.json), U = 2 (4 on 4 ranks: U must be a multiple of P), one layer. Three runs per
row: without the pipe, with --upipe-overlap (which keeps the pipe off where a context-parallel
group shares a node: there the exchange is a copy on the cores attention runs on) and with
--upipe-overlap-on-node (the pipe forced on, to show what it would cost).

--cluster: 2 nodes of 1 rank (tools/cluster.sh: network namespaces, the links limited to
--rate, default 1gbit), --cp 2 across the link, without and with --upipe-overlap, in
alternating rounds (--rounds). hidden = (step without - step with) / exchange time without:
the share of the exchange the pipe took off the step. The exchange rate inside the step (bytes
rank 0 sent in the exchanges / their time, without the pipe) against a plain MPI_Alltoall of a
stage's block on the same link (bench_alltoall), and whether the weights after the run are the
same bytes. Needs root (namespaces) and MPICH's hydra.

Figures: medians over the steps after the first (and over the rounds); a2a: rank 0's seconds in
the exchanges (packing, the calls, the waits: what the pipe did not hide); RSS-peak: peak RSS
less the accounted peak (the plan).
usage: bench/bench_overlap.py [T] [--upipe build/upipe] [--layers 1] [--steps 4] [--ranks 2 4]
       bench/bench_overlap.py --cluster [--rate 1gbit] [--rounds 3] [--steps 6] [T]
(T before --ranks: --ranks takes every number after it)"""
import argparse, filecmp, json, os, platform, statistics, subprocess, tempfile
from common import ROOT, make_data, write_config, train, run as run_cmd

TRANSPORTS = {"shm": {}, "tcp": {"UCX_TLS": "tcp,self"}}
FLAGS = {"off": "--no-upipe-overlap", "on": "--upipe-overlap", "forced": "--upipe-overlap-on-node"}
CLUSTER = os.path.join(ROOT, "tools", "cluster.sh")
JOB = os.path.join(ROOT, "tests", "cluster", "job.sh")


def stage_heads(U, P):
    """--upipe-heads must be a multiple of P: U, else P (U = 2 on 4 ranks runs U = 4)."""
    return U if U % P == 0 else P


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def with_env(env, fn):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in saved.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v


def run(a, cfg, data, T, P, env, mode, tmp, tag, launcher=("mpiexec",), extra=()):
    def go():
        r = train(a.upipe, cfg, data, T, ranks=P, threads=1, steps=a.steps,
                  extra=["--upipe-heads", str(stage_heads(a.U, P)), FLAGS[mode]] + list(extra),
                  tag=tag, tmp=tmp, launcher=launcher)
        # the least a2a of the steps after the first: the step whose ranks were least out of
        # step (on a shared machine the median is mostly one rank waiting for the other)
        steps = [json.loads(l) for l in open(os.path.join(tmp, f"{tag}.jsonl"))][1:]
        r["a2a_min_s"] = min(x["a2a_s"] for x in steps)
        r["rss_over_plan"] = r["mem"]["rss_peak_bytes"] - r["mem"]["peak_bytes"]
        return r
    return with_env(env, go)


def model(a, tmp):
    cfg = write_config(tmp, "mha16.json", hidden_size=512, intermediate_size=1408,
                       num_hidden_layers=a.layers, num_attention_heads=16,
                       num_key_value_heads=16, head_dim=32, vocab_size=4096)
    rounds = getattr(a, "rounds", 1)
    return cfg, make_data(a.upipe, a.T * 2 * a.steps * rounds, tmp)


def node_mode(a, tmp):
    cfg, data = model(a, tmp)
    print(f"{'ranks':>5} | {'U':>2} | {'link':>4} | {'step s off':>10} | {'step s on':>9} | "
          f"{'step s forced':>13} | {'on/off':>6} | {'forced/off':>10} | {'a2a s off':>9} | "
          f"{'a2a s forced':>12} | {'a2a % of step':>13} | {'attn s':>6} | "
          f"{'attention MiB off/forced':>24} | {'RSS-peak MiB off/forced':>23}", flush=True)
    for P in a.ranks:
        for link in a.transports:
            r = {m: run(a, cfg, data, a.T, P, TRANSPORTS[link], m, tmp, f"{link}{P}_{m}")
                 for m in ("off", "on", "forced")}
            off, on, fo = r["off"], r["on"], r["forced"]
            att = [x["mem"]["categories"]["attention"] / 2**20 for x in (off, fo)]
            rss = [x["rss_over_plan"] / 2**20 for x in (off, fo)]
            print(f"{P:>5} | {stage_heads(a.U, P):>2} | {link:>4} | {off['step_s']:>10.2f} | "
                  f"{on['step_s']:>9.2f} | {fo['step_s']:>13.2f} | "
                  f"{on['step_s'] / off['step_s']:>6.3f} | {fo['step_s'] / off['step_s']:>10.3f} | "
                  f"{off['a2a_s']:>9.3f} | {fo['a2a_s']:>12.3f} | "
                  f"{off['a2a_s'] / off['step_s']:>13.1%} | {off['attn_s']:>6.2f} | "
                  f"{att[0]:>11.1f} / {att[1]:>10.1f} | {rss[0]:>10.1f} / {rss[1]:>10.1f}",
                  flush=True)


def cluster_mode(a, tmp):
    env = {"UPIPE_CLUSTER_PREFIX": "upb", "UPIPE_CLUSTER_SLOTS": "1",
           "UPIPE_CLUSTER_OWNER": str(os.getpid()),
           "FINALIZE_MARK": os.path.join(os.path.dirname(os.path.abspath(a.upipe)), "tests",
                                         "libfinalize_mark.so")}
    os.environ.update(env)
    if not os.path.exists(env["FINALIZE_MARK"]):
        raise SystemExit(f"bench_overlap: {env['FINALIZE_MARK']} missing: build the tests "
                         "(cmake --build build)")
    run_cmd([CLUSTER, "up", "2", "--rate", a.rate])
    try:
        launcher = (JOB, CLUSTER, "mpirun")
        cfg, data = model(a, tmp)
        P, U = 2, stage_heads(a.U, 2)
        # a stage's block per peer: T/P tokens x U/P heads x HS floats
        block = a.T // P * (U // P) * 32
        bench_a2a = os.path.join(os.path.dirname(os.path.abspath(a.upipe)), "bench_alltoall")
        plain = json.loads(run_cmd(list(launcher) + ["-n", "2", bench_a2a, str(block), "9"])
                           .stdout.strip().splitlines()[-1])["gbps"]
        runs = {"off": [], "on": []}
        for k in range(a.rounds):
            for m in ("off", "on"):
                save = ["--save", os.path.join(tmp, f"w{k}_{m}.st")]
                runs[m].append(run(a, cfg, data, a.T, P, {}, m, tmp, f"wire{k}_{m}",
                                   launcher=launcher, extra=["--cp", "2"] + save))
        same = all(filecmp.cmp(os.path.join(tmp, f"w{k}_off.st"), os.path.join(tmp, f"w{k}_on.st"),
                               shallow=False) for k in range(a.rounds))
        med = lambda m, key: statistics.median(r[key] for r in runs[m])
        off, on = med("off", "step_s"), med("on", "step_s")
        a2a_off, a2a_on = med("off", "a2a_s"), med("on", "a2a_s")
        rate = med("off", "a2a_bytes") / a2a_off / 1e9
        att = [runs[m][0]["mem"]["categories"]["attention"] / 2**20 for m in ("off", "on")]
        print(f"2 nodes x 1 rank, --cp 2, U={U}, T={a.T}, link {a.rate} (tc tbf), "
              f"{a.rounds} rounds of {a.steps} steps; CPU: {cpu_model()}")
        print(f"{'step s off':>10} | {'step s on':>9} | {'saved s':>7} | {'a2a s off':>9} | "
              f"{'a2a s on':>8} | {'hidden':>6} | {'a2a GB/s in step':>16} | "
              f"{'plain a2a GB/s':>14} | {'attention MiB off/on':>20} | {'same weights':>12}")
        print(f"{off:>10.3f} | {on:>9.3f} | {off - on:>7.3f} | {a2a_off:>9.3f} | {a2a_on:>8.3f} | "
              f"{(off - on) / a2a_off:>6.1%} | {rate:>16.3f} | {plain:>14.3f} | "
              f"{att[0]:>9.1f} / {att[1]:>8.1f} | {'yes' if same else 'NO':>12}")
        print("per round, step s off/on: " + ", ".join(
            f"{x['step_s']:.3f}/{y['step_s']:.3f}" for x, y in zip(runs["off"], runs["on"])))
    finally:
        subprocess.run([CLUSTER, "down"], capture_output=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--U", type=int, default=2)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--transports", nargs="+", default=["shm", "tcp"])
    ap.add_argument("--cluster", action="store_true")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("T", nargs="?", type=int, default=16384)
    a = ap.parse_args()
    a.steps = a.steps or (6 if a.cluster else 4)
    tmp = tempfile.mkdtemp(prefix="upipe-bench-overlap.")
    (cluster_mode if a.cluster else node_mode)(a, tmp)


if __name__ == "__main__":
    main()
