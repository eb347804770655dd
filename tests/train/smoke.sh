#!/usr/bin/env bash
# train --smoke, the self-check a new user runs first:
#  - alone (no ddprun variables): 20 steps unless --steps, other flags
#    honoured (--batch), one `smoke:` line per check (steps, checkpoint,
#    evaluation, loss fell), each ending in ok, then `smoke: all 4 checks
#    passed`, exit 0; the checkpoint went to a directory under $TMPDIR
#    that is gone afterwards;
#  - with --ckpt-dir holding a job's checkpoints: it does not resume from
#    them, leaves them as they were, and removes its own directory there;
#  - under ddprun on 2 ranks: exit 0, every smoke line printed once, by
#    rank 0;
#  - a forced failure exits 1 and names the check: a bit of the checkpoint
#    read back flipped (DDPRUN_SMOKE_TEST_BREAK=ckpt), no held-out samples
#    (--eval-samples 0), one step (no later loss to compare with);
#  - --help lists --smoke and the variable.
#
# Usage: smoke.sh DDPRUN TRAIN
set -u
name=smoke
. "$(dirname "$0")/lib.sh"

ddprun=${1:?usage: smoke.sh DDPRUN TRAIN}
train=${2:?}

small="--layers 1 --width 64 --input-dim 16 --classes 4 --samples 2048
       --eval-samples 256 --batch 16"
mkdir "$tmp/tmpdir" || fail "mkdir"

# alone TAG ARGS...: train --smoke without ddprun, TMPDIR=$tmp/tmpdir.
alone() {
  local tag=$1
  shift
  run 60 "$tag" env -i PATH="$PATH" TMPDIR="$tmp/tmpdir" "$@"
}
# empty_tmpdir TAG: nothing left under $tmp/tmpdir.
empty_tmpdir() {
  [ -z "$(ls -A "$tmp/tmpdir")" ] ||
    { ls -la "$tmp/tmpdir" >&2; fail "$1: left behind in TMPDIR: $(ls -A "$tmp/tmpdir")"; }
}
# line TAG CHECK: the `smoke: CHECK:` line of TAG's stdout (rank 0's).
line() {
  sed -n "s/^\(\[rank0\]:\)\{0,1\}\(smoke: $2: .*\)$/\2/p" "$tmp/$1.out"
}

run 20 help "$train" --help
[ "$rc" -eq 0 ] || { show help; fail "--help exited $rc"; }
grep -q -- "^  --smoke " "$tmp/help.out" || { show help; fail "--help does not list --smoke"; }
grep -q "^  DDPRUN_SMOKE_TEST_BREAK=ckpt" "$tmp/help.out" ||
  { show help; fail "--help does not list DDPRUN_SMOKE_TEST_BREAK"; }

alone pass "$train" --smoke $small
[ "$rc" -eq 0 ] || { show pass; fail "--smoke exited $rc"; }
for check in steps checkpoint evaluation "loss fell"; do
  l=$(line pass "$check")
  case $l in
    *": ok") ;;
    *) show pass; fail "no ok line for the check '$check': '$l'" ;;
  esac
done
line pass steps | grep -q "^smoke: steps: 20 steps ran, loss [0-9.]* -> [0-9.]*: ok$" ||
  { show pass; fail "not 20 steps by default: $(line pass steps)"; }
line pass checkpoint | grep -Eq "written to $tmp/tmpdir/train-smoke\.[A-Za-z0-9]{6}/ckpt-0000000020\.bin and read back: .* bit-identical \([0-9]+ bytes, CRC-32 0x[0-9a-f]{8}\): ok$" ||
  { show pass; fail "the checkpoint line: $(line pass checkpoint)"; }
[ "$(tail -n 1 "$tmp/pass.out")" = "smoke: all 4 checks passed" ] ||
  { show pass; fail "the last line is not the verdict: $(tail -n 1 "$tmp/pass.out")"; }
