#!/usr/bin/env bash
# Collectives out of step: with DDPRUN_COLL_TEST_EXTRA=1@5 rank 1 issues
# one all-reduce more (4 B) at the start of step 5, where the other ranks
# all-reduce the step's gradients. With the collective timeout at 30 s:
#  - every rank fails on seeing the mismatch (well within half the
#    timeout of rank 1's step start, its hook line: milliseconds, a few
#    seconds on a loaded host under a sanitizer), its message naming both
#    collectives of the link where they differ,
#    kinds, sequence numbers and sizes ("out of step: rank 1 is in
#    allreduce #14 of 4 B, rank 0 in allreduce #14 of 26.5 KiB"), not a
#    timeout;
#  - every rank exits 4 on its own (it runs in a session of its own,
#    which the agent's SIGTERM to the worker's process group does not
#    reach, so the code is its own finding);
#  - ddprun --max-restarts 1 restarts the group, whose second attempt
#    (TORCHELASTIC_RESTART_COUNT=1: the hook is off) completes, and ddprun
#    exits 0.
# --host-weights private: the gradients go through the process group
# (host_weights.sh checks the shared weights' own detection).
# Each rank's stderr is stamped line by line as it is written.
# nodes: the same on a 2-node job on 127.0.0.1 (a ddprun-rdzv on port 0,
# one ddprun per node, WORLD/2 ranks each): rank 1 and its peers on the
# other node.
#
# Usage: out_of_step.sh DDPRUN TRAIN WORLD shm|tcp|nodes [DDPRUN-RDZV]
set -u
name=out_of_step_$3_$4
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: out_of_step.sh DDPRUN TRAIN WORLD shm|tcp|nodes [DDPRUN-RDZV]}
train=${2:?}
world=${3:?}
via=${4:?}
case $via in
  tcp) export DR_PG_FORCE_TCP=1 ;;
  shm | nodes) unset DR_PG_FORCE_TCP ;;
  *) fail "usage: out_of_step.sh DDPRUN TRAIN WORLD shm|tcp|nodes [DDPRUN-RDZV]" ;;
esac

small="--layers 2 --width 64 --input-dim 32 --classes 8 --samples 2048
       --eval-samples 64 --batch 16 --steps 20 --log-every 5 --optimizer sgd
       --lr 0.05 --comm-timeout 30 --host-weights private"

command -v setsid >/dev/null 2>&1 || skip "no 'setsid' command"

# Per rank and attempt: stderr lines prefixed with the wall time (s) at
# which they were written, and the exit status. $0 is train. The wrapper
# and its stamping loop ignore the agent's stop; train, in its own
# session, never sees it (a SIGTERM, even ignored, stops a ptraced
# thread: a sanitized build's leak check at exit, which ptraces every
# thread, was seen to hang on one).
wrapper='trap "" TERM
a=${TORCHELASTIC_RESTART_COUNT:-0}
setsid -w "$0" "$@" 2> >(while IFS= read -r l; do
  printf "%s %s\n" "$EPOCHREALTIME" "$l"; done >"$OOS_DIR/r$RANK.a$a.err")
