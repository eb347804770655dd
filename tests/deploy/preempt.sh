#!/usr/bin/env bash
# Preemption without a scheduler: 2 ranks of train under ddprun.
#
#   ddprun    SIGUSR1 to ddprun mid-run: it forwards the signal, every rank
#             stops after the same step with one checkpoint, ddprun exits
#             75; a second run resumes from it and ends with the weights
#             of a run that never stopped.
#   one-rank  SIGUSR1 to rank 1 alone: rank 0 learns it through the
#             per-step agreement, and the result is the same.
#   no-ckpt   without --ckpt-dir the ranks still stop together with 75,
#             and say that no checkpoint was written.
#
# Usage: preempt.sh TRAIN DDPRUN
set -u
name=deploy_preempt
train=${1:?usage: preempt.sh TRAIN DDPRUN} ddprun=${2:?}
. "$(dirname "$0")/lib.sh"

# About 1 ms a step here (10 under the sanitizers): SIGUSR1 arrives at
# step 20 or so, long before the end.
steps=800
args=(--data synthetic --layers 2 --width 256 --input-dim 32 --classes 16
      --batch 32 --steps "$steps" --log-every 20)
# A restart budget, so that a restart after 75 would be seen.
launch=("$ddprun" --standalone --nproc-per-node 2 --max-restarts 2
        --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1)
export OMP_NUM_THREADS=1

run 120 ref "${launch[@]}" "$train" "${args[@]}"
[ "$rc" -eq 0 ] || die ref "the uninterrupted run exited $rc"
want=$(crc_of "$tmp/ref.out")
[ -n "$want" ] || die ref "no final line"

# preempt TAG TARGET [TRAIN ARGS...]: starts the job, sends SIGUSR1 once
# rank 0 has logged step 20 (to ddprun, or to rank 1 with TARGET=rank1),
# and expects exit 75 from ddprun.
preempt() {
  local tag=$1 target=$2
  shift 2
  start 120 "$tag" "${launch[@]}" "$train" "${args[@]}" "$@"
  local job=$bg
  wait_for 60 "$tmp/$tag.out" '^\[rank0\]:step 20/' ||
    die "$tag" "rank 0 never logged step 20"
  local pid=$job
  if [ "$target" = rank1 ]; then
    pid=$(sed -n 's/^ddprun: \[rank1\] .*, pid \([0-9]*\),.*/\1/p' \
          "$tmp/$tag.err" | head -n 1)
    [ -n "$pid" ] || die "$tag" "ddprun did not print rank 1's pid"
  fi
  # timeout runs ddprun as its child: signal ddprun itself.
  [ "$target" = rank1 ] || pid=$(pgrep -P "$job" | head -n 1)
  kill -USR1 "$pid" || die "$tag" "kill -USR1 $pid failed"
  finish "$job"
  [ "$rc" -eq 75 ] || die "$tag" "ddprun exited $rc after SIGUSR1, not 75"
  grep -q "preempted (SIGUSR1), not restarted" "$tmp/$tag.err" ||
    die "$tag" "the rendezvous did not report the preemption"
  grep -q "^ddprun: job preempted (exit code 75)" "$tmp/$tag.err" ||
    die "$tag" "ddprun did not say the job was preempted"
  grep -q "restart 1 of" "$tmp/$tag.err" &&
    die "$tag" "a preempted job was restarted"
  return 0
}

# resume_check TAG DIR: one checkpoint before the end in DIR, then a run
# that resumes from it to the uninterrupted weights.
resume_check() {
  local tag=$1 dir=$2
  local files
  files=$(ls "$dir")
  [ "$(echo "$files" | wc -l)" -eq 1 ] || die "$tag" "checkpoints: $files"
  local step=$((10#$(echo "$files" | sed 's/ckpt-\([0-9]*\)\.bin/\1/')))
  [ "$step" -gt 20 ] && [ "$step" -lt "$steps" ] ||
    die "$tag" "checkpoint at step $step, not within the run"
  cat "$tmp/$tag.out" "$tmp/$tag.err" |
    grep -q "^\[rank0\]:train: SIGUSR1 on [12] rank(s): stopping after step $step with its checkpoint" ||
    die "$tag" "rank 0 did not report stopping at step $step"
  run 120 "$tag-resume" "${launch[@]}" "$train" "${args[@]}" --ckpt-dir "$dir"
  [ "$rc" -eq 0 ] || die "$tag-resume" "the resumed run exited $rc"
  cat "$tmp/$tag-resume.out" "$tmp/$tag-resume.err" |
    grep -q "resuming at step $step " ||
    die "$tag-resume" "did not resume at step $step"
  local got
  got=$(crc_of "$tmp/$tag-resume.out")
  [ "$got" = "$want" ] ||
    die "$tag-resume" "weights $got after preemption, $want without"
  echo "$tag: stopped after step $step, resumed to weights_crc32=$got (same as uninterrupted)"
}

mkdir -p "$tmp/ck1" "$tmp/ck2"
preempt ddprun ddprun --ckpt-dir "$tmp/ck1"
resume_check ddprun "$tmp/ck1"

preempt one-rank rank1 --ckpt-dir "$tmp/ck2"
cat "$tmp/one-rank.out" "$tmp/one-rank.err" | grep -q "SIGUSR1 on 1 rank(s)" ||
  die one-rank "rank 0 should have counted one signalled rank"
resume_check one-rank "$tmp/ck2"

preempt no-ckpt ddprun
cat "$tmp/no-ckpt.out" "$tmp/no-ckpt.err" |
  grep -q "without a checkpoint (no --ckpt-dir); exit 75" ||
  die no-ckpt "no word about the missing checkpoint"
echo "no-ckpt: stopped with 75 and no checkpoint"
echo "PASS: $name"
