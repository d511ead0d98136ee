"""Shared helpers of the benchmark scripts: run `upipe train` (under mpiexec) and read back the
median step figures from its --log and the --mem-report."""
import json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + r.stdout[-3000:] + r.stderr[-3000:])
        raise SystemExit(1)
    return r


def make_data(upipe, tokens, tmp):
    path = os.path.join(tmp, f"data{tokens}.bin")
    if not os.path.exists(path):
        run([upipe, "data", "recall", "--output", path, "--tokens", str(tokens), "--distance", "1024"])
    return path


def write_config(tmp, name, **kw):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "rope_scaling": None, "tie_word_embeddings": False,
           "initializer_range": 0.02, "max_position_embeddings": 1 << 20}
    cfg.update(kw)
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def train(upipe, config, data, T, ranks=1, threads=2, steps=3, extra=(), tag="run", tmp=None,
          dry_run=False, launcher=("mpiexec",)):
    """Median figures over the steps after the first (all steps when there is one), and the
    memory report. dry_run: the plan only. launcher: the command that takes `-n R` and the
    program (tools/cluster.sh's `mpirun` for a cluster in a box)."""
    tmp = tmp or tempfile.mkdtemp(prefix="upipe-bench.")
    log, rep = os.path.join(tmp, f"{tag}.jsonl"), os.path.join(tmp, f"{tag}.mem.json")
    cmd = list(launcher) + ["-n", str(ranks), upipe, "train", "--config", config, "--data", data,
           "--seq-len", str(T), "--steps", str(steps), "--lr", "1e-4", "--threads", str(threads),
           "--quiet", "--mem-report", rep] + list(extra)
    if dry_run:
        run(cmd + ["--dry-run"])
        return {"mem": json.load(open(rep))}
    run(cmd + ["--log", log])
    lines = [json.loads(l) for l in open(log)]
    later = lines[1:] if len(lines) > 1 else lines
    med = lambda k: statistics.median(l[k] for l in later)
    out = {k: med(k) for k in ("tokens_per_s", "step_s", "comm_s", "a2a_s", "a2a_mpi_s", "a2a_bytes",
                               "flops_per_s", "fsdp_s", "grad_reduce_s", "attn_s")}
    out["mem"] = json.load(open(rep))
    return out


def gib(x):
    return x / 2**30


def longest_fitting(fits, ceiling):
    """Largest T (multiple of 1024, at most ceiling) with fits(T): doubling, then bisection."""
    lo, hi = 1024, 2048
    while hi <= ceiling and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, ceiling)
    while hi - lo > 1024:
        mid = (lo + hi) // 2 // 1024 * 1024
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
