#!/usr/bin/env bash
# Who runs the CPU backend's collectives, and at what priority (pg.h's
# dr_pg_schedule_t), on CPUs the ranks fill (taskset to one CPU):
#  - shared memory: auto picks the inline schedule and says why; the
#    weights are bit for bit those of --comm-schedule thread and inline;
#  - TCP (DR_PG_FORCE_TCP): the communication thread asks for real-time
#    priority and the summary says it got it (as root) or, the CPUs being
#    full, why not (as an unprivileged user, where setpriv can switch to
#    one); the weights are
#    those of a run at normal priority (DR_PG_COMM_RT=0) and of one that
#    wakes per segment (DR_PG_TCP_LOWAT=1);
#  - --comm-schedule with another value: exit 2 naming the choices.
# Usage: comm_schedule.sh DDPRUN TRAIN
set -u
name=comm_schedule
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: comm_schedule.sh DDPRUN TRAIN}
train=${2:?}
command -v taskset >/dev/null 2>&1 || skip "no taskset"

model="--layers 3 --width 256 --input-dim 64 --classes 8 --samples 2048
       --eval-samples 64 --batch 32 --steps 12 --bucket-cap-mb 0.1
       --first-bucket-mb 0.05"
job() { # TAG ENV... -- TRAIN ARGS...
  local tag=$1
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  run 60 "$tag" env OMP_NUM_THREADS=1 "${envs[@]}" taskset -c 0 "$ddprun" \
    --standalone --nproc-per-node 2 --log-level warn "$train" $model "$@"
  [ "$rc" -eq 0 ] || { show "$tag"; fail "$tag: exit $rc"; }
}
said() { grep -q -e "$2" "$tmp/$1.out" "$tmp/$1.err"; }

job auto --
said auto "collectives on the waiting thread: 2 ranks x 1 compute thread + a communication thread each fill the 1 CPU allowed" ||
  { show auto; fail "auto on one CPU: the summary does not say the collectives run inline, and why"; }
job thread -- --comm-schedule thread
job inl -- --comm-schedule inline
crc=$(final auto weights_crc32)
[ -n "$crc" ] && [ "$(final thread weights_crc32)" = "$crc" ] &&
  [ "$(final inl weights_crc32)" = "$crc" ] ||
  fail "weights differ: auto $crc, thread $(final thread weights_crc32), inline $(final inl weights_crc32)"
echo "shm: inline, thread and auto give $crc"

job tcp DR_PG_FORCE_TCP=1 --
job tcp_normal DR_PG_FORCE_TCP=1 DR_PG_COMM_RT=0 --
job tcp_segment DR_PG_FORCE_TCP=1 DR_PG_TCP_LOWAT=1 --
if [ "$(id -u)" -eq 0 ]; then
  said tcp "the communication thread runs at real-time priority (SCHED_RR 1): 4 busy threads here on 1 CPU" ||
    { show tcp; fail "tcp as root: the communication thread did not say it runs at real-time priority"; }
fi
! said tcp_normal "real-time" ||
  { show tcp_normal; fail "DR_PG_COMM_RT=0 still asked for real-time priority"; }
tcrc=$(final tcp weights_crc32)
[ "$tcrc" = "$crc" ] && [ "$(final tcp_normal weights_crc32)" = "$crc" ] &&
  [ "$(final tcp_segment weights_crc32)" = "$crc" ] ||
  fail "tcp weights differ: $tcrc, normal priority $(final tcp_normal weights_crc32), per segment $(final tcp_segment weights_crc32), shm $crc"
echo "tcp: real-time, normal priority and per-segment wake-ups give $crc"

if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1; then
  chmod 755 "$tmp"
  job unpriv DR_PG_FORCE_TCP=1 setpriv --reuid=65534 --regid=65534 \
    --clear-groups --inh-caps=-all --bounding-set=-all --
  said unpriv "could not take real-time priority (Operation not permitted; it needs CAP_SYS_NICE or an RLIMIT_RTPRIO)" ||
    { show unpriv; fail "unprivileged: the summary does not say why there is no real-time priority"; }
  [ "$(final unpriv weights_crc32)" = "$crc" ] ||
    fail "unprivileged: weights $(final unpriv weights_crc32), not $crc"
  echo "unprivileged: says why, weights $crc"
fi

run 30 bad "$train" --comm-schedule fast --steps 1
[ "$rc" -eq 2 ] && grep -q "comm-schedule 'fast': expected auto, thread or inline" "$tmp/bad.err" ||
  { show bad; fail "--comm-schedule fast: exit $rc, or no line naming the choices"; }

no_leftovers
echo "PASS: $name"
