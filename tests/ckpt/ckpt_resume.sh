#!/usr/bin/env bash
# Checkpoints of train end to end.
#
#   single  one process: a run killed after step 12 (checkpoints every 5)
#           resumes from step 10, mid-epoch, and ends with the weights of a
#           run that never stopped (AdamW and SGD with momentum); a corrupt
#           or truncated newest checkpoint is reported and the previous one
#           used, with the same result; a resume with another --steps or
#           --width is refused (exit 2), and so is one with another --lr,
#           --warmup or --momentum (one line naming each, with both
#           values), unless --allow-schedule-change, with which the run
#           resumes and steps at the new learning rate; a setting the
#           checkpoint's optimizer does not use (--beta1 of SGD) may
#           change.
#   ranks   the same on 2 ranks under ddprun, rank 1 alone killed; then
#           with --max-restarts 1, where ddprun's group restart resumes.
#   kill    the writer SIGKILLed between its fsync and its rename: the
#           previous checkpoint stays valid, no new one appears, the
#           temporary file is removed at the next start, and the run still
#           ends with the uninterrupted weights.
#   world   --global-batch 32: 4 ranks killed after step 12 resume from
#           step 10 on 2 ranks and on one process, ending with the loss of
#           the uninterrupted 4-rank run (the same samples per step; only
#           the summation order differs); without --global-batch, or with
#           a global batch the world size does not divide, exit 2 and a
#           message that says what to do. An elastic job (DDPRUN_MIN_NNODES
#           below DDPRUN_MAX_NNODES) with --batch keeps the checkpoint's
#           global batch on one process (same loss), refuses one it cannot
#           split, and warns at a fresh start of the sizes it cannot reach.
#   entries what is named like a checkpoint but is not the newest one: a
#           directory and a FIFO named for step 15 (after checkpoints of 5
#           and 10) are reported once and passed over (no exit 1 that a
#           restart would meet again, no wait on the FIFO), the run resumes
#           at 10, does not write step 15's checkpoint over them (one line
#           says so) and ends with the uninterrupted weights; a copy of
#           step 5's file named ckpt-9999999999.bin is taken for what its
#           header says (step 5), reported, and step 10 is resumed.
#   extend  a run of 20 steps extended to 30: without a word refused
#           (exit 2, naming --extend-schedule); --extend-schedule hold runs
#           steps 21-30 at the final learning rate, stretch recomputes the
#           decay over 30 steps (step 21 at a higher rate, step 30 at the
#           final one), --allow-schedule-change alone stretches; each says
#           its effect in one line. An extended run killed after step 27
#           and resumed with the same flags ends with the weights of the
#           extended run that was never stopped (hold: its checkpoints keep
#           the 20-step schedule; stretch: the 30-step one). A shorter
#           --steps is still refused with --extend-schedule.
#   inflight a SIGKILL while a checkpoint is written in the background:
#           the writer thread holds the checkpoint of step 10 before its
#           rename while the steps go on (step 14 is logged meanwhile:
#           the write does not stall them), and the process is killed
#           there. No checkpoint of step 10 exists, the temporary file is
#           removed at the next start, which resumes at step 5 and ends
#           with the uninterrupted weights. The same on 2 ranks under
#           ddprun with rank 0 (the writer's process) killed: the group
#           restart resumes at step 5, to the same weights.
#   env     DDPRUN_CKPT_DIR instead of --ckpt-dir: a process killed after
#           step 12 wrote its checkpoints there and a run with the variable
#           resumes from them (bit-identical); a 2-rank job whose workers
#           have the variable writes there; --ckpt-dir given wins over it;
#           set but empty, it is no directory (--ckpt-every refused, exit
#           2).
#
# Usage: ckpt_resume.sh MODE TRAIN DDPRUN CKPT_INSPECT
set -u
mode=${1:?usage: ckpt_resume.sh single|ranks|kill|world|entries|extend|inflight|env TRAIN DDPRUN CKPT_INSPECT}
train=${2:?} ddprun=${3:?} inspect=${4:?}
name=ckpt_$mode

command -v timeout >/dev/null 2>&1 || { echo "SKIP: no timeout"; exit 77; }

# shellcheck source=../lib/steps.sh
. "$(dirname "$0")/../lib/steps.sh"

# The weights' CRC on the final line of rank 0 (or of a lone process).
crc() {
  local re='^\(\[rank0\]:\)\{0,1\}final .*weights_crc32=\(0x[0-9a-f]*\).*$'
  sed -n "s/$re/\\2/p" "$tmp/$1.out" | tail -n 1
}
# expect_ok TAG: exit 0 and a final CRC.
expect_ok() {
  [ "$rc" -eq 0 ] || die "$1" "$1 exited $rc"
  [ -n "$(crc "$1")" ] || die "$1" "$1 printed no final line"
}
ckpt() { printf '%s/ckpt-%010d.bin' "$1" "$2"; }
# The final loss of rank 0 (or of a lone process).
final_loss() {
  sed -n 's/^\(\[rank0\]:\)\{0,1\}final loss=\([0-9.e+-]*\) .*$/\2/p' \
    "$tmp/$1.out" | tail -n 1
}

# 512 samples in batches of 32 per step: 16 steps per epoch, so step 10 is
# mid-epoch and the resumed run crosses into epoch 1.
common="--layers 2 --width 32 --input-dim 16 --classes 4 --samples 512
        --eval-samples 128 --steps 20 --warmup 5 --lr 0.01 --seed 77
        --log-every 1"

