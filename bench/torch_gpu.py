#!/usr/bin/env python3
"""torch_gpu.py — the PyTorch baseline of upipe's GPU benchmark (bench/bench_gpu.sh).

The recipe people run: transformers' LlamaForCausalLM built on the GPU from an HF config.json
(attn_implementation="sdpa": FlashAttention through PyTorch, untied embeddings as the config
says), gradient checkpointing, torch.optim.AdamW(fused=True), one sequence of T random ids with
labels = input_ids, under torch.autocast("cuda", dtype=torch.bfloat16) with fp32 parameters (the
arithmetic of upipe --dtype bf16: fp32 masters, bf16 products with fp32 accumulation).

    python3 bench/torch_gpu.py --config configs/llama3.2-1b.json --seq-len 8192 --steps 4

Prints one JSON line: seq_len, tokens_per_s (median of the timed steps), step_s, peak_bytes
(torch.cuda.max_memory_allocated), losses; or {"error": ...} when it does not fit.
"""
import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = LlamaConfig(**json.load(f))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    out = {"seq_len": a.seq_len, "config": a.config}
    try:
        model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.float32)
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
        ids = torch.randint(0, cfg.vocab_size, (1, a.seq_len), device="cuda")
        times, losses = [], []
        for i in range(a.warmup + a.steps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            if i >= a.warmup:
                times.append(time.perf_counter() - t0)
                losses.append(float(loss))
        step = statistics.median(times)
        out.update(tokens_per_s=a.seq_len / step, step_s=step,
                   peak_bytes=torch.cuda.max_memory_allocated(), losses=losses)
    except torch.cuda.OutOfMemoryError as e:
        out["error"] = "oom: " + str(e).split("\n")[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
