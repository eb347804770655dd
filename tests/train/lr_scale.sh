#!/usr/bin/env bash
# The learning rate against the global batch (--lr-ref-batch, --lr-scale,
# --lr-warmup):
#  - a global batch other than --lr-ref-batch: rank 0 says so in one line,
#    with --lr used as is and the rate --lr-scale linear would use, and the
#    weights are those of a run without --lr-ref-batch; an equal one: no
#    line. Under ddprun the global batch follows the world size: 2 ranks
#    of --batch 32 differ from --lr-ref-batch 32 (said once, by rank 0),
#    2 ranks of --batch 16 do not;
#  - --lr-scale linear: the line gives the scaled rate and the rate of
#    the first step, the progress lines' lr and the final weights differ
#    from --lr-scale none; without a reference it says so and changes
#    nothing;
#  - a run killed after step 20's checkpoint (inside the --lr-warmup ramp)
#    and resumed ends with the weights of the run that never stopped;
#  - bad values: exit 2 with one line.
#
# Usage: lr_scale.sh DDPRUN TRAIN
set -u
name=lr_scale
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: lr_scale.sh DDPRUN TRAIN}
train=${2:?}

small="--layers 1 --width 64 --input-dim 16 --classes 4 --samples 2048
       --eval-samples 256 --steps 30 --log-every 10 --optimizer sgd
       --lr 0.05 --warmup 10 --seed 1234"

# alone TAG ARGS...: train alone, exit 0.
alone() {
  local tag=$1
  shift
  run 60 "$tag" env -i PATH="$PATH" "$train" $small "$@"
  [ "$rc" -eq 0 ] || { show "$tag"; fail "$tag: exited $rc: $*"; }
}
# notices TAG: how many lines of TAG's stderr say that the global batch
# differs, or that linear scaling has no reference.
notices() {
  grep -c "differs from\|--lr-scale linear has no reference" "$tmp/$1.err"
}

run 20 help "$train" --help
for key in lr-ref-batch lr-scale lr-warmup; do
  grep -q -- "^  --$key V" "$tmp/help.out" ||
    { show help; fail "--help does not list --$key"; }
done

alone plain --batch 32
[ "$(notices plain)" -eq 0 ] || { show plain; fail "a line without --lr-ref-batch"; }

alone differs --batch 32 --lr-ref-batch 64
[ "$(notices differs)" -eq 1 ] || { show differs; fail "not one line for 32 against 64"; }
grep -q "^train: rank 0: global batch 32 (--batch 32 x 1 rank x --grad-accum 1) differs from --lr-ref-batch 64; --lr 0.05 is used as is (--lr-scale linear would use 0.025)$" \
  "$tmp/differs.err" || { show differs; fail "the notice line"; }
[ "$(final differs weights_crc32)" = "$(final plain weights_crc32)" ] ||
  fail "--lr-ref-batch with --lr-scale none changed the weights"
echo "differs: $(grep "differs from" "$tmp/differs.err")"

alone equal --batch 32 --lr-ref-batch 32
[ "$(notices equal)" -eq 0 ] || { show equal; fail "a line although 32 equals 32"; }
alone equal_linear --batch 32 --lr-ref-batch 32 --lr-scale linear
[ "$(notices equal_linear)" -eq 0 ] || { show equal_linear; fail "a line for linear at 32 = 32"; }
[ "$(final equal_linear weights_crc32)" = "$(final plain weights_crc32)" ] ||
  fail "linear scaling by 1 changed the weights"

alone linear --batch 32 --lr-ref-batch 16 --lr-scale linear
grep -q "differs from --lr-ref-batch 16; --lr-scale linear uses 0.1 (--lr 0.05 x 32/16); step 1 runs at lr 0.01 " \
  "$tmp/linear.err" || { show linear; fail "the linear line"; }
[ "$(final linear weights_crc32)" != "$(final plain weights_crc32)" ] ||
  fail "--lr-scale linear left the weights as --lr-scale none"
# The schedule's rate doubled: step 10 (the end of --warmup) at 0.1.
grep -q "^step 10/30 .* lr 0.1 " "$tmp/linear.out" ||
  { show linear; fail "step 10 does not run at lr 0.1"; }