grep -q "batch 16 x 1 ranks" "$tmp/pass.err" || { show pass; fail "--batch 16 not honoured"; }
[ "$(final pass steps)" = 20 ] || { show pass; fail "the final line's steps is not 20"; }
empty_tmpdir pass
echo "alone: $(tail -n 1 "$tmp/pass.out")"

# A short run needs a rate that shows within it.
alone steps "$train" --smoke $small --steps 7 --lr 0.03 --warmup 2
[ "$rc" -eq 0 ] || { show steps; fail "--smoke --steps 7 exited $rc"; }
line steps steps | grep -q "^smoke: steps: 7 steps ran" ||
  { show steps; fail "--steps 7 not honoured: $(line steps steps)"; }

# A job's directory: two checkpoints of its own, which --smoke must
# neither resume from nor touch.
run 60 job env -i PATH="$PATH" "$train" $small --steps 4 --ckpt-every 2 \
  --ckpt-dir "$tmp/job"
[ "$rc" -eq 0 ] || { show job; fail "the job exited $rc"; }
before=$(cd "$tmp/job" && ls -A && cksum ./*)
alone given "$train" --smoke $small --ckpt-dir "$tmp/job"
[ "$rc" -eq 0 ] || { show given; fail "--smoke --ckpt-dir exited $rc"; }
grep -q "resuming" "$tmp/given.err" && { show given; fail "--smoke resumed from the job's checkpoint"; }
line given checkpoint | grep -q "written to $tmp/job/train-smoke\." ||
  { show given; fail "not written under --ckpt-dir: $(line given checkpoint)"; }
after=$(cd "$tmp/job" && ls -A && cksum ./*)
[ "$before" = "$after" ] ||
  fail "the job's directory changed: before: $before; after: $after"
empty_tmpdir given

run 90 ranks env TMPDIR="$tmp/tmpdir" "$ddprun" --standalone \
  --nproc-per-node 2 --log-level warn "$train" --smoke $small
[ "$rc" -eq 0 ] || { show ranks; fail "--smoke on 2 ranks exited $rc"; }
[ "$(grep -c "smoke: " "$tmp/ranks.out")" -eq 5 ] ||
  { show ranks; fail "not 5 smoke lines on 2 ranks"; }
[ "$(grep -c "^\[rank0\]:smoke: " "$tmp/ranks.out")" -eq 5 ] ||
  { show ranks; fail "smoke lines from a rank other than 0"; }
grep -q "smoke: all 4 checks passed" "$tmp/ranks.out" ||
  { show ranks; fail "no verdict on 2 ranks"; }
[ "$(final ranks world)" = 2 ] || { show ranks; fail "not a world of 2"; }
empty_tmpdir ranks
echo "2 ranks: $(grep "smoke: all" "$tmp/ranks.out")"

# broken TAG CHECK ARGS...: exit 1, CHECK's line FAILED, named in the
# verdict.
broken() {
  local tag=$1 check=$2
  shift 2
  alone "$tag" "$@"
  [ "$rc" -eq 1 ] || { show "$tag"; fail "$tag: exited $rc, not 1"; }
  line "$tag" "$check" | grep -q ": FAILED$" ||
    { show "$tag"; fail "$tag: the $check line is not FAILED: $(line "$tag" "$check")"; }
  tail -n 1 "$tmp/$tag.out" | grep -q "^smoke: FAILED: .*$check" ||
    { show "$tag"; fail "$tag: the verdict does not name $check"; }
  empty_tmpdir "$tag"
  echo "$tag: $(tail -n 1 "$tmp/$tag.out")"
}
broken flipped checkpoint env DDPRUN_SMOKE_TEST_BREAK=ckpt "$train" --smoke $small
line flipped checkpoint | grep -q "parameter 0 differs at element 0" ||
  { show flipped; fail "the flipped bit is not named"; }
for check in steps evaluation "loss fell"; do
  line flipped "$check" | grep -q ": ok$" ||
    { show flipped; fail "flipped: $check is not ok"; }
done
broken no_eval evaluation "$train" --smoke $small --eval-samples 0
broken one_step "loss fell" "$train" --smoke $small --steps 1
echo "PASS: $name"
