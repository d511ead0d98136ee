#!/usr/bin/env bash
# README's SLURM batch script for real (issue 27, point 6): munged, slurmctld and one slurmd
# started by hand in a temporary folder (no systemd, no cgroups: proctrack/linuxproc, task/none,
# one node on 127.0.0.1), the ranks launched with `srun --mpi=pmi2` (MPICH's PMI client against
# SLURM's pmi2 plugin). $4 picks the case:
#   preempt    a job in a low-priority partition is preempted by one in a high-priority partition
#              (PreemptType=preempt/partition_prio, PreemptMode=REQUEUE). GraceTime=0: SLURM
#              sends SIGTERM (twice, milliseconds apart, from the step's slurmstepd), upipe
#              finishes the step, writes a checkpoint and exits, SLURM requeues the job. GraceTime
#              30: one SIGTERM, upipe exits within the grace, so SLURM ends the job as COMPLETED
#              and the script's own requeue line puts it back in the queue.
#   timelimit  --time=1 --signal=TERM@60: the signal comes (SIGCONT, SIGTERM) at slurmctld's next
#              time-limit check (every 30 s, so this case is slow), upipe stops with a checkpoint,
#              the script requeues the job.
# Each requeued job ends with the weights of an uninterrupted run, byte for byte, and a log that
# holds every step once with its losses. The ranks are stopped (SIGSTOP) after their first step
# until SLURM signals them (with a SIGCONT), so the signal lands before the last step
# however fast or loaded the host, and the step that follows it is as long as a real model's
# against the second SIGTERM of a preemption.
# Skipped (77, one line) when not root, without the packages (slurmctld, slurmd, slurm-client,
# munge: tools/install-deps.sh), or when the
# daemons do not start here. Every wait polls with a bound; everything started is stopped on exit.
source "$(dirname "$0")/../scripts/lib.sh"
MODE=${4:-preempt}
# The whole script's bound, under ctest's TIMEOUT (tests/slurm/slurm.cmake) so that the cleanup
# below, not ctest's kill, ends a stuck run: daemons outlive a killed script.
LIMIT=${5:-150}
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "SLURM's daemons are started as root here, and this is uid $(id -u)"
for c in munged munge slurmctld slurmd sbatch srun scontrol squeue scancel python3; do
  command -v "$c" >/dev/null || skip "$c is not installed (apt-get install slurmctld slurmd slurm-client munge)"
done

S=$TMP/slurm
CONF=$S/slurm.conf
MUNGE=$S/munge/munge.sock
NODE=$(hostname -s)
sl() { SLURM_CONF=$CONF "$@"; } # a SLURM client or daemon of this test's cluster
# Processes of this cluster: the daemons, the step daemons and the jobs' tasks all carry
# SLURM_CONF=$CONF in their environment (the test's own shell does not).
ours() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -qxF "SLURM_CONF=$CONF" && echo "${p#/proc/}"
  done
}
stop_all() {
  if [ -s "$S/slurmctld.pid" ]; then
    sl scancel --quiet $(sl squeue -h -o %i 2>/dev/null) 2>/dev/null
  fi
  local f p
  for f in slurmd slurmctld; do
    [ -s "$S/$f.pid" ] && kill "$(cat "$S/$f.pid")" 2>/dev/null
  done
  for _ in $(seq 1 50); do [ -z "$(ours)" ] && break; sleep 0.1; done
  for p in $(ours); do kill -9 "$p" 2>/dev/null; done
  [ -s "$S/munged.pid" ] && munged --stop --socket="$MUNGE" >/dev/null 2>&1 # waits for its end
  [ -n "${WATCH:-}" ] && kill $(pgrep -P "$WATCH") "$WATCH" 2>/dev/null
  rm -rf "$TMP"
}
trap stop_all EXIT
trap 'echo "FAIL: $MODE: not done after $LIMIT s"; exit 1' TERM
sleep "$LIMIT" >/dev/null 2>&1 && kill -TERM $$ &
WATCH=$!
mkdir -p "$S/munge" "$S/spool" "$S/state"
chmod 700 "$S/munge"

# ---- the run and its uninterrupted twin (first: nothing of SLURM runs while it may hang) ----
GQA=$FIX/golden_gqa
STEPS=150
A="--config $GQA/config.json --data $GQA/tokens.bin --init $GQA/weights.safetensors --seq-len 80
   --lr 1e-3 --steps $STEPS --threads 1 --quiet"
mpirun_n 2 "$UPIPE" train $A --save "$TMP/full.st" --log "$TMP/full.jsonl" >"$TMP/full.out" 2>&1 \
  || { bad "uninterrupted run"; cat "$TMP/full.out"; }
echo "uninterrupted run done at $SECONDS s"

# ---- the cluster: munged, slurmctld, slurmd ----
t_up=$SECONDS
dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$S/munge/munge.key"
munged --force --key-file="$S/munge/munge.key" --socket="$MUNGE" --pid-file="$S/munged.pid" \
  --log-file="$S/munged.log" --seed-file="$S/munge/seed" 2>"$S/munged.err" \
  || skip "munged does not start: $(tail -n1 "$S/munged.err")"