# stop_and_resume TAG LAUNCH... -- ARGS...: reference run to step 20,
# killed run (after step 12), resume; the CRCs must agree.
stop_and_resume() {
  local tag=$1
  shift
  local launch=() args
  while [ "$1" != "--" ]; do
    launch+=("$1")
    shift
  done
  shift
  args=("$@")
  local d=$tmp/$tag.ckpt
  run 60 "$tag.plain" "${launch[@]}" "${args[@]}"
  expect_ok "$tag.plain"
  run 60 "$tag.ref" "${launch[@]}" "${args[@]}" \
    --ckpt-dir "$tmp/$tag.ref.ckpt" --ckpt-every 5
  expect_ok "$tag.ref"
  [ "$(crc "$tag.ref")" = "$(crc "$tag.plain")" ] ||
    fail "$tag: writing checkpoints changed the weights"
  for s in 10 15 20; do
    "$inspect" "$(ckpt "$tmp/$tag.ref.ckpt" $s)" >/dev/null ||
      fail "$tag: checkpoint $s missing or invalid"
  done
  [ -e "$(ckpt "$tmp/$tag.ref.ckpt" 5)" ] &&
    fail "$tag: --ckpt-keep 3 kept the checkpoint of step 5"

  run 60 "$tag.killed" env DDPRUN_CKPT_TEST_KILL_AT="${kill_at:-12}" \
    "${launch[@]}" "${args[@]}" --ckpt-dir "$d" --ckpt-every 5
  [ "$rc" -ne 0 ] || die "$tag.killed" "$tag: the kill hook did not fire"
  grep -q "killing this worker after step 12" "$tmp/$tag.killed.err" ||
    die "$tag.killed" "$tag: not killed after step 12"
  "$inspect" "$(ckpt "$d" 10)" >"$tmp/$tag.inspect" ||
    fail "$tag: the checkpoint of step 10 does not verify"
  grep -q " step=10 total_steps=20 epoch=0 position=10 steps_per_epoch=16 " \
    "$tmp/$tag.inspect" || fail "$tag: header: $(cat "$tmp/$tag.inspect")"
  [ -e "$(ckpt "$d" 15)" ] && fail "$tag: a checkpoint of step 15 exists"
  cp -r "$d" "$d.corrupt"
  cp -r "$d" "$d.short"

  run 60 "$tag.resumed" "${launch[@]}" "${args[@]}" --ckpt-dir "$d" \
    --ckpt-every 5
  expect_ok "$tag.resumed"
  grep -q "resuming at step 10 of 20 (epoch 0, position 10 of 16)" \
    "$tmp/$tag.resumed.err" || die "$tag.resumed" "$tag: no resume at step 10"
  grep -q "^\(\[rank0\]:\)\{0,1\}step 11/20 " "$tmp/$tag.resumed.out" ||
    die "$tag.resumed" "$tag: the first step after resuming is not 11"
  grep -q "^\(\[rank0\]:\)\{0,1\}step \([1-9]\|10\)/20 " \
    "$tmp/$tag.resumed.out" && die "$tag.resumed" "$tag: steps 1-10 ran again"
  [ "$(crc "$tag.resumed")" = "$(crc "$tag.ref")" ] ||
    fail "$tag: resumed weights $(crc "$tag.resumed") differ from the" \
      "uninterrupted $(crc "$tag.ref")"
  echo "$tag: uninterrupted and resumed at step 10: $(crc "$tag.ref")"

  # The newest checkpoint damaged: one flipped byte, then a truncation.
  local f
  f=$(ckpt "$d.corrupt" 10)
  printf '\x5a' | dd of="$f" bs=1 seek=1000 conv=notrunc status=none
  f=$(ckpt "$d.short" 10)
  truncate -s -7 "$f"
  for v in corrupt short; do
    run 60 "$tag.$v" "${launch[@]}" "${args[@]}" --ckpt-dir "$d.$v" \
      --ckpt-every 5
    expect_ok "$tag.$v"
    grep -q "skipping the checkpoint $(ckpt "$d.$v" 10)" "$tmp/$tag.$v.err" ||
      die "$tag.$v" "$tag: the $v newest checkpoint was not reported"
    grep -q "resuming at step 5 of 20" "$tmp/$tag.$v.err" ||
      die "$tag.$v" "$tag: did not fall back to step 5 ($v)"
    [ "$(crc "$tag.$v")" = "$(crc "$tag.ref")" ] ||
      fail "$tag: resumed from step 5 ($v newest): weights" \
        "$(crc "$tag.$v") differ from $(crc "$tag.ref")"
    "$inspect" "$(ckpt "$d.$v" 10)" >/dev/null ||
      fail "$tag: the damaged checkpoint of step 10 was not rewritten"
  done
  echo "$tag: a corrupt and a truncated newest checkpoint skipped"
}

