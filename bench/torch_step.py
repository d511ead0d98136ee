#!/usr/bin/python3
"""torch_step.py — PyTorch baseline for upipe's training-step benchmark.

Times full training steps (forward, backward, AdamW step) of the same Llama architecture as upipe,
in fp32 eager PyTorch on the CPU, with the model code of tools/torch_ref.py (attention is plain
eager: matmul, causal mask, softmax, matmul — the usual PyTorch 1.13 baseline, which has no
scaled_dot_product_attention, so its memory grows with NH * T * T per layer).

    /usr/bin/python3 bench/torch_step.py --seq-len 2048 --threads 2 --steps 5 --warmup 1

Prints one JSON line: {"seq_len", "tokens_per_s" (median over the timed steps), "step_s_median",
"rss_peak_bytes" (getrusage maxrss), ...}. When the run would not fit, prints
{"seq_len": T, "error": "oom", ...} and exits 0, so a sweep can go on: either the estimate of the
step's memory exceeds --max-bytes (default: 85% of MemAvailable, since on Linux an over-large
allocation usually ends in the OOM killer rather than an exception), or PyTorch raised an
allocation RuntimeError.
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import torch_ref  # noqa: E402

# Default model: C=512, L=4, NH=8, NKV=4, F=1408, V=4096, head_dim 64.
DEFAULT_CONFIG = {"hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 4,
                  "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
                  "vocab_size": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                  "rope_scaling": None, "tie_word_embeddings": False, "initializer_range": 0.02}


def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def estimate_bytes(cfg, T):
    """Rough peak bytes of one eager training step (fp32).
    Attention: each layer saves its softmax output (NH, T, T) for backward; at the peak, in the
    first layer's backward, all L are alive plus about 3 transient (NH, T, T) buffers (scores
    before and after the mask, gradient of the probabilities / scores). Plus the (T, T) bool mask.
    Linear terms: ~(12 C + 2 NH HS + 6 F) floats saved per token and layer, logits and their
    gradient (3 T V), and weights + gradients + AdamW m, v (4 per parameter)."""
    C, F_, L, NH, NKV, HS, V = (cfg[k] for k in ("C", "F", "L", "NH", "NKV", "HS", "V"))
    scores = 4 * NH * T * T * (L + 3) + T * T
    per_tok = 4 * (L * (12 * C + 2 * NH * HS + 4 * NKV * HS + 6 * F_) + 3 * V)
    nparam = sum(int(np.prod(s)) for s in torch_ref.param_shapes(cfg).values())
    return scores + T * per_tok + 16 * nparam


def rss_peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def is_oom(e):
    m = str(e).lower()
    return "alloc" in m or "out of memory" in m or "memory" in m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq-len", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    ap.add_argument("--config", help="HF config.json (default: the built-in bench model)")
    ap.add_argument("--max-bytes", type=float, default=None,
                    help="refuse (error oom) when the memory estimate exceeds this "
                         "(default 85%% of MemAvailable; 0 = no guard)")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = torch_ref.load_config(a.config) if a.config else torch_ref.parse_config(DEFAULT_CONFIG)
    T = a.seq_len
    est = estimate_bytes(cfg, T)
    limit = 0.85 * mem_available() if a.max_bytes is None else a.max_bytes
    base = {"seq_len": T, "threads": a.threads, "estimated_bytes": est}
    if limit > 0 and est > limit:
        print(json.dumps({**base, "error": "oom", "reason": f"estimate {est:.3g} B > limit {limit:.3g} B"}))
        return 0

    try:
        params = {n: torch.nn.Parameter(torch.from_numpy(w))
                  for n, w in torch_ref.init_params(cfg, a.seed).items()}
        opt = torch.optim.AdamW(params.values(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1)
        tokens = torch.randint(0, cfg["V"], (T + 1,), dtype=torch.int64)
        cos, sin = torch_ref.rope_tables(torch_ref.rope_inv_freq(cfg), 0, T)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)  # shared by the layers
        times, loss = [], float("nan")
        for step in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            lt = torch_ref.model_loss(params, cfg, tokens[:-1], tokens[1:], cos, sin, mask)
            lt.backward()
            opt.step()
            loss = lt.item()
            dt = time.perf_counter() - t0
            if step >= a.warmup:
                times.append(dt)
    except RuntimeError as e:
        if not is_oom(e):
            raise
        print(json.dumps({**base, "error": "oom", "reason": str(e).splitlines()[0][:200]}))
        return 0

    step_med = statistics.median(times) if times else float("nan")
    tps = statistics.median([T / t for t in times]) if times else float("nan")
    print(json.dumps({"seq_len": T, "tokens_per_s": tps, "step_s_median": step_med,
                      "rss_peak_bytes": rss_peak(), "threads": a.threads, "steps": len(times),
                      "warmup": a.warmup, "loss": loss, "estimated_bytes": est,
                      "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