read -r PORT_CTLD PORT_SLURMD < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
# cred_expire: a requeued job waits cred_expire + 1 s before it may start again (default 120 s);
# the schedulers run every second (defaults: 60 s, backfill 30 s), so it starts as soon as it may.
# Partitions: low and grace are preempted by high (PriorityTier); KillWait is upipe's time to
# finish its step and checkpoint after SLURM's SIGTERM, before SIGKILL.
cat >"$CONF" <<EOF
ClusterName=upipetest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT_CTLD
SlurmdPort=$PORT_SLURMD
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE,cred_expire=5
SchedulerParameters=sched_interval=1,bf_interval=1
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=30
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=low Nodes=$NODE Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=0 State=UP
PartitionName=grace Nodes=$NODE PriorityTier=1 PreemptMode=REQUEUE GraceTime=30 State=UP
PartitionName=high Nodes=$NODE PriorityTier=2 PreemptMode=OFF State=UP
EOF
sl slurmctld -i >"$S/slurmctld.err" 2>&1 || skip "slurmctld does not start: $(tail -n1 "$S/slurmctld.err")"
sl slurmd -N "$NODE" >"$S/slurmd.err" 2>&1 || skip "slurmd does not start: $(tail -n1 "$S/slurmd.err")"
idle() { sl sinfo -h -n "$NODE" -o %T 2>/dev/null | grep -qx idle; }
for _ in $(seq 1 300); do idle && break; sleep 0.1; done
idle || skip "the node is not idle 30 s after the daemons started: $(tail -n1 "$S/slurmctld.log")"
echo "SLURM $(sl scontrol --version | cut -d' ' -f2) up in $((SECONDS - t_up)) s: node $NODE, ports $PORT_CTLD/$PORT_SLURMD"
sl srun --mpi=list 2>&1 | grep -qw pmi2 && ok "srun --mpi=list offers pmi2" || bad "no pmi2 in srun --mpi=list"

steps_of() { grep -o '"step": [0-9]*' "$1" | sed 's/.*: //' | tr '\n' ' '; }
losses_of() { sed 's/.*"loss": *\([^,]*\),.*/\1/' "$1" | tr '\n' ' '; }
field() { sl scontrol show job "$1" 2>/dev/null | grep -o "$2=[^ ]*" | cut -d= -f2; }

# The README's batch script as written (its block after "Under SLURM"), with this test's names:
# one node of 2 tasks for 2 nodes of 8, this build, this run's flags and folder, a checkpoint
# every 50 steps; one line added after the #SBATCH line (the restart count, which the test
# reads). The same command line for the first start and every requeue; stopped early (SIGTERM
# with the run unfinished), it requeues itself. A README that no longer matches fails here.
batch_script() { # name
  local ck=$TMP/ck_$1 last
  last=$(printf 'step-%08d' "$STEPS")
  sed -n '/^Under SLURM/,/^## /p' "$SRC/README.md" | sed -n '/^    #!\/bin\/bash/,/^$/p' | sed 's/^    //' \
    | sed -e 's/--nodes=2 --ntasks-per-node=8 /--ntasks=2 /' \
      -e "s|build/upipe train \.\.\. --steps 10000|$UPIPE train $(echo $A) --save $TMP/$1.st --log $TMP/$1.jsonl|" \
      -e "s|/shared/ckpt/step-00010000|$ck/$last|" -e "s|/shared/ckpt|$ck|" \
      -e 's/--ckpt-every 200 /--ckpt-every 50 /' -e '/^#SBATCH/a echo "run ${SLURM_RESTART_COUNT:-0}"'
}
# Every substitution took: the script names this test's build, folder and final checkpoint.
script=$(batch_script check)
for want in "#SBATCH --ntasks=2 --requeue" "srun --mpi=pmi2 $UPIPE train" "--ckpt-dir $TMP/ck_check --ckpt-every 50 --resume" \
  "[ -d $TMP/ck_check/$(printf 'step-%08d' "$STEPS") ] || scontrol requeue"; do
  grep -qF -- "$want" <<<"$script" || bad "README's batch script: no '$want' after the substitutions: $script"
done
! grep -qE '\.\.\.|/shared|--nodes' <<<"$script" || bad "README's batch script: left unsubstituted: $script"
# The job's upipe processes (2 ranks), found by their --log.
ranks() {
  local p
  for p in $(pgrep -f -- "--log $TMP/$1.jsonl"); do
    [ "$(ps -o comm= -p "$p")" = upipe ] && echo "$p"
  done
}
# Polls until the command succeeds, for at most $1 seconds: 0 or 1.
within() {
  local n=$(($1 * 10))
  shift
  for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.1; done
  "$@"
}
first_step() { # the first logged step, polled every 10 ms for at most 60 s
  for _ in $(seq 1 6000); do [ -s "$TMP/$1.jsonl" ] && return 0; sleep 0.01; done
  return 1
}
two_ranks() { [ "$(ranks "$1" | wc -l)" = 2 ]; }
state_is() { [ "$(field "$1" JobState)" = "$2" ]; }