case $mode in
single)
  for opt in "adamw" "sgd --momentum 0.9"; do
    # shellcheck disable=SC2086
    stop_and_resume "single-${opt%% *}" env \
      OMP_NUM_THREADS=1 "$train" -- $common --batch 32 --optimizer $opt
  done
  d=$tmp/single-adamw.ckpt
  # shellcheck disable=SC2086
  run 30 steps "$train" $common --batch 32 --optimizer adamw --steps 30 \
    --ckpt-dir "$d"
  [ "$rc" -eq 2 ] || die steps "a resume with another --steps exited $rc"
  grep -q -- "--steps (the learning-rate schedule's length) is 20 there" \
    "$tmp/steps.err" || die steps "no clear message for another --steps"
  # shellcheck disable=SC2086
  run 30 width "$train" $common --batch 32 --optimizer adamw --width 48 \
    --ckpt-dir "$d"
  [ "$rc" -eq 2 ] || die width "a resume with another --width exited $rc"
  grep -q -- "--width is 32 there and 48 here" "$tmp/width.err" ||
    die width "no clear message for another --width"
  # shellcheck disable=SC2086
  run 30 noreq "$train" $common --ckpt-every 5
  [ "$rc" -eq 2 ] || fail "--ckpt-every without --ckpt-dir exited $rc, not 2"

  # The schedule is the checkpoint's too: step 10 of a run at --lr 0.01.
  d=$tmp/lr.ckpt
  # shellcheck disable=SC2086
  run 60 lr_first env DDPRUN_CKPT_TEST_KILL_AT=12 "$train" $common \
    --batch 32 --optimizer adamw --ckpt-dir "$d" --ckpt-every 5
  "$inspect" "$(ckpt "$d" 10)" >"$tmp/lr.inspect" ||
    fail "no checkpoint of step 10 for the schedule checks"
  grep -q " warmup=5 lr=0.01 min_lr_frac=0.10000000000000001 " \
    "$tmp/lr.inspect" || fail "the schedule is not in the header: $(cat "$tmp/lr.inspect")"
  cp -r "$d" "$d.before"
  # shellcheck disable=SC2086
  run 30 lr_refused "$train" $common --batch 32 --optimizer adamw \
    --lr 0.02 --ckpt-dir "$d"
  [ "$rc" -eq 2 ] || die lr_refused "a resume with another --lr exited $rc"
  grep -q -- "does not fit this run: --lr is 0.01 there and 0.02 here;.*--allow-schedule-change" \
    "$tmp/lr_refused.err" || die lr_refused "no clear message for another --lr"
  grep -q "^step " "$tmp/lr_refused.out" && die lr_refused "steps ran"
  diff -r "$d" "$d.before" >/dev/null || fail "a refused resume changed $d"
  # The case of the report: both --lr and --warmup, in one line.
  # shellcheck disable=SC2086
  run 30 lr_warmup "$train" $common --batch 32 --optimizer adamw \
    --lr 0.1 --warmup 3 --ckpt-dir "$d"
  [ "$rc" -eq 2 ] || die lr_warmup "a resume with another --lr and --warmup exited $rc"
  [ "$(grep -c "does not fit" "$tmp/lr_warmup.err")" -eq 1 ] &&
    grep -q -- "--warmup is 5 there and 3 here, --lr is 0.01 there and 0.1 here;" \
      "$tmp/lr_warmup.err" ||
    die lr_warmup "not one line naming --warmup and --lr with both values"
  # shellcheck disable=SC2086
  run 60 lr_allowed "$train" $common --batch 32 --optimizer adamw \
    --lr 0.02 --ckpt-dir "$d" --allow-schedule-change
  expect_ok lr_allowed
  grep -q "resuming at step 10 of 20" "$tmp/lr_allowed.err" ||
    die lr_allowed "--allow-schedule-change did not resume at step 10"
  grep -q -- "has another schedule: --lr is 0.01 there and 0.02 here; going on with this run's from step 11 (--allow-schedule-change)" \
    "$tmp/lr_allowed.err" || die lr_allowed "the change was not reported"
  # Step 11 at twice the rate of the run resumed with the old one.
  lr_at_11() { sed -n 's/^step 11\/20 loss [0-9.]* lr \([0-9.e-]*\) .*/\1/p' "$1"; }
  old=$(lr_at_11 "$tmp/single-adamw.resumed.out")
  new=$(lr_at_11 "$tmp/lr_allowed.out")
  awk -v a="$old" -v b="$new" 'BEGIN { r = b / a; exit !(a > 0 && r > 1.99 && r < 2.01) }' ||
    die lr_allowed "step 11 ran at lr $new, not twice the old $old"
  # SGD: --momentum is its own; --beta1 is AdamW's and may change.
  d=$tmp/single-sgd.ckpt
  # shellcheck disable=SC2086
  run 30 momentum "$train" $common --batch 32 --optimizer sgd \
    --momentum 0.5 --ckpt-dir "$d"
  [ "$rc" -eq 2 ] || die momentum "a resume with another --momentum exited $rc"
  grep -q -- "--momentum is 0.9 there and 0.5 here" "$tmp/momentum.err" ||
    die momentum "no clear message for another --momentum"
  # shellcheck disable=SC2086
  run 30 beta1 "$train" $common --batch 32 --optimizer sgd --momentum 0.9 \
    --beta1 0.5 --ckpt-dir "$d"
  expect_ok beta1
  echo "single: another --lr, --warmup or --momentum refused (exit 2)," \
    "taken with --allow-schedule-change (step 11 at lr $new, was $old)"
  ;;
