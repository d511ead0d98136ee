"""Packed-document benchmark: configs/bench.json at T = 32768 (default), 2 threads, one run of
each window: one document, 8 documents of T/8 tokens, and documents of random lengths with mean
T/8 (exponential, at least 16 tokens). tokens/s and the attention kernels' share of the step,
medians over the steps after the first; the speed-up against the single document, and for the
8 documents its FLOP bound 1 / (1 - a + a/8) (a: attention's share of the step's model FLOPs,
upipe's own count, model_flops_per_step) and the fraction of that bound reached (issue 25's
target: at least 0.85 on any model shape).
usage: bench/bench_docs.py [--upipe build/upipe] [--threads 2] [--steps 3] [--config C]
                           [--dtype f32|bf16] [T ...]"""
import argparse, json, os, random, statistics, struct, tempfile
from common import ROOT, run

SEP = 256


def write_shard(path, tokens):
    hdr = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def window(T, lengths, rng):
    """T + 1 tokens per step (the step's targets reach one past T): documents of the given
    lengths, each opened by SEP, random bytes inside."""
    toks = []
    for n in lengths:
        toks += [SEP] + [rng.randrange(256) for _ in range(n - 1)]
    return toks[: T + 1] + [rng.randrange(256) for _ in range(T + 1 - len(toks))]


def attn_share(cfg, T):
    """Attention's share of a step's model FLOPs (src/model/layout.c, model_flops_per_step)."""
    C, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HS = cfg.get("head_dim") or C // NH
    per_layer = C * NH * HS * 2 + C * NKV * HS * 2 + 3 * C * F
    params = L * per_layer + cfg["vocab_size"] * C
    attn = 12.0 * L * NH * HS * T * (T + 1) / 2
    return attn / (6.0 * params * T + attn)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--config", default=os.path.join(ROOT, "configs/bench.json"))
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("T", nargs="*", type=int, default=[32768])
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-docs.")
    rng = random.Random(7)
    cfg = json.load(open(a.config))
    print(f"{os.path.basename(a.config)}: hidden {cfg['hidden_size']}, ffn "
          f"{cfg['intermediate_size']}, {cfg['num_hidden_layers']} layers, "
          f"{cfg['num_attention_heads']} heads ({cfg['num_key_value_heads']} KV), {a.dtype}, "
          f"{a.threads} threads")
    print(f"{'T':>6} | {'window':>24} | {'docs':>5} | {'tok/s':>7} | {'attention':>9} | "
          f"{'vs 1 doc':>8} | {'bound':>6} | {'of bound':>8}", flush=True)
    for T in a.T:
        mean = T // 8
        rand = []
        while sum(rand) < T + 1:
            rand.append(max(16, int(rng.expovariate(1.0 / mean))))
        cases = [("one document", [T + 1]), (f"8 documents of {mean}", [mean] * 9),
                 (f"random lengths, mean {mean}", rand)]
        base = None
        for name, lengths in cases:
            steps = [window(T, lengths, rng) for _ in range(a.steps)]
            data = os.path.join(tmp, "docs.bin")
            # step k reads tokens k*T .. k*T + T: windows laid end to end, one token overlapping
            flat = []
            for w in steps:
                flat = flat[:-1] + w if flat else w
            write_shard(data, flat)
            log = os.path.join(tmp, "log.jsonl")
            run([a.upipe, "train", "--config", a.config,
                 "--data", data, "--seq-len", str(T), "--steps", str(a.steps), "--lr", "1e-4",
                 "--threads", str(a.threads), "--doc-sep", str(SEP), "--quiet", "--log", log,
                 "--dtype", a.dtype])
            recs = [json.loads(l) for l in open(log)]
            later = recs[1:] if len(recs) > 1 else recs
            tps = statistics.median(r["tokens_per_s"] for r in later)
            share = statistics.median(r["attn_s"] / r["step_s"] for r in later)
            docs = statistics.median(r["documents"] for r in later)
            base = base or tps
            bound = ""
            if name.startswith("8 documents"):
                b = 1.0 / (1.0 - attn_share(cfg, T) + attn_share(cfg, T) / 8)
                bound = f" | {b:>5.2f}x | {tps / base / b:>8.2f}"
            print(f"{T:>6} | {name:>24} | {docs:>5.0f} | {tps:>7.0f} | {100 * share:>8.1f}% | "
                  f"{tps / base:>7.2f}x{bound}", flush=True)


if __name__ == "__main__":
    main()
