"""Checkpoint benchmark: size, write time and read (resume) time of a checkpoint, against a plain
sequential write and read of the same bytes with dd in the same run, for the engine benchmark
model and a larger one (~1.3 GiB of weights and AdamW state), on 1 rank and on 4 ranks with
--fsdp (every rank writes its own ranges). Then the cost of a checkpoint every 100 steps of the
engine model at T = 4096, as a share of the step time.
usage: bench/bench_ckpt.py [--upipe build/upipe] [--dir DIR]
DIR (default: a temporary folder) should be on the disk the checkpoints would go to."""
import argparse, json, os, re, shutil, statistics, subprocess, tempfile, time
from common import ROOT, make_data, write_config, run, train


def dd(path, nbytes):
    """Seconds to write nbytes sequentially and fsync them, the faster of a buffered and an
    O_DIRECT dd, and to read them back from the disk (O_DIRECT: not from the page cache)."""
    bs = 16 << 20
    count = max(1, (nbytes + bs - 1) // bs)
    scale = nbytes / (count * bs)
    ws = []
    for flags in (["conv=fsync"], ["oflag=direct", "conv=fsync"]):
        t0 = time.time()
        run(["dd", "if=/dev/zero", f"of={path}", f"bs={bs}", f"count={count}"] + flags)
        ws.append(time.time() - t0)
    t0 = time.time()
    run(["dd", f"if={path}", "of=/dev/null", f"bs={bs}", "iflag=direct"])
    r = time.time() - t0
    os.unlink(path)
    return min(ws) * scale, r * scale


def ckpt_run(upipe, cfg, data, ranks, fsdp, d, tag):
    """Writes one checkpoint after one step, then resumes from it: (bytes, write s, read s)."""
    ck = os.path.join(d, f"ck_{tag}")
    shutil.rmtree(ck, ignore_errors=True)
    log = os.path.join(d, f"{tag}.jsonl")
    base = ["mpiexec", "-n", str(ranks), upipe, "train", "--config", cfg, "--data", data,
            "--seq-len", "256", "--steps", "1", "--lr", "1e-4", "--threads", "1",
            "--ckpt-dir", ck] + (["--fsdp"] if fsdp else [])
    run(base + ["--quiet", "--log", log])
    rec = json.loads(open(log).readline())
    out = run(base + ["--resume"]).stdout
    m = re.search(r"resumed from .* \(([\d.]+) MiB read in ([\d.]+) s\)", out)
    shutil.rmtree(ck, ignore_errors=True)
    return rec["ckpt_bytes"], rec["ckpt_s"], float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="upipe-bench-ckpt.")
    os.makedirs(d, exist_ok=True)
    data = make_data(a.upipe, 20000, d)
    models = {
        "bench.json": os.path.join(ROOT, "configs/bench.json"),
        "C1024 L4 V32000": write_config(d, "large.json", hidden_size=1024, intermediate_size=2816,
                                        num_hidden_layers=4, num_attention_heads=16,
                                        num_key_value_heads=8, head_dim=64, vocab_size=32000),
    }
    print(f"{'model':>16} | {'ranks':>9} | {'ckpt MiB':>8} | {'write s':>7} | {'GB/s':>5} | "
          f"{'dd write s':>10} | {'vs dd':>5} | {'read s':>6} | {'dd read s':>9} | {'vs dd':>5}",
          flush=True)
    writes = {}
    for name, cfg in models.items():
        for ranks, fsdp in ((1, False), (4, True)):
            b, w, r = ckpt_run(a.upipe, cfg, data, ranks, fsdp, d, f"{ranks}{fsdp}")
            dw, dr = dd(os.path.join(d, "dd.bin"), int(b))
            writes[(name, ranks)] = w
            print(f"{name:>16} | {ranks:>3} {'fsdp' if fsdp else 'rank0':>5} | {b / 2**20:8.1f} | "
                  f"{w:7.3f} | {b / 1e9 / w:5.2f} | {dw:10.3f} | {w / dw:5.2f} | {r:6.3f} | "
                  f"{dr:9.3f} | {r / max(dr, 1e-6):5.2f}", flush=True)
    # the cost of a checkpoint every 100 steps of the engine model at T = 4096 (1 rank)
    st = train(a.upipe, models["bench.json"], make_data(a.upipe, 4096 * 4 + 1, d), 4096, ranks=1,
               threads=2, steps=3, tag="t4096", tmp=d)
    w = writes[("bench.json", 1)]
    share = w / (100 * st["step_s"] + w)
    print(f"\nT=4096 step {st['step_s']:.2f} s; one checkpoint {w:.3f} s; every 100 steps: "
          f"{100 * share:.2f}% of the time (tokens/s x {1 - share:.4f})")


if __name__ == "__main__":
    main()