ranks)
  # shellcheck disable=SC2086
  kill_at=12:1 stop_and_resume ranks env OMP_NUM_THREADS=1 "$ddprun" \
    --standalone --nproc-per-node 2 "$train" -- $common --batch 16 \
    --optimizer adamw
  # The same kill with a restart budget: ddprun restarts the group, which
  # resumes at step 10 by itself (the hook fires on the first attempt only).
  # shellcheck disable=SC2086
  run 60 restart env DDPRUN_CKPT_TEST_KILL_AT=12:1 OMP_NUM_THREADS=1 \
    "$ddprun" --standalone --nproc-per-node 2 --max-restarts 1 "$train" \
    $common --batch 16 --optimizer adamw --ckpt-dir "$tmp/restart.ckpt" \
    --ckpt-every 5
  expect_ok restart
  cat "$tmp/restart.out" "$tmp/restart.err" >"$tmp/restart.all"
  grep -q "killing this worker after step 12" "$tmp/restart.all" ||
    die restart "rank 1 was not killed after step 12"
  grep -q "resuming at step 10 of 20" "$tmp/restart.all" ||
    die restart "the restarted group did not resume at step 10"
  [ "$(crc restart)" = "$(crc ranks.ref)" ] ||
    fail "after a group restart: weights $(crc restart) differ from" \
      "$(crc ranks.ref)"
  echo "ranks: a group restart resumed at step 10: $(crc restart)"
  left=$(pgrep -f -- "$tmp/" 2>/dev/null | tr '\n' ' ')
  [ -z "$left" ] || fail "processes left behind: $left"
  ;;
