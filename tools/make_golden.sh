#!/usr/bin/env bash
# Regenerates the golden fixtures of the C tests from the PyTorch reference (tools/torch_ref.py),
# after running the reference's own self-test (finite differences, second formulation).
#
#   tests/fixtures/golden_gqa/   GQA (4 heads, 2 kv heads), head_dim 32 != hidden/heads, llama3
#                                rope scaling that bites at T=80, untied, 2 layers
#   tests/fixtures/golden_tied/  MHA (num_key_value_heads absent), tied embeddings, no rope
#                                scaling, 1 layer, T=33
#   tests/fixtures/golden_docs/  the GQA model with vocab 260: packed documents (separator 256)
#                                and a loss mask, T=300 (several attention tiles)
# Each holds config.json, weights.safetensors (F32), tokens.bin (llm.c uint16 shard),
# expected_grads.safetensors (F32 gradients of every parameter, HF names) and expected.json
# ({"loss", "seq_len", "grad_norm"}) of training step 0 (inputs tokens[0..T-1], targets
# tokens[1..T]), computed in float64. golden_gqa also has weights_bf16.safetensors (BF16 copy,
# round-to-nearest-even) and expected_bf16.json (loss from the bf16-rounded weights).
#
# Usage: tools/make_golden.sh   (needs /usr/bin/python3 with torch and numpy; about 10 s)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py=/usr/bin/python3
ref="$root/tools/torch_ref.py"

"$py" "$ref" selftest

d="$root/tests/fixtures/golden_gqa"
mkdir -p "$d"
"$py" "$ref" config gqa --out "$d/config.json"
"$py" "$ref" init --config "$d/config.json" --seed 1 --out "$d/weights.safetensors"
"$py" "$ref" init --config "$d/config.json" --seed 1 --dtype bf16 --out "$d/weights_bf16.safetensors"
"$py" "$ref" tokens --vocab 256 --n 200 --seed 2 --out "$d/tokens.bin"
"$py" "$ref" grads --config "$d/config.json" --weights "$d/weights.safetensors" \
  --data "$d/tokens.bin" --seq-len 80 \
  --out-grads "$d/expected_grads.safetensors" --out-json "$d/expected.json"
"$py" "$ref" grads --config "$d/config.json" --weights "$d/weights_bf16.safetensors" \
  --data "$d/tokens.bin" --seq-len 80 --out-json "$d/expected_bf16.json"

d="$root/tests/fixtures/golden_tied"
mkdir -p "$d"
"$py" "$ref" config tied --out "$d/config.json"
"$py" "$ref" init --config "$d/config.json" --seed 3 --out "$d/weights.safetensors"
"$py" "$ref" tokens --vocab 256 --n 100 --seed 4 --out "$d/tokens.bin"
"$py" "$ref" grads --config "$d/config.json" --weights "$d/weights.safetensors" \
  --data "$d/tokens.bin" --seq-len 33 \
  --out-grads "$d/expected_grads.safetensors" --out-json "$d/expected.json"

# Packed documents (separator 256, vocab 260), T = 300 so attention spans several tiles: the
# window starts mid-document (40 tokens), then documents of 20 (shorter than a tile), 130, 1 (the
# separator alone) and 109 tokens (crossing the rank boundaries of --cp 2 and 4); and a random
# loss mask. expected.json: documents only; expected_mask.json: documents and the loss mask;
# expected_maskonly.json: the loss mask without documents (one plain causal window).
d="$root/tests/fixtures/golden_docs"
mkdir -p "$d"
"$py" "$ref" config docs --out "$d/config.json"
"$py" "$ref" init --config "$d/config.json" --seed 5 --out "$d/weights.safetensors"
"$py" "$ref" docs --lengths 40 20 130 1 110 --sep 256 --seed 6 --out "$d/tokens.bin" \
  --out-mask "$d/mask.bin"
"$py" "$ref" grads --config "$d/config.json" --weights "$d/weights.safetensors" \
  --data "$d/tokens.bin" --seq-len 300 --doc-sep 256 \
  --out-grads "$d/expected_grads.safetensors" --out-json "$d/expected.json"
"$py" "$ref" grads --config "$d/config.json" --weights "$d/weights.safetensors" \
  --data "$d/tokens.bin" --seq-len 300 --doc-sep 256 --loss-mask "$d/mask.bin" \
  --out-grads "$d/expected_mask_grads.safetensors" --out-json "$d/expected_mask.json"
"$py" "$ref" grads --config "$d/config.json" --weights "$d/weights.safetensors" \
  --data "$d/tokens.bin" --seq-len 300 --loss-mask "$d/mask.bin" \
  --out-grads "$d/expected_maskonly_grads.safetensors" --out-json "$d/expected_maskonly.json"

du -cb "$root"/tests/fixtures/golden_*/* | tail -1
echo "make_golden: fixtures written"
