"""The memory staircase: 2 ranks, C=256, L=4, NH=8, F=704, V=32000. Rows add one technique each:
plain; +checkpoint; +offload; +tiled MLP and loss; +UPipe (U = P). Columns: peak per category,
total peak, peak RSS and tokens/s at T=16384 (measured), the plan's peak at that T (its accuracy),
and the longest T each stack fits in a 4 GiB per-rank limit (found with the plan: --dry-run).
Writes the table and an SVG bar chart (stacked categories per row).
usage: bench/bench_stack.py [--upipe build/upipe] [--T 16384] [--limit-gib 4] [--svg out.svg]"""
import argparse, os, tempfile
from common import ROOT, make_data, write_config, train, gib, longest_fitting

CATS = ["params", "grads", "optimizer", "checkpoints", "activations", "attention", "workspace",
        "comm"]
COLORS = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd", "#dd8452", "#999999"]


def rows(store):
    ck = ["--checkpoint"]
    off = ["--offload", store]
    tiles = ["--tile-mlp", "--tile-loss"]
    return [("plain", []), ("+checkpoint", ck), ("+offload", off), ("+tiled MLP/loss", off + tiles),
            ("+UPipe (U=P)", off + tiles + ["--upipe-heads", "2"])]


MAX_T = 1 << 22  # the data shard holds this many tokens (+1): the search's ceiling


def longest_T(a, cfg, data, extra, tmp, limit):
    """Largest T (multiple of 1024) whose plan fits the limit."""
    fits = lambda T: train(a.upipe, cfg, data, T, ranks=2, threads=1, extra=extra, tmp=tmp,
                           tag="plan", dry_run=True)["mem"]["peak_bytes"] <= limit
    return longest_fitting(fits, MAX_T)


def svg(results, path, T, limit):
    W, H, left, top, bw, gap = 900, 420, 150, 40, 110, 40
    scale = (H - top - 60) / max(max(r["mem"]["peak_bytes"] for r in results), limit)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="20" font-size="15">upipe memory staircase: peak per rank by category, T={T}, 2 ranks</text>']
    base = H - 60
    yl = base - limit * scale
    out.append(f'<line x1="{left - 10}" y1="{yl:.1f}" x2="{W - 20}" y2="{yl:.1f}" stroke="black" stroke-dasharray="4"/>')
    out.append(f'<text x="{W - 20}" y="{yl - 5:.1f}" text-anchor="end">{limit / 2**30:.0f} GiB per-rank limit</text>')
    for i, r in enumerate(results):
        x = left + i * (bw + gap)
        y = base
        for c, col in zip(CATS, COLORS):
            h = r["mem"]["categories"][c] * scale
            if h <= 0:
                continue
            y -= h
            out.append(f'<rect x="{x}" y="{y:.1f}" width="{bw}" height="{h:.1f}" fill="{col}"><title>{c}: {r["mem"]["categories"][c] / 2**20:.0f} MiB</title></rect>')
        out.append(f'<text x="{x + bw / 2}" y="{y - 6:.1f}" text-anchor="middle">{gib(r["mem"]["peak_bytes"]):.2f} GiB</text>')
        out.append(f'<text x="{x + bw / 2}" y="{base + 16}" text-anchor="middle">{r["name"]}</text>')
        out.append(f'<text x="{x + bw / 2}" y="{base + 32}" text-anchor="middle">max T {r["maxT"]}</text>')
    for k, (c, col) in enumerate(zip(CATS, COLORS)):
        out.append(f'<rect x="10" y="{top + 18 * k}" width="12" height="12" fill="{col}"/>')
        out.append(f'<text x="28" y="{top + 18 * k + 11}">{c}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upipe", default=os.path.join(ROOT, "build/upipe"))
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--limit-gib", type=float, default=4.0)
    ap.add_argument("--svg", default="staircase.svg")
    ap.add_argument("--store", default=None, help="offload directory (default: a temp dir)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="upipe-bench-stack.")
    store = a.store or os.path.join(tmp, "store")
    os.makedirs(store, exist_ok=True)
    cfg = write_config(tmp, "stack.json", hidden_size=256, intermediate_size=704,
                       num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8,
                       head_dim=32, vocab_size=32000)
    data = make_data(a.upipe, max(a.T * 4, MAX_T) + 1, tmp)
    limit = int(a.limit_gib * 2**30)
    results = []
    print(f"{'stack':>16} | " + " | ".join(f"{c[:6]:>6}" for c in CATS) +
          f" | {'peak':>6} | {'plan':>6} | {'RSS':>6} | {'tok/s':>6} | {'max T @ ' + str(a.limit_gib) + 'GiB':>14}"
          "   (MiB per rank)", flush=True)
    for name, extra in rows(store):
        r = train(a.upipe, cfg, data, a.T, ranks=2, threads=1, steps=a.steps, extra=extra,
                  tag=name.strip("+").replace(" ", "_").replace("/", "_"), tmp=tmp)
        plan = train(a.upipe, cfg, data, a.T, ranks=2, threads=1, extra=extra, tmp=tmp,
                     tag="plan", dry_run=True)["mem"]["peak_bytes"]
        r["name"], r["plan"] = name, plan
        r["maxT"] = longest_T(a, cfg, data, extra, tmp, limit)
        results.append(r)
        m = r["mem"]
        print(f"{name:>16} | " + " | ".join(f"{m['categories'][c] / 2**20:>6.0f}" for c in CATS) +
              f" | {m['peak_bytes'] / 2**20:>6.0f} | {plan / 2**20:>6.0f} | "
              f"{m['rss_peak_bytes'] / 2**20:>6.0f} | {r['tokens_per_s']:>6.0f} | {r['maxT']:>14}",
              flush=True)
    p, full = results[0], results[-1]
    ck, off = results[1], results[2]
    print(f"full stack peak {full['mem']['peak_bytes'] / p['mem']['peak_bytes']:.3f}x plain at T={a.T}; "
          f"longest T {full['maxT']} vs {p['maxT']} ({full['maxT'] / p['maxT']:.1f}x); "
          f"offload tokens/s {off['tokens_per_s'] / ck['tokens_per_s']:.3f}x checkpoint")
    svg(results, a.svg, a.T, limit)
    print(f"wrote {a.svg}")


if __name__ == "__main__":
    main()