kill)
  read -ra args <<<"$common --batch 32 --optimizer adamw"
  d=$tmp/ckpt
  run 60 ref "$train" "${args[@]}"
  expect_ok ref
  run 60 first env DDPRUN_CKPT_TEST_KILL_AT=7 "$train" "${args[@]}" \
    --ckpt-dir "$d" --ckpt-every 5
  "$inspect" "$(ckpt "$d" 5)" >/dev/null || fail "no checkpoint of step 5"
  # Resumed at 5, the writer of step 10 stops before its rename and says
  # so on stderr (read through a FIFO: nothing polls); then it is killed.
  mkfifo "$tmp/err.fifo" || fail "mkfifo failed"
  DDPRUN_CKPT_TEST_DELAY_MS=60000 "$train" "${args[@]}" --ckpt-dir "$d" \
    --ckpt-every 5 >"$tmp/writer.out" 2>"$tmp/err.fifo" &
  writer=$!
  pids="$pids $writer"
  exec 3<"$tmp/err.fifo"
  hooked=
  while IFS= read -r -t 30 line <&3; do
    echo "$line" >>"$tmp/writer.err"
    case $line in
      *"test hook: $(ckpt "$d" 10).tmp."*" is written; waiting"*)
        hooked=1
        break
        ;;
    esac
  done
  [ -n "$hooked" ] || die writer "the writer never reached step 10's rename"
  temp=
  for t in "$(ckpt "$d" 10)".tmp.*; do
    [ -e "$t" ] && temp=${t##*/}
  done
  [ -n "$temp" ] || fail "no temporary file while the writer waits"
  kill -KILL "$writer"
  wait "$writer" 2>/dev/null
  pids=${pids% "$writer"}
  exec 3<&-
  [ -e "$(ckpt "$d" 10)" ] && fail "step 10's checkpoint exists before the rename"
  "$inspect" "$(ckpt "$d" 5)" >/dev/null ||
    fail "the previous checkpoint is no longer valid after the kill"
  [ -e "$d/$temp" ] || fail "the killed writer's temporary file vanished"

  run 60 after "$train" "${args[@]}" --ckpt-dir "$d" --ckpt-every 5
  expect_ok after
  grep -q "removed 1 unfinished checkpoint file" "$tmp/after.err" ||
    die after "the temporary file was not reported removed"
  grep -q "resuming at step 5 of 20" "$tmp/after.err" ||
    die after "did not resume at step 5"
  [ -e "$d/$temp" ] && fail "the temporary file is still there"
  [ "$(crc after)" = "$(crc ref)" ] ||
    fail "weights $(crc after) after the kill differ from $(crc ref)"
  echo "kill during the write of step 10: step 5 kept, final $(crc after)"
  ;;
world)
  read -ra args <<<"$common --optimizer adamw"
  # ddpN: train under ddprun on N ranks.
  for n in 2 3 4; do
    eval "ddp$n=(env OMP_NUM_THREADS=1 \"\$ddprun\" --standalone \
      --nproc-per-node $n --log-level warn \"\$train\")"
  done
  d=$tmp/ckpt
  run 60 ref "${ddp4[@]}" "${args[@]}" --global-batch 32
  expect_ok ref
  grep -q "batch 8 x 4 ranks x 1 accum = 32," "$tmp/ref.out" "$tmp/ref.err" ||
    die ref "the 4 ranks did not take batch 8 each"
  want=$(final_loss ref)
  run 60 killed env DDPRUN_CKPT_TEST_KILL_AT=12:1 "${ddp4[@]}" "${args[@]}" \
    --global-batch 32 --ckpt-dir "$d" --ckpt-every 5
  [ "$rc" -ne 0 ] || die killed "the kill hook did not fire"
  "$inspect" "$(ckpt "$d" 10)" >/dev/null || fail "no checkpoint of step 10"
  cp -r "$d" "$d.solo"
  cp -r "$d" "$d.elastic"
  for where in 2 solo; do
    if [ "$where" = solo ]; then
      run 60 "resumed_$where" env OMP_NUM_THREADS=1 "$train" "${args[@]}" \
        --global-batch 32 --ckpt-dir "$d.solo"
    else
      run 60 "resumed_$where" "${ddp2[@]}" "${args[@]}" --global-batch 32 \
        --ckpt-dir "$d"
    fi
    expect_ok "resumed_$where"
    grep -q "resuming at step 10 of 20" "$tmp/resumed_$where.err" ||
      die "resumed_$where" "did not resume at step 10"
    got=$(final_loss "resumed_$where")
    awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d;
      exit !(a != "" && d <= 1e-4 * b) }' ||
      fail "resumed on $where: final loss $got, uninterrupted $want"
    echo "world: 4 ranks to $where at step 10: final loss $got" \
      "(uninterrupted on 4: $want)"
  done
  # Without --global-batch the 2 ranks' batch 8 is a global batch of 16.
  run 60 nofit "${ddp2[@]}" "${args[@]}" --batch 8 --ckpt-dir "$d.solo"
  [ "$rc" -eq 2 ] || die nofit "a resume at another global batch exited $rc"
  grep -q "global batch (--batch x world x --grad-accum; --global-batch keeps it across world sizes) is 32 there and 16 here" \
    "$tmp/nofit.err" || die nofit "no clear message for another global batch"
  run 60 indivisible "${ddp3[@]}" "${args[@]}" --global-batch 32
  [ "$rc" -eq 2 ] || die indivisible "--global-batch 32 on 3 ranks exited $rc"
  grep -q "global-batch 32 is not a multiple of the world size 3 x --grad-accum 1" \
    "$tmp/indivisible.err" || die indivisible "no clear message"
  grep -q "restart 1 of" "$tmp/indivisible.err" && die indivisible "restarted"
  run 60 both "$train" "${args[@]}" --global-batch 32 --batch 8
  [ "$rc" -eq 2 ] || die both "--batch with --global-batch exited $rc"
  grep -q "give --batch (per rank) or --global-batch (all ranks), not both" \
    "$tmp/both.err" || die both "no clear message"
  # An elastic job (ddprun --nnodes MIN:MAX says so in the environment)
  # keeps the checkpoint's global batch on another world size when it
  # divides: --batch 8 on one process is 32 per step, as on 4 ranks.
  elastic=(env DDPRUN_MIN_NNODES=1 DDPRUN_MAX_NNODES=4 OMP_NUM_THREADS=1)
  run 60 elastic "${elastic[@]}" "$train" "${args[@]}" --batch 8 \
    --ckpt-dir "$d.elastic"
  expect_ok elastic
  grep -q "the elastic job (--nnodes 1:4) runs on 1 rank now: keeping the checkpoint's global batch 32 with --batch 32 per rank (was 8)" \
    "$tmp/elastic.err" || die elastic "did not say that it keeps the global batch"
  grep -q "resuming at step 10 of 20" "$tmp/elastic.err" ||
    die elastic "did not resume at step 10"
  got=$(final_loss elastic)
  awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d;
    exit !(a != "" && d <= 1e-4 * b) }' ||
    fail "elastic resume on one process: final loss $got, uninterrupted $want"
  # ... and refuses in one line, before a step, what cannot be split.
  run 60 elastic_unfit "${elastic[@]}" "$train" "${args[@]}" --batch 8 \
    --grad-accum 3 --ckpt-dir "$d.elastic"
  [ "$rc" -eq 2 ] || die elastic_unfit "an unsplittable global batch exited $rc"
  grep -q "the checkpoint's global batch 32 cannot be split over 1 rank x --grad-accum 3" \
    "$tmp/elastic_unfit.err" || die elastic_unfit "no clear message"
  grep -q "^step " "$tmp/elastic_unfit.out" && die elastic_unfit "trained a step"
  # A fresh elastic start names the sizes its global batch cannot reach.
  run 60 elastic_warn "${elastic[@]}" DDPRUN_MAX_NNODES=3 "$train" \
    "${args[@]}" --batch 8 --steps 1
  expect_ok elastic_warn
  grep -q "warning: the global batch 8 (--batch 8 x 1 rank x --grad-accum 1) cannot be split over 3 nodes of 1 rank, which --nnodes 1:3 allows: a generation there would stop (exit 2); give --global-batch with a multiple of 6" \
    "$tmp/elastic_warn.err" || die elastic_warn "no warning naming 3 nodes"
  run 60 elastic_warn_g "${elastic[@]}" DDPRUN_MAX_NNODES=5 "$train" \
    "${args[@]}" --global-batch 12 --steps 1
  expect_ok elastic_warn_g
  grep -q "warning: the global batch 12 (--global-batch) cannot be split over 5 nodes of 1 rank, which --nnodes 1:5 allows: .* with a multiple of 60" \
    "$tmp/elastic_warn_g.err" || die elastic_warn_g "no warning naming 5 nodes"
  echo "world: another global batch, an indivisible one and both flags refused;" \
    "an elastic resume kept the global batch (final loss $got)"
  ;;
