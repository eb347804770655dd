#!/usr/bin/env bash
# Host-shared weights (--host-weights, worker/reducer/host_weights.h), on CPUs the
# ranks fill (taskset to one CPU):
#  - auto shares, and says so; the weights are bit for bit those of
#    --host-weights private: 2 ranks with SGD, 2 with momentum and weight
#    decay, 3 ranks (the ring's summation order) with AdamW and
#    --grad-accum 2, several buckets rebuilt after the first step;
#  - a rank killed after a checkpoint: the job restarts from it and ends
#    with the uninterrupted run's weights;
#  - a rank in an all-reduce the others never issue
#    (DDPRUN_COLL_TEST_EXTRA): named at once, exit 4, not a timeout;
#  - refused with exit 2 and one line where it cannot work: with
#    --grad-compress, over TCP, a bad value;
#  - /dev/shm too small for the segment (a 12 MiB tmpfs in a private mount
#    namespace, where the rings still fit): auto warns once and goes on
#    with a copy each, the same weights; shared exits 2 naming it;
#  - nothing left in /dev/shm.
# Usage: host_weights.sh DDPRUN TRAIN
set -u
name=host_weights
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: host_weights.sh DDPRUN TRAIN}
train=${2:?}
command -v taskset >/dev/null 2>&1 || skip "no taskset"

model="--layers 3 --width 256 --input-dim 64 --classes 8 --samples 2048
       --eval-samples 64 --batch 32 --steps 12 --bucket-cap-mb 0.1
       --first-bucket-mb 0.05"
shm_before=$(ls /dev/shm 2>/dev/null | grep -c '^ddprun-.*-weights$')
job() { # TAG NPROC ENV... -- TRAIN ARGS...
  local tag=$1 n=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  run 90 "$tag" env OMP_NUM_THREADS=1 "${envs[@]}" taskset -c 0 "$ddprun" \
    --standalone --nproc-per-node "$n" --log-level warn "$train" $model "$@"
}
ok() { [ "$rc" -eq 0 ] || { show "$1"; fail "$1: exit $rc"; }; }
said() { grep -q -e "$2" "$tmp/$1.out" "$tmp/$1.err"; }
same() { # TAG_A TAG_B WHAT
  local a b
  a=$(final "$1" weights_crc32)
  b=$(final "$2" weights_crc32)
  [ -n "$a" ] && [ "$a" = "$b" ] ||
    fail "$3: weights $a (shared) against $b (private)"
  echo "$3: $a both ways"
}

job auto 2 -- ; ok auto
said auto "one shared copy of the weights for the 2 ranks of this host" ||
  { show auto; fail "auto on one CPU: the weights were not shared, or it was not said"; }
job priv 2 -- --host-weights private; ok priv
! said priv "shared copy" || { show priv; fail "private: shared anyway"; }
same auto priv "2 ranks, SGD"

mom="--momentum 0.9 --weight-decay 0.01"
job mom 2 -- $mom --host-weights shared; ok mom
job mom_priv 2 -- $mom --host-weights private; ok mom_priv
same mom mom_priv "2 ranks, SGD with momentum and weight decay"

adam="--optimizer adamw --weight-decay 0.1 --grad-accum 2 --batch 16"
job w3 3 -- $adam --host-weights shared; ok w3
said w3 "for the 3 ranks of this host" || { show w3; fail "3 ranks: not shared"; }
job w3_priv 3 -- $adam --host-weights private; ok w3_priv
same w3 w3_priv "3 ranks, AdamW, --grad-accum 2"

# A rank killed after the checkpoint of step 6: the restart resumes there.
ck="--optimizer adamw --ckpt-every 3 --steps 10"
job whole 2 -- $ck --ckpt-dir "$tmp/whole.ckpt" --host-weights shared; ok whole
run 90 killed env OMP_NUM_THREADS=1 DDPRUN_CKPT_TEST_KILL_AT=6:1 \
  taskset -c 0 "$ddprun" --standalone --nproc-per-node 2 --max-restarts 1 \
  --log-level warn "$train" $model $ck --ckpt-dir "$tmp/kill.ckpt" \
  --host-weights shared
ok killed
said killed "killing this worker after step 6" ||
  { show killed; fail "the kill hook did not fire"; }
