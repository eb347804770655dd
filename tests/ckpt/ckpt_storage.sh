#!/usr/bin/env bash
# A checkpoint disk that refuses, under ddprun with a restart budget: the
# job stops at once with exit code 6 and rank 0 named as the root cause.
#
#   full      --ckpt-dir on a tmpfs that holds two checkpoints: the third
#             write fails with ENOSPC ("No space left on device").
#   readonly  the tmpfs holds the checkpoint of step 5 and is remounted
#             read-only: the write of step 10 fails with EROFS
#             ("Read-only file system").
#   unreadable  the newest of two checkpoints cannot be read (mode 0000,
#             the job run as nobody): the start stops with exit 6 naming
#             it, rather than fall back to the older one; rank 1 says
#             why it stops; once readable the job resumes from it.
#
# full and readonly, with --max-restarts 2: ddprun exits 6 and the group
# is never restarted (one generation, restart count 0); rank 0 prints one
# line that names the file, the reason and what to do, and exits 6; rank 1
# says that it stops because rank 0 could not write its checkpoint and
# exits 8 (never 6); the failure summary names rank 0 as the root cause
# with the file and the reason; no temporary file is left, the previous
# checkpoint still verifies (both CRCs; read-only: byte for byte as it
# was); and once the disk has room (or is writable) again the same job
# resumes from it and ends with the weights of a run that never failed.
#
# The tmpfs lives in a private mount namespace (unshare -m), so nothing
# outlives the test; without the privileges for that (or, unreadable, to
# run as nobody) the test is skipped.
#
# Usage: ckpt_storage.sh full|readonly|unreadable TRAIN DDPRUN CKPT_INSPECT
set -u
mode=${1:?usage: ckpt_storage.sh full|readonly|unreadable TRAIN DDPRUN CKPT_INSPECT}
train=${2:?} ddprun=${3:?} inspect=${4:?}
name=ckpt_storage_$mode

command -v timeout >/dev/null 2>&1 || { echo "SKIP: $name: no timeout"; exit 77; }
if [ "$mode" != unreadable ] && [ -z "${DR_CKPT_STORAGE_NS:-}" ]; then
  command -v unshare >/dev/null 2>&1 ||
    { echo "SKIP: $name: no unshare"; exit 77; }
  unshare -m --propagation private true 2>/dev/null ||
    { echo "SKIP: $name: unshare -m is not permitted here"; exit 77; }
  DR_CKPT_STORAGE_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi

# shellcheck source=../lib/steps.sh
. "$(dirname "$0")/../lib/steps.sh"

disk=$tmp/disk
extra_cleanup() {
  mountpoint -q "$disk" 2>/dev/null && umount "$disk"
}
mkdir -p "$disk"

ckpt() { printf '%s/ckpt-%010d.bin' "$1" "$2"; }
crc() {
  sed -n 's/^\[rank0\]:final .*weights_crc32=\(0x[0-9a-f]*\).*$/\1/p' \
    "$tmp/$1.out" | tail -n 1
}

# 512 samples, batch 16 on each of 2 ranks: 16 steps per epoch, 20 steps.
common=(--layers 2 --width 32 --input-dim 16 --classes 4 --samples 512
        --eval-samples 128 --steps 20 --warmup 5 --lr 0.01 --seed 77
        --log-every 1 --batch 16 --optimizer adamw)
job=(env OMP_NUM_THREADS=1 "$ddprun" --standalone --nproc-per-node 2)

# The reference: the same job without checkpoints.
run 60 ref "${job[@]}" "$train" "${common[@]}"
[ "$rc" -eq 0 ] && [ -n "$(crc ref)" ] || die ref "the reference run exited $rc"

