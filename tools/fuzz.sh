#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang in build-fuzz/ and runs each for
# FUZZ_SECONDS (default 60) from its seed corpus tests/fuzz/corpus/<name>. A crash, leak, UB or
# timeout is a failure: the reproducer's path is printed (rerun it with build-fuzz/tests/fuzz/
# fuzz_<name> <path>). New inputs go to build-fuzz/corpus/<name>, never into the repository.
# Usage: tools/fuzz.sh [name...]   (default: every harness)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
ALL="safetensors st_index config shard mask docs ckpt_state jinja tokenizer"
NAMES=${*:-$ALL}

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  CC=${FUZZ_CC:-clang} cmake -S . -B "$BUILD" -DUPIPE_FUZZ=ON -DUPIPE_CUDA=OFF >"$BUILD.configure.log" 2>&1 ||
    { cat "$BUILD.configure.log"; exit 1; }
fi
cmake --build "$BUILD" -j "$JOBS" --target fuzzers >"$BUILD/fuzz-build.log" 2>&1 ||
  { tail -n 50 "$BUILD/fuzz-build.log"; exit 1; }

failed=0
for name in $NAMES; do
  bin=$BUILD/tests/fuzz/fuzz_$name
  seeds=tests/fuzz/corpus/$name
  work=$BUILD/corpus/$name
  crashes=$BUILD/crashes/$name
  mkdir -p "$work" "$crashes"
  log=$BUILD/fuzz_$name.log
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: a reader that allocates what a
  # header claims instead of what the file holds is a bug too.
  if "$bin" "$work" "$seeds" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1; then
    echo "fuzz $name: ok, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
      grep -o '[0-9]*$') runs in ${SECONDS_EACH} s"
  else
    failed=1
    echo "FUZZ FAIL: $name (log $log)"
    grep -E "ERROR|SUMMARY|runtime error" "$log" | head -n 5
    for f in $(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log"); do
      echo "  reproducer: $f  (rerun: $bin $f)"
    done
  fi
done
exit $failed