entries)
  # shellcheck disable=SC2206
  args=($common --batch 32 --optimizer adamw)
  d=$tmp/ckpt
  run 60 ref "$train" "${args[@]}"
  expect_ok ref
  run 60 first env DDPRUN_CKPT_TEST_KILL_AT=12 "$train" "${args[@]}" \
    --ckpt-dir "$d" --ckpt-every 5
  "$inspect" "$(ckpt "$d" 10)" >/dev/null || fail "no checkpoint of step 10"
  cp -r "$d" "$d.fifo"
  cp -r "$d" "$d.far"
  mkdir "$(ckpt "$d" 15)" || fail "mkdir failed"
  mkfifo "$(ckpt "$d.fifo" 15)" || fail "mkfifo failed"
  cp "$(ckpt "$d.far" 5)" "$d.far/ckpt-9999999999.bin"
  for v in dir fifo far; do
    dd=$d
    [ "$v" = dir ] || dd=$d.$v
    # A FIFO opened for reading without a writer would hold train here
    # until the bound.
    run 30 "$v" "$train" "${args[@]}" --ckpt-dir "$dd" --ckpt-every 5
    expect_ok "$v"
    grep -q "resuming at step 10 of 20" "$tmp/$v.err" ||
      die "$v" "$v: did not resume at step 10"
    [ "$(crc "$v")" = "$(crc ref)" ] ||
      fail "$v: weights $(crc "$v") differ from $(crc ref)"
    "$inspect" "$(ckpt "$dd" 20)" >/dev/null ||
      fail "$v: no checkpoint of step 20"
  done
  [ "$(grep -c "skipping the checkpoint $(ckpt "$d" 15): .* is a directory, not a checkpoint file\$" "$tmp/dir.err")" -eq 1 ] ||
    die dir "the directory was not reported once"
  grep -q "not writing the checkpoint of step 15: $(ckpt "$d" 15) is a directory.*training goes on" \
    "$tmp/dir.err" || die dir "the unwritten checkpoint of step 15 was not reported"
  [ -d "$(ckpt "$d" 15)" ] || fail "the directory was removed"
  [ "$(grep -c "skipping the checkpoint $(ckpt "$d.fifo" 15): .* is not a regular file" "$tmp/fifo.err")" -eq 1 ] ||
    die fifo "the FIFO was not reported once"
  [ -p "$(ckpt "$d.fifo" 15)" ] || fail "the FIFO was replaced"
  grep -q "skipping the checkpoint $d.far/ckpt-9999999999.bin: it holds the checkpoint of step 5, not of step 9999999999" \
    "$tmp/far.err" || die far "the misnamed copy of step 5 was not reported"
  echo "entries: a directory and a FIFO named for step 15, and step 5's" \
    "file named for step 9999999999, passed over; resumed at 10: $(crc ref)"
  ;;