grep -q "^step 10/30 .* lr 0.05 " "$tmp/plain.out" ||
  { show plain; fail "step 10 of the plain run does not run at lr 0.05"; }
echo "linear: loss $(final linear loss) against $(final plain loss) unscaled"

alone noref --batch 32 --lr-scale linear
[ "$(notices noref)" -eq 1 ] || { show noref; fail "no line for linear without a reference"; }
[ "$(final noref weights_crc32)" = "$(final plain weights_crc32)" ] ||
  fail "linear without a reference changed the weights"

# Resumed inside the ramp: steps 1-25 ramp from 0.05 to 0.1.
ramp="--batch 32 --lr-ref-batch 16 --lr-scale linear --lr-warmup 25"
alone whole $ramp
# scratch_run, not run: the SIGKILL this run gives itself is its 137.
scratch_run 60 killed env -i PATH="$PATH" DDPRUN_CKPT_TEST_KILL_AT=20 \
  "$train" $small $ramp --ckpt-dir "$tmp/ckpt" --ckpt-every 10
[ "$rc" -eq 137 ] && grep -q "test hook: killing this worker after step 20" \
  "$tmp/killed.err" || { show killed; fail "the run to kill exited $rc"; }
alone resumed $ramp --ckpt-dir "$tmp/ckpt" --ckpt-every 10
grep -q "resuming at step 20 " "$tmp/resumed.err" ||
  { show resumed; fail "did not resume at step 20"; }
grep -q "ramped up from 0.05 over --lr-warmup 25 steps; step 21 runs at lr " \
  "$tmp/resumed.err" || { show resumed; fail "the resumed run's line"; }
[ "$(final resumed weights_crc32)" = "$(final whole weights_crc32)" ] ||
  fail "resumed: weights_crc32=$(final resumed weights_crc32), the uninterrupted run's $(final whole weights_crc32)"
[ "$(final whole weights_crc32)" != "$(final linear weights_crc32)" ] ||
  fail "--lr-warmup 25 changed nothing"
echo "resumed at step 20: weights_crc32=$(final resumed weights_crc32), as the run that never stopped"

# ranks TAG ARGS...: 2 ranks under ddprun, exit 0.
ranks() {
  local tag=$1
  shift
  run 90 "$tag" "$ddprun" --standalone --nproc-per-node 2 --log-level warn \
    "$train" $small "$@"
  [ "$rc" -eq 0 ] || { show "$tag"; fail "$tag: exited $rc: $*"; }
}
ranks ranks_differ --batch 32 --lr-ref-batch 32
[ "$(notices ranks_differ)" -eq 1 ] || { show ranks_differ; fail "not one line on 2 ranks"; }
grep -q "^\[rank0\]:train: rank 0: global batch 64 (--batch 32 x 2 ranks x --grad-accum 1) differs from --lr-ref-batch 32; --lr 0.05 is used as is (--lr-scale linear would use 0.1)$" \
  "$tmp/ranks_differ.err" || { show ranks_differ; fail "the 2-rank notice"; }
ranks ranks_equal --batch 16 --lr-ref-batch 32
[ "$(notices ranks_equal)" -eq 0 ] || { show ranks_equal; fail "a line for 2 x 16 = 32"; }

# refused PATTERN ARGS...: exit 2, one stderr line matching PATTERN.
n=0
refused() {
  local pattern=$1
  shift
  n=$((n + 1))
  run 20 "bad$n" env -i PATH="$PATH" "$train" $small "$@"
  if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/bad$n.err")" -ne 1 ] ||
      ! grep -q -- "$pattern" "$tmp/bad$n.err"; then
    show "bad$n"
    fail "$*: expected exit 2 and one line matching '$pattern'; got $rc"
  fi
  echo "refused: $*: $(cat "$tmp/bad$n.err")"
}
refused "--lr-ref-batch '0'" --lr-ref-batch 0
refused "--lr-ref-batch 'x'" --lr-ref-batch x
refused "--lr-scale 'sqrt': expected none or linear" --lr-scale sqrt
refused "--lr-warmup 5 ramps in the scaling of --lr-scale linear" --lr-warmup 5
echo "PASS: $name"
