#!/bin/sh
# A 3-rank job where rank 1 dies (kill: SIGKILL) or hangs (hang: SIGSTOP)
# inside a 64 MiB all-reduce, or issues an extra 4-byte all-reduce where
# the others run the 64 MiB one (extra: collectives out of step). Ranks 0
# and 2 must fail that all-reduce themselves, naming rank 1, and exit 4:
# on seeing it gone when rank 1 died, at the collective timeout (15 s here)
# when it hangs. Out of step, every rank (rank 1 too) fails on seeing the
# mismatch, naming both collectives. ddprun must exit non-zero.
#
# What each rank saw is in its message ("a peer went away", "did not
# arrive within the timeout", "out of step"). The times are bounds that
# only catch a wait that never ends: a death or a mismatch is seen well
# before half the collective timeout (in milliseconds; seconds on a loaded
# machine under a sanitizer), a hang within the timeout plus 15 s.
#
# Usage: peer_fault.sh kill|hang|extra DDPRUN COLL_CHECK
# Each worker runs under a small wrapper that records its real exit
# status. The survivors ignore SIGTERM (coll_check's fault mode) so their
# exit code is their own finding, not the agent's stop order. The job is
# bounded by timeout(1); nothing outlives it (ddprun stops its workers,
# SIGKILL after --stop-grace). The grace is long: it is how long the other
# survivor has, once the first exited, to report by itself, and ddprun
# sends SIGCONT with its stop, so even the stopped rank ends without it.
set -u

mode=${1:?usage: peer_fault.sh kill|hang|extra DDPRUN COLL_CHECK}
ddprun=${2:?}
worker=${3:?}
# A death or a mismatch is seen at once, whatever the timeout: there it
# only bounds a peer that is slow (a sanitized build moving 64 MiB on a
# loaded machine), so it is long enough never to fire first.
# A hang is named at the timeout, which must not pass before rank 1 has
# stopped: its watcher stops it once its part of the all-reduce has begun,
# which took 5.1 s once under the thread sanitizer beside a CPU hog (and
# rank 0 then named rank 2, which was only waiting for rank 1). 15 s.
case ${1:-} in
  kill) timeout_ms=20000 ;;
  extra) timeout_ms=30000 ;;
  *) timeout_ms=15000 ;;
esac

fail() {
  echo "FAIL: $*" >&2
  for f in out err codes; do
    echo "--- $f" >&2
    cat "$tmp/$f" >&2 2>/dev/null
  done
  exit 1
}

case $mode in
  kill) flag=--kill-rank ;;
  hang) flag=--hang-rank ;;
  extra) flag=--extra-rank ;;
  *) echo "usage: peer_fault.sh kill|hang|extra DDPRUN COLL_CHECK" >&2; exit 2 ;;
esac
tmp=$(mktemp -d "${TMPDIR:-/tmp}/peer_fault.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# $0 of the inner shell is the worker; its status goes to codes.
# The agent's stop reaches the others as the first survivor exits: a
# SIGTERM, even ignored, stops a ptraced thread, and a sanitized build's
# leak check at exit, which ptraces every thread, was seen to hang on one
# (out of step, and in the hang mode on a loaded machine). So every rank
# that ends by itself runs in a session of its own, which the stop of its
# process group does not reach: the survivors, and out of step every
# rank. Rank 1 stopped by the hang mode ends only through the agent's
# stop (SIGCONT), so it stays in its group.
command -v setsid >/dev/null 2>&1 || { echo "SKIP: no 'setsid' command"; exit 77; }
wrapper='trap "" TERM; if [ "$RANK" != 1 ] || [ "$FAULT_MODE" = extra ]; then setsid -w "$0" "$@"; else "$0" "$@"; fi; rc=$?; echo "rank $RANK exit $rc" >>"$CODES"; exit $rc'
export FAULT_MODE=$mode
CODES=$tmp/codes timeout -k 5 60 "$ddprun" --standalone --nproc-per-node 3 \
  --stop-grace 20 --log-level warn sh -c "$wrapper" "$worker" \
  --timeout-ms $timeout_ms $flag 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -ne 0 ] || fail "ddprun exited 0"
# ddprun's own last words; a job that timeout(1) had to end lacks them.
grep -q "^ddprun: job failed with exit code $rc\( (.*)\)\?\$" "$tmp/err" ||
  fail "ddprun did not end the job itself (exit $rc)"

# Rank 1's own line: "coll_check: rank 1: SIGKILL itself at t=123us",
# "coll_check: rank 1: an extra allreduce at t=123us".
t_fault=$(sed -n 's/.*coll_check: rank 1: [A-Za-z ]* at t=\([0-9]*\)us.*/\1/p' "$tmp/err" |
  head -n 1)
[ -n "$t_fault" ] || fail "rank 1 never reached its fault"

ranks="0 2"
[ "$mode" = extra ] && ranks="0 1 2"
for r in $ranks; do
  grep -q "^rank $r exit 4\$" "$tmp/codes" ||
    fail "rank $r did not exit 4 ($(grep "^rank $r " "$tmp/codes"))"
  line=$(grep "coll_check: rank $r: allreduce failed" "$tmp/err" | head -n 1)
  [ -n "$line" ] || fail "rank $r printed no failure"
  case $line in
    *"rank 1 "* | *"rank 1)"* | *"rank 1,"*) ;;
    *) fail "rank $r's message does not name rank 1: $line" ;;
  esac
  t=$(echo "$line" | sed -n 's/.* failed at t=\([0-9]*\)us.*/\1/p')
  dt=$((t - t_fault))
  if [ "$mode" = extra ]; then
    # Every rank names both sides: the extra 4 B one and the 64 MiB one.
    case $line in
      *"[collectives out of step"*"]"*) ;;
      *) fail "rank $r did not report collectives out of step: $line" ;;
    esac
    case $line in
      *"out of step: rank "*" is in allreduce #3 of "*", rank "*" in allreduce #3 of "*) ;;
      *) fail "rank $r's message does not name both collectives: $line" ;;
    esac
    case $line in
      *"allreduce #3 of 4 B"*"allreduce #3 of 64.0 MiB"* | \
      *"allreduce #3 of 64.0 MiB"*"allreduce #3 of 4 B"*) ;;
      *) fail "rank $r's message lacks the sizes of both: $line" ;;
    esac
    [ "$dt" -lt $((timeout_ms * 500)) ] ||
      fail "rank $r took ${dt}us to see the extra all-reduce"
  elif [ "$mode" = kill ]; then
    case $line in
      *"[a peer went away]"*) ;;
      *) fail "rank $r did not report a lost peer: $line" ;;
    esac
    # Death is seen through the ring's liveness checks, not the timeout.
    [ "$dt" -lt $((timeout_ms * 500)) ] || fail "rank $r took ${dt}us to see rank 1 die"
  else
    case $line in
      *"[a peer did not arrive within the timeout]"*) ;;
      *) fail "rank $r did not time out: $line" ;;
    esac
    # The collective started before rank 1 stopped, so it times out no
    # later than the timeout after the stop, plus slack for a loaded host.
    [ "$dt" -le $((timeout_ms * 1000 + 15000000)) ] ||
      fail "rank $r timed out ${dt}us after rank 1 stopped"
  fi
  echo "rank $r: exit 4 after ${dt}us: $line"
done
echo "PASS: peer $mode; ddprun exited $rc"
exit 0
