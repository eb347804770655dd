#!/usr/bin/env bash
# The names of the workers' shared-memory segments (proto/os/shm_name.h), in
# a private PID and mount namespace with a /dev/shm of its own (skipped
# without the privileges for one), 2 ranks under ddprun:
#  - another local user who first creates the names that the rings and
#    the shared weights would get from run id, generation and pid (here
#    for every pid up to 1000) takes nothing from the job: shared memory
#    both ways and the shared weights (shared and auto), no fallback;
#  - names found taken (DDPRUN_SHM_TEST_TAKEN=3) are tried again with new
#    digits, one line per segment saying so, and nothing falls back; when
#    every name tried is taken (8), each link falls back to TCP with one
#    line and the job still ends well;
#  - a rank SIGKILLed right after it created a segment, before any other
#    rank knows its name (DDPRUN_SHM_TEST_KILL: the shared weights on rank
#    0, a ring on rank 0, on rank 1): the job restarts and ends well, or
#    without a restart budget fails;
#  - after every job /dev/shm holds nothing of it: the agent removes its
#    workers' prefix once they have exited.
# Usage: shm_names.sh DDPRUN TRAIN
set -u
name=shm_names

ddprun=${1:?usage: shm_names.sh DDPRUN TRAIN}
train=${2:?}

if [ "${SHM_NAMES_INNER:-}" != 1 ]; then
  command -v unshare >/dev/null 2>&1 || { echo "SKIP: no unshare(1)"; exit 77; }
  ns=(unshare --pid --fork --kill-child --mount-proc --propagation private)
  if ! "${ns[@]}" sh -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm' \
      2>/dev/null; then
    echo "SKIP: no private PID and mount namespace with a /dev/shm of its own"
    exit 77
  fi
  SHM_NAMES_INNER=1 exec "${ns[@]}" bash "$0" "$@"
fi
# PID 1 of the namespace: every process of the test ends with it, and so
# does this /dev/shm.
mount -t tmpfs -o size=64m tmpfs /dev/shm ||
  { echo "FAIL: $name: cannot mount a tmpfs on /dev/shm"; exit 1; }
. "$(dirname "$0")/lib.sh"

small="--layers 1 --width 16 --input-dim 8 --classes 4 --samples 256
       --eval-samples 0 --batch 8 --steps 4 --log-every 100"
job() { # TAG ENV... -- DDPRUN_FLAGS... -- TRAIN_FLAGS...
  local tag=$1
  shift
  local envs=() flags=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  # shellcheck disable=SC2086
  run 60 "$tag" env OMP_NUM_THREADS=1 "${envs[@]}" "$ddprun" --standalone \
    --nproc-per-node 2 --rdzv-id shmtest --log-level warn "${flags[@]}" \
    "$train" $small "$@"
}
ok() { [ "$rc" -eq 0 ] || { show "$1"; fail "$1: exit $rc"; }; }
said() { grep -q -e "$2" "$tmp/$1.out" "$tmp/$1.err"; }
count() { cat "$tmp/$1.out" "$tmp/$1.err" | grep -c -e "$2"; }
shared() { # TAG: both links on shared memory, the weights shared
  said "$1" "ring of 2: shm 0>1, shm 1>0" ||
    { show "$1"; fail "$1: the links are not both shared memory"; }
  said "$1" "one shared copy of the weights for the 2 ranks" ||
    { show "$1"; fail "$1: the weights were not shared"; }
  ! said "$1" "using TCP\|going on without" ||
    { show "$1"; fail "$1: something fell back"; }
}
in_shm() { find /dev/shm -mindepth 1 -printf '%f\n'; }
# Nothing in /dev/shm but what is named by the extended pattern $2.
clean() { # TAG [KEEP]
  local left
  left=$(in_shm | grep -Ev "${2:-^$}" | head -n 5)
  [ -z "$left" ] || { show "$1"; fail "$1: left in /dev/shm: $left"; }
}