extend)
  # shellcheck disable=SC2206
  args=($common --batch 32 --optimizer adamw --ckpt-every 5)
  d=$tmp/ckpt
  run 60 base "$train" "${args[@]}" --ckpt-dir "$d"
  expect_ok base
  "$inspect" "$(ckpt "$d" 20)" >/dev/null || fail "no checkpoint of step 20"
  # The learning rate that the progress line of step N/30 prints.
  lr_at() { sed -n "s/^step $2\/30 loss [0-9.]* lr \([0-9.e-]*\) .*/\1/p" "$tmp/$1.out"; }
  cp -r "$d" "$d.refused"
  run 30 refused "$train" "${args[@]}" --steps 30 --ckpt-dir "$d.refused"
  [ "$rc" -eq 2 ] || die refused "an extension without a flag exited $rc"
  grep -q -- "--steps (the learning-rate schedule's length) is 20 there and 30 here; .*give --extend-schedule stretch or hold to extend the run" \
    "$tmp/refused.err" || die refused "no message naming --extend-schedule"
  for m in hold stretch allow; do
    flag=(--extend-schedule "$m")
    [ "$m" = allow ] && flag=(--allow-schedule-change)
    cp -r "$d" "$d.$m"
    cp -r "$d" "$d.$m.killed"
    run 60 "$m" "$train" "${args[@]}" --steps 30 --ckpt-dir "$d.$m" \
      "${flag[@]}"
    expect_ok "$m"
    grep -q "resuming at step 20 of 30" "$tmp/$m.err" ||
      die "$m" "$m: did not resume at step 20 of 30"
    "$inspect" "$(ckpt "$d.$m" 30)" >"$tmp/$m.inspect" ||
      fail "$m: no checkpoint of step 30"
    run 60 "$m.killed" env DDPRUN_CKPT_TEST_KILL_AT=27 "$train" "${args[@]}" \
      --steps 30 --ckpt-dir "$d.$m.killed" "${flag[@]}"
    grep -q "killing this worker after step 27" "$tmp/$m.killed.err" ||
      die "$m.killed" "$m: not killed after step 27"
    run 60 "$m.resumed" "$train" "${args[@]}" --steps 30 \
      --ckpt-dir "$d.$m.killed" "${flag[@]}"
    expect_ok "$m.resumed"
    grep -q "resuming at step 25 of 30" "$tmp/$m.resumed.err" ||
      die "$m.resumed" "$m: did not resume at step 25"
    [ "$(crc "$m.resumed")" = "$(crc "$m")" ] ||
      fail "$m: resumed at 25: weights $(crc "$m.resumed") differ from the" \
        "extended run's $(crc "$m")"
  done
  # hold: the 20-step schedule, then its final rate; the checkpoints keep
  # the 20-step schedule, so the resume at 25 holds again.
  [ "$(grep -c "extending the run of the checkpoint $(ckpt "$d.hold" 20) from 20 to 30 steps (--extend-schedule hold): the schedule of 20 steps goes on unchanged, and the learning rate stays at its final 0.001 from step 21 to 30$" "$tmp/hold.err")" -eq 1 ] ||
    die hold "hold: not one line saying its effect"
  grep -q " total_steps=20 " "$tmp/hold.inspect" ||
    fail "hold: the checkpoint does not keep the 20-step schedule: $(cat "$tmp/hold.inspect")"
  grep -q "from step 26 to 30" "$tmp/hold.resumed.err" ||
    die hold.resumed "hold: the resume at 25 did not hold the rate"
  for s in 21 25 30; do
    [ "$(lr_at hold $s)" = 0.001 ] || die hold "hold: step $s at lr $(lr_at hold $s), not 0.001"
  done
  # stretch: the decay over 30 steps; the checkpoints record 30.
  grep -q "extending the run of the checkpoint $(ckpt "$d.stretch" 20) from 20 to 30 steps (--extend-schedule stretch): the warmup and cosine decay now span 30 steps: step 21 runs at lr 0.00378 (0.001 in the schedule of 20 steps)$" \
    "$tmp/stretch.err" || die stretch "stretch: no line saying its effect"
  grep -q " total_steps=30 " "$tmp/stretch.inspect" ||
    fail "stretch: the checkpoint does not record 30 steps: $(cat "$tmp/stretch.inspect")"
  [ "$(lr_at stretch 21)" = 0.00378 ] && [ "$(lr_at stretch 30)" = 0.001 ] ||
    die stretch "stretch: steps 21 and 30 at lr $(lr_at stretch 21) and $(lr_at stretch 30)"
  grep -q "extending" "$tmp/stretch.resumed.err" &&
    die stretch.resumed "stretch: the resume at 25 extended again"
  # --allow-schedule-change alone: stretch, said in its line.
  grep -q -- "has another schedule: --steps (the learning-rate schedule's length) is 20 there and 30 here; going on with this run's from step 21 (--allow-schedule-change, --extend-schedule stretch); the warmup and cosine decay now span 30 steps" \
    "$tmp/allow.err" || die allow "allow: the stretch was not said"
  [ "$(crc allow)" = "$(crc stretch)" ] ||
    fail "allow ($(crc allow)) and stretch ($(crc stretch)) differ"
  [ "$(crc hold)" != "$(crc stretch)" ] || fail "hold and stretch gave the same weights"
  # Not an extension: refused whatever --extend-schedule says.
  rm "$(ckpt "$d.refused" 20)"
  run 30 shorter "$train" "${args[@]}" --steps 18 --ckpt-dir "$d.refused" \
    --extend-schedule hold
  [ "$rc" -eq 2 ] || die shorter "a shorter --steps exited $rc"
  grep -q -- "does not fit this run: --steps (the learning-rate schedule's length) is 20 there and 18 here; resume with" \
    "$tmp/shorter.err" || die shorter "no clear message for a shorter --steps"
  echo "extend: 20 -> 30 steps: hold $(crc hold), stretch $(crc stretch)," \
    "each resumed at 25 to the same weights; unflagged and shorter refused"
  ;;
