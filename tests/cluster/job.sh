#!/usr/bin/env bash
# job.sh COMMAND... — an MPI job of a cluster test (tests/cluster/lib.sh), COMMAND an mpiexec
# line with `-n N`. Its exit status, except for one known fault of the MPI library: MPICH
# 4.0.2's ch4:ucx can deadlock in MPI_Finalize across nodes (pmodels/mpich#6596). Every rank
# leaves a mark on entering MPI_Finalize (finalize_mark.c, preloaded); once all N have and the
# job still runs after FINALIZE_GRACE seconds (default 5: a normal finalize takes well under a
# second here even on a loaded host), the job is ended, a note says so, and the status is 0:
# the work was done. FINALIZE_LOG, when set, gets one line per job so ended.
set -u
mark=${FINALIZE_MARK:?FINALIZE_MARK names the preloaded finalize_mark library}
grace=${FINALIZE_GRACE:-5}
n=""
prev=""
for a in "$@"; do
  [ "$prev" = "-n" ] || [ "$prev" = "-np" ] && n=$a
  prev=$a
done
[ -n "$n" ] || { echo "job.sh: no -n N in: $*" >&2; exit 2; }
dir=$(mktemp -d /tmp/upipe-finalize.XXXXXX)
LD_PRELOAD="$mark${LD_PRELOAD:+:$LD_PRELOAD}" UPIPE_FINALIZE_DIR=$dir "$@" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; rm -rf "$dir"' TERM INT
since=""
while kill -0 "$pid" 2>/dev/null; do
  if [ "$(ls "$dir" | wc -l)" -ge "$n" ]; then
    [ -n "$since" ] || since=$SECONDS
    if [ $((SECONDS - since)) -ge "$grace" ]; then
      echo "note: all $n ranks finished and hung in MPI_Finalize for ${grace} s (MPICH 4.0.2 ch4:ucx, pmodels/mpich#6596): job ended" >&2
      [ -n "${FINALIZE_LOG:-}" ] && echo "$*" >>"$FINALIZE_LOG"
      kill -TERM "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      rm -rf "$dir"
      exit 0
    fi
  fi
  sleep 0.2
done
wait "$pid"
rc=$?
rm -rf "$dir"
exit $rc
