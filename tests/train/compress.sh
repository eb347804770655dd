#!/usr/bin/env bash
# Gradient compression and the loss scale end to end, 2 ranks under ddprun
# (train itself checks that the ranks' final weights are bit-identical,
# and exits 1 when they are not).
#
#   accuracy  the synthetic teacher job, 300 steps: fp16 and bf16 end
#             within 1% of the uncompressed eval loss, PowerSGD at its
#             default rank within 3%, and PowerSGD without error feedback
#             more than 10% worse than with it; each setting's summary
#             line names it; a bad --grad-compress or --loss-scale is one
#             line and exit 2.
#   overflow  DDPRUN_OVERFLOW_TEST=1@5 with fp16 and a dynamic scale:
#             every rank skips step 5, halves its scale to 32768, and names
#             rank 1; DDPRUN_OVERFLOW_TEST_SUM=7: each rank's gradient is
#             finite in fp16 but their fp16 sum is not: caught in the sum,
#             the same way; overflows every step from a scale of 4 stop the
#             run at the floor with exit 5, naming the step.
#   resume    none, fp16, bf16 and PowerSGD (from step 3), each with a
#             dynamic scale and an overflow at step 7: a run killed after step 12
#             resumes from step 10 to the weights, scale and skipped steps
#             of the run that never stopped; a resume with another
#             --grad-compress is refused naming both, and goes on with
#             --allow-schedule-change.
#
# Usage: compress.sh MODE DDPRUN TRAIN
set -u
mode=${1:?usage: compress.sh accuracy|overflow|resume DDPRUN TRAIN}
ddprun=${2:?} train=${3:?}
name=compress_$mode
. "$(dirname "$0")/lib.sh"

job() { # TAG ARGS...: a 2-rank job of train
  local tag=$1
  shift
  run 60 "$tag" "$ddprun" --standalone --nproc-per-node 2 --log-level warn \
    "$train" --log-every 1000 "$@"
}
killed_job() { # TAG ARGS...: as job, for a run that a rank's SIGKILL
  # ends (ddprun exits 137, which run takes for a timeout)
  local tag=$1
  shift
  scratch_run 60 "$tag" "$ddprun" --standalone --nproc-per-node 2 \
    --log-level warn "$train" --log-every 1000 "$@"
  grep -q "killing this worker after step 12" "$tmp/$tag.err" ||
    { show "$tag"; fail "$tag: not killed after step 12 (exit $rc)"; }
}
ok() { # TAG: exit 0 and a final line
  [ "$rc" -eq 0 ] || { show "$1"; fail "$1 exited $rc"; }
  [ -n "$(final "$1" weights_crc32)" ] || { show "$1"; fail "$1: no final line"; }
}
# within A B PCT: |A - B| <= PCT% of B
within() {
  awk -v a="$1" -v b="$2" -v p="$3" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= b * p / 100) }'
}

case $mode in
accuracy)
  base="--steps 300"
  job none $base
  ok none
  ref=$(final none eval_loss)
  for c in fp16 bf16 powersgd; do
    job "$c" $base --grad-compress "$c"
    ok "$c"
    got=$(final "$c" eval_loss)
    tol=1
    [ "$c" = powersgd ] && tol=3
    within "$got" "$ref" "$tol" ||
      fail "$c: eval loss $got, more than $tol% from the uncompressed $ref"
    [ "$(final "$c" grad_compress)" = "$c${c#fp16}" ] ||
      [ "$(final "$c" grad_compress)" = "$c:4" ] ||
      [ "$(final "$c" grad_compress)" = "$c" ] ||
      fail "$c: the final line says grad_compress=$(final "$c" grad_compress)"
    grep -q "rank 1: .*compression $c" "$tmp/$c.err" ||
      { show "$c"; fail "$c: rank 1's summary does not name the compression"; }
    echo "$c: eval loss $got, uncompressed $ref (within $tol%)"
  done
  job noef $base --grad-compress powersgd --powersgd-no-error-feedback
  ok noef
  noef=$(final noef eval_loss) ef=$(final powersgd eval_loss)
  awk -v a="$noef" -v b="$ef" 'BEGIN { exit !(a > b * 1.1) }' ||
    fail "PowerSGD without error feedback: eval loss $noef, not worse" \
      "than $ef with it"
  echo "PowerSGD without error feedback: eval loss $noef (with: $ef)"
  for bad in "--grad-compress fp8" "--grad-compress powersgd:0" \
             "--loss-scale 0.5" "--loss-scale dyn"; do
    # shellcheck disable=SC2086
    run 10 bad "$train" $bad
    [ "$rc" -eq 2 ] || fail "train $bad exited $rc, not 2"
    [ "$(wc -l <"$tmp/bad.err")" -eq 1 ] && grep -q "^train: ${bad%% *} '" \
      "$tmp/bad.err" || { show bad; fail "train $bad: not one clear line"; }
  done
  ;;
