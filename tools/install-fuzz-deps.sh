#!/usr/bin/env bash
# Installs what the fuzzing CI path adds to tools/install-deps.sh (run as root, or with sudo):
# clang with its libFuzzer/sanitizer runtimes and the LLVM OpenMP runtime (the fuzz build
# compiles the whole library, OpenMP loops included, with clang). Debian 12: clang 14.
set -euo pipefail
pkgs="clang libclang-rt-dev libomp-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends $missing
