#!/usr/bin/env bash
# A lost node (issue 27, point 4, in part): every upipe process of one node killed (SIGKILL) in
# the middle of a run on 2 nodes x 2 ranks: the job ends within the watchdog's floor plus a few
# seconds, non-zero, with a line naming the lost node or the step and MPI call that failed (a
# race, below), no upipe process is left on either node, and the last checkpoint resumes on the
# remaining node with the weights of a run that was never interrupted (the cross-layout
# tolerance). A link that drops for 3 s and returns is ridden out with identical weights. A link
# that stays down is not handled yet (DESIGN.md §8.3: mpiexec waits for the lost node's proxy).
source "$(dirname "$0")/lib.sh"
cluster_up 2
ST_COMPARE=$BUILD/tests/st_compare
"$UPIPE" data recall --output "$TMP/d.bin" --tokens 20000 --distance 64 >/dev/null || bad "data recall"
FLOOR=3
A="--quiet --threads 1 --config $SRC/configs/tiny.json --data $TMP/d.bin --seq-len 256 --steps 1000 --lr 1e-3 --watchdog $FLOOR"
upipe_pids() { # node: its upipe processes
  local p
  for p in $(ip netns pids "$1" 2>/dev/null); do
    [ "$(ps -o comm= -p "$p" 2>/dev/null)" = upipe ] && echo "$p"
  done
  return 0
}

# 4 ranks (2 replicas x --cp 2), a checkpoint every 4 steps; upn1's ranks killed after step 10
timeout 300 "$JOB" "$CLUSTER" mpirun -n 4 "$UPIPE" train $A --cp 2 --ckpt-dir "$TMP/ck" --ckpt-every 4 \
  --log "$TMP/run.jsonl" >"$TMP/run.out" 2>&1 &
job=$!
while kill -0 "$job" 2>/dev/null && [ "$(cat "$TMP/run.jsonl" 2>/dev/null | wc -l)" -lt 10 ]; do sleep 0.05; done
t0=$(date +%s.%N)
victims=$(upipe_pids upn1)
[ -n "$victims" ] && kill -KILL $victims
rc=0
wait "$job" || rc=$?
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
# the floor plus 5 s: the survivors see their peers' connections reset at once (measured 0.3 s)
if [ -n "$victims" ] && [ "$rc" != 0 ] && awk -v d="$dt" -v f="$FLOOR" 'BEGIN { exit !(d <= f + 5) }'; then
  ok "upn1's ranks killed: the job ended in $dt s with status $rc"
else bad "killed node: status $rc after $dt s (victims: ${victims:-none})"; tail -n 5 "$TMP/run.out"; fi
# Who says what happened is a race: a survivor that sees its peers' connections reset first
# names the step and the MPI call (one line, comm.c's mpi_failed); when hydra's proxy sees its
# ranks die first, mpiexec ends the survivors at once and names the node and the exit code.
line=$(grep -m1 "step [0-9]*: MPI_[A-Za-z_]* in comm_[a-z_]* failed" "$TMP/run.out")
node=$(grep -m1 "RUNNING AT upn1" "$TMP/run.out")
if [ -n "$line" ]; then ok "a survivor says: ${line#*comm.c:*: }"
elif [ -n "$node" ]; then ok "mpiexec says: $(echo $node) ($(grep -m1 -o "EXIT CODE: [0-9]*" "$TMP/run.out"))"
else bad "no line naming the step and the call, or the lost node"; head -n 5 "$TMP/run.out"; fi
left="$(upipe_pids upn0)$(upipe_pids upn1)"
[ -z "$left" ] && ok "no upipe process left on either node" || bad "upipe processes left: $left"

# the newest checkpoint resumes on upn0 alone (2 ranks, --cp 2, --grad-accum 2: the same 2
# sequences per step) for 2 more steps; an uninterrupted run on 2 nodes checkpoints the same step
ck=$(ls -d "$TMP"/ck/step-* 2>/dev/null | tail -n1)
k=$((10#${ck##*step-}))
if [ -n "$ck" ] && [ "$k" -ge 4 ]; then
  on_node upn0 mpirun_n 2 "$UPIPE" train $A --cp 2 --grad-accum 2 --ckpt-dir "$TMP/ck" --resume \
    --stop-at $((k + 2)) >"$TMP/res.out" 2>&1 || { bad "resume on upn0"; tail -n 5 "$TMP/res.out"; }
  on_cluster mpirun_n 4 "$UPIPE" train $A --cp 2 --ckpt-dir "$TMP/ref" --stop-at $((k + 2)) \
    >"$TMP/ref.out" 2>&1 || { bad "uninterrupted run"; tail -n 5 "$TMP/ref.out"; }
  s=$(printf "step-%08d" $((k + 2)))
  # the cross-layout tolerance of ckpt.sh: fp32 reassociation of the 2 sequences' sum
  if "$ST_COMPARE" "$TMP/ck/$s/model.safetensors" "$TMP/ref/$s/model.safetensors" --rtol 1e-5 >"$TMP/w.cmp" 2>&1; then
    ok "checkpoint of step $k resumed on the remaining node, step $((k + 2)): $(tail -n1 "$TMP/w.cmp")"
  else bad "resume on the remaining node"; cat "$TMP/w.cmp"; fi
else bad "no checkpoint to resume (${ck:-none})"; fi

# A link that drops for 3 s and comes back: MPI over TCP rides it out (the kernel retransmits,
# UCX's connections stay up), the step across the outage takes the outage longer, and the run
# ends with the weights of one that never lost its link, byte for byte (the same launch and
# layout). Only the watchdog judges the wait: with a floor below the outage (3 s) it stops the
# job there with one line per rank naming the step and the collective (measured by hand).
B="--quiet --threads 1 --config $SRC/configs/tiny.json --data $TMP/d.bin --seq-len 256 --steps 20 --lr 1e-3 --cp 2 --watchdog 60"
rm -f "$TMP/drop.jsonl"
timeout 300 "$JOB" "$CLUSTER" mpirun -n 4 "$UPIPE" train $B --log "$TMP/drop.jsonl" --save "$TMP/drop.st" \
  >"$TMP/drop.out" 2>&1 &
job=$!
while kill -0 "$job" 2>/dev/null && [ "$(cat "$TMP/drop.jsonl" 2>/dev/null | wc -l)" -lt 5 ]; do sleep 0.05; done
ip -n upn1 link set upneth0 down
sleep 3
ip -n upn1 link set upneth0 up
rc=0
wait "$job" || rc=$?
on_cluster mpirun_n 4 "$UPIPE" train $B --save "$TMP/nodrop.st" >"$TMP/nodrop.out" 2>&1 || bad "run without the drop"
slow=$(sed -n 's/.*"step_s": *\([0-9.]*\).*/\1/p' "$TMP/drop.jsonl" | sort -g | tail -n1)
if [ "$rc" = 0 ] && [ "$(wc -l <"$TMP/drop.jsonl")" = 20 ] && cmp -s "$TMP/drop.st" "$TMP/nodrop.st" \
  && awk -v s="$slow" 'BEGIN { exit !(s >= 2.5) }'; then
  ok "a 3 s link drop: all 20 steps, the slowest $slow s, weights identical to a run without it"
else bad "3 s link drop: status $rc, $(wc -l <"$TMP/drop.jsonl") steps, slowest ${slow:-?} s"; tail -n 5 "$TMP/drop.out"; fi
finish
