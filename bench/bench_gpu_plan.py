"""The GPU staircase from the plan, on a machine without a GPU: for each model shape, the longest T
(a multiple of 1024) whose device plan fits a GPU of --device-mem free memory, one technique added
per row, as issue 37 orders them: plain bf16; + checkpointing; + their offload (--offload: the
layer inputs in pinned host memory, two kept on the GPU); + tiled MLP and loss; + UPipe head
stages; + the optimizer offloaded (--offload-optimizer: the fp32 state in pinned host memory);
and that last row with the fp32 gradients kept on the GPU (--grads-on-device: the host holds the
masters and moments only).
Every row's host plan (ordinary and pinned) must fit --host-mem as well, and with --offload the
layer inputs go where there is room: kept on the GPU (--offload-keep), pinned (--offload-host-
limit), the rest in the offload file (at most --disk); the row's plan is then made again with
those flags and must fit as it is. Each figure is
`upipe train --dry-run --device cuda --device-mem SIZE` (the CUDA backend as the plan sees it:
its tensors' bytes and the module's fixed 128 MiB), so the table depends only on the shapes and
the memory, not on this host; it is a plan, not a measurement (tests/scripts/gpu.sh holds the plan
to a real step's device peak on a GPU).
usage: bench/bench_gpu_plan.py [--upipe build/upipe] [--device-mem 139GiB] [--host-mem 128GiB]
                               [--disk 48GiB] [--upipe-heads 4]
                               [CONFIG ...]   (default: configs/llama3.2-1b.json configs/llama3-8b.json)"""
import argparse, json, os, subprocess, tempfile
from common import ROOT, gib, longest_fitting

CEILING = 1 << 23  # 8M tokens: the search's ceiling


def rows(U, offload_dir):
    ck, tiles, off = ["--checkpoint"], ["--tile-mlp", "--tile-loss"], ["--offload", offload_dir]
    up = ck + off + tiles + ["--upipe-heads", str(U)]
    return [("plain", []), ("+checkpoint", ck), ("+offload", ck + off), ("+tiled MLP/loss", ck + off + tiles),
            (f"+UPipe (U={U})", up), ("+optimizer offload", up + ["--offload-optimizer"]),
            ("  grads on GPU", up + ["--offload-optimizer", "--grads-on-device"])]


