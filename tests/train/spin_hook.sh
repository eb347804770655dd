#!/usr/bin/env bash
# DDPRUN_SPIN_TEST=0@3 on a train of one rank: it logs steps 1 and 2,
# announces the spin at the start of step 3, then makes no progress (no
# step 3 line, still running) while it spins: runnable (state R) every
# time it is looked at over a second, never asleep, and its CPU time grows.
# How much CPU it gets is the machine's load, not the hook's doing. Without
# the variable, or on a later attempt (TORCHELASTIC_RESTART_COUNT=1), the
# same run completes.
#
# Usage: spin_hook.sh TRAIN
set -u
name=spin_hook
. "$(dirname "$0")/lib.sh"

train=${1:?usage: spin_hook.sh TRAIN}
small="--layers 1 --width 16 --input-dim 16 --classes 4 --samples 512
       --eval-samples 64 --batch 16 --steps 6 --log-every 1 --optimizer sgd"

# "STATE TICKS" of pid: its state letter and utime + stime in clock ticks
# (/proc/PID/stat fields 3, 14 and 15, counted after the command's closing
# parenthesis).
state_ticks() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  set -- ${stat##*) }
  echo "$1 $((${12} + ${13}))"
}

env -i PATH="$PATH" DDPRUN_SPIN_TEST=0@3 "$train" $small \
  >"$tmp/spin.out" 2>"$tmp/spin.err" &
pid=$!
pids="$pids $pid"
# The announcement, polled for (bounded: 20 s).
for _ in $(seq 200); do
  grep -q "test hook: spinning forever at the start of step 3 (DDPRUN_SPIN_TEST)" \
    "$tmp/spin.err" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
grep -q "train: rank 0: test hook: spinning forever at the start of step 3" \
  "$tmp/spin.err" || { show spin; fail "no spin announced"; }

hz=$(getconf CLK_TCK)
read -r _ c0 < <(state_ticks "$pid") || fail "train exited instead of spinning"
states=
for _ in $(seq 10); do
  sleep 0.1
  read -r st c1 < <(state_ticks "$pid") || fail "train exited instead of spinning"
  states=$states$st
done
[ "$states" = RRRRRRRRRR ] || fail "the spinning rank was not always runnable: $states"
[ "$c1" -gt "$c0" ] || fail "the spinning rank used no CPU time in 1 s"
grep -q "^step 2/6 " "$tmp/spin.out" || { show spin; fail "step 2 not logged"; }
grep -q "^step 3/6 " "$tmp/spin.out" && { show spin; fail "step 3 made progress"; }
kill -KILL "$pid"
wait "$pid" 2>/dev/null
pids=${pids% "$pid"}
echo "spinning: runnable at 10 looks over 1 s, $(((c1 - c0) * 1000 / hz)) ms of CPU, no step past 2"

run 30 later env -i PATH="$PATH" DDPRUN_SPIN_TEST=0@3 \
  TORCHELASTIC_RESTART_COUNT=1 "$train" $small
[ "$rc" -eq 0 ] || { show later; fail "a later attempt did not complete (exit $rc)"; }
grep -q "test hook" "$tmp/later.err" && fail "the hook acted on a later attempt"
echo "PASS: the spin hook spins without progress, on the first attempt only"
