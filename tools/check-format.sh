#!/usr/bin/env bash
# CI's format check: every C file of the tree as .clang-format (clang-format 14, Debian 12)
# writes it. `make format` rewrites them; this only reports. Exits 1 naming the files that differ.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || {
  echo "check-format: clang-format is not installed: apt-get install clang-format" >&2
  exit 1
}
# The tracked C files; outside a git checkout every .c and .h below src, tests and bench.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h')
else
  mapfile -t files < <(find src tests bench -name '*.[ch]' | sort)
fi
[ ${#files[@]} -gt 0 ] || { echo "check-format: no C files found" >&2; exit 1; }
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from .clang-format: ${bad[*]}" >&2
  echo "check-format: run 'make format' and commit the result" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files as .clang-format writes them"
