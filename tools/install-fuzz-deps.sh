#!/usr/bin/env bash
# Installs what the fuzzing CI path adds to tools/install-deps.sh (run as root, or with sudo):
# clang with its libFuzzer/sanitizer runtimes and the LLVM OpenMP runtime (the fuzz build
# compiles the whole library, OpenMP loops included, with clang), and clang-format for CI's
# format check (tools/check-format.sh). Debian 12: clang 14.
set -euo pipefail
exec bash "$(dirname "$0")/install-deps.sh" clang libclang-rt-dev libomp-dev clang-format