overflow)
  common="--steps 20 --grad-compress fp16 --loss-scale dynamic"
  DDPRUN_OVERFLOW_TEST=1@5 job one $common
  ok one
  for k in 0 1; do
    grep -q "rank $k: loss_scale=32768 skipped=1 overflow_rank=1$" \
      "$tmp/one.err" || { show one; fail "rank $k: not one skip at 32768"; }
  done
  grep -q "overflow at step 5 in rank 1's gradient: step skipped, loss scale 65536 -> 32768" \
    "$tmp/one.out" || { show one; fail "no overflow line for step 5"; }
  [ "$(grep -c "overflow at step" "$tmp/one.out")" -eq 1 ] ||
    fail "more than one step skipped"
  echo "an infinity in rank 1's gradient at step 5: skipped on both ranks"

  DDPRUN_OVERFLOW_TEST_SUM=7 job sum $common
  ok sum
  for k in 0 1; do
    grep -q "rank $k: loss_scale=32768 skipped=1 overflow_rank=sum$" \
      "$tmp/sum.err" || { show sum; fail "rank $k: the sum's overflow missed"; }
  done
  grep -q "overflow at step 7 in the reduced sum" "$tmp/sum.out" ||
    { show sum; fail "no overflow line for step 7"; }
  # The same gradient without fp16 communication does not overflow.
  DDPRUN_OVERFLOW_TEST_SUM=7 job sum32 --steps 20 --loss-scale dynamic
  ok sum32
  [ "$(final sum32 skipped)" = 0 ] || fail "an fp32 sum overflowed"
  echo "an overflow only in the fp16 sum at step 7: caught"

  DDPRUN_OVERFLOW_TEST=0@3:100 job floor --steps 20 --loss-scale dynamic:4
  [ "$rc" -eq 5 ] || { show floor; fail "at the floor: exit $rc, not 5"; }
  grep -q "overflowed at step 5 (rank 0's gradient) with the loss scale at its floor of 1" \
    "$tmp/floor.err" || { show floor; fail "no floor message"; }
  echo "overflows from step 3 at a scale of 4: stopped at the floor (exit 5)"
  ;;
resume)
  common="--layers 2 --width 64 --input-dim 32 --classes 8 --samples 1024
          --eval-samples 128 --steps 20 --warmup 5 --lr 0.01 --seed 5
          --log-every 1 --loss-scale dynamic --powersgd-start-step 3"
  for c in none fp16 bf16 powersgd; do
    d=$tmp/$c.ckpt
    # shellcheck disable=SC2086
    DDPRUN_OVERFLOW_TEST=1@7 job "$c.ref" $common --grad-compress $c
    ok "$c.ref"
    # shellcheck disable=SC2086
    DDPRUN_OVERFLOW_TEST=1@7 DDPRUN_CKPT_TEST_KILL_AT=12:1 killed_job \
      "$c.killed" $common --grad-compress $c --ckpt-dir "$d" --ckpt-every 5
    # shellcheck disable=SC2086
    DDPRUN_OVERFLOW_TEST=1@7 job "$c.resumed" $common --grad-compress $c \
      --ckpt-dir "$d" --ckpt-every 5
    ok "$c.resumed"
    grep -q "resuming at step 10 of 20" "$tmp/$c.resumed.err" ||
      { show "$c.resumed"; fail "$c: no resume at step 10"; }
    for k in weights_crc32 loss_scale skipped; do
      [ "$(final "$c.resumed" $k)" = "$(final "$c.ref" $k)" ] ||
        fail "$c: resumed $k=$(final "$c.resumed" $k), uninterrupted" \
          "$(final "$c.ref" $k)"
    done
    [ "$(final "$c.ref" skipped)" = 1 ] || fail "$c: the overflow at 7 missed"
    echo "$c: resumed at step 10 to $(final "$c.ref" weights_crc32)," \
      "scale $(final "$c.ref" loss_scale), 1 skipped"
  done
  # shellcheck disable=SC2086
  job other $common --grad-compress bf16 --ckpt-dir "$tmp/powersgd.ckpt"
  [ "$rc" -eq 2 ] || { show other; fail "another --grad-compress: exit $rc"; }
  grep -q "grad-compress is powersgd:4 (from step 4) there and bf16 here" \
    "$tmp/other.err" || { show other; fail "the refusal does not name it"; }
  # shellcheck disable=SC2086
  job allowed $common --grad-compress bf16 --ckpt-dir "$tmp/powersgd.ckpt" \
    --allow-schedule-change
  ok allowed
  grep -q "its compression state dropped" "$tmp/allowed.err" ||
    { show allowed; fail "--allow-schedule-change: not said"; }
  echo "another --grad-compress: refused, then taken with" \
    "--allow-schedule-change"
  ;;
*)
  fail "unknown mode $mode"
  ;;
esac
no_leftovers
echo "PASS: $name"
