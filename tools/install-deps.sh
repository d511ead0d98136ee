#!/usr/bin/env bash
# Installs upipe's build dependencies from Debian when any is missing (run as root, or with sudo).
set -euo pipefail
# Extra package names given as arguments are installed too (tools/install-fuzz-deps.sh). python3
# (its standard library only) checks the JSON reports and SVG pictures in the script tests;
# python3-jinja2 is the reference for the chat templates (tests/tools/chat_reference.py);
# PCRE2 and utf8proc are the tokenizer's (src/tokenizer); SLURM and munge run the README's batch
# script in tests/slurm/slurm.sh, which starts its own daemons in a temporary folder (without
# /etc/slurm/slurm.conf the packages' init scripts start no SLURM daemon).
pkgs="build-essential cmake pkg-config libopenblas-openmp-dev mpich libmpich-dev libjansson-dev libpcre2-dev libutf8proc-dev libdnnl-dev python3 python3-jinja2 slurmctld slurmd slurm-client munge $*"
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