rc=$?
wait $!
echo "rank $RANK attempt $a exit $rc" >>"$OOS_DIR/codes"
exit $rc'
export OOS_DIR=$tmp DDPRUN_COLL_TEST_EXTRA=1@5
if [ "$via" = nodes ]; then
  rdzv=${5:?usage: out_of_step.sh DDPRUN TRAIN WORLD nodes DDPRUN-RDZV}
  timeout -k 2 120 "$rdzv" --host 127.0.0.1 --port 0 --nnodes 2 \
    --rdzv-id oos --max-restarts 1 --heartbeat-timeout 2 \
    --last-call-timeout 1 >"$tmp/srv.out" 2>"$tmp/srv.err" &
  srv=$!
  pids="$pids $srv"
  port=
  for _ in $(seq 100); do
    port=$(sed -n 's/.* listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/srv.err")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$tmp/srv.err" >&2; fail "ddprun-rdzv did not say its port"; }
  for n in 0 1; do
    timeout -k 2 120 "$ddprun" --nnodes 2 --nproc-per-node $((world / 2)) \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id oos \
      --rdzv-conf is_host=0,join_timeout=30 --max-restarts 1 \
      --stop-grace 5 --log-level warn bash -c "$wrapper" "$train" $small \
      >"$tmp/n$n.out" 2>"$tmp/n$n.err" &
    eval "a$n=\$!"
    pids="$pids $!"
  done
  for n in 0 1; do
    eval "p=\$a$n"
    rc=0
    wait "$p" || rc=$?
    [ "$rc" -eq 0 ] || { show "n$n"; cat "$tmp"/codes >&2; fail "node $n's ddprun exited $rc"; }
  done
  rc=0
  wait "$srv" || rc=$?
  [ "$rc" -eq 0 ] || { show srv; fail "ddprun-rdzv exited $rc"; }
  cat "$tmp/n0.out" "$tmp/n1.out" >"$tmp/job.out"
  cat "$tmp/n0.err" "$tmp/n1.err" >"$tmp/job.err"
  grep -q '"event":"restart"' "$tmp/srv.err" "$tmp"/*.out 2>/dev/null ||
    grep -q "restarting the workers" "$tmp/job.err" ||
    { show job; fail "the group was not restarted"; }
else
  run 120 job "$ddprun" --standalone \
    --nproc-per-node "$world" --max-restarts 1 --stop-grace 5 \
    --log-level warn bash -c "$wrapper" "$train" $small
  [ "$rc" -eq 0 ] || { show job; cat "$tmp"/codes >&2; fail "ddprun exited $rc"; }
fi
# The ranks' stderr bypasses run's own check.
if grep -l "runtime error:\|Sanitizer" "$tmp"/r*.err >&2; then
  cat "$tmp"/r*.err >&2
  fail "a sanitizer report"
fi

hook=$(grep "train: rank 1: test hook: an extra all-reduce at the start of step 5 (DDPRUN_COLL_TEST_EXTRA)" \
  "$tmp/r1.a0.err" | head -n 1)
[ -n "$hook" ] || { show job; fail "rank 1 did not announce the extra all-reduce"; }
t0=${hook%% *}

for r in $(seq 0 $((world - 1))); do
  grep -qx "rank $r attempt 0 exit 4" "$tmp/codes" ||
    { cat "$tmp/codes" >&2; fail "rank $r's first attempt did not exit 4"; }
  grep -qx "rank $r attempt 1 exit 0" "$tmp/codes" ||
    { cat "$tmp/codes" >&2; fail "rank $r's second attempt did not exit 0"; }
  grep -q "test hook" "$tmp/r$r.a1.err" &&
    fail "the hook acted on the second attempt (rank $r)"
  line=$(grep " train: rank $r: .* failed: " "$tmp/r$r.a0.err" | head -n 1)
  [ -n "$line" ] || { cat "$tmp/r$r.a0.err" >&2; fail "rank $r printed no failure"; }
  msg=${line#* }
  # Both collectives of the link, each with its rank, kind, number and
  # size; one is the extra 4 B one, the other the gradients'.
  re='out of step: rank [0-9]+ is in allreduce #([0-9]+) of ([0-9.]+ K?i?B), rank [0-9]+ in allreduce #([0-9]+) of ([0-9.]+ K?i?B)'
  [[ $msg =~ $re ]] || fail "rank $r does not name both collectives: $msg"
  [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[3]}" ] ||
    fail "rank $r: the sequence numbers differ: $msg"
  case "${BASH_REMATCH[2]}/${BASH_REMATCH[4]}" in
    "4 B/"*KiB | *"KiB/4 B") ;;
    *) fail "rank $r: not the 4 B all-reduce against the gradients': $msg" ;;
  esac
  case $msg in
    *"rank 1 is in"* | *"rank 1 in"*) ;;
    *) fail "rank $r does not name rank 1: $msg" ;;
  esac
  case $msg in
    *"within"*) fail "rank $r timed out instead: $msg" ;;
    *"(exit 4)") ;;
    *) fail "rank $r does not say exit 4: $msg" ;;
  esac
  dt_ms=$(awk -v a="$t0" -v b="${line%% *}" 'BEGIN { printf "%.2f", (b - a) * 1000 }')
  awk -v d="$dt_ms" 'BEGIN { exit !(d < 15000) }' ||
    fail "rank $r named the mismatch after ${dt_ms} ms: $msg"
  echo "rank $r: named it ${dt_ms} ms after rank 1's step start: $msg"
done

steps=$(final job steps)
[ "$steps" = 20 ] || { show job; fail "the second attempt did not complete (final steps=$steps)"; }
echo "PASS: $world ranks over $via: out of step named at once, restarted, completed"