inflight)
  # shellcheck disable=SC2206
  args=($common --batch 32 --optimizer adamw)
  d=$tmp/ckpt
  run 60 ref "$train" "${args[@]}"
  expect_ok ref
  start 60 held env OMP_NUM_THREADS=1 DDPRUN_CKPT_TEST_DELAY_MS=60000@10 \
    "$train" "${args[@]}" --ckpt-dir "$d" --ckpt-every 5
  job=$bg
  wait_for 30 "$tmp/held.err" "test hook: $(ckpt "$d" 10)\.tmp\..* is written; waiting" ||
    die held "the writer never reached step 10's rename"
  wait_for 30 "$tmp/held.out" "^step 14/20 " ||
    die held "the steps did not go on while step 10's checkpoint was written"
  grep -q "^checkpoint step 5 " "$tmp/held.out" ||
    die held "the checkpoint of step 5 was not reported written"
  temp=
  for t in "$(ckpt "$d" 10)".tmp.*; do
    [ -e "$t" ] && temp=${t##*/}
  done
  [ -n "$temp" ] || fail "no temporary file while the write is in flight"
  kill -KILL "$(pgrep -P "$job")" || fail "cannot kill the held run"
  finish "$job" 2>/dev/null
  [ -e "$(ckpt "$d" 10)" ] && fail "step 10's checkpoint exists, not renamed"
  "$inspect" "$(ckpt "$d" 5)" >/dev/null ||
    fail "the checkpoint of step 5 is not valid after the kill"
  run 60 after "$train" "${args[@]}" --ckpt-dir "$d" --ckpt-every 5
  expect_ok after
  grep -q "removed 1 unfinished checkpoint file" "$tmp/after.err" ||
    die after "the temporary file was not reported removed"
  grep -q "resuming at step 5 of 20" "$tmp/after.err" ||
    die after "did not resume at step 5"
  [ "$(crc after)" = "$(crc ref)" ] ||
    fail "weights $(crc after) after the kill differ from $(crc ref)"
  echo "inflight: killed at step 14 with step 10's write held; resumed at" \
    "step 5 to $(crc after)"

  # 2 ranks: the workers started while $tmp/hold holds a value hold the
  # write; the restarted ones do not.
  # shellcheck disable=SC2206
  args=($common --batch 16 --optimizer adamw)
  d=$tmp/ckpt2
  hold=(/bin/sh -c 'if [ -s "$0" ]; then
    DDPRUN_CKPT_TEST_DELAY_MS=$(cat "$0"); export DDPRUN_CKPT_TEST_DELAY_MS; fi
    exec "$@"' "$tmp/hold")
  run 60 ref2 env OMP_NUM_THREADS=1 "$ddprun" --standalone --nproc-per-node 2 \
    "$train" "${args[@]}"
  expect_ok ref2
  echo 60000@10 >"$tmp/hold"
  start 90 job env OMP_NUM_THREADS=1 "$ddprun" --standalone \
    --nproc-per-node 2 --max-restarts 1 "${hold[@]}" "$train" "${args[@]}" \
    --ckpt-dir "$d" --ckpt-every 5
  job=$bg
  wait_for 30 "$tmp/job.err" "rank 0: test hook: $(ckpt "$d" 10)\.tmp\..* is written; waiting" ||
    die job "rank 0's writer never reached step 10's rename"
  wait_for 30 "$tmp/job.out" "^\[rank0\]:step 14/20 " ||
    die job "the steps did not go on while step 10's checkpoint was written"
  rm -f "$tmp/hold"
  pid0=$(sed -n 's/^ddprun: \[rank0\] .*, pid \([0-9]*\),.*/\1/p' \
         "$tmp/job.err" | head -n 1)
  [ -n "$pid0" ] || die job "ddprun did not print rank 0's pid"
  kill -KILL "$pid0" || fail "cannot kill rank 0"
  finish "$job"
  expect_ok job
  cat "$tmp/job.out" "$tmp/job.err" >"$tmp/job.all"
  grep -q "resuming at step 5 of 20" "$tmp/job.all" ||
    die job "the restarted group did not resume at step 5"
  [ "$(crc job)" = "$(crc ref2)" ] ||
    fail "2 ranks: weights $(crc job) after the kill differ from $(crc ref2)"
  echo "inflight: rank 0 of 2 killed with step 10's write held; the group" \
    "restart resumed at step 5 to $(crc job)"
  ;;
env)
  # shellcheck disable=SC2206
  args=($common --batch 32 --optimizer adamw)
  d=$tmp/node-local
  run 60 ref "$train" "${args[@]}"
  expect_ok ref
  run 60 first env OMP_NUM_THREADS=1 DDPRUN_CKPT_DIR="$d" \
    DDPRUN_CKPT_TEST_KILL_AT=12 "$train" "${args[@]}" --ckpt-every 5
  grep -q "killing this worker after step 12" "$tmp/first.err" ||
    die first "not killed after step 12"
  "$inspect" "$(ckpt "$d" 10)" >/dev/null ||
    fail "no checkpoint of step 10 in DDPRUN_CKPT_DIR"
  run 60 again env OMP_NUM_THREADS=1 DDPRUN_CKPT_DIR="$d" "$train" \
    "${args[@]}" --ckpt-every 5
  expect_ok again
  grep -q "resuming at step 10 of 20 .* from $d/" "$tmp/again.err" ||
    die again "did not resume at step 10 from DDPRUN_CKPT_DIR"
  [ "$(crc again)" = "$(crc ref)" ] ||
    fail "resumed from DDPRUN_CKPT_DIR: weights $(crc again), uninterrupted $(crc ref)"
  # Under ddprun, the workers given the variable (as ddprun --ckpt-dir
  # gives it to them).
  d=$tmp/job-local
  # shellcheck disable=SC2206
  args2=($common --batch 16 --optimizer adamw)
  run 60 job env OMP_NUM_THREADS=1 "$ddprun" --standalone --nproc-per-node 2 \
    env DDPRUN_CKPT_DIR="$d" "$train" "${args2[@]}" --ckpt-every 5
  expect_ok job
  for s in 10 15 20; do
    "$inspect" "$(ckpt "$d" $s)" >/dev/null ||
      fail "2 ranks: no checkpoint of step $s in DDPRUN_CKPT_DIR"
  done
  # --ckpt-dir wins; an empty variable is none.
  run 60 flag env DDPRUN_CKPT_DIR="$tmp/not-this" "$train" "${args[@]}" \
    --ckpt-dir "$tmp/this" --ckpt-every 5
  expect_ok flag
  "$inspect" "$(ckpt "$tmp/this" 20)" >/dev/null ||
    fail "no checkpoint in the --ckpt-dir given"
  [ -e "$tmp/not-this" ] && fail "DDPRUN_CKPT_DIR was used over --ckpt-dir"
  run 30 empty env DDPRUN_CKPT_DIR= "$train" "${args[@]}" --ckpt-every 5
  [ "$rc" -eq 2 ] || die empty "--ckpt-every with an empty DDPRUN_CKPT_DIR exited $rc"
  grep -q -- "--ckpt-every 5 needs --ckpt-dir (or DDPRUN_CKPT_DIR)" \
    "$tmp/empty.err" || die empty "no clear message"
  echo "env: DDPRUN_CKPT_DIR written and resumed from (1 and 2 ranks);" \
    "--ckpt-dir wins; empty is none"
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac
echo "PASS: $name"
