#!/usr/bin/env bash
# cluster.sh — a cluster in a box for tests and benchmarks (DESIGN.md §9.1). Each node is a
# network namespace with one link (a veth pair) to a bridge in a namespace of its own, so MPI
# ranks on different nodes talk over a real network device, optionally rate-limited (tc tbf),
# while the file system stays shared. Nothing of the host's own network is touched. Needs root.
#
#   tools/cluster.sh up N [--rate R]   nodes upn0 .. upn<N-1> (R: tc's rate, e.g. 1gbit);
#                                      again with the same N and R while the process that
#                                      brought it up runs: nothing to do; anything else up under
#                                      the prefix (a crashed run's leftovers: its owner is gone,
#                                      or another shape) goes first
#   tools/cluster.sh run NODE CMD...   CMD inside NODE with the environment MPI needs across
#                                      nodes (hydra's launcher and interface, UCX_TLS=tcp,self):
#                                      `mpiexec -f HOSTFILE ...` runs there as written
#   tools/cluster.sh mpirun ARGS...    mpiexec ARGS from the first node (with -f HOSTFILE unless
#                                      ARGS name hosts themselves)
#   tools/cluster.sh hostfile          the hostfile's path (one `node:slots` line per node)
#   tools/cluster.sh bytes             per node: bytes its link sent and received
#   tools/cluster.sh status            the nodes, their addresses, rates and processes (exit 1
#                                      when no cluster is up)
#   tools/cluster.sh down              ends every process in the nodes and removes them (nothing
#                                      up is fine)
#
# UPIPE_CLUSTER_OWNER (default: the caller of `up`) is the pid whose end makes the cluster a
# leftover; UPIPE_CLUSTER_PREFIX (default upn) names the namespaces; UPIPE_CLUSTER_SLOTS (default 2) the
# hostfile's slots per node. Exit status 77 when this host cannot make namespaces (not root, no
# `ip netns`): the cluster tests skip on it.
set -euo pipefail

PREFIX=${UPIPE_CLUSTER_PREFIX:-upn}
SLOTS=${UPIPE_CLUSTER_SLOTS:-2}
STATE=/tmp/upipe-cluster-$PREFIX # hostfile, launcher, the nodes' count and rate
BRNS=${PREFIX}br                 # the bridge's namespace
BR=${PREFIX}bridge               # the bridge
DEV=${PREFIX}eth0                # each node's end of its link (the same name on every node)
NET=10.231.0                     # node i is $NET.(i+1)/24

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
skip() {
  echo "cluster.sh: $*" >&2
  exit 77
}

[[ "$PREFIX" =~ ^[a-z][a-z0-9]{0,5}$ ]] || die "UPIPE_CLUSTER_PREFIX=$PREFIX: use 1-6 lower-case letters and digits, starting with a letter"
[[ "$SLOTS" =~ ^[1-9][0-9]*$ ]] || die "UPIPE_CLUSTER_SLOTS=$SLOTS: use a positive number"