# case name sbatch-args... : submits the job, stops its ranks after their first step, calls
# $STOPPER name jobid (which makes SLURM signal it), waits for the requeued job to finish.
case_run() {
  local name=$1 jid pids t0=$SECONDS
  shift
  batch_script "$name" >"$TMP/$name.sh"
  jid=$(sl sbatch --parsable -o "$TMP/$name.out" "$@" "$TMP/$name.sh") || { bad "$name: sbatch"; return; }
  JID=$jid
  # the ranks exist long before their first step (MPI start-up, calibration): found first, they
  # are stopped within a poll of 10 ms after it, a few steps of 5 ms into the 150 of the run
  within 120 two_ranks "$name" || { bad "$name: no ranks"; cat "$TMP/$name.out"; return; }
  pids=$(ranks "$name")
  first_step "$name" || { bad "$name: no step logged"; cat "$TMP/$name.out"; return; }
  kill -STOP $pids
  echo "$name: ranks stopped after step $(wc -l <"$TMP/$name.jsonl")"
  "$STOPPER" "$name" "$jid"
  if ! within 240 state_is "$jid" COMPLETED; then
    bad "$name: job $jid is $(field "$jid" JobState) after 240 s"; kill -CONT $pids 2>/dev/null
    cat "$TMP/$name.out"; tail -n 20 "$S/slurmctld.log"; return
  fi
  echo "$name: $((SECONDS - t0)) s from sbatch to the resumed job's end"
  check "$name" "$jid"
}
# check name jobid: stopped on SIGTERM with a checkpoint, requeued, resumed to the straight end.
check() {
  local name=$1 jid=$2 out=$TMP/$1.out n restarts
  n=$(sed -n "s|^stopped on SIGTERM: checkpoint $TMP/ck_$name/step-0*\([0-9]*\);.*|\1|p" "$out" | head -n1)
  restarts=$(field "$jid" Restarts)
  if [ -n "$n" ] && [ "$n" -lt "$STEPS" ]; then ok "$name: SIGTERM, checkpoint at step $n, exit"
  else bad "$name: no checkpoint on SIGTERM"; cat "$out"; fi
  if [ "${restarts:-0}" -ge 1 ] && grep -qx "run 1" "$out" && [ "$(field "$jid" ExitCode)" = 0:0 ]; then
    ok "$name: job $jid requeued ($restarts), resumed, COMPLETED with exit 0"
  else bad "$name: job $jid restarts '$restarts', exit $(field "$jid" ExitCode)"; cat "$out"; fi
  if cmp -s "$TMP/full.st" "$TMP/$name.st"; then ok "$name: final weights = the uninterrupted run's"
  else bad "$name: final weights differ from the uninterrupted run's"; fi
  if [ "$(steps_of "$TMP/$name.jsonl")" = "$(steps_of "$TMP/full.jsonl")" ] \
     && [ "$(losses_of "$TMP/$name.jsonl")" = "$(losses_of "$TMP/full.jsonl")" ]; then
    ok "$name: the log holds steps 1..$STEPS once each, with the uninterrupted run's losses"
  else bad "$name: log steps $(steps_of "$TMP/$name.jsonl" | cut -c1-80)..."; fi
}

# A job in the high partition takes both CPUs: SLURM preempts the stopped job for it.
preemptor() { # name jobid
  sl sbatch --parsable -p high -n 2 -o "$TMP/$1.high" --wrap "echo high ran" >/dev/null \
    || bad "$1: sbatch -p high"
}
if [ "$MODE" = preempt ]; then
  STOPPER=preemptor
  # who requeued: SLURM itself without grace time, the script's line with it
  requeued_by_slurm() { grep -q "preempted JobId=$1 has been requeued" "$S/slurmctld.log"; }
  case_run preempt -p low
  grep -q "DUE TO PREEMPTION" "$TMP/preempt.out" && grep -qx "high ran" "$TMP/preempt.high" \
    && requeued_by_slurm "$JID" \
    && ok "preempt: preempted (DUE TO PREEMPTION) for the high job, which ran; SLURM requeued it" \
    || bad "preempt: no preemption and requeue by SLURM seen"
  case_run grace -p grace
  grep -qx "high ran" "$TMP/grace.high" && ! requeued_by_slurm "$JID" \
    && ok "grace: the high job ran; the job ended itself within the grace, the script requeued it" \
    || bad "grace: the high job did not run, or SLURM requeued the job"
elif [ "$MODE" = timelimit ]; then
  # --signal=TERM@60 of a 1-minute limit is due at once; SLURM sends it at its next check.
  nothing() { :; }
  STOPPER=nothing
  case_run timelimit -p low --time=1 --signal=TERM@60
else
  bad "unknown case $MODE (preempt or timelimit)"
fi
finish