if [ "$mode" = unreadable ]; then
  [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null 2>&1 ||
    skip "needs root and setpriv to run the job as nobody"
  chmod 755 "$tmp"
  d=$tmp/ckpt
  run 60 first env DDPRUN_CKPT_TEST_KILL_AT=12 "${job[@]}" "$train" \
    "${common[@]}" --ckpt-dir "$d" --ckpt-every 5
  "$inspect" "$(ckpt "$d" 10)" >/dev/null || fail "no checkpoint of step 10"
  chmod 0000 "$(ckpt "$d" 10)"
  chmod 0644 "$(ckpt "$d" 5)"
  chmod 0777 "$d"
  as_nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  "${as_nobody[@]}" cat "$(ckpt "$d" 10)" >/dev/null 2>&1 &&
    skip "nobody can read a file of mode 0000 here"
  run 60 job "${as_nobody[@]}" "${job[@]}" --max-restarts 2 "$train" \
    "${common[@]}" --ckpt-dir "$d" --ckpt-every 5
  cat "$tmp/job.out" "$tmp/job.err" >"$tmp/job.all"
  [ "$rc" -eq 6 ] || die job "ddprun exited $rc, not 6"
  want="^\[rank0\]:train: rank 0: cannot read the checkpoint $(ckpt "$d" 10): open() of $(ckpt "$d" 10) failed (Permission denied); give this user permission to read and write in $d, or move the file away to resume from an older one (exit 6: checkpoint storage failure, not restarted)$"
  grep -q "$want" "$tmp/job.all" ||
    die job "rank 0 did not name the unreadable checkpoint"
  grep -q "resuming at step" "$tmp/job.all" &&
    die job "the start fell back to an older checkpoint"
  grep -q "^\[rank1\]:train: rank 1: rank 0 could not resume from its checkpoint; stopping (exit 8: another rank failed)$" \
    "$tmp/job.all" || die job "rank 1 did not say that it stops because of rank 0"
  grep -q "restarting the workers" "$tmp/job.all" && die job "restarted"
  grep -A3 "^ddprun: root cause" "$tmp/job.err" | grep -q "rank 0 .* exited with code 6$" ||
    die job "the summary does not name rank 0 as the root cause"
  echo "unreadable: ddprun exit 6, not restarted, no fall-back to step 5"
  chmod 0644 "$(ckpt "$d" 10)"
  run 60 again "${as_nobody[@]}" "${job[@]}" "$train" "${common[@]}" \
    --ckpt-dir "$d" --ckpt-every 5
  [ "$rc" -eq 0 ] || die again "the job run again exited $rc"
  grep -q "resuming at step 10 of 20" "$tmp/again.err" ||
    die again "the job run again did not resume at step 10"
  [ "$(crc again)" = "$(crc ref)" ] ||
    fail "resumed from step 10: weights $(crc again), uninterrupted $(crc ref)"
  echo "unreadable: readable again, resumed at step 10: weights $(crc again)"
  echo "PASS: $name"
  exit 0
fi

# The size of one checkpoint of this model, in pages of the tmpfs.
run 30 probe env OMP_NUM_THREADS=1 "$train" "${common[@]}" --batch 32 \
  --steps 5 --ckpt-dir "$tmp/probe" --ckpt-every 5
[ "$rc" -eq 0 ] || die probe "the probe run exited $rc"
bytes=$(stat -c %s "$(ckpt "$tmp/probe" 5)")
page=$(getconf PAGESIZE)
pages=$(((bytes + page - 1) / page))

d=$disk/ckpt
case $mode in
full)
  # Room for two checkpoints and half of a third.
  mount -t tmpfs -o "size=$(((2 * pages + pages / 2) * page))" tmpfs "$disk" ||
    skip "cannot mount a tmpfs"
  fail_step=15 prev=10 reason="No space left on device"
  ;;
readonly)
  mount -t tmpfs -o size=4m tmpfs "$disk" || skip "cannot mount a tmpfs"
  run 60 first env DDPRUN_CKPT_TEST_KILL_AT=7 "${job[@]}" "$train" \
    "${common[@]}" --ckpt-dir "$d" --ckpt-every 5
  [ "$rc" -ne 0 ] || die first "the kill hook did not fire"
  "$inspect" "$(ckpt "$d" 5)" >/dev/null || fail "no checkpoint of step 5"
  cp "$(ckpt "$d" 5)" "$tmp/prev.copy"
  mount -o remount,ro "$disk" || skip "cannot remount the tmpfs read-only"
  fail_step=10 prev=5 reason="Read-only file system"
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac

run 90 job "${job[@]}" --max-restarts 2 --log-dir "$tmp/logs" \
  --rdzv-id storage "$train" "${common[@]}" --ckpt-dir "$d" --ckpt-every 5
all=$tmp/job.all
cat "$tmp/job.out" "$tmp/job.err" >"$all"
events=$tmp/logs/storage/events.jsonl
[ "$rc" -eq 6 ] || die job "ddprun exited $rc, not 6"

# Never restarted: one assignment, restart count 0, no restart line.
[ "$(grep -c '"event":"assign"' "$events")" -eq 1 ] &&
  grep -q '"event":"assign".*"restart_count":0' "$events" ||
  die job "the group was restarted: $(grep '"event":"assign"' "$events")"