# The namespaces of this prefix that exist now: the nodes (prefix + number) and the bridge's.
our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX([0-9]+|br)\$" || true
}
# A process as its pid and start time (a pid alone may be reused); empty once it is gone.
proc_id() {
  local pid=$1 st
  st=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
  st=${st##*) } # the fields after the command's name: state (3rd) .. start time (22nd)
  set -- $st
  [ "$1" = Z ] || echo "$pid ${20}"
}
# The cluster's owner (the process that brought it up: UPIPE_CLUSTER_OWNER, else up's caller)
# still runs; a cluster whose owner is gone is a crashed run's leftover.
OWNER=${UPIPE_CLUSTER_OWNER:-$PPID}
owner_alive() {
  local o
  o=$(cat "$STATE/owner" 2>/dev/null) && [ -n "$o" ] && [ "$o" = "$(proc_id "${o%% *}")" ]
}
nodes_up() { # the node count recorded by `up`, 0 when none
  [ -f "$STATE/nodes" ] && cat "$STATE/nodes" || echo 0
}

cmd_down() {
  local ns pids
  for ns in $(our_namespaces); do
    # every process started inside the node: TERM, then KILL what is left after 2 s
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -TERM $pids 2>/dev/null || true
  done
  for _ in $(seq 20); do
    pids=""
    for ns in $(our_namespaces); do pids+=" $(ip netns pids "$ns" 2>/dev/null || true)"; done
    [ -z "${pids// /}" ] && break
    sleep 0.1
  done
  [ -n "${pids// /}" ] && kill -KILL $pids 2>/dev/null || true
  for ns in $(our_namespaces); do
    ip netns del "$ns" 2>/dev/null || die "cannot remove namespace $ns"
  done
  rm -rf "$STATE"
}

cmd_up() {
  local n=${1:-} rate=""
  [[ "$n" =~ ^[1-9][0-9]*$ ]] && [ "$n" -le 64 ] || die "up N: N must be a number of nodes from 1 to 64 (got '${n}')"
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --rate)
        [ $# -ge 2 ] || die "--rate needs a value, e.g. --rate 1gbit"
        rate=$2
        shift 2
        ;;
      *) die "up: unknown argument '$1' (usage: up N [--rate R])" ;;
    esac
  done
  [ -n "$rate" ] && { [[ "$rate" =~ ^[0-9]+(\.[0-9]+)?[kmgt]?(bit|bps)$ ]] || die "--rate $rate: use tc's form, e.g. 2gbit, 500mbit"; }
  [ "$(id -u)" = 0 ] || skip "needs root to make network namespaces (running as $(id -un))"
  command -v ip >/dev/null && command -v tc >/dev/null || skip "needs iproute2 (ip, tc)"
  # the same cluster already up, and whoever brought it up still runs: nothing to do
  if [ "$(nodes_up)" = "$n" ] && [ "$(cat "$STATE/rate" 2>/dev/null)" = "${rate:-none}" ] &&
    [ "$(our_namespaces | wc -l)" = $((n + 1)) ] && owner_alive; then
    echo "cluster.sh: $n node(s) already up"
    return 0
  fi
  cmd_down # a crashed run's leftovers, or a cluster of another shape
  ip netns add "$BRNS" 2>/dev/null || skip "cannot make a network namespace here (ip netns add failed)"
  trap 'cmd_down' ERR
  ip -n "$BRNS" link set lo up
  ip -n "$BRNS" link add "$BR" type bridge
  ip -n "$BRNS" link set "$BR" up
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$PREFIX$i
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add "$DEV" type veth peer name "${PREFIX}p$i" netns "$BRNS"
    ip -n "$BRNS" link set "${PREFIX}p$i" master "$BR" up
    ip -n "$ns" addr add "$NET.$((i + 1))/24" dev "$DEV"
    ip -n "$ns" link set "$DEV" up
    # tbf shapes what the node sends: every byte between two nodes leaves one of them
    if [ -n "$rate" ] && ! ip netns exec "$ns" tc qdisc add dev "$DEV" root tbf rate "$rate" \
      burst 512kb latency 20ms 2>/dev/null; then
      cmd_down
      die "--rate $rate: tc refused it as a tbf rate on $ns's link"
    fi
  done
  trap - ERR
  mkdir -p "$STATE"
  for ((i = 0; i < n; i++)); do echo "$PREFIX$i:$SLOTS"; done >"$STATE/hostfile"
  # hydra's ssh launcher calls `SCRIPT [ssh options] HOST COMMAND`: run COMMAND inside HOST,
  # under HOST's name (a UTS namespace of its own: MPI_Get_processor_name names the node)
  cat >"$STATE/launch.sh" <<EOF
#!/usr/bin/env bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\${1:?no host}
shift
[[ "\$host" =~ ^$PREFIX[0-9]+\$ ]] || { echo "cluster launcher: \$host is not a node of this cluster" >&2; exit 1; }
exec ip netns exec "\$host" unshare --uts bash -c "hostname \$host; \$*"
EOF
  chmod +x "$STATE/launch.sh"
  proc_id "$OWNER" >"$STATE/owner"
  echo "$n" >"$STATE/nodes"
  echo "${rate:-none}" >"$STATE/rate"
  # every node reaches the first over its link: a TCP connection to a closed port is refused
  # (a reply came back) rather than timed out; a fresh link takes a moment to carry
  local tries
  for ((i = 1; i < n; i++)); do
    for ((tries = 0; tries < 50; tries++)); do
      [[ "$(ip netns exec "$PREFIX$i" timeout 2 bash -c "</dev/tcp/$NET.1/9" 2>&1)" == *refused* ]] && break
      sleep 0.1
    done
    [ "$tries" -lt 50 ] || { cmd_down; die "node $PREFIX$i cannot reach $PREFIX""0 over the bridge"; }
  done
  echo "cluster.sh: $n node(s) up: $(seq -s ' ' -f "$PREFIX%g" 0 $((n - 1))), link $DEV, rate ${rate:-unlimited}, hostfile $STATE/hostfile"
}

