#!/usr/bin/env bash
# The cluster in a box itself (tools/cluster.sh): up twice is one cluster, ranks land on the
# nodes the hostfile names and talk over the nodes' links, down ends every process in the nodes
# and is fine when nothing is up; a test that crashes (SIGKILL: no trap runs) leaves a cluster the
# next `up` removes first, one that fails tears it down; bad arguments get one line and exit 1.
source "$(dirname "$0")/lib.sh"
cluster_up 2
out=$("$CLUSTER" up 2 2>&1) && [[ "$out" == *"already up"* ]] && ok "up twice: $out" || bad "up twice: $out"
# the ranks' namespaces: two per node, in hostfile order
where=$("$CLUSTER" mpirun -n 4 bash -c 'echo $PMI_RANK $(ip netns identify $$)' 2>&1 | sort -n | awk '{printf "%s ", $2}')
[ "$where" = "upn0 upn0 upn1 upn1 " ] && ok "ranks 0-3 on: $where" || bad "ranks on: $where"
# an MPI job across the nodes moves its bytes over the links (the all-to-all test, 4 ranks)
b0=$(wire_bytes)
if "$JOB" "$CLUSTER" mpirun -n 4 "$BUILD/tests/test_comm" >"$TMP/comm.out" 2>&1 \
  && grep -q "^test_comm: [0-9]* passed, 0 failed" "$TMP/comm.out"; then
  ok "test_comm on 2 nodes x 2 ranks: $(grep "^test_comm:" "$TMP/comm.out")"
else bad "test_comm across nodes"; tail -n 5 "$TMP/comm.out"; fi
b1=$(wire_bytes)
[ $((b1 - b0)) -gt 10000 ] && ok "the job sent $((b1 - b0)) bytes over the links" || bad "links carried $((b1 - b0)) bytes"
# a rate limit shows in the nodes' queueing discipline; a new rate rebuilds the cluster
"$CLUSTER" up 2 --rate 500mbit >/dev/null 2>&1 || bad "up with --rate"
ip netns exec upn1 tc qdisc show dev upneth0 | grep -q "tbf.*rate 500Mbit" && ok "tbf 500mbit on upn1's link" \
  || bad "no tbf: $(ip netns exec upn1 tc qdisc show dev upneth0)"
# down ends what runs inside the nodes and removes them; again is fine
"$CLUSTER" run upn1 sleep 300 &
spid=$!
for _ in $(seq 50); do [ -n "$(ip netns pids upn1)" ] && break; sleep 0.1; done
"$CLUSTER" down && "$CLUSTER" down || bad "down twice"
wait "$spid" 2>/dev/null
[ -z "$(ip netns list | grep -E '^upn([0-9]+|br)( |$)')" ] && ok "down: no namespace left, the sleep in upn1 ended" || bad "left: $(ip netns list)"
"$CLUSTER" status >/dev/null 2>&1 && bad "status says up after down" || ok "status after down: $("$CLUSTER" status 2>&1)"

# A crashed test: SIGKILL after up, with a process running in a node: nothing cleaned it up ...
bash -c "source '$(dirname "$0")/lib.sh' '$UPIPE' '$BUILD' '$SRC'; cluster_up 2 >/dev/null; \
  '$CLUSTER' run upn0 sleep 300 & sleep 1; kill -KILL \$\$"
[ -n "$(ip netns pids upn0 2>/dev/null)" ] && ok "a killed test leaves its cluster and processes" || bad "crash left nothing to clean up"
left=$(ip netns pids upn0 | head -n1)
# ... so the next up removes them first
cluster_up 2
alive() { [ -n "$1" ] && [ -e "/proc/$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
! alive "$left" && ok "up after a crash: the leftover process ended" || bad "process $left survived up"
[ "$(ip netns list | grep -cE '^upn([0-9]+|br)( |$)')" = 3 ] && ok "up after a crash: 2 nodes and the bridge" || bad "namespaces: $(ip netns list)"
# Bad arguments: one line, exit 1.
for args in "up 0" "up two" "up 2 --rate fast" "up 2 --speed 1gbit" "run upn7 true" "frob"; do
  rc=0
  "$CLUSTER" $args >"$TMP/bad.out" 2>&1 || rc=$?
  [ "$rc" = 1 ] && [ "$(wc -l <"$TMP/bad.out")" = 1 ] && ok "$args: $(cat "$TMP/bad.out")" || { bad "$args: exit $rc"; cat "$TMP/bad.out"; }
done
# A failing test tears its cluster down on exit.
bash -c "source '$(dirname "$0")/lib.sh' '$UPIPE' '$BUILD' '$SRC'; cluster_up 2 >/dev/null; false || exit 1"
[ -z "$(ip netns list | grep -E '^upn')" ] && ok "a failed test leaves no namespace" || bad "failed test left: $(ip netns list)"

# Without root: a skip (77) with its reason.
if command -v setpriv >/dev/null; then
  rc=0
  setpriv --reuid=65534 --regid=65534 --clear-groups bash "$CLUSTER" up 2 >"$TMP/nr.out" 2>&1 || rc=$?
  [ "$rc" = 77 ] && grep -q "needs root" "$TMP/nr.out" && ok "not root: exit 77, $(cat "$TMP/nr.out")" || { bad "not root: exit $rc"; cat "$TMP/nr.out"; }
fi
finish
