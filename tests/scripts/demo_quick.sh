#!/usr/bin/env bash
# demo.sh at a size CI runs (under a minute): T=2048, 400 steps, the same checks.
DEMO_T=2048 DEMO_STEPS=400 exec bash "$(dirname "$0")/demo.sh" "$@"