def homes(r, cfg, T, free, host, disk, module):
    """Where an --offload plan made with the inputs all moved to pinned memory (--offload-keep 2,
    no limit) can put them: as many kept on the GPU as its room takes, as many pinned as the
    host's, the rest in the file. (keep, pinned, file) or None when they cannot all go somewhere."""
    L, slot = cfg["num_hidden_layers"], T * cfg["hidden_size"] * 2
    moved = max(L - 2, 0)
    host_base = host_bytes(r) - moved * slot  # the host plan without the pinned inputs
    dev_room = free - module - r["device_peak_bytes"]
    if dev_room < 0 or host_base > host:
        return None
    keep = min(L, 2 + dev_room // slot)
    pinned = min(L - keep, (host - host_base) // slot)
    store = 2 * min(slot, 64 << 20) + 4096  # the file's two pieces in host memory (ckpt_tier.c)
    if pinned < L - keep:  # some to the file: room for its buffers
        pinned = max(0, (host - host_base - store) // slot)
        if host_base + pinned * slot + store > host:
            return None
    nfile = L - keep - pinned
    piece = min(slot, 64 << 20)  # the file holds whole pieces, 4 KiB-aligned (offload.c)
    in_file = nfile * -(-slot // piece) * (-(-piece // 4096) * 4096)
    return (keep, pinned, nfile) if in_file <= disk else None


def home_flags(h, gib_slot):
    """The flags of homes h (a limit of one byte: no pinned slot)."""
    keep, pinned, _ = h
    return ["--offload-keep", str(keep), "--offload-host-limit", f"{max(1, pinned * gib_slot)}"]


def host_bytes(r):
    """A plan's host memory: ordinary and pinned (what --host-mem-limit holds)."""
    return r.get("host_peak_bytes", 0) + r.get("pinned_peak_bytes", 0)


def size_bytes(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    for u, m in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * m)
    return int(s)


PLANS = {}  # (config, T, flags): the report, each plan made once


def plan(a, config, T, extra, tmp):
    """The device plan's JSON report at T, or None when upipe refuses the layout (T too small)."""
    key = (config, T, tuple(extra))
    if key not in PLANS:
        PLANS[key] = make_plan(a, config, T, extra, tmp)
    return PLANS[key]


def make_plan(a, config, T, extra, tmp):
    rep = os.path.join(tmp, "plan.json")
    cmd = [a.upipe, "train", "--config", config, "--seq-len", str(T), "--dtype", "bf16", "--quiet",
           "--threads", "1", "--dry-run", "--device", "cuda", "--device-mem", a.device_mem,
           "--mem-report", rep] + extra
    if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        return None
    return json.load(open(rep))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--upipe", default=os.path.join(ROOT, "build", "upipe"))
    p.add_argument("--device-mem", default="139GiB")
    p.add_argument("--host-mem", default="128GiB")
    p.add_argument("--disk", default="48GiB", help="room for the offload file")
    p.add_argument("--upipe-heads", type=int, default=4)
    p.add_argument("configs", nargs="*", default=[os.path.join(ROOT, "configs", f)
                                                  for f in ("llama3.2-1b.json", "llama3-8b.json")])
    a = p.parse_args()
    free, host, disk = size_bytes(a.device_mem), size_bytes(a.host_mem), size_bytes(a.disk)
    module = 128 << 20  # the CUDA module's fixed bytes (kernels/backend.h)
    tmp = tempfile.mkdtemp(prefix="upipe-gpuplan.")
    print(f"GPU staircase from the plan: bf16, one rank, a GPU with {a.device_mem} free "
          f"(--device-mem) and {a.host_mem} of host memory; the longest T whose device plan and the "
          f"module's 128 MiB fit the GPU and whose host plan fits the host; with --offload the layer "
          f"inputs kept on the GPU as its room allows, pinned as the host's does, the rest in a file "
          f"of at most {a.disk} (--offload-keep, --offload-host-limit)")
    for config in a.configs:
        cfg = json.load(open(config))
        print(f"\n{os.path.basename(config)}: C {cfg['hidden_size']}, L {cfg['num_hidden_layers']}, "
              f"heads {cfg['num_attention_heads']}/{cfg['num_key_value_heads']}, "
              f"F {cfg['intermediate_size']}, V {cfg['vocab_size']}")
        print(f"| {'row':<18} | {'longest T':>10} | {'device plan at T':>16} | {'host plan at T':>14} "
              f"| largest device categories at T |")
        print(f"|{'-' * 20}|{'-' * 12}|{'-' * 18}|{'-' * 16}|{'-' * 32}|")
        for name, extra in rows(a.upipe_heads, tmp):
            offload = "--offload" in extra

            def fits(T):
                r = plan(a, config, T, extra, tmp)
                if r is not None and offload:
                    return homes(r, cfg, T, free, host, disk, module) is not None
                return (r is not None and r["device_peak_bytes"] + module <= free
                        and host_bytes(r) <= host)
            if not fits(1024):
                r = plan(a, config, 1024, extra, tmp)
                state = sum(r["device_categories"][c] for c in ("params", "grads", "optimizer")) if r else 0
                why = (f"model state alone {gib(state):.1f} GiB" if r and r["device_peak_bytes"] + module > free
                       else f"host plan {gib(host_bytes(r)):.1f} GiB" if r else "refused")
                print(f"| {name:<18} | {'none':>10} | {'':>16} | {'':>14} | {why} |")
                continue
            T = longest_fitting(fits, CEILING)
            r = plan(a, config, T, extra, tmp)
            where = ""
            if offload:  # the plan of the homes found, which must fit as it is
                h = homes(r, cfg, T, free, host, disk, module)
                slot = T * cfg["hidden_size"] * 2
                r = plan(a, config, T, extra + home_flags(h, slot), tmp)
                ok = (r["device_peak_bytes"] + module <= free and host_bytes(r) <= host
                      and r["offloaded_peak_bytes"] <= disk)
                where = (f"; inputs: {h[0]} on GPU, {h[1]} pinned, {h[2]} in the file "
                         f"({gib(r['offloaded_peak_bytes']):.1f} GiB)" + ("" if ok else " (that plan does not fit)"))
            cats = sorted(r["device_categories"].items(), key=lambda kv: -kv[1])[:3]
            top = ", ".join(f"{k} {gib(v):.1f}" for k, v in cats) + where
            print(f"| {name:<18} | {T:>10,} | {gib(r['device_peak_bytes']):>12.2f} GiB "
                  f"| {gib(host_bytes(r)):>10.2f} GiB | {top} |")


if __name__ == "__main__":
    main()