need_up() {
  [ "$(nodes_up)" -gt 0 ] || die "no cluster is up: run 'tools/cluster.sh up N' first"
}

cmd_run() {
  need_up
  local node=${1:-}
  [[ "$node" =~ ^$PREFIX[0-9]+$ ]] && [ "${node#"$PREFIX"}" -lt "$(nodes_up)" ] ||
    die "run NODE CMD...: NODE must be one of $PREFIX""0 .. $PREFIX$(($(nodes_up) - 1)) (got '$node')"
  shift
  [ $# -gt 0 ] || die "run $node: no command given"
  # hydra launches the other nodes' proxies through the launcher and binds to the node's link;
  # UCX's default transports fail to start across namespaces, TCP works
  exec ip netns exec "$node" unshare --uts bash -c 'hostname "$0"; exec "$@"' "$node" env HYDRA_LAUNCHER=ssh HYDRA_LAUNCHER_EXEC="$STATE/launch.sh" \
    HYDRA_IFACE="$DEV" UCX_TLS="${UCX_TLS:-tcp,self}" "$@"
}

cmd_mpirun() {
  need_up
  local a hosts=0
  for a in "$@"; do
    case $a in -f | -hostfile | -hosts | -host | --hostfile | --hosts) hosts=1 ;; esac
  done
  if [ "$hosts" = 1 ]; then cmd_run "${PREFIX}0" mpiexec "$@"; fi
  cmd_run "${PREFIX}0" mpiexec -f "$STATE/hostfile" "$@"
}

cmd_bytes() {
  need_up
  local i ns
  for ((i = 0; i < $(nodes_up); i++)); do
    ns=$PREFIX$i
    echo "$ns tx $(ip netns exec "$ns" cat /sys/class/net/$DEV/statistics/tx_bytes) rx $(ip netns exec "$ns" cat /sys/class/net/$DEV/statistics/rx_bytes)"
  done
}

cmd_status() {
  local n
  n=$(nodes_up)
  if [ "$n" = 0 ]; then
    local left
    left=$(our_namespaces | tr '\n' ' ')
    echo "cluster.sh: no cluster up${left:+ (leftover namespaces: $left; 'down' removes them)}"
    return 1
  fi
  echo "cluster.sh: $n node(s), rate $(cat "$STATE/rate"), hostfile $STATE/hostfile"
  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$PREFIX$i
    echo "  $ns $NET.$((i + 1)) $DEV $(ip -n "$ns" -br link show "$DEV" 2>/dev/null | awk '{print $2}'), $(ip netns pids "$ns" 2>/dev/null | wc -l) process(es)"
  done
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  run) shift; cmd_run "$@" ;;
  mpirun) shift; cmd_mpirun "$@" ;;
  hostfile) need_up; echo "$STATE/hostfile" ;;
  bytes) cmd_bytes ;;
  status) cmd_status ;;
  *) die "usage: cluster.sh up N [--rate R] | run NODE CMD... | mpirun ARGS... | hostfile | bytes | status | down" ;;
esac
