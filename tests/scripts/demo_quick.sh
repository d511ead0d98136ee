#!/usr/bin/env bash
# demo.sh at a size CI runs (under a minute): T=2048, 600 steps, the same checks.
DEMO_T=2048 DEMO_STEPS=600 exec bash "$(dirname "$0")/demo.sh" "$@"