said killed "resum" || { show killed; fail "the restart did not resume"; }
a=$(final whole weights_crc32)
b=$(final killed weights_crc32)
[ -n "$a" ] && [ "$a" = "$b" ] ||
  { show killed; fail "killed and restarted: weights $b, uninterrupted $a"; }
echo "killed after step 6, resumed: $b, the uninterrupted run's"

# Out of step: rank 1 issues an all-reduce the others never do. Rank 0,
# waiting in the shared-weights step, names it at once instead of at the
# 30 s timeout; the job fails with exit 4.
t0=$(date +%s%N)
job oos 2 DDPRUN_COLL_TEST_EXTRA=1@5 -- --comm-timeout 30 --log-every 5
t1=$(date +%s%N)
[ "$rc" -eq 4 ] || { show oos; fail "out of step: ddprun exited $rc, not 4"; }
said oos "rank 0: gradient sum (shared weights) failed: out of step: rank 1 is in allreduce #[0-9]* (4 B), which rank 0 never issued" ||
  { show oos; fail "out of step: rank 0 did not name rank 1's extra all-reduce"; }
[ $(( (t1 - t0) / 1000000 )) -lt 20000 ] ||
  { show oos; fail "out of step: $(( (t1 - t0) / 1000000 )) ms, the timeout's doing"; }
echo "out of step: named in $(( (t1 - t0) / 1000000 )) ms, exit 4"

# Refusals.
job cmp 2 -- --host-weights shared --grad-compress fp16
[ "$rc" -eq 2 ] && said cmp "host-weights shared: --grad-compress or --loss-scale is set" ||
  { show cmp; fail "shared with --grad-compress: exit $rc, or no reason"; }
job tcp 2 DR_PG_FORCE_TCP=1 -- --host-weights shared
[ "$rc" -eq 2 ] && said tcp "host-weights shared: a ring link is TCP" ||
  { show tcp; fail "shared over TCP: exit $rc, or no reason"; }
run 30 bad "$train" --host-weights both --steps 1
[ "$rc" -eq 2 ] && grep -q "host-weights 'both': expected auto, shared or private" "$tmp/bad.err" ||
  { show bad; fail "--host-weights both: exit $rc, or no line naming the choices"; }
echo "refused: with compression, over TCP, a bad value"

# /dev/shm too small for the segment, large enough for the rings.
big="--layers 2 --width 1024 --input-dim 64 --classes 8 --samples 1024
     --eval-samples 64 --batch 32 --steps 4"
small() { # TAG HOST_WEIGHTS
  run 90 "$1" env OMP_NUM_THREADS=1 taskset -c 0 unshare --mount \
    --propagation private sh -c '
    mount -t tmpfs -o size=12m tmpfs /dev/shm || exit 99
    exec "$0" --standalone --nproc-per-node 2 --log-level warn "$@"' \
    "$ddprun" "$train" $big --host-weights "$2"
}
if command -v unshare >/dev/null 2>&1 &&
   unshare --mount --propagation private \
     sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>/dev/null; then
  small tiny auto; ok tiny
  n=$(grep -c "going on without the shared weights .*No space left on device; each rank keeps its own copy" "$tmp/tiny.err")
  [ "$n" -eq 1 ] || { show tiny; fail "auto on a small /dev/shm: $n warnings, not 1"; }
  small tiny_priv private; ok tiny_priv
  same tiny tiny_priv "a small /dev/shm, auto"
  small tiny_shared shared
  [ "$rc" -eq 2 ] && said tiny_shared "cannot set up the shared weights .*larger /dev/shm" ||
    { show tiny_shared; fail "shared on a small /dev/shm: exit $rc, or no reason"; }
  echo "a small /dev/shm: auto warns once and keeps a copy each; shared exits 2"
else
  echo "no private mount namespace here: the small /dev/shm case not run"
fi

shm_after=$(ls /dev/shm 2>/dev/null | grep -c '^ddprun-.*-weights$')
[ "$shm_after" -le "$shm_before" ] ||
  fail "segments left in /dev/shm: $(ls /dev/shm | grep -- '-weights$')"
no_leftovers
echo "PASS: $name"