# Another user's names, made before the job starts: those of a scheme of
# run id, generation (DDPRUN_GENERATION, 1 for the first round) and pid.
for g in 0 1 2; do
  for p in $(seq 1 1000); do
    : >"/dev/shm/ddprun-shmtest-g$g-i1-p$p-0to1"
    : >"/dev/shm/ddprun-shmtest-g$g-i1-p$p-1to0"
    : >"/dev/shm/ddprun-shmtest-g$g-w$p"
  done
done
squatted=$(in_shm | wc -l)
job predicted -- -- --host-weights shared; ok predicted; shared predicted
job predicted_auto -- -- --host-weights auto; ok predicted_auto
! said predicted_auto "using TCP\|going on without" ||
  { show predicted_auto; fail "auto: something fell back"; }
[ "$(in_shm | wc -l)" -eq "$squatted" ] ||
  fail "the other user's names changed: $(in_shm | wc -l), not $squatted"
clean predicted '^ddprun-shmtest-g[0-2]-'
find /dev/shm -mindepth 1 -delete
echo "another user's $squatted names for pids 1 to 1000: nothing taken from the job"

# Names found taken: tried again.
job taken DDPRUN_SHM_TEST_TAKEN=3 -- -- --host-weights shared
ok taken
shared taken
for r in 0 1; do
  [ "$(count taken "^\[rank$r\]:ddprun pg: rank $r: 3 shared-memory names for the link to rank $((1 - r)) were already taken in /dev/shm (by another user?); created /ddprun-[0-9]*-[0-9a-f]*-[0-9a-f]\{16\}-ring${r}to$((1 - r)) instead$")" -eq 1 ] ||
    { show taken; fail "rank $r: not one line saying its ring's names were taken"; }
done
[ "$(count taken "train: rank 0: 3 shared-memory names for the shared weights were already taken")" -eq 1 ] ||
  { show taken; fail "not one line saying the weights' names were taken"; }
clean taken
job all_taken DDPRUN_SHM_TEST_TAKEN=8 -- -- --host-weights auto
ok all_taken
for r in 0 1; do
  [ "$(count all_taken "^\[rank$r\]:ddprun pg: rank $r: shared memory to rank $((1 - r)) unavailable (shm_open /ddprun-.*: File exists, every name tried was taken); using TCP$")" -eq 1 ] ||
    { show all_taken; fail "rank $r: not one line saying its link fell back"; }
done
said all_taken "ring of 2: tcp 0>1, tcp 1>0" ||
  { show all_taken; fail "every name taken: the links are not TCP"; }
clean all_taken
echo "names taken: tried again (3 of them), or TCP with one line each (8)"

# A rank killed between creating a segment and anybody else knowing it.
for k in weights:0 ring:0 ring:1; do
  tag=kill_${k%:*}_${k#*:}
  job "$tag" "DDPRUN_SHM_TEST_KILL=$k" -- --max-restarts 1 -- \
    --host-weights shared
  ok "$tag"
  said "$tag" "ddprun shm: test hook: /ddprun-.*-${k%:*}[0-9to]* created; killing this process" ||
    { show "$tag"; fail "$tag: the hook did not fire"; }
  shared "$tag"
  clean "$tag"
done
# Without a restart: ddprun exits 137 (128 + SIGKILL), the root cause's,
# which `run` would take for its own timeout's.
# shellcheck disable=SC2086
scratch_run 60 kill_fails env OMP_NUM_THREADS=1 DDPRUN_SHM_TEST_KILL=weights:0 \
  "$ddprun" --standalone --nproc-per-node 2 --rdzv-id shmtest \
  --log-level warn "$train" $small --host-weights shared
said kill_fails "job failed with exit code 137" ||
  { show kill_fails; fail "kill_fails: exit $rc, not the killed rank's"; }
clean kill_fails
echo "a rank killed right after creating a segment: nothing left in /dev/shm"
no_leftovers
echo "PASS: $name"