grep -q "restarting the workers" "$all" && die job "ddprun restarted the workers"

# Rank 0: one line with the file, the reason and what to do; exit 6.
tmpname="$(ckpt "$d" "$fail_step").tmp."
line=$(grep "^\[rank0\]:train: rank 0: cannot write the checkpoint of step $fail_step: " "$all")
[ "$(printf '%s\n' "$line" | grep -c .)" -eq 1 ] ||
  die job "not one line from rank 0 about the checkpoint of step $fail_step"
case $line in
  *"$tmpname"*"($reason); the previous checkpoint ($(ckpt "$d" $prev)) is kept; "*" or give another --ckpt-dir, then run the job again (exit 6: checkpoint storage failure, not restarted)") ;;
  *) die job "rank 0's line lacks the file, the reason or what to do: $line" ;;
esac
grep -q '"event":"exit","gen":1,"rank":0,.*"exit_code":6,"signal":0' "$events" ||
  die job "rank 0 did not exit 6: $(grep '"event":"exit"' "$events")"

# Rank 1: stopped because of rank 0, exit 8, never 6.
grep -q "^\[rank1\]:train: rank 1: rank 0 could not write its checkpoint (of step $fail_step); stopping (exit 8: another rank failed)$" "$all" ||
  die job "rank 1 did not say that it stops because of rank 0"
grep -q '"event":"exit","gen":1,"rank":1,.*"exit_code":8,"signal":0' "$events" ||
  die job "rank 1 did not exit 8: $(grep '"event":"exit"' "$events")"
grep -q "rank 1.*exit 6" "$all" && die job "rank 1 claims exit 6"

# The summary: rank 0 is the root cause, with the file and the reason.
summary=$(sed -n '/^ddprun: job failed with exit code 6 (checkpoint storage failure)$/,$p' \
  "$tmp/job.err")
[ -n "$summary" ] || die job "no failure summary for exit code 6"
root=$(printf '%s\n' "$summary" | sed -n '/^ddprun: root cause/,/^ddprun: [a-z]/p')
printf '%s\n' "$root" | grep -q "  rank 0  local rank 0  pid [0-9]*  exited with code 6$" ||
  die job "the summary does not name rank 0 as the root cause: $summary"
printf '%s\n' "$root" | grep -F "$tmpname" | grep -qF "($reason)" ||
  die job "the summary's root cause lacks the file and '$reason': $summary"
# Its first line is the failing one, before rank 0's start-up lines.
printf '%s\n' "$root" | grep -m 1 '^ddprun:     | ' | grep -qF "($reason)" ||
  die job "the root cause does not open with the failing line: $root"

# The disk as it was: the previous checkpoint intact, nothing half-written.
ls "$d"/*.tmp.* >/dev/null 2>&1 && fail "a temporary file is left: $(ls "$d")"
[ -e "$(ckpt "$d" $fail_step)" ] && fail "a checkpoint of step $fail_step exists"
"$inspect" "$(ckpt "$d" $prev)" >"$tmp/prev.inspect" ||
  fail "the previous checkpoint no longer verifies"
grep -q " step=$prev " "$tmp/prev.inspect" ||
  fail "the previous checkpoint is not of step $prev: $(cat "$tmp/prev.inspect")"
[ ! -e "$tmp/prev.copy" ] || cmp -s "$tmp/prev.copy" "$(ckpt "$d" $prev)" ||
  fail "the previous checkpoint changed"
echo "$mode: ddprun exit 6, not restarted; rank 0: ${line#*: cannot write }"

# Room again: the job resumes from the previous checkpoint and ends as the
# uninterrupted run did.
if [ "$mode" = full ]; then
  mount -o remount,size=4m "$disk" || fail "cannot grow the tmpfs"
else
  mount -o remount,rw "$disk" || fail "cannot remount the tmpfs read-write"
fi
run 60 again "${job[@]}" --max-restarts 2 "$train" "${common[@]}" \
  --ckpt-dir "$d" --ckpt-every 5
[ "$rc" -eq 0 ] || die again "the job run again exited $rc"
grep -q "resuming at step $prev of 20" "$tmp/again.err" ||
  die again "the job run again did not resume at step $prev"
[ "$(crc again)" = "$(crc ref)" ] ||
  fail "resumed from step $prev: weights $(crc again), uninterrupted $(crc ref)"
echo "$mode: run again, resumed at step $prev: weights $(crc again) as uninterrupted"
echo "PASS: $name"
