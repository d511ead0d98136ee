#!/usr/bin/env bash
# Engine benchmark: upipe against an eager PyTorch training step of the same model, in one run.
# usage: bench/bench.sh [build/upipe] [T ...]     (default T: 1024 4096 16384 32768)
# Needs Debian's python3-torch for the PyTorch column (apt-get install python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
upipe=${1:-build/upipe}
shift || true
exec /usr/bin/python3 bench/bench.py --upipe "$upipe" "$@"
